use super::*;
use serde_json::json;

fn svc() -> Service {
    serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "admin", "port": 81}]}})).expect("service")
}

fn slice(name: &str, eps: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}], "endpoints": eps})).expect("slice")
}

#[test]
fn ready_endpoints_only_by_port_name() {
    let s = svc();
    let a = slice(
        "a",
        json!([
            {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
            {"addresses": ["10.0.0.1"]},
            {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
            {"addresses": ["10.0.0.4"], "conditions": {"ready": true, "terminating": true}}
        ]),
    );
    let b = slice(
        "b",
        json!([{"addresses": ["fd00::1"], "conditions": {"ready": true}}, {"addresses": ["10.0.0.2"]}]),
    );
    let mut other = slice("c", json!([{"addresses": ["10.9.9.9"]}]));
    other.metadata.labels = Some(
        [(
            "kubernetes.io/service-name".to_string(),
            "elsewhere".to_string(),
        )]
        .into(),
    );
    let mut fqdn = slice("d", json!([{"addresses": ["attacker.example"]}]));
    fqdn.address_type = "FQDN".into();
    let mut garbage = slice(
        "e",
        json!([{"addresses": ["not-an-ip", "10.0.0.5 ", "10.0.0.6"]}]),
    );
    garbage.metadata.labels = other.metadata.labels.clone();
    let mut wide = slice("f", json!([{"addresses": ["10.0.0.7"]}]));
    wide.ports = Some(vec![serde_json::from_value(
        json!({"name": "http", "port": 70000}),
    )
    .expect("port")]);
    let eps = ready(&[&s], &[&a, &b, &other, &fqdn, &wide]);
    let addrs = |v: &[SocketAddr]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    assert_eq!(
        addrs(&eps["web.shop.svc.cluster.local:80"]),
        ["10.0.0.1:8080", "10.0.0.2:8080", "[fd00::1]:8080"],
        "a port out of range is no port"
    );
    assert!(
        !eps.contains_key("web.shop.svc.cluster.local:81"),
        "no slice names port admin"
    );
    let mut elsewhere = svc();
    elsewhere.metadata.name = Some("elsewhere".into());
    let eps = ready(&[&elsewhere], &[&other, &garbage]);
    assert_eq!(
        addrs(&eps["elsewhere.shop.svc.cluster.local:80"]),
        ["10.0.0.6:8080", "10.9.9.9:8080"],
        "only addresses"
    );
}

/// The name placed is the name the importer writes as the target; with
/// `service-upstream: "true"` the target is a name never placed (the ClusterIP).
#[test]
fn the_name_placed_is_the_importers_target() {
    let ing = |name: &str, ann: &str| {
        format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: shop, annotations: {{{ann}}}}}\nspec:\n  rules:\n  - host: {name}.example\n    http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n")
    };
    let opts = tollgate_ingress::Options {
        ingress_class: String::new(),
        allow_insecure: false,
        configmap: None,
        preselected: true,
        ssl_passthrough: false,
    };
    let placed = format!("targets = [\"{}\"]", target_name("shop", "web", 80));
    let pods = tollgate_ingress::import(&ing("i", ""), &opts).expect("import");
    assert!(pods.toml.contains(&placed), "{placed} in {}", pods.toml);
    let yaml = format!(
        "{}---\n{}",
        ing(
            "c",
            "nginx.ingress.kubernetes.io/service-upstream: \"true\""
        ),
        ing("d", "nginx.ingress.kubernetes.io/service-upstream: \"yes\"")
    );
    let both = tollgate_ingress::import(&yaml, &opts).expect("import");
    assert!(
        both.toml.contains("targets = [\"web.shop.svc:80\"]"),
        "the ClusterIP, by a name not placed: {}",
        both.toml
    );
    assert!(
        both.toml.contains(&placed),
        "d's bad boolean is false: {}",
        both.toml
    );
    assert!(
        both.warnings
            .iter()
            .any(|w| w.contains("service-upstream \"yes\"")),
        "{:?}",
        both.warnings
    );
    let eps = ready(
        &[&svc()],
        &[&slice("a", json!([{"addresses": ["10.0.0.1"]}]))],
    );
    assert!(!eps.contains_key("web.shop.svc:80"));
}
