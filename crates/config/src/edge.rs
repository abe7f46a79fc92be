//! A route's edge keys (docs/edge.md): the request body cap, CORS, header rules, the
//! upstream's Host and X-Forwarded-Prefix, compression, bandwidth and the www redirect; and
//! `[server]`'s defaults for the body cap and the header rules. One reader per key; each
//! refuses at load what would let a rule walk around the gateway (a hop-by-hop or a
//! gateway-owned header, a value that could split a header, a wildcard origin with
//! credentials).

use crate::model::{
    split_origin, ClientCertHeaders, CorsConfig, EdgeConfig, HeaderPart, HeaderRules,
    HeaderTemplate, HeaderVar, OriginRule, Replace,
};
use crate::reader::{as_bool, as_int_in, as_str, as_str_list, Cx, Tbl, Value};
use crate::scalars::http_token;
use toml::de::DeValue;

/// Which way a rule goes: what may not be written differs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Toward {
    Upstream,
    Client,
}

/// Names no rule may write: the message's framing and hop-by-hop fields (the next hop would
/// read another message), and what the gateway itself writes (a rule could forge it).
fn refused(name: &str, toward: Toward) -> Option<&'static str> {
    const HOP: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    ];
    if HOP.contains(&name) {
        return Some("is the connection's (framing or hop-by-hop): no rule may write it");
    }
    if name.starts_with(':') {
        return Some("is a pseudo-header");
    }
    let owned: &[&str] = match toward {
        Toward::Upstream => &[
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-prefix",
            "x-request-id",
            "x-ratelimit-shadow-exceeded",
            "host",
        ],
        Toward::Client => &[
            "x-request-id",
            "ratelimit",
            "ratelimit-policy",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "retry-after",
            "strict-transport-security",
            "content-encoding",
        ],
    };
    if owned.contains(&name) {
        return Some(match (toward, name) {
            (Toward::Upstream, "host") => "is the upstream's Host: use upstream_host",
            (Toward::Upstream, "x-forwarded-prefix") => "is the gateway's: use x_forwarded_prefix",
            _ => "is written by the gateway: a rule cannot replace or remove it",
        });
    }
    if toward == Toward::Client && name.starts_with("access-control-") {
        return Some("is CORS's: use the route's cors table");
    }
    None
}

/// Why a response header rule may not write `name` (lower case), if it may not: the
/// importer asks before it writes one (`custom-headers`).
pub fn response_header_refused(name: &str) -> Option<&'static str> {
    refused(name, Toward::Client)
}

/// Why a request header rule may not write `name` (lower case), if it may not: the Gateway
/// API translation asks before it writes one (RequestHeaderModifier).
pub fn request_header_refused(name: &str) -> Option<&'static str> {
    refused(name, Toward::Upstream)
}

/// A header name as a rule may name it: a token, in lower case.
fn header_name(
    cx: &mut Cx,
    path: &str,
    name: &str,
    span: std::ops::Range<usize>,
    toward: Toward,
) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    if lower.is_empty()
        || !http_token(&lower)
        || http::HeaderName::from_bytes(lower.as_bytes()).is_err()
    {
        cx.err(path, span, format!("\"{name}\" is not a header name"));
        return None;
    }
    if let Some(why) = refused(&lower, toward) {
        cx.err(path, span, format!("\"{name}\" {why}"));
        return None;
    }
    Some(lower)
}

