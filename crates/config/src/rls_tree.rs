//! `[[rls.domains]]`: envoyproxy/ratelimit's configuration as that service reads it, one
//! domain each, its descriptor tree kept as a tree (`descriptors` within `descriptors`), each
//! node's `rate_limit` with the service's own keys. `tollgate import-envoy-ratelimit` writes it;
//! a hand-written one is held to the service's loader: every check of `loadDescriptors` and
//! `loadConfig`, with the service's words, at the key path and line.
//!
//! How nodes count, as `[rls] algorithm` says:
//! - `counting_window` (the default, the service's own counting): one counter per unit for
//!   every domain (`rls:SECOND` .. `rls:YEAR`), keyed by the domain and the descriptor's
//!   entries, as the service's Redis key is; each node compares the count with its own
//!   `requests_per_unit`, so a descriptor's `limit` override and the config's limit of the same
//!   unit count together, as in the service.
//! - any other algorithm: each counting node is a limit of its own (`rls:DOMAIN.KEY_VALUE`),
//!   of `requests_per_unit` per unit.
//!
//! Both with `[rls] scope` (global with `[redis]`) and `[rls] on_error` (default `fail`: the
//! call fails, and Envoy's `failure_mode_deny` decides).

use crate::model::LimitConfig;
use crate::model::*;
use crate::reader::{as_array, as_bool, as_int_in, as_str, join, Cx, Tbl, Value};
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Rate};
use toml::de::DeValue;

/// A node's deepest nesting (the service's trees are a few levels deep; a bound keeps a
/// hostile file from recursing without end).
pub const MAX_DEPTH: usize = 32;

/// What the tree's limits are made of (`[rls]`'s keys for them).
#[derive(Clone, Copy)]
pub(crate) struct TreeLimits {
    pub algorithm: AlgorithmKind,
    pub scope: Scope,
    pub on_error: OnError,
}

/// `domains = [...]`: each domain once, each read as the service reads its file. The limits the
/// nodes count with are pushed onto `made`.
pub(crate) fn read(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    how: &TreeLimits,
    made: &mut Vec<LimitConfig>,
) -> Option<Vec<RlsDomain>> {
    let items = as_array(cx, path, v)?;
    let mut ok = true;
    let mut out: Vec<RlsDomain> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let Some(mut t) = Tbl::of(cx, p.clone(), item) else {
            ok = false;
            continue;
        };
        let domain = match t.get("domain") {
            None => None,
            Some(d) => as_str(cx, &t.key_path("domain"), d).map(str::to_string),
        };
        let domain = match domain {
            Some(d) if !d.is_empty() => d,
            _ => {
                cx.err(
                    &t.key_path("domain"),
                    item.span(),
                    "config file cannot have empty domain",
                );
                t.finish(cx);
                ok = false;
                continue;
            }
        };
        if out.iter().any(|d| d.domain == domain) {
            cx.err(
                &t.key_path("domain"),
                item.span(),
                format!("duplicate domain '{domain}' in config file"),
            );
            ok = false;
        }
        let descriptors = match t.get("descriptors") {
            None => Some(Vec::new()),
            Some(dv) => nodes(
                cx,
                &t.key_path("descriptors"),
                dv,
                &format!("{domain}."),
                &domain,
                how,
                made,
                0,
            ),
        };
        t.finish(cx);
        match descriptors {
            Some(descriptors) => out.push(RlsDomain {
                domain,
                descriptors,
            }),
            None => ok = false,
        }
    }
    if !out.is_empty() {
        // The service's counters, one per unit: what counting_window nodes and every
        // descriptor's `limit` override (Envoy's route config naming requests per unit) count
        // with, each against its own number.
        for unit in EnvoyUnit::ALL {
            let l = EnvoyLimit {
                requests_per_unit: u32::MAX,
                unit: Some(unit),
                unlimited: false,
                name: String::new(),
                replaces: Vec::new(),
                limit: None,
            };
            let counting = TreeLimits {
                algorithm: AlgorithmKind::CountingWindow,
                ..*how
            };
            made.push(limit_of(&counter(unit), &l, false, &counting));
        }
    }
    ok.then_some(out)
}

/// The name of the counter of `unit`'s windows: a limit of `u32::MAX` per window that only
/// counts (each node, or override, compares the count with its own number).
pub fn counter(unit: EnvoyUnit) -> String {
    format!("rls:{}", unit.name())
}

