//! A call to a `[[rls.domains]]` domain, answered as envoyproxy/ratelimit answers it
//! (`src/service/ratelimit.go`, `src/limiter/base_limiter.go`), field for field.
//!
//! Per descriptor: the limit is the `limit` override Envoy sent (counted per unit, never in
//! shadow or quota mode) or the tree's ([`tollgate_proxy::limits::tree`]); a limit whose `name` another matched
//! limit `replaces` is dropped; `unlimited` answers OK with `limit_remaining` 4294967295. The
//! units spent are the descriptor's own `hits_addend` when Envoy sets it (0: a check that
//! spends nothing), else the request's, at least 1. A counted limit's status carries
//! `current_limit` (requests per unit, unit, name), `limit_remaining` and
//! `duration_until_reset` (the unit's span less the time into it), over the limit as under it;
//! in shadow mode the code is OK. `overall_code` is OVER_LIMIT when a descriptor not in quota
//! mode is over, or when every quota descriptor is; `[rls] shadow_mode` answers OK whatever.
//!
//! A limit Redis cannot decide follows its `on_error`: `fail` (the tree's default) fails the
//! whole call with `UNAVAILABLE`, so Envoy's `failure_mode_deny` decides.

use crate::pb::envoy::config::core::v3::HeaderValue as PbHeader;
use crate::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use crate::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::Rls;
use tollgate_config::model::{EnvoyUnit, OnError, RlsHeaders};
use tollgate_proxy::runtime::Runtime;
use tonic::Status;

/// `limit_remaining` of an unlimited descriptor (the service's `MaxUint32`).
const MAX_REMAINING: u32 = u32::MAX;

/// What one descriptor is checked against.
struct Check<'r> {
    requests_per_unit: u32,
    unit: EnvoyUnit,
    name: &'r str,
    shadow: bool,
    quota: bool,
    /// The limit counting it (index into `Runtime::limits`): a per-unit counter, or a limit
    /// of its own (another algorithm than counting_window).
    limit: usize,
    /// The entries the counter is keyed by (`share_threshold` patterns in place of values).
    key: Vec<(String, String)>,
    stat_key: String,
    metadata: Option<&'r serde_json::Value>,
}

/// A descriptor's limit before counting.
enum Slot<'r> {
    None,
    Unlimited,
    Check(Check<'r>),
}

/// What counting said.
struct Counted {
    over: bool,
    remaining: u32,
    /// The count after this hit (a counter's; else what the limit has taken).
    count: u64,
}

