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
    /// `[redis]`: where global limits keep their state. `None`: every limit is local.
    pub redis: Option<RedisSettings>,
    /// `[jwt]`: how bearer tokens are verified for `jwt:CLAIM` key sources.
    pub jwt: Option<JwtSettings>,
    /// `[plans]`: what each caller paid for.
    pub plans: Option<Plans>,
    /// `[access]`: who is refused at once and who skips every limit, for all routes.
    pub access: AccessConfig,
    /// `[tls]`: what the TLS listeners (`server.tls_listen`) serve.
    pub tls: Option<TlsConfig>,
    /// Every authentication routes require: `[auth.NAME]` tables, then routes' inline `auth`
    /// tables (named after their route); routes point here by index.
    pub auth: Vec<AuthConfig>,
    /// Files the config read besides itself (list files, key files): a change to any of them
    /// is a change to the config.
    pub files: Vec<PathBuf>,
    /// `[rls]`: Envoy's rate limit service API on these limits.
    pub rls: Option<crate::RlsConfig>,
    /// `[tracing]`: OpenTelemetry traces over OTLP/HTTP.
    pub tracing: Option<crate::tracing::TracingConfig>,
}

/// Access lists (`[access]`, or a route's `access`, which adds to the server's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessConfig {
    /// Clients refused with 403 (IPv4 and IPv6; IPv4-mapped IPv6 clients are matched as IPv4).
    pub deny: Vec<IpNet>,
    /// Clients that skip every limit and every deny rule.
    pub allow: Vec<IpNet>,
    /// When set, clients outside these networks are refused with 403 (clients inside still
    /// meet every limit: ingress-nginx's `whitelist-source-range`).
    pub only_from: Vec<IpNet>,
    /// User-Agent globs refused with 403 (`*` any run, `?` one character; whole value, case
    /// insensitive).
    pub deny_user_agents: Vec<String>,
    /// API keys (exact, or globs such as `sk_partner_*`) that skip every limit.
    pub allow_api_keys: Vec<String>,
    /// The header carrying the API key, lower case (`None`: the server's, else `x-api-key`).
    pub api_key_header: Option<String>,
}

impl AccessConfig {
    pub fn is_empty(&self) -> bool {
        self.deny.is_empty()
            && self.allow.is_empty()
            && self.only_from.is_empty()
            && self.deny_user_agents.is_empty()
            && self.allow_api_keys.is_empty()
    }
}

/// Holding refused requests before answering them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarpitConfig {
    /// Each held request waits a random time in `min..=max`.
    pub delay_min: Duration,
    pub delay_max: Duration,
    /// Held at once per process (per tarpit); past it refusals are answered at once.
    pub max_concurrent: usize,
    /// After the hold: answer 429 (`reject`), or pass the request on (`pass`: slowed, not
    /// refused).
    pub then_pass: bool,
}

impl Default for TarpitConfig {
    fn default() -> Self {
        Self {
            delay_min: Duration::from_secs(1),
            delay_max: Duration::from_secs(3),
            max_concurrent: 256,
            then_pass: false,
        }
    }
}

/// What a limit does with a request over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// 429 at once.
    #[default]
    Reject,
    /// Held, then 429 (or passed on): see [`TarpitConfig`].
    Tarpit,
    /// 429 with `CHALLENGE_REQUIRED` and the limit's `challenge_url`.
    Challenge,
}

/// Plans, and how a caller's plan is found: the tenant's entry in `tenants`, else the plan
/// named by `from`, else `default`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plans {
    pub names: Vec<String>,
    pub defs: Vec<PlanDef>,
    /// Index into `names`.
    pub default: usize,
    /// A key source whose value names the caller's plan (e.g. `jwt:plan`).
    pub from: Option<KeySource>,
    /// A key source whose value names the caller's tenant, looked up in `tenants`.
    pub tenant: Option<KeySource>,
    /// Tenant -> plan index (a tenant with custom terms has a plan of its own).
    pub tenants: Vec<(String, usize)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanDef {
    pub rate: Option<Rate>,
    pub burst: u64,
    pub quota: Option<(u64, tollgate_limit::CalendarUnit)>,
}

