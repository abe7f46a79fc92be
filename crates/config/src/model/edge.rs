//! A route's edge keys (docs/edge.md): the body cap, CORS, header rules, compression, bandwidth, www redirect.

/// The request body cap when neither `[server]` nor the route says (nginx's and
/// ingress-nginx's `client_max_body_size`).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;

/// Responses shorter than this (by their Content-Length) are not compressed.
pub const COMPRESS_MIN_BYTES: u64 = 256;

/// What a route does at the edge besides routing, auth and limits. The default does nothing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EdgeConfig {
    /// The route's own request body cap (`None`: `[server] max_body_bytes`; 0: none).
    pub max_body_bytes: Option<u64>,
    pub cors: Option<CorsConfig>,
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
    /// The Host the upstream is sent (ingress-nginx `upstream-vhost`).
    pub upstream_host: Option<String>,
    /// `X-Forwarded-Prefix` sent upstream: a path, or the prefix `strip_prefix` takes off.
    pub x_forwarded_prefix: Option<String>,
    /// gzip, brotli or zstd by the client's Accept-Encoding.
    pub compress: bool,
    /// Bytes per second per response (0: none), after `limit_rate_after` bytes.
    pub limit_rate: u64,
    pub limit_rate_after: u64,
    /// The other spelling of the route's one host (with or without `www.`) answers 308 to it.
    pub www_redirect: bool,
    /// What the upstream is told of the client's certificate (ingress-nginx's fields).
    pub client_cert_headers: ClientCertHeaders,
    /// The HTTPS redirect drops one trailing `/` of the path and query, as ingress-nginx's
    /// does without `preserve-trailing-slash`.
    pub https_redirect_drop_slash: bool,
    /// nginx's `proxy_redirect`: a `Location` / `Refresh` URL starting with `from` starts
    /// with `to` instead (the first that matches).
    pub proxy_redirect: Vec<Replace>,
    /// nginx's `proxy_cookie_domain`: a `Set-Cookie` Domain equal to `from` (case-insensitive,
    /// a leading dot ignored; `from` kept without it) becomes `to`.
    pub proxy_cookie_domain: Vec<Replace>,
    /// nginx's `proxy_cookie_path`: a `Set-Cookie` Path starting with `from` starts with `to`.
    pub proxy_cookie_path: Vec<Replace>,
    /// nginx's `mirror`: a copy of each request the route passes upstream, its answer unread.
    pub mirror: Option<MirrorConfig>,
}

/// `mirror = { url, host, body, timeout }` (docs/edge.md): where a copy of each request the
/// route passes upstream goes. The copy is the request as the upstream is sent it (after the
/// route's header rules and what the gateway owns); its answer is read and dropped, and never
/// changes or delays the client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorConfig {
    /// The URL the copy is sent to, its `$` variables filled per request.
    pub url: Vec<MirrorPart>,
    /// The Host the copy carries (by default the URL's host, as ingress-nginx's mirror-host).
    pub host: String,
    /// The request body goes too (nginx's `mirror_request_body`, on by default).
    pub body: bool,
    /// The copy's whole exchange, connect to answer.
    pub timeout: std::time::Duration,
    /// `upstream`: the copy goes to this upstream's targets in turn (its endpoints as placed),
    /// over plain HTTP; `url` is then the path alone, and the copy keeps the request's
    /// `Host` unless `host` says otherwise (an empty `host` here).
    pub upstream: Option<usize>,
}

/// A piece of the mirror URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorPart {
    Text(String),
    /// `$request_uri`: the client's path and query as it sent them.
    RequestUri,
    /// `$uri`: the path the gateway routed by (normalized, without the query).
    Uri,
    /// `$args` / `$query_string`: the query, without `?`.
    Args,
    /// `$is_args`: `?` when there is a query.
    IsArgs,
    /// `$host`: the request's host, without its port.
    Host,
    /// `$scheme`: `http` or `https`, as the client spoke to the gateway.
    Scheme,
}

/// `client_cert_headers`: the fields ingress-nginx sends the upstream of a host that asks
/// for client certificates, written by the gateway (a client's own copies never pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientCertHeaders {
    /// None of them (a client's copies pass as any header).
    #[default]
    Off,
    /// `true`: `ssl-client-verify`, `ssl-client-subject-dn`, `ssl-client-issuer-dn`.
    Verify,
    /// `"with_certificate"`: those and `ssl-client-cert` (the PEM, URI-escaped).
    WithCertificate,
}

/// One `{ from, to }` of the response rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replace {
    pub from: String,
    pub to: String,
}

