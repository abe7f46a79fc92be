//! `[rls]` and `[[rls.rules]]` (docs/rls.md): Envoy's rate limit service API served on
//! Tollgate's limits. A rule maps a domain and a descriptor pattern to limits keyed by the
//! matched entries' values (`key = "descriptor"`).

use crate::reader::{as_array, as_str, as_str_list, Cx, Tbl, Value};
use crate::types::{KeySource, LimitConfig};
use std::net::SocketAddr;

/// At most this many entries in a rule's descriptor (envoyproxy/ratelimit's trees are a few
/// levels deep).
pub const MAX_DESCRIPTOR_ENTRIES: usize = 16;

/// `[rls]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsConfig {
    /// Plaintext gRPC (h2c), or TLS with `tls`. Read at start.
    pub listen: SocketAddr,
    /// Serve the listener over TLS with `[tls]`'s certificates (and its client CA: mutual
    /// TLS when `client_auth` asks for it). Read at start.
    pub tls: bool,
    pub rules: Vec<RlsRule>,
}

/// One `[[rls.rules]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsRule {
    pub domain: String,
    /// The entries a descriptor must have, in order: a key, and the value when one is named
    /// (otherwise any value, which is then part of the key).
    pub descriptor: Vec<(String, Option<String>)>,
    /// Limit names (`[limits.NAME]`), each keyed by `descriptor` or `global`; empty: the
    /// descriptor is never limited (envoyproxy/ratelimit's `unlimited`).
    pub limits: Vec<String>,
    /// Every matching descriptor is over the limit (envoyproxy/ratelimit's
    /// `requests_per_unit: 0`).
    pub deny: bool,
}

impl RlsRule {
    /// How many entries name a value: more is more specific.
    pub fn specificity(&self) -> usize {
        self.descriptor.iter().filter(|(_, v)| v.is_some()).count()
    }
}

pub(crate) fn read(
    cx: &mut Cx,
    mut t: Tbl,
    limits: &[(String, Option<LimitConfig>)],
    weights: &[usize],
) -> Option<RlsConfig> {
    let mut ok = true;
    let listen = match t.get("listen") {
        None => {
            cx.err(
                &t.path.clone(),
                t.span.clone(),
                "missing key \"listen\" (e.g. \"127.0.0.1:8081\")",
            );
            ok = false;
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
                ok = false;
                None
            }
            None => {
                ok = false;
                None
            }
        },
    };
    let tls = t.bool(cx, "tls").unwrap_or(false);
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
    t.finish(cx);
    Some(RlsConfig {
        listen: listen?,
        tls,
        rules,
    })
    .filter(|_| ok)
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
