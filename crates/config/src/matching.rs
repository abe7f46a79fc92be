//! A route's `match_headers` and `match_query` (docs/routes.md): what a request must carry,
//! besides its host, path and method, to take the route (the Gateway API's header and query
//! matches). A request without it falls through to the next route.
//!
//! Refused at load: an empty or invalid name, a name given twice (the Gateway API keeps the
//! first; two that could disagree are a mistake here), a header the gateway never sees (one
//! with `_` under `underscores_in_headers = false`), and a regex that does not compile.

use crate::model::{Matches, ValueMatch, ValueMatcher};
use crate::reader::{as_array, as_str, Cx, Tbl, Value};
use crate::scalars::http_token;

/// A regex of `match_headers` or `match_query` compiled as the route crate compiles it: the
/// whole value, RE2 syntax, at most 1 MiB of program.
pub fn value_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(1 << 20)
        .build()
}

/// The route's matches, when it sets either key (`ok` cleared when one is wrong).
pub(crate) fn route(cx: &mut Cx, r: &mut Tbl, ok: &mut bool) -> Option<Box<Matches>> {
    let headers = r
        .get("match_headers")
        .map(|v| list(cx, &r.key_path("match_headers"), v, true, ok));
    let query = r
        .get("match_query")
        .map(|v| list(cx, &r.key_path("match_query"), v, false, ok));
    if headers.is_none() && query.is_none() {
        return None;
    }
    Some(Box::new(Matches {
        headers: headers.unwrap_or_default(),
        query: query.unwrap_or_default(),
    }))
}

/// `[{ name, value | regex }, ...]`.
fn list(cx: &mut Cx, p: &str, v: &Value, header: bool, ok: &mut bool) -> Vec<ValueMatch> {
    let Some(items) = as_array(cx, p, v) else {
        *ok = false;
        return Vec::new();
    };
    let mut out: Vec<ValueMatch> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = format!("{p}[{i}]");
        match one(cx, &ip, item, header) {
            Some(m) if out.iter().any(|o| o.name == m.name) => {
                cx.err(
                    &ip,
                    item.span(),
                    format!("\"{}\" is matched twice: one entry per name", m.name),
                );
                *ok = false;
            }
            Some(m) => out.push(m),
            None => *ok = false,
        }
    }
    out
}

fn one(cx: &mut Cx, p: &str, v: &Value, header: bool) -> Option<ValueMatch> {
    let mut t = Tbl::of(cx, p.to_string(), v)?;
    let name = match t.get("name") {
        Some(nv) => {
            let kp = t.key_path("name");
            let n = as_str(cx, &kp, nv)?;
            let valid = if header { http_token(n) } else { !n.is_empty() };
            if !valid {
                cx.err(&kp, nv.span(), format!("\"{n}\" is not a valid name"));
                None
            } else if header && !cx.client_header(&kp, nv.span(), n) {
                None
            } else if header {
                Some(n.to_ascii_lowercase())
            } else {
                Some(n.to_string())
            }
        }
        None => {
            cx.err(p, t.span.clone(), "missing key \"name\"");
            None
        }
    };
    let value = match (t.get("value"), t.get("regex")) {
        (Some(_), Some(rv)) => {
            cx.err(&t.key_path("regex"), rv.span(), "value and regex: set one");
            None
        }
        (Some(vv), None) => {
            as_str(cx, &t.key_path("value"), vv).map(|s| ValueMatcher::Exact(s.into()))
        }
        (None, Some(rv)) => {
            let kp = t.key_path("regex");
            let s = as_str(cx, &kp, rv)?;
            match value_regex(s) {
                Ok(_) => Some(ValueMatcher::Regex(s.into())),
                Err(e) => {
                    let e = e.to_string();
                    let line = e.lines().last().unwrap_or("").trim().to_string();
                    cx.err(&kp, rv.span(), format!("not a regular expression: {line}"));
                    None
                }
            }
        }
        (None, None) => {
            cx.err(p, t.span.clone(), "missing key \"value\" or \"regex\"");
            None
        }
    };
    t.finish(cx);
    Some(ValueMatch {
        name: name?,
        value: value?,
    })
}

/// `ports = [8080, 8443]`: the local ports the route takes requests on (a Gateway's
/// listeners); each once, 1-65535.
pub(crate) fn ports(cx: &mut Cx, r: &mut Tbl, ok: &mut bool) -> Option<Vec<u16>> {
    let v = r.get("ports")?;
    let p = r.key_path("ports");
    let Some(items) = as_array(cx, &p, v) else {
        *ok = false;
        return None;
    };
    if items.is_empty() {
        cx.err(
            &p,
            v.span(),
            "an empty list: name a port, or leave ports out",
        );
        *ok = false;
    }
    let mut out: Vec<u16> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = format!("{p}[{i}]");
        match crate::reader::as_int_in(cx, &ip, item, 1, 65535) {
            Some(n) if out.contains(&(n as u16)) => {
                cx.err(&ip, item.span(), format!("{n} is listed twice"));
                *ok = false;
            }
            Some(n) => out.push(n as u16),
            None => *ok = false,
        }
    }
    Some(out)
}

/// `listener_host = "*.example.com"` (or `""`): the hostname of the Gateway listener the
/// route belongs to; with `ports`. Lower-cased; `*.` covers names of any depth.
pub(crate) fn listener_host(cx: &mut Cx, r: &mut Tbl, ok: &mut bool) -> Option<String> {
    let v = r.get("listener_host")?;
    let p = r.key_path("listener_host");
    let s = as_str(cx, &p, v)?.trim().to_ascii_lowercase();
    let name = s.strip_prefix("*.").unwrap_or(&s);
    if !s.is_empty() && !crate::scalars::dns_name(name) {
        cx.err(
            &p,
            v.span(),
            format!("\"{s}\" is not a host name, a \"*.\" wildcard or \"\""),
        );
        *ok = false;
        return None;
    }
    if r.get("ports").is_none() {
        cx.err(
            &p,
            v.span(),
            "listener_host needs ports: a listener is a port's",
        );
        *ok = false;
        return None;
    }
    Some(s)
}
