//! `tollgate simulate`: access logs replayed through a config's routes, keys and limits on a
//! virtual clock, to see what a limit would have done before it refuses anyone.
//!
//! Each logged request is made into a request head ([`crate::tools::dryrun`]), taken through the
//! front stages the live pipeline runs (canonical target, route, rewrite, input checks, access
//! lists), and decided by the limiters themselves ([`crate::limits::policy::decide_local`]) at the
//! time it was logged. A global limit is decided as the fleet decides it: one exact counter of
//! its rate and burst (what Redis keeps for every instance together). Escalation ladders climb
//! as they do live. The whole log is run four times: as configured, and with every limit's
//! rate and burst scaled x0.5, x2 and x4.
//!
//! Not simulated (the log does not hold what they need): authentication (a `consumer` or
//! `jwt:` key counts nothing), body keys, concurrency limits (a slot is held for a request's
//! duration), tarpit holds and leaky-bucket queues (decided, not held), calendar quotas beyond
//! the log's own span. Logs without a client address count every request as one client; a
//! Tollgate log's pseudonymous client is one client per pseudonym.

use crate::limits::identity::{describe_key, KeyHasher, KeyInput};
use crate::limits::policy::decide_local;
use crate::runtime::Runtime;
use crate::tools::dryrun::front;
use pingora::http::RequestHeader;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;
use tollgate_config::model::{Config, Scope};
use tollgate_limit::Rate;
use tollgate_replay::{
    Client, FirstRefusal, KeyCount, LimitReport, Record, Report, Scaled, Series,
};

/// The factors every limit is also tried at.
pub const FACTORS: [f64; 3] = [0.5, 2.0, 4.0];
/// How many refused keys each limit lists.
const TOP: usize = 10;
/// The most time buckets a chart has.
const BUCKETS: u64 = 120;

