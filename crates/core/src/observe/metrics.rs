//! Prometheus metrics. One registry per process, living across reloads; runtimes resolve the
//! label sets they need once, so the hot path only increments pre-resolved handles.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    pub registry: Registry,
    pub requests: IntCounterVec,
    pub rejected: IntCounterVec,
    pub duration: HistogramVec,
    pub shadow_exceeded: IntCounterVec,
    pub limiter_evicted: IntCounterVec,
    pub reloads: IntCounterVec,
    pub in_flight: IntGauge,
    pub verdict_cache_hits: IntCounterVec,
    pub lease_decisions: IntCounterVec,
    pub lease_returned: IntCounterVec,
    pub redis_fallbacks: IntCounterVec,
    pub quota_overage: IntCounterVec,
    pub quota_crossed: IntCounterVec,
    pub access_allowed: IntCounterVec,
    pub tarpit_held: IntGaugeVec,
    pub tarpit_total: IntCounterVec,
    /// `tollgate_blocks_not_recorded_total{limit,why}`
    pub blocks_not_recorded: IntCounterVec,
    pub blocks_total: IntCounterVec,
    pub decisions: IntCounterVec,
    pub connections_open: IntGauge,
    /// `tollgate_upstream_ejections_total{upstream}`: targets taken out by passive outlier
    /// ejection.
    pub upstream_ejections: IntCounterVec,
    pub connections_refused: IntCounterVec,
    /// `tollgate_mirror_requests_total{route,result}`: copies of a route's `mirror`.
    pub mirror_requests: IntCounterVec,
    /// `tollgate_error_pages_total{route,result}`: answers replaced by a route's `error_pages`.
    pub error_pages: IntCounterVec,
    /// `tollgate_tls_passthrough_total{upstream,result}`: `[[tls_passthrough]]` connections.
    pub passthrough: IntCounterVec,
    /// `tollgate_auth_total{route,method,result}`
    pub auth: IntCounterVec,
    /// `tollgate_auth_service_seconds{route}`: forward auth's calls.
    pub auth_service: HistogramVec,
    /// `tollgate_jwks_fetches_total{result}`
    pub jwks_fetches: IntCounterVec,
    /// `tollgate_jwks_keys`: keys in the JWKS set in use.
    pub jwks_keys: IntGauge,
    /// `tollgate_cors_preflights_total{route,result}`: allowed, refused.
    pub cors_preflights: IntCounterVec,
    /// `tollgate_compressed_responses_total{route,encoding}`.
    pub compressed: IntCounterVec,
    /// `tollgate_trace_spans_exported_total`: spans the collector accepted.
    pub trace_exported: IntCounter,
    /// `tollgate_trace_spans_dropped_total{reason}`: spans not exported (`queue_full`: the
    /// export queue was at `max_queue`; `export_failed`: the collector refused, failed or
    /// timed out).
    pub trace_dropped: IntCounterVec,
    /// `tollgate_rls_requests_total{domain,code}`: ShouldRateLimit calls (`domain` is a
    /// configured one, or `""`), by answer (`ok`, `over_limit`, `invalid`).
    pub rls_requests: IntCounterVec,
    /// `tollgate_rls_descriptors_total{domain,result}`: descriptors decided (`limited`) or
    /// matching no rule (`unknown`).
    pub rls_descriptors: IntCounterVec,
    /// `tollgate_rls_hits_total{key,result}`: hits (units) of `[[rls.domains]]` limits by the
    /// service's stats key (`detailed_metric`, `value_to_metric` applied) and result
    /// (`total_hits`, `over_limit`, `within_limit`, `shadow_mode`), as envoyproxy/ratelimit
    /// counts them. At most [`RLS_STAT_KEYS`] keys; the rest count under `key="other"`.
    pub rls_hits: IntCounterVec,
    rls_keys: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// `tollgate_rls_decision_seconds`: one ShouldRateLimit call, decided.
    pub rls_seconds: prometheus::Histogram,
    /// `tollgate_upstream_retries_total{upstream,on}`: attempts made again on another target.
    pub upstream_retries: IntCounterVec,
    /// `tollgate_upstream_retry_budget_exhausted_total{upstream}`: retries the budget refused.
    pub upstream_retry_budget_exhausted: IntCounterVec,
    /// `tollgate_request_headers_dropped_total{reason}`: request header fields removed on
    /// arrival (`underscore`: a name holding `_`, with `underscores_in_headers = false`).
    pub request_headers_dropped: IntCounterVec,
}

