//! `[[upstreams]]`: targets, health checks, balancing, affinity and retries.

use super::tls::UpstreamTls;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub name: String,
    /// As written, in order.
    pub targets: Vec<UpstreamTarget>,
    /// DNS names are resolved again this often (sooner when their records' TTL is shorter).
    pub resolve_every: Duration,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    /// TLS to the targets.
    pub tls: Option<Box<UpstreamTls>>,
    /// HTTP/2 to the targets (gRPC): by ALPN over TLS, with prior knowledge without.
    pub h2: bool,
    /// Active TCP health check; `None` disables it (targets are then always considered up).
    pub health_check: Option<HealthCheck>,
    /// How a target is chosen (docs/upstreams.md, "Balancing").
    pub balance: Balance,
    /// With `balance = "hash"`: what is hashed.
    pub hash_key: Option<HashKey>,
    pub affinity: Option<Box<Affinity>>,
    /// `None`: a failed connection tries the next target (nothing was sent), nothing else.
    pub retry: Option<Retry>,
    /// Passive outlier ejection; `None` with `outlier = false`.
    pub outlier: Option<Outlier>,
}

/// One `host:port` of an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    /// As written in the config.
    pub written: String,
    /// The DNS name (lower case, no trailing dot), or the address as text.
    pub host: String,
    pub port: u16,
    /// Set when the target is an address: nothing to resolve.
    pub addr: Option<SocketAddr>,
}

/// Passive outlier ejection (docs/upstreams.md): a target that fails this many times in a
/// row is out of rotation for a while, as Envoy's `consecutive_5xx` outlier detection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outlier {
    /// Failures in a row (connect errors and timeouts, read timeouts and resets, 5xx
    /// answers) that take a target out.
    pub consecutive_failures: u32,
    /// How long the first ejection lasts; each next one lasts one more of it.
    pub ejection: Duration,
    /// The longest an ejection lasts.
    pub max_ejection: Duration,
    /// At most this share of the pool's targets is out at once (at least one target may be).
    pub max_ejected_percent: u8,
}

impl Default for Outlier {
    /// Envoy's defaults.
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
            max_ejected_percent: 10,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
}

/// How a request's target is chosen among the healthy ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Balance {
    #[default]
    RoundRobin,
    /// The target with the fewest requests in flight.
    LeastRequest,
    /// The target with the lowest recent latency (peak EWMA) times its requests in flight.
    Ewma,
    /// Consistent (Ketama) hashing of `hash_key`: a target leaving moves only its share.
    Hash,
}

/// What `balance = "hash"` hashes. A request without it is balanced round robin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client address (as `client_ip` keys read it).
    ClientIp,
    /// A request header (lower-case name).
    Header(String),
    /// A cookie of the request.
    Cookie(String),
    /// A query parameter.
    Query(String),
    /// The canonical path, without the query.
    Path,
    /// The path and the query (nginx's `$request_uri`).
    Uri,
}

/// `affinity = { cookie, max_age, path, secure, secret }`: a signed cookie pins a client to the
/// target that answered it while that target is healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    pub cookie: String,
    /// `None`: a session cookie.
    pub max_age: Option<Duration>,
    pub path: String,
    /// `None`: `Secure` when the request came over TLS.
    pub secure: Option<bool>,
    /// The key the cookie is signed with. Every instance of a fleet needs the same one to
    /// honour the others' cookies; without it each process draws its own.
    pub secret: Option<String>,
}

/// The failures a request may be retried on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryOn {
    /// Written for ingress-nginx's `error` and kept for reading: a failed connect (nothing
    /// sent) falls over to another target in every configuration.
    pub connect: bool,
    pub timeout: bool,
    /// The connection closed or reset before a response head came (the upstream may have
    /// read the request).
    pub reset: bool,
    /// The statuses retried, 400 to 599: bit `code - 400`.
    pub statuses: [u64; 4],
}

impl RetryOn {
    /// Whether an answer of `code` is retried.
    #[inline]
    pub fn status(&self, code: u16) -> bool {
        let Some(i) = code.checked_sub(400).filter(|i| *i < 200) else {
            return false;
        };
        self.statuses[usize::from(i / 64)] & (1 << (i % 64)) != 0
    }

    /// Retries answers of `code` (400 to 599; others are ignored).
    pub fn set_status(&mut self, code: u16) {
        if let Some(i) = code.checked_sub(400).filter(|i| *i < 200) {
            self.statuses[usize::from(i / 64)] |= 1 << (i % 64);
        }
    }
}

/// Which targets a retry may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryTargets {
    /// Only targets this request has not tried (nginx's `proxy_next_upstream`).
    #[default]
    Untried,
    /// Those first, then any healthy target again, the one that failed included (Envoy's,
    /// and the Gateway API's: a Service of one pod is retried).
    Any,
}

/// `retry = { attempts, on, budget, targets, backoff }` (docs/upstreams.md): an idempotent
/// request without a body tries again, within a budget that is a ratio of the upstream's
/// requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// Tries after the first one.
    pub attempts: u32,
    pub on: RetryOn,
    /// Retries per request, at most, over the upstream's traffic (0.2: one retry for every
    /// five requests).
    pub budget: f64,
    pub targets: RetryTargets,
    /// The wait before each retry (within the route's request timeout).
    pub backoff: Option<Duration>,
}

/// The default `retry.on` (ingress-nginx's `proxy-next-upstream: error timeout`).
pub const RETRY_ON_DEFAULT: RetryOn = RetryOn {
    connect: true,
    timeout: true,
    reset: true,
    statuses: [0; 4],
};

pub const RETRY_BUDGET_DEFAULT: f64 = 0.2;
