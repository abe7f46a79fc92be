//! Which route a request takes, and what a route does to it on the way up: host tiers
//! (exact, wildcard, none), path matching (exact, prefix, regex), the path rewrite, and the
//! canary's upstream choice.
//!
//! ingress-nginx semantics: a request whose host a route names meets that host's routes only
//! (an unmatched path is 404, or the host's own `/` route), and an exact host beats a
//! wildcard one; `[server] host_fallthrough = true` tries the less specific tiers after it.

use http::HeaderMap;
use std::collections::HashSet;
use tollgate_config::{Canary, PathMatch, Rewrite, RouteConfig};

/// Route indexes in match order: host tier, then path kind (exact, prefix, regex), then
/// longer prefixes first, then file order.
pub fn order<'a>(routes: impl Iterator<Item = &'a RouteConfig>) -> Vec<usize> {
    let mut keyed: Vec<_> = routes
        .enumerate()
        .map(|(i, r)| {
            let host = match r.host.as_deref() {
                Some(h) if h.starts_with("*.") => 1,
                Some(_) => 0,
                None => 2,
            };
            let (kind, len) = match &r.path {
                PathMatch::Exact(p) => (0, p.len()),
                PathMatch::Prefix(p) => (1, p.len()),
                PathMatch::Regex(_) => (2, 0),
            };
            ((host, kind, std::cmp::Reverse(len), i), i)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// The hosts routes name.
#[derive(Default)]
pub struct Hosts {
    exact: HashSet<String>,
    /// `*.example.com` as `example.com`.
    wildcard: HashSet<String>,
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
    pub fn new<'a>(routes: impl Iterator<Item = &'a RouteConfig>) -> Self {
        let mut h = Hosts::default();
        for r in routes {
            match r.host.as_deref() {
                Some(w) if w.starts_with("*.") => {
                    h.wildcard.insert(w[2..].to_string());
                }
                Some(e) => {
                    h.exact.insert(e.to_string());
                }
                None => {}
            }
        }
        h
    }

    pub fn tier(&self, host: Option<&str>, fallthrough: bool) -> Tier {
        // No route names a host: every route is host-less, nothing to look up.
        if fallthrough || (self.exact.is_empty() && self.wildcard.is_empty()) {
            return Tier::Any;
        }
        let Some(host) = host else {
            return Tier::None;
        };
        if self.exact.contains(host) {
            Tier::Exact
        } else if wildcard_parent(host).is_some_and(|p| self.wildcard.contains(p)) {
            Tier::Wildcard
        } else {
            Tier::None
        }
    }
}

/// `a.example.com` -> `example.com` (one label, not empty); `None` for a name of one label.
fn wildcard_parent(host: &str) -> Option<&str> {
    match host.split_once('.') {
        Some((label, rest)) if !label.is_empty() && !rest.is_empty() => Some(rest),
        _ => None,
    }
}

impl Tier {
    /// Whether a route with host `want` may take a request for `host`.
    pub fn admits(self, want: Option<&str>, host: Option<&str>) -> bool {
        let is_wild = want.is_some_and(|w| w.starts_with("*."));
        let fits = match (want, host) {
            (None, _) => true,
            (Some(w), Some(h)) if is_wild => wildcard_parent(h) == Some(&w[2..]),
            (Some(w), Some(h)) => w == h,
            (Some(_), None) => false,
        };
        fits && match self {
            Tier::Any => true,
            Tier::Exact => want.is_some() && !is_wild,
            Tier::Wildcard => is_wild,
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
pub enum RewriteRt {
    Regex(regex::Regex, String),
    Strip(String),
}

impl RewriteRt {
    pub fn new(cfg: Option<&Rewrite>) -> Result<Option<Self>, String> {
        Ok(match cfg {
            None => None,
            Some(Rewrite::StripPrefix(p)) => Some(RewriteRt::Strip(p.clone())),
            Some(Rewrite::Regex { regex, replace }) => Some(RewriteRt::Regex(
                regex::Regex::new(regex).map_err(|e| e.to_string())?,
                replace.clone(),
            )),
        })
    }

    /// The request target sent upstream for canonical `path` and the client's `query`: the
    /// path rewritten (always starting with `/`); a `?` the rewrite writes starts a query of
    /// its own, to which the client's is added after `&`.
    pub fn apply(&self, path: &str, query: Option<&str>) -> String {
        let new = match self {
            RewriteRt::Strip(prefix) => match path.strip_prefix(prefix.as_str()) {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.to_string(),
                _ => path.to_string(),
            },
            RewriteRt::Regex(re, replace) => re.replacen(path, 1, replace.as_str()).into_owned(),
        };
        let mut out = String::with_capacity(new.len() + 1 + query.map_or(0, str::len));
        if !new.starts_with('/') {
            out.push('/');
        }
        out.push_str(&new);
        if let Some(q) = query {
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(q);
        }
        out
    }
}

/// A route's canary, ready to decide.
pub struct CanaryRt {
    pub upstream: usize,
    weight: u32,
    total: u32,
    header: Option<http::HeaderName>,
    header_value: Option<String>,
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
            cookie: c.cookie.clone(),
        }
    }

    /// Whether this request goes to the canary: the header decides if it says so, then the
    /// cookie, then the weight (`roll` in `0..weight_total`, drawn by the caller).
    pub fn chooses(&self, headers: &HeaderMap, roll: impl FnOnce(u32) -> u32) -> bool {
        if let Some(name) = &self.header {
            if let Some(v) = headers.get(name).map(|v| v.as_bytes()) {
                match &self.header_value {
                    Some(want) if v == want.as_bytes() => return true,
                    Some(_) => {}
                    None if v == b"always" => return true,
                    None if v == b"never" => return false,
                    None => {}
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
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        m
    }

    #[test]
    fn tiers_keep_a_known_host_on_its_own_routes() {
        let mut hosts = Hosts::default();
        hosts.exact.insert("api.example.com".into());
        hosts.wildcard.insert("example.com".into());
        let t = |host| hosts.tier(Some(host), false);
        assert_eq!(t("api.example.com"), Tier::Exact);
        assert_eq!(t("www.example.com"), Tier::Wildcard);
        // One label only: neither the parent nor a deeper name.
        assert_eq!(t("example.com"), Tier::None);
        assert_eq!(t("a.b.example.com"), Tier::None);
        assert_eq!(t(".example.com"), Tier::None);
        assert_eq!(hosts.tier(None, false), Tier::None);
        assert_eq!(hosts.tier(Some("api.example.com"), true), Tier::Any);

        let wild = Some("*.example.com");
        assert!(Tier::Wildcard.admits(wild, Some("x.example.com")));
        assert!(!Tier::Wildcard.admits(wild, Some("x.y.example.com")));
        assert!(!Tier::Wildcard.admits(None, Some("x.example.com")));
        assert!(!Tier::Exact.admits(None, Some("api.example.com")));
        assert!(Tier::Any.admits(None, Some("api.example.com")));
        assert!(Tier::Any.admits(wild, Some("api.example.com")));
        assert!(!Tier::Any.admits(Some("other.example.com"), Some("api.example.com")));
    }

    #[test]
    fn rewrites_keep_a_leading_slash_and_the_query() {
        let re = RewriteRt::new(Some(&Rewrite::Regex {
            regex: "^/something(/|$)(.*)".into(),
            replace: "/$2".into(),
        }))
        .expect("valid")
        .expect("some");
        assert_eq!(re.apply("/something", None), "/");
        assert_eq!(re.apply("/something/new", Some("a=1")), "/new?a=1");
        // No match: the path goes as it came.
        assert_eq!(re.apply("/other", None), "/other");
        let strip = RewriteRt::Strip("/api".into());
        assert_eq!(strip.apply("/api/v1/x", None), "/v1/x");
        assert_eq!(strip.apply("/api", Some("q")), "/?q");
        // Only whole segments: /apix is not under /api.
        assert_eq!(strip.apply("/apix", None), "/apix");
        let q = RewriteRt::Regex(
            regex::Regex::new("^/u/(\\w+)").expect("re"),
            "/user?id=$1".into(),
        );
        assert_eq!(q.apply("/u/ann", Some("x=2")), "/user?id=ann&x=2");
    }

    #[test]
    fn a_canary_is_chosen_by_header_then_cookie_then_weight() {
        let c = CanaryRt::new(&Canary {
            upstream: 1,
            weight: 20,
            weight_total: 100,
            header: Some("x-canary".into()),
            header_value: None,
            cookie: Some("canary".into()),
        });
        let never_roll = |_| 99;
        let always_roll = |_| 0;
        assert!(c.chooses(&h(&[("x-canary", "always")]), never_roll));
        assert!(!c.chooses(&h(&[("x-canary", "never")]), always_roll));
        // Another value is left to the cookie, then the weight.
        assert!(c.chooses(
            &h(&[("x-canary", "maybe"), ("cookie", "a=1; canary=always")]),
            never_roll
        ));
        assert!(!c.chooses(&h(&[("cookie", "canary=never")]), always_roll));
        assert!(c.chooses(
            &h(&[("cookie", "x=1"), ("cookie", "canary=always")]),
            never_roll
        ));
        assert!(c.chooses(&h(&[]), |_| 19));
        assert!(!c.chooses(&h(&[]), |_| 20));
        // A cookie whose name only ends like it does not count.
        assert!(!c.chooses(&h(&[("cookie", "notcanary=always")]), never_roll));

        let by_value = CanaryRt::new(&Canary {
            upstream: 1,
            weight: 0,
            weight_total: 100,
            header: Some("x-region".into()),
            header_value: Some("eu-west".into()),
            cookie: None,
        });
        assert!(by_value.chooses(&h(&[("x-region", "eu-west")]), never_roll));
        assert!(!by_value.chooses(&h(&[("x-region", "always")]), always_roll));
        assert!(!by_value.chooses(&h(&[]), always_roll));
    }
}
