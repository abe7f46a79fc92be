//! The edge annotations of a route: `proxy-body-size`, `enable-cors` and `cors-*`,
//! `server-alias`, `from-to-www-redirect`, `upstream-vhost`, `x-forwarded-prefix`,
//! `limit-rate` and `limit-rate-after`, the response rewrites ([`super::rewrite_back`]), the
//! mirror ([`super::mirror`]), as the route keys of docs/edge.md.
//!
//! Values are checked here as the config would check them; one that cannot be kept is named
//! and left out (the route keeps Tollgate's default), as ingress-nginx drops a bad value.

use super::anns::Anns;
use super::text::{comment, flag, q, Warnings};
use tollgate_config::{origin_rule, parse_size};

/// ingress-nginx's `cors-allow-methods` default.
const CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
/// ingress-nginx's `cors-allow-headers` default.
const CORS_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";
/// ingress-nginx's `cors-max-age` default (20 days).
const CORS_MAX_AGE: u64 = 1_728_000;

/// What one Ingress asks of its routes at the edge, as TOML lines for them.
#[derive(Clone, Debug, Default)]
pub(super) struct EdgeOut {
    /// `proxy-body-size` in bytes (0: none).
    pub max_body: Option<u64>,
    /// The `cors = { ... }` inline table.
    pub cors: Option<String>,
    /// `server-alias`: more names for each of the Ingress's hosts.
    pub aliases: Vec<String>,
    /// The rule host the aliases join (the Ingress's first exact host).
    pub alias_of: Option<String>,
    pub www_redirect: bool,
    pub upstream_host: Option<String>,
    pub x_forwarded_prefix: Option<String>,
    /// `limit-rate`, `limit-rate-after` in bytes.
    pub limit_rate: Option<(u64, u64)>,
    /// `proxy_redirect`, `proxy_cookie_domain` lines ([`super::rewrite_back`]).
    pub rewrite_back: Vec<String>,
    /// `custom-headers`' `response_headers` line ([`super::custom_headers`]).
    pub response_headers: Option<String>,
    /// `preserve-trailing-slash`: the HTTPS redirect keeps a trailing `/`.
    pub preserve_trailing_slash: bool,
    /// `mirror-target` and its keys: the `mirror = { ... }` line ([`super::mirror`]).
    pub mirror: Option<String>,
}

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> EdgeOut {
    let mut edge = EdgeOut::default();
    let ctx = a.ctx();
    let e = &mut edge;
    if let Some(v) = a.get("proxy-body-size") {
        match parse_size(v) {
            Some(n) => e.max_body = Some(n),
            None => w.push(comment(&format!(
                "{ctx}: proxy-body-size \"{v}\" is not a size (bytes, or k, m, g): Tollgate's default cap (1m, as ingress-nginx's) kept"
            ))),
        }
    }
    e.cors = cors_annotations(a, w);
    if let Some(v) = a.get("server-alias") {
        for alias in v.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match super::host_name::rule_host(alias) {
                Ok(h) if !h.starts_with('*') => e.aliases.push(h),
                _ => {
                    w.push(comment(&format!(
                        "{ctx}: server-alias \"{alias}\" is not a host name: left out"
                    )));
                }
            }
        }
    }
    e.www_redirect = flag(
        a.get("from-to-www-redirect"),
        false,
        &format!("{ctx}: from-to-www-redirect"),
        w,
    );
    if let Some(v) = a.get("upstream-vhost") {
        let v = v.trim();
        if !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
        {
            e.upstream_host = Some(v.to_string());
        } else {
            w.push(comment(&format!(
                "{ctx}: upstream-vhost \"{v}\" is not a host[:port] (nginx variables are not translated): the client's Host is sent"
            )));
        }
    }
    if let Some(v) = a.get("x-forwarded-prefix") {
        let v = v.trim();
        if v.starts_with('/') && v.bytes().all(|b| b.is_ascii_graphic()) {
            e.x_forwarded_prefix = Some(v.to_string());
        } else {
            w.push(comment(&format!(
                "{ctx}: x-forwarded-prefix \"{v}\" is not a path: no X-Forwarded-Prefix is sent"
            )));
        }
    }
    e.limit_rate = bandwidth(a, w);
    e.rewrite_back = super::rewrite_back::read(a, w);
    e.mirror = super::mirror::read(a, w);
    e.preserve_trailing_slash = flag(
        a.get("preserve-trailing-slash"),
        false,
        &format!("{ctx}: preserve-trailing-slash"),
        w,
    );
    edge
}

