//! `[limits.NAME]`: one reader per concern, in the order the checks report, each filling
//! its part of one [`Draft`]; [`Draft::build`] makes the limit when every part is sound.
//!
//! - [`key`]: the key sources;
//! - [`rate`]: the algorithm, rate, burst, concurrency durations, a leaky bucket's delay;
//! - [`plan`]: numbers from the caller's plan;
//! - [`quota`]: quotas on the calendar, and their overage;
//! - [`scope`]: local or global, `on_error`, the script bounds, and [`sync`] (leases);
//! - [`actions`]: what a refusal does (reject, tarpit, challenge), the escalation ladder,
//!   counting failures, and what a limit keeps.

mod actions;
mod key;
mod plan;
mod quota;
mod rate;
mod scope;
mod sync;

pub(crate) use key::key_source;

use crate::model::*;
use crate::model::{LimitConfig, RedisSettings};
use crate::reader::{join, Cx, Tbl};
use crate::scalars::duration;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Calendar, Rate};

/// How long a global concurrency limit's slots outlive a gateway that stopped renewing them.
pub const DEFAULT_SLOT_TTL: Duration = Duration::from_secs(10);
pub(super) const HOUR: Duration = Duration::from_secs(3600);
pub(super) const DAY: Duration = Duration::from_secs(24 * 3600);

/// A duration key of concurrency limits only (`slot_ttl`, `slot_timeout`): from 1 s to `max`
/// (an hour or a day, as the error says), `default` when not given.
pub(super) fn concurrency_duration(
    cx: &mut Cx,
    l: &mut Tbl,
    key: &str,
    concurrency: bool,
    default: Duration,
    max: Duration,
) -> Option<Duration> {
    let Some(v) = l.get(key) else {
        return Some(default);
    };
    let p = l.key_path(key);
    if !concurrency {
        cx.err(
            &p,
            v.span(),
            format!("{key} applies only to algorithm = \"concurrency\""),
        );
        return None;
    }
    duration(cx, &p, v).and_then(|d| {
        if d < Duration::from_secs(1) || d > max {
            let upper = if max == HOUR { "1h" } else { "1d" };
            cx.err(&p, v.span(), format!("must be between 1s and {upper}"));
            return None;
        }
        Some(d)
    })
}

/// How long a request may hold a concurrency slot before its body is in (`slot_timeout`).
pub const DEFAULT_SLOT_TIMEOUT: Duration = Duration::from_secs(300);

/// The sliding log keeps one entry per admitted unit: beyond this, the sliding window is the
/// right tool.
pub(super) const MAX_SLIDING_LOG_BURST: i64 = tollgate_limit::MAX_SLIDING_LOG_BURST as i64;

/// Where a plan limit's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanMode {
    Rate,
    Quota,
}

/// Reports a rate (or quota) and burst a Redis script cannot hold exactly
/// (`tollgate_limit::script::check`), at the count's own key when the count is the trouble,
/// else at `burst` if the table gives one.
pub(crate) fn script_exact(
    cx: &mut Cx,
    t: &mut Tbl,
    count_key: &str,
    algorithm: AlgorithmKind,
    rate: Rate,
    burst: u64,
    what: &str,
) {
    if let Err(why) = tollgate_limit::script::check(algorithm, rate, burst) {
        let key = match t.get("burst") {
            Some(_) if rate.count() <= tollgate_limit::SCRIPT_EXACT_MAX => "burst",
            _ => count_key,
        };
        let span = t.get(key).map(|v| v.span()).unwrap_or(0..0);
        cx.err(&t.key_path(key), span, format!("{what}: {why}"));
    }
}

/// What the readers of a limit see of the rest of the config.
pub(crate) struct Env<'a> {
    pub redis: Option<&'a RedisSettings>,
    /// A `[redis]` table is written (even one with problems).
    pub redis_present: bool,
    pub jwt_present: bool,
    pub plans_present: bool,
}

/// One limit as its readers fill it: `None` where a key had problems (already reported).
#[derive(Default)]
pub(crate) struct Draft {
    path: String,
    key: Option<Vec<KeySource>>,
    algorithm: Option<AlgorithmKind>,
    concurrency: bool,
    rate: Option<Rate>,
    plan_mode: Option<PlanMode>,
    calendar: Option<Calendar>,
    upgrade_url: Option<String>,
    burst: Option<u64>,
    slot_ttl: Option<Duration>,
    slot_timeout: Option<Duration>,
    delay: Option<u64>,
    scope: Option<Scope>,
    on_err: Option<OnError>,
    lease_max: Option<Option<u64>>,
    retry_after_jitter: Option<Duration>,
    shadow: bool,
    max_keys: Option<usize>,
    action: Option<Action>,
    tarpit: Option<Option<TarpitConfig>>,
    challenge_url: Option<Option<String>>,
    block: Option<Vec<tollgate_limit::Rung>>,
    count_failures: Option<Option<Vec<u16>>>,
    overage: Option<Overage>,
}

impl Draft {
    /// The limit, when every part of it is sound.
    fn build(self, name: &str) -> Option<LimitConfig> {
        Some(LimitConfig {
            name: name.to_string(),
            key: self.key?,
            algorithm: self.algorithm?,
            rate: self.rate?,
            burst: self.burst?,
            delay: self.delay?,
            scope: self.scope?,
            on_error: self.on_err?,
            lease_max: self.lease_max?,
            shadow: self.shadow,
            max_keys: self.max_keys?,
            calendar: self.calendar,
            upgrade_url: self.upgrade_url,
            retry_after_jitter: self.retry_after_jitter.unwrap_or_default(),
            overage: self.overage.unwrap_or(Overage::Hard),
            plan: None,
            action: self.action?,
            tarpit: self.tarpit?,
            challenge_url: self.challenge_url?,
            block: self.block?,
            count_failures: self.count_failures?,
            slot_timeout: if self.concurrency {
                self.slot_timeout
            } else {
                None
            },
        })
    }
}

/// Every limit defined, in file order; `None` for one with problems (already reported), so a
/// route naming it is not also told the limit does not exist. A plan limit's mode is noted
/// in `plan_modes` (its variants are made per plan afterwards).
pub(crate) fn read(
    cx: &mut Cx,
    mut t: Tbl,
    env: &Env,
    plan_modes: &mut Vec<(String, PlanMode)>,
) -> Vec<(String, Option<LimitConfig>)> {
    let mut out = Vec::new();
    for (name, v, _) in t.entries() {
        let path = join(&t.path, name);
        let Some(mut l) = Tbl::of(cx, path.clone(), v) else {
            continue;
        };
        let mut d = Draft {
            path,
            ..Draft::default()
        };
        key::read(cx, &mut l, &mut d, env);
        rate::algorithm_and_rate(cx, &mut l, &mut d);
        plan::read(cx, &mut l, &mut d, env);
        quota::quota(cx, &mut l, &mut d);
        rate::burst_and_slots(cx, &mut l, &mut d);
        scope::read(cx, &mut l, &mut d, env);
        actions::read(cx, &mut l, &mut d);
        quota::overage(cx, &mut l, &mut d);
        l.finish(cx);
        let plan_mode = d.plan_mode;
        let valid = d.build(name);
        if let (Some(mode), Some(_)) = (plan_mode, &valid) {
            plan_modes.push((name.to_string(), mode));
        }
        out.push((name.to_string(), valid));
    }
    out
}
