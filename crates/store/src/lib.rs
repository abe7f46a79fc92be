//! Global limiter state: one limit shared by every gateway instance.
//!
//! What this crate owns:
//! - [`GlobalStore`]: the asynchronous face of a shared limiter (acquire, refund, probe).
//! - [`RedisStore`]: its implementation on Redis or Redis Cluster with the `redis` crate
//!   (multiplexed, reconnecting connections; a cluster client for `cluster = [...]`). Each
//!   algorithm is one atomic Lua script from `lua/`, compiled into the binary, called by EVALSHA
//!   and loaded again on NOSCRIPT (a restarted or failed-over Redis has an empty script cache).
//!   Time comes from Redis `TIME`, so gateways with skewed clocks agree.
//! - [`Breaker`]: after repeated failures Redis is not called for a back-off period; one call
//!   (or the background probe) tests whether it is back.
//!
//! Failure modes: every call is bounded by the configured timeout and fails with a
//! [`StoreError`]; none blocks a thread (everything is async on the caller's runtime). What a
//! failure means for a request (admit, 503, local fallback) is the proxy's decision, never this
//! crate's.

mod breaker;
mod inspect;
mod nodes;
mod redis_store;
mod scripts;
mod tls;

pub use breaker::Breaker;
pub use inspect::inspect;
pub use nodes::{slot, Node, Nodes};
pub use redis_store::{RedisConfig, RedisStore, StoreMetrics, Target};
pub use scripts::{script_source, ScriptReply, BLOCKS_KEYS};
pub use tls::Tls;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Decision, LimitSpec};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("circuit open: Redis failed repeatedly and is not called until it answers a probe")]
    CircuitOpen,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// This gateway already waits on `max_in_flight` calls: the call is not made (the
    /// gateway's own bound, not Redis failing: the breaker does not see it).
    #[error("this gateway has its maximum of Redis calls in flight")]
    Saturated,
    /// No answer within the budget while the node answers other calls: the call met a queue
    /// (this gateway's, short of CPU, or Redis's), not a node that is down. The breaker does
    /// not count it.
    #[error("no answer within {0:?}, while Redis answers other calls")]
    Late(Duration),
    #[error("unexpected reply from the limiter script: {0}")]
    BadReply(String),
}

impl StoreError {
    /// Whether Redis is unreachable or unable (the breaker's business), rather than that one
    /// call was wrong (a script error, a wrong type, an unexpected reply): those fail that call
    /// only, and say something about the limit or the data, not about Redis.
    pub fn is_outage(&self) -> bool {
        match self {
            StoreError::Timeout(_) | StoreError::CircuitOpen => true,
            StoreError::Redis(r) => {
                r.is_io_error()
                    || r.is_connection_refusal()
                    || r.is_connection_dropped()
                    || r.is_timeout()
                    || r.is_cluster_error()
                    || matches!(
                        r.code(),
                        Some("LOADING" | "BUSY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN")
                    )
            }
            StoreError::BadReply(_) | StoreError::Saturated | StoreError::Late(_) => false,
        }
    }

    /// A short label for metrics.
    /// Whether Redis is there but this call got no answer from it (the gateway's own bound or
    /// queue): not an outage, and not Redis's decision either.
    pub fn is_unasked(&self) -> bool {
        matches!(self, StoreError::Saturated | StoreError::Late(_))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::CircuitOpen => "circuit_open",
            StoreError::Redis(e) if e.is_connection_refusal() || e.is_io_error() => "connection",
            StoreError::Redis(_) => "redis",
            StoreError::BadReply(_) => "reply",
            StoreError::Saturated => "saturated",
            StoreError::Late(_) => "late",
        }
    }
}

/// Which shared state a decision is about: a limit's name and the caller's stable key hash.
#[derive(Debug, Clone, Copy)]
pub struct GlobalKey<'a> {
    pub limit: &'a str,
    pub key: u64,
    /// The gateway knows this key (a refusal it cached, a lease it holds): its call may use
    /// the share of `max_in_flight` kept from fresh keys, so a flood of fresh keys cannot
    /// crowd out the calls that keep a known key refused.
    pub known: bool,
    /// Past `max_in_flight`, the call waits for a slot (up to the store's timeout) instead of
    /// failing at once: for a limit whose failure fails its caller's call (`on_error =
    /// "fail"`), where the gateway's own bound must not read as Redis failing.
    pub patient: bool,
}

impl GlobalKey<'_> {
    /// The Redis key, `{tollgate:<limit>:<algorithm>:<hash>}`: the whole name is one hash
    /// tag, so a script touches one cluster slot (no CROSSSLOT) and keys of one limit spread
    /// over every slot. The algorithm is part of the name because each keeps a different Redis
    /// type: a limit whose algorithm changes (or a fleet mid-deploy running both) starts a new
    /// state instead of failing on the old one with WRONGTYPE.
    pub fn redis_key(&self, algorithm: AlgorithmKind) -> String {
        format!(
            "{{tollgate:{}:{}:{:016x}}}",
            self.limit,
            algorithm.name(),
            self.key
        )
    }
}

