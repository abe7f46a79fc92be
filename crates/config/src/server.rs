//! `[server]`: listeners, the admin listener, threads and the process-wide settings; each
//! default is written once, in [`server_defaults`] (a key given with a bad value keeps it,
//! its problem reported). The hardening keys are read in [`crate::hardening`].

use crate::model::ServerConfig;
use crate::model::*;
use crate::reader::{as_str, as_str_list, Cx, Tbl, Value};
use crate::scalars::{cidr, duration};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub(crate) fn server_defaults() -> ServerConfig {
    ServerConfig {
        listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
        admin: None,
        threads: default_threads(),
        trusted_proxies: Vec::new(),
        ipv6_prefix: 64,
        shadow: false,
        grace_period: Duration::from_secs(5),
        upgrade_sock: PathBuf::from("/tmp/tollgate_upgrade.sock"),
        h2c: true,
        access_log: false,
        access_log_paths: false,
        admin_token: None,
        legacy_headers: false,
        preserve_header_case: false,
        underscores_in_headers: false,
        key_body_limit: 16 * 1024,
        hardening: Hardening::default(),
        tls_listen: Vec::new(),
        https_redirect: false,
        https_port: None,
        host_fallthrough: false,
        max_body_bytes: crate::model::DEFAULT_MAX_BODY_BYTES,
        request_headers: Default::default(),
        response_headers: Default::default(),
    }
}

fn socket_addr(
    cx: &mut Cx,
    path: &str,
    s: &str,
    span: std::ops::Range<usize>,
) -> Option<SocketAddr> {
    match s.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            cx.err(
                path,
                span,
                format!("\"{s}\" is not an address: write IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::1]:8080\""),
            );
            None
        }
    }
}

pub(crate) fn server(cx: &mut Cx, mut t: Tbl) -> ServerConfig {
    let mut s = server_defaults();
    if let Some(v) = t.get("listen") {
        s.listen = addresses(cx, &t.key_path("listen"), v, &[]);
    }
    if let Some(v) = t.get("tls_listen") {
        s.tls_listen = addresses(cx, &t.key_path("tls_listen"), v, &s.listen);
    }
    if let Some(b) = t.bool(cx, "https_redirect") {
        s.https_redirect = b;
    }
    if let Some(b) = t.bool(cx, "host_fallthrough") {
        s.host_fallthrough = b;
    }
    if let Some(n) = t.int_in(cx, "https_port", 1, 65535) {
        s.https_port = Some(n as u16);
    }
    admin(cx, &mut t, &mut s);
    if let Some(n) = t.int_in(cx, "threads", 1, 1024) {
        s.threads = n as usize;
    }
    if let Some(v) = t.get("trusted_proxies") {
        let p = t.key_path("trusted_proxies");
        if let Some(items) = as_str_list(cx, &p, v, false) {
            s.trusted_proxies = items
                .iter()
                .filter_map(|(ip, n, span)| cidr(cx, ip, n, span.clone()))
                .collect();
        }
    }
    if let Some(n) = t.int_in(cx, "ipv6_prefix", 1, 128) {
        s.ipv6_prefix = n as u8;
    }
    if let Some(b) = t.bool(cx, "shadow") {
        s.shadow = b;
    }
    if let Some(v) = t.get("grace_period") {
        if let Some(d) = duration(cx, &t.key_path("grace_period"), v) {
            s.grace_period = d;
        }
    }
    if let Some(v) = t.get("upgrade_sock") {
        if let Some(p) = as_str(cx, &t.key_path("upgrade_sock"), v) {
            s.upgrade_sock = PathBuf::from(p);
        }
    }
    if let Some(b) = t.bool(cx, "h2c") {
        s.h2c = b;
    }
    if let Some(b) = t.bool(cx, "access_log") {
        s.access_log = b;
    }
    if let Some(b) = t.bool(cx, "access_log_paths") {
        s.access_log_paths = b;
    }
    if let Some(n) = t.int_in(cx, "key_body_limit", 1, 64 * 1024) {
        s.key_body_limit = n as usize;
    }
    admin_token(cx, &mut t, &mut s);
    if let Some(b) = t.bool(cx, "legacy_headers") {
        s.legacy_headers = b;
    }
    if let Some(b) = t.bool(cx, "preserve_header_case") {
        s.preserve_header_case = b;
    }
    if let Some(b) = t.bool(cx, "underscores_in_headers") {
        s.underscores_in_headers = b;
    }
    s.hardening = crate::hardening::read(cx, &mut t);
    if let Some(v) = t.get("max_body_bytes") {
        if let Some(n) = crate::edge::size(cx, &t.key_path("max_body_bytes"), v) {
            s.max_body_bytes = n;
        }
    }
    for (key, toward) in [
        ("request_headers", crate::edge::Toward::Upstream),
        ("response_headers", crate::edge::Toward::Client),
    ] {
        if let Some(v) = t.get(key) {
            if let Some(rules) = crate::edge::header_rules(cx, &t.key_path(key), v, toward) {
                match toward {
                    crate::edge::Toward::Upstream => s.request_headers = rules,
                    crate::edge::Toward::Client => s.response_headers = rules,
                }
            }
        }
    }
    t.finish(cx);
    s
}

