//! [`GlobalStore`] on Redis or Redis Cluster.
//!
//! Connections: one multiplexed connection per worker thread (made lazily on the thread's own
//! runtime, so a decision never hops threads), reconnecting in the background after a failure
//! (`ConnectionManager`; the cluster client reconnects per node), and replaced when it goes
//! silent (see [`Slot`]). Concurrent decisions on one thread share its connection and are
//! pipelined on it.
//!
//! Every call is bounded by `timeout` and goes through the [`Breaker`]; errors, latency and the
//! up state are exported as metrics.

use crate::nodes::{Node, Nodes};
use crate::scripts::{script_source, ScriptReply, BLOCKS_KEYS, BLOCKS_SCRIPT};
use crate::tls::Tls;
use crate::{BoxFuture, GlobalKey, GlobalStore, StoreError};
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_limit::{AlgorithmKind, Clock, Decision, LimitSpec};

/// Where the shared state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://host:port[/db]`, or `rediss://` for TLS.
    Single(String),
    /// Seed nodes of a Redis Cluster; the rest of the topology is discovered.
    Cluster(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: Target,
    /// Certificates for `rediss://` (a `rediss://` URL without them verifies with the system's
    /// roots); must be `None` for `redis://`.
    pub tls: Option<Tls>,
    /// The AUTH password when it is not in the URL (`password_env`); the URL's user, if any,
    /// is the ACL user.
    pub password: Option<String>,
    /// Budget of one decision, connection set-up included.
    pub timeout: Duration,
    /// Connections to open (one per worker thread is right; threads share when fewer).
    pub connections: usize,
    /// Failures in a row that open the breaker.
    pub breaker_threshold: u32,
    pub breaker_backoff: Duration,
    pub breaker_max_backoff: Duration,
    /// Calls this gateway may have waiting on Redis at once; past it a call is not made
    /// ([`StoreError::Saturated`]). A quarter is kept for keys the gateway knows
    /// ([`crate::GlobalKey::known`]).
    pub max_in_flight: usize,
}