/// `enable-cors` and the `cors-*` keys (ignored, as by ingress-nginx, without it).
fn cors_annotations(a: &mut Anns, w: &mut Warnings) -> Option<String> {
    let ctx = a.ctx();
    if flag(
        a.get("enable-cors"),
        false,
        &format!("{ctx}: enable-cors"),
        w,
    ) {
        let (origins, methods, headers, expose, creds, max_age) = (
            a.get("cors-allow-origin"),
            a.get("cors-allow-methods"),
            a.get("cors-allow-headers"),
            a.get("cors-expose-headers"),
            a.get("cors-allow-credentials"),
            a.get("cors-max-age"),
        );
        return cors(ctx, origins, methods, headers, expose, creds, max_age, w);
    }
    for k in [
        "cors-allow-origin",
        "cors-allow-methods",
        "cors-allow-headers",
        "cors-expose-headers",
        "cors-allow-credentials",
        "cors-max-age",
    ] {
        if a.get(k).is_some() {
            w.push(comment(&format!(
                "{ctx}: {k} without enable-cors: \"true\": ignored (as by ingress-nginx)"
            )));
        }
    }
    None
}

/// `limit-rate` and `limit-rate-after` (kilobytes): bytes per second after so many bytes.
fn bandwidth(a: &mut Anns, w: &mut Warnings) -> Option<(u64, u64)> {
    let ctx = a.ctx();
    let kib = |key: &str, v: Option<&str>, w: &mut Warnings| -> Option<u64> {
        let v = v?;
        match v.trim().parse::<u64>() {
            Ok(n) => n.checked_mul(1024),
            Err(_) => {
                w.push(comment(&format!(
                    "{ctx}: {key} \"{v}\" is not a number of kilobytes: ignored"
                )));
                None
            }
        }
    };
    let rate = kib("limit-rate", a.get("limit-rate"), w);
    let after = kib("limit-rate-after", a.get("limit-rate-after"), w);
    match (rate, after) {
        (Some(r), after) if r > 0 => return Some((r, after.unwrap_or(0))),
        (None | Some(0), Some(_)) => w.push(comment(&format!(
            "{ctx}: limit-rate-after without limit-rate: nothing to limit"
        ))),
        _ => {}
    }
    None
}

/// The route's `cors` table, with ingress-nginx's defaults for what is not said.
#[allow(clippy::too_many_arguments)]
fn cors(
    ctx: &str,
    origins: Option<&str>,
    methods: Option<&str>,
    headers: Option<&str>,
    expose: Option<&str>,
    creds: Option<&str>,
    max_age: Option<&str>,
    w: &mut Warnings,
) -> Option<String> {
    let mut allowed = Vec::new();
    for o in origins
        .unwrap_or("*")
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
    {
        match origin_rule(o) {
            Ok(_) => allowed.push(o.to_string()),
            Err(why) => w.push(comment(&format!(
                "{ctx}: cors-allow-origin \"{o}\" {why}: left out"
            ))),
        }
    }
    if allowed.is_empty() {
        w.push(comment(&format!(
            "{ctx}: cors-allow-origin names no origin Tollgate can allow: no CORS headers are sent (browsers refuse cross-origin reads)"
        )));
        return None;
    }
    let mut credentials = flag(creds, true, &format!("{ctx}: cors-allow-credentials"), w);
    if credentials && allowed.iter().any(|o| o == "*") {
        w.push(comment(&format!(
            "{ctx}: CORS with origin \"*\" and credentials (ingress-nginx's defaults): browsers refuse credentials with \"*\", and reflecting every origin with them would let any site read the caller's data; allow_credentials = false (list the origins to allow credentials)"
        )));
        credentials = false;
    }
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .filter(|s| *s == "*" || tollgate_config::http_token(s))
            .map(q)
            .collect()
    };
    let mut parts = vec![
        format!(
            "allow_origins = [{}]",
            allowed.iter().map(|o| q(o)).collect::<Vec<_>>().join(", ")
        ),
        format!(
            "allow_methods = [{}]",
            list(methods.unwrap_or(CORS_METHODS)).join(", ")
        ),
        format!(
            "allow_headers = [{}]",
            list(headers.unwrap_or(CORS_HEADERS)).join(", ")
        ),
    ];
    let exposed = list(expose.unwrap_or(""));
    if !exposed.is_empty() {
        parts.push(format!("expose_headers = [{}]", exposed.join(", ")));
    }
    parts.push(format!("allow_credentials = {credentials}"));
    let age = match max_age.map(|v| v.trim().parse::<u64>()) {
        None => CORS_MAX_AGE,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            w.push(comment(&format!(
                "{ctx}: cors-max-age \"{}\" is not a number of seconds: {CORS_MAX_AGE} used (ingress-nginx's default)",
                max_age.unwrap_or_default()
            )));
            CORS_MAX_AGE
        }
    };
    parts.push(format!("max_age = {age}"));
    Some(format!("cors = {{ {} }}", parts.join(", ")))
}