impl Rls {
    /// The answer to a call to a domain `rt.rls_tree` serves.
    pub(super) async fn decide_tree(
        &self,
        rt: &Runtime,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let rls = rt.config.rls.as_ref();
        let global_shadow = rls.is_some_and(|r| r.shadow_mode);
        let global_quota = rls.is_some_and(|r| r.quota_mode);
        let unix = self.shared.clock.unix_now() / 1_000_000_000;

        // The limits to check (the service's constructLimitsToCheck).
        let slots = slots(rt, req);

        // What each spends: its hits, but with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, when a
        // count is known past its limit (from memory) nothing is counted, and when one would
        // pass its limit only those that would are (the service's getHitsAddend).
        let costs = self.costs(rt, req, &slots).await;

        // Counted, all descriptors at once (the service pipelines its Redis calls).
        let counting = slots.iter().zip(&costs).map(|(s, &cost)| async move {
            match s {
                Slot::Check(c) => Some(self.count(rt, c, cost).await),
                _ => None,
            }
        });
        let counted = futures_util::future::join_all(counting).await;

        let mut out = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        let (mut failed_rate, mut failed_quota, mut total_quota) = (0, 0, 0);
        let mut passed: Vec<usize> = Vec::new();
        // The descriptor closest to its limit (the service's minimumDescriptor).
        let mut shown: Option<usize> = None;
        let mut min_remaining = MAX_REMAINING;
        for (i, (s, c)) in slots.iter().zip(counted).enumerate() {
            let status = match (s, c) {
                (Slot::Unlimited, _) => {
                    out.statuses.push(DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: MAX_REMAINING,
                        ..Default::default()
                    });
                    continue;
                }
                (Slot::Check(c), Some(Ok(n))) => self.status(rt, c, costs[i], &n, unix),
                (Slot::Check(c), Some(Err(on_error))) => match unanswered(c, on_error, unix) {
                    Some(status) => status,
                    None => {
                        return Err(Status::unavailable(format!(
                            "the limit of {} cannot be decided (Redis does not answer): the caller's failure mode decides",
                            c.stat_key
                        )))
                    }
                },
                _ => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
            };
            if status.current_limit.is_some() && status.limit_remaining < min_remaining {
                shown = Some(i);
                min_remaining = status.limit_remaining;
            }
            let quota = global_quota || matches!(s, Slot::Check(c) if c.quota);
            if status.code == Code::OverLimit as i32 {
                if quota {
                    failed_quota += 1;
                } else {
                    failed_rate += 1;
                    shown = Some(i);
                    min_remaining = 0;
                }
            } else {
                passed.push(i);
            }
            if quota {
                total_quota += 1;
            }
            out.statuses.push(status);
        }
        if failed_rate > 0 || (total_quota > 0 && total_quota == failed_quota) {
            out.overall_code = Code::OverLimit as i32;
        }
        if let Some(i) = shown {
            out.response_headers_to_add = fields(rt, &slots[i], &out.statuses[i], unix);
        }
        if global_shadow && out.overall_code == Code::OverLimit as i32 {
            out.overall_code = Code::Ok as i32;
        }
        if rls.is_some_and(|r| r.dynamic_metadata) {
            out.dynamic_metadata = Some(metadata(req, &slots, &passed));
        }
        Ok(out)
    }

    /// What each descriptor spends: its hits, but with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
    /// when a count is known past its limit (from memory) nothing is counted, and when one
    /// would pass its limit only those that would are (the service's getHitsAddend).
    async fn costs(&self, rt: &Runtime, req: &RateLimitRequest, slots: &[Slot<'_>]) -> Vec<u64> {
        let mut costs: Vec<u64> = req.descriptors.iter().map(|d| cost(req, d)).collect();
        if rt
            .config
            .rls
            .as_ref()
            .is_some_and(|r| r.stop_increment_when_over)
        {
            let known_over = slots.iter().any(|s| match s {
                Slot::Check(c) => self.remembered_over(rt, c),
                _ => false,
            });
            if known_over {
                costs.iter_mut().for_each(|c| *c = 0);
            } else {
                let peeks = slots.iter().map(|s| async move {
                    match s {
                        Slot::Check(c) => self.count(rt, c, 0).await.ok().map(|n| n.count),
                        _ => None,
                    }
                });
                let before = futures_util::future::join_all(peeks).await;
                let near: Vec<bool> = slots
                    .iter()
                    .zip(&before)
                    .zip(&costs)
                    .map(|((s, n), cost)| match (s, n) {
                        (Slot::Check(c), Some(n)) => {
                            n.saturating_add(*cost) > u64::from(c.requests_per_unit)
                        }
                        _ => false,
                    })
                    .collect();
                if near.contains(&true) {
                    for (c, near) in costs.iter_mut().zip(near) {
                        if !near {
                            *c = 0;
                        }
                    }
                }
            }
        }
        costs
    }

    /// A counted descriptor's status, and its stats (the service's over_limit, shadow_mode
    /// and within_limit).
    fn status(
        &self,
        rt: &Runtime,
        c: &Check<'_>,
        hits: u64,
        n: &Counted,
        unix: u64,
    ) -> DescriptorStatus {
        let key = c.stat_key.as_str();
        let m = &self.shared.metrics;
        m.rls_hit(key, "total_hits", hits);
        // Past the limit: the hits past it (all of them when the count was past
        // it already), as the service counts its over_limit and shadow_mode stats.
        let past = n
            .count
            .saturating_sub(u64::from(c.requests_per_unit))
            .min(hits);
        if n.over {
            m.rls_hit(key, "over_limit", past);
            if c.shadow {
                m.rls_hit(key, "shadow_mode", past);
                rt.limits[c.limit].shadowed(m).inc();
            }
        } else {
            m.rls_hit(key, "within_limit", hits);
        }
        DescriptorStatus {
            code: if n.over && !c.shadow {
                Code::OverLimit as i32
            } else {
                Code::Ok as i32
            },
            current_limit: Some(RateLimit {
                name: c.name.to_string(),
                requests_per_unit: c.requests_per_unit,
                unit: c.unit.number(),
            }),
            limit_remaining: if n.over { 0 } else { n.remaining },
            duration_until_reset: Some(prost_types::Duration {
                seconds: reset(c.unit, unix) as i64,
                nanos: 0,
            }),
        }
    }

    /// Counts `cost` units of `c`: whether the count passes its limit, and what remains; the
    /// limit's `on_error` when Redis cannot decide (`local` decided already).
    async fn count(&self, rt: &Runtime, c: &Check<'_>, cost: u64) -> Result<Counted, OnError> {
        let Some(set) = rt.rls_set(c.limit) else {
            return Err(OnError::Open);
        };
        let cfg = &rt.limits[c.limit].cfg;
        let counter = cfg.algorithm == tollgate_limit::AlgorithmKind::CountingWindow
            && cfg.burst == u64::from(u32::MAX);
        let entries: Vec<(&str, &str)> = c
            .key
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let remembered = self.memory_key(rt, c);
        let now = self.shared.clock.now();
        if self.remembered_over(rt, c) {
            return Ok(Counted {
                over: true,
                remaining: 0,
                count: u64::from(c.requests_per_unit).saturating_add(1),
            });
        }
        let v = self.verdict(rt, set, &entries, cost).await;
        if v.unavailable.is_some() {
            return Err(cfg.on_error);
        }
        if v.denied.is_some() || v.blocked.is_some() {
            return Ok(Counted {
                over: true,
                remaining: 0,
                count: cfg.burst.saturating_add(1),
            });
        }
        let Some((_, remaining, _)) = v.nearest else {
            // Admitted without a figure: Redis failed and on_error = "open".
            return Err(OnError::Open);
        };
        if counter {
            // The counter counts up from 0 under a ceiling of u32::MAX.
            let n = cfg.burst.saturating_sub(remaining);
            let limit = u64::from(c.requests_per_unit);
            if let (true, Some(k)) = (n > limit, remembered) {
                let left = v
                    .nearest
                    .map_or(1_000_000_000, |(_, _, reset)| reset.max(1));
                rt.rls_tree.over.insert(k, now.saturating_add(left), now);
            }
            return Ok(Counted {
                over: n > limit,
                remaining: limit.saturating_sub(n) as u32,
                count: n,
            });
        }
        if c.requests_per_unit == 0 {
            // (Another algorithm than the service's keeps a unit a window: 0 is over.)
            return Ok(Counted {
                over: true,
                remaining: 0,
                count: 1,
            });
        }
        Ok(Counted {
            over: false,
            remaining: remaining.min(u64::from(u32::MAX)) as u32,
            count: cfg.burst.saturating_sub(remaining),
        })
    }

    /// The key `c`'s count is remembered under once past its number (`[rls] local_cache`,
    /// counters only): a count past its number in its window stays past it, so it is answered
    /// from memory, no Redis call (a herd on a refused key costs nothing), as the service's
    /// local cache.
    fn memory_key(&self, rt: &Runtime, c: &Check<'_>) -> Option<u64> {
        let cfg = &rt.limits[c.limit].cfg;
        let counter = cfg.algorithm == tollgate_limit::AlgorithmKind::CountingWindow
            && cfg.burst == u64::from(u32::MAX);
        if !counter || !rt.config.rls.as_ref().is_some_and(|r| r.local_cache) {
            return None;
        }
        let mut h = self.shared.hasher.hasher();
        for (k, v) in &c.key {
            std::hash::Hasher::write(&mut h, k.as_bytes());
            std::hash::Hasher::write_u8(&mut h, 0xfd);
            std::hash::Hasher::write(&mut h, v.as_bytes());
            std::hash::Hasher::write_u8(&mut h, 0xfe);
        }
        // (Not the number: once a count is past one limit, every limit of that counter meets
        // it from memory, as the service's local cache answers by the cache key alone.)
        std::hash::Hasher::write_u64(&mut h, c.limit as u64);
        Some(std::hash::Hasher::finish(&h))
    }

    /// Whether `c`'s count is remembered past its number.
    fn remembered_over(&self, rt: &Runtime, c: &Check<'_>) -> bool {
        self.memory_key(rt, c)
            .is_some_and(|k| rt.rls_tree.over.peek(k, self.shared.clock.now()).is_some())
    }
}