/// Bearer-token verification. Keys are read and checked at load time.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtSettings {
    /// Accepted `alg` values (never `none`).
    pub algorithms: Vec<jsonwebtoken::Algorithm>,
    /// The HMAC secret for HS256/384/512.
    pub secret: Option<String>,
    /// PEM public keys (RSA or EC), each with the file it came from.
    pub public_keys: Vec<PublicKey>,
    /// A JWKS document (JSON), selected by the token's `kid`.
    pub jwks: Option<String>,
    /// `jwks_url`: the identity provider's keys, fetched in the background.
    pub remote: Option<RemoteJwks>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// The header carrying `Bearer <token>`, lower case.
    pub header: String,
}

/// `[jwt] jwks_url`, `jwks_ca`, `jwks_refetch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteJwks {
    pub url: String,
    /// PEM certificates the URL's server is verified with (system roots without).
    pub ca: Option<Vec<u8>>,
    /// The least time between two fetches for tokens naming a kid the set lacks.
    pub refetch: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub file: String,
    pub pem: Vec<u8>,
    /// RSA (RS*, PS*) or EC (ES*).
    pub rsa: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    pub target: RedisTarget,
    /// Budget of one global decision; past it the limit's `on_error` applies.
    pub timeout: Duration,
    /// The default for global limits that do not say.
    pub on_error: OnError,
    /// Gateways sharing the limits: a `local` fallback takes `rate / instances` each.
    pub instances: u32,
    /// Refusals remembered per global limit (the edge verdict cache).
    pub verdict_cache: usize,
    /// Redis calls this process may have waiting at once (a quarter kept for known keys).
    pub max_in_flight: usize,
    /// Set exactly when the URL(s) are `rediss://`: how the server is verified, and the
    /// client certificate shown for mutual TLS.
    pub tls: Option<RedisTls>,
    /// The password from `password_env` (a password written in the URL stays in the URL).
    pub password: Option<String>,
}

/// TLS to Redis. The server is always verified; nothing here can turn that off.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// `ca`: the PEM CA bundle that verifies the server; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// `client_cert`: a certificate (chain) and its key, as PEM, for mutual TLS.
    pub client_cert: Option<RedisClientCert>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct RedisClientCert {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field(
                "ca",
                &self.ca.as_ref().map(|c| format!("{} bytes", c.len())),
            )
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<set>"))
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Url(String),
    Cluster(Vec<String>),
}

/// What a global limit does when Redis does not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Admit (availability first).
    Open,
    /// Answer 503 (protection first).
    Closed,
    /// Decide on this process's own state at `rate / instances`.
    Local,
    /// The rate limit service fails the call (gRPC `UNAVAILABLE`), so that its caller's own
    /// failure policy decides (Envoy's `failure_mode_deny`); a route answers 503, as `closed`.
    Fail,
}

impl OnError {
    pub fn name(&self) -> &'static str {
        match self {
            OnError::Open => "open",
            OnError::Closed => "closed",
            OnError::Local => "local",
            OnError::Fail => "fail",
        }
    }
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
    /// Bearer token the admin listener requires for `/blocks` (none: that API is off).
    pub admin_token: Option<String>,
    /// Unix socket Pingora hands listeners over on `--upgrade`.
    pub upgrade_sock: PathBuf,
    /// Accept HTTP/2 with prior knowledge (h2c) on plaintext listeners.
    pub h2c: bool,
    /// One structured log line per request.
    pub access_log: bool,
    /// The access log also names each request's host and canonical path (never its query):
    /// what `tollgate simulate` needs to replay this gateway's own log. Off by default: a
    /// path can carry an identity.
    pub access_log_paths: bool,
    /// Also send X-RateLimit-Limit / -Remaining / -Reset (for clients that expect them).
    pub legacy_headers: bool,
    /// Keep HTTP/1 request header names' case toward the upstream (a second header map per
    /// request); otherwise they go as HTTP/2 requests' do (standard names in their usual case,
    /// others lower-case), as Envoy and HAProxy send them.
    pub preserve_header_case: bool,
    /// Keep request headers whose names hold `_`. Off (nginx's `underscores_in_headers off`):
    /// they are dropped before anything reads them, as CGI, WSGI, Rack and PHP read
    /// `X_Real_IP` as `X-Real-IP`. On: every header the gateway writes upstream also removes
    /// the client's underscore spellings of its name.
    pub underscores_in_headers: bool,
    /// The largest request body read for `body:FIELD` keys (bytes; at most 64 KiB, which
    /// Pingora can replay to the upstream).
    pub key_body_limit: usize,
    /// Deadlines and bounds on connections, and path canonicalisation.
    pub hardening: Hardening,
    /// TLS listeners (HTTP/1.1 and h2 by ALPN); their certificates are `[tls]`.
    pub tls_listen: Vec<SocketAddr>,
    /// Plaintext requests get 308 to https:// (routes may say otherwise).
    pub https_redirect: bool,
    /// The port redirects name; default: the first `tls_listen` port (443 is left out).
    pub https_port: Option<u16>,
    /// A request whose host some route names is matched against that host's routes only
    /// (unmatched: 404); with `host_fallthrough = true`, routes without a host are tried next.
    pub host_fallthrough: bool,
    /// The request body cap of routes that set none (0: none; docs/edge.md).
    pub max_body_bytes: u64,
    /// Header rules every route applies before its own (docs/edge.md).
    pub request_headers: crate::edge::HeaderRules,
    pub response_headers: crate::edge::HeaderRules,
}

