//! `[upstreams.NAME]`: where routes send requests (docs/upstreams.md).

use crate::model::UpstreamConfig;
use crate::model::*;
use crate::reader::{as_bool, as_int_in, as_str_list, join, type_err, Cx, Tbl};
use crate::scalars::{dns_name, duration};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use toml::de::DeValue;

/// A target: an address, or a DNS name with a port (resolved by the gateway in the
/// background, never here: a Service that does not exist yet is not a config error).
fn parse_target(target: &str) -> Option<UpstreamTarget> {
    if let Ok(a) = target.parse::<SocketAddr>() {
        return Some(UpstreamTarget {
            written: target.to_string(),
            host: a.ip().to_string(),
            port: a.port(),
            addr: Some(a),
        });
    }
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let host = host.strip_suffix('.').unwrap_or(host);
    dns_name(host).then(|| UpstreamTarget {
        written: target.to_string(),
        host: host.to_ascii_lowercase(),
        port,
        addr: None,
    })
}

pub(crate) fn read(cx: &mut Cx, mut t: Tbl, base: &Path) -> Vec<(String, UpstreamConfig)> {
    let mut out = Vec::new();
    for (name, v, _) in t.entries() {
        let path = join(&t.path, name);
        let Some(mut u) = Tbl::of(cx, path.clone(), v) else {
            continue;
        };
        let mut up = UpstreamConfig {
            name: name.to_string(),
            targets: Vec::new(),
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            tls: None,
            h2: false,
            health_check: Some(HealthCheck {
                interval: Duration::from_secs(2),
                timeout: Duration::from_secs(1),
            }),
            resolve_every: Duration::from_secs(5),
            balance: Default::default(),
            hash_key: None,
            affinity: None,
            retry: None,
            outlier: Some(Outlier::default()),
        };
        match u.get("targets") {
            Some(tv) => {
                let p = u.key_path("targets");
                if let Some(items) = as_str_list(cx, &p, tv, false) {
                    if items.is_empty() {
                        cx.err(&p, tv.span(), "needs at least one target (\"host:port\")");
                    }
                    for (ip, target, span) in items {
                        match parse_target(target) {
                            Some(t) => up.targets.push(t),
                            None => cx.err(
                                &ip,
                                span,
                                format!("\"{target}\" is not a host:port (e.g. \"127.0.0.1:3000\" or \"api.default.svc:8080\")"),
                            ),
                        }
                    }
                }
            }
            None => cx.err(&path, u.span.clone(), "missing key \"targets\""),
        }
        for (key, slot) in [
            ("resolve_every", &mut up.resolve_every),
            ("connect_timeout", &mut up.connect_timeout),
            ("read_timeout", &mut up.read_timeout),
            ("write_timeout", &mut up.write_timeout),
        ] {
            if let Some(v) = u.get(key) {
                if let Some(d) = duration(cx, &u.key_path(key), v) {
                    *slot = d;
                }
            }
        }
        if let Some(v) = u.get("tls") {
            up.tls = crate::tls::upstream_tls(cx, &u.key_path("tls"), v, base).map(Box::new);
        }
        if let Some(v) = u.get("h2") {
            up.h2 = as_bool(cx, &u.key_path("h2"), v).unwrap_or(false);
        }
        if let Some(hv) = u.get("health_check") {
            up.health_check = health_check(cx, &u.key_path("health_check"), hv, up.health_check);
        }
        if let Some(v) = u.get("outlier") {
            up.outlier = outlier(cx, &u.key_path("outlier"), v);
        }
        balancing(cx, &mut u, &mut up);
        u.finish(cx);
        out.push((name.to_string(), up));
    }
    out
}

