//! `[[limits]]`: a limit's algorithm, rate, key sources, scope and quota.

use super::access::{Action, TarpitConfig};
use super::redis::OnError;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Rate};

#[derive(Debug, Clone, PartialEq)]
pub struct LimitConfig {
    pub name: String,
    /// The key sources; several make a composite key.
    pub key: Vec<KeySource>,
    pub algorithm: AlgorithmKind,
    pub rate: Rate,
    pub burst: u64,
    /// Leaky bucket only: queued requests that pass without waiting (nginx's `delay=`).
    pub delay: u64,
    pub scope: Scope,
    /// Global limits: the limit's own `on_error`, else `[redis] on_error`.
    pub on_error: OnError,
    /// `sync = "lease"`: the most units one gateway takes from Redis at once (`lease_max`);
    /// `None`: `sync = "exact"`, Redis decides every request.
    pub lease_max: Option<u64>,
    /// Concurrency limits: how long a request may hold its slot before its body is in; past
    /// it the request is cut with 408 and the slot comes back.
    pub slot_timeout: Option<Duration>,
    pub shadow: bool,
    /// Bound on keys held by this limit in one process.
    pub max_keys: usize,
    /// Quotas: the calendar of their periods (then `rate` is N per nominal period and `burst`
    /// is N).
    pub calendar: Option<tollgate_limit::Calendar>,
    /// Quotas: where a client refused for its quota can buy more.
    pub upgrade_url: Option<String>,
    /// Quotas: what happens past the quota.
    pub overage: Overage,
    /// A plan's variant of a limit whose rate or quota comes from the caller's plan (index
    /// into `Plans::names`); only callers on that plan meet it.
    pub plan: Option<usize>,
    /// Up to this much is added at random to a refusal's Retry-After, so that clients refused
    /// together do not all return at the same instant.
    pub retry_after_jitter: Duration,
    pub action: Action,
    /// `action = "tarpit"`: the limit's own hold (a route's `tarpit` takes precedence).
    pub tarpit: Option<TarpitConfig>,
    /// `action = "challenge"`: where the client proves it is human.
    pub challenge_url: Option<String>,
    /// The escalation ladder: keys this limit refuses too often are blocked (403).
    pub block: Vec<tollgate_limit::Rung>,
    /// `count = "failures"`: only requests whose response has one of these statuses count
    /// (failed logins); others are given back when their response is known.
    pub count_failures: Option<Vec<u16>>,
}

impl LimitConfig {
    /// The most a quota counts before refusing: the quota itself, more for a soft quota, no
    /// bound for the strategies that never refuse on the quota.
    pub fn quota_ceiling(&self) -> u64 {
        match self.overage {
            Overage::Hard => self.burst,
            Overage::Soft(pct) => self
                .burst
                .saturating_add((self.burst as u128 * pct as u128).div_ceil(100) as u64)
                .min(QUOTA_CEILING_MAX),
            Overage::Count | Overage::Throttle(_) => QUOTA_CEILING_MAX,
        }
    }

    /// What the limiters need: algorithm, rate, burst, delay.
    pub fn spec(&self) -> tollgate_limit::LimitSpec {
        let burst = if self.calendar.is_some() {
            self.quota_ceiling()
        } else {
            self.burst
        };
        tollgate_limit::LimitSpec {
            algorithm: self.algorithm,
            rate: self.rate,
            burst,
            delay: self.delay,
            calendar: self.calendar,
        }
    }

    /// Whether state kept under `other` can go on serving this definition (on reload).
    pub fn same_state_as(&self, other: &LimitConfig) -> bool {
        self.key == other.key
            && self.algorithm == other.algorithm
            && self.rate == other.rate
            && self.burst == other.burst
            && self.delay == other.delay
            && self.calendar == other.calendar
            && self.overage == other.overage
            && self.plan == other.plan
            && self.scope == other.scope
            && self.max_keys == other.max_keys
    }

    /// Whether blocks and refusal counts kept under `other` can go on serving this one.
    pub fn same_blocks_as(&self, other: &LimitConfig) -> bool {
        self.key == other.key && self.block == other.block && self.max_keys == other.max_keys
    }
}

/// A quota's overage strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overage {
    /// Refuse at the quota.
    Hard,
    /// Admit up to this many percent over the quota, with a warning header, then refuse.
    Soft(u32),
    /// Admit everything and count what is over (billing).
    Count,
    /// Past the quota, admit at this reduced rate.
    Throttle(Rate),
}

impl Overage {
    pub fn name(&self) -> &'static str {
        match self {
            Overage::Hard => "hard",
            Overage::Soft(_) => "soft",
            Overage::Count => "overage",
            Overage::Throttle(_) => "throttle",
        }
    }
}

/// The most a quota may count (past the quota when its overage strategy admits more): exact
/// in the Redis script's doubles.
pub const QUOTA_CEILING_MAX: u64 = (1 << 53) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This process's memory.
    Local,
    /// Redis, shared by every gateway instance.
    Global,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The client address (see the contract for proxies, IPv6 prefixes and mapped addresses).
    ClientIp,
    /// A request header, lower-cased name.
    Header(String),
    /// A query-string parameter.
    Query(String),
    /// The User-Agent, hashed.
    UserAgent,
    /// The client address with a hash of the User-Agent.
    IpUa,
    /// The matched route's name.
    Route,
    /// The request path, without the query.
    Path,
    Method,
    /// One key shared by every request.
    Global,
    /// A claim of the verified bearer token.
    Jwt(String),
    /// A field of a JSON or form request body, hashed.
    Body(String),
    /// The SHA-256 fingerprint of the client's TLS certificate.
    ClientCert,
    /// The consumer the route's authentication named (an API key's consumer, a basic-auth
    /// user).
    Consumer,
    /// `[rls]` only: the values of the descriptor entries a rule matched, in order.
    Descriptor,
}

impl KeySource {
    pub fn describe(&self) -> String {
        match self {
            KeySource::ClientIp => "client_ip".into(),
            KeySource::Header(h) => format!("header:{h}"),
            KeySource::Query(q) => format!("query:{q}"),
            KeySource::UserAgent => "user_agent".into(),
            KeySource::IpUa => "ip_ua".into(),
            KeySource::Route => "route".into(),
            KeySource::Path => "path".into(),
            KeySource::Method => "method".into(),
            KeySource::Global => "global".into(),
            KeySource::Jwt(c) => format!("jwt:{c}"),
            KeySource::Body(f) => format!("body:{f}"),
            KeySource::ClientCert => "client_cert".into(),
            KeySource::Consumer => "consumer".into(),
            KeySource::Descriptor => "descriptor".into(),
        }
    }
}
