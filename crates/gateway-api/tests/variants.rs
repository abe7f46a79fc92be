//! A rule's `retry` (GEP-1731) and `sessionPersistence` (GEP-1619) as an upstream of its
//! own: the Service port's, with the rule's codes, attempts and backoff, the same pod again
//! and every attempt funded; or with a signed cookie that pins the client to its pod.

mod common;

use common::*;
use tollgate_config::model::{RetryTargets, UpstreamConfig};
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
  - matches: [{path: {type: PathPrefix, value: /d}}]
    sessionPersistence: {sessionName: pin, absoluteTimeout: 1h, cookieConfig: {lifetimeType: Permanent}}
    retry: {codes: [503]}
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /e}}]
    sessionPersistence: {type: Header}
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /f}}]
    sessionPersistence: {absoluteTimeout: 10m}
    backendRefs: [{name: web, port: 80}, {name: api, port: 80}]
"#;

#[test]
fn a_rules_retry_and_session_are_an_upstream_of_their_own() {
    let c = Cluster::of(OBJECTS);
    let out = translate(&c.input(), &[]);
    let cfg = loads(&out);
    let upstreams_of = |prefix: &str| -> Vec<UpstreamConfig> {
        let r = cfg
            .routes
            .iter()
            .find(|r| format!("{:?}", r.path).contains(&format!("\"{prefix}/\"")))
            .unwrap_or_else(|| panic!("{prefix}: {:?}", cfg.routes));
        r.upstreams_used()
            .into_iter()
            .map(|u| cfg.upstreams[u].clone())
            .collect()
    };
    let upstream_of = |prefix: &str| {
        let mut all = upstreams_of(prefix);
        assert_eq!(all.len(), 1, "{prefix}");
        all.remove(0)
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
    // A session: a signed cookie of the route's name and lifetime, beside its retry.
    let d = upstream_of("/d");
    let a = d.affinity.as_ref().expect("affinity");
    assert_eq!((a.cookie.as_str(), a.path.as_str()), ("pin", "/"));
    assert_eq!(a.max_age, Some(std::time::Duration::from_secs(3600)));
    assert!(a
        .secret
        .as_deref()
        .is_some_and(|k| k.starts_with("gateway-api-session/")));
    assert!(d.retry.expect("retry").on.status(503));
    assert!(upstream_of("/e").affinity.is_none());
    // Two backendRefs: each one's pods pinned alike; a Session cookie has no Max-Age.
    let f = upstreams_of("/f");
    assert_eq!(f.len(), 2);
    for u in &f {
        let a = u.affinity.as_ref().expect("affinity");
        assert_eq!((a.cookie.as_str(), a.max_age), ("tollgate-session", None));
    }
    for want in [
        "600",
        "retry.attempts 40",
        "type Header is not served",
        "absoluteTimeout \"10m\" of a Session cookie is not tracked",
    ] {
        assert!(
            out.problems.iter().any(|p| p.contains(want)),
            "{want}: {:?}",
            out.problems
        );
    }
}

/// A variant's name is its Service port's and its policy's, in characters no Kubernetes name
/// holds: a namespace or Service named like another's variant never meets it.
#[test]
fn a_variant_never_shares_a_name_with_another_services_upstream() {
    let objects = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: tollgate
  listeners: [{name: http, protocol: HTTP, port: 8080, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: victim, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v}}]
    retry: {codes: [500], attempts: 2}
    backendRefs: [{name: api, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attacker, namespace: shop-api-80}
spec:
  parentRefs: [{name: gw, namespace: shop}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /a}}]
    backendRefs: [{name: retry-2, port: 500}]
"#;
    let c = Cluster::of(objects);
    let out = translate(&c.input(), &[]);
    let ups = out.table["upstreams"].as_table().expect("upstreams");
    let names: Vec<&String> = ups.keys().collect();
    for (n, target) in [
        (
            "gw:shop/api:80/retry:2,500",
            "api.shop.svc.cluster.local:80",
        ),
        (
            "gw:shop-api-80/retry-2:500",
            "retry-2.shop-api-80.svc.cluster.local:500",
        ),
    ] {
        let t = ups.get(n).unwrap_or_else(|| panic!("{n}: {names:?}"));
        assert_eq!(t["targets"][0].as_str(), Some(target), "{names:?}");
    }
}

/// An ExternalAuth the gateway cannot ask as the spec says answers 500 on its rule alone:
/// a header name the config would refuse never takes the whole route (and its paths) away.
#[test]
fn an_external_auth_that_cannot_be_asked_fails_its_rule_closed() {
    let objects = r#"
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
  - matches: [{path: {type: PathPrefix, value: /framing}}]
    filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: authz, port: 80}, http: {allowedResponseHeaders: [Content-Length]}}}]
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /body}}]
    filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: authz, port: 80}, forwardBody: {maxSize: 1024}}}]
    backendRefs: [{name: web, port: 80}]
"#;
    let c = Cluster::of(objects);
    let out = translate(&c.input(), &[]);
    let cfg = loads(&out);
    let at = |prefix: &str| {
        cfg.routes
            .iter()
            .find(|r| format!("{:?}", r.path).contains(&format!("\"{prefix}/\"")))
            .unwrap_or_else(|| panic!("{prefix}: {:?}", cfg.routes))
    };
    for p in ["/framing", "/body"] {
        assert!(
            matches!(
                at(p).action,
                tollgate_config::model::RouteAction::Respond { status: 500, .. }
            ),
            "{p}: {:?}",
            at(p).action
        );
    }
    for why in ["header \"content-length\"", "forwardBody"] {
        assert!(
            out.problems.iter().any(|p| p.contains(why)),
            "{why}: {:?}",
            out.problems
        );
    }
}