/// The limits to check, each descriptor's (the service's constructLimitsToCheck): those a
/// matched limit `replaces` are not checked.
fn slots<'r>(rt: &'r Runtime, req: &RateLimitRequest) -> Vec<Slot<'r>> {
    let mut slots: Vec<Slot> = req.descriptors.iter().map(|d| slot(rt, req, d)).collect();
    let replaced: std::collections::HashSet<&str> = req
        .descriptors
        .iter()
        .filter_map(|d| found_limit(rt, &req.domain, d))
        .flat_map(|l| l.replaces.iter().map(String::as_str))
        .collect();
    for s in &mut slots {
        if let Slot::Check(c) = s {
            if !c.name.is_empty() && replaced.contains(c.name) {
                *s = Slot::None;
            }
        }
    }
    slots
}

/// The rate limit fields of the answer, from the descriptor shown (`[rls] response_headers`).
fn fields(rt: &Runtime, slot: &Slot<'_>, status: &DescriptorStatus, unix: u64) -> Vec<PbHeader> {
    let rls = rt.config.rls.as_ref();
    match rls.map_or(RlsHeaders::Ietf, |r| r.response_headers) {
        RlsHeaders::None => Vec::new(),
        RlsHeaders::Envoy => envoy_headers(rt, status, unix),
        RlsHeaders::Ietf => ietf_headers(slot, status),
    }
}