/// `admin`: the admin listener, on no proxy listener's address.
fn admin(cx: &mut Cx, t: &mut Tbl, s: &mut ServerConfig) {
    let Some(v) = t.get("admin") else {
        return;
    };
    let p = t.key_path("admin");
    if let Some(a) = as_str(cx, &p, v) {
        s.admin = socket_addr(cx, &p, a, v.span());
    }
    if let Some(a) = s.admin {
        let clashes = |l: &SocketAddr| {
            l.port() == a.port()
                && l.is_ipv4() == a.is_ipv4()
                && (l.ip() == a.ip() || l.ip().is_unspecified() || a.ip().is_unspecified())
        };
        for (list, key) in [
            (&s.listen, "server.listen"),
            (&s.tls_listen, "server.tls_listen"),
        ] {
            if list.iter().any(clashes) {
                cx.err(
                    &p,
                    v.span(),
                    format!("{a} is also a proxy listener ({key})"),
                );
            }
        }
    }
}

/// `admin_token` or `admin_token_env` (never both): at least 16 characters.
fn admin_token(cx: &mut Cx, t: &mut Tbl, s: &mut ServerConfig) {
    match (t.get("admin_token"), t.get("admin_token_env")) {
        (Some(v), None) => {
            let p = t.key_path("admin_token");
            if let Some(tok) = as_str(cx, &p, v) {
                if tok.len() < 16 {
                    cx.err(
                        &p,
                        v.span(),
                        "at least 16 characters (it guards the blocks API)",
                    );
                } else {
                    s.admin_token = Some(tok.to_string());
                }
            }
        }
        (None, Some(v)) => {
            let p = t.key_path("admin_token_env");
            if let Some(name) = as_str(cx, &p, v) {
                match std::env::var(name) {
                    Ok(tok) if tok.len() >= 16 => s.admin_token = Some(tok),
                    Ok(_) => cx.err(
                        &p,
                        v.span(),
                        format!("the environment variable {name} holds fewer than 16 characters"),
                    ),
                    Err(_) => cx.err(
                        &p,
                        v.span(),
                        format!("the environment variable {name} is not set"),
                    ),
                }
            }
        }
        (Some(v), Some(_)) => cx.err(
            &t.key_path("admin_token"),
            v.span(),
            "set either admin_token or admin_token_env, not both",
        ),
        (None, None) => {}
    }
}

/// A list of listening addresses: each once, none also in `taken` (another list's).
fn addresses(cx: &mut Cx, p: &str, v: &Value, taken: &[SocketAddr]) -> Vec<SocketAddr> {
    let Some(items) = as_str_list(cx, p, v, true) else {
        return Vec::new();
    };
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for (ip, a, span) in &items {
        let Some(addr) = socket_addr(cx, ip, a, span.clone()) else {
            continue;
        };
        // A second listener on one address cannot be bound.
        if addrs.contains(&addr) {
            cx.err(ip, span.clone(), format!("{addr} is listed twice"));
        } else if taken.contains(&addr) {
            cx.err(ip, span.clone(), format!("{addr} is also in server.listen"));
        } else {
            addrs.push(addr);
        }
    }
    if items.is_empty() {
        cx.err(p, v.span(), "needs at least one address");
    }
    addrs
}