/// The nodes of one level (`parent`: the full key above them, `DOMAIN.` at the top).
#[allow(clippy::too_many_arguments)]
fn nodes(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    parent: &str,
    domain: &str,
    how: &TreeLimits,
    made: &mut Vec<LimitConfig>,
    depth: usize,
) -> Option<Vec<RlsNode>> {
    if depth >= MAX_DEPTH {
        cx.err(
            path,
            v.span(),
            format!("descriptors nest at most {MAX_DEPTH} deep"),
        );
        return None;
    }
    let items = as_array(cx, path, v)?;
    let mut ok = true;
    let mut out: Vec<RlsNode> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        match node(cx, &p, item, parent, domain, how, made, depth) {
            Some(n) => {
                let fk = n.final_key();
                if out.iter().any(|o| o.final_key() == fk) {
                    cx.err(
                        &p,
                        item.span(),
                        format!("duplicate descriptor composite key '{parent}{fk}'"),
                    );
                    ok = false;
                }
                out.push(n);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// A node's `metadata`: `Some(None)` when absent, None (and the error) when not a table.
fn metadata(cx: &mut Cx, t: &mut Tbl) -> Option<Option<serde_json::Value>> {
    let Some(m) = t.get("metadata") else {
        return Some(None);
    };
    match crate::values::toml_to_json(m) {
        Some(j @ serde_json::Value::Object(_)) => Some(Some(j)),
        _ => {
            cx.err(
                &t.key_path("metadata"),
                m.span(),
                "error parsing metadata: a table of values",
            );
            None
        }
    }
}

/// A node's `rate_limit`, named for the limit that counts it: the unit's shared counter, or
/// a limit made for this node (`made`) when the algorithm is not envoyproxy/ratelimit's.
fn node_limit(
    cx: &mut Cx,
    t: &mut Tbl,
    full_key: &str,
    how: &TreeLimits,
    made: &mut Vec<LimitConfig>,
    ok: &mut bool,
) -> Option<EnvoyLimit> {
    let rv = t.get("rate_limit")?;
    let Some(mut l) = rate_limit(cx, &t.key_path("rate_limit"), rv) else {
        *ok = false;
        return None;
    };
    if !l.unlimited {
        // (Shadow mode is the node's: answered OK over the limit, with the limit's numbers;
        // the limit itself decides as any other.)
        let name = match (how.algorithm, l.unit) {
            (AlgorithmKind::CountingWindow, Some(u)) => counter(u),
            _ => {
                let name = format!("rls:{full_key}");
                made.push(limit_of(&name, &l, false, how));
                name
            }
        };
        l.limit = Some(name);
    }
    Some(l)
}

#[allow(clippy::too_many_arguments)]
fn node(
    cx: &mut Cx,
    p: &str,
    item: &Value,
    parent: &str,
    domain: &str,
    how: &TreeLimits,
    made: &mut Vec<LimitConfig>,
    depth: usize,
) -> Option<RlsNode> {
    let mut t = Tbl::of(cx, p.to_string(), item)?;
    let text = |cx: &mut Cx, t: &mut Tbl, k: &str| -> Option<String> {
        match t.get(k) {
            None => Some(String::new()),
            Some(v) => scalar_text(cx, &t.key_path(k), v),
        }
    };
    let key = text(cx, &mut t, "key");
    let value = text(cx, &mut t, "value");
    let flag = |cx: &mut Cx, t: &mut Tbl, k: &str| t.bool(cx, k).unwrap_or(false);
    let shadow_mode = flag(cx, &mut t, "shadow_mode");
    let quota_mode = flag(cx, &mut t, "quota_mode");
    let detailed_metric = flag(cx, &mut t, "detailed_metric");
    let value_to_metric = flag(cx, &mut t, "value_to_metric");
    let share_threshold = flag(cx, &mut t, "share_threshold");
    let metadata = metadata(cx, &mut t);
    let (key, value) = (key?, value?);
    if key.is_empty() {
        cx.err(&t.key_path("key"), item.span(), "descriptor has empty key");
        t.finish(cx);
        return None;
    }
    let final_key = if value.is_empty() {
        key.clone()
    } else {
        format!("{key}_{value}")
    };
    let full_key = format!("{parent}{final_key}");
    let mut ok = metadata.is_some();
    let rate_limit = node_limit(cx, &mut t, &full_key, how, made, &mut ok);
    if share_threshold && !final_key.contains('*') {
        cx.err(
            &t.key_path("share_threshold"),
            item.span(),
            format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"),
        );
        ok = false;
    }
    let descriptors = match t.get("descriptors") {
        None => Some(Vec::new()),
        Some(dv) => nodes(
            cx,
            &t.key_path("descriptors"),
            dv,
            &format!("{full_key}."),
            domain,
            how,
            made,
            depth + 1,
        ),
    };
    t.finish(cx);
    let descriptors = descriptors?;
    ok.then_some(RlsNode {
        key,
        value,
        rate_limit,
        shadow_mode,
        quota_mode,
        detailed_metric,
        value_to_metric,
        share_threshold,
        metadata: metadata.flatten(),
        descriptors,
    })
}

/// A string, or a number or boolean written as text (the service's YAML reads `value: 123` as
/// the string "123").
fn scalar_text(cx: &mut Cx, path: &str, v: &Value) -> Option<String> {
    match v.get_ref() {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => Some(i.to_string()),
        DeValue::Boolean(b) => Some(b.to_string()),
        _ => {
            as_str(cx, path, v);
            None
        }
    }
}

/// `rate_limit = { requests_per_unit, unit, unlimited, name, replaces = [{ name }] }`.
fn rate_limit(cx: &mut Cx, path: &str, v: &Value) -> Option<EnvoyLimit> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut ok = true;
    let requests_per_unit = match t.get("requests_per_unit") {
        None => 0,
        Some(n) => match as_int_in(cx, &t.key_path("requests_per_unit"), n, 0, u32::MAX as i64) {
            Some(n) => n as u32,
            None => {
                ok = false;
                0
            }
        },
    };
    let unlimited = match t.get("unlimited") {
        None => false,
        Some(b) => as_bool(cx, &t.key_path("unlimited"), b).unwrap_or_else(|| {
            ok = false;
            false
        }),
    };
    let unit_text = match t.get("unit") {
        None => Some(String::new()),
        Some(u) => as_str(cx, &t.key_path("unit"), u).map(str::to_string),
    };
    let unit = unit_text.as_deref().and_then(EnvoyUnit::parse);
    match (&unit_text, unlimited, unit) {
        (None, _, _) => ok = false,
        (Some(_), true, Some(_)) => {
            cx.err(
                &t.key_path("unit"),
                v.span(),
                "should not specify rate limit unit when unlimited",
            );
            ok = false;
        }
        (Some(u), false, None) => {
            cx.err(
                &t.key_path("unit"),
                v.span(),
                format!("invalid rate limit unit '{u}'"),
            );
            ok = false;
        }
        _ => {}
    }
    let name = match t.get("name") {
        None => String::new(),
        Some(n) => match as_str(cx, &t.key_path("name"), n) {
            Some(s) => s.to_string(),
            None => {
                ok = false;
                String::new()
            }
        },
    };
    let mut replaces = Vec::new();
    if let Some(rv) = t.get("replaces") {
        let rp = t.key_path("replaces");
        for (i, r) in as_array(cx, &rp, rv).unwrap_or_default().iter().enumerate() {
            let ip = format!("{rp}[{i}]");
            let Some(mut rt) = Tbl::of(cx, ip.clone(), r) else {
                ok = false;
                continue;
            };
            let n = match rt.get("name") {
                None => Some(String::new()),
                Some(n) => as_str(cx, &join(&ip, "name"), n).map(str::to_string),
            };
            rt.finish(cx);
            match n {
                Some(n) if n.is_empty() => {
                    cx.err(&ip, r.span(), "should not have an empty replaces entry");
                    ok = false;
                }
                Some(n) if n == name => {
                    cx.err(
                        &ip,
                        r.span(),
                        "replaces should not contain name of same descriptor",
                    );
                    ok = false;
                }
                Some(n) => replaces.push(n),
                None => ok = false,
            }
        }
    }
    t.finish(cx);
    ok.then_some(EnvoyLimit {
        requests_per_unit,
        unit: if unlimited { None } else { unit },
        unlimited,
        name,
        replaces,
        limit: None,
    })
}

/// The limit a counting node decides with: `requests_per_unit` per window of its unit's span.
fn limit_of(name: &str, l: &EnvoyLimit, shadow: bool, how: &TreeLimits) -> LimitConfig {
    let secs = l.unit.map_or(1, EnvoyUnit::seconds);
    let n = u64::from(l.requests_per_unit);
    // (A count of 0 is a counting window's own: every counted hit is over. Other algorithms
    // keep one unit per window there, and the service's tree answers 0 as over anyway.)
    let burst = match how.algorithm {
        AlgorithmKind::CountingWindow => n,
        _ => n.max(1),
    };
    LimitConfig {
        name: name.to_string(),
        key: vec![KeySource::Descriptor],
        algorithm: how.algorithm,
        rate: Rate::new(n.max(1), Duration::from_secs(secs))
            .unwrap_or_else(|_| unreachable!("a count and a span of at least 1")),
        burst,
        delay: 0,
        scope: how.scope,
        on_error: how.on_error,
        lease_max: None,
        slot_timeout: None,
        shadow,
        max_keys: tollgate_limit::DEFAULT_MAX_KEYS,
        calendar: None,
        upgrade_url: None,
        overage: Overage::Hard,
        plan: None,
        retry_after_jitter: Duration::ZERO,
        action: Action::Reject,
        tarpit: None,
        challenge_url: None,
        block: Vec::new(),
        count_failures: None,
    }
}