/// A value with `$name` / `${name}` variables (`$$` is a `$`), each literal part visible
/// ASCII, space or tab (nothing that could end the header line).
pub(crate) fn template(
    cx: &mut Cx,
    path: &str,
    s: &str,
    span: std::ops::Range<usize>,
) -> Option<HeaderTemplate> {
    if s.bytes()
        .any(|b| (b < 0x20 && b != b'\t') || b == 0x7f || b >= 0x80)
    {
        cx.err(
            path,
            span,
            "a header value is visible ASCII, spaces and tabs (no line break, no control character)",
        );
        return None;
    }
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        lit.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(r) = after.strip_prefix('$') {
            lit.push('$');
            rest = r;
            continue;
        }
        let (name, next) = if let Some(b) = after.strip_prefix('{') {
            match b.find('}') {
                Some(end) => (&b[..end], &b[end + 1..]),
                None => ("", after),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        let Some(var) = HeaderVar::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
        else {
            let known: Vec<String> = HeaderVar::ALL
                .iter()
                .map(|(n, _)| format!("${n}"))
                .collect();
            cx.err(
                path,
                span,
                format!(
                    "\"${name}\" is not a variable a header value may name ({}; \"$$\" is a \"$\")",
                    known.join(", ")
                ),
            );
            return None;
        };
        if !lit.is_empty() {
            parts.push(HeaderPart::Lit(std::mem::take(&mut lit)));
        }
        parts.push(HeaderPart::Var(var));
        rest = next;
    }
    lit.push_str(rest);
    if !lit.is_empty() || parts.is_empty() {
        parts.push(HeaderPart::Lit(lit));
    }
    Some(parts)
}

/// `request_headers` / `response_headers = { set = {...}, add = {...}, remove = [...] }`.
pub(crate) fn header_rules(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    toward: Toward,
) -> Option<HeaderRules> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut rules = HeaderRules::default();
    let mut ok = true;
    for (key, list) in [("set", &mut rules.set), ("add", &mut rules.add)] {
        let Some(mv) = t.get(key) else { continue };
        let p = t.key_path(key);
        let Some(mut m) = Tbl::of(cx, p.clone(), mv) else {
            ok = false;
            continue;
        };
        for (name, value, span) in m.entries() {
            let ip = format!("{p}.{name}");
            let Some(n) = header_name(cx, &ip, name, span.clone(), toward) else {
                ok = false;
                continue;
            };
            let Some(s) = as_str(cx, &ip, value) else {
                ok = false;
                continue;
            };
            match template(cx, &ip, s, value.span()) {
                Some(tpl) => {
                    if list.iter().any(|(k, _)| *k == n) {
                        cx.err(&ip, span, format!("\"{name}\" is given twice"));
                        ok = false;
                    }
                    list.push((n, tpl));
                }
                None => ok = false,
            }
        }
    }
    if let Some(rv) = t.get("remove") {
        let p = t.key_path("remove");
        match as_str_list(cx, &p, rv, false) {
            Some(items) => {
                for (ip, name, span) in items {
                    match header_name(cx, &ip, name, span, toward) {
                        Some(n) => rules.remove.push(n),
                        None => ok = false,
                    }
                }
            }
            None => ok = false,
        }
    }
    for (n, _) in rules
        .set
        .iter()
        .filter(|(n, _)| rules.add.iter().any(|(a, _)| a == n))
    {
        cx.err(
            &t.path,
            v.span(),
            format!("\"{n}\" is both set and added: set replaces, add appends; choose one"),
        );
        ok = false;
    }
    t.finish(cx);
    ok.then_some(rules)
}

/// A byte count: an integer, or nginx's spelling (`"8m"`, `"512k"`, `"1g"`, `"0"`).
pub(crate) fn size(cx: &mut Cx, path: &str, v: &Value) -> Option<u64> {
    match v.get_ref() {
        DeValue::Integer(_) => as_int_in(cx, path, v, 0, i64::MAX).map(|n| n as u64),
        DeValue::String(s) => match parse_size(s) {
            Some(n) => Some(n),
            None => {
                cx.err(
                    path,
                    v.span(),
                    format!("\"{s}\" is not a size (bytes, or a number with k, m or g: \"8m\")"),
                );
                None
            }
        },
        _ => {
            crate::reader::type_err(cx, path, v, "a number of bytes or a size like \"8m\"");
            None
        }
    }
}