/// `health_check`: `false`, `true` (the defaults) or `{ interval, timeout }`; `current` is
/// what the upstream has so far.
fn health_check(
    cx: &mut Cx,
    hp: &str,
    hv: &crate::reader::Value,
    current: Option<HealthCheck>,
) -> Option<HealthCheck> {
    let fallback = HealthCheck {
        interval: Duration::from_secs(2),
        timeout: Duration::from_secs(1),
    };
    match hv.get_ref() {
        DeValue::Boolean(false) => None,
        DeValue::Boolean(true) => current,
        DeValue::Table(_) => {
            let Some(mut h) = Tbl::of(cx, hp.to_string(), hv) else {
                return current;
            };
            let mut hc = current.unwrap_or(fallback);
            if let Some(v) = h.get("interval") {
                if let Some(d) = duration(cx, &h.key_path("interval"), v) {
                    hc.interval = d.max(Duration::from_millis(10));
                }
            }
            if let Some(v) = h.get("timeout") {
                if let Some(d) = duration(cx, &h.key_path("timeout"), v) {
                    hc.timeout = d;
                }
            }
            h.finish(cx);
            Some(hc)
        }
        _ => {
            type_err(cx, hp, hv, "a table { interval, timeout } or false");
            current
        }
    }
}

/// `outlier`: `false`, `true` (the defaults) or a table of them.
fn outlier(cx: &mut Cx, path: &str, v: &crate::reader::Value) -> Option<Outlier> {
    let mut o = Outlier::default();
    match v.get_ref() {
        DeValue::Boolean(false) => return None,
        DeValue::Boolean(true) => return Some(o),
        DeValue::Table(_) => {}
        _ => {
            type_err(
                cx,
                path,
                v,
                "false, or a table { consecutive_failures, ejection, max_ejection, max_ejected_percent }",
            );
            return Some(o);
        }
    }
    let Some(mut t) = Tbl::of(cx, path.to_string(), v) else {
        return Some(o);
    };
    if let Some(v) = t.get("consecutive_failures") {
        if let Some(n) = as_int_in(cx, &t.key_path("consecutive_failures"), v, 1, 1000) {
            o.consecutive_failures = n as u32;
        }
    }
    if let Some(v) = t.get("max_ejected_percent") {
        if let Some(n) = as_int_in(cx, &t.key_path("max_ejected_percent"), v, 0, 100) {
            o.max_ejected_percent = n as u8;
        }
    }
    for (key, slot) in [
        ("ejection", &mut o.ejection),
        ("max_ejection", &mut o.max_ejection),
    ] {
        if let Some(v) = t.get(key) {
            match duration(cx, &t.key_path(key), v) {
                Some(d) if d.is_zero() => cx.err(&t.key_path(key), v.span(), "must be more than 0"),
                Some(d) => *slot = d,
                None => {}
            }
        }
    }
    // Without its own cap, a long first ejection is its own cap.
    let capped = t.get("max_ejection").map(|v| v.span());
    if capped.is_none() {
        o.max_ejection = o.max_ejection.max(o.ejection);
    }
    if let (true, Some(span)) = (o.max_ejection < o.ejection, capped) {
        cx.err(
            &t.key_path("max_ejection"),
            span,
            format!(
                "max_ejection ({:?}) is shorter than ejection ({:?})",
                o.max_ejection, o.ejection
            ),
        );
    }
    t.finish(cx);
    Some(o)
}

/// `balance`, `hash_key`, `affinity`, `retry`.
fn balancing(cx: &mut Cx, u: &mut Tbl, up: &mut UpstreamConfig) {
    use crate::balance;
    let bv = u.get("balance");
    if let Some(v) = bv {
        up.balance = balance::balance(cx, &u.key_path("balance"), v).unwrap_or_default();
    }
    let hk = u.get("hash_key");
    if let Some(v) = hk {
        up.hash_key = balance::hash_key(cx, &u.key_path("hash_key"), v);
    }
    match (up.balance, hk) {
        (crate::model::Balance::Hash, None) => cx.err(
            &u.key_path("balance"),
            bv.map_or(u.span.clone(), |v| v.span()),
            "balance = \"hash\" needs hash_key (what to hash, e.g. \"client_ip\" or \"cookie:session\")",
        ),
        (b, Some(v)) if b != crate::model::Balance::Hash => cx.err(
            &u.key_path("hash_key"),
            v.span(),
            "hash_key is read only with balance = \"hash\"",
        ),
        _ => {}
    }
    if let Some(v) = u.get("affinity") {
        up.affinity = balance::affinity(cx, &u.key_path("affinity"), v).map(Box::new);
    }
    if let Some(v) = u.get("retry") {
        up.retry = balance::retry(cx, &u.key_path("retry"), v);
    }
}
