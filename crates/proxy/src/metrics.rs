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
    pub limiter_keys: IntGaugeVec,
    pub limiter_evicted: IntCounterVec,
    pub upstream_healthy: IntGaugeVec,
    pub reloads: IntCounterVec,
    pub in_flight: IntGauge,
    pub verdict_cache_hits: IntCounterVec,
    pub lease_decisions: IntCounterVec,
    pub lease_returned: IntCounterVec,
    pub verdict_cache_entries: IntGaugeVec,
    pub redis_fallbacks: IntCounterVec,
    pub quota_overage: IntCounterVec,
    pub quota_crossed: IntCounterVec,
    pub access_allowed: IntCounterVec,
    pub tarpit_held: IntGaugeVec,
    pub tarpit_total: IntCounterVec,
    pub blocks_active: IntGaugeVec,
    /// `tollgate_blocks_not_recorded_total{limit,why}`
    pub blocks_not_recorded: IntCounterVec,
    pub blocks_total: IntCounterVec,
    pub decisions: IntCounterVec,
    pub hottest_key: IntGaugeVec,
    pub connections_open: IntGauge,
    pub connections_refused: IntCounterVec,
}

/// Label for requests that matched no route.
pub const NO_ROUTE: &str = "";

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "http_requests_total",
                "Requests answered, by route and status.",
            ),
            &["route", "status"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "http_requests_rejected_total",
                "Requests refused at the edge, by reason, route and limit.",
            ),
            &["reason", "route", "limit"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "Time from request header to the end of the response, by route.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            &["route"],
        )?;
        let shadow_exceeded = IntCounterVec::new(
            Opts::new(
                "tollgate_shadow_exceeded_total",
                "Requests a shadow-mode limit would have refused (passed on, marked toward the upstream).",
            ),
            &["limit"],
        )?;
        let limiter_keys = IntGaugeVec::new(
            Opts::new(
                "tollgate_limiter_keys",
                "Keys held by a local limit in this process.",
            ),
            &["limit"],
        )?;
        let limiter_evicted = IntCounterVec::new(
            Opts::new(
                "tollgate_limiter_evicted_keys_total",
                "Keys dropped from a full local limit: idle (lossless) or active (they start over).",
            ),
            &["limit", "kind"],
        )?;
        let upstream_healthy = IntGaugeVec::new(
            Opts::new(
                "tollgate_upstream_target_healthy",
                "1 when an upstream target passes its health check.",
            ),
            &["upstream", "target"],
        )?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "tollgate_config_reloads_total",
                "Config reloads, by result.",
            ),
            &["result"],
        )?;
        // Both results exist from the start: an alert on increase() sees the first failure.
        for r in ["ok", "error"] {
            reloads.with_label_values(&[r]);
        }
        let in_flight = IntGauge::new(
            "tollgate_in_flight_requests",
            "Requests being handled right now.",
        )?;
        let verdict_cache_hits = IntCounterVec::new(
            Opts::new(
                "tollgate_verdict_cache_hits_total",
                "Requests refused from the edge verdict cache, without asking Redis.",
            ),
            &["limit"],
        )?;
        let lease_decisions = IntCounterVec::new(
            Opts::new(
                "tollgate_lease_decisions_total",
                "Requests admitted from a budget lease (sync = \"lease\"), without asking Redis.",
            ),
            &["limit"],
        )?;
        let lease_returned = IntCounterVec::new(
            Opts::new(
                "tollgate_lease_returned_units_total",
                "Units of budget leases given back to Redis unspent (a slice ended, or shutdown).",
            ),
            &["limit"],
        )?;
        let access_allowed = IntCounterVec::new(
            Opts::new(
                "tollgate_access_allowed_total",
                "Requests let through by an allow list (address or API key), skipping every limit.",
            ),
            &["route", "reason"],
        )?;
        let tarpit_held = IntGaugeVec::new(
            Opts::new(
                "tollgate_tarpit_held",
                "Requests held in a tarpit right now, by route.",
            ),
            &["route"],
        )?;
        let tarpit_total = IntCounterVec::new(
            Opts::new(
                "tollgate_tarpit_held_total",
                "Requests held in a tarpit before their answer, by route.",
            ),
            &["route"],
        )?;
        let blocks_active = IntGaugeVec::new(
            Opts::new(
                "tollgate_blocks_active",
                "Keys blocked right now by a limit's escalation ladder (here or, with Redis, by any instance).",
            ),
            &["limit"],
        )?;
        let blocks_not_recorded = IntCounterVec::new(
            Opts::new(
                "tollgate_blocks_not_recorded_total",
                "Blocks and refusal counts a limit's ladder could not record, by why: table_full (every entry of the block table is a block in force: a full table never lifts one for a newer one), counts_full (the refusal counts are full of keys refused at least as often).",
            ),
            &["limit", "why"],
        )?;
        let decisions = IntCounterVec::new(
            Opts::new(
                "tollgate_limit_decisions_total",
                "Decisions per limit: allowed, refused, shadow_refused (a shadow limit would have refused), blocked (an active block refused).",
            ),
            &["limit", "result"],
        )?;
        let hottest_key = IntGaugeVec::new(
            Opts::new(
                "tollgate_limit_hottest_key_refusals",
                "The most refusals one key of this limit got in the current or last minute (this instance): one abusive client shows here without a label per key.",
            ),
            &["limit"],
        )?;
        let blocks_total = IntCounterVec::new(
            Opts::new(
                "tollgate_blocks_total",
                "Blocks imposed by this instance, by limit and ladder step (0 = first).",
            ),
            &["limit", "rung"],
        )?;
        let redis_fallbacks = IntCounterVec::new(
            Opts::new(
                "tollgate_redis_fallback_total",
                "Global decisions Redis could not make, by limit and the on_error applied.",
            ),
            &["limit", "on_error"],
        )?;
        let verdict_cache_entries = IntGaugeVec::new(
            Opts::new(
                "tollgate_verdict_cache_entries",
                "Refusals a global limit remembers at the edge (bounded by [redis] verdict_cache).",
            ),
            &["limit"],
        )?;
        let quota_overage = IntCounterVec::new(
            Opts::new(
                "tollgate_quota_overage_total",
                "Requests admitted past their quota (overage strategies soft, overage, throttle).",
            ),
            &["limit"],
        )?;
        let quota_crossed = IntCounterVec::new(
            Opts::new(
                "tollgate_quota_usage_crossed_total",
                "Keys whose quota usage crossed 80, 95 or 100 percent this period (alert on increase).",
            ),
            &["limit", "threshold"],
        )?;
        let connections_open = IntGauge::new(
            "tollgate_connections_open",
            "Downstream connections open in this process.",
        )?;
        let connections_refused = IntCounterVec::new(
            Opts::new(
                "tollgate_connections_refused_total",
                "Connections closed unread at accept: over max_connections or max_connections_per_client.",
            ),
            &["reason"],
        )?;
        for r in ["max_connections", "max_connections_per_client"] {
            connections_refused.with_label_values(&[r]);
        }
        registry.register(Box::new(connections_open.clone()))?;
        registry.register(Box::new(connections_refused.clone()))?;
        registry.register(Box::new(access_allowed.clone()))?;
        registry.register(Box::new(tarpit_held.clone()))?;
        registry.register(Box::new(tarpit_total.clone()))?;
        registry.register(Box::new(blocks_active.clone()))?;
        registry.register(Box::new(blocks_not_recorded.clone()))?;
        registry.register(Box::new(blocks_total.clone()))?;
        registry.register(Box::new(decisions.clone()))?;
        registry.register(Box::new(hottest_key.clone()))?;
        registry.register(Box::new(quota_overage.clone()))?;
        registry.register(Box::new(quota_crossed.clone()))?;
        registry.register(Box::new(verdict_cache_hits.clone()))?;
        registry.register(Box::new(lease_decisions.clone()))?;
        registry.register(Box::new(lease_returned.clone()))?;
        registry.register(Box::new(verdict_cache_entries.clone()))?;
        registry.register(Box::new(redis_fallbacks.clone()))?;
        registry.register(Box::new(crate::logguard::SUPPRESSED.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(shadow_exceeded.clone()))?;
        registry.register(Box::new(limiter_keys.clone()))?;
        registry.register(Box::new(limiter_evicted.clone()))?;
        registry.register(Box::new(upstream_healthy.clone()))?;
        registry.register(Box::new(reloads.clone()))?;
        Ok(Self {
            registry,
            requests,
            rejected,
            duration,
            shadow_exceeded,
            limiter_keys,
            limiter_evicted,
            upstream_healthy,
            reloads,
            in_flight,
            verdict_cache_hits,
            lease_decisions,
            lease_returned,
            verdict_cache_entries,
            redis_fallbacks,
            quota_overage,
            quota_crossed,
            access_allowed,
            tarpit_held,
            tarpit_total,
            blocks_active,
            blocks_not_recorded,
            blocks_total,
            decisions,
            hottest_key,
            connections_open,
            connections_refused,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 * 1024);
        // Encoding into a Vec cannot fail for IO reasons; a malformed family is skipped.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }

    /// Brings a counter mirrored from elsewhere up to `value` (never down).
    pub fn mirror(counter: &IntCounter, value: u64) {
        let now = counter.get();
        if value > now {
            counter.inc_by(value - now);
        }
    }
}
