//! CORS (`cors = { ... }`, docs/edge.md), compiled: which origins a browser may call a route
//! from, and the fields each answer carries. The fields are made once per route; a request
//! only picks the origin value.
//!
//! - An origin not allowed gets no CORS field at all (the browser then refuses the page).
//! - `*` is sent only for `allow_origins = ["*"]`, and never with credentials (the config
//!   refuses that pair); every other origin is echoed as the browser sent it, after an exact
//!   or a subdomain match (never a substring: `https://app.example.com.evil.net` is not
//!   `https://app.example.com`).
//! - With `echo_wildcards` (the Gateway API's rule), a `*` is answered with what the request
//!   named instead: its origin (only a well-formed `scheme://host[:port]`, never `null`), its
//!   `Access-Control-Request-Method` (a token) and `-Headers` (a list of names); a field the
//!   request did not name, or named badly, is left out.
//! - Every answer of a route with CORS carries `Vary: Origin`, allowed or not, so a cache
//!   never serves one origin's answer to another.

use crate::respond::{names, Fields, Value};
use http::{HeaderMap, HeaderValue};
use tollgate_config::model::{CorsConfig, OriginRule};

#[derive(Debug)]
pub struct CorsRt {
    origins: Vec<OriginRule>,
    any: bool,
    credentials: bool,
    /// `None` for an empty list (no field sent).
    methods: Option<HeaderValue>,
    headers: Option<HeaderValue>,
    expose: Option<HeaderValue>,
    max_age: Option<u64>,
    /// `allow_origins = ["*"]` answered with the request's own origin.
    echo_origin: bool,
    /// `allow_methods = ["*"]` answered with `Access-Control-Request-Method`.
    echo_methods: bool,
    /// `allow_headers = ["*"]` answered with `Access-Control-Request-Headers`.
    echo_headers: bool,
}

/// What a request's `Origin` earned: the `Access-Control-Allow-Origin` value.
pub type Allowed = Option<HeaderValue>;

impl CorsRt {
    pub fn new(c: &CorsConfig) -> Option<CorsRt> {
        let join = |l: &[String]| HeaderValue::from_str(&l.join(", ")).ok();
        // An empty list is no field; a list that is no field value makes no runtime.
        let field = |l: &[String]| match l {
            [] => Some(None),
            l => join(l).map(Some),
        };
        let any = c.allow_origins.contains(&OriginRule::Any);
        let star = |l: &[String]| c.echo_wildcards && l.iter().any(|x| x == "*");
        Some(CorsRt {
            any,
            echo_origin: any && c.echo_wildcards,
            echo_methods: star(&c.allow_methods),
            echo_headers: star(&c.allow_headers),
            origins: c.allow_origins.clone(),
            credentials: c.allow_credentials,
            methods: field(&c.allow_methods)?,
            headers: field(&c.allow_headers)?,
            expose: (!c.expose_headers.is_empty())
                .then(|| join(&c.expose_headers))
                .flatten(),
            max_age: c.max_age,
        })
    }

    /// The allowed origin's field value for a request, `None` when it has no `Origin` (not a
    /// cross-origin call), several, or one not allowed.
    pub fn allowed(&self, headers: &HeaderMap) -> Allowed {
        let mut all = headers.get_all(http::header::ORIGIN).iter();
        let origin = all.next()?;
        if all.next().is_some() {
            return None;
        }
        if self.any && !self.echo_origin {
            return Some(HeaderValue::from_static("*"));
        }
        let o = origin.to_str().ok()?;
        if self.any {
            return tollgate_config::model::is_origin(o).then(|| origin.clone());
        }
        self.origins
            .iter()
            .any(|r| r.admits(o))
            .then(|| origin.clone())
    }

    pub fn credentials(&self) -> bool {
        self.credentials
    }

    pub fn expose(&self) -> Option<&HeaderValue> {
        self.expose.as_ref()
    }