/// `[tls]` (docs/tls.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// In order: the first is served to clients without SNI or with an unknown name.
    pub certificates: Vec<CertFiles>,
    /// Folders whose subfolders hold `tls.crt` + `tls.key` (mounted Kubernetes TLS Secrets),
    /// with the config key that named each.
    pub certificate_dirs: Vec<(PathBuf, String)>,
    pub min_version: TlsVersion,
    pub unknown_sni: UnknownSni,
    /// The Strict-Transport-Security value added to responses over TLS.
    pub hsts: Option<String>,
    /// Client certificates are asked for and verified against this CA bundle.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// A certificate chain and its private key (PEM files), and the config key that named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub key_path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    V12,
    V13,
}

/// A client hello whose SNI names no certificate (or that has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownSni {
    /// Served the first certificate.
    Default,
    /// The handshake fails.
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A handshake without a valid client certificate fails.
    Require,
    /// A client certificate is asked for; one that is sent must be valid.
    Optional,
}

/// An upstream's `tls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// CA bundle that verifies the upstream; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// The name sent and verified; `None`: the target's host name.
    pub sni: Option<String>,
    pub verify: bool,
    pub client_cert: Option<CertFiles>,
}

/// `[server]`'s edge-hardening keys (docs/hardening.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Hardening {
    /// The whole request head (and the h2c preface) must arrive within it.
    pub header_timeout: Duration,
    /// A kept-alive HTTP/1 connection without a next request, or an h2 connection without an
    /// open stream, is closed after it.
    pub idle_timeout: Duration,
    /// Between reads of a request body; `min_body_rate` applies once a body has been
    /// arriving for longer.
    pub body_timeout: Duration,
    /// The longest one write of an answer to the client may wait (a client that stops
    /// reading is cut off after it).
    pub send_timeout: Duration,
    /// Bytes per second.
    pub min_body_rate: u64,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    /// Per process.
    pub max_connections: usize,
    /// Per client address (IPv6 by `ipv6_prefix`); 0: no bound.
    pub max_connections_per_client: usize,
    pub max_h2_streams: usize,
    pub merge_slashes: bool,
    pub escaped_slashes: EscapedSlashes,
}

