//! BackendTLSPolicy: a Service's upstream speaks TLS, verified against its ConfigMap's
//! `ca.crt` (or the system's roots) under `validation.hostname`; a policy Tollgate cannot
//! serve leaves that Service unused (500s), never spoken to unverified; statuses per Gateway.

mod common;

use common::*;
use tollgate_gateway_api::translate::translate;

const ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: pay, namespace: default}
spec:
  parentRefs: [{name: example-gateway}]
  rules:
  - backendRefs: [{name: payments, port: 443}]
"#;

fn policy(validation: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: pay-tls, namespace: default}}
spec:
  targetRefs: [{{group: "", kind: Service, name: payments}}]
  validation:
{validation}"#
    )
}

const CA: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: pay-ca, namespace: default}
data: {ca.crt: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}
"#;

#[test]
fn a_configmap_ca_or_the_system_roots_verify_the_pods_under_the_policy_s_hostname() {
    let text = format!(
        "{ROUTE}---{}---{CA}",
        policy("    hostname: payments.internal\n    caCertificateRefs: [{group: \"\", kind: ConfigMap, name: pay-ca}]\n")
    );
    let c = Cluster::of(&text);
    let out = translate(&c.input(), &[]);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let up = &out.table["upstreams"]["gw:default/payments:443"]["tls"];
    assert_eq!(up["sni"].as_str(), Some("payments.internal"));
    assert_eq!(up["verify"].as_bool(), Some(true));
    assert!(
        up["ca"]
            .as_str()
            .is_some_and(|p| p.ends_with("default/_configmap.pay-ca/ca.crt")),
        "{up:?}"
    );
    let st = out
        .statuses
        .iter()
        .find(|s| s.kind == "BackendTLSPolicy")
        .expect("status");
    assert_eq!(
        st.status["ancestors"][0]["ancestorRef"]["name"],
        "example-gateway"
    );
    assert_eq!(st.status["ancestors"][0]["conditions"][0]["status"], "True");

    let system = Cluster::of(&format!(
        "{ROUTE}---{}",
        policy("    hostname: payments.internal\n    wellKnownCACertificates: System\n")
    ));
    let out = translate(&system.input(), &[]);
    let up = &out.table["upstreams"]["gw:default/payments:443"]["tls"];
    assert!(up.get("ca").is_none(), "the system's roots");
    assert_eq!(up["sni"].as_str(), Some("payments.internal"));
}

#[test]
fn a_policy_that_cannot_be_served_leaves_the_service_unused() {
    // The ConfigMap is missing: the route answers 500, and the policy says why.
    let text = format!(
        "{ROUTE}---{}",
        policy("    hostname: payments.internal\n    caCertificateRefs: [{group: \"\", kind: ConfigMap, name: pay-ca}]\n")
    );
    let c = Cluster::of(&text);
    let out = translate(&c.input(), &[]);
    let cfg = loads(&out);
    assert!(cfg.upstreams.is_empty(), "{:?}", cfg.upstreams);
    assert!(matches!(
        cfg.routes[0].action,
        tollgate_config::model::RouteAction::Respond { status: 500, .. }
    ));
    let st = out
        .statuses
        .iter()
        .find(|s| s.kind == "BackendTLSPolicy")
        .expect("status");
    let conds = &st.status["ancestors"][0]["conditions"];
    assert_eq!(conds[0]["status"], "False");
    assert_eq!(conds[1]["reason"], "InvalidCACertificateRef");
    assert!(
        out.problems.iter().any(|p| p.contains("holds no ca.crt")),
        "{:?}",
        out.problems
    );
    // subjectAltNames Tollgate cannot verify: refused, not ignored.
    let sans = Cluster::of(&format!(
        "{ROUTE}---{}",
        policy("    hostname: payments.internal\n    wellKnownCACertificates: System\n    subjectAltNames: [{type: Hostname, hostname: other.internal}]\n")
    ));
    let out = translate(&sans.input(), &[]);
    assert!(out.table.get("upstreams").is_none());
}
