//! A route's limits, decided together.
//!
//! Every listed limit applies and the strictest decides. Limits are taken in order; when one
//! refuses, what the earlier ones took is given back, so a refused request consumes nothing
//! (the contract), and the later ones are only asked what they would say, so Retry-After covers
//! the longest wait. Shadow limits are decided the same way but never refuse.

use crate::identity::{KeyHasher, KeyInput};
use crate::runtime::{Runtime, MAX_LIMITS_PER_ROUTE};
use tollgate_limit::{Decision, Nanos};

/// What the route's limits say about one request.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The refusing limit (index into `Runtime::limits`) and the wait before a retry can pass.
    pub denied: Option<(usize, Nanos)>,
    /// The enforced limit nearest to exhaustion after this request: (limit, remaining, reset).
    pub nearest: Option<(usize, u64, Nanos)>,
    /// Shadow limits that would have refused, as a bit set over the route's limit positions.
    pub shadow_exceeded: u32,
}

pub fn decide(
    rt: &Runtime,
    route: usize,
    hasher: &KeyHasher,
    input: &KeyInput,
    now: Nanos,
) -> Verdict {
    let limits = &rt.routes[route].cfg.limits;
    let mut keys = [None::<u64>; MAX_LIMITS_PER_ROUTE];
    let mut taken = [false; MAX_LIMITS_PER_ROUTE];
    let mut v = Verdict::default();

    for (pos, &li) in limits.iter().enumerate() {
        let l = &rt.limits[li];
        let Some(key) = hasher.key(&l.cfg.key, input, rt.ipv6_prefix) else {
            continue;
        };
        keys[pos] = Some(key);
        match l.limiter.acquire(key, now, 1) {
            Decision::Allow { remaining, reset } => {
                taken[pos] = true;
                if !l.shadow {
                    let nearer = match v.nearest {
                        None => true,
                        Some((_, r, t)) => remaining < r || (remaining == r && reset > t),
                    };
                    if nearer {
                        v.nearest = Some((li, remaining, reset));
                    }
                }
            }
            Decision::Deny { retry_after } => {
                if l.shadow {
                    v.shadow_exceeded |= 1 << pos;
                    continue;
                }
                v.denied = Some((li, retry_after));
                // Give back what earlier limits took for this request.
                for (p, &lj) in limits.iter().enumerate().take(pos) {
                    if let (true, Some(k)) = (taken[p], keys[p]) {
                        rt.limits[lj].limiter.refund(k, now, 1);
                    }
                }
                // The later enforced limits: would they refuse too, and for longer?
                for &lj in &limits[pos + 1..] {
                    let l2 = &rt.limits[lj];
                    if l2.shadow {
                        continue;
                    }
                    let Some(k) = hasher.key(&l2.cfg.key, input, rt.ipv6_prefix) else {
                        continue;
                    };
                    if let Decision::Deny { retry_after: r2 } = l2.limiter.peek(k, now, 1) {
                        if v.denied.is_some_and(|(_, r)| r2 > r) {
                            v.denied = Some((lj, r2));
                        }
                    }
                }
                v.nearest = None;
                v.shadow_exceeded = 0;
                return v;
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use pingora::http::RequestHeader;

    fn rt(toml: &str) -> Runtime {
        let cfg = tollgate_config::parse_str(toml, "t.toml").expect("config");
        Runtime::build(cfg, None, &Metrics::new().expect("metrics")).expect("runtime")
    }

    const CONF: &str = r#"
[[routes]]
name = "r"
path_prefix = "/"
respond = { status = 200 }
limits = ["per_ip", "tight", "watch"]
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 10
[limits.tight]
key = "header:x-api-key"
rate = "1/h"
burst = 2
[limits.watch]
key = "global"
rate = "1/h"
burst = 1
shadow = true
"#;

    #[test]
    fn a_refused_request_consumes_nothing_and_the_strictest_decides() {
        let rt = rt(CONF);
        let h = KeyHasher::new();
        let mut with_key = RequestHeader::build("GET", b"/", None).expect("req");
        with_key.insert_header("x-api-key", "k1").expect("header");
        let plain = RequestHeader::build("GET", b"/", None).expect("req");
        let ip = "192.0.2.1".parse().expect("ip");
        let now = 1_000_000_000_000;
        let keyed = KeyInput {
            req: &with_key,
            client_ip: ip,
            route: 0,
        };
        let v1 = decide(&rt, 0, &h, &keyed, now);
        assert_eq!(v1.denied, None);
        assert_eq!(
            v1.nearest.map(|(l, r, _)| (l, r)),
            Some((1, 1)),
            "tight is nearest"
        );
        let v2 = decide(&rt, 0, &h, &keyed, now);
        assert_eq!(v2.denied, None);
        assert_ne!(v2.shadow_exceeded, 0, "the shadow limit would refuse now");
        // The third keyed request is refused by "tight": per_ip must not pay for it.
        for _ in 0..5 {
            let v = decide(&rt, 0, &h, &keyed, now);
            assert_eq!(v.denied.map(|(l, _)| l), Some(1));
        }
        // per_ip spent 2 of 10: without the API key (tight not counted) 8 remain.
        let anon = KeyInput {
            req: &plain,
            client_ip: ip,
            route: 0,
        };
        let admitted = (0..20)
            .filter(|_| decide(&rt, 0, &h, &anon, now).denied.is_none())
            .count();
        assert_eq!(admitted, 8);
    }
}