/// What an encoded `/` or `\` (`%2F`, `%5C`) in a request path becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// 400.
    Reject,
    /// Kept encoded, inside its segment.
    Keep,
    /// A `/` that separates segments.
    Decode,
}

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
    pub tls: Option<UpstreamTls>,
    /// HTTP/2 to the targets (gRPC): by ALPN over TLS, with prior knowledge without.
    pub h2: bool,
    /// Active TCP health check; `None` disables it (targets are then always considered up).
    pub health_check: Option<HealthCheck>,
    /// How a target is chosen (docs/upstreams.md, "Balancing").
    pub balance: crate::Balance,
    /// With `balance = "hash"`: what is hashed.
    pub hash_key: Option<crate::HashKey>,
    pub affinity: Option<crate::Affinity>,
    /// `None`: a failed connection tries the next target (nothing was sent), nothing else.
    pub retry: Option<crate::Retry>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub name: String,
    /// Lower-cased, without port; `*.example.com` matches one label in place of the `*`.
    /// The first of `host = [...]`.
    pub host: Option<String>,
    /// The rest of `host = [...]` (ingress-nginx `server-alias`): the route takes them too.
    pub aliases: Vec<String>,
    /// Which paths (canonical, as docs/hardening.md describes) the route takes.
    pub path: PathMatch,
    /// Paths match this route whatever their case (for upstreams that ignore case).
    pub case_insensitive: bool,
    /// How the path is changed before it goes to the upstream.
    pub rewrite: Option<Rewrite>,
    /// Some requests go to another upstream (a canary release).
    pub canary: Option<Canary>,
    /// Upper-case method names; `None` matches every method.
    pub methods: Option<Vec<String>>,
    pub action: RouteAction,
    /// Indexes into [`Config::limits`], in the order written.
    pub limits: Vec<usize>,
    /// The route's own access lists (added to `[access]`).
    pub access: Option<AccessConfig>,
    /// Refusals on this route are held first (limits whose action is `reject`).
    pub tarpit: Option<TarpitConfig>,
    /// Overrides `server.https_redirect` for this route.
    pub https_redirect: Option<bool>,
    /// Index into [`Config::auth`]: who may pass (docs/auth.md).
    pub auth: Option<usize>,
    /// Body cap, CORS, header rules, compression, bandwidth, www redirect (docs/edge.md).
    pub edge: crate::edge::EdgeConfig,
}

/// A route's paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// `path_prefix`: paths starting with it (the longest prefix wins).
    Prefix(String),
    /// `path_exact`: this path only (before any prefix).
    Exact(String),
    /// `path_regex`: paths it matches from their start (RE2 syntax), tried after exact and
    /// prefix routes, in file order.
    Regex(String),
}

impl PathMatch {
    /// The path, prefix or pattern as written (lower case on a case-insensitive route).
    pub fn as_str(&self) -> &str {
        match self {
            PathMatch::Prefix(p) | PathMatch::Exact(p) | PathMatch::Regex(p) => p,
        }
    }
}

/// The path sent to the upstream, made from the canonical request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// The first match of `regex` replaced by `replace` (`$1`, `${name}` refer to groups).
    Regex { regex: String, replace: String },
    /// This prefix taken off (what is left starts with `/`).
    StripPrefix(String),
}

/// One piece of a rewrite's `replace`: text written as it is, or a group of the regex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    Lit(String),
    /// `$1`, `${1}`.
    Index(usize),
    /// `$name`, `${name}`.
    Name(String),
}

/// `replace` in parts, by the `regex` crate's rules (`$$` is a `$`; `$name` takes the longest
/// run of letters, digits and `_`, a number of it being an index; a `$` not followed by a name
/// is written as it is), so a template means what it meant before it was split.
pub fn rewrite_template(replace: &str) -> Vec<TemplatePart> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = replace;
    while let Some(at) = rest.find('$') {
        lit.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let (name, next) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) if end > 0 => (&braced[..end], &braced[end + 1..]),
                _ => ("", after),
            }
        } else if let Some(r) = after.strip_prefix('$') {
            lit.push('$');
            rest = r;
            continue;
        } else {
            let end = after.find(|c: char| !is_name(c)).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            lit.push('$');
            rest = after;
            continue;
        }
        if !lit.is_empty() {
            parts.push(TemplatePart::Lit(std::mem::take(&mut lit)));
        }
        parts.push(match name.parse::<usize>() {
            Ok(i) => TemplatePart::Index(i),
            Err(_) => TemplatePart::Name(name.to_string()),
        });
        rest = next;
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        parts.push(TemplatePart::Lit(lit));
    }
    parts
}