/// A metric registered in `r` as it is made: no family can be made and left unregistered.
fn register<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    m: M,
) -> Result<M, prometheus::Error> {
    r.register(Box::new(m.clone()))?;
    Ok(m)
}

fn counters(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    register(r, IntCounterVec::new(Opts::new(name, help), labels)?)
}

fn gauges(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, prometheus::Error> {
    register(r, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

fn gauge(r: &Registry, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
    register(r, IntGauge::new(name, help)?)
}

/// Label for requests that matched no route.
pub const NO_ROUTE: &str = "";

/// At most this many stats keys in `tollgate_rls_hits_total` (a detailed metric names every
/// value a client sends: the label set must stay bounded).
pub const RLS_STAT_KEYS: usize = 10_000;
/// The longest stats key with a series of its own.
pub const RLS_STAT_KEY_BYTES: usize = 256;

impl Metrics {
    /// Counts `hits` of stats key `key` as `result` (`key="other"` past [`RLS_STAT_KEYS`]).
    pub fn rls_hit(&self, key: &str, result: &str, hits: u64) {
        // A stats key holding a long value (a path, a header) is no series of its own.
        let key = if key.len() > RLS_STAT_KEY_BYTES {
            "other"
        } else {
            key
        };
        let known = {
            let mut keys = self.rls_keys.lock();
            keys.contains(key) || (keys.len() < RLS_STAT_KEYS && keys.insert(key.to_string()))
        };
        let key = if known { key } else { "other" };
        self.rls_hits.with_label_values(&[key, result]).inc_by(hits);
    }

    pub fn new() -> Result<Self, prometheus::Error> {
        let r = Registry::new();
        r.register(Box::new(crate::observe::logguard::SUPPRESSED.clone()))?;
        let m = Self {
            requests: counters(&r, "http_requests_total", "Requests answered, by route and status.", &["route", "status"])?,
            rejected: counters(&r, "http_requests_rejected_total", "Requests refused at the edge, by reason, route and limit.", &["reason", "route", "limit"])?,
            duration: register(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "http_request_duration_seconds",
                        "Time from request header to the end of the response, by route.",
                    )
                    .buckets(vec![
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                        2.5, 5.0, 10.0,
                    ]),
                    &["route"],
                )?,
            )?,
            auth: counters(&r, "tollgate_auth_total", "Authentication at the edge, by route, method (jwt, forward, basic, api_key) and result (allowed, anonymous, cached, unauthenticated, forbidden, error).", &["route", "method", "result"])?,
            auth_service: register(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "tollgate_auth_service_seconds",
                        "Time an auth service took to answer (forward auth), by route; timeouts and errors included.",
                    )
                    .buckets(vec![
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                        2.5, 5.0,
                    ]),
                    &["route"],
                )?,
            )?,
            jwks_fetches: counters(&r, "tollgate_jwks_fetches_total", "Fetches of the JWKS at [jwt] jwks_url, by result (ok, unchanged, error) and why (schedule, unknown_kid).", &["result", "why"])?,
            jwks_keys: gauge(&r, "tollgate_jwks_keys", "Keys of the JWKS set tokens are verified with (0 before the first fetch).")?,
            shadow_exceeded: counters(&r, "tollgate_shadow_exceeded_total", "Requests a shadow-mode limit would have refused (passed on, marked toward the upstream).", &["limit"])?,
            limiter_evicted: counters(&r, "tollgate_limiter_evicted_keys_total", "Keys dropped from a full local limit: idle (lossless) or active (they start over).", &["limit", "kind"])?,
            reloads: counters(&r, "tollgate_config_reloads_total", "Config reloads, by result.", &["result"])?,
            in_flight: gauge(&r, "tollgate_in_flight_requests", "Requests being handled right now.")?,
            verdict_cache_hits: counters(&r, "tollgate_verdict_cache_hits_total", "Requests refused from the edge verdict cache, without asking Redis.", &["limit"])?,
            lease_decisions: counters(&r, "tollgate_lease_decisions_total", "Requests admitted from a budget lease (sync = \"lease\"), without asking Redis.", &["limit"])?,
            lease_returned: counters(&r, "tollgate_lease_returned_units_total", "Units of budget leases given back to Redis unspent (a slice ended, or shutdown).", &["limit"])?,
            redis_fallbacks: counters(&r, "tollgate_redis_fallback_total", "Global decisions Redis could not make, by limit and the on_error applied.", &["limit", "on_error"])?,
            quota_overage: counters(&r, "tollgate_quota_overage_total", "Requests admitted past their quota (overage strategies soft, overage, throttle).", &["limit"])?,
            quota_crossed: counters(&r, "tollgate_quota_usage_crossed_total", "Keys whose quota usage crossed 80, 95 or 100 percent this period (alert on increase).", &["limit", "threshold"])?,
            access_allowed: counters(&r, "tollgate_access_allowed_total", "Requests let through by an allow list (address or API key), skipping every limit.", &["route", "reason"])?,
            tarpit_held: gauges(&r, "tollgate_tarpit_held", "Requests held in a tarpit right now, by route.", &["route"])?,
            tarpit_total: counters(&r, "tollgate_tarpit_held_total", "Requests held in a tarpit before their answer, by route.", &["route"])?,
            blocks_not_recorded: counters(&r, "tollgate_blocks_not_recorded_total", "Blocks and refusal counts a limit's ladder could not record, by why: table_full (every entry of the block table is a block in force: a full table never lifts one for a newer one), counts_full (the refusal counts are full of keys refused at least as often).", &["limit", "why"])?,
            blocks_total: counters(&r, "tollgate_blocks_total", "Blocks imposed by this instance, by limit and ladder step (0 = first).", &["limit", "rung"])?,
            decisions: counters(&r, "tollgate_limit_decisions_total", "Decisions per limit: allowed, refused, shadow_refused (a shadow limit would have refused), blocked (an active block refused).", &["limit", "result"])?,
            upstream_ejections: counters(&r, "tollgate_upstream_ejections_total", "Upstream targets taken out of rotation by passive outlier ejection (failures in a row), by upstream.", &["upstream"])?,
            connections_open: gauge(&r, "tollgate_connections_open", "Downstream connections open in this process.")?,
            connections_refused: counters(&r, "tollgate_connections_refused_total", "Connections closed unread at accept: over max_connections or max_connections_per_client.", &["reason"])?,
            mirror_requests: counters(&r, "tollgate_mirror_requests_total", "Copies of requests sent to a route's mirror, by route and result: answered (the mirror answered; its answer is dropped), failed (no answer in time, or not reached), dropped (not sent: the mirrors in flight or their bodies were at their bound, the body was over the route's cap, or the request made no URL).", &["route", "result"])?,
            error_pages: counters(&r, "tollgate_error_pages_total", "Answers of a listed status replaced by the page of a route's error_pages upstream, by route and result: served, failed (the page's upstream gave no answer in time, had no target or its page was over 1 MiB: the original answer was sent).", &["route", "result"])?,
            passthrough: counters(&r, "tollgate_tls_passthrough_total", "TLS connections passed through unread by their ClientHello's name ([[tls_passthrough]]), by upstream and result: relayed, unreachable (no target, or it did not accept the connection in time).", &["upstream", "result"])?,
            cors_preflights: counters(&r, "tollgate_cors_preflights_total", "CORS preflights answered at the edge (never proxied), by route and result: allowed (with the route's CORS fields), refused (an origin not allowed: no CORS field).", &["route", "result"])?,
            compressed: counters(&r, "tollgate_compressed_responses_total", "Upstream answers compressed at the edge (compress = true), by route and encoding (gzip, br, zstd).", &["route", "encoding"])?,
            trace_exported: register(&r, IntCounter::new("tollgate_trace_spans_exported_total", "Trace spans the OTLP collector accepted.")?)?,
            trace_dropped: counters(&r, "tollgate_trace_spans_dropped_total", "Trace spans not exported, by reason (queue_full: the export queue was full; export_failed: the collector refused, failed or timed out).", &["reason"])?,
            rls_requests: counters(&r, "tollgate_rls_requests_total", "Rate limit service calls (envoy.service.ratelimit.v3), by configured domain (\"\" for others) and answer (ok, over_limit, invalid).", &["domain", "code"])?,
            rls_descriptors: counters(&r, "tollgate_rls_descriptors_total", "Rate limit service descriptors, by configured domain and whether a rule limited them (limited) or none matched (unknown).", &["domain", "result"])?,
            rls_hits: counters(&r, "tollgate_rls_hits_total", "Hits of [[rls.domains]] limits by envoyproxy/ratelimit's stats key and result (total_hits, over_limit, within_limit, shadow_mode).", &["key", "result"])?,
            rls_keys: Default::default(),
            rls_seconds: register(
                &r,
                prometheus::Histogram::with_opts(
                    HistogramOpts::new(
                        "tollgate_rls_decision_seconds",
                        "Time to decide one rate limit service call, Redis included.",
                    )
                    .buckets(vec![
                        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                        0.05, 0.1, 0.25,
                    ]),
                )?,
            )?,
            upstream_retries: counters(&r, "tollgate_upstream_retries_total", "Requests tried again on another target, by upstream and the failure retried on (connect, reset, timeout, 502, 503, 504).", &["upstream", "on"])?,
            request_headers_dropped: counters(&r, "tollgate_request_headers_dropped_total", "Request header fields removed on arrival, before anything read them (underscore: a name holding _, with [server] underscores_in_headers = false, as nginx).", &["reason"])?,
            upstream_retry_budget_exhausted: counters(&r, "tollgate_upstream_retry_budget_exhausted_total", "Retries not made because the upstream's retry budget (retry.budget) was spent.", &["upstream"])?,
            registry: r,
        };
        // Labels that exist from the start: an alert on increase() sees the first one.
        for result in ["ok", "error"] {
            m.reloads.with_label_values(&[result]);
        }
        for reason in ["max_connections", "max_connections_per_client"] {
            m.connections_refused.with_label_values(&[reason]);
        }
        Ok(m)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 * 1024);
        // Encoding into a Vec cannot fail for IO reasons; a malformed family is skipped.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }

    /// Brings a counter mirrored from elsewhere up to `value` (never down). A zero makes no
    /// series: one appears with the first count, as for every other counter.
    pub fn mirror(counters: &IntCounterVec, labels: &[&str], value: u64) {
        if value == 0 {
            return;
        }
        let counter = counters.with_label_values(labels);
        let now = counter.get();
        if value > now {
            counter.inc_by(value - now);
        }
    }
}

