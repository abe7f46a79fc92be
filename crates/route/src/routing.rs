//! Which route a request takes, and what a route does to it on the way up: host tiers
//! (exact, wildcard, none), path matching (exact, prefix, regex), the path rewrite, and the
//! canary's upstream choice.
//!
//! ingress-nginx semantics: a request whose host a route names meets that host's routes only
//! (an unmatched path is 404, or the host's own `/` route), and an exact host beats a
//! wildcard one; `[server] host_fallthrough = true` tries the less specific tiers after it.

use crate::normalize::{normalize_path, PathRules, Refusal};
use http::HeaderMap;
use tollgate_config::model::{
    rewrite_template, Canary, PathMatch, Rewrite, RouteConfig, TemplatePart, Wildcard,
};

/// One way a request may meet a route: by one of its hosts (the first, or an alias), or by
/// the other spelling of its one host (`www_redirect`: answered with a redirect to it).
#[derive(Debug, Clone)]
pub struct Entry {
    pub route: usize,
    /// The host this entry matches; `None`: the route names none.
    pub host: Option<Box<str>>,
    /// The other spelling of the route's host: redirected, never served.
    pub www: bool,
}

/// `www.example.com` <-> `example.com`.
pub fn www_other(host: &str) -> String {
    match host.strip_prefix("www.") {
        Some(bare) => bare.to_string(),
        None => format!("www.{host}"),
    }
}

/// Every entry in match order: host tier (exact, wildcard with the longest parent first,
/// none), then path kind (exact, prefix, regex), then longer prefixes first, then file order.
pub fn order<'a>(routes: impl Iterator<Item = &'a RouteConfig>) -> Vec<Entry> {
    let mut keyed: Vec<_> = Vec::new();
    for (i, r) in routes.enumerate() {
        let (kind, len) = match &r.path {
            PathMatch::Exact(p) => (0, p.len()),
            PathMatch::Prefix(p) => (1, p.len()),
            PathMatch::Regex(_) => (2, 0),
        };
        let mut hosts: Vec<(Option<Box<str>>, bool)> = r
            .host
            .iter()
            .chain(&r.aliases)
            .map(|h| (Some(Box::from(h.as_str())), false))
            .collect();
        if let (Some(h), true) = (&r.host, r.edge.www_redirect) {
            hosts.push((Some(www_other(h).into_boxed_str()), true));
        }
        if hosts.is_empty() {
            hosts.push((None, false));
        }
        for (host, www) in hosts {
            // A wildcard's parent: the longer, the more specific (`*.a.test` before
            // `**.test`, as the table looks the nearest parent up first).
            let (tier, parent) = match host.as_deref() {
                Some(h) => match Wildcard::of(h) {
                    Some(w) => (1, w.parent().len()),
                    None => (0, 0),
                },
                None => (2, 0),
            };
            keyed.push((
                (
                    tier,
                    std::cmp::Reverse(parent),
                    kind,
                    std::cmp::Reverse(len),
                    i,
                    www,
                ),
                Entry {
                    route: i,
                    host,
                    www,
                },
            ));
        }
    }
    keyed.sort_by_key(|k| k.0);
    keyed.into_iter().map(|(_, e)| e).collect()
}

/// Where a host's routes take requests: everywhere, or on these (port, listener) scopes
/// (`ports`, and `listener_host`: `None` any listener of the port).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Ports {
    #[default]
    All,
    Some(Vec<(u16, Option<Box<str>>)>),
}

/// A route's scope: its `ports` and `listener_host`; `None`: every port.
pub type Scope<'a> = Option<(&'a [u16], Option<&'a str>)>;

impl Ports {
    fn of(scope: Scope) -> Self {
        let mut p = Ports::Some(Vec::new());
        p.add(scope);
        p
    }

    fn add(&mut self, more: Scope) {
        match (&mut *self, more) {
            (Ports::All, _) => {}
            (Ports::Some(_), None) => *self = Ports::All,
            (Ports::Some(have), Some((ports, listener))) => {
                for p in ports {
                    let s = (*p, listener.map(Box::from));
                    if !have.contains(&s) {
                        have.push(s);
                    }
                }
            }
        }
    }