impl RedisConfig {
    pub fn new(target: Target, timeout: Duration, connections: usize) -> Self {
        Self {
            target,
            tls: None,
            password: None,
            timeout,
            connections,
            breaker_threshold: 5,
            breaker_backoff: Duration::from_millis(500),
            breaker_max_backoff: Duration::from_secs(5),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// The default bound on Redis calls waiting at once, per process: at Redis's usual tens of
/// microseconds per script, three gateways' full queues drain well within a 20 ms budget.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 128;

/// One call counted in flight for as long as it lives (a call dropped mid-way, when its
/// request is, gives its place back too).
struct InFlight<'a>(&'a AtomicUsize, &'a tokio::sync::Notify);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        // A patient call waiting for a slot takes this one.
        self.1.notify_one();
    }
}

/// The store's metrics, registered in the process's registry.
#[derive(Clone)]
pub struct StoreMetrics {
    pub calls: IntCounterVec,
    pub errors: IntCounterVec,
    pub latency: Histogram,
    pub up: IntGaugeVec,
}

impl StoreMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let calls = IntCounterVec::new(
            Opts::new(
                "tollgate_redis_calls_total",
                "Limiter script calls sent to Redis, by operation (acquire, lease, refund, blocks).",
            ),
            &["op"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "tollgate_redis_errors_total",
                "Failed Redis calls, by kind: timeout, connection, redis, reply, circuit_open; saturated (not made: max_in_flight calls already waiting); late (past the budget while the node and this connection answered other calls within the last quarter second: the queue, which the breaker does not count).",
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
        let up = IntGaugeVec::new(
            Opts::new(
                "tollgate_redis_up",
                "1 while a Redis node answers; 0 after repeated failures (its breaker is open). By node: the single Redis, or each cluster master.",
            ),
            &["node"],
        )?;
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

#[derive(Clone)]
enum Client {
    Single(Box<redis::Client>),
    Cluster(Box<redis::cluster::ClusterClient>),
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// One worker thread's connection.
///
/// A connection that stops answering without being closed (a host gone, a partition, a
/// failover that moved the address) is never noticed by the client library: every call just
/// times out. So after `STALE_AFTER` timeouts in a row the slot drops it and the next call makes
/// a new one; and when Redis comes back after an outage every slot starts afresh (`epoch`).
#[derive(Default)]
struct Slot {
    conn: parking_lot::Mutex<Option<(u64, Conn)>>,
    /// A connection is being made (in its own task, so that a slow handshake completes for the
    /// next call even when this one gives up at its timeout).
    connecting: AtomicBool,
    ready: tokio::sync::Notify,
    timeouts: AtomicU32,
    /// When a call on this connection last succeeded (the store's clock): see
    /// [`RedisStore::answers`].
    answered: AtomicU64,
    /// Why the last connection attempt failed (a refused certificate, say), for the
    /// calls that waited on it.
    failed: parking_lot::Mutex<Option<redis::RedisError>>,
}

const STALE_AFTER: u32 = 3;

pub struct RedisStore {
    client: Client,
    /// This gateway's id in shared concurrency state (random per process).
    instance: Box<str>,
    slots: Box<[Arc<Slot>]>,
    /// Connections made before this epoch are replaced on their next use.
    epoch: AtomicU64,
    /// In `AlgorithmKind::EVERY` order (the capability table's `index`); each knows its SHA1 for EVALSHA.
    scripts: Vec<redis::Script>,
    blocks_script: redis::Script,
    timeout: Duration,
    /// A breaker per node: the single Redis, or each master of a cluster.
    nodes: Nodes,
    /// A cluster's slot map may be out of date (a call failed on a master): read it again.
    stale: AtomicBool,
    /// A probe reached Redis (a worker's first connection then gets the connect budget).
    reached: AtomicBool,
    /// The first probe has finished.
    probed: AtomicBool,
    clock: Arc<dyn Clock>,
    metrics: StoreMetrics,
    /// Resolved once: the hot path (and an outage's every request) increments without a label
    /// lookup.
    acquire_calls: IntCounter,
    lease_calls: IntCounter,
    refund_calls: IntCounter,
    errors: [IntCounter; 7],
    scripts_loaded: AtomicBool,
    /// The TLS failure last logged (a refused certificate fails every connection attempt: it
    /// is logged once, again only when the reason changes or after Redis answered).
    tls_failure: parking_lot::Mutex<Option<String>>,
    tls_failed: AtomicBool,
    /// Decision calls waiting on Redis now, and their bound for fresh and known keys.
    in_flight: AtomicUsize,
    /// Told when an in-flight call ends (patient calls wait on it).
    freed: tokio::sync::Notify,
    max_fresh: usize,
    max_known: usize,
}

fn config_error(what: &'static str) -> StoreError {
    StoreError::Redis(redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        what,
    )))
}

const ERROR_KINDS: [&str; 7] = [
    "timeout",
    "circuit_open",
    "connection",
    "redis",
    "reply",
    "saturated",
    "late",
];

/// What a limiter script call does (its `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Acquire,
    Refund,
    /// Up to `cost` units for a lease whose slices end after this many µs.
    Lease {
        ttl_us: u64,
    },
    /// Concurrency: this gateway holds `cost` slots of the key now (their renewal).
    Hold,
}

impl Op {
    fn mode(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Refund => "refund",
            Op::Lease { .. } => "lease",
            Op::Hold => "hold",
        }
    }
}

