//! `[[routes]]`: what a request matches, its rewrite, its canary and its action.

use super::access::{AccessConfig, TarpitConfig};
use super::edge::EdgeConfig;

/// The rare parts (rewrite, canary, access, tarpit) are boxed and the edge table shared, so
/// that a route that uses none of them costs its name, host, path and action: a cluster's
/// 15,000 routes are mostly that (issue 40).
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
    pub rewrite: Option<Box<Rewrite>>,
    /// Some requests go to another upstream (a canary release).
    pub canary: Option<Box<Canary>>,
    /// Upper-case method names; `None` matches every method.
    pub methods: Option<Vec<String>>,
    pub action: RouteAction,
    /// Indexes into [`crate::model::Config::limits`], in the order written.
    pub limits: Vec<usize>,
    /// The route's own access lists (added to `[access]`).
    pub access: Option<Box<AccessConfig>>,
    /// Refusals on this route are held first (limits whose action is `reject`).
    pub tarpit: Option<Box<TarpitConfig>>,
    /// Overrides `server.https_redirect` for this route.
    pub https_redirect: Option<bool>,
    /// Index into [`crate::model::Config::auth`]: who may pass (docs/auth.md).
    pub auth: Option<usize>,
    /// Body cap, CORS, header rules, compression, bandwidth, www redirect (docs/edge.md).
    /// Shared: the routes that set nothing of it hold one default ([`EdgeConfig::shared`]).
    pub edge: std::sync::Arc<EdgeConfig>,
    /// `default_backend` and `error_pages` (docs/edge.md).
    pub fallback: Option<Box<Fallback>>,
    /// `match_headers` and `match_query`: a request without them falls through to the next
    /// route, as one with another method does.
    pub matches: Option<Box<Matches>>,
    /// `backends`: the requests split among upstreams by weight (the action's upstream is the
    /// first of them).
    pub split: Option<Box<Split>>,
    /// `ports`: the local ports the route takes requests on; `None`: every port.
    pub ports: Option<Vec<u16>>,
    /// `listener_host`: the hostname of the listener (of `ports`) the route belongs to: a
    /// request is its listener's, the one whose hostname matches it most specifically, and
    /// meets that listener's routes only (the Gateway API's listener isolation).
    pub listener_host: Option<String>,
    /// `redirect`: the route answers with a Location made from the request (its action is
    /// `Respond` with the redirect's status).
    pub redirect: Option<Box<Redirect>>,
    /// `timeouts = { request, upstream }`.
    pub timeouts: Option<Box<RouteTimeouts>>,
}

/// A route's `timeouts`: to the answer's head from the request's arrival, and per attempt on
/// the upstream (in place of its `read_timeout`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteTimeouts {
    pub request: Option<std::time::Duration>,
    pub upstream: Option<std::time::Duration>,
}

/// `redirect = { status, scheme, host, port, path | replace_prefix }` (the Gateway API's
/// RequestRedirect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub status: u16,
    /// `None`: the request's.
    pub scheme: Option<String>,
    /// `None`: the request's host.
    pub host: Option<String>,
    /// `None`: the scheme's own port when `scheme` is set, else the port the request came
    /// in on. A scheme's own port (80, 443) is left out of the Location.
    pub port: Option<u16>,
    /// `None`: the request's path.
    pub path: Option<RedirectPath>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectPath {
    /// The whole path replaced.
    Full(String),
    /// `matched` (the route's prefix, without a trailing `/`) replaced by `with`.
    Prefix { matched: String, with: String },
}

impl RouteConfig {
    /// Every upstream the route can send to: its own, its canary's, its split's.
    pub fn upstreams_used(&self) -> Vec<usize> {
        let mut out: Vec<usize> = match &self.action {
            RouteAction::Upstream(u) => vec![*u],
            RouteAction::Respond { .. } => Vec::new(),
        };
        out.extend(self.canary.as_ref().map(|c| c.upstream));
        for b in self.split.iter().flat_map(|s| &s.backends) {
            out.extend(b.upstream.filter(|u| !out.contains(u)));
        }
        out
    }
}

/// What besides host, path and method a request must carry to take a route (the Gateway
/// API's header and query matches).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matches {
    /// Header names lower-cased; a header sent in several fields is one value joined by
    /// `, ` (RFC 9110, as Envoy and nginx's `$http_NAME` read it).
    pub headers: Vec<ValueMatch>,
    /// Query parameter names as written (case-sensitive), compared decoded.
    pub query: Vec<ValueMatch>,
}