    /// Whether a request on `port`, given to the listener of hostname `listener`, may meet
    /// these routes.
    fn admits(&self, port: Option<u16>, listener: Option<&str>) -> bool {
        match (self, port) {
            (Ports::All, _) | (_, None) => true,
            (Ports::Some(have), Some(p)) => have
                .iter()
                .any(|(hp, hl)| *hp == p && hl.as_deref().is_none_or(|l| Some(l) == listener)),
        }
    }
}

/// The hosts routes name, with the ports their routes take requests on.
#[derive(Default)]
pub struct Hosts {
    exact: std::collections::HashMap<String, Ports>,
    /// `*.example.com` as `example.com`.
    wildcard: std::collections::HashMap<String, Ports>,
    /// `**.example.com` as `example.com`.
    deep: std::collections::HashMap<String, Ports>,
}

/// Which routes a request may meet, by their host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Routes of exactly this host only.
    Exact,
    /// Routes of the wildcard covering this host only.
    Wildcard,
    /// Routes without a host only.
    None,
    /// Every matching route, most specific first (`host_fallthrough`).
    Any,
}

impl Hosts {
    /// `scope_of(route)`: the route's `ports` and `listener_host`, `None` for every port.
    pub fn new<'a>(entries: &[Entry], scope_of: impl Fn(usize) -> Scope<'a>) -> Self {
        let mut h = Hosts::default();
        for e in entries {
            let (map, key) = match e.host.as_deref().map(|x| (x, Wildcard::of(x))) {
                Some((_, Some(Wildcard::OneLabel(p)))) => (&mut h.wildcard, p),
                Some((_, Some(Wildcard::AnyDepth(p)))) => (&mut h.deep, p),
                Some((x, None)) => (&mut h.exact, x),
                None => continue,
            };
            let scope = scope_of(e.route);
            map.entry(key.to_string())
                .and_modify(|have| have.add(scope))
                .or_insert_with(|| match scope {
                    Some(_) => Ports::of(scope),
                    None => Ports::All,
                });
        }
        h
    }

    /// Whether any route's host is a wildcard of any depth (lookups then walk the host's
    /// suffixes).
    pub fn any_deep(&self) -> bool {
        !self.deep.is_empty()
    }

    /// The tier of a request for `host` that came in on local `port` (`None`: any), given to
    /// the listener of hostname `listener` (see [`crate::listeners`]): only the hosts of
    /// routes it may meet count.
    pub fn tier(
        &self,
        host: Option<&str>,
        port: Option<u16>,
        listener: Option<&str>,
        fallthrough: bool,
    ) -> Tier {
        // No route names a host: every route is host-less, nothing to look up.
        if fallthrough
            || (self.exact.is_empty() && self.wildcard.is_empty() && self.deep.is_empty())
        {
            return Tier::Any;
        }
        let Some(host) = host else {
            return Tier::None;
        };
        let on = |m: &std::collections::HashMap<String, Ports>, k: &str| {
            m.get(k).is_some_and(|p| p.admits(port, listener))
        };
        if on(&self.exact, host) {
            return Tier::Exact;
        }
        let mut parent = wildcard_parent(host);
        if parent.is_some_and(|p| on(&self.wildcard, p)) {
            return Tier::Wildcard;
        }
        if !self.deep.is_empty() {
            while let Some(p) = parent {
                if on(&self.deep, p) {
                    return Tier::Wildcard;
                }
                parent = wildcard_parent(p);
            }
        }
        Tier::None
    }
}

/// `a.example.com` -> `example.com` (one label, not empty); `None` for a name of one label.
pub(crate) fn wildcard_parent(host: &str) -> Option<&str> {
    match host.split_once('.') {
        Some((label, rest)) if !label.is_empty() && !rest.is_empty() => Some(rest),
        _ => None,
    }
}

impl Tier {
    /// Whether a route with host `want` may take a request for `host`.
    pub fn admits(self, want: Option<&str>, host: Option<&str>) -> bool {
        let wild = want.and_then(Wildcard::of);
        let fits = match (want, host) {
            (None, _) => true,
            (Some(_), Some(h)) if wild.is_some() => wild.is_some_and(|w| w.covers(h)),
            (Some(w), Some(h)) => w == h,
            (Some(_), None) => false,
        };
        fits && match self {
            Tier::Any => true,
            Tier::Exact => want.is_some() && wild.is_none(),
            Tier::Wildcard => wild.is_some(),
            Tier::None => want.is_none(),
        }
    }
}