/// `123`, `8k`, `8m`, `1g` (either case; nginx's units: powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// `cors = { allow_origins, allow_methods, allow_headers, expose_headers, allow_credentials,
/// max_age, echo_wildcards }`; defaults as ingress-nginx's (methods and headers), origins required.
pub(crate) fn cors(cx: &mut Cx, path: &str, v: &Value) -> Option<CorsConfig> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut ok = true;
    let origins = allow_origins(cx, &mut t, path, v, &mut ok);
    let allow_methods = token_list(
        cx,
        &mut t,
        "allow_methods",
        &["GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"],
        true,
        &mut ok,
    );
    let allow_headers = token_list(
        cx,
        &mut t,
        "allow_headers",
        &[
            "DNT",
            "Keep-Alive",
            "User-Agent",
            "X-Requested-With",
            "If-Modified-Since",
            "Cache-Control",
            "Content-Type",
            "Range",
            "Authorization",
        ],
        false,
        &mut ok,
    );
    let expose_headers = token_list(cx, &mut t, "expose_headers", &[], false, &mut ok);
    let flag = |cx: &mut Cx, t: &mut Tbl, key: &str| match t.get(key) {
        Some(bv) => as_bool(cx, &t.key_path(key), bv).unwrap_or(false),
        None => false,
    };
    let allow_credentials = flag(cx, &mut t, "allow_credentials");
    let echo_wildcards = flag(cx, &mut t, "echo_wildcards");
    let max_age = t.get("max_age").and_then(|mv| match mv.get_ref() {
        DeValue::String(_) => {
            crate::scalars::duration(cx, &t.key_path("max_age"), mv).map(|d| d.as_secs())
        }
        _ => as_int_in(cx, &t.key_path("max_age"), mv, 0, 86_400 * 365).map(|n| n as u64),
    });
    if allow_credentials {
        let echoable = origins.contains(&OriginRule::Any)
            || allow_methods.iter().any(|m| m == "*")
            || allow_headers.iter().any(|h| h == "*");
        if expose_headers.iter().any(|h| h == "*") {
            cx.err(
                &t.key_path("allow_credentials"),
                v.span(),
                "expose_headers = [\"*\"] cannot go with allow_credentials = true: browsers then read it as a header named \"*\"; list the headers",
            );
            ok = false;
        } else if echoable && !echo_wildcards {
            cx.err(
                &t.key_path("allow_credentials"),
                v.span(),
                "a wildcard (\"*\") cannot go with allow_credentials = true: browsers refuse it, and reflecting any origin with credentials would let every site read the caller's data; list the origins, or set echo_wildcards = true to answer each request with its own origin (the Gateway API's way)",
            );
            ok = false;
        }
    }
    t.finish(cx);
    ok.then_some(CorsConfig {
        allow_origins: origins,
        allow_methods,
        allow_headers,
        expose_headers,
        allow_credentials,
        max_age,
        echo_wildcards,
    })
}

/// `allow_origins`: required, at least one, each an origin rule.
fn allow_origins(
    cx: &mut Cx,
    t: &mut Tbl,
    path: &str,
    v: &Value,
    ok: &mut bool,
) -> Vec<OriginRule> {
    let mut origins = Vec::new();
    match t.get("allow_origins") {
        None => {
            cx.err(
                path,
                v.span(),
                "missing key \"allow_origins\" (the origins a browser may call from, or [\"*\"])",
            );
            *ok = false;
        }
        Some(ov) => match as_str_list(cx, &t.key_path("allow_origins"), ov, true) {
            Some(items) if items.is_empty() => {
                cx.err(
                    &t.key_path("allow_origins"),
                    ov.span(),
                    "no origin: name at least one, or \"*\"",
                );
                *ok = false;
            }
            Some(items) => {
                for (ip, o, span) in items {
                    match origin_rule(o) {
                        Ok(r) => origins.push(r),
                        Err(why) => {
                            cx.err(&ip, span, format!("\"{o}\" {why}"));
                            *ok = false;
                        }
                    }
                }
            }
            None => *ok = false,
        },
    }
    origins
}

