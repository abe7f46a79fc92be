//! `limit-rps`, `limit-rpm`, `limit-burst-multiplier`, `limit-connections` and
//! `limit-whitelist`: per-client limits as ingress-nginx computes them; and Tollgate's own
//! `tollgate.io/limit-scope` (`global`: those limits exact across every replica, through
//! `[redis]`; ingress-nginx's are per replica) and `tollgate.io/limits` (BASE.toml limits
//! attached to every route of the Ingress, by name).
//!
//! nginx's `limit_req rate=R burst=B nodelay` is the leaky bucket with capacity B + 1 (nginx's
//! burst counts the queue beyond the request served), B = R x `limit-burst-multiplier`
//! (default 5). `limit_conn` counts requests being served per client address: a concurrency
//! limit with that cap.

use super::anns::{Anns, Limit, LimitKind, Refusal};
use super::text::{cidrs, comment, Warnings};

/// The rate limits of one Ingress, and who is exempt from them (`limit-whitelist`).
#[derive(Default)]
pub(super) struct LimitsOut {
    pub limits: Vec<Limit>,
    pub allow: Vec<String>,
    /// `tollgate.io/limits`: named limits each route of the Ingress also takes.
    pub attached: Vec<String>,
    /// A `tollgate.io/` limit annotation that cannot be honoured: the routes answer 403
    /// rather than limit less than asked.
    pub refusals: Vec<Refusal>,
}

/// A limit name as `tollgate.io/limits` may give it: what a TOML bare key allows, and `.`.
fn limit_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 200
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `tollgate.io/limit-scope` and `tollgate.io/limits`.
fn own(a: &Anns, s: &mut LimitsOut) -> bool {
    let global = match a.own("limit-scope").map(str::trim) {
        None | Some("local") => false,
        Some("global") => true,
        Some(v) => {
            s.refusals.push(Refusal {
                annotation: "tollgate.io/limit-scope".into(),
                why: format!("\"{v}\" is neither local nor global"),
            });
            false
        }
    };
    if let Some(v) = a.own("limits") {
        for n in v.split(',').map(str::trim) {
            if limit_name(n) {
                if !s.attached.iter().any(|a| a == n) {
                    s.attached.push(n.to_string());
                }
            } else {
                s.refusals.push(Refusal {
                    annotation: "tollgate.io/limits".into(),
                    why: format!(
                        "\"{n}\" is not a limit name (a comma-separated list of BASE.toml limits)"
                    ),
                });
            }
        }
    }
    global
}

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> LimitsOut {
    let mut s = LimitsOut::default();
    let global = own(a, &mut s);
    let ctx = a.ctx();
    let id = a.id();
    let positive = |key: &str, v: &str, w: &mut Warnings| match v.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            w.push(comment(&format!(
                "{ctx}: {key} \"{v}\" is not a positive integer: no limit made"
            )));
            None
        }
    };
    let multiplier = match a.get("limit-burst-multiplier") {
        None => 5,
        Some(m) => match m.trim().parse::<u64>() {
            Ok(n) if n >= 1 => n,
            _ => {
                w.push(comment(&format!(
                    "{ctx}: limit-burst-multiplier \"{m}\" is not a positive integer: 5 used"
                )));
                5
            }
        },
    };
    // ingress-nginx applies limit-connections, then limit-rpm, then limit-rps; every one
    // listed on a route applies, so the order only names them.
    if let Some(v) = a.get("limit-connections") {
        if let Some(max) = positive("limit-connections", v, w) {
            s.limits.push(Limit {
                name: format!("{id}.conn"),
                kind: LimitKind::Concurrency { max },
                global,
            });
        }
    }
    for (key, unit, suffix) in [("limit-rps", "s", "rps"), ("limit-rpm", "m", "rpm")] {
        let Some(v) = a.get(key) else { continue };
        if let Some(n) = positive(key, v, w) {
            s.limits.push(Limit {
                name: format!("{id}.{suffix}"),
                kind: LimitKind::Rate {
                    rate: format!("{n}/{unit}"),
                    burst: n.saturating_mul(multiplier),
                },
                global,
            });
        }
    }
    // limit-allowlist is the new name; ingress-nginx reads it first.
    let new = a.get("limit-allowlist").map(|v| ("limit-allowlist", v));
    let old = a.get("limit-whitelist").map(|v| ("limit-whitelist", v));
    if let Some((key, v)) = new.or(old) {
        let (good, bad) = cidrs(v);
        for b in bad {
            w.push(comment(&format!(
                "{ctx}: {key}: \"{b}\" is not an address or CIDR: left out"
            )));
        }
        s.allow = good;
    }
    s
}