/// Reads `logs`, replays them under `config` and reports per route and limit.
pub fn run(config: Config, config_name: &str, logs: &[PathBuf]) -> Result<Report, String> {
    let mut records = Vec::new();
    let mut errors = 0u64;
    let mut lines = 0u64;
    for path in logs {
        let mut reader =
            tollgate_replay::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for r in reader.by_ref() {
            match r {
                Ok(rec) => records.push(rec),
                Err(e) => {
                    errors += 1;
                    // The first few, named; the rest counted.
                    if errors <= 5 {
                        eprintln!("{}: {e}", path.display());
                    }
                }
            }
        }
        if let Some(e) = reader.io_error() {
            return Err(format!("{}: {e}", path.display()));
        }
        lines += reader.lines();
    }
    if records.is_empty() {
        return Err(format!(
            "no request in {} ({lines} lines, {errors} not read)",
            logs.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // Several logs (a fleet's) merge into one timeline; a stable sort keeps each log's order.
    records.sort_by_key(|r| r.time);
    let start = records[0].time;
    let end = records[records.len() - 1].time;
    let span_s = (end - start) / 1_000_000_000 + 1;
    let step = span_s.div_ceil(BUCKETS).max(1);
    let base = Pass::run(&config, 1.0, &records, start, step)?;
    let mut report = Report {
        config: config_name.to_string(),
        logs: logs.iter().map(|p| p.display().to_string()).collect(),
        lines,
        errors,
        unrouted: base.unrouted,
        start: start / 1_000_000_000,
        end: end / 1_000_000_000,
        limits: Vec::new(),
    };
    let scaled: Vec<Pass> = FACTORS
        .iter()
        .map(|&f| Pass::run(&config, f, &records, start, step))
        .collect::<Result<_, _>>()?;
    for (i, s) in base.stats.iter().enumerate() {
        let (route, li) = base.order[i];
        let cfg = &config.limits[li];
        let mut top: Vec<KeyCount> = s
            .refused_keys
            .values()
            .map(|(k, n)| KeyCount {
                key: k.clone(),
                refused: *n,
            })
            .collect();
        top.sort_by(|a, b| b.refused.cmp(&a.refused).then_with(|| a.key.cmp(&b.key)));
        top.truncate(TOP);
        report.limits.push(LimitReport {
            limit: cfg.name.clone(),
            route: config.routes[route].name.clone(),
            description: describe(cfg, &config),
            requests: s.requests,
            admitted: s.admitted,
            refused: s.refused,
            keys: s.keys.len() as u64,
            top_refused: top,
            first_refusal: s.first_refusal.clone(),
            scaled: scaled
                .iter()
                .zip(FACTORS)
                .map(|(p, factor)| Scaled {
                    factor,
                    admitted: p.stats[i].admitted,
                    refused: p.stats[i].refused,
                })
                .collect(),
            series: Series {
                start: start / 1_000_000_000,
                step,
                admitted: s.series_admitted.clone(),
                refused: s.series_refused.clone(),
            },
        });
    }
    Ok(report)
}

/// One limit on one route, counted.
#[derive(Default)]
struct Stats {
    requests: u64,
    admitted: u64,
    /// Refused by this limit (for a shadow limit: would have been).
    refused: u64,
    keys: HashSet<u64>,
    /// Refused keys: as a person reads them, and how often.
    refused_keys: HashMap<u64, (String, u64)>,
    first_refusal: Option<FirstRefusal>,
    series_admitted: Vec<u64>,
    series_refused: Vec<u64>,
}

impl Stats {
    /// One request this limit counted, at `(time, bucket, detailed)`: refused by it (its key
    /// shown as a person reads it, the first refusal kept), admitted, or neither (refused by
    /// another limit); per bucket, and its keys, only when `detailed`.
    fn count(
        &mut self,
        key: u64,
        (time, bucket, detailed): (u64, usize, bool),
        (refused, admitted): (bool, bool),
        shown: impl FnOnce() -> String,
    ) {
        self.requests += 1;
        if detailed {
            self.keys.insert(key);
            if self.series_admitted.len() <= bucket {
                self.series_admitted.resize(bucket + 1, 0);
                self.series_refused.resize(bucket + 1, 0);
            }
        }
        if refused {
            self.refused += 1;
            if detailed {
                self.series_refused[bucket] += 1;
                let entry = self.refused_keys.entry(key).or_insert_with(|| (shown(), 0));
                entry.1 += 1;
                if self.first_refusal.is_none() {
                    self.first_refusal = Some(FirstRefusal {
                        time,
                        key: entry.0.clone(),
                    });
                }
            }
        } else if admitted {
            self.admitted += 1;
            if detailed {
                self.series_admitted[bucket] += 1;
            }
        }
    }
}

/// What a request took of concurrency limits, given back at once (a replayed request holds
/// nothing).
fn give_back(rt: &Runtime, limits: &[usize], plan: &crate::limits::policy::Plan, time: u64) {
    for (pos, &li) in limits.iter().enumerate() {
        let took = plan.took(pos);
        if took.any() && rt.limits[li].cfg.algorithm.caps().holds {
            crate::limits::policy::return_unit(&rt.limits[li], plan.key(pos), time, took);
        }
    }
}

struct Pass {
    /// (route, limit) of each entry of `stats`, in the config's order.
    order: Vec<(usize, usize)>,
    stats: Vec<Stats>,
    unrouted: u64,
}

impl Pass {
    fn run(
        config: &Config,
        factor: f64,
        records: &[Record],
        start: u64,
        step: u64,
    ) -> Result<Pass, String> {
        let detailed = factor == 1.0;
        let config = fleet(config, factor)?;
        let metrics = tollgate_core::observe::metrics::Metrics::new().map_err(|e| e.to_string())?;
        let rt = Runtime::build(config, None, None, &metrics).map_err(|e| e.to_string())?;
        let hasher = KeyHasher::new();
        let mut order = Vec::new();
        let mut index = HashMap::new();
        for (ri, r) in rt.routes.iter().enumerate() {
            for &li in &r.cfg.limits {
                index.insert((ri, li), order.len());
                order.push((ri, li));
            }
        }
        let mut stats: Vec<Stats> = order.iter().map(|_| Stats::default()).collect();
        let mut unrouted = 0;
        for rec in records {
            let (req, peer) = head(rec, rt.ipv6_prefix);
            let Some(req) = req else {
                unrouted += 1;
                continue;
            };
            // A logged request was served: an HTTPS redirect had already happened.
            let f = front(&rt, &req, peer, true);
            let (Some(route), None) = (f.route, &f.answer) else {
                unrouted += 1;
                continue;
            };
            let r = &rt.routes[route];
            if r.cfg.limits.is_empty()
                || matches!(f.access, tollgate_core::filters::access::Access::Allowed(_))
            {
                continue;
            }
            let (path, query) = f.key_path(&rt, &req);
            let input = f.key_input(&req, (&path, query), route, None, None);
            let plan_i = match (r.needs_plan, &rt.config.plans) {
                (true, Some(plans)) => crate::limits::identity::plan_of(plans, &input),
                _ => 0,
            };
            let plan = decide_local(&rt, route, &hasher, &input, plan_i, rec.time, rec.time);
            let v = plan.settled().unwrap_or_default();
            let admitted = v.denied.is_none() && v.blocked.is_none();
            let bucket = ((rec.time - start) / 1_000_000_000 / step) as usize;
            for (pos, &li) in r.cfg.limits.iter().enumerate() {
                let l = &rt.limits[li];
                if l.cfg.plan.is_some_and(|p| p != plan_i) {
                    continue;
                }
                // The key the step computed, or (for the limits after a refusal, which the
                // step never reached) the one it would have: each limit counts every request
                // that has a value for its key.
                let key = match plan.key(pos) {
                    0 => match crate::limits::policy::limit_key(&rt, l, &hasher, &input) {
                        Some(k) => k,
                        None => continue,
                    },
                    k => k,
                };
                let bit = 1u32 << pos;
                let refused = v.refused & bit != 0 || v.shadow_exceeded & bit != 0;
                let at = (rec.time, bucket, detailed);
                stats[index[&(route, li)]].count(key, at, (refused, admitted), || {
                    shown_key(&rt, li, &input, rec)
                });
                if let (true, Some(lad), false) = (refused, &l.ladder, l.shadow) {
                    lad.ladder.refused(key, rec.time);
                }
            }
            // Concurrency slots are not held: what a request took comes back at once.
            if r.holds_slots {
                give_back(&rt, &r.cfg.limits, &plan, rec.time);
            }
        }
        Ok(Pass {
            order,
            stats,
            unrouted,
        })
    }
}

/// The config as one process of the whole fleet: global limits decided here (one exact
/// counter, as Redis is for every instance), every rate and burst scaled by `factor`.
fn fleet(config: &Config, factor: f64) -> Result<Config, String> {
    let mut c = config.clone();
    c.redis = None;
    c.rls = None;
    for l in &mut c.limits {
        l.scope = Scope::Local;
        l.lease_max = None;
        if factor != 1.0 {
            let period = l.rate.period_ns() as f64 / factor;
            l.rate = Rate::new(l.rate.count(), Duration::from_nanos(period.max(1.0) as u64))
                .map_err(|e| format!("{} x{factor}: {e}", l.name))?;
            l.burst = ((l.burst as f64 * factor).round() as u64).max(1);
        }
    }
    Ok(c)
}

/// A logged request as a head, and the address it came from.
fn head(rec: &Record, ipv6_prefix: u8) -> (Option<RequestHeader>, IpAddr) {
    let peer = match rec.client {
        Some(Client::Ip(ip)) => ip,
        Some(Client::Pseudonym(p)) => pseudonym_ip(p, ipv6_prefix),
        None => IpAddr::from([0, 0, 0, 0]),
    };
    let Ok(mut req) = RequestHeader::build(rec.method.as_str(), rec.target.as_bytes(), None) else {
        return (None, peer);
    };
    if let Some(h) = rec.host.as_deref().filter(|h| !h.is_empty()) {
        if req.append_header(http::header::HOST, h).is_err() {
            return (None, peer);
        }
    }
    for (n, v) in &rec.headers {
        if n.eq_ignore_ascii_case("host") {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n.as_bytes()),
            http::HeaderValue::from_bytes(v.as_bytes()),
        ) {
            let _ = req.append_header(n, v);
        }
    }
    (Some(req), peer)
}

/// A pseudonymous client (Tollgate's log) as an address of its own under fd00::/8 (unique
/// local): as many of the pseudonym's bits as the limits' `ipv6_prefix` keeps (all 64 from a
/// /72 on; 56 at the default /64), so that each pseudonym stays one client.
fn pseudonym_ip(p: u64, prefix: u8) -> IpAddr {
    let room = u32::from(prefix.clamp(9, 72) - 8);
    let kept = if room >= 64 {
        p as u128
    } else {
        (p >> (64 - room)) as u128
    };
    IpAddr::V6(Ipv6Addr::from((0xfd_u128 << 120) | (kept << (120 - room))))
}

fn shown_key(rt: &Runtime, li: usize, input: &KeyInput, rec: &Record) -> String {
    let text = describe_key(&rt.limits[li].cfg.key, input, rt.ipv6_prefix).unwrap_or_default();
    match rec.client {
        Some(Client::Pseudonym(p)) => {
            text.replace(&input.client_ip.to_string(), &format!("~{p:016x}"))
        }
        _ => text,
    }
}

fn describe(l: &tollgate_config::model::LimitConfig, config: &Config) -> String {
    let scope = match (l.scope, l.lease_max) {
        (Scope::Global, Some(_)) => "global, leased",
        (Scope::Global, None) => "global",
        (Scope::Local, _) => "local",
    };
    let keys: Vec<String> = l.key.iter().map(|k| k.describe()).collect();
    let plan = l
        .plan
        .and_then(|p| config.plans.as_ref()?.names.get(p).cloned())
        .map(|p| format!(", plan {p}"))
        .unwrap_or_default();
    let not = if l.algorithm.caps().holds {
        " (concurrency: not simulated, slots come back at once)"
    } else {
        ""
    };
    format!(
        "{} {} burst {}, key {}, {scope}{}{plan}{not}",
        l.algorithm.name(),
        crate::tools::explain::rate_text(l.rate.count(), l.rate.period_ns()),
        l.burst,
        keys.join("+"),
        if l.shadow { ", shadow" } else { "" },
    )
}

/// The report as a person reads it in a terminal.
pub fn text(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} lines ({} not read, {} not routed or answered before the limits), {} s of traffic",
        r.lines,
        r.errors,
        r.unrouted,
        r.end.saturating_sub(r.start) + 1
    );
    for l in &r.limits {
        let _ = writeln!(o, "\n{} on route {}: {}", l.limit, l.route, l.description);
        let pct = |n: u64| {
            if l.requests == 0 {
                0.0
            } else {
                n as f64 * 100.0 / l.requests as f64
            }
        };
        let _ = writeln!(
            o,
            "  requests {}  admitted {} ({:.1} %)  refused {} ({:.1} %)  by another limit {}  keys {}",
            l.requests,
            l.admitted,
            pct(l.admitted),
            l.refused,
            pct(l.refused),
            l.requests.saturating_sub(l.admitted + l.refused),
            l.keys
        );
        if let Some(f) = &l.first_refusal {
            let _ = writeln!(
                o,
                "  first refusal at +{:.3} s: {}",
                (f.time / 1_000_000) as f64 / 1e3 - r.start as f64,
                f.key
            );
        }
        for k in &l.top_refused {
            let _ = writeln!(o, "    {:>8} refused  {}", k.refused, k.key);
        }
        for s in &l.scaled {
            let _ = writeln!(
                o,
                "  x{:<3} admitted {} refused {} ({:+})",
                s.factor,
                s.admitted,
                s.refused,
                s.refused as i64 - l.refused as i64
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each pseudonym stays one client: distinct pseudonyms differ in the bits the limits'
    /// prefix keeps (checked where the prefix has room for them).
    #[test]
    fn pseudonyms_survive_the_ipv6_prefix() {
        for prefix in [48u8, 56, 64, 72, 128] {
            let a = crate::limits::identity::key_ip(
                pseudonym_ip(0x0123_4567_89ab_cdef, prefix),
                prefix,
            );
            let b = crate::limits::identity::key_ip(
                pseudonym_ip(0x0123_4567_89ab_cdee ^ (1 << 40), prefix),
                prefix,
            );
            assert_ne!(a, b, "/{prefix}");
            assert!(matches!(a, IpAddr::V6(v) if v.octets()[0] == 0xfd));
        }
        // Every bit of the pseudonym is kept from /72 on.
        let p = 72;
        assert_ne!(
            crate::limits::identity::key_ip(pseudonym_ip(1, p), p),
            crate::limits::identity::key_ip(pseudonym_ip(2, p), p)
        );
    }
}
