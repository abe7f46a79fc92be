//! RateLimitPolicies: each `limits` entry a `[limits.NAME]` table (named
//! `policy:NAMESPACE/POLICY/NAME`), added to every route its targets reach, where it applies
//! with the route's other limits: every limit applies and the strictest decides, so a
//! Gateway's limit and a stricter one on an HTTPRoute both hold. `buckets: PerRoute` gives
//! each route its own copy (`.../NAME@ROUTE`), as Envoy Gateway counts. An Ingress target
//! reaches the Ingress's routes (said back as their limits, for the Ingresses' part).
//! Status: one ancestor per Gateway (or Ingress) reached, as PolicyAncestorStatus says.

use crate::conditions::condition;
use crate::rules::Emitted;
use crate::types::policy::{Buckets, PolicyTargetRef, RateLimitPolicy};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
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
        (crate::input::GROUP, kind @ ("HTTPRoute" | "GRPCRoute")) => {
            e.origin.kind == kind
                && e.origin.route == id
                && t.section_name
                    .as_deref()
                    .is_none_or(|s| e.origin.rule.as_deref() == Some(s))
        }
        _ => false,
    }
}

/// Whether `route` (a name of the Ingresses' part) is one of the Ingress `ns/name`'s.
fn of_ingress(route: &str, ns: &str, name: &str) -> bool {
    let id = tollgate_ingress::ingress_id(ns, name);
    route
        .strip_prefix(&id)
        .and_then(|r| r.strip_prefix('.'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn add_limit(list: &mut Value, name: &str) {
    if let Value::Array(a) = list {
        if !a.iter().any(|x| x.as_str() == Some(name)) {
            a.push(Value::String(name.to_string()));
        }
    }
}

/// What the policies leave: their limits, the Ingress routes' added limits, and statuses.
#[derive(Default)]
pub struct Attached {
    pub limits: Table,
    /// An Ingress route's name and the policies' limits it gets.
    pub ingress_limits: BTreeMap<String, Vec<String>>,
    /// (namespace, name, status).
    pub statuses: Vec<(String, String, Json)>,
}

struct One<'a> {
    ns: &'a str,
    name: &'a str,
    policy: &'a RateLimitPolicy,
}

impl One<'_> {
    fn limit_name(&self, limit: &str, route: Option<&str>) -> String {
        match route {
            Some(r) => format!("policy:{}/{}/{limit}@{r}", self.ns, self.name),
            None => format!("policy:{}/{}/{limit}", self.ns, self.name),
        }
    }

    /// The policy's limits on one route (shared, or the route's own copy), defined in `out`.
    /// A Gateway API match is one route however many Tollgate routes it makes (a PathPrefix
    /// is two: `/api` and `/api/...`, the last `/PIECE` of their names): one copy for all.
    fn on(&self, route: &str, out: &mut Table) -> Vec<String> {
        let per_route = self.policy.spec.buckets == Some(Buckets::PerRoute);
        let route = match route.strip_prefix("gateway:").and(route.rsplit_once('/')) {
            Some((matched, piece)) if piece.bytes().all(|b| b.is_ascii_digit()) => matched,
            _ => route,
        };
        let mut names = Vec::new();
        for (l, def) in &self.policy.spec.limits {
            let n = self.limit_name(l, per_route.then_some(route));
            if let Some(v) = toml_of(def) {
                out.entry(n.clone()).or_insert(v);
            }
            names.push(n);
        }
        names
    }
}

/// The policies' limits on the routes they reach.
pub fn attach(
    policies: &[&RateLimitPolicy],
    controller: &str,
    ingress_routes: &[&str],
    emitted: &mut [Emitted],
) -> Attached {
    let mut out = Attached::default();
    let mut ps: Vec<&RateLimitPolicy> = policies.to_vec();
    ps.sort_by_key(|p| crate::input::age_key(&p.metadata));
    for p in ps {
        let one = One {
            ns: p.metadata.namespace.as_deref().unwrap_or(""),
            name: p.metadata.name.as_deref().unwrap_or(""),
            policy: p,
        };
        let mut ancestors: Vec<Json> = Vec::new();
        for t in &p.spec.target_refs {
            for a in target(&one, t, controller, ingress_routes, emitted, &mut out) {
                if !ancestors.contains(&a) {
                    ancestors.push(a);
                }
            }
        }
        out.statuses.push((
            one.ns.to_string(),
            one.name.to_string(),
            json!({"ancestors": ancestors}),
        ));
    }
    out
}

/// The policy's limits on the routes of Ingress `name` (in its namespace); `false` when
/// that Ingress serves none.
fn on_ingress(one: &One, name: &str, ingress_routes: &[&str], out: &mut Attached) -> bool {
    let routes: Vec<&str> = ingress_routes
        .iter()
        .copied()
        .filter(|r| of_ingress(r, one.ns, name))
        .collect();
    for r in &routes {
        let names = one.on(r, &mut out.limits);
        let list = out.ingress_limits.entry(r.to_string()).or_default();
        for n in names {
            if !list.contains(&n) {
                list.push(n);
            }
        }
    }
    !routes.is_empty()
}

/// One target: its limits placed, and its ancestors' statuses.
fn target(
    one: &One,
    t: &PolicyTargetRef,
    controller: &str,
    ingress_routes: &[&str],
    emitted: &mut [Emitted],
    out: &mut Attached,
) -> Vec<Json> {
    let generation = one.policy.metadata.generation;
    let entry = |group: &str, kind: &str, name: &str, ok: bool, reason: &str, msg: &str| {
        json!({
            "ancestorRef": {"group": group, "kind": kind, "name": name, "namespace": one.ns},
            "controllerName": controller,
            "conditions": [condition("Accepted", ok, reason, msg, generation)],
        })
    };
    if (t.group.as_str(), t.kind.as_str()) == ("networking.k8s.io", "Ingress") {
        return vec![if on_ingress(one, &t.name, ingress_routes, out) {
            entry(
                &t.group,
                "Ingress",
                &t.name,
                true,
                "Accepted",
                "the limits apply",
            )
        } else {
            let msg = format!(
                "Ingress {}/{} serves no route of Tollgate's",
                one.ns, t.name
            );
            entry(&t.group, "Ingress", &t.name, false, "TargetNotFound", &msg)
        }];
    }
    let mut gateways: Vec<String> = Vec::new();
    for e in emitted.iter_mut().filter(|e| reaches(t, one.ns, e)) {
        let route = e
            .table
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let names = one.on(&route, &mut out.limits);
        let list = e
            .table
            .entry("limits")
            .or_insert_with(|| Value::Array(Vec::new()));
        for n in &names {
            add_limit(list, n);
        }
        if !gateways.contains(&e.origin.gateway) {
            gateways.push(e.origin.gateway.clone());
        }
    }
    if gateways.is_empty() {
        let (reason, msg) = match (t.group.as_str(), t.kind.as_str()) {
            (crate::input::GROUP, "Gateway" | "HTTPRoute") => (
                "TargetNotFound",
                format!(
                    "{} {}/{} serves no route of Tollgate's",
                    t.kind, one.ns, t.name
                ),
            ),
            _ => (
                "Invalid",
                format!(
                    "{}/{}: a policy targets a Gateway, an HTTPRoute or an Ingress",
                    t.group, t.kind
                ),
            ),
        };
        return vec![entry(&t.group, &t.kind, &t.name, false, reason, &msg)];
    }
    gateways
        .into_iter()
        .map(|g| {
            let (gns, gname) = g.split_once('/').unwrap_or(("", &g));
            json!({
                "ancestorRef": {"group": crate::input::GROUP, "kind": "Gateway", "name": gname, "namespace": gns},
                "controllerName": controller,
                "conditions": [condition("Accepted", true, "Accepted", "the limits apply", generation)],
            })
        })
        .collect()
}
