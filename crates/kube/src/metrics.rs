//! `tollgate_kube_*`: what the controller did with the cluster.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The kinds watched, as the metrics label them.
pub const KINDS: [&str; 7] = [
    "IngressClass",
    "Ingress",
    "Service",
    "EndpointSlice",
    "ControllerConfigMap",
    "ConfigMap",
    "Secret",
];

#[derive(Clone)]
pub struct KubeMetrics {
    /// Translations handed to the gateway, and endpoint updates placed, by `result` (`ok`,
    /// `error`: the config was refused and the last good one serves).
    pub syncs: IntCounterVec,
    /// Endpoint changes placed without a translation (the pools took them up, no reload).
    pub endpoint_updates: IntCounter,
    /// When the last translation was served, Unix seconds.
    pub last_sync: IntGauge,
    /// Objects in each reflector, by `kind`.
    pub objects: IntGaugeVec,
    /// Translation problems first seen, by the `kind` of the object they concern.
    pub problems: IntCounterVec,
    /// Watches that failed and were started again, or re-listed (a 410 Gone), by `kind`.
    pub restarts: IntCounterVec,
    /// 1 while this replica holds the status Lease.
    pub leader: IntGauge,
}

impl KubeMetrics {
    pub fn register(r: &Registry) -> Result<Self, prometheus::Error> {
        let syncs = IntCounterVec::new(
            Opts::new(
                "tollgate_kube_syncs_total",
                "Cluster translations handed to the gateway, by result",
            ),
            &["result"],
        )?;
        let endpoint_updates = IntCounter::new(
            "tollgate_kube_endpoint_updates_total",
            "Endpoint changes placed in the pools without a reload",
        )?;
        let last_sync = IntGauge::new(
            "tollgate_kube_last_sync_timestamp_seconds",
            "When the cluster's config was last served, Unix seconds",
        )?;
        let objects = IntGaugeVec::new(
            Opts::new("tollgate_kube_objects", "Objects watched, by kind"),
            &["kind"],
        )?;
        let problems = IntCounterVec::new(
            Opts::new(
                "tollgate_kube_translation_problems_total",
                "Translation problems first seen, by the kind of object",
            ),
            &["kind"],
        )?;
        let restarts = IntCounterVec::new(
            Opts::new(
                "tollgate_kube_watch_restarts_total",
                "Watches restarted or re-listed, by kind",
            ),
            &["kind"],
        )?;
        let leader = IntGauge::new(
            "tollgate_kube_leader",
            "1 while this replica holds the status Lease",
        )?;
        r.register(Box::new(syncs.clone()))?;
        r.register(Box::new(last_sync.clone()))?;
        r.register(Box::new(endpoint_updates.clone()))?;
        r.register(Box::new(objects.clone()))?;
        r.register(Box::new(problems.clone()))?;
        r.register(Box::new(restarts.clone()))?;
        r.register(Box::new(leader.clone()))?;
        for res in ["ok", "error"] {
            syncs.with_label_values(&[res]);
        }
        for k in KINDS {
            restarts.with_label_values(&[k]);
            problems.with_label_values(&[k]);
        }
        Ok(KubeMetrics {
            syncs,
            endpoint_updates,
            last_sync,
            objects,
            problems,
            restarts,
            leader,
        })
    }
}