    /// Whether a request is a preflight: `OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`.
    pub fn is_preflight(method: &http::Method, headers: &HeaderMap) -> bool {
        method == http::Method::OPTIONS
            && headers.contains_key(http::header::ORIGIN)
            && headers.contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// The fields of an actual answer (an upstream's or the edge's).
    pub fn put_answer(&self, out: &mut impl Fields, allowed: &Allowed) {
        out.put(&names::VARY, Value::Static("Origin"));
        let Some(origin) = allowed else { return };
        out.put(&names::ACAO, Value::Header(origin));
        if self.credentials {
            out.put(&names::ACAC, Value::Static("true"));
        }
        if let Some(e) = &self.expose {
            out.put(&names::ACEH, Value::Header(e));
        }
    }

    /// The fields of a preflight's 204 (`req`: the preflight's fields, for an echoed `*`).
    pub fn put_preflight(&self, out: &mut impl Fields, allowed: &Allowed, req: &HeaderMap) {
        out.put(
            &names::VARY,
            Value::Static("Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        );
        let Some(origin) = allowed else { return };
        out.put(&names::ACAO, Value::Header(origin));
        if self.credentials {
            out.put(&names::ACAC, Value::Static("true"));
        }
        let asked = |name| {
            let mut all = req.get_all(name).iter();
            all.next().filter(|_| all.next().is_none())
        };
        if !self.echo_methods {
            if let Some(m) = &self.methods {
                out.put(&names::ACAM, Value::Header(m));
            }
        } else if let Some(m) = asked(http::header::ACCESS_CONTROL_REQUEST_METHOD)
            .filter(|m| m.to_str().is_ok_and(tollgate_config::http_token))
        {
            out.put(&names::ACAM, Value::Header(m));
        }
        if !self.echo_headers {
            if let Some(h) = &self.headers {
                out.put(&names::ACAH, Value::Header(h));
            }
        } else if let Some(h) =
            asked(http::header::ACCESS_CONTROL_REQUEST_HEADERS).filter(|h| names_list(h.as_bytes()))
        {
            out.put(&names::ACAH, Value::Header(h));
        }
        if let Some(e) = &self.expose {
            out.put(&names::ACEH, Value::Header(e));
        }
        if let Some(age) = self.max_age {
            out.put(&names::ACMA, Value::Int(age));
        }
    }
}

/// `name, name` (optional spaces around commas), every name a token: what a browser sends
/// as `Access-Control-Request-Headers`.
fn names_list(v: &[u8]) -> bool {
    std::str::from_utf8(v).is_ok_and(|v| {
        v.split(',')
            .all(|n| tollgate_config::http_token(n.trim_matches([' ', '\t'])))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(origins: &[&str], credentials: bool) -> CorsRt {
        CorsRt::new(&CorsConfig {
            allow_origins: origins
                .iter()
                .map(|o| tollgate_config::origin_rule(o).expect("test input"))
                .collect(),
            allow_methods: vec!["GET".into()],
            allow_headers: vec!["X-Token".into()],
            expose_headers: vec![],
            allow_credentials: credentials,
            max_age: Some(600),
            echo_wildcards: false,
        })
        .expect("test input")
    }

    fn with(origins: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for o in origins {
            h.append(
                http::header::ORIGIN,
                HeaderValue::from_str(o).expect("test input"),
            );
        }
        h
    }

    #[test]
    fn origins_are_echoed_only_when_allowed() {
        let c = rt(&["https://app.example.com", "https://*.example.org"], true);
        assert_eq!(
            c.allowed(&with(&["https://app.example.com"])),
            Some(HeaderValue::from_static("https://app.example.com"))
        );
        // Mixed case is the same origin; the browser's own spelling is echoed.
        assert_eq!(
            c.allowed(&with(&["https://APP.example.com"])),
            Some(HeaderValue::from_static("https://APP.example.com"))
        );
        assert!(c.allowed(&with(&["https://b.example.org"])).is_some());
        for no in [
            "null",
            "https://app.example.com.evil.net",
            "https://evil.net/https://app.example.com",
            "http://app.example.com",
            "https://example.org",
        ] {
            assert_eq!(c.allowed(&with(&[no])), None, "{no}");
        }
        assert_eq!(c.allowed(&HeaderMap::new()), None);
        // Two origins: neither.
        assert_eq!(
            c.allowed(&with(&["https://app.example.com", "https://evil.net"])),
            None
        );
        let any = rt(&["*"], false);
        assert_eq!(
            any.allowed(&with(&["null"])),
            Some(HeaderValue::from_static("*"))
        );
    }

    #[test]
    fn an_echoed_star_echoes_only_well_formed_requests() {
        assert!(names_list(b"x-a, x-b,x-c"));
        for bad in [&b""[..], b"x-a,", b"x-a, \"x-b\"", b"x a", b",", b"x-a\x01"] {
            assert!(!names_list(bad), "{bad:?}");
        }
        let mut c = rt(&["*"], true);
        c.echo_origin = true;
        for (origin, echoed) in [
            ("https://a.example:8443", true),
            ("HTTP://A.example", true),
            ("null", false),
            ("", false),
            ("https://a.example/x", false),
            ("file://", false),
        ] {
            assert_eq!(c.allowed(&with(&[origin])).is_some(), echoed, "{origin}");
        }
        assert_eq!(
            c.allowed(&with(&["https://a.example", "https://b.example"])),
            None
        );
    }
}