/// A CORS list of methods (upper-cased) or header names, `"*"` allowed; `default` when absent.
fn token_list(
    cx: &mut Cx,
    t: &mut Tbl,
    key: &str,
    default: &[&str],
    method: bool,
    ok: &mut bool,
) -> Vec<String> {
    let Some(lv) = t.get(key) else {
        return default.iter().map(|s| s.to_string()).collect();
    };
    let p = t.key_path(key);
    let Some(items) = as_str_list(cx, &p, lv, true) else {
        *ok = false;
        return Vec::new();
    };
    let mut out = Vec::new();
    for (ip, s, span) in items {
        let s = s.trim();
        if s == "*" || (http_token(s) && !s.is_empty()) {
            out.push(if method {
                s.to_ascii_uppercase()
            } else {
                s.to_string()
            });
        } else {
            cx.err(
                &ip,
                span,
                format!(
                    "\"{s}\" is not {}",
                    if method {
                        "an HTTP method"
                    } else {
                        "a header name"
                    }
                ),
            );
            *ok = false;
        }
    }
    out
}

/// One `allow_origins` entry: `*`, `scheme://host[:port]`, or `scheme://*.suffix[:port]`.
pub fn origin_rule(o: &str) -> Result<OriginRule, &'static str> {
    if o == "*" {
        return Ok(OriginRule::Any);
    }
    let lower = o.to_ascii_lowercase();
    if lower == "null" {
        return Err("is the origin of sandboxed frames and local files: any page can send it, so it cannot be allowed");
    }
    if let Some((scheme, rest)) = lower.split_once("://*.") {
        let probe = format!("{scheme}://x.{rest}");
        let Some((s, host, port)) = split_origin(&probe) else {
            return Err("is not an origin (scheme://host[:port], or scheme://*.domain[:port])");
        };
        let suffix = &host[2..];
        if !suffix.contains('.') {
            return Err("names every subdomain of a top-level domain: name a domain of your own");
        }
        return Ok(OriginRule::Subdomains {
            scheme: s.to_string(),
            suffix: suffix.to_string(),
            port,
        });
    }
    match split_origin(&lower) {
        Some(_) if !lower.ends_with('/') => Ok(OriginRule::Exact(lower)),
        _ => Err("is not an origin (scheme://host[:port], no path; or scheme://*.domain[:port]; or \"*\")"),
    }
}

/// Reads a route's edge keys from `r`; `None` when one is wrong (reported).
pub(crate) fn route(
    cx: &mut Cx,
    r: &mut Tbl,
    upstreams: &crate::named::Named<crate::model::UpstreamConfig>,
) -> Option<EdgeConfig> {
    let mut e = EdgeConfig::default();
    let mut ok = true;
    if let Some(v) = r.get("max_body_bytes") {
        e.max_body_bytes = size(cx, &r.key_path("max_body_bytes"), v);
        ok &= e.max_body_bytes.is_some();
    }
    if let Some(v) = r.get("cors") {
        e.cors = cors(cx, &r.key_path("cors"), v);
        ok &= e.cors.is_some();
    }
    for (key, toward) in [
        ("request_headers", Toward::Upstream),
        ("response_headers", Toward::Client),
    ] {
        if let Some(v) = r.get(key) {
            match header_rules(cx, &r.key_path(key), v, toward) {
                Some(rules) if toward == Toward::Upstream => e.request_headers = rules,
                Some(rules) => e.response_headers = rules,
                None => ok = false,
            }
        }
    }
    if let Some(v) = r.get("upstream_host") {
        let p = r.key_path("upstream_host");
        match as_str(cx, &p, v) {
            Some(h) if authority(h) => e.upstream_host = Some(h.to_ascii_lowercase()),
            Some(h) => {
                cx.err(
                    &p,
                    v.span(),
                    format!("\"{h}\" is not a host name (with an optional :port)"),
                );
                ok = false;
            }
            None => ok = false,
        }
    }
    e.x_forwarded_prefix = x_forwarded_prefix(cx, r, &mut ok);
    if let Some(v) = r.get("compress") {
        e.compress = as_bool(cx, &r.key_path("compress"), v).unwrap_or(false);
    }
    if let Some(v) = r.get("limit_rate") {
        e.limit_rate = size(cx, &r.key_path("limit_rate"), v).unwrap_or_else(|| {
            ok = false;
            0
        });
    }
    if let Some(v) = r.get("limit_rate_after") {
        e.limit_rate_after = size(cx, &r.key_path("limit_rate_after"), v).unwrap_or_else(|| {
            ok = false;
            0
        });
    }
    if let Some(v) = r.get("www_redirect") {
        e.www_redirect = as_bool(cx, &r.key_path("www_redirect"), v).unwrap_or(false);
    }
    if let Some(v) = r.get("client_cert_headers") {
        let p = r.key_path("client_cert_headers");
        e.client_cert_headers = match v.get_ref() {
            DeValue::Boolean(true) => ClientCertHeaders::Verify,
            DeValue::Boolean(false) => ClientCertHeaders::Off,
            DeValue::String(s) if s.as_ref() == "with_certificate" => {
                ClientCertHeaders::WithCertificate
            }
            _ => {
                cx.err(&p, v.span(), "true, false or \"with_certificate\"");
                ok = false;
                ClientCertHeaders::Off
            }
        };
    }
    if let Some(v) = r.get("https_redirect_drop_slash") {
        e.https_redirect_drop_slash =
            as_bool(cx, &r.key_path("https_redirect_drop_slash"), v).unwrap_or(false);
    }
    ok &= response_rewrites(cx, r, &mut e);
    if let Some(v) = r.get("mirror") {
        e.mirror = crate::mirror::mirror(cx, &r.key_path("mirror"), v, upstreams);
        ok &= e.mirror.is_some();
    }
    ok.then_some(e)
}

