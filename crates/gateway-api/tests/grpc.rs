//! GRPCRoutes: a gRPC call is `POST /SERVICE/METHOD` over HTTP/2, so each method match is a
//! path (service and method exactly; a service alone, its methods; a method alone, any
//! service's) and the backends speak HTTP/2; modelled on the project's basic-grpc example.

mod common;

use common::*;
use tollgate_gateway_api::translate::translate;

const ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: grpc, namespace: default}
spec:
  gatewayClassName: tollgate
  listeners:
  - {name: h2c, protocol: HTTP, port: 50051}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: users, namespace: default}
spec:
  parentRefs: [{name: grpc}]
  hostnames: [grpc.example.com]
  rules:
  - matches:
    - method: {service: com.example.User, method: Login}
    backendRefs: [{name: users, port: 50051}]
  - matches:
    - headers: [{type: Exact, name: magic, value: foo}]
      method: {service: com.example.Things, method: DoThing}
    - method: {service: com.example.Admin}
    - method: {method: Health}
    backendRefs: [{name: things, port: 50051}]
"#;

#[test]
fn each_method_match_is_a_path_and_the_backends_speak_http2() {
    let c = Cluster::of(ROUTES);
    let out = translate(&c.input(), &[]);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let cfg = loads(&out);
    let paths: Vec<(&str, bool)> = cfg
        .routes
        .iter()
        .map(|r| (r.path.as_str(), r.matches.is_some()))
        .collect();
    assert!(
        paths.contains(&("/com.example.User/Login", false)),
        "{paths:?}"
    );
    assert!(
        paths.contains(&("/com.example.Things/DoThing", true)),
        "{paths:?}"
    );
    // A service alone: its methods, whole segments.
    assert!(paths.contains(&("/com.example.Admin", false)), "{paths:?}");
    assert!(paths.contains(&("/com.example.Admin/", false)), "{paths:?}");
    assert!(paths.iter().any(|(p, _)| p.contains("Health")), "{paths:?}");
    assert!(
        cfg.upstreams.iter().all(|u| u.h2),
        "every gRPC backend speaks HTTP/2"
    );
    let st = out
        .statuses
        .iter()
        .find(|s| s.kind == "GRPCRoute")
        .expect("status");
    assert_eq!(st.status["parents"][0]["conditions"][0]["status"], "True");
    assert!(out.routes.contains("GRPCRoute default/users"));
}

#[test]
fn a_listener_that_takes_only_httproutes_refuses_a_grpcroute() {
    let text = ROUTES.replace(
        "{name: h2c, protocol: HTTP, port: 50051}",
        "{name: h2c, protocol: HTTP, port: 50051, allowedRoutes: {kinds: [{kind: HTTPRoute}]}}",
    );
    let c = Cluster::of(&text);
    let out = translate(&c.input(), &[]);
    assert!(out.table.get("routes").is_none());
    let st = out
        .statuses
        .iter()
        .find(|s| s.kind == "GRPCRoute")
        .expect("status");
    let cond = &st.status["parents"][0]["conditions"][0];
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("NotAllowedByListeners"))
    );
}