/// The status of a descriptor whose count Redis did not answer, by `on_error`: `fail` fails
/// the call (None: the caller's failure mode decides), `closed` is over the limit, `open`
/// (and `local`, decided already) is OK.
fn unanswered(c: &Check<'_>, on_error: OnError, unix: u64) -> Option<DescriptorStatus> {
    match on_error {
        OnError::Fail => None,
        OnError::Closed => Some(DescriptorStatus {
            code: Code::OverLimit as i32,
            current_limit: Some(RateLimit {
                name: c.name.to_string(),
                requests_per_unit: c.requests_per_unit,
                unit: c.unit.number(),
            }),
            limit_remaining: 0,
            duration_until_reset: Some(prost_types::Duration {
                seconds: reset(c.unit, unix) as i64,
                nanos: 0,
            }),
        }),
        OnError::Open | OnError::Local => Some(DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        }),
    }
}

/// The units a descriptor spends: its own `hits_addend` when set (0 included), else the
/// request's, at least 1 (the service's GetHitsAddends).
fn cost(req: &RateLimitRequest, d: &RateLimitDescriptor) -> u64 {
    d.hits_addend
        .unwrap_or_else(|| u64::from(req.hits_addend.max(1)))
        .min(crate::MAX_COST)
}

/// Seconds until the unit's window ends (the service's CalculateReset: span - now % span).
fn reset(unit: EnvoyUnit, unix_secs: u64) -> u64 {
    let span = unit.seconds();
    span - unix_secs % span
}

/// The tree's limit for descriptor `d` (none for an override), unlimited included.
fn found_limit<'r>(
    rt: &'r Runtime,
    domain: &str,
    d: &RateLimitDescriptor,
) -> Option<&'r tollgate_proxy::limits::tree::LimitRt> {
    if d.limit.is_some() {
        return None;
    }
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let f = rt.rls_tree.find(domain, &entries)?;
    rt.rls_tree.nodes[f.node].limit.as_ref()
}

