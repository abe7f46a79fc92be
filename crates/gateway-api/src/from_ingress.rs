//! `tollgate import-ingress-limits`: the rate limits of ingress-nginx Ingresses as
//! RateLimitPolicies, attached to the HTTPRoutes (and GRPCRoutes) that ingress2gateway 1.0
//! writes from the same Ingresses. ingress2gateway converts routing, not limits (its
//! ingress-nginx provider reads no `limit-*` annotation); with these policies the converted
//! routes admit and refuse what the Ingresses did.
//!
//! Each limit is the one `tollgate import-ingress` and the controller make of the Ingress's
//! annotations (same algorithm, rate, burst, key, scope), counted once for all the Ingress's
//! routes (`buckets: Shared`), as ingress-nginx's zone is the Ingress's. The routes are named
//! as ingress2gateway names them: one per namespace, class and host, `INGRESS-HOST` (the host's
//! other characters as `-`, `all-hosts` for none) after the first Ingress of that host.
//! What a policy cannot say is a warning, and never a limit dropped quietly.

use serde_json::{json, Value as Json};
use std::collections::BTreeMap;

/// The policies, as YAML documents, and what could not be carried over.
#[derive(Debug, Default)]
pub struct Converted {
    pub yaml: String,
    pub policies: usize,
    pub warnings: Vec<String>,
}

const ANN: &str = "nginx.ingress.kubernetes.io/";
const LIMITS: &[&str] = &[
    "limit-rps",
    "limit-rpm",
    "limit-connections",
    "limit-burst-multiplier",
    "limit-whitelist",
    "limit-allowlist",
];

/// ingress2gateway's `NameFromHost`: runs of other characters as `-`, none leading.
pub fn name_from_host(host: &str) -> String {
    if host.is_empty() || host == "*" {
        return "all-hosts".into();
    }
    let mut out = String::new();
    let mut dash = false;
    for c in host.chars() {
        if c.is_ascii_alphanumeric() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c);
        } else {
            dash = true;
        }
    }
    if dash && !out.is_empty() {
        out.push('-');
    }
    out
}

/// Every object of a YAML stream (documents, and the items of a `kind: List`).
fn objects(yaml: &str) -> Result<Vec<Json>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v: Json = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        match v.get("kind").and_then(Json::as_str) {
            Some("List") => out.extend(v["items"].as_array().cloned().unwrap_or_default()),
            Some(_) => out.push(v),
            None => {}
        }
    }
    Ok(out)
}

fn str_at<'a>(v: &'a Json, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Json::as_str)
}

fn class_of(i: &Json) -> Option<&str> {
    str_at(i, "/spec/ingressClassName")
        .or_else(|| str_at(i, "/metadata/annotations/kubernetes.io~1ingress.class"))
}

fn ann<'a>(i: &'a Json, key: &str) -> Option<&'a str> {
    i.pointer("/metadata/annotations")
        .and_then(|a| a.get(format!("{ANN}{key}")))
        .and_then(Json::as_str)
}

fn id(i: &Json) -> (String, String) {
    let ns = str_at(i, "/metadata/namespace").unwrap_or("default");
    (
        ns.to_string(),
        str_at(i, "/metadata/name").unwrap_or("").to_string(),
    )
}

/// The route ingress2gateway writes for each (namespace, host): its kind and name, and the
/// Ingresses whose rules it holds.
type Groups = BTreeMap<(String, String), (&'static str, String, Vec<String>)>;

fn groups(ingresses: &[&Json], class: &str) -> Groups {
    let mut g = Groups::new();
    for i in ingresses {
        let (ns, name) = id(i);
        let grpc = ann(i, "backend-protocol")
            .is_some_and(|p| matches!(p.to_ascii_uppercase().as_str(), "GRPC" | "GRPCS"));
        for rule in i
            .pointer("/spec/rules")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            let host = str_at(rule, "/host").unwrap_or("").to_string();
            let e = g
                .entry((format!("{ns}/{class}"), host.clone()))
                .or_insert_with(|| {
                    let kind = if grpc { "GRPCRoute" } else { "HTTPRoute" };
                    (
                        kind,
                        format!("{name}-{}", name_from_host(&host)),
                        Vec::new(),
                    )
                });
            if !e.2.contains(&name) {
                e.2.push(name.clone());
            }
        }
    }
    g
}

/// The policies for the Ingresses of `yaml` that `opts.ingress_class` selects (and those
/// without a class, as `import-ingress` reads them).
pub fn limit_policies(yaml: &str, opts: &tollgate_ingress::Options) -> Result<Converted, String> {
    let all = objects(yaml)?;
    let ingresses: Vec<&Json> = all
        .iter()
        .filter(|o| str_at(o, "/kind") == Some("Ingress"))
        .filter(|o| class_of(o).is_none_or(|c| c == opts.ingress_class))
        .collect();
    if ingresses.is_empty() {
        return Err(format!(
            "no Ingress of class \"{}\" (or without a class)",
            opts.ingress_class
        ));
    }
    let groups = groups(&ingresses, &opts.ingress_class);
    let mut out = Converted::default();
    let mut docs = Vec::new();
    for i in &ingresses {
        if let Some(p) = policy(i, &groups, opts, &mut out.warnings)? {
            docs.push(p);
        }
    }
    out.policies = docs.len();
    out.yaml = docs
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?
        .join("---\n");
    if !out.yaml.ends_with('\n') {
        out.yaml.push('\n');
    }
    Ok(out)
}