/// A gauge that mirrors state held elsewhere (a limit's keys, a target's health): written
/// from that state at each scrape ([`StateFamily`]) and never registered, so 5,000 limits and
/// 10,000 upstreams hold no series between scrapes (issue 40). `labels` are in name order,
/// as the registry writes them.
pub struct StateGauge {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

pub const LIMITER_KEYS: StateGauge = StateGauge {
    name: "tollgate_limiter_keys",
    help: "Keys held by a local limit in this process.",
    labels: &["limit"],
};
pub const UPSTREAM_TARGET_HEALTHY: StateGauge = StateGauge {
    name: "tollgate_upstream_target_healthy",
    help: "1 when an upstream target passes its health check.",
    labels: &["target", "upstream"],
};
/// Written for the ejected targets only: 1 while one is out.
pub const UPSTREAM_TARGET_EJECTED: StateGauge = StateGauge {
    name: "tollgate_upstream_target_ejected",
    help: "1 while passive outlier ejection holds an upstream target out of rotation (only such targets are listed).",
    labels: &["target", "upstream"],
};
pub const VERDICT_CACHE_ENTRIES: StateGauge = StateGauge {
    name: "tollgate_verdict_cache_entries",
    help: "Refusals a global limit remembers at the edge (bounded by [redis] verdict_cache).",
    labels: &["limit"],
};
pub const BLOCKS_ACTIVE: StateGauge = StateGauge {
    name: "tollgate_blocks_active",
    help: "Keys blocked right now by a limit's escalation ladder (here or, with Redis, by any instance).",
    labels: &["limit"],
};
pub const HOTTEST_KEY: StateGauge = StateGauge {
    name: "tollgate_limit_hottest_key_refusals",
    help: "The most refusals one key of this limit got in the current or last minute (this instance): one abusive client shows here without a label per key.",
    labels: &["limit"],
};

/// Every state gauge: names the registry does not hold, yet /metrics shows.
pub const STATE_GAUGES: [&StateGauge; 6] = [
    &LIMITER_KEYS,
    &UPSTREAM_TARGET_HEALTHY,
    &UPSTREAM_TARGET_EJECTED,
    &VERDICT_CACHE_ENTRIES,
    &BLOCKS_ACTIVE,
    &HOTTEST_KEY,
];

/// One state gauge's lines in a scrape, in the registry's text format: the `# HELP` and
/// `# TYPE` head with the first sample (a family without samples writes nothing).
pub struct StateFamily<'o> {
    out: &'o mut Vec<u8>,
    gauge: &'o StateGauge,
    started: bool,
}

