//! `sync = "exact" | "lease"` and `lease_max`: budget leases of a global limit.

use crate::model::RedisSettings;
use crate::model::*;
use crate::reader::{as_int_in, as_str, Cx, Tbl};
use tollgate_limit::AlgorithmKind;

/// `sync` and `lease_max` of a limit: `Some(None)` exact, `Some(Some(max))` leases of at most
/// `max` units, `None` an error (reported).
pub(super) fn lease(
    cx: &mut Cx,
    l: &mut Tbl<'_, '_>,
    scope: Option<Scope>,
    algorithm: Option<AlgorithmKind>,
    burst: Option<u64>,
    plan: bool,
    redis: Option<&RedisSettings>,
) -> Option<Option<u64>> {
    let leased = match l.get("sync") {
        None => false,
        Some(v) => {
            let p = l.key_path("sync");
            match as_str(cx, &p, v)? {
                "exact" => false,
                "lease" => {
                    let why = match (scope, algorithm) {
                        (Some(Scope::Local), _) => Some("sync applies only to scope = \"global\" (a local limit decides in this process already)".to_string()),
                        (_, Some(a)) if !a.caps().leases => Some(format!(
                            "sync = \"lease\" does not apply to {}: it decides each request on its own (use token_bucket, gcra, fixed_window or sliding_window)",
                            a.name()
                        )),
                        _ if plan => Some("sync = \"lease\" does not apply to a plan's limit".to_string()),
                        _ => None,
                    };
                    if let Some(why) = why {
                        cx.err(&p, v.span(), why);
                        return None;
                    }
                    true
                }
                other => {
                    cx.err(
                        &p,
                        v.span(),
                        format!("unknown sync \"{other}\" (exact or lease)"),
                    );
                    return None;
                }
            }
        }
    };
    let max = match l.get("lease_max") {
        Some(v) => {
            let p = l.key_path("lease_max");
            if !leased {
                cx.err(&p, v.span(), "lease_max applies only to sync = \"lease\"");
                return None;
            }
            let n = as_int_in(cx, &p, v, 1, 1_000_000_000)? as u64;
            if burst.is_some_and(|b| n > b) {
                cx.err(
                    &p,
                    v.span(),
                    "at most the limit's burst (a lease takes units the burst holds)",
                );
                return None;
            }
            Some(n)
        }
        // Half the burst, shared by the fleet: the other half is never held by a lease.
        None => burst.map(|b| (b / (2 * redis.map_or(1, |r| r.instances.max(1)) as u64)).max(1)),
    };
    Some(if leased { max } else { None })
}