/// `x_forwarded_prefix`: `true` (the prefix `strip_prefix` takes off) or a path.
fn x_forwarded_prefix(cx: &mut Cx, r: &mut Tbl, ok: &mut bool) -> Option<String> {
    let v = r.get("x_forwarded_prefix")?;
    let p = r.key_path("x_forwarded_prefix");
    match v.get_ref() {
        DeValue::Boolean(true) => Some(String::new()),
        DeValue::Boolean(false) => None,
        DeValue::String(s)
            if s.starts_with('/')
                && template(cx, &p, s, v.span()).is_some()
                && !s.contains('$') =>
        {
            Some(s.to_string())
        }
        _ => {
            cx.err(&p, v.span(), "x_forwarded_prefix is true (the prefix strip_prefix takes off) or a path starting with \"/\"");
            *ok = false;
            None
        }
    }
}

/// Which response field a rewrite works on: what its `from` and `to` may hold differs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rewritten {
    Location,
    CookieDomain,
    CookiePath,
}

/// `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`: each a `{ from, to }` or a
/// list of them. Refused at load: an empty `from`, and a value that could write another
/// field or attribute (a control character, a space, a `;` or a `,` in a cookie's).
fn response_rewrites(cx: &mut Cx, r: &mut Tbl, e: &mut EdgeConfig) -> bool {
    let mut ok = true;
    for (key, kind) in [
        ("proxy_redirect", Rewritten::Location),
        ("proxy_cookie_domain", Rewritten::CookieDomain),
        ("proxy_cookie_path", Rewritten::CookiePath),
    ] {
        let Some(v) = r.get(key) else { continue };
        let p = r.key_path(key);
        let items: Vec<&Value> = match v.get_ref() {
            DeValue::Array(a) => a.iter().collect(),
            DeValue::Table(_) => vec![v],
            _ => {
                cx.err(&p, v.span(), "a { from, to } table, or a list of them");
                ok = false;
                continue;
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let ip = if matches!(v.get_ref(), DeValue::Array(_)) {
                format!("{p}[{i}]")
            } else {
                p.clone()
            };
            match replace(cx, &ip, item, kind) {
                Some(rep) => out.push(rep),
                None => ok = false,
            }
        }
        match kind {
            Rewritten::Location => e.proxy_redirect = out,
            Rewritten::CookieDomain => e.proxy_cookie_domain = out,
            Rewritten::CookiePath => e.proxy_cookie_path = out,
        }
    }
    ok
}

fn replace(cx: &mut Cx, p: &str, v: &Value, kind: Rewritten) -> Option<Replace> {
    let mut t = Tbl::of(cx, p.to_string(), v)?;
    let mut text = |key: &str| -> Option<String> {
        let Some(tv) = t.get(key) else {
            cx.err(p, v.span(), format!("missing key \"{key}\""));
            return None;
        };
        let kp = t.key_path(key);
        let s = as_str(cx, &kp, tv)?;
        let bad = s.bytes().any(|b| {
            !b.is_ascii_graphic() || (kind != Rewritten::Location && (b == b';' || b == b','))
        });
        if bad {
            let what = if kind == Rewritten::Location {
                "visible ASCII, no spaces"
            } else {
                "visible ASCII, no spaces, ; or ,"
            };
            cx.err(
                &kp,
                tv.span(),
                format!("\"{s}\" cannot be written in the field: {what}"),
            );
            return None;
        }
        if key == "from" && s.is_empty() {
            cx.err(
                &kp,
                tv.span(),
                "an empty from would match everything: name what is replaced",
            );
            return None;
        }
        // nginx ignores a leading dot of both; the domain is compared in any case.
        Some(match kind {
            Rewritten::CookieDomain if key == "from" => {
                s.trim_start_matches('.').to_ascii_lowercase()
            }
            Rewritten::CookieDomain => s.trim_start_matches('.').to_string(),
            _ => s.to_string(),
        })
    };
    let (from, to) = (text("from"), text("to"));
    t.finish(cx);
    let (from, to) = (from?, to?);
    if kind == Rewritten::CookieDomain && from.is_empty() {
        cx.err(p, v.span(), "from is a domain: not only dots");
        return None;
    }
    Some(Replace { from, to })
}

/// `host[:port]`: a DNS name (or an IP address) and an optional port.
fn authority(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (s, None),
    };
    port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0))
        && (crate::scalars::dns_name(host) || host.parse::<std::net::Ipv4Addr>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_exactly_or_by_subdomain() {
        let exact = origin_rule("https://App.Example.com").expect("an origin");
        assert!(exact.admits("https://app.example.com"));
        assert!(exact.admits("HTTPS://APP.EXAMPLE.COM"));
        for no in [
            "https://app.example.com.evil.net",
            "http://app.example.com",
            "https://app.example.com:8443",
            "https://xapp.example.com",
            "null",
            "",
            "https://app.example.com/",
            "https://user@app.example.com",
        ] {
            assert!(!exact.admits(no), "{no}");
        }
        let sub = origin_rule("https://*.example.com").expect("a pattern");
        for yes in [
            "https://a.example.com",
            "https://a.b.example.com",
            "https://A-1.Example.COM",
        ] {
            assert!(sub.admits(yes), "{yes}");
        }
        for no in [
            "https://example.com",
            "https://.example.com",
            "https://evilexample.com",
            "https://a.example.com.evil.net",
            "http://a.example.com",
            "https://a.example.com:444",
            "https://a..example.com",
            "https://a_b.example.com",
            "null",
        ] {
            assert!(!sub.admits(no), "{no}");
        }
        assert!(origin_rule("null").is_err());
        assert!(origin_rule("https://*.com").is_err());
        assert!(origin_rule("https://a.com/path").is_err());
        assert!(origin_rule("ftp://a.com").is_err());
        assert!(origin_rule("https://a.com:99999").is_err());
        assert_eq!(origin_rule("*"), Ok(OriginRule::Any));
    }

    #[test]
    fn sizes_in_nginx_units() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("8m"), Some(8 << 20));
        assert_eq!(parse_size("8M"), Some(8 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("100"), Some(100));
        for bad in ["", "m", "-1", "1.5m", "1t", "1 m", "99999999999999999999g"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