/// The script of an algorithm: its row of the capability table says where (an algorithm
/// without a row does not compile; none falls back to another's script).
fn script_index(kind: AlgorithmKind) -> usize {
    kind.caps().index
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
        let client = client(cfg)?;
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The node a single Redis is shown as in tollgate_redis_up{node}.
        let whole = match &client {
            Client::Single(c) => c.get_connection_info().addr().to_string(),
            Client::Cluster(_) => "cluster".to_string(),
        };
        let errors = ERROR_KINDS.map(|k| metrics.errors.with_label_values(&[k]));
        Ok(Self {
            client,
            instance: format!("{:016x}", fastrand::u64(..)).into(),
            slots: (0..cfg.connections.max(1))
                .map(|_| Arc::new(Slot::default()))
                .collect(),
            epoch: AtomicU64::new(0),
            scripts: AlgorithmKind::EVERY
                .iter()
                .map(|k| redis::Script::new(script_source(*k)))
                .collect(),
            blocks_script: redis::Script::new(BLOCKS_SCRIPT),
            timeout: cfg.timeout,
            nodes: Nodes::new(
                &whole,
                (
                    cfg.breaker_threshold,
                    ns(cfg.breaker_backoff),
                    ns(cfg.breaker_max_backoff),
                ),
                metrics.up.clone(),
            ),
            stale: AtomicBool::new(false),
            reached: AtomicBool::new(false),
            probed: AtomicBool::new(false),
            clock,
            acquire_calls: metrics.calls.with_label_values(&["acquire"]),
            lease_calls: metrics.calls.with_label_values(&["lease"]),
            refund_calls: metrics.calls.with_label_values(&["refund"]),
            errors,
            scripts_loaded: AtomicBool::new(false),
            tls_failure: parking_lot::Mutex::new(None),
            tls_failed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            freed: tokio::sync::Notify::new(),
            max_fresh: (cfg.max_in_flight - cfg.max_in_flight / 4).max(1),
            max_known: cfg.max_in_flight.max(1),
            metrics,
        })
    }

    fn slot(&self) -> &Arc<Slot> {
        &self.slots[thread_slot() % self.slots.len()]
    }

    /// This thread's connection, made in a task of its own when there is none (so that a slow
    /// handshake completes for the next call even when this one gives up).
    async fn conn(&self) -> Result<Conn, StoreError> {
        let slot = self.slot();
        let epoch = self.epoch.load(Ordering::Acquire);
        if let Some((e, c)) = &*slot.conn.lock() {
            if *e == epoch {
                return Ok(c.clone());
            }
        }
        // Register for the wake-up before looking at the flag, so none is missed.
        let ready = slot.ready.notified();
        if !slot.connecting.swap(true, Ordering::AcqRel) {
            let (slot2, client) = (slot.clone(), self.client.clone());
            tokio::spawn(async move {
                let made = tokio::time::timeout(CONNECT_TIMEOUT, connect(client)).await;
                *slot2.failed.lock() = None;
                match made {
                    Ok(Ok(conn)) => *slot2.conn.lock() = Some((epoch, conn)),
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "connection to Redis failed");
                        *slot2.failed.lock() = Some(e);
                    }
                    Err(_) => tracing::debug!("connection to Redis timed out"),
                }
                slot2.connecting.store(false, Ordering::Release);
                slot2.ready.notify_waiters();
            });
        }
        ready.await;
        match &*slot.conn.lock() {
            Some((e, c)) if *e == epoch => Ok(c.clone()),
            _ => Err(StoreError::Redis(
                slot.failed.lock().clone().unwrap_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Io, "no connection to Redis"))
                }),
            )),
        }
    }

    /// This thread's connection, waiting for a new one at most `budget`.
    async fn conn_within(&self, budget: Duration) -> Result<Conn, StoreError> {
        match tokio::time::timeout(budget, self.conn()).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(budget)),
        }
    }

    /// How long a call may wait for its thread's first connection: the decision's budget,
    /// or the connect budget once a probe has reached Redis and the node answers (at start and
    /// after an outage every worker thread makes its connection on its first call: a handshake
    /// to a Redis known to be there is not an outage, and must not be taken for one).
    fn connect_budget(&self, node: &Node) -> Duration {
        if self.reached.load(Ordering::Relaxed) && node.breaker.is_up() {
            CONNECT_TIMEOUT.max(self.timeout)
        } else {
            self.timeout
        }
    }

    async fn eval(
        &self,
        conn: Conn,
        spec: &LimitSpec,
        rkey: &str,
        cost: u64,
        op: Op,
    ) -> Result<ScriptReply, StoreError> {
        let script = &self.scripts[script_index(spec.algorithm)];
        let mut inv = script.prepare_invoke();
        inv.key(rkey)
            .arg(spec.rate.count())
            .arg((spec.rate.period_ns() / 1_000).max(1))
            .arg(spec.burst)
            .arg(cost)
            .arg(op.mode())
            .arg(spec.delay);
        if spec.algorithm.caps().stepped {
            // The local limiter's interval, in a unit the script computes exactly.
            let step = tollgate_limit::script::step(spec.rate, spec.burst);
            inv.arg(step.interval).arg(step.tick_ns);
        }
        if let Some(cal) = spec.calendar {
            inv.arg(cal.unit.code()).arg(cal.offset_secs);
        }
        if spec.algorithm.caps().holds {
            // Whose slots: each gateway's count lapses on its own.
            inv.arg(&*self.instance);
        }
        if let Op::Lease { ttl_us } = op {
            // The key's lease mark (same hash tag: same slot) and the slices' ttl, last.
            inv.key(format!("{rkey}:lease")).arg(ttl_us);
        }
        let reply: Vec<i64> = match conn {
            Conn::Single(mut c) => inv.invoke_async(&mut c).await?,
            Conn::Cluster(mut c) => inv.invoke_async(&mut c).await?,
        };
        ScriptReply::parse(&reply)
    }

    /// One guarded call: the breaker of the key's node, the budgets, metrics.
    async fn call(
        &self,
        spec: &LimitSpec,
        key: GlobalKey<'_>,
        cost: u64,
        op: Op,
    ) -> Result<ScriptReply, StoreError> {
        let rkey = key.redis_key(spec.algorithm);
        let node = self.nodes.node_for(&rkey);
        let Some(probe) = node.breaker.allow(self.clock.now()) else {
            self.count(&StoreError::CircuitOpen);
            return Err(StoreError::CircuitOpen);
        };
        // The gateway's own bound: past it the call is not queued behind the others (a flood
        // of fresh keys would make every call late, and late calls looked like Redis failing).
        let bound = if key.known {
            self.max_known
        } else {
            self.max_fresh
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        while self.in_flight.fetch_add(1, Ordering::AcqRel) >= bound {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            let waited = key.patient && {
                // Registered before the second look, so a slot freed in between still wakes it.
                let freed = self.freed.notified();
                tokio::pin!(freed);
                freed.as_mut().enable();
                self.in_flight.load(Ordering::Acquire) < bound
                    || tokio::time::timeout_at(deadline, freed).await.is_ok()
            };
            if !waited {
                self.count(&StoreError::Saturated);
                if probe {
                    // The breaker's probe was not made: let the next call be it.
                    node.breaker.release_probe();
                }
                return Err(StoreError::Saturated);
            }
        }
        let _in_flight = InFlight(&self.in_flight, &self.freed);
        let sent = self.clock.now();
        match op {
            Op::Acquire => self.acquire_calls.inc(),
            Op::Lease { .. } => self.lease_calls.inc(),
            Op::Refund | Op::Hold => self.refund_calls.inc(),
        }
        let start = Instant::now();
        let r = match self.conn_within(self.connect_budget(&node)).await {
            Ok(conn) => {
                let run = self.eval(conn, spec, &rkey, cost, op);
                match tokio::time::timeout(self.timeout, run).await {
                    Ok(r) => r,
                    Err(_) => Err(StoreError::Timeout(self.timeout)),
                }
            }
            Err(e) => Err(e),
        };
        self.metrics.latency.observe(start.elapsed().as_secs_f64());
        let r = match r {
            Err(StoreError::Timeout(d)) if self.answers(&node, self.slot(), sent) => {
                Err(StoreError::Late(d))
            }
            r => r,
        };
        self.record(&r, probe, &node);
        r
    }

    /// A call to the block registry: off the request path, so it gets a longer budget than a
    /// decision, and it stays out of the breaker and the decision latency (a slow poll must not
    /// turn global limits to their on_error); while its node's breaker is open it is not made.
    async fn blocks_call<T: redis::FromRedisValue>(&self, args: &[&str]) -> Result<T, StoreError> {
        if self.nodes.node_for(BLOCKS_KEYS[0]).breaker.is_open() {
            return Err(StoreError::CircuitOpen);
        }
        self.metrics.calls.with_label_values(&["blocks"]).inc();
        let budget = self.timeout.max(Duration::from_millis(500));
        let run = async {
            let mut inv = self.blocks_script.prepare_invoke();
            for k in BLOCKS_KEYS {
                inv.key(k);
            }
            for a in args {
                inv.arg(*a);
            }
            let v: T = match self.conn().await? {
                Conn::Single(mut c) => inv.invoke_async(&mut c).await?,
                Conn::Cluster(mut c) => inv.invoke_async(&mut c).await?,
            };
            Ok::<T, StoreError>(v)
        };
        match tokio::time::timeout(budget, run).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(budget)),
        }
    }

    /// Whether both `node` and this thread's connection (`slot`) answered a call lately:
    /// since `sent`, or within the last quarter second (at least the decision budget). A call
    /// that times out then met a queue (the gateway's own, starved of CPU, or Redis's), not a
    /// node that is down nor a connection gone silent: a dead node, or a connection
    /// black-holed while the others answer, answers nothing, and its calls count (against the
    /// breaker, and towards replacing the connection) a quarter second after its last answer.
    fn answers(&self, node: &Node, slot: &Slot, sent: tollgate_limit::Nanos) -> bool {
        let quiet = u64::try_from(self.timeout.max(Duration::from_millis(250)).as_nanos())
            .unwrap_or(u64::MAX);
        let now = self.clock.now();
        let recent = |last: u64| last > sent || (last != 0 && now.saturating_sub(last) < quiet);
        recent(node.answered.load(Ordering::Relaxed))
            && recent(slot.answered.load(Ordering::Relaxed))
    }

    /// `tollgate_redis_errors_total{kind}` for `e` (the handles resolved once, in
    /// `ERROR_KINDS` order).
    fn count(&self, e: &StoreError) {
        let kind = e.kind();
        if let Some(i) = ERROR_KINDS.iter().position(|k| *k == kind) {
            self.errors[i].inc();
        }
    }

    fn record<T>(&self, r: &Result<T, StoreError>, probe: bool, node: &Node) {
        let slot = self.slot();
        match r {
            Ok(_) => {
                let now = self.clock.now();
                node.answered.fetch_max(now, Ordering::Relaxed);
                slot.answered.fetch_max(now, Ordering::Relaxed);
                if slot.timeouts.load(Ordering::Relaxed) != 0 {
                    slot.timeouts.store(0, Ordering::Relaxed);
                }
                node.breaker.success();
                node.publish();
                // Answered: a TLS failure that comes back is logged again (one flag read on
                // the hot path, the lock only after a failure was logged).
                if self.tls_failed.load(Ordering::Relaxed) {
                    self.tls_failed.store(false, Ordering::Relaxed);
                    *self.tls_failure.lock() = None;
                }
            }
            Err(e) => {
                if let Some(reason) = crate::tls::failure(e) {
                    let mut last = self.tls_failure.lock();
                    if last.as_deref() != Some(reason.as_str()) {
                        tracing::error!(%reason, "TLS to Redis failed: no connection is made unverified; global limits follow on_error until it succeeds");
                        *last = Some(reason);
                        self.tls_failed.store(true, Ordering::Relaxed);
                    }
                }
                self.count(e);
                // Late while the node answers other calls: the wait was a queue, not the node
                // or the connection failing (see `answers`). It costs this call its answer,
                // never the breaker, and never the connection.
                if let StoreError::Late(_) = e {
                    if probe {
                        node.breaker.release_probe();
                    }
                    return;
                }
                if matches!(e, StoreError::Timeout(_))
                    && slot.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= STALE_AFTER
                {
                    // Silent for too long: a new connection for this thread's next call.
                    slot.timeouts.store(0, Ordering::Relaxed);
                    *slot.conn.lock() = None;
                }
                if e.is_outage() {
                    node.breaker.failure(self.clock.now(), probe);
                    node.publish();
                    if matches!(self.client, Client::Cluster(_)) {
                        // A master failed or moved: read the slot map again at once.
                        self.stale.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Reads the cluster's slot map (`CLUSTER SLOTS`) into the nodes' table.
    async fn read_topology(&self) -> Result<(), StoreError> {
        let Conn::Cluster(mut c) = self.conn().await? else {
            return Ok(());
        };
        let v: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut c)
            .await?;
        let ranges = parse_slots(&v)?;
        self.stale.store(false, Ordering::Relaxed);
        if self.nodes.install(&ranges) {
            let masters: Vec<String> = self
                .nodes
                .all()
                .iter()
                .map(|n| n.addr.to_string())
                .collect();
            tracing::info!(event = "redis_cluster_map", masters = ?masters, "Redis Cluster slot map read");
        }
        Ok(())
    }

    async fn ping_and_load(&self) -> Result<(), StoreError> {
        match &self.client {
            Client::Single(_) => {
                let pong: String = match self.conn().await? {
                    Conn::Single(mut c) => redis::cmd("PING").query_async(&mut c).await?,
                    Conn::Cluster(mut c) => redis::cmd("PING").query_async(&mut c).await?,
                };
                if pong != "PONG" {
                    return Err(StoreError::BadReply(pong));
                }
            }
            // The map says which masters there are; each master's own breaker says whether it
            // answers (a PING would land on any node, and say nothing of the others).
            Client::Cluster(_) => self.read_topology().await?,
        }
        self.reached.store(true, Ordering::Relaxed);
        let whole = self.nodes.whole();
        let recovering = matches!(self.client, Client::Single(_))
            && (!whole.breaker.is_up() || whole.breaker.is_open());
        if recovering {
            // Back from an outage: every thread's connection may be one that silently died;
            // each makes a new one on its next call.
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        if recovering || !self.scripts_loaded.load(Ordering::Relaxed) {
            // At start, and back from an outage (a restarted Redis has no scripts): load them
            // before the first decisions rather than on their NOSCRIPT (on a cluster: on
            // every master).
            for s in self.scripts.iter().chain([&self.blocks_script]) {
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

/// Makes a connection: a reconnecting manager for a single Redis, a cluster connection (which
/// discovers the topology and reconnects per node) for a cluster.
async fn connect(client: Client) -> Result<Conn, redis::RedisError> {
    match client {
        Client::Single(c) => {
            let cfg = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(500));
            Ok(Conn::Single(
                ConnectionManager::new_with_config(*c, cfg).await?,
            ))
        }
        Client::Cluster(c) => Ok(Conn::Cluster(c.get_async_connection().await?)),
    }
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, ...], replicas...], ...]` as
/// `(first, last, "host:port")` of each range's master.
fn parse_slots(v: &redis::Value) -> Result<Vec<(u16, u16, String)>, StoreError> {
    use redis::Value;
    let bad = |what: &str| StoreError::BadReply(format!("CLUSTER SLOTS: {what}"));
    let Value::Array(ranges) = v else {
        return Err(bad("not an array"));
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let Value::Array(r) = r else {
            return Err(bad("a range is not an array"));
        };
        let (Some(first), Some(last), Some(Value::Array(master))) =
            (r.first().and_then(int), r.get(1).and_then(int), r.get(2))
        else {
            return Err(bad("a range without its master"));
        };
        let (Some(host), Some(Value::Int(port))) = (master.first().and_then(text), master.get(1))
        else {
            return Err(bad("a master without host and port"));
        };
        out.push((first, last, format!("{host}:{port}")));
    }
    Ok(out)
}

impl GlobalStore for RedisStore {
    fn acquire<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        cost: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(async move {
            self.call(spec, key, cost, Op::Acquire)
                .await
                .map(|r| r.decision())
        })
    }

    fn lease<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        want: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<crate::Leased, StoreError>> {
        Box::pin(async move {
            let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX).max(1);
            let r = self
                .call(spec, key, want.max(1), Op::Lease { ttl_us })
                .await?;
            Ok(crate::Leased {
                decision: r.decision(),
                granted: if r.allowed { r.granted.max(1) } else { 0 },
                lapse: (r.lapse_us > 0).then(|| Duration::from_micros(r.lapse_us)),
            })
        })
    }

    fn refund<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.call(spec, key, cost, Op::Refund).await.map(|_| ()) })
    }

    fn hold<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        slots: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.call(spec, key, slots, Op::Hold).await.map(|_| ()) })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let r = match tokio::time::timeout(CONNECT_TIMEOUT, self.ping_and_load()).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Timeout(CONNECT_TIMEOUT)),
            };
            // The probe bypasses the breaker: its failure is not a probe of it (that would
            // lengthen the back-off every second); its success closes it. On a cluster whose
            // map is known it reads the map: each master's breaker is its own keys' business.
            if !self.nodes.mapped() {
                self.record(&r, false, self.nodes.whole());
            }
            self.probed.store(true, Ordering::Release);
            r
        })
    }

    fn is_up(&self) -> bool {
        self.nodes.all_up()
    }

    fn ready(&self) -> bool {
        self.probed.load(Ordering::Acquire)
    }

    fn publish(&self) {
        self.nodes.publish_all(self.ready());
    }

    fn probe_every(&self) -> Duration {
        if self.stale.load(Ordering::Relaxed) {
            Duration::from_millis(50)
        } else if !self.nodes.all_up() {
            // A master is down: its replica's promotion shows in the map within this.
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        }
    }

    fn block<'a>(
        &'a self,
        limit: &'a str,
        key: u64,
        block_for: Duration,
        rung: u8,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let hash = format!("{key:016x}");
            let ms = block_for.as_millis().max(1).to_string();
            let rung = rung.to_string();
            self.blocks_call::<String>(&["block", limit, &hash, &ms, &rung])
                .await
                .map(|_| ())
        })
    }

    fn lift<'a>(
        &'a self,
        limit: &'a str,
        key: Option<u64>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let hash = key.map(|k| format!("{k:016x}")).unwrap_or_default();
            self.blocks_call::<u64>(&["lift", limit, &hash]).await
        })
    }

    fn blocks(&self, since: u64) -> BoxFuture<'_, Result<crate::BlockChanges, StoreError>> {
        Box::pin(async move {
            let since_s = since.to_string();
            let v: Vec<String> = self.blocks_call(&["list", &since_s, "500"]).await?;
            let num = |i: usize| v.get(i).and_then(|n| n.parse::<u64>().ok());
            let (Some(now), Some(counter), Some(last), Some(more)) =
                (num(0), num(1), num(2), num(3))
            else {
                return Err(StoreError::BadReply("blocks: short reply".into()));
            };
            // A registry that restarted counts from 0 again: read it whole.
            if counter < since {
                return Ok(crate::BlockChanges {
                    blocks: Vec::new(),
                    next: 0,
                    more: true,
                });
            }
            let mut blocks = Vec::with_capacity(v.len().saturating_sub(4) / 2);
            let mut it = v.iter().skip(4);
            while let (Some(f), Some(val)) = (it.next(), it.next()) {
                if let Some(b) = crate::SharedBlock::parse(f, val, now) {
                    blocks.push(b);
                }
            }
            Ok(crate::BlockChanges {
                blocks,
                next: last,
                more: more == 1,
            })
        })
    }
}

/// The Redis client for `cfg`: one node or a Cluster, TLS for `rediss://` URLs (all or
/// none of them), with the password and the client certificate when given.
fn client(cfg: &RedisConfig) -> Result<Client, StoreError> {
    let urls = match &cfg.target {
        Target::Single(url) => std::slice::from_ref(url),
        Target::Cluster(nodes) => nodes.as_slice(),
    };
    let tls = urls.iter().any(|u| u.starts_with("rediss://"));
    if urls.iter().any(|u| u.starts_with("rediss://") != tls) {
        return Err(config_error("the nodes mix redis:// and rediss://"));
    }
    if cfg.tls.is_some() && !tls {
        return Err(config_error(
            "TLS certificates are given for a redis:// URL (rediss:// is TLS)",
        ));
    }
    let certs = if tls {
        let t = cfg.tls.clone().unwrap_or_default();
        crate::tls::check(&t)?;
        Some(redis::TlsCertificates {
            client_tls: t
                .client_cert
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: t.ca,
        })
    } else {
        None
    };
    let client = match &cfg.target {
        Target::Single(url) => {
            let mut info = redis::IntoConnectionInfo::into_connection_info(url.as_str())?;
            if let Some(pw) = &cfg.password {
                let settings = info.redis_settings().clone().set_password(pw);
                info = info.set_redis_settings(settings);
            }
            Client::Single(Box::new(match certs {
                Some(c) => redis::Client::build_with_tls(info, c)?,
                None => redis::Client::open(info)?,
            }))
        }
        Target::Cluster(nodes) => {
            let mut b = ClusterClientBuilder::new(nodes.clone())
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(1);
            if let Some(c) = certs {
                b = b.certs(c);
            }
            if let Some(pw) = &cfg.password {
                b = b.password(pw);
            }
            Client::Cluster(Box::new(b.build()?))
        }
    };
    Ok(client)
}