/// Whether the route's paths include `path` (canonical; a case-insensitive route's own
/// paths are in lower case, its regex compiled case-insensitive).
pub fn path_matches(r: &RouteConfig, regex: Option<&regex::Regex>, path: &str) -> bool {
    let (path, ci) = (path.as_bytes(), r.case_insensitive);
    match &r.path {
        PathMatch::Exact(want) if ci => path.eq_ignore_ascii_case(want.as_bytes()),
        PathMatch::Exact(want) => path == want.as_bytes(),
        PathMatch::Prefix(want) => {
            let want = want.as_bytes();
            path.len() >= want.len()
                && if ci {
                    path[..want.len()].eq_ignore_ascii_case(want)
                } else {
                    &path[..want.len()] == want
                }
        }
        PathMatch::Regex(_) => {
            regex.is_some_and(|re| std::str::from_utf8(path).is_ok_and(|p| re.is_match(p)))
        }
    }
}

/// A route's `rewrite` or `strip_prefix`, ready to apply.
///
/// What the upstream reads is held to the rules of a client's request (docs/routes.md,
/// "Rewrites"): the path written is made canonical by [`normalize_path`] under the same rules
/// (and refused where a client's would be); it may hold no dot segment (a client's `..` is
/// resolved and the result routed again, a rewrite's output is not routed again: a `..` would
/// reach a path no route chose); text taken from the client's path into the query the
/// template writes is escaped (`&`, `=`, `+`, `;`), so path text never becomes parameters;
/// and a parameter both the template and the client give is refused as ambiguous. Keys and
/// input checks then read the rewritten target: what the upstream will read.
pub enum RewriteRt {
    Regex(regex::Regex, Vec<Piece>),
    Strip(String),
}

/// A template piece with its group resolved to an index.
pub enum Piece {
    Lit(String),
    Group(usize),
}

/// Why a rewrite's output was refused (a 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewriteRefusal {
    /// The path written is one a client's would be refused for.
    Path(Refusal),
    /// The path written holds `.` or `..` as a segment.
    DotSegment,
    /// The template and the client both give this query parameter.
    Duplicate(String),
}

/// The request target a rewrite sends upstream: `path?query`, with the path's end kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub target: String,
    path_len: usize,
}

impl Rewritten {
    /// The path the upstream reads (canonical).
    pub fn path(&self) -> &str {
        &self.target[..self.path_len]
    }

    /// The query the upstream reads: the template's parameters, then the client's.
    pub fn query(&self) -> Option<&str> {
        self.target.get(self.path_len + 1..)
    }
}

impl RewriteRt {
    pub fn new(cfg: Option<&Rewrite>) -> Result<Option<Self>, String> {
        Ok(match cfg {
            None => None,
            Some(Rewrite::StripPrefix(p)) => Some(RewriteRt::Strip(p.clone())),
            Some(Rewrite::Regex { regex, replace }) => {
                let re = regex::Regex::new(regex).map_err(|e| e.to_string())?;
                let names: Vec<Option<&str>> = re.capture_names().collect();
                let pieces = rewrite_template(replace)
                    .into_iter()
                    .map(|p| match p {
                        TemplatePart::Lit(s) => Ok(Piece::Lit(s)),
                        TemplatePart::Index(i) if i < names.len() => Ok(Piece::Group(i)),
                        TemplatePart::Name(n) => names
                            .iter()
                            .position(|g| *g == Some(n.as_str()))
                            .map(Piece::Group)
                            .ok_or_else(|| format!("rewrite.replace: no group named {n}")),
                        TemplatePart::Index(i) => Err(format!("rewrite.replace: no group {i}")),
                    })
                    .collect::<Result<_, _>>()?;
                Some(RewriteRt::Regex(re, pieces))
            }
        })
    }

