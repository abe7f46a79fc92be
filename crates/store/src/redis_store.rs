//! [`GlobalStore`] on Redis or Redis Cluster.
//!
//! Connections: one multiplexed connection per worker thread (made lazily on the thread's own
//! runtime, so a decision never hops threads), reconnecting in the background after a failure
//! (`ConnectionManager`; the cluster client reconnects per node). Concurrent decisions on one
//! thread share its connection and are pipelined on it.
//!
//! Every call is bounded by `timeout` and goes through the [`Breaker`]; errors, latency and the
//! up state are exported as metrics.

use crate::breaker::Breaker;
use crate::scripts::{script_source, ScriptReply};
use crate::{BoxFuture, GlobalKey, GlobalStore, StoreError};
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use tollgate_limit::{AlgorithmKind, Clock, Decision, LimitSpec};

/// Where the shared state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://host:port[/db]`
    Single(String),
    /// Seed nodes of a Redis Cluster; the rest of the topology is discovered.
    Cluster(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: Target,
    /// Budget of one decision, connection set-up included.
    pub timeout: Duration,
    /// Connections to open (one per worker thread is right; threads share when fewer).
    pub connections: usize,
    /// Failures in a row that open the breaker.
    pub breaker_threshold: u32,
    pub breaker_backoff: Duration,
    pub breaker_max_backoff: Duration,
}

impl RedisConfig {
    pub fn new(target: Target, timeout: Duration, connections: usize) -> Self {
        Self {
            target,
            timeout,
            connections,
            breaker_threshold: 5,
            breaker_backoff: Duration::from_millis(500),
            breaker_max_backoff: Duration::from_secs(5),
        }
    }
}

/// The store's metrics, registered in the process's registry.
#[derive(Clone)]
pub struct StoreMetrics {
    pub calls: IntCounterVec,
    pub errors: IntCounterVec,
    pub latency: Histogram,
    pub up: IntGauge,
}

impl StoreMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let calls = IntCounterVec::new(
            Opts::new(
                "tollgate_redis_calls_total",
                "Limiter script calls sent to Redis, by operation.",
            ),
            &["op"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "tollgate_redis_errors_total",
                "Failed Redis calls, by kind (timeout, connection, redis, reply, circuit_open).",
            ),
            &["kind"],
        )?;
        let latency = Histogram::with_opts(
            HistogramOpts::new(
                "tollgate_redis_latency_seconds",
                "Time for one limiter call to Redis, answered or failed.",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
            ]),
        )?;
        let up = IntGauge::new(
            "tollgate_redis_up",
            "1 while Redis answers; 0 after repeated failures (the breaker is open).",
        )?;
        up.set(1);
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(up.clone()))?;
        Ok(Self {
            calls,
            errors,
            latency,
            up,
        })
    }
}

enum Client {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

pub struct RedisStore {
    client: Client,
    conns: Box<[OnceCell<Conn>]>,
    /// By `AlgorithmKind::ALL` order; each knows its SHA1 for EVALSHA.
    scripts: Vec<redis::Script>,
    timeout: Duration,
    breaker: Breaker,
    clock: Arc<dyn Clock>,
    metrics: StoreMetrics,
    /// Resolved once: the hot path increments without a label lookup.
    acquire_calls: IntCounter,
    refund_calls: IntCounter,
    scripts_loaded: AtomicBool,
}

fn script_index(kind: AlgorithmKind) -> usize {
    AlgorithmKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(0)
}

/// A small number per thread, so each worker thread uses its own connection.
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}