impl<'o> StateFamily<'o> {
    pub fn new(out: &'o mut Vec<u8>, gauge: &'o StateGauge) -> Self {
        Self {
            out,
            gauge,
            started: false,
        }
    }

    /// One sample; `values` in the order of the gauge's `labels`.
    pub fn sample(&mut self, values: &[&str], value: i64) {
        use std::io::Write;
        let g = self.gauge;
        if !self.started {
            self.started = true;
            let _ = writeln!(self.out, "# HELP {} {}", g.name, g.help);
            let _ = writeln!(self.out, "# TYPE {} gauge", g.name);
        }
        self.out.extend_from_slice(g.name.as_bytes());
        for (i, (k, v)) in g.labels.iter().zip(values).enumerate() {
            self.out.push(if i == 0 { b'{' } else { b',' });
            self.out.extend_from_slice(k.as_bytes());
            self.out.extend_from_slice(b"=\"");
            for &c in v.as_bytes() {
                match c {
                    b'\\' => self.out.extend_from_slice(b"\\\\"),
                    b'"' => self.out.extend_from_slice(b"\\\""),
                    b'\n' => self.out.extend_from_slice(b"\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push(b'"');
        }
        if !g.labels.is_empty() {
            self.out.push(b'}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// The `status` label of a status code, without an allocation per request.
pub fn status_str(status: u16) -> &'static str {
    // Label strings for every status, made once.
    static TABLE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| (0..600).map(|s| s.to_string()).collect())
        .get(status as usize)
        .map(String::as_str)
        .unwrap_or("0")
}

#[cfg(test)]
mod dashboard {
    use prometheus::core::Collector;

    /// Every metric deploy/grafana/tollgate.json queries is one the gateway registers: the
    /// process's registry (proxy, Redis store and TLS families) refuses a second family of that
    /// name. A name it accepts is one no Tollgate exports: the panel would stay empty.
    #[test]
    fn the_dashboard_queries_only_metrics_the_gateway_exports() {
        let m = super::Metrics::new().expect("metrics");
        tollgate_store::StoreMetrics::register(&m.registry).expect("store metrics");
        crate::tls::listener::TlsMetrics::register(&m.registry).expect("tls metrics");
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/grafana/tollgate.json"
        );
        let dash: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard"))
                .expect("the dashboard is JSON");
        let mut exprs = Vec::new();
        for p in dash["panels"].as_array().expect("panels") {
            for t in p["targets"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                exprs.push(t["expr"].as_str().expect("an expr").to_string());
            }
        }
        assert!(exprs.len() >= 20, "{} queries", exprs.len());
        let re = regex::Regex::new(r"\b((?:tollgate|http)_[a-z0-9_]+)\b").expect("regex");
        let mut names = std::collections::BTreeSet::new();
        for e in &exprs {
            for c in re.captures_iter(e) {
                let n = &c[1];
                // A histogram's series: its family is the name without the suffix.
                let family = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| n.strip_suffix(s).filter(|f| f.ends_with("_seconds")))
                    .unwrap_or(n);
                names.insert(family.to_string());
            }
        }
        assert!(names.len() >= 25, "{names:?}");
        for name in &names {
            if super::STATE_GAUGES.iter().any(|g| g.name == name) {
                continue;
            }
            let probe = prometheus::IntGauge::new(name.as_str(), "probe").expect("a metric name");
            assert!(!probe.desc().is_empty());
            assert!(
                m.registry.register(Box::new(probe)).is_err(),
                "the dashboard queries {name}, which the gateway does not export"
            );
        }
        // And the check can fail: a name nobody exports is accepted.
        let unknown = prometheus::IntGauge::new("tollgate_no_such_metric", "probe").expect("name");
        assert!(m.registry.register(Box::new(unknown)).is_ok());
    }
}

#[cfg(test)]
mod state {
    use super::*;

    /// A state gauge is written as the registry writes a gauge vec: the head once, labels in
    /// name order, values escaped; a family without samples writes nothing, and its name is
    /// one the registry does not also hold (two families of one name break a scrape).
    #[test]
    fn state_gauges_are_written_as_the_registry_would() {
        let mut out = Vec::new();
        StateFamily::new(&mut out, &BLOCKS_ACTIVE);
        assert!(out.is_empty());
        let mut f = StateFamily::new(&mut out, &UPSTREAM_TARGET_HEALTHY);
        f.sample(&["10.0.0.1:80", "a\"b\\c\nd"], 1);
        f.sample(&["10.0.0.2:80", "u"], 0);
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "# HELP tollgate_upstream_target_healthy 1 when an upstream target passes its health check.\n\
             # TYPE tollgate_upstream_target_healthy gauge\n\
             tollgate_upstream_target_healthy{target=\"10.0.0.1:80\",upstream=\"a\\\"b\\\\c\\nd\"} 1\n\
             tollgate_upstream_target_healthy{target=\"10.0.0.2:80\",upstream=\"u\"} 0\n"
        );
        // The same sample from a registered vec reads the same.
        let r = Registry::new();
        let v = gauges(
            &r,
            UPSTREAM_TARGET_HEALTHY.name,
            UPSTREAM_TARGET_HEALTHY.help,
            &["upstream", "target"],
        )
        .expect("vec");
        v.with_label_values(&["u", "10.0.0.2:80"]).set(0);
        let mut reg = Vec::new();
        TextEncoder::new()
            .encode(&r.gather(), &mut reg)
            .expect("encode");
        let reg = String::from_utf8(reg).expect("utf-8");
        let ours: Vec<&str> = text.lines().filter(|l| !l.contains("10.0.0.1")).collect();
        assert_eq!(reg.lines().collect::<Vec<_>>(), ours);
        let m = Metrics::new().expect("metrics");
        for g in STATE_GAUGES {
            let probe = IntGauge::new(g.name, "probe").expect("a metric name");
            assert!(
                m.registry.register(Box::new(probe)).is_ok(),
                "{} is registered too",
                g.name
            );
        }
    }
}
