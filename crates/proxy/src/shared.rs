//! The live process around the compiled model: the runtime now serving (behind an
//! `ArcSwap`, so a reload is one pointer swap and requests in flight finish on the runtime
//! they started with), the Redis store, the connection bounds, the certificates, the metrics
//! registry and the gauges it refreshes at every scrape. [`crate::runtime`] holds the model
//! itself: what a config compiles to, immutable.

use crate::limits::compiled::LimitState;
use crate::limits::identity::KeyHasher;
use crate::runtime::Runtime;
use arc_swap::ArcSwap;
use pingora::protocols::l4::socket::SocketAddr;
use pingora::services::listening::ConnectionAdmission;
use std::sync::Arc;
use tollgate_config::Config;
use tollgate_core::error::BuildError;
use tollgate_core::observe::metrics::Metrics;
use tollgate_limit::{Clock, StoreStats};
use tollgate_store::{GlobalStore, RedisConfig, RedisStore, StoreMetrics, Target};

/// What lives for the whole process: the current runtime, metrics, the clock, the key hasher,
/// and the Redis store (made from `[redis]` at start; connections follow the worker threads).
pub struct Shared {
    pub runtime: ArcSwap<Runtime>,
    pub metrics: Metrics,
    pub clock: Arc<dyn Clock>,
    pub hasher: KeyHasher,
    pub store: Option<Arc<dyn GlobalStore>>,
    /// Open downstream connections, bounded by `[server]` max_connections(_per_client).
    pub connections: Arc<tollgate_core::connections::Connections>,
    /// The TLS listeners' certificates (`[tls]` at start), renewed in place.
    pub tls: Option<Arc<tollgate_core::tls::Certificates>>,
    /// The rate limit service (`[rls]`) is accepting calls.
    pub rls_serving: std::sync::atomic::AtomicBool,
    /// Trace spans waiting for export (`[tracing]`).
    pub spans: tollgate_core::observe::traces::SpanQueue,
}

impl Shared {
    pub fn new(config: Config, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        let metrics = Metrics::new()?;
        let store: Option<Arc<dyn GlobalStore>> = match &config.redis {
            Some(r) => {
                let target = match &r.target {
                    tollgate_config::RedisTarget::Url(u) => Target::Single(u.clone()),
                    tollgate_config::RedisTarget::Cluster(n) => Target::Cluster(n.clone()),
                };
                // One connection per worker thread, one for the background prober.
                let mut rc = RedisConfig::new(target, r.timeout, config.server.threads + 1);
                rc.tls = r.tls.as_ref().map(|t| tollgate_store::Tls {
                    ca: t.ca.clone(),
                    client_cert: t
                        .client_cert
                        .as_ref()
                        .map(|c| (c.cert.clone(), c.key.clone())),
                });
                rc.password = r.password.clone();
                rc.max_in_flight = r.max_in_flight;
                let sm = StoreMetrics::register(&metrics.registry)?;
                Some(Arc::new(RedisStore::new(&rc, clock.clone(), sm)?))
            }
            None => None,
        };
        let tls = match &config.tls {
            Some(t) => {
                let tm = tollgate_core::tls::TlsMetrics::register(&metrics.registry)?;
                let certs =
                    tollgate_core::tls::Certificates::load(t, tm).map_err(BuildError::Tls)?;
                Some(Arc::new(certs))
            }
            None => None,
        };
        let runtime = Runtime::build(config, None, store.as_ref(), &metrics)?;
        Ok(Self {
            spans: tollgate_core::observe::traces::SpanQueue::default(),
            rls_serving: std::sync::atomic::AtomicBool::new(false),
            tls,
            runtime: ArcSwap::from_pointee(runtime),
            connections: Arc::new(tollgate_core::connections::Connections::new(
                metrics.connections_open.clone(),
                metrics
                    .connections_refused
                    .with_label_values(&["max_connections"]),
                metrics
                    .connections_refused
                    .with_label_values(&["max_connections_per_client"]),
            )),
            metrics,
            clock,
            hasher: KeyHasher::new(),
            store,
        })
    }

    /// Builds a runtime for `config` and makes it current. On error the old one keeps serving.
    pub fn reload(&self, config: Config) -> Result<(), BuildError> {
        let current = self.runtime.load_full();
        // A changed [tls]: what check and start would refuse, a reload refuses too
        // (certificates renewed in place are taken one by one by the watcher instead).
        let tls_changed = current.config.tls.as_ref() != config.tls.as_ref();
        if let (Some(_), Some(t), true) = (&self.tls, &config.tls, tls_changed) {
            if let Err(errors) = tollgate_core::tls::check(t) {
                self.metrics.reloads.with_label_values(&["error"]).inc();
                return Err(BuildError::Tls(errors));
            }
        }
        match Runtime::build(config, Some(&current), self.store.as_ref(), &self.metrics) {
            Ok(rt) => {
                if let (Some(certs), Some(t)) = (&self.tls, &rt.config.tls) {
                    // Certificates are swapped one by one: a broken one keeps its predecessor.
                    certs.reconfigure(t);
                }
                self.runtime.store(Arc::new(rt));
                self.metrics.reloads.with_label_values(&["ok"]).inc();
                Ok(())
            }
            Err(e) => {
                self.metrics.reloads.with_label_values(&["error"]).inc();
                Err(e)
            }
        }
    }

