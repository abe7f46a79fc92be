//! A rule's `retry` (GEP-1731) as an upstream of its own: the Service port's, with the
//! rule's codes, attempts and backoff, the same pod again, and every attempt funded.

mod common;

use common::*;
use tollgate_config::model::{RetryTargets, RouteAction};
use tollgate_gateway_api::translate::translate;

const OBJECTS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: tollgate
  listeners: [{name: http, protocol: HTTP, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /a}}]
    retry: {codes: [500, 503, 600], attempts: 3, backoff: 100ms}
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /b}}]
    retry: {attempts: 40}
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /c}}]
    backendRefs: [{name: web, port: 80}]
"#;

#[test]
fn a_rules_retry_is_an_upstream_of_its_own() {
    let c = Cluster::of(OBJECTS);
    let out = translate(&c.input(), &[]);
    let cfg = loads(&out);
    let upstream_of = |prefix: &str| {
        let r = cfg
            .routes
            .iter()
            .find(|r| format!("{:?}", r.path).contains(&format!("\"{prefix}/\"")))
            .unwrap_or_else(|| panic!("{prefix}: {:?}", cfg.routes));
        let RouteAction::Upstream(u) = &r.action else {
            panic!("{prefix}: {:?}", r.action)
        };
        cfg.upstreams[*u].clone()
    };
    let a = upstream_of("/a");
    let r = a.retry.expect("retry");
    assert_eq!((r.attempts, r.budget), (3, 3.0));
    assert!(r.on.status(500) && r.on.status(503) && !r.on.status(502));
    assert!(r.on.reset && r.on.timeout);
    assert_eq!(r.targets, RetryTargets::Any);
    assert_eq!(r.backoff, Some(std::time::Duration::from_millis(100)));
    let b = upstream_of("/b");
    assert_eq!(b.retry.expect("retry").attempts, 10);
    let plain = upstream_of("/c");
    assert!(plain.retry.is_none());
    // The same pods: each variant names the Service port's target.
    assert_eq!(a.targets, plain.targets);
    assert_ne!(a.name, plain.name);
    for want in ["600", "retry.attempts 40"] {
        assert!(
            out.problems.iter().any(|p| p.contains(want)),
            "{want}: {:?}",
            out.problems
        );
    }
}