/// The route's edge keys (a proxying route that was not denied).
pub(super) fn lines(out: &mut String, e: &EdgeOut, host: Option<&str>) {
    use std::fmt::Write;
    if let Some(n) = e.max_body {
        let _ = writeln!(out, "# proxy-body-size\nmax_body_bytes = {n}");
    }
    if let Some(c) = &e.cors {
        let _ = writeln!(
            out,
            "# enable-cors (preflights answered here, never limited)\n{c}"
        );
    }
    if e.www_redirect && host.is_some_and(|h| !h.starts_with('*')) && e.aliases.is_empty() {
        out.push_str("# from-to-www-redirect\nwww_redirect = true\n");
    }
    if let Some(h) = &e.upstream_host {
        let _ = writeln!(out, "upstream_host = {}", q(h));
    }
    if let Some(p) = &e.x_forwarded_prefix {
        let _ = writeln!(out, "x_forwarded_prefix = {}", q(p));
    }
    for l in e
        .rewrite_back
        .iter()
        .chain(&e.response_headers)
        .chain(&e.mirror)
    {
        let _ = writeln!(out, "{l}");
    }
    if let Some((rate, after)) = e.limit_rate {
        let _ = writeln!(
            out,
            "# limit-rate, limit-rate-after (kilobytes)\nlimit_rate = {rate}"
        );
        if after > 0 {
            let _ = writeln!(out, "limit_rate_after = {after}");
        }
    }
}

/// The route's `host`: with the Ingress's aliases when it is their host.
pub(super) fn host_line(e: &EdgeOut, host: &str) -> String {
    if e.alias_of.as_deref() == Some(host) && !e.aliases.is_empty() {
        let mut all = vec![q(host)];
        all.extend(e.aliases.iter().map(|a| q(a)));
        format!("# server-alias\nhost = [{}]", all.join(", "))
    } else {
        format!("host = {}", q(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_takes_ingress_nginx_defaults_and_never_credentials_with_a_wildcard() {
        let mut w = Warnings::default();
        let c = cors("I", None, None, None, None, None, None, &mut w).expect("cors");
        assert!(c.contains("allow_origins = [\"*\"]"), "{c}");
        assert!(c.contains("allow_credentials = false"), "{c}");
        assert!(
            c.contains("\"PATCH\"")
                && c.contains("\"Authorization\"")
                && c.contains("max_age = 1728000"),
            "{c}"
        );
        assert!(w.iter().any(|x| x.contains("credentials")));
        let mut w = Warnings::default();
        let c = cors(
            "I",
            Some("https://app.example.com, https://*.example.org, null, https://*.com"),
            Some("GET"),
            Some("X-Token"),
            Some("X-Total"),
            Some("true"),
            Some("600"),
            &mut w,
        )
        .expect("cors");
        assert_eq!(
            c,
            "cors = { allow_origins = [\"https://app.example.com\", \"https://*.example.org\"], allow_methods = [\"GET\"], allow_headers = [\"X-Token\"], expose_headers = [\"X-Total\"], allow_credentials = true, max_age = 600 }"
        );
        assert_eq!(w.iter().filter(|x| x.contains("left out")).count(), 2);
        assert!(cors(
            "I",
            Some("null"),
            None,
            None,
            None,
            None,
            None,
            &mut Warnings::default()
        )
        .is_none());
    }
}
