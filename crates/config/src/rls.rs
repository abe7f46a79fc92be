//! `[rls]` and `[[rls.rules]]` (docs/rls.md): Envoy's rate limit service API served on
//! Tollgate's limits. A rule maps a domain and a descriptor pattern to limits keyed by the
//! matched entries' values (`key = "descriptor"`).

use crate::model::{KeySource, LimitConfig, OnError, Scope};
use crate::model::{RlsConfig, RlsDomain, RlsHeaders, RlsRule, MAX_DESCRIPTOR_ENTRIES};
use crate::reader::{as_array, as_str, as_str_list, Cx, Tbl, Value};
use std::net::SocketAddr;
use tollgate_limit::AlgorithmKind;

/// `[rls]`; the limits the `[[rls.domains]]` nodes count with are pushed onto `made`.
pub(crate) fn read(
    cx: &mut Cx,
    mut t: Tbl,
    limits: &[(String, Option<LimitConfig>)],
    weights: &[usize],
    env: &Env,
    made: &mut Vec<LimitConfig>,
) -> Option<RlsConfig> {
    let mut ok = true;
    let listen = listen(cx, &mut t, &mut ok);
    let tls = t.bool(cx, "tls").unwrap_or(false);
    let response_headers = response_headers(cx, &mut t, &mut ok);
    let header_names = header_names(cx, &mut t, &mut ok);
    let shadow_mode = t.bool(cx, "shadow_mode").unwrap_or(false);
    let quota_mode = t.bool(cx, "quota_mode").unwrap_or(false);
    let dynamic_metadata = t.bool(cx, "dynamic_metadata").unwrap_or(false);
    let local_cache = t.bool(cx, "local_cache").unwrap_or(true);
    let stop_increment_when_over = t.bool(cx, "stop_increment_when_over").unwrap_or(false);
    let how = tree_limits(cx, &mut t, env, &mut ok);
    let domains = match t.get("domains") {
        None => Vec::new(),
        Some(dv) => crate::rls_tree::read(cx, &t.key_path("domains"), dv, &how, made)
            .unwrap_or_else(|| {
                ok = false;
                Vec::new()
            }),
    };
    let mut rules = Vec::new();
    if let Some(rv) = t.get("rules") {
        let rp = t.key_path("rules");
        for (i, item) in as_array(cx, &rp, rv).unwrap_or_default().iter().enumerate() {
            match rule(cx, &format!("{rp}[{i}]"), item, limits, weights) {
                Some(r) => rules.push(r),
                None => ok = false,
            }
        }
    }
    ok &= conflicts(cx, &t, &rules, &domains, limits, made);
    t.finish(cx);
    Some(RlsConfig {
        listen: listen?,
        tls,
        rules,
        domains,
        response_headers,
        header_names,
        shadow_mode,
        quota_mode,
        dynamic_metadata,
        local_cache,
        stop_increment_when_over,
    })
    .filter(|_| ok)
}

/// `listen`: the address:port the service listens on (required).
fn listen(cx: &mut Cx, t: &mut Tbl, ok: &mut bool) -> Option<SocketAddr> {
    match t.get("listen") {
        None => {
            cx.err(
                &t.path.clone(),
                t.span.clone(),
                "missing key \"listen\" (e.g. \"127.0.0.1:8081\")",
            );
            *ok = false;
            None
        }
        Some(v) => match as_str(cx, &t.key_path("listen"), v).map(|s| s.parse::<SocketAddr>()) {
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                cx.err(
                    &t.key_path("listen"),
                    v.span(),
                    "not an address:port (e.g. \"127.0.0.1:8081\")",
                );
                *ok = false;
                None
            }
            None => {
                *ok = false;
                None
            }
        },
    }
}

/// `response_headers`: which rate limit fields an answer carries.
fn response_headers(cx: &mut Cx, t: &mut Tbl, ok: &mut bool) -> RlsHeaders {
    match t.get("response_headers") {
        None => RlsHeaders::Ietf,
        Some(v) => match as_str(cx, &t.key_path("response_headers"), v) {
            Some("ietf") => RlsHeaders::Ietf,
            Some("none") => RlsHeaders::None,
            Some("envoy") => RlsHeaders::Envoy,
            Some(other) => {
                cx.err(
                    &t.key_path("response_headers"),
                    v.span(),
                    format!("\"{other}\": expected \"ietf\", \"none\" or \"envoy\""),
                );
                *ok = false;
                RlsHeaders::Ietf
            }
            None => {
                *ok = false;
                RlsHeaders::Ietf
            }
        },
    }
}