/// A canary: requests chosen by header, cookie or weight go to `upstream`; the rest stay on
/// the route's own upstream. Header first, then cookie, then weight (ingress-nginx's order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canary {
    /// Index into [`Config::upstreams`].
    pub upstream: usize,
    /// Of every `weight_total` requests left to chance, this many go to the canary.
    pub weight: u32,
    pub weight_total: u32,
    /// Lower-case name: "always" sends to the canary, "never" keeps off it (or, with
    /// `header_value`, that value sends to the canary); other values are left to the cookie
    /// and the weight.
    pub header: Option<String>,
    pub header_value: Option<String>,
    /// A cookie name: "always" or "never", as the header.
    pub cookie: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RouteAction {
    /// Index into [`Config::upstreams`].
    Upstream(usize),
    /// Answered by the gateway itself (`location`: a redirect's Location header).
    Respond {
        status: u16,
        body: String,
        location: Option<String>,
    },
}

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

/// The keys a reload cannot change (they are read once, at start or by Pingora's listeners),
/// declared beside the fields: each struct is taken apart field by field with no `..`, so a
/// new field does not compile until it is classed as changing at once or only on restart.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    old.server.restart_only_changes(&new.server, &mut changed);
    let tls = |c: &Config| c.tls.as_ref().map(|t| t.min_version);
    if tls(old) != tls(new) {
        changed.push("tls.min_version");
    }
    if old.rls.as_ref().map(|r| (r.listen, r.tls)) != new.rls.as_ref().map(|r| (r.listen, r.tls)) {
        changed.push("rls.listen, rls.tls");
    }
    if old.redis.as_ref().map(RedisSettings::restart_only)
        != new.redis.as_ref().map(RedisSettings::restart_only)
    {
        changed.push("redis (url, cluster, timeout, ca, client_cert, password_env, max_in_flight)");
    }
    changed
}

impl ServerConfig {
    fn restart_only_changes(&self, new: &Self, changed: &mut Vec<&'static str>) {
        let ServerConfig {
            // Read at start: listeners, the admin listener, worker threads, h2c, the case
            // maps, the drain and upgrade settings.
            listen,
            admin,
            threads,
            grace_period,
            upgrade_sock,
            h2c,
            preserve_header_case,
            tls_listen,
            hardening,
            // Read per request or per connection from the current runtime: a reload changes
            // them at once.
            trusted_proxies: _,
            ipv6_prefix: _,
            shadow: _,
            admin_token: _,
            access_log: _,
            access_log_paths: _,
            legacy_headers: _,
            key_body_limit: _,
            underscores_in_headers: _,
            https_redirect: _,
            https_port: _,
            host_fallthrough: _,
            max_body_bytes: _,
            request_headers: _,
            response_headers: _,
        } = self;
        let mut check = |key, same: bool| {
            if !same {
                changed.push(key);
            }
        };
        check("server.listen", *listen == new.listen);
        check("server.tls_listen", *tls_listen == new.tls_listen);
        check("server.admin", *admin == new.admin);
        check("server.threads", *threads == new.threads);
        check("server.h2c", *h2c == new.h2c);
        check(
            "server.preserve_header_case",
            *preserve_header_case == new.preserve_header_case,
        );
        check("server.grace_period", *grace_period == new.grace_period);
        check("server.upgrade_sock", *upgrade_sock == new.upgrade_sock);
        check(
            "server.header_timeout, idle_timeout, max_header_bytes, max_headers, max_h2_streams",
            hardening.listener_settings() == new.hardening.listener_settings(),
        );
    }
}

impl Hardening {
    /// What Pingora's listeners and h2 settings read at start; the rest applies at once.
    fn listener_settings(&self) -> (Duration, Duration, usize, usize, usize) {
        let Hardening {
            header_timeout,
            idle_timeout,
            max_header_bytes,
            max_headers,
            max_h2_streams,
            // Read per request or per connection: a reload changes them at once.
            body_timeout: _,
            send_timeout: _,
            min_body_rate: _,
            max_connections: _,
            max_connections_per_client: _,
            merge_slashes: _,
            escaped_slashes: _,
        } = self;
        (
            *header_timeout,
            *idle_timeout,
            *max_header_bytes,
            *max_headers,
            *max_h2_streams,
        )
    }
}