    /// The target sent upstream for canonical `path` and the client's `query`; `Ok(None)`
    /// when the rewrite leaves the request as it is (a regex that does not match).
    pub fn apply(
        &self,
        path: &str,
        query: Option<&str>,
        rules: PathRules,
    ) -> Result<Option<Rewritten>, RewriteRefusal> {
        let Some((new_path, own_query)) = self.written(path) else {
            return Ok(None);
        };
        if climbs(&new_path) {
            return Err(RewriteRefusal::DotSegment);
        }
        let canonical = normalize_path(new_path.as_bytes(), rules).map_err(RewriteRefusal::Path)?;
        let query = merge_query(own_query, query)?;
        let mut target =
            String::with_capacity(canonical.len() + 1 + query.as_ref().map_or(0, String::len));
        target.push_str(&canonical);
        let path_len = target.len();
        if let Some(q) = query {
            target.push('?');
            target.push_str(&q);
        }
        Ok(Some(Rewritten { target, path_len }))
    }

    /// What the rewrite writes for `path`, before any check: the path (always starting with
    /// `/`) and the query the template writes (`None`: it writes no `?`). The client's text
    /// (groups, and what the match left) goes to the path as it is, to the query escaped.
    /// `None` when a regex does not match.
    fn written(&self, path: &str) -> Option<(String, Option<String>)> {
        let mut new_path = String::with_capacity(path.len() + 16);
        let mut own_query: Option<String> = None;
        match self {
            RewriteRt::Strip(prefix) => match path.strip_prefix(prefix.as_str()) {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => new_path.push_str(rest),
                _ => new_path.push_str(path),
            },
            RewriteRt::Regex(re, pieces) => {
                let caps = re.captures(path)?;
                let whole = caps.get(0)?;
                new_path.push_str(&path[..whole.start()]);
                let client_text = |text: &str, path: &mut String, q: &mut Option<String>| match q {
                    Some(q) => escape_into_query(q, text),
                    None => path.push_str(text),
                };
                for piece in pieces {
                    match piece {
                        Piece::Lit(lit) => match (&mut own_query, lit.split_once('?')) {
                            (Some(q), _) => q.push_str(lit),
                            (None, Some((p, q))) => {
                                new_path.push_str(p);
                                own_query = Some(q.to_string());
                            }
                            (None, None) => new_path.push_str(lit),
                        },
                        Piece::Group(i) => {
                            let text = caps.get(*i).map_or("", |m| m.as_str());
                            client_text(text, &mut new_path, &mut own_query);
                        }
                    }
                }
                client_text(&path[whole.end()..], &mut new_path, &mut own_query);
            }
        }
        if !new_path.starts_with('/') {
            new_path.insert(0, '/');
        }
        Some((new_path, own_query))
    }
}

/// The query sent upstream: the template's parameters, then the client's after `&`; a
/// parameter both give (names compared decoded) is refused as ambiguous.
fn merge_query(
    own: Option<String>,
    client: Option<&str>,
) -> Result<Option<String>, RewriteRefusal> {
    let (own, client) = match (own, client) {
        (Some(own), Some(client)) => (own, client),
        (own, client) => return Ok(own.or_else(|| client.map(str::to_string))),
    };
    let names = |q: &str| -> Vec<String> {
        form_urlencoded::parse(q.as_bytes())
            .map(|(k, _)| k.into_owned())
            .collect()
    };
    let own_names = names(&own);
    if let Some(dup) = names(client).into_iter().find(|n| own_names.contains(n)) {
        return Err(RewriteRefusal::Duplicate(dup));
    }
    let mut merged = own;
    if !merged.is_empty() && !client.is_empty() {
        merged.push('&');
    }
    merged.push_str(client);
    Ok(Some(merged))
}

/// Whether a path holds a segment some upstream resolves as `.` or `..`: split at `/` and at
/// an escaped one (`%2F`, `%5C`: an upstream may decode them), each segment's `;params` left
/// out (Tomcat, Jetty and Spring read `/..;/` as `/../`).
fn climbs(path: &str) -> bool {
    let b = path.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i <= b.len() {
        let (end, next) = if i == b.len() || b[i] == b'/' {
            (i, i + 1)
        } else if b[i] == b'%'
            && b.get(i + 1..i + 3).is_some_and(|h| {
                (h[0] == b'2' && h[1].eq_ignore_ascii_case(&b'f'))
                    || (h[0] == b'5' && h[1].eq_ignore_ascii_case(&b'c'))
            })
        {
            (i, i + 3)
        } else {
            i += 1;
            continue;
        };
        let seg = &path[start..end];
        let seg = seg.split(';').next().unwrap_or(seg);
        if is_dot_segment(seg) {
            return true;
        }
        start = next;
        i = next;
    }
    false
}