/// `header_names`: the names of the three IETF fields (`limit`, `remaining`, `reset`).
fn header_names(cx: &mut Cx, t: &mut Tbl, ok: &mut bool) -> [String; 3] {
    let mut header_names = [
        "RateLimit-Limit".to_string(),
        "RateLimit-Remaining".to_string(),
        "RateLimit-Reset".to_string(),
    ];
    if let Some(v) = t.get("header_names") {
        match Tbl::of(cx, t.key_path("header_names"), v) {
            Some(mut ht) => {
                for (i, k) in ["limit", "remaining", "reset"].iter().enumerate() {
                    if let Some(hv) = ht.get(k) {
                        match as_str(cx, &ht.key_path(k), hv) {
                            Some(h) if !h.is_empty() && crate::scalars::http_token(h) => {
                                header_names[i] = h.to_string()
                            }
                            Some(h) => {
                                cx.err(
                                    &ht.key_path(k),
                                    hv.span(),
                                    format!("\"{h}\" is not a header name"),
                                );
                                *ok = false;
                            }
                            None => *ok = false,
                        }
                    }
                }
                ht.finish(cx);
            }
            None => *ok = false,
        }
    }
    header_names
}

/// How `[[rls.domains]]` limits count: `algorithm`, `scope` and `on_error`.
fn tree_limits(cx: &mut Cx, t: &mut Tbl, env: &Env, ok: &mut bool) -> crate::rls_tree::TreeLimits {
    let algorithm = match t.get("algorithm") {
        None => AlgorithmKind::CountingWindow,
        Some(v) => match as_str(cx, &t.key_path("algorithm"), v) {
            Some(a) => {
                match AlgorithmKind::from_name(a).filter(|k| *k != AlgorithmKind::Concurrency) {
                    Some(k) => k,
                    None => {
                        cx.err(
                        &t.key_path("algorithm"),
                        v.span(),
                        format!("\"{a}\": the algorithm the [[rls.domains]] limits count with (counting_window, as envoyproxy/ratelimit counts, or a rate algorithm)"),
                    );
                        *ok = false;
                        AlgorithmKind::CountingWindow
                    }
                }
            }
            None => {
                *ok = false;
                AlgorithmKind::CountingWindow
            }
        },
    };
    let scope = match t.get("scope") {
        None if env.redis_present => Scope::Global,
        None => Scope::Local,
        Some(v) => match as_str(cx, &t.key_path("scope"), v) {
            Some("local") => Scope::Local,
            Some("global") if env.redis_present => Scope::Global,
            Some("global") => {
                cx.err(
                    &t.key_path("scope"),
                    v.span(),
                    "global limits count in Redis: add a [redis] section",
                );
                *ok = false;
                Scope::Local
            }
            Some(other) => {
                cx.err(
                    &t.key_path("scope"),
                    v.span(),
                    format!("\"{other}\": expected \"global\" or \"local\""),
                );
                *ok = false;
                Scope::Local
            }
            None => {
                *ok = false;
                Scope::Local
            }
        },
    };
    let on_error = match t.get("on_error") {
        None => OnError::Fail,
        Some(v) => crate::scalars::on_error(cx, &t.key_path("on_error"), v).unwrap_or_else(|| {
            *ok = false;
            OnError::Fail
        }),
    };
    crate::rls_tree::TreeLimits {
        algorithm,
        scope,
        on_error,
    }
}

/// A domain is served by a tree or by rules, never both; a limit made for a tree node never
/// shadows a `[limits]` one.
fn conflicts(
    cx: &mut Cx,
    t: &Tbl,
    rules: &[RlsRule],
    domains: &[RlsDomain],
    limits: &[(String, Option<LimitConfig>)],
    made: &[LimitConfig],
) -> bool {
    let mut ok = true;
    for (i, r) in rules.iter().enumerate() {
        if domains.iter().any(|d| d.domain == r.domain) {
            cx.err(
                &format!("rls.rules[{i}].domain"),
                t.span.clone(),
                format!("domain \"{}\" is served by [[rls.domains]] already: a domain is one tree (envoyproxy/ratelimit's) or rules, not both", r.domain),
            );
            ok = false;
        }
    }
    for m in made.iter() {
        if limits.iter().any(|(n, _)| *n == m.name) {
            cx.err(
                "rls.domains",
                t.span.clone(),
                format!("limit \"{}\" is defined in [limits] and made for a [[rls.domains]] node: rename the [limits] one", m.name),
            );
            ok = false;
        }
    }
    ok
}

/// What `[rls]` reads of the rest of the document.
pub(crate) struct Env {
    /// A `[redis]` table is written: the tree's limits count there by default.
    pub redis_present: bool,
}

/// One `[[rls.rules]]`: each key by its own reader.
fn rule(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    limits: &[(String, Option<LimitConfig>)],
    weights: &[usize],
) -> Option<RlsRule> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let domain = domain(cx, &mut t, path, v);
    let descriptor = match t.get("descriptor") {
        Some(dv) => descriptor(cx, &format!("{path}.descriptor"), dv),
        None => {
            cx.err(
                path,
                v.span(),
                "missing key \"descriptor\" (e.g. [{ key = \"remote_address\" }])",
            );
            None
        }
    };
    let deny = t.bool(cx, "deny").unwrap_or(false);
    let names = match t.get("limits") {
        None if deny => Some(Vec::new()),
        None => {
            cx.err(
                path,
                v.span(),
                "missing key \"limits\" (the limits a matching descriptor meets; [] for none, deny = true to refuse every one)",
            );
            None
        }
        Some(lv) => rule_limits(cx, &format!("{path}.limits"), lv, limits, weights, deny),
    };
    t.finish(cx);
    Some(RlsRule {
        domain: domain?,
        descriptor: descriptor?,
        limits: names?,
        deny,
    })
}