/// One name and what its value must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMatch {
    pub name: String,
    pub value: ValueMatcher,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueMatcher {
    /// The whole value, byte for byte.
    Exact(String),
    /// A regular expression (RE2 syntax) matching the whole value.
    Regex(String),
}

/// `backends = [{ upstream, weight }, ...]`: each request goes to one of them, chosen at
/// random by weight (the Gateway API's weighted `backendRefs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// In the order written; weight 0 ones get nothing.
    pub backends: Vec<Backend>,
    /// The sum of the weights (above 0).
    pub total: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Index into [`crate::model::Config::upstreams`]; `None` is `{ status = 500 }`: that
    /// share of requests is answered 500 (a backend the Gateway API names that cannot be
    /// used).
    pub upstream: Option<usize>,
    pub weight: u32,
}

/// Where a route's requests go when its upstream cannot serve them, and who answers its
/// errors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fallback {
    /// `default_backend`: the upstream (index into [`crate::model::Config::upstreams`]) the
    /// route's requests go to while its own upstream has no targets (ingress-nginx's
    /// `default-backend`).
    pub default_backend: Option<usize>,
    /// `error_pages`: answers with these statuses are replaced by another upstream's.
    pub error_pages: Option<ErrorPages>,
}

/// `error_pages = { codes, upstream, headers }`: nginx's `error_page` with
/// `proxy_intercept_errors` (ingress-nginx's `custom-http-errors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPages {
    /// 400 to 599, sorted, each once.
    pub codes: Vec<u16>,
    /// Index into [`crate::model::Config::upstreams`]: asked over plain HTTP/1.1.
    pub upstream: usize,
    /// Fields sent to it besides the gateway's (`X-Code`, `X-Format`, `X-Original-URI`, ...).
    pub headers: Vec<(String, String)>,
    /// The upstream's answers are replaced too (`false`: only the gateway's own 502, 503 and
    /// 504, as ingress-nginx's `disable-proxy-intercept-errors`).
    pub upstream_answers: bool,
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
    /// Index into [`crate::model::Config::upstreams`].
    pub upstream: usize,
    /// Of every `weight_total` requests left to chance, this many go to the canary.
    pub weight: u32,
    pub weight_total: u32,
    /// Lower-case name: "always" sends to the canary, "never" keeps off it (or, with
    /// `header_value`, that value sends to the canary); other values are left to the cookie
    /// and the weight.
    pub header: Option<String>,
    pub header_value: Option<String>,
    /// Instead of `header_value`: a regular expression (RE2 syntax, unanchored, as
    /// ingress-nginx's `canary-by-header-pattern`); a value it matches sends to the canary,
    /// and "always" / "never" mean nothing of their own.
    pub header_pattern: Option<String>,
    /// A cookie name: "always" or "never", as the header.
    pub cookie: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RouteAction {
    /// Index into [`crate::model::Config::upstreams`].
    Upstream(usize),
    /// Answered by the gateway itself (`location`: a redirect's Location header).
    Respond {
        status: u16,
        body: String,
        location: Option<String>,
    },
}

/// A route host's wildcard, as it is spelt: `*.example.com` is one label in place of the `*`
/// (the Ingress's), `**.example.com` one label or more (the Gateway API's `*.example.com`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wildcard<'a> {
    /// `*.PARENT`.
    OneLabel(&'a str),
    /// `**.PARENT`.
    AnyDepth(&'a str),
}

impl<'a> Wildcard<'a> {
    /// The wildcard of a route host (as the config keeps it), `None` for an exact host.
    pub fn of(host: &'a str) -> Option<Self> {
        if let Some(p) = host.strip_prefix("**.") {
            Some(Wildcard::AnyDepth(p))
        } else {
            host.strip_prefix("*.").map(Wildcard::OneLabel)
        }
    }

    /// The name below the wildcard.
    pub fn parent(self) -> &'a str {
        match self {
            Wildcard::OneLabel(p) | Wildcard::AnyDepth(p) => p,
        }
    }

    /// Whether a request for `host` (lower case, no port) is under it.
    pub fn covers(self, host: &str) -> bool {
        match self {
            Wildcard::OneLabel(p) => host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == p),
            Wildcard::AnyDepth(p) => {
                host.len() > p.len() + 1
                    && host.ends_with(p)
                    && host.as_bytes()[host.len() - p.len() - 1] == b'.'
                    && !host.starts_with('.')
            }
        }
    }
}
