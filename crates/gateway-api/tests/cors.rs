//! The CORS filter in Tollgate's terms, where the spec and Tollgate's defaults differ: a
//! `*` with credentials is echoed, unset lists allow only what the spec allows, and an
//! exposed `*` never goes with credentials.

mod common;

use common::*;
use tollgate_config::model::{CorsConfig, OriginRule};
use tollgate_gateway_api::translate::translate;

fn route(name: &str, prefix: &str, cors: &str) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
    filters: [{{type: CORS, cors: {cors}}}]
    backendRefs: [{{name: web, port: 80}}]
"#
    )
}

const GATEWAY: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: tollgate
  listeners: [{name: http, protocol: HTTP, port: 8080}]
"#;

#[test]
fn cors_follows_the_spec_where_tollgates_defaults_differ() {
    let objects = [
        GATEWAY.to_string(),
        route("bare", "/bare", "{allowOrigins: [\"https://app.example.com\"]}"),
        route(
            "creds",
            "/creds",
            "{allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"], exposeHeaders: [\"*\", x-total], allowCredentials: true, maxAge: 60}",
        ),
        route(
            "open",
            "/open",
            "{allowOrigins: [\"*\"], allowMethods: [\"*\"], exposeHeaders: [\"*\"]}",
        ),
    ]
    .join("---\n");
    let c = Cluster::of(&objects);
    let out = translate(&c.input(), &[]);
    let cfg = loads(&out);
    let cors = |prefix: &str| -> CorsConfig {
        let r = cfg
            .routes
            .iter()
            .find(|r| r.name.contains(prefix.trim_start_matches('/')))
            .unwrap_or_else(|| panic!("{prefix}: {:?}", cfg.routes));
        r.edge.cors.clone().expect("cors")
    };
    // Unset lists: the safelisted methods, no headers; maxAge's default is 5.
    let bare = cors("/bare");
    assert_eq!(bare.allow_methods, ["GET", "HEAD", "POST"]);
    assert!(bare.allow_headers.is_empty());
    assert_eq!(bare.max_age, Some(5));
    assert!(!bare.allow_credentials && !bare.echo_wildcards);
    // Wildcards with credentials: echoed; the exposed "*" left out, with a problem.
    let creds = cors("/creds");
    assert_eq!(creds.allow_origins, [OriginRule::Any]);
    assert!(creds.allow_credentials && creds.echo_wildcards);
    assert_eq!(creds.expose_headers, ["x-total"]);
    assert_eq!(creds.max_age, Some(60));
    assert!(
        out.problems
            .iter()
            .any(|p| p.contains("creds") && p.contains("exposeHeaders")),
        "{:?}",
        out.problems
    );
    // Without credentials a "*" is sent as "*", exposed ones too.
    let open = cors("/open");
    assert!(!open.echo_wildcards && !open.allow_credentials);
    assert_eq!(open.expose_headers, ["*"]);
    assert_eq!(out.problems.len(), 1, "{:?}", out.problems);
}