/// One Ingress's policy; `None` when it has no limit.
fn policy(
    i: &Json,
    groups: &Groups,
    opts: &tollgate_ingress::Options,
    warnings: &mut Vec<String>,
) -> Result<Option<Json>, String> {
    let (ns, name) = id(i);
    let who = format!("Ingress {ns}/{name}");
    let has = |k: &str| ann(i, k).is_some();
    // What a policy does not hold, said whether or not the Ingress has limits it does.
    for k in ["limit-rate", "limit-rate-after"] {
        if has(k) {
            warnings.push(format!(
                "{who}: {k}: a bandwidth (bytes per second), not a request limit: a RateLimitPolicy has none, and the converted route is not shaped"
            ));
        }
    }
    let named = i
        .pointer("/metadata/annotations/tollgate.io~1limits")
        .and_then(Json::as_str);
    if !LIMITS.iter().any(|k| has(k)) {
        if let Some(l) = named {
            warnings.push(format!(
                "{who}: tollgate.io/limits \"{l}\" names BASE.toml limits: a policy holds its own limits; copy them into a RateLimitPolicy that targets the converted route"
            ));
        }
        return Ok(None);
    }
    if ann(i, "ssl-passthrough").is_some_and(|v| v.trim() == "true") {
        warnings.push(format!(
            "{who}: ssl-passthrough: ingress2gateway makes it a TLSRoute, whose bytes are not HTTP requests: its limits are not carried"
        ));
        return Ok(None);
    }
    let limits = limits_of(i, opts, &who, warnings)?;
    if limits.is_empty() {
        return Ok(None);
    }
    let mut targets = Vec::new();
    for ((gns, _), (kind, route, holders)) in groups {
        if !gns.starts_with(&format!("{ns}/")) || !holders.contains(&name) {
            continue;
        }
        if holders.len() > 1 {
            warnings.push(format!(
                "{who}: {kind} {ns}/{route} also holds the paths of Ingress {}: its limits apply to them too (stricter than before; name the rules and target them with sectionName to narrow it)",
                holders.iter().filter(|h| **h != name).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        targets.push(json!({"group": crate::input::GROUP, "kind": kind, "name": route}));
    }
    if i.pointer("/spec/defaultBackend").is_some() {
        warnings.push(format!(
            "{who}: its defaultBackend becomes the Gateway's default route in ingress2gateway: that route is not limited"
        ));
    }
    if targets.is_empty() {
        warnings.push(format!(
            "{who}: no rule with a host or path: no route to limit"
        ));
        return Ok(None);
    }
    Ok(Some(json!({
        "apiVersion": "tollgate.io/v1alpha1",
        "kind": "RateLimitPolicy",
        "metadata": {
            "name": format!("{name}-limits"),
            "namespace": ns,
            "annotations": {"tollgate.io/converted-from": format!("Ingress {ns}/{name}")},
        },
        "spec": {"targetRefs": targets, "buckets": "Shared", "limits": limits},
    })))
}

/// The Ingress's limits as `import-ingress` makes them, by their short names.
fn limits_of(
    i: &Json,
    opts: &tollgate_ingress::Options,
    who: &str,
    warnings: &mut Vec<String>,
) -> Result<serde_json::Map<String, Json>, String> {
    let (ns, name) = id(i);
    let alone = serde_yaml_ng::to_string(i).map_err(|e| e.to_string())?;
    let one = tollgate_ingress::Options {
        ingress_class: class_of(i).unwrap_or(&opts.ingress_class).to_string(),
        ..opts.clone()
    };
    let imported = tollgate_ingress::import(&alone, &one).map_err(|e| format!("{who}: {e}"))?;
    // What the import said of the limit annotations (a value it could not read, ...).
    let said = |w: &&String| w.contains("limit") && !w.contains("whitelist");
    for w in imported.warnings.iter().filter(said) {
        if !warnings.contains(w) {
            warnings.push(w.clone());
        }
    }
    let table: toml::Table = imported
        .toml
        .parse()
        .map_err(|e| format!("{who}: the import's config: {e}"))?;
    let prefix = format!("{}.", tollgate_ingress::ingress_id(&ns, &name));
    let mut limits = serde_json::Map::new();
    if let Some(toml::Value::Table(ls)) = table.get("limits") {
        for (n, t) in ls {
            if let Some(short) = n.strip_prefix(&prefix) {
                limits.insert(
                    short.to_string(),
                    serde_json::to_value(t).map_err(|e| e.to_string())?,
                );
            }
        }
    }
    let routes = table.get("routes").and_then(toml::Value::as_array);
    for r in routes.into_iter().flatten() {
        let named = r.get("limits").and_then(toml::Value::as_array);
        for l in named.into_iter().flatten().filter_map(toml::Value::as_str) {
            if !l.starts_with(&prefix) {
                let w = format!("{who}: tollgate.io/limits names \"{l}\", a BASE.toml limit: a policy holds its own limits; copy it into this policy's limits");
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
        }
    }
    if ann(i, "limit-whitelist")
        .or(ann(i, "limit-allowlist"))
        .is_some()
    {
        warnings.push(format!(
            "{who}: limit-whitelist: a policy has no exempt addresses: they are limited like every other client after the move"
        ));
    }
    Ok(limits)
}

#[cfg(test)]
mod tests;