/// A counter's key as the service's cache key is made (`DOMAIN_KEY_VALUE_KEY_VALUE_`, the
/// window start aside): the entries joined with `_` unescaped, so `(a, b_c)` and `(a_b, c)`
/// count together there, and here.
fn counter_key<'e>(
    domain: &str,
    entries: impl Iterator<Item = (&'e str, &'e str)>,
) -> Vec<(String, String)> {
    let mut joined = format!("{domain}_");
    for (k, v) in entries {
        joined.push_str(k);
        joined.push('_');
        joined.push_str(v);
        joined.push('_');
    }
    vec![(String::new(), joined)]
}

/// A descriptor's limit (the service's GetLimit, then unlimited set apart).
fn slot<'r>(rt: &'r Runtime, req: &RateLimitRequest, d: &RateLimitDescriptor) -> Slot<'r> {
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    if let (Some(o), true) = (&d.limit, rt.rls_tree.serves(&req.domain)) {
        // An override: counted per unit, keyed by the domain and every entry.
        let Some(unit) = EnvoyUnit::of_number(o.unit) else {
            return Slot::None;
        };
        let name = tollgate_config::rls_counter(unit);
        let Some(li) = rt.limits.iter().position(|l| l.cfg.name == name) else {
            return Slot::None;
        };
        let key = counter_key(&req.domain, entries.iter().map(|(k, v)| (*k, *v)));
        let stat_key = std::iter::once(req.domain.clone())
            .chain(entries.iter().map(|(k, v)| match v.is_empty() {
                true => k.to_string(),
                false => format!("{k}_{v}"),
            }))
            .collect::<Vec<_>>()
            .join(".");
        return Slot::Check(Check {
            requests_per_unit: o.requests_per_unit,
            unit,
            name: "",
            shadow: false,
            quota: false,
            limit: li,
            key,
            stat_key,
            metadata: None,
        });
    }
    let Some(f) = rt.rls_tree.find(&req.domain, &entries) else {
        return Slot::None;
    };
    let node = &rt.rls_tree.nodes[f.node];
    let Some(l) = &node.limit else {
        return Slot::None;
    };
    if l.unlimited {
        return Slot::Unlimited;
    }
    let (Some(unit), Some(li)) = (l.unit, l.limit) else {
        return Slot::None;
    };
    let key = counter_key(
        &req.domain,
        entries.iter().enumerate().map(|(i, (k, v))| {
            let shared = f
                .share
                .as_ref()
                .and_then(|s| s.get(i))
                .filter(|p| !p.is_empty());
            (*k, shared.map_or(*v, String::as_str))
        }),
    );
    Slot::Check(Check {
        requests_per_unit: l.requests_per_unit,
        unit,
        name: &l.name,
        shadow: l.shadow_mode,
        quota: l.quota_mode,
        limit: li,
        key,
        // The service rebuilds a limit whose stats key detailed_metric or value_to_metric
        // changed, without its metadata.
        // (detailed_metric: only on the path that leaves the walk at a node without children;
        // value_to_metric: when the stats key changed.)
        metadata: node.metadata.as_ref().filter(|_| {
            if l.detailed_metric {
                node.has_children()
            } else {
                f.stat_key == node.full_key
            }
        }),
        stat_key: f.stat_key,
    })
}

/// `LIMIT_RESPONSE_HEADERS_ENABLED`'s three fields for the shown descriptor.
fn envoy_headers(rt: &Runtime, s: &DescriptorStatus, unix: u64) -> Vec<PbHeader> {
    let (Some(rls), Some(l)) = (rt.config.rls.as_ref(), &s.current_limit) else {
        return Vec::new();
    };
    let unit = EnvoyUnit::of_number(l.unit).unwrap_or(EnvoyUnit::Second);
    let h = |key: &str, value: String| PbHeader {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        h(&rls.header_names[0], l.requests_per_unit.to_string()),
        h(&rls.header_names[1], s.limit_remaining.to_string()),
        h(&rls.header_names[2], reset(unit, unix).to_string()),
    ]
}