/// Connection attempts get longer than a decision: a slow handshake still completes for the
/// next request even when this one has given up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisStore {
    /// Checks the URLs; connects nothing (connections are made on first use, on the thread
    /// that uses them).
    pub fn new(
        cfg: &RedisConfig,
        clock: Arc<dyn Clock>,
        metrics: StoreMetrics,
    ) -> Result<Self, StoreError> {
        let client = match &cfg.target {
            Target::Single(url) => Client::Single(redis::Client::open(url.as_str())?),
            Target::Cluster(nodes) => Client::Cluster(Box::new(
                ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(1)
                    .build()?,
            )),
        };
        let ms = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok(Self {
            client,
            conns: (0..cfg.connections.max(1))
                .map(|_| OnceCell::new())
                .collect(),
            scripts: AlgorithmKind::ALL
                .iter()
                .map(|k| redis::Script::new(script_source(*k)))
                .collect(),
            timeout: cfg.timeout,
            breaker: Breaker::new(
                cfg.breaker_threshold,
                ms(cfg.breaker_backoff),
                ms(cfg.breaker_max_backoff),
            ),
            clock,
            acquire_calls: metrics.calls.with_label_values(&["acquire"]),
            refund_calls: metrics.calls.with_label_values(&["refund"]),
            scripts_loaded: AtomicBool::new(false),
            metrics,
        })
    }

    async fn conn(&self) -> Result<Conn, StoreError> {
        let cell = &self.conns[thread_slot() % self.conns.len()];
        let conn = cell
            .get_or_try_init(|| async {
                match &self.client {
                    Client::Single(c) => {
                        let cfg = ConnectionManagerConfig::new()
                            .set_connection_timeout(Some(CONNECT_TIMEOUT))
                            .set_response_timeout(Some(RESPONSE_TIMEOUT))
                            .set_number_of_retries(2)
                            .set_min_delay(Duration::from_millis(20))
                            .set_max_delay(Duration::from_millis(500));
                        Ok::<_, StoreError>(Conn::Single(ConnectionManager::new_lazy_with_config(
                            c.clone(),
                            cfg,
                        )?))
                    }
                    Client::Cluster(c) => Ok(Conn::Cluster(c.get_async_connection().await?)),
                }
            })
            .await?;
        Ok(conn.clone())
    }

    async fn eval(
        &self,
        spec: &LimitSpec,
        key: GlobalKey<'_>,
        cost: u64,
        mode: &str,
    ) -> Result<ScriptReply, StoreError> {
        let script = &self.scripts[script_index(spec.algorithm)];
        let mut inv = script.prepare_invoke();
        inv.key(key.redis_key())
            .arg(spec.rate.count())
            .arg((spec.rate.period_ns() / 1_000).max(1))
            .arg(spec.burst)
            .arg(cost)
            .arg(mode)
            .arg(spec.delay);
        let reply: Vec<i64> = match self.conn().await? {
            Conn::Single(mut c) => inv.invoke_async(&mut c).await?,
            Conn::Cluster(mut c) => inv.invoke_async(&mut c).await?,
        };
        ScriptReply::parse(&reply)
    }

    /// One guarded call: breaker, timeout, metrics.
    async fn call(
        &self,
        spec: &LimitSpec,
        key: GlobalKey<'_>,
        cost: u64,
        mode: &'static str,
    ) -> Result<ScriptReply, StoreError> {
        if !self.breaker.allow(self.clock.now()) {
            self.metrics
                .errors
                .with_label_values(&["circuit_open"])
                .inc();
            return Err(StoreError::CircuitOpen);
        }
        if mode == "acquire" {
            self.acquire_calls.inc();
        } else {
            self.refund_calls.inc();
        }
        let start = Instant::now();
        let r = match tokio::time::timeout(self.timeout, self.eval(spec, key, cost, mode)).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        };
        self.metrics.latency.observe(start.elapsed().as_secs_f64());
        self.record(&r);
        r
    }

    fn record<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => {
                self.breaker.success();
                if self.metrics.up.get() != 1 {
                    self.metrics.up.set(1);
                }
            }
            Err(e) => {
                self.metrics.errors.with_label_values(&[e.kind()]).inc();
                self.breaker.failure(self.clock.now());
                if !self.breaker.is_up() {
                    self.metrics.up.set(0);
                }
            }
        }
    }

    async fn ping_and_load(&self) -> Result<(), StoreError> {
        let pong: String = match self.conn().await? {
            Conn::Single(mut c) => redis::cmd("PING").query_async(&mut c).await?,
            Conn::Cluster(mut c) => redis::cmd("PING").query_async(&mut c).await?,
        };
        if pong != "PONG" {
            return Err(StoreError::BadReply(pong));
        }
        if !self.scripts_loaded.load(Ordering::Relaxed)
            || !self.breaker.is_up()
            || self.breaker.is_open()
        {
            // At start, and back from an outage (a restarted Redis has no scripts): load them
            // before the first decisions rather than on their NOSCRIPT.
            for s in &self.scripts {
                let inv = s.prepare_invoke();
                match self.conn().await? {
                    Conn::Single(mut c) => inv.load_async(&mut c).await?,
                    Conn::Cluster(mut c) => inv.load_async(&mut c).await?,
                };
            }
            self.scripts_loaded.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl GlobalStore for RedisStore {
    fn acquire<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        cost: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(async move {
            self.call(spec, key, cost, "acquire")
                .await
                .map(|r| r.decision())
        })
    }

    fn refund<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.call(spec, key, cost, "refund").await.map(|_| ()) })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let r = match tokio::time::timeout(CONNECT_TIMEOUT, self.ping_and_load()).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Timeout(CONNECT_TIMEOUT)),
            };
            self.record(&r);
            r
        })
    }

    fn is_up(&self) -> bool {
        self.breaker.is_up()
    }
}