    /// Refreshes the gauges that mirror state held elsewhere (called per /metrics scrape).
    pub fn refresh_gauges(&self) {
        if let Some(store) = &self.store {
            store.publish();
        }
        self.metrics.in_flight.set(crate::ctx::in_flight() as i64);
        let rt = self.runtime.load();
        self.limiter_gauges(&rt);
        self.block_gauges(&rt);
        for u in &rt.upstreams {
            for t in u.pool.targets().iter() {
                self.metrics
                    .upstream_healthy
                    .with_label_values(&[&u.cfg().name, &t.addr.to_string()])
                    .set(t.healthy() as i64);
            }
        }
    }

    /// Each limit's keys, evictions and cached refusals (a plan limit's variants added up).
    fn limiter_gauges(&self, rt: &Runtime) {
        // A plan limit has one variant per plan under one name: their figures add up.
        let mut per_name: Vec<(&str, Option<usize>, StoreStats)> = Vec::new();
        for l in &rt.limits {
            let name = l.cfg.name.as_str();
            let i = match per_name.iter().position(|(n, _, _)| *n == name) {
                Some(i) => i,
                None => {
                    per_name.push((name, None, StoreStats::default()));
                    per_name.len() - 1
                }
            };
            let entry = &mut per_name[i];
            if let LimitState::Global(g) = &l.state {
                *entry.1.get_or_insert(0) += g.cache.live(self.clock.now());
            }
            let limiter = match &l.state {
                LimitState::Local(l) => Some(l),
                LimitState::Global(g) => Some(&g.fallback),
            };
            if let Some(limiter) = limiter {
                let s = limiter.stats();
                entry.2.keys += s.keys;
                entry.2.evicted_idle += s.evicted_idle;
                entry.2.evicted_active += s.evicted_active;
                entry.2.evicted_refused += s.evicted_refused;
            }
        }
        for (name, cache, s) in per_name {
            if let Some(live) = cache {
                self.metrics
                    .verdict_cache_entries
                    .with_label_values(&[name])
                    .set(live as i64);
            }
            self.metrics
                .limiter_keys
                .with_label_values(&[name])
                .set(s.keys as i64);
            Metrics::mirror(
                &self
                    .metrics
                    .limiter_evicted
                    .with_label_values(&[name, "idle"]),
                s.evicted_idle,
            );
            Metrics::mirror(
                &self
                    .metrics
                    .limiter_evicted
                    .with_label_values(&[name, "active"]),
                s.evicted_active,
            );
            // A refused key evicted: max_keys is too small for what it must hold back.
            Metrics::mirror(
                &self
                    .metrics
                    .limiter_evicted
                    .with_label_values(&[name, "refused"]),
                s.evicted_refused,
            );
        }
    }

    /// The hottest key's rate per limit, and each ladder's blocks in force and blocks it
    /// could not record.
    fn block_gauges(&self, rt: &Runtime) {
        let now = self.clock.now();
        let mut seen: Vec<&str> = Vec::new();
        for l in &rt.limits {
            self.metrics
                .hottest_key
                .with_label_values(&[&l.cfg.name])
                .set(l.hot.max(now) as i64);
        }
        for l in &rt.limits {
            if let Some(lad) = &l.ladder {
                if !seen.contains(&l.cfg.name.as_str()) {
                    seen.push(&l.cfg.name);
                    self.metrics
                        .blocks_active
                        .with_label_values(&[&l.cfg.name])
                        .set(lad.ladder.blocks.active(now) as i64);
                    for (why, total) in [
                        ("table_full", lad.ladder.blocks.refused_full()),
                        ("counts_full", lad.ladder.untracked()),
                    ] {
                        let c = self
                            .metrics
                            .blocks_not_recorded
                            .with_label_values(&[&l.cfg.name, why]);
                        let shown = c.get();
                        if total > shown {
                            if shown == 0 {
                                tracing::warn!(
                                    event = "blocks_not_recorded",
                                    limit = %l.cfg.name,
                                    why,
                                    "this limit's ladder is full: new keys are limited but not blocked (blocks in force are never lifted to make room); counted in tollgate_blocks_not_recorded_total"
                                );
                            }
                            c.inc_by(total - shown);
                        }
                    }
                }
            }
        }
    }
}

/// The bounds as the listeners apply them: a slot is taken right after accept, before the TLS
/// handshake (vendor patch 0006), and held until the connection ends, so handshakes in
/// progress count like every other connection.
pub struct Admission {
    shared: Arc<Shared>,
}

impl Admission {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl ConnectionAdmission for Admission {
    fn admit(&self, peer: Option<&SocketAddr>) -> Option<Box<dyn std::any::Any + Send>> {
        let rt = self.shared.runtime.load();
        let server = &rt.config.server;
        let h = &server.hardening;
        let client = peer.and_then(|a| a.as_inet()).map(|a| {
            crate::limits::identity::key_ip(
                tollgate_core::client_ip::fold(a.ip()),
                server.ipv6_prefix,
            )
        });
        let (max, per_client) = (
            tollgate_core::connections::effective_max_connections(h.max_connections),
            h.max_connections_per_client,
        );
        drop(rt);
        let slot = self
            .shared
            .connections
            .admit(client, max, per_client)
            .ok()?;
        Some(Box::new(slot))
    }
}