/// What changed in the shared block registry since a poll.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockChanges {
    pub blocks: Vec<SharedBlock>,
    /// Pass this as `since` next time.
    pub next: u64,
    /// More changes wait: ask again at once.
    pub more: bool,
}

/// A block as the shared registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedBlock {
    pub limit: String,
    pub key: u64,
    /// Until the block ends (or, lifted, would have ended), by Redis's clock.
    pub remaining: Duration,
    pub rung: u8,
    /// Lifted by an operator: instances that hold it drop it.
    pub lifted: bool,
}

impl SharedBlock {
    /// Parses a registry entry: field `LIMIT/HASH`, value `UNTIL_MS:RUNG:LIFTED[:LIFTED_AT]`.
    pub fn parse(field: &str, value: &str, now_ms: u64) -> Option<Self> {
        let (limit, hash) = field.rsplit_once('/')?;
        let key = u64::from_str_radix(hash, 16).ok()?;
        let mut parts = value.split(':');
        let until: u64 = parts.next()?.parse().ok()?;
        let rung: u8 = parts.next()?.parse().ok()?;
        let lifted = parts.next()?.starts_with('1');
        Some(Self {
            limit: limit.to_string(),
            key,
            remaining: Duration::from_millis(until.saturating_sub(now_ms)),
            rung,
            lifted,
        })
    }
}

/// The answer to a lease: the asking request's decision and, admitted, what was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leased {
    pub decision: Decision,
    /// Units taken, the asking request's included (0 when refused).
    pub granted: u64,
    /// The units lapse this long from now (a window's end), if they do.
    pub lapse: Option<Duration>,
}

/// A limiter whose state is shared between gateway instances.
pub trait GlobalStore: Send + Sync + 'static {
    /// Takes `cost` units from the key's allowance if available (as the local limiters do).
    fn acquire<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        cost: u64,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;

    /// Takes up to `want` units (as many as are left, at least one) for a lease: the first
    /// decides the asking request as `acquire` of one would; the rest are this gateway's to
    /// spend, or give back, within `ttl`. While units leased by any gateway may still come
    /// back, a refusal's wait is at most until they may have. A store that shares nothing
    /// takes one.
    fn lease<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        _want: u64,
        _ttl: Duration,
    ) -> BoxFuture<'a, Result<Leased, StoreError>> {
        Box::pin(async move {
            let decision = self.acquire(spec, key, 1).await?;
            Ok(Leased {
                decision,
                granted: decision.is_allowed() as u64,
                lapse: None,
            })
        })
    }

    /// Gives back `cost` units taken by `acquire` or `lease` (another limit refused the
    /// request, a lease ended unspent).
    fn refund<'a>(
        &'a self,
        spec: &'a LimitSpec,
        key: GlobalKey<'a>,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Concurrency limits: this gateway holds `slots` of the key's slots now (renewed while
    /// its requests run, so that they count until it stops renewing them). A store that shares
    /// nothing has nothing to renew.
    fn hold<'a>(
        &'a self,
        _spec: &'a LimitSpec,
        _key: GlobalKey<'a>,
        _slots: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Sets the store's gauges from the state `is_up` and `ready` read (at every scrape, so
    /// that `/readyz` and `tollgate_redis_up` agree).
    fn publish(&self) {}

    /// Checks the store answers (bypassing the breaker) and records the result in it.
    fn probe(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// False while a node's breaker is open (its keys' decisions fail at once, without
    /// calling it).
    fn is_up(&self) -> bool;

    /// False until the first probe has finished (connected, read the topology and loaded the
    /// scripts, or found Redis away): `/readyz` waits for it, so a new instance does not fall
    /// back on its first requests.
    fn ready(&self) -> bool {
        true
    }

    /// How soon the background probe should run again: sooner while a node is down or the
    /// cluster's slot map is known to be stale.
    fn probe_every(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Records a block for every instance to learn (a store without sharing keeps none).
    fn block<'a>(
        &'a self,
        _limit: &'a str,
        _key: u64,
        _block_for: Duration,
        _rung: u8,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Lifts the block of `key`, or every block of `limit`; returns how many were in force.
    fn lift<'a>(
        &'a self,
        _limit: &'a str,
        _key: Option<u64>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async { Ok(0) })
    }

    /// The blocks (and lifts) recorded by any instance since change `since` (0: all).
    fn blocks(&self, _since: u64) -> BoxFuture<'_, Result<BlockChanges, StoreError>> {
        Box::pin(async { Ok(BlockChanges::default()) })
    }
}