impl RedisSettings {
    /// The settings the Redis connections are made from, at start.
    #[allow(clippy::type_complexity)]
    fn restart_only(
        &self,
    ) -> (
        &RedisTarget,
        Duration,
        &Option<RedisTls>,
        &Option<String>,
        usize,
    ) {
        let RedisSettings {
            target,
            timeout,
            tls,
            password,
            max_in_flight,
            // Read by the runtime, rebuilt on reload.
            on_error: _,
            instances: _,
            verdict_cache: _,
        } = self;
        (target, *timeout, tls, password, *max_in_flight)
    }
}

/// One authentication (`[auth.NAME]` or a route's `auth = { ... }`): exactly one method.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthConfig {
    /// The table's name, or the route's for an inline table (metrics' `route` label is the
    /// route's either way).
    pub name: String,
    pub method: AuthMethod,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AuthMethod {
    Jwt(JwtAuth),
    Forward(ForwardAuth),
    Basic(BasicAuth),
    ApiKey(ApiKeyAuth),
}

impl AuthMethod {
    /// The `method` label of `tollgate_auth_total`.
    pub fn label(&self) -> &'static str {
        match self {
            AuthMethod::Jwt(_) => "jwt",
            AuthMethod::Forward(_) => "forward",
            AuthMethod::Basic(_) => "basic",
            AuthMethod::ApiKey(_) => "api_key",
        }
    }
}

/// `jwt = "required" | "optional"` with its `claims` and `forward_claims`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtAuth {
    /// `required`: no token is 401. `optional`: no token passes (without claims); a token
    /// that does not verify, or lacks the claims, is refused either way.
    pub required: bool,
    pub claims: Vec<ClaimRule>,
    /// (claim, header): the claim's value sent upstream in the header (lower case); a
    /// client's own copies of the header are removed first.
    pub forward_claims: Vec<(String, String)>,
    /// The bearer token goes on to the upstream (default; Envoy jwt_authn's `forward`).
    pub forward_token: bool,
}

/// A claim the token must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRule {
    /// `scope` / `scp`: every listed scope among the token's (a space-separated string or an
    /// array of strings).
    Scopes { claim: String, all: Vec<String> },
    /// Any other claim: its value (a string, number or boolean, or an array holding one) is
    /// one of these.
    OneOf { claim: String, any: Vec<String> },
}

/// `forward = { url, ... }`: an auth service asked per request (or its cache entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// `http://` or `https://` URL, as written.
    pub url: String,
    /// The auth request's method; `None`: the client's.
    pub method: Option<String>,
    /// Client headers sent to the auth service (lower case); `None`: every end-to-end header
    /// of the request (ingress-nginx and Traefik's default). The body never is.
    pub request_headers: Option<Vec<String>>,
    /// Headers of the auth service's 2xx answer copied onto the upstream request (lower case).
    pub response_headers: Vec<String>,
    /// Where a 401 sends the client instead (302 with `rd=` the original URL).
    pub signin: Option<String>,
    /// `X-Auth-Request-Redirect` sent to the auth service; `None`: the request's URI.
    pub redirect: Option<String>,
    pub timeout: Duration,
    /// How long an answer is reused; `None`: never.
    pub cache: Option<Duration>,
    /// What identifies a cache entry: key sources (`header:NAME`, `query:NAME`, `client_ip`,
    /// `path`, `method`, `route`).
    pub cache_key: Vec<KeySource>,
}

/// `basic = { htpasswd, realm }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    pub file: PathBuf,
    /// (user, hash) as the file holds them, every hash in a format that can be verified.
    pub users: Vec<(String, String)>,
    pub realm: String,
    /// The `Authorization` header is removed before the upstream (default).
    pub hide_credentials: bool,
    /// Hashes that verify but are weak (warned about at load, by file and line).
    pub weak: Vec<WeakHash>,
}

/// A weak password hash: where it is (`FILE line N`, or `DIR/USER`) and why it is weak, never
/// the hash itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeakHash {
    pub at: String,
    pub why: String,
}

/// `api_key = { header | query, keys_file }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyAuth {
    /// Lower case.
    pub header: Option<String>,
    pub query: Option<String>,
    pub file: PathBuf,
    /// (consumer, key).
    pub keys: Vec<(String, String)>,
    /// The key (header and query parameter, every spelling taken) is removed before the
    /// upstream (default).
    pub hide_credentials: bool,
}
