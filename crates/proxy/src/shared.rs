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
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tollgate_config::model::Config;
use tollgate_core::error::BuildError;
use tollgate_core::observe::metrics::{
    Metrics, StateFamily, BLOCKS_ACTIVE, HOTTEST_KEY, LIMITER_KEYS, UPSTREAM_TARGET_EJECTED,
    UPSTREAM_TARGET_HEALTHY, VERDICT_CACHE_ENTRIES,
};
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
    pub tls: Option<Arc<tollgate_core::tls::listener::Certificates>>,
    /// The rate limit service (`[rls]`) is accepting calls.
    pub rls_serving: std::sync::atomic::AtomicBool,
    /// Under `run --kubernetes`: the cluster's config has not been served yet (every watched
    /// kind listed once and the translation loaded); /readyz says starting meanwhile.
    pub kube_syncing: std::sync::atomic::AtomicBool,
    /// Trace spans waiting for export (`[tracing]`).
    pub spans: tollgate_core::observe::traces::SpanQueue,
    /// Routes' `mirror` copies: their client and bounds.
    pub mirrors: tollgate_core::net::mirror::Mirrors,
    /// The client mirrors and error pages are sent with (made at the first use).
    pub side_client: Arc<tollgate_core::net::client::Side>,
}

impl Shared {
    pub fn new(config: Config, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        let metrics = Metrics::new()?;
        let store: Option<Arc<dyn GlobalStore>> = match &config.redis {
            Some(r) => {
                let target = match &r.target {
                    tollgate_config::model::RedisTarget::Url(u) => Target::Single(u.clone()),
                    tollgate_config::model::RedisTarget::Cluster(n) => Target::Cluster(n.clone()),
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
                let tm = tollgate_core::tls::listener::TlsMetrics::register(&metrics.registry)?;
                let certs = tollgate_core::tls::listener::Certificates::load(t, tm)
                    .map_err(BuildError::Tls)?;
                Some(Arc::new(certs))
            }
            None => None,
        };
        let runtime = Runtime::build(config, None, store.as_ref(), &metrics)?;
        let side_client = Arc::new(tollgate_core::net::client::Side::default());
        Ok(Self {
            spans: tollgate_core::observe::traces::SpanQueue::default(),
            mirrors: tollgate_core::net::mirror::Mirrors::new(
                metrics.mirror_requests.clone(),
                side_client.clone(),
            ),
            side_client,
            rls_serving: std::sync::atomic::AtomicBool::new(false),
            kube_syncing: std::sync::atomic::AtomicBool::new(false),
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
            if let Err(errors) = tollgate_core::tls::listener::check(t) {
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

    /// What /metrics answers: the registry, then the gauges that mirror state held elsewhere
    /// (limits, blocks, targets), written from that state at each scrape and not kept
    /// ([`tollgate_core::observe::metrics::StateGauge`]).
    pub fn scrape(&self) -> Vec<u8> {
        if let Some(store) = &self.store {
            store.publish();
        }
        self.metrics.in_flight.set(crate::ctx::in_flight() as i64);
        let rt = self.runtime.load();
        let mut state = Vec::new();
        self.limiter_gauges(&rt, &mut state);
        self.block_gauges(&rt, &mut state);
        let mut ejected = Vec::new();
        let mut f = StateFamily::new(&mut state, &UPSTREAM_TARGET_HEALTHY);
        let mut addr = String::new();
        let mut written: HashSet<std::net::SocketAddr> = HashSet::new();
        for u in &rt.upstreams {
            let targets = u.pool.targets();
            written.clear();
            for t in targets.iter() {
                use std::fmt::Write;
                // Two written targets on one address are one series (as the registry did).
                if targets.len() > 1 && !written.insert(t.addr) {
                    continue;
                }
                addr.clear();
                let _ = write!(addr, "{}", t.addr);
                f.sample(&[&addr, &u.cfg().name], t.healthy() as i64);
                if t.ejected() {
                    ejected.push((addr.clone(), u.cfg().name.as_str()));
                }
            }
        }
        let mut f = StateFamily::new(&mut state, &UPSTREAM_TARGET_EJECTED);
        for (addr, upstream) in &ejected {
            f.sample(&[addr, upstream], 1);
        }
        let mut out = self.metrics.encode();
        out.extend_from_slice(&state);
        out
    }

    /// Each limit's keys, evictions and cached refusals (a plan limit's variants added up).
    fn limiter_gauges(&self, rt: &Runtime, out: &mut Vec<u8>) {
        // A plan limit has one variant per plan under one name: their figures add up.
        let mut at: HashMap<&str, usize> = HashMap::with_capacity(rt.limits.len());
        let mut per_name: Vec<(&str, Option<usize>, StoreStats)> = Vec::new();
        for l in &rt.limits {
            let name = l.cfg.name.as_str();
            let i = *at.entry(name).or_insert_with(|| {
                per_name.push((name, None, StoreStats::default()));
                per_name.len() - 1
            });
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
        let mut cached = StateFamily::new(out, &VERDICT_CACHE_ENTRIES);
        for (name, cache, _) in &per_name {
            if let Some(live) = cache {
                cached.sample(&[name], *live as i64);
            }
        }
        let mut keys = StateFamily::new(out, &LIMITER_KEYS);
        for (name, _, s) in &per_name {
            keys.sample(&[name], s.keys as i64);
        }
        let evicted = &self.metrics.limiter_evicted;
        for (name, _, s) in &per_name {
            Metrics::mirror(evicted, &[name, "idle"], s.evicted_idle);
            Metrics::mirror(evicted, &[name, "active"], s.evicted_active);
            // A refused key evicted: max_keys is too small for what it must hold back.
            Metrics::mirror(evicted, &[name, "refused"], s.evicted_refused);
        }
    }

    /// The hottest key's rate per limit, and each ladder's blocks in force and blocks it
    /// could not record.
    fn block_gauges(&self, rt: &Runtime, out: &mut Vec<u8>) {
        let now = self.clock.now();
        // A plan limit's variants share its name: one sample, the hottest of them.
        let mut hot: Vec<(&str, u64)> = Vec::with_capacity(rt.limits.len());
        let mut at: HashMap<&str, usize> = HashMap::with_capacity(rt.limits.len());
        for l in &rt.limits {
            let v = l.hot.max(now);
            match at.get(l.cfg.name.as_str()) {
                Some(&i) => hot[i].1 = hot[i].1.max(v),
                None => {
                    at.insert(&l.cfg.name, hot.len());
                    hot.push((&l.cfg.name, v));
                }
            }
        }
        let mut hottest = StateFamily::new(out, &HOTTEST_KEY);
        for (name, v) in hot {
            hottest.sample(&[name], v as i64);
        }
        let mut seen: HashSet<&str> = HashSet::new();
        let mut active = StateFamily::new(out, &BLOCKS_ACTIVE);
        for l in &rt.limits {
            let Some(lad) = &l.ladder else { continue };
            if !seen.insert(&l.cfg.name) {
                continue;
            }
            active.sample(&[&l.cfg.name], lad.ladder.blocks.active(now) as i64);
            for (why, total) in [
                ("table_full", lad.ladder.blocks.refused_full()),
                ("counts_full", lad.ladder.untracked()),
            ] {
                if total == 0 {
                    continue;
                }
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
