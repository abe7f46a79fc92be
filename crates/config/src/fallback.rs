//! A route's `default_backend` and `error_pages` (docs/edge.md): where its requests go while
//! its upstream has no targets, and which upstream answers its errors.
//!
//! Refused at load: an unknown upstream, either key on a route that answers itself
//! (`respond`), an error-page upstream spoken to over TLS (pages are asked over plain HTTP, as
//! ingress-nginx asks its default backend), a status outside 400-599, and a field the gateway
//! writes to the page's upstream itself or that could split the request head.

use crate::model::{ErrorPages, Fallback, RouteAction, UpstreamConfig};
use crate::named::Named;
use crate::reader::{as_int_in, as_str, Cx, Tbl, Value};
use crate::scalars::http_token;
use toml::de::DeValue;

/// Fields the gateway writes to an error page's upstream: no `headers` entry may.
pub const WRITTEN: &[&str] = &[
    "host",
    "x-code",
    "x-format",
    "x-original-uri",
    "x-request-id",
    "x-forwarded-for",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
    "upgrade",
];

/// The route's fallback, when it sets either key (`ok` cleared when one is wrong).
pub(crate) fn route(
    cx: &mut Cx,
    r: &mut Tbl,
    action: Option<&RouteAction>,
    upstreams: &Named<UpstreamConfig>,
    ok: &mut bool,
) -> Option<Box<Fallback>> {
    let mut f = Fallback::default();
    if let Some(RouteAction::Respond { .. }) = action {
        for key in ["default_backend", "error_pages"] {
            if let Some(v) = r.get(key) {
                cx.err(
                    &r.key_path(key),
                    v.span(),
                    format!("{key} needs a route with an upstream, not respond"),
                );
                *ok = false;
            }
        }
        return None;
    }
    if let Some(v) = r.get("default_backend") {
        f.default_backend = upstreams.refer(cx, &r.key_path("default_backend"), v, "upstream");
        *ok &= f.default_backend.is_some();
    }
    if let Some(v) = r.get("error_pages") {
        f.error_pages = error_pages(cx, &r.key_path("error_pages"), v, upstreams, &f);
        *ok &= f.error_pages.is_some();
    }
    (f != Fallback::default()).then(|| Box::new(f))
}

fn error_pages(
    cx: &mut Cx,
    p: &str,
    v: &Value,
    upstreams: &Named<UpstreamConfig>,
    f: &Fallback,
) -> Option<ErrorPages> {
    let mut t = Tbl::of(cx, p.to_string(), v)?;
    let mut ok = true;
    let codes = codes(cx, &mut t, p, v, &mut ok);
    let up = match t.get("upstream") {
        Some(uv) => upstreams.refer(cx, &t.key_path("upstream"), uv, "upstream"),
        None if f.default_backend.is_some() => f.default_backend,
        None => {
            cx.err(
                p,
                v.span(),
                "missing key \"upstream\" (the route has no default_backend to ask)",
            );
            None
        }
    };
    if let Some(u) = up {
        if let Some((name, cfg)) = upstreams.get(u) {
            if cfg.tls.is_some() || cfg.h2 {
                cx.err(
                    p,
                    v.span(),
                    format!("upstream \"{name}\" is spoken to over TLS or HTTP/2: error pages are asked over plain HTTP/1.1 (as ingress-nginx asks its default backend)"),
                );
                ok = false;
            }
        }
    }
    let headers = headers(cx, &mut t, &mut ok);
    let upstream_answers = match t.get("upstream_answers") {
        Some(b) => {
            crate::reader::as_bool(cx, &t.key_path("upstream_answers"), b).unwrap_or_else(|| {
                ok = false;
                true
            })
        }
        None => true,
    };
    t.finish(cx);
    let upstream = up?;
    (ok && !codes.is_empty()).then_some(ErrorPages {
        codes,
        upstream,
        headers,
        upstream_answers,
    })
}

fn codes(cx: &mut Cx, t: &mut Tbl, p: &str, v: &Value, ok: &mut bool) -> Vec<u16> {
    let Some(cv) = t.get("codes") else {
        cx.err(p, v.span(), "missing key \"codes\"");
        *ok = false;
        return Vec::new();
    };
    let cp = t.key_path("codes");
    let DeValue::Array(items) = cv.get_ref() else {
        cx.err(&cp, cv.span(), "a list of statuses, 400 to 599");
        *ok = false;
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, c) in items.iter().enumerate() {
        match as_int_in(cx, &format!("{cp}[{i}]"), c, 400, 599) {
            Some(n) => out.push(n as u16),
            None => *ok = false,
        }
    }
    if out.is_empty() && *ok {
        cx.err(&cp, cv.span(), "a list of statuses, 400 to 599: none given");
        *ok = false;
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn headers(cx: &mut Cx, t: &mut Tbl, ok: &mut bool) -> Vec<(String, String)> {
    let Some(hv) = t.get("headers") else {
        return Vec::new();
    };
    let Some(mut h) = Tbl::of(cx, t.key_path("headers"), hv) else {
        *ok = false;
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, value, span) in h.entries() {
        let kp = h.key_path(name);
        let lower = name.to_ascii_lowercase();
        if !http_token(&lower) || WRITTEN.contains(&lower.as_str()) {
            cx.err(
                &kp,
                span,
                format!("\"{name}\" is not a header name a page's request may carry (the gateway writes Host, X-Code, X-Format, X-Original-URI, X-Request-ID, X-Forwarded-For and the framing)"),
            );
            *ok = false;
            continue;
        }
        let Some(s) = as_str(cx, &kp, value) else {
            *ok = false;
            continue;
        };
        if s.bytes().any(|b| !(b.is_ascii_graphic() || b == b' ')) {
            cx.err(
                &kp,
                span,
                format!("{s:?} cannot be a header value: visible ASCII and spaces"),
            );
            *ok = false;
            continue;
        }
        out.push((lower, s.to_string()));
    }
    out
}