/// The IETF RateLimit fields (and Retry-After over the limit) for the shown descriptor.
fn ietf_headers(slot: &Slot, s: &DescriptorStatus) -> Vec<PbHeader> {
    let (Slot::Check(c), Some(l)) = (slot, &s.current_limit) else {
        return Vec::new();
    };
    let name = if c.name.is_empty() {
        c.stat_key.as_str()
    } else {
        c.name
    };
    let sf = tollgate_core::respond::sf_string(name);
    let reset = s
        .duration_until_reset
        .as_ref()
        .map_or(1, |d| d.seconds.max(1));
    let h = |key: &str, value: String| PbHeader {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    };
    let mut out = vec![
        h(
            "ratelimit-policy",
            format!("{sf};q={};w={}", l.requests_per_unit, c.unit.seconds()),
        ),
        h(
            "ratelimit",
            format!("{sf};r={};t={reset}", s.limit_remaining),
        ),
    ];
    if s.code == Code::OverLimit as i32 {
        out.push(h("retry-after", reset.to_string()));
    }
    out
}

/// `RESPONSE_DYNAMIC_METADATA`: the domain, each descriptor (`KEY=VALUE` entries, its
/// override, its `hits_addend`), the request's `hits_addend`, and the merged metadata of the
/// limits of the descriptors that passed.
fn metadata(req: &RateLimitRequest, slots: &[Slot], passed: &[usize]) -> prost_types::Struct {
    use prost_types::value::Kind;
    use prost_types::{ListValue, Struct, Value};
    let text = |s: String| Value {
        kind: Some(Kind::StringValue(s)),
    };
    let num = |n: f64| Value {
        kind: Some(Kind::NumberValue(n)),
    };
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("domain".to_string(), text(req.domain.clone()));
    let descriptors = req
        .descriptors
        .iter()
        .map(|d| {
            let mut f = std::collections::BTreeMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| text(format!("{}={}", e.key, e.value)))
                .collect();
            f.insert(
                "entries".to_string(),
                Value {
                    kind: Some(Kind::ListValue(ListValue { values: entries })),
                },
            );
            if let Some(o) = &d.limit {
                // Go's prototext: fields at their zero value are left out.
                let mut parts = Vec::new();
                if o.requests_per_unit != 0 {
                    parts.push(format!("requests_per_unit:{}", o.requests_per_unit));
                }
                if o.unit != 0 {
                    let unit = EnvoyUnit::of_number(o.unit)
                        .map_or_else(|| o.unit.to_string(), |u| u.name().to_string());
                    parts.push(format!("unit:{unit}"));
                }
                f.insert("limit".to_string(), text(parts.join(" ")));
            }
            if let Some(h) = d.hits_addend {
                f.insert("hitsAddend".to_string(), num(h as f64));
            }
            Value {
                kind: Some(Kind::StructValue(Struct { fields: f })),
            }
        })
        .collect();
    fields.insert(
        "descriptors".to_string(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: descriptors,
            })),
        },
    );
    if req.hits_addend != 0 {
        fields.insert("hitsAddend".to_string(), num(f64::from(req.hits_addend)));
    }
    let mut merged = serde_json::Map::new();
    for &i in passed {
        if let Some(Slot::Check(Check {
            metadata: Some(serde_json::Value::Object(m)),
            ..
        })) = slots.get(i)
        {
            merge(&mut merged, m);
        }
    }
    if !merged.is_empty() {
        fields.insert(
            "metadata".to_string(),
            json_value(&serde_json::Value::Object(merged)),
        );
    }
    Struct { fields }
}

/// The service's mergeMetadata: keys new to `dest` are added; two objects merge; otherwise
/// the first stays.
fn merge(
    dest: &mut serde_json::Map<String, serde_json::Value>,
    src: &serde_json::Map<String, serde_json::Value>,
) {
    for (k, v) in src {
        match (dest.get_mut(k), v) {
            (Some(serde_json::Value::Object(d)), serde_json::Value::Object(s)) => merge(d, s),
            (Some(_), _) => {}
            (None, v) => {
                dest.insert(k.clone(), v.clone());
            }
        }
    }
}

fn json_value(v: &serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(json_value).collect(),
        }),
        serde_json::Value::Object(o) => Kind::StructValue(prost_types::Struct {
            fields: o.iter().map(|(k, v)| (k.clone(), json_value(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}