/// `cors = { ... }` (docs/edge.md): which origins a browser may call the route from.
impl EdgeConfig {
    /// `edge` behind an `Arc`: the default (what most routes have) is one value that every
    /// such route shares.
    pub fn shared(edge: EdgeConfig) -> std::sync::Arc<EdgeConfig> {
        static DEFAULT: std::sync::LazyLock<std::sync::Arc<EdgeConfig>> =
            std::sync::LazyLock::new(Default::default);
        if edge == EdgeConfig::default() {
            DEFAULT.clone()
        } else {
            std::sync::Arc::new(edge)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsConfig {
    pub allow_origins: Vec<OriginRule>,
    /// Upper case.
    pub allow_methods: Vec<String>,
    /// As written (header names; `*` allowed without credentials).
    pub allow_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub allow_credentials: bool,
    /// Seconds a browser may keep a preflight's answer.
    pub max_age: Option<u64>,
    /// A `*` in `allow_origins`, `allow_methods` or `allow_headers` is answered with what the
    /// request named (its `Origin`, `Access-Control-Request-Method`, `-Headers`), never `*`:
    /// the Gateway API's rule, and the only way a `*` may go with credentials.
    pub echo_wildcards: bool,
}

/// One `allow_origins` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginRule {
    /// `*`: any origin (answered `*`, never with credentials).
    Any,
    /// `scheme://host[:port]` in lower case.
    Exact(String),
    /// `scheme://*.suffix[:port]`: one or more labels before `.suffix` (lower case), the
    /// scheme and the port exactly as written.
    Subdomains {
        scheme: String,
        suffix: String,
        port: Option<u16>,
    },
}

impl OriginRule {
    /// Whether `origin` (as the browser sent it) is allowed by this rule.
    pub fn admits(&self, origin: &str) -> bool {
        let lower = origin.to_ascii_lowercase();
        let Some((scheme, host, port)) = split_origin(&lower) else {
            return false;
        };
        match self {
            OriginRule::Any => true,
            OriginRule::Exact(o) => *o == lower,
            OriginRule::Subdomains {
                scheme: s,
                suffix,
                port: p,
            } => {
                scheme == s
                    && port == *p
                    && host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
                    && host[..host.len() - suffix.len() - 1]
                        .split('.')
                        .all(dns_label)
            }
        }
    }
}

/// Whether `o` is a serialized origin, `scheme://host[:port]` (http or https; not `null`,
/// no path).
pub fn is_origin(o: &str) -> bool {
    split_origin(&o.to_ascii_lowercase()).is_some()
}

pub(crate) fn dns_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// `scheme://host[:port]` (lower case) into its parts; `None` for anything else (a path, a
/// user, `null`, an empty host).
pub(crate) fn split_origin(o: &str) -> Option<(&str, &str, Option<u16>)> {
    let (scheme, rest) = o.split_once("://")?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() {
        return None;
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            if h.starts_with('[') && !h.ends_with(']') {
                (rest, None)
            } else {
                (h, Some(p.parse::<u16>().ok()?))
            }
        }
        _ => (rest, None),
    };
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        host.split('.').all(dns_label)
    };
    host_ok.then_some((scheme, host, port))
}

/// `request_headers` / `response_headers`: `set` replaces, `add` appends, `remove` deletes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderRules {
    /// (lower-case name, value).
    pub set: Vec<(String, HeaderTemplate)>,
    pub add: Vec<(String, HeaderTemplate)>,
    /// Lower case.
    pub remove: Vec<String>,
}

impl HeaderRules {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Every name a rule writes or removes.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.set
            .iter()
            .chain(&self.add)
            .map(|(n, _)| n.as_str())
            .chain(self.remove.iter().map(String::as_str))
    }
}

/// A header value: text and the variables filled in per request.
pub type HeaderTemplate = Vec<HeaderPart>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderPart {
    Lit(String),
    Var(HeaderVar),
}

/// What a header value may name: `$client_ip`, `$request_id`, `$host`, `$route`, `$scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderVar {
    /// The client's address (X-Forwarded-For's rules: a trusted proxy's client).
    ClientIp,
    RequestId,
    /// The canonical host the request was routed by (lower case, no port).
    Host,
    /// The route's name.
    Route,
    /// `http` or `https`.
    Scheme,
}

impl HeaderVar {
    pub(crate) const ALL: [(&'static str, HeaderVar); 5] = [
        ("client_ip", HeaderVar::ClientIp),
        ("request_id", HeaderVar::RequestId),
        ("host", HeaderVar::Host),
        ("route", HeaderVar::Route),
        ("scheme", HeaderVar::Scheme),
    ];
}
