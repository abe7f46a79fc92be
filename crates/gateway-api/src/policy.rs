//! RateLimitPolicies: each `limits` entry a `[limits.NAME]` table (named
//! `policy:NAMESPACE/POLICY/NAME`), added to every route its targets reach, where it applies
//! with the route's other limits: every limit applies and the strictest decides, so a
//! Gateway's limit and a stricter one on an HTTPRoute both hold. Status: one ancestor per
//! Gateway reached (the Gateway API's PolicyAncestorStatus).

use crate::conditions::condition;
use crate::rules::Emitted;
use crate::types::policy::{PolicyTargetRef, RateLimitPolicy};
use serde_json::{json, Value as Json};
use toml::{Table, Value};

/// A JSON value as TOML (`null` left out).
fn toml_of(v: &Json) -> Option<Value> {
    Some(match v {
        Json::Null => return None,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Float(n.as_f64()?),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().filter_map(toml_of).collect()),
        Json::Object(o) => Value::Table(
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), toml_of(v)?)))
                .collect(),
        ),
    })
}

/// Whether a route came in through `target` (of a policy in `ns`).
fn reaches(t: &PolicyTargetRef, ns: &str, e: &Emitted) -> bool {
    let id = format!("{ns}/{}", t.name);
    match (t.group.as_str(), t.kind.as_str()) {
        (crate::input::GROUP, "Gateway") => {
            e.origin.gateway == id
                && t.section_name
                    .as_deref()
                    .is_none_or(|s| s == e.origin.listener)
        }
        (crate::input::GROUP, "HTTPRoute") => {
            e.origin.route == id
                && t.section_name
                    .as_deref()
                    .is_none_or(|s| e.origin.rule.as_deref() == Some(s))
        }
        _ => false,
    }
}

/// The policies' limits into `limits`, named on the routes they reach; their statuses.
pub fn attach(
    policies: &[&RateLimitPolicy],
    controller: &str,
    emitted: &mut [Emitted],
    limits: &mut Table,
) -> Vec<(String, String, Json)> {
    let mut statuses = Vec::new();
    let mut ps: Vec<&RateLimitPolicy> = policies.to_vec();
    ps.sort_by_key(|p| crate::input::age_key(&p.metadata));
    for p in ps {
        let ns = p.metadata.namespace.as_deref().unwrap_or("");
        let name = p.metadata.name.as_deref().unwrap_or("");
        let generation = p.metadata.generation;
        let names: Vec<String> = p
            .spec
            .limits
            .keys()
            .map(|l| format!("policy:{ns}/{name}/{l}"))
            .collect();
        for (l, def) in &p.spec.limits {
            if let Some(v) = toml_of(def) {
                limits.insert(format!("policy:{ns}/{name}/{l}"), v);
            }
        }
        let mut ancestors: Vec<Json> = Vec::new();
        for t in &p.spec.target_refs {
            let mut gateways: Vec<String> = Vec::new();
            for e in emitted.iter_mut().filter(|e| reaches(t, ns, e)) {
                let list = e
                    .table
                    .entry("limits")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = list {
                    for n in &names {
                        if !a.iter().any(|x| x.as_str() == Some(n)) {
                            a.push(Value::String(n.clone()));
                        }
                    }
                }
                if !gateways.contains(&e.origin.gateway) {
                    gateways.push(e.origin.gateway.clone());
                }
            }
            if gateways.is_empty() {
                let (kind, reason, msg) = match (t.group.as_str(), t.kind.as_str()) {
                    (crate::input::GROUP, "Gateway" | "HTTPRoute") => (
                        t.kind.as_str(),
                        "TargetNotFound",
                        format!("{} {ns}/{} serves no route of Tollgate's", t.kind, t.name),
                    ),
                    _ => (
                        t.kind.as_str(),
                        "Invalid",
                        format!(
                            "{}/{}: a policy targets a Gateway or an HTTPRoute",
                            t.group, t.kind
                        ),
                    ),
                };
                ancestors.push(json!({
                    "ancestorRef": {"group": t.group, "kind": kind, "name": t.name, "namespace": ns},
                    "controllerName": controller,
                    "conditions": [condition("Accepted", false, reason, &msg, generation)],
                }));
                continue;
            }
            for g in gateways {
                let (gns, gname) = g.split_once('/').unwrap_or(("", &g));
                let entry = json!({
                    "ancestorRef": {"group": crate::input::GROUP, "kind": "Gateway", "name": gname, "namespace": gns},
                    "controllerName": controller,
                    "conditions": [condition("Accepted", true, "Accepted", "the limits apply", generation)],
                });
                if !ancestors.contains(&entry) {
                    ancestors.push(entry);
                }
            }
        }
        statuses.push((
            ns.to_string(),
            name.to_string(),
            json!({"ancestors": ancestors}),
        ));
    }
    statuses
}