/// `domain`: required, not empty.
fn domain(cx: &mut Cx, t: &mut Tbl, path: &str, v: &Value) -> Option<String> {
    let Some(d) = t.get("domain") else {
        cx.err(path, v.span(), "missing key \"domain\"");
        return None;
    };
    let dp = format!("{path}.domain");
    match as_str(cx, &dp, d)? {
        "" => {
            cx.err(&dp, d.span(), "a domain is not empty");
            None
        }
        s => Some(s.to_string()),
    }
}

/// `descriptor = [{ key, value? }, ...]`: 1 to [`MAX_DESCRIPTOR_ENTRIES`] entries, each with a
/// non-empty key and, when given, a non-empty value.
fn descriptor(cx: &mut Cx, dp: &str, dv: &Value) -> Option<Vec<(String, Option<String>)>> {
    let items = as_array(cx, dp, dv)?;
    let mut ok = true;
    if items.is_empty() || items.len() > MAX_DESCRIPTOR_ENTRIES {
        cx.err(
            dp,
            dv.span(),
            format!(
                "from 1 to {MAX_DESCRIPTOR_ENTRIES} entries ({{ key, value }}), got {}",
                items.len()
            ),
        );
        ok = false;
    }
    let mut out = Vec::new();
    for (j, e) in items.iter().enumerate() {
        let ep = format!("{dp}[{j}]");
        let Some(mut et) = Tbl::of(cx, ep.clone(), e) else {
            ok = false;
            continue;
        };
        let key = et
            .get("key")
            .and_then(|k| as_str(cx, &format!("{ep}.key"), k))
            .filter(|k| !k.is_empty());
        let value = match et.get("value") {
            None => Ok(None),
            Some(val) => match as_str(cx, &format!("{ep}.value"), val) {
                Some("") => {
                    cx.err(
                        &format!("{ep}.value"),
                        val.span(),
                        "an empty value matches nothing: leave \"value\" out to match any",
                    );
                    Err(())
                }
                Some(s) => Ok(Some(s.to_string())),
                None => Err(()),
            },
        };
        et.finish(cx);
        match (key, value) {
            (Some(k), Ok(v)) => out.push((k.to_string(), v)),
            (None, _) => {
                cx.err(&ep, e.span(), "needs a non-empty \"key\"");
                ok = false;
            }
            (_, Err(())) => ok = false,
        }
    }
    ok.then_some(out)
}

/// `limits`: defined limits keyed by `descriptor` or `global`, no concurrency limit, each
/// once, at most [`crate::MAX_LIMITS_PER_ROUTE`] (a plan limit once per plan, as on a route);
/// none with `deny`.
fn rule_limits(
    cx: &mut Cx,
    lp: &str,
    lv: &Value,
    limits: &[(String, Option<LimitConfig>)],
    weights: &[usize],
    deny: bool,
) -> Option<Vec<String>> {
    let items = as_str_list(cx, lp, lv, false)?;
    let mut ok = true;
    if deny && !items.is_empty() {
        cx.err(
            lp,
            lv.span(),
            "deny = true refuses every matching descriptor: its limits would never count",
        );
        ok = false;
    }
    let mut names: Vec<String> = Vec::new();
    for (ip, name, span) in items {
        let why = match limits.iter().find(|(n, _)| n == name) {
            None => Some(format!("unknown limit \"{name}\"")),
            // The limit itself was in error: already said.
            Some((_, None)) => {
                ok = false;
                continue;
            }
            Some((_, Some(l)))
                if !l
                    .key
                    .iter()
                    .all(|k| matches!(k, KeySource::Descriptor | KeySource::Global)) =>
            {
                let keys: Vec<String> = l.key.iter().map(KeySource::describe).collect();
                Some(format!("limit \"{name}\" is keyed by {}: a rule's limits are keyed by \"descriptor\" (the matched entries' values) or \"global\"", keys.join(" + ")))
            }
            Some((_, Some(l))) if l.algorithm == tollgate_limit::AlgorithmKind::Concurrency => {
                Some(format!("limit \"{name}\" counts requests in flight: the rate limit service never learns when a request ends"))
            }
            Some(_) if names.iter().any(|n| n == name) => {
                Some(format!("limit \"{name}\" is listed twice"))
            }
            Some(_) => {
                names.push(name.to_string());
                None
            }
        };
        if let Some(why) = why {
            cx.err(&ip, span, why);
            ok = false;
        }
    }
    let count: usize = names
        .iter()
        .filter_map(|n| limits.iter().position(|(l, _)| l == n))
        .map(|i| weights.get(i).copied().unwrap_or(1))
        .sum();
    if count > crate::MAX_LIMITS_PER_ROUTE {
        cx.err(
            lp,
            lv.span(),
            format!(
                "at most {} limits per rule (a plan limit counts once per plan), got {count}",
                crate::MAX_LIMITS_PER_ROUTE
            ),
        );
        ok = false;
    }
    ok.then_some(names)
}
