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
    /// 1-based position among the rules (for names in metrics and messages).
    pub line: usize,
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
            match rule(cx, &format!("{rp}[{i}]"), item, limits, weights, i + 1) {
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

fn rule(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    limits: &[(String, Option<LimitConfig>)],
    weights: &[usize],
    line: usize,
) -> Option<RlsRule> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut ok = true;
    let domain = match t
        .get("domain")
        .map(|d| (d, as_str(cx, &format!("{path}.domain"), d)))
    {
        Some((_, Some(d))) if !d.is_empty() => d.to_string(),
        Some((d, Some(_))) => {
            cx.err(&format!("{path}.domain"), d.span(), "a domain is not empty");
            ok = false;
            String::new()
        }
        Some((_, None)) => {
            ok = false;
            String::new()
        }
        None => {
            cx.err(path, v.span(), "missing key \"domain\"");
            ok = false;
            String::new()
        }
    };
    let mut descriptor = Vec::new();
    match t.get("descriptor") {
        None => {
            cx.err(
                path,
                v.span(),
                "missing key \"descriptor\" (e.g. [{ key = \"remote_address\" }])",
            );
            ok = false;
        }
        Some(dv) => {
            let dp = format!("{path}.descriptor");
            let items = as_array(cx, &dp, dv).unwrap_or_default();
            if items.is_empty() || items.len() > MAX_DESCRIPTOR_ENTRIES {
                cx.err(
                    &dp,
                    dv.span(),
                    format!(
                        "from 1 to {MAX_DESCRIPTOR_ENTRIES} entries ({{ key, value }}), got {}",
                        items.len()
                    ),
                );
                ok = false;
            }
            for (j, e) in items.iter().enumerate() {
                let ep = format!("{dp}[{j}]");
                let Some(mut et) = Tbl::of(cx, ep.clone(), e) else {
                    ok = false;
                    continue;
                };
                let key = match et.get("key") {
                    Some(k) => as_str(cx, &format!("{ep}.key"), k).filter(|k| !k.is_empty()),
                    None => None,
                };
                let Some(key) = key else {
                    cx.err(&ep, e.span(), "needs a non-empty \"key\"");
                    ok = false;
                    et.finish(cx);
                    continue;
                };
                let value = match et.get("value") {
                    Some(val) => {
                        match as_str(cx, &format!("{ep}.value"), val) {
                            Some(s) if !s.is_empty() => Some(s.to_string()),
                            Some(_) => {
                                cx.err(&format!("{ep}.value"), val.span(), "an empty value matches nothing: leave \"value\" out to match any");
                                ok = false;
                                None
                            }
                            None => {
                                ok = false;
                                None
                            }
                        }
                    }
                    None => None,
                };
                et.finish(cx);
                descriptor.push((key.to_string(), value));
            }
        }
    }
    let mut names = Vec::new();
    let deny = t.bool(cx, "deny").unwrap_or(false);
    match t.get("limits") {
        None if deny => {}
        None => {
            cx.err(
                path,
                v.span(),
                "missing key \"limits\" (the limits a matching descriptor meets; [] for none, deny = true to refuse every one)",
            );
            ok = false;
        }
        Some(lv) => {
            let lp = format!("{path}.limits");
            let items = as_str_list(cx, &lp, lv, false).unwrap_or_default();
            if deny && !items.is_empty() {
                cx.err(
                    &lp,
                    lv.span(),
                    "deny = true refuses every matching descriptor: its limits would never count",
                );
                ok = false;
            }
            for (ip, name, span) in items {
                match limits.iter().find(|(n, _)| n == name) {
                    None => {
                        cx.err(&ip, span, format!("unknown limit \"{name}\""));
                        ok = false;
                    }
                    Some((_, Some(l))) => {
                        let keyed = l
                            .key
                            .iter()
                            .all(|k| matches!(k, KeySource::Descriptor | KeySource::Global));
                        if !keyed {
                            cx.err(
                                &ip,
                                span,
                                format!("limit \"{name}\" is keyed by {}: a rule's limits are keyed by \"descriptor\" (the matched entries' values) or \"global\"", l.key.iter().map(KeySource::describe).collect::<Vec<_>>().join(" + ")),
                            );
                            ok = false;
                        } else if l.algorithm == tollgate_limit::AlgorithmKind::Concurrency {
                            cx.err(&ip, span, format!("limit \"{name}\" counts requests in flight: the rate limit service never learns when a request ends"));
                            ok = false;
                        } else if names.contains(&name.to_string()) {
                            cx.err(&ip, span, format!("limit \"{name}\" is listed twice"));
                            ok = false;
                        } else {
                            names.push(name.to_string());
                        }
                    }
                    // The limit itself was in error: already said.
                    Some((_, None)) => ok = false,
                }
            }
            // A plan limit counts once per plan it has a variant for, as on a route.
            let count: usize = names
                .iter()
                .filter_map(|n| limits.iter().position(|(l, _)| l == n))
                .map(|i| weights.get(i).copied().unwrap_or(1))
                .sum();
            if count > crate::MAX_LIMITS_PER_ROUTE {
                cx.err(
                    &lp,
                    lv.span(),
                    format!(
                        "at most {} limits per rule (a plan limit counts once per plan), got {count}",
                        crate::MAX_LIMITS_PER_ROUTE
                    ),
                );
                ok = false;
            }
        }
    }
    t.finish(cx);
    ok.then_some(RlsRule {
        domain,
        descriptor,
        limits: names,
        deny,
        line,
    })
}
