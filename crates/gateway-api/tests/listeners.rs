//! Listener isolation beyond the routes: a listener that no route reached, or that cannot be
//! served, still takes the hosts it matches most closely on its port, so a less specific
//! listener's routes never answer them.

mod common;

use common::*;
use tollgate_config::model::RouteAction;
use tollgate_gateway_api::translate::translate;

const OBJECTS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: default}
spec:
  gatewayClassName: tollgate
  listeners:
  - {name: wildcard, protocol: HTTP, port: 8080, hostname: "*.example.com", allowedRoutes: {namespaces: {from: All}}}
  - {name: quiet, protocol: HTTP, port: 8080, hostname: "quiet.example.com"}
  - {name: broken, protocol: UDP, port: 8080, hostname: "pay.example.com"}
  - {name: alone, protocol: HTTP, port: 9090, hostname: "alone.example.com"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: tenant, namespace: default}
spec:
  parentRefs: [{name: shared, sectionName: wildcard}]
  rules:
  - backendRefs: [{name: web, port: 80}]
"#;

#[test]
fn unrouted_and_unservable_listeners_keep_their_hosts() {
    let c = Cluster::of(OBJECTS);
    let out = translate(&c.input(), &[]);
    let cfg = loads(&out);
    let answer = |host: &str| {
        cfg.routes
            .iter()
            .find(|r| r.listener_host.as_deref() == Some(host))
            .map(|r| match &r.action {
                RouteAction::Respond { status, .. } => *status,
                RouteAction::Upstream(_) => 200,
            })
    };
    assert_eq!(answer("*.example.com"), Some(200));
    assert_eq!(answer("quiet.example.com"), Some(404), "{:?}", cfg.routes);
    assert_eq!(answer("pay.example.com"), Some(503), "{:?}", cfg.routes);
    // Port 9090 has no routes at all: nothing to lend, no placeholder.
    assert_eq!(answer("alone.example.com"), None);
}
