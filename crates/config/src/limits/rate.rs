//! A limit's algorithm and numbers: `algorithm`, `rate`, `burst`, a concurrency limit's
//! `slot_ttl` and `slot_timeout`, a leaky bucket's `delay`; each bound from the algorithm's row
//! of the capability table.

use super::{
    concurrency_duration, Draft, DAY, DEFAULT_SLOT_TIMEOUT, DEFAULT_SLOT_TTL, HOUR,
    MAX_SLIDING_LOG_BURST,
};
use crate::reader::{as_int_in, as_str, Cx, Tbl};
use crate::values::parse_rate;
use tollgate_limit::{AlgorithmKind, Rate};

/// `algorithm` (token_bucket by default) and `rate` (none for a concurrency limit).
pub(super) fn algorithm_and_rate(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft) {
    let path = d.path.clone();
    let algorithm = match l.get("algorithm") {
        Some(av) => {
            let p = l.key_path("algorithm");
            as_str(cx, &p, av).and_then(|s| match AlgorithmKind::from_name(s) {
                Some(k) => Some(k),
                None => {
                    let all: Vec<_> = AlgorithmKind::ALL.iter().map(|k| k.name()).collect();
                    cx.err(
                        &p,
                        av.span(),
                        format!("unknown algorithm \"{s}\" (one of: {})", all.join(", ")),
                    );
                    None
                }
            })
        }
        None => Some(AlgorithmKind::TokenBucket),
    };
    let concurrency = algorithm == Some(AlgorithmKind::Concurrency);
    let rate = match l.get("rate") {
        Some(rv) if concurrency => {
            cx.err(
                &l.key_path("rate"),
                rv.span(),
                "a concurrency limit has no rate: burst is the cap of requests in flight",
            );
            None
        }
        None if concurrency => None,
        Some(rv) => {
            let p = l.key_path("rate");
            as_str(cx, &p, rv).and_then(|s| match parse_rate(s) {
                Ok(r) => Some(r),
                Err(e) => {
                    cx.err(&p, rv.span(), e);
                    None
                }
            })
        }
        None => {
            if l.get("quota").is_none() && l.get("plan").is_none() {
                cx.err(
                    &path,
                    l.span.clone(),
                    "missing key \"rate\" (e.g. rate = \"10/s\") or \"quota\"",
                );
            }
            None
        }
    };
    d.algorithm = algorithm;
    d.concurrency = concurrency;
    d.rate = rate;
}

/// `burst`, the concurrency-only durations and a leaky bucket's `delay`.
pub(super) fn burst_and_slots(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft) {
    let path = d.path.clone();
    let algorithm = d.algorithm;
    let concurrency = d.concurrency;
    let rate = d.rate;
    let burst = match l.get("burst") {
        Some(bv) => {
            let p = l.key_path("burst");
            let max = algorithm
                .and_then(|a| a.caps().max_burst)
                .map_or(1_000_000_000, |m| m as i64);
            as_int_in(cx, &p, bv, 1, max).map(|n| n as u64)
        }
        None if concurrency => {
            cx.err(
                &path,
                l.span.clone(),
                "missing key \"burst\": the cap of requests in flight per key",
            );
            None
        }
        None => rate.map(|r| r.count()),
    };
    // A concurrency limit's "rate" is its burst per slot_ttl: the Redis script reads the
    // period as how long a gateway's slots outlive it (a crashed gateway's come back then).
    let slot_ttl = concurrency_duration(cx, l, "slot_ttl", concurrency, DEFAULT_SLOT_TTL, HOUR);
    // A slot is bounded in time too: an upload just over min_body_rate would hold it for
    // hours (body size / rate) and refuse every other request on its key meanwhile.
    let slot_timeout = concurrency_duration(
        cx,
        l,
        "slot_timeout",
        concurrency,
        DEFAULT_SLOT_TIMEOUT,
        DAY,
    );
    let rate = match (concurrency, burst, slot_ttl) {
        (true, Some(b), Some(ttl)) => Rate::new(b, ttl).ok(),
        (true, ..) => None,
        _ => rate,
    };
    let max_burst = algorithm.and_then(|a| a.caps().max_burst);
    if let (None, Some(max), Some(r)) = (l.get("burst"), max_burst, rate) {
        if r.count() > max {
            let span = l.get("rate").map(|v| v.span()).unwrap_or(0..0);
            cx.err(
                &l.key_path("rate"),
                span,
                format!("the sliding log keeps one entry per request: at most {MAX_SLIDING_LOG_BURST} per window (use sliding_window for more)"),
            );
        }
    }
    let delay = match l.get("delay") {
        Some(dv) => {
            let p = l.key_path("delay");
            if !algorithm.is_some_and(|a| a.caps().queues) {
                cx.err(
                    &p,
                    dv.span(),
                    "delay applies only to algorithm = \"leaky_bucket\"",
                );
                None
            } else {
                as_int_in(cx, &p, dv, 0, 1_000_000_000).map(|n| n as u64)
            }
        }
        None => Some(0),
    };
    d.burst = burst;
    d.slot_ttl = slot_ttl;
    d.slot_timeout = slot_timeout;
    d.rate = rate;
    d.delay = delay;
}
