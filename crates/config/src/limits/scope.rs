//! Where a limit is decided: `scope` (local or global: Redis), what a global one does when
//! Redis cannot decide (`on_error`), how it syncs (`sync`, `lease_max`), and the bounds a
//! Redis script holds exactly.

use super::sync::lease;
use super::{script_exact, Draft, Env};
use crate::model::*;
use crate::reader::{as_str, Cx, Tbl};
use crate::scalars::on_error;
use tollgate_limit::AlgorithmKind;

/// `scope`, the script bounds of a global limit, `on_error`, `sync` and `lease_max`.
pub(super) fn read(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft, env: &Env) {
    let algorithm = d.algorithm;
    let rate = d.rate;
    let burst = d.burst;
    let plan_mode = d.plan_mode;
    let (redis, redis_present) = (env.redis, env.redis_present);
    let scope = match l.get("scope") {
        Some(sv) => {
            let p = l.key_path("scope");
            match as_str(cx, &p, sv) {
                Some("local") => Some(Scope::Local),
                Some("global") if redis_present => Some(Scope::Global),
                Some("global") => {
                    cx.err(
                        &p,
                        sv.span(),
                        "scope \"global\" keeps state in Redis: add a [redis] section (url or cluster)",
                    );
                    None
                }
                Some(other) => {
                    cx.err(
                        &p,
                        sv.span(),
                        format!("unknown scope \"{other}\" (local or global)"),
                    );
                    None
                }
                None => None,
            }
        }
        None => Some(Scope::Local),
    };
    // A global limit's script computes in doubles: its counts and its horizon in the
    // script's unit must be exact there (crates/limit script.rs).
    if let (Some(Scope::Global), Some(a), Some(r), Some(b)) = (scope, algorithm, rate, burst) {
        let count_key = if l.get("quota").is_some() {
            "quota"
        } else {
            "rate"
        };
        script_exact(cx, l, count_key, a, r, b, "too large for a global limit");
    }
    // The Redis sliding window compares burst x window (in microseconds) in Lua doubles:
    // exact only below 2^53.
    if let (Some(Scope::Global), Some(AlgorithmKind::SlidingWindow), Some(r), Some(b)) =
        (scope, algorithm, rate, burst)
    {
        let window_us = (r.period_ns() as u128 / 1_000) * b as u128 / r.count() as u128;
        if b as u128 * window_us >= 1u128 << 53 {
            let which = if l.get("burst").is_some() {
                "burst"
            } else {
                "rate"
            };
            let span = l.get(which).map(|v| v.span()).unwrap_or(0..0);
            cx.err(
                &l.key_path(which),
                span,
                "too large for a global sliding_window (burst x window must stay below 2^53 microseconds): use a shorter period, a smaller burst, or fixed_window",
            );
        }
    }
    let on_err = match l.get("on_error") {
        Some(v) => {
            let p = l.key_path("on_error");
            if scope == Some(Scope::Local) {
                cx.err(
                    &p,
                    v.span(),
                    "on_error applies only to scope = \"global\" (a local limit never fails)",
                );
                None
            } else {
                on_error(cx, &p, v)
            }
        }
        None => Some(redis.map_or(OnError::Local, |r| r.on_error)),
    };
    let lease_max = lease(cx, l, scope, algorithm, burst, plan_mode.is_some(), redis);
    d.scope = scope;
    d.on_err = on_err;
    d.lease_max = lease_max;
}