/// `.` or `..`, also escaped (`%2e`): a segment that climbs.
fn is_dot_segment(seg: &str) -> bool {
    let mut rest = seg.as_bytes();
    let mut dots = 0;
    while !rest.is_empty() {
        if rest[0] == b'.' {
            rest = &rest[1..];
        } else if rest.len() >= 3
            && rest[0] == b'%'
            && rest[1] == b'2'
            && rest[2].eq_ignore_ascii_case(&b'e')
        {
            rest = &rest[3..];
        } else {
            return false;
        }
        dots += 1;
    }
    dots == 1 || dots == 2
}

/// Appends path text to a query so that it stays one value: the characters a query parser
/// splits or decodes on are escaped (escapes already in the path stay as they are).
fn escape_into_query(q: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => q.push_str("%26"),
            '=' => q.push_str("%3D"),
            '+' => q.push_str("%2B"),
            ';' => q.push_str("%3B"),
            '#' => q.push_str("%23"),
            '?' => q.push_str("%3F"),
            c => q.push(c),
        }
    }
}

/// A route's canary, ready to decide.
pub struct CanaryRt {
    pub upstream: usize,
    weight: u32,
    total: u32,
    header: Option<http::HeaderName>,
    header_value: Option<String>,
    header_pattern: Option<regex::Regex>,
    cookie: Option<String>,
}

impl CanaryRt {
    pub fn new(c: &Canary) -> Self {
        CanaryRt {
            upstream: c.upstream,
            weight: c.weight,
            total: c.weight_total.max(1),
            header: c
                .header
                .as_deref()
                .and_then(|h| http::HeaderName::from_bytes(h.as_bytes()).ok()),
            header_value: c.header_value.clone(),
            // Checked when the config was read.
            header_pattern: c
                .header_pattern
                .as_deref()
                .and_then(|p| regex::RegexBuilder::new(p).size_limit(1 << 20).build().ok()),
            cookie: c.cookie.clone(),
        }
    }

    /// Whether this request goes to the canary: the header decides if it says so, then the
    /// cookie, then the weight (`roll` in `0..weight_total`, drawn by the caller). The header
    /// is read as nginx reads `$http_NAME`: several fields of the name are one value, joined
    /// by `, ` (so a second field cannot make a first one that says otherwise count).
    pub fn chooses(&self, headers: &HeaderMap, roll: impl FnOnce(u32) -> u32) -> bool {
        if let Some(name) = &self.header {
            if let Some(v) = joined(headers, name) {
                let v: &[u8] = &v;
                match (&self.header_value, &self.header_pattern) {
                    (Some(want), _) if v == want.as_bytes() => return true,
                    (Some(_), _) => {}
                    (None, Some(re)) => {
                        if std::str::from_utf8(v).is_ok_and(|s| re.is_match(s)) {
                            return true;
                        }
                    }
                    (None, None) if v == b"always" => return true,
                    (None, None) if v == b"never" => return false,
                    (None, None) => {}
                }
            }
        }
        if let Some(name) = &self.cookie {
            match cookie(headers, name) {
                Some(b"always") => return true,
                Some(b"never") => return false,
                _ => {}
            }
        }
        self.weight > 0 && roll(self.total) < self.weight
    }
}

/// The fields named `name` as one value (nginx's `$http_NAME`): the one field's own bytes, or
/// several joined by `, `.
fn joined<'h>(
    headers: &'h HeaderMap,
    name: &http::HeaderName,
) -> Option<std::borrow::Cow<'h, [u8]>> {
    let mut all = headers.get_all(name).iter();
    let first = all.next()?.as_bytes();
    let Some(second) = all.next() else {
        return Some(std::borrow::Cow::Borrowed(first));
    };
    let mut v = first.to_vec();
    for next in std::iter::once(second).chain(all) {
        v.extend_from_slice(b", ");
        v.extend_from_slice(next.as_bytes());
    }
    Some(std::borrow::Cow::Owned(v))
}

/// The value of cookie `name` in the request's Cookie headers (RFC 6265: `a=1; b=2`, one
/// header or several); the first one.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|&b| b == b'=')?;
            (pair[..eq].trim_ascii() == name.as_bytes()).then(|| pair[eq + 1..].trim_ascii())
        })
}

#[cfg(test)]
mod tests;
