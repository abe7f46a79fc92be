//! RateLimitPolicies translated: a Gateway's and an HTTPRoute's named rule's limits both on
//! the route (the strictest decides at run time), one count shared or one per route, an
//! Ingress target reaching exactly that Ingress's routes, and what a policy cannot reach
//! (another namespace's objects, a kind it cannot target) said in its status.

mod common;

use common::*;
use tollgate_gateway_api::translate::{translate, Output};

const BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: tollgate
  listeners:
  - {name: http, protocol: HTTP, port: 8080, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules:
  - name: login
    matches: [{path: {type: PathPrefix, value: /login}}]
    backendRefs: [{name: web, port: 80}]
  - name: rest
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: other, namespace: tenant}
spec:
  parentRefs: [{name: edge, namespace: shop}]
  hostnames: [tenant.example]
  rules:
  - backendRefs: [{name: app, port: 80}]
"#;

fn run(policies: &str, ingress_routes: &[&str]) -> Output {
    let c = Cluster::of(&format!("{BASE}\n---\n{policies}"));
    let mut input = c.input();
    input.ingress_routes = ingress_routes.to_vec();
    translate(&input, &[])
}

/// The limits on each route, by the route's host and path.
fn limits_by_route(out: &Output) -> Vec<(Option<String>, String, Vec<String>)> {
    let cfg = loads(out);
    cfg.routes
        .iter()
        .map(|r| {
            (
                r.host.clone(),
                r.path.as_str().to_string(),
                r.limits
                    .iter()
                    .map(|&i| cfg.limits[i].name.clone())
                    .collect(),
            )
        })
        .collect()
}

fn ancestor_condition(out: &Output, policy: &str) -> (String, String) {
    let s = out
        .statuses
        .iter()
        .find(|s| s.kind == "RateLimitPolicy" && s.name == policy)
        .expect("policy status");
    let c = &s.status["ancestors"][0]["conditions"][0];
    (
        c["status"].as_str().unwrap_or("").into(),
        c["reason"].as_str().unwrap_or("").into(),
    )
}

#[test]
fn a_gateway_s_limit_and_a_named_rule_s_both_reach_the_rule_and_only_it() {
    let out = run(
        r#"
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: edge-wide, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]
  limits: {per-ip: {key: client_ip, rate: 100/s}}
---
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: login, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: api, sectionName: login}]
  limits: {per-ip: {key: client_ip, rate: 5/m, burst: 5}}
"#,
        &[],
    );
    let wide = "policy:shop/edge-wide/per-ip".to_string();
    let strict = "policy:shop/login/per-ip".to_string();
    for (host, path, limits) in limits_by_route(&out) {
        let want = if path.starts_with("/login") {
            vec![wide.clone(), strict.clone()]
        } else {
            vec![wide.clone()]
        };
        assert_eq!(limits, want, "{host:?} {path}");
    }
    assert_eq!(
        ancestor_condition(&out, "login"),
        ("True".into(), "Accepted".into())
    );
    let s = out
        .statuses
        .iter()
        .find(|s| s.name == "edge-wide")
        .expect("status");
    assert_eq!(s.status["ancestors"][0]["ancestorRef"]["name"], "edge");
    assert_eq!(s.status["ancestors"][0]["controllerName"], CONTROLLER);
}

#[test]
fn per_route_buckets_give_each_route_its_own_count_and_shared_ones_one() {
    let shared = run(
        r#"
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: wide, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]
  limits: {per-ip: {key: client_ip, rate: 10/s}}
"#,
        &[],
    );
    let names: std::collections::BTreeSet<String> = limits_by_route(&shared)
        .into_iter()
        .flat_map(|r| r.2)
        .collect();
    assert_eq!(names.len(), 1);
    let per_route = run(
        r#"
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: wide, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]
  buckets: PerRoute
  limits: {per-ip: {key: client_ip, rate: 10/s}}
"#,
        &[],
    );
    let routes = limits_by_route(&per_route);
    let names: std::collections::BTreeSet<String> =
        routes.iter().flat_map(|r| r.2.clone()).collect();
    assert!(routes.iter().all(|r| r.2.len() == 1));
    // One copy per match: a PathPrefix's two routes (`/p` and `/p/...`) share theirs.
    let matches: std::collections::BTreeSet<(Option<String>, String)> = routes
        .iter()
        .map(|r| (r.0.clone(), r.1.trim_end_matches('/').to_string()))
        .collect();
    assert!(
        matches.len() < routes.len(),
        "a PathPrefix is in the example: {routes:?}"
    );
    assert_eq!(names.len(), matches.len(), "{routes:?}");
}

#[test]
fn a_policy_reaches_only_its_own_namespace_and_its_ingress_s_routes() {
    // A policy in `tenant` naming the Gateway of `shop` reaches nothing: targets are local.
    let out = run(
        r#"
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: grab, namespace: tenant}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]
  limits: {per-ip: {key: client_ip, rate: 1/h}}
---
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: odd, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  limits: {per-ip: {key: client_ip, rate: 1/h}}
---
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: legacy, namespace: shop}
spec:
  targetRefs: [{group: networking.k8s.io, kind: Ingress, name: store}]
  limits: {per-ip: {key: client_ip, rate: 3/m}}
"#,
        // The Ingress shop/store's routes, and shop/store.v2's (a name that starts alike).
        &[
            "shop.store.1",
            "shop.store.2",
            "shop.store.v2.1",
            "tenant.store.1",
        ],
    );
    assert!(
        limits_by_route(&out).iter().all(|r| r.2.is_empty()),
        "{:?}",
        limits_by_route(&out)
    );
    assert_eq!(
        ancestor_condition(&out, "grab"),
        ("False".into(), "TargetNotFound".into())
    );
    assert_eq!(
        ancestor_condition(&out, "odd"),
        ("False".into(), "Invalid".into())
    );
    assert_eq!(
        ancestor_condition(&out, "legacy"),
        ("True".into(), "Accepted".into())
    );
    let reached: Vec<&str> = out.ingress_limits.keys().map(String::as_str).collect();
    assert_eq!(reached, ["shop.store.1", "shop.store.2"]);
    assert_eq!(
        out.ingress_limits["shop.store.1"],
        ["policy:shop/legacy/per-ip"]
    );
}
