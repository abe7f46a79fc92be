//! The validated configuration, as the proxy consumes it.

use ipnet::IpNet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Rate};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub upstreams: Vec<UpstreamConfig>,
    pub routes: Vec<RouteConfig>,
    pub limits: Vec<LimitConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: Vec<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub threads: usize,
    /// Peers whose X-Forwarded-For is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// IPv6 clients are keyed by this prefix length.
    pub ipv6_prefix: u8,
    /// Every limit in shadow mode.
    pub shadow: bool,
    pub grace_period: Duration,
    /// Unix socket Pingora hands listeners over on `--upgrade`.
    pub upgrade_sock: PathBuf,
    /// Accept HTTP/2 with prior knowledge (h2c) on plaintext listeners.
    pub h2c: bool,
    /// One structured log line per request.
    pub access_log: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub name: String,
    /// `host:port` as written, with the address it resolved to at load time.
    pub targets: Vec<(String, SocketAddr)>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    /// Active TCP health check; `None` disables it (targets are then always considered up).
    pub health_check: Option<HealthCheck>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub name: String,
    /// Lower-cased, without port.
    pub host: Option<String>,
    pub path_prefix: String,
    /// Upper-case method names; `None` matches every method.
    pub methods: Option<Vec<String>>,
    pub action: RouteAction,
    /// Indexes into [`Config::limits`], in the order written.
    pub limits: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RouteAction {
    /// Index into [`Config::upstreams`].
    Upstream(usize),
    /// Answered by the gateway itself.
    Respond { status: u16, body: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct LimitConfig {
    pub name: String,
    /// The key sources; several make a composite key.
    pub key: Vec<KeySource>,
    pub algorithm: AlgorithmKind,
    pub rate: Rate,
    pub burst: u64,
    pub scope: Scope,
    pub shadow: bool,
    /// Bound on keys held by this limit in one process.
    pub max_keys: usize,
}

impl LimitConfig {
    /// Whether state kept under `other` can go on serving this definition (on reload).
    pub fn same_state_as(&self, other: &LimitConfig) -> bool {
        self.key == other.key
            && self.algorithm == other.algorithm
            && self.rate == other.rate
            && self.burst == other.burst
            && self.scope == other.scope
            && self.max_keys == other.max_keys
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Local,
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
        }
    }
}
