use super::*;

fn convert(yaml: &str) -> Converted {
    limit_policies(yaml, &tollgate_ingress::Options::default()).expect("converts")
}

fn docs(c: &Converted) -> Vec<Json> {
    objects(&c.yaml).expect("its own YAML reads")
}

fn ingress(name: &str, host: &str, anns: &[(&str, &str)]) -> String {
    let a: String = anns
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: shop\n  annotations:\n{a}spec:\n  ingressClassName: nginx\n  rules:\n  - host: {host}\n    http:\n      paths:\n      - path: /{name}\n        pathType: Prefix\n        backend:\n          service:\n            name: {name}\n            port:\n              number: 80\n---\n"
    )
}

#[test]
fn hosts_are_named_as_ingress2gateway_names_them() {
    for (host, want) in [
        ("api.example.com", "api-example-com"),
        ("*.example.com", "example-com"),
        ("", "all-hosts"),
        ("*", "all-hosts"),
        ("a..b", "a-b"),
        ("host.", "host-"),
        ("Foo.Example", "Foo-Example"),
    ] {
        assert_eq!(name_from_host(host), want, "{host:?}");
    }
}

#[test]
fn the_corpus_s_limits_become_policies_on_its_converted_routes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ingress");
    let yaml = std::fs::read_to_string(dir.join("ratelimited.yaml")).expect("fixture");
    let c = convert(&yaml);
    let d = docs(&c);
    assert_eq!(c.policies, 2);
    assert_eq!(d[0]["metadata"]["name"], "api-limits");
    assert_eq!(d[0]["metadata"]["namespace"], "prod");
    assert_eq!(
        d[0]["spec"]["targetRefs"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "api-api-example-com"}])
    );
    assert_eq!(d[0]["spec"]["buckets"], "Shared");
    // The very limits the Ingress import makes: 5/s with nginx's burst, and 100/m.
    let rps = &d[0]["spec"]["limits"]["rps"];
    assert_eq!(
        (
            rps["rate"].as_str(),
            rps["burst"].as_i64(),
            rps["key"].as_str()
        ),
        (Some("5/s"), Some(16), Some("client_ip"))
    );
    assert_eq!(d[0]["spec"]["limits"]["rpm"]["rate"], "100/m");
    assert_eq!(d[1]["spec"]["targetRefs"][0]["name"], "web-www-example-com");
    assert!(
        c.warnings.iter().any(|w| w.contains("limit-whitelist")),
        "{:?}",
        c.warnings
    );
    // Every file of the corpus converts (or says it holds no Ingress of the class).
    for f in std::fs::read_dir(&dir).expect("corpus") {
        let p = f.expect("entry").path();
        let text = std::fs::read_to_string(&p).expect("file");
        if let Err(e) = limit_policies(&text, &tollgate_ingress::Options::default()) {
            assert!(e.starts_with("no Ingress"), "{}: {e}", p.display());
        }
    }
}

#[test]
fn what_a_policy_cannot_say_is_said() {
    let shared = ingress(
        "a",
        "x.test",
        &[("nginx.ingress.kubernetes.io/limit-rpm", "60")],
    ) + &ingress("b", "x.test", &[])
        + &ingress(
            "g",
            "g.test",
            &[
                ("nginx.ingress.kubernetes.io/limit-rps", "2"),
                ("nginx.ingress.kubernetes.io/backend-protocol", "GRPC"),
            ],
        )
        + &ingress(
            "p",
            "p.test",
            &[
                ("nginx.ingress.kubernetes.io/limit-rps", "2"),
                ("nginx.ingress.kubernetes.io/ssl-passthrough", "true"),
            ],
        )
        + &ingress(
            "n",
            "n.test",
            &[
                ("nginx.ingress.kubernetes.io/limit-rps", "2"),
                ("tollgate.io/limits", "per-key"),
            ],
        );
    let c = convert(&shared);
    let d = docs(&c);
    let names: Vec<&str> = d
        .iter()
        .filter_map(|p| str_at(p, "/metadata/name"))
        .collect();
    assert_eq!(
        names,
        ["a-limits", "g-limits", "n-limits"],
        "{:?}",
        c.warnings
    );
    // Ingress b's paths sit in a's HTTPRoute: limited too, and said.
    assert_eq!(d[0]["spec"]["targetRefs"][0]["name"], "a-x-test");
    assert!(c
        .warnings
        .iter()
        .any(|w| w.contains("also holds the paths of Ingress b")));
    assert_eq!(d[1]["spec"]["targetRefs"][0]["kind"], "GRPCRoute");
    assert!(c.warnings.iter().any(|w| w.contains("ssl-passthrough")));
    assert!(c
        .warnings
        .iter()
        .any(|w| w.contains("\"per-key\", a BASE.toml limit")));
    // Nothing to convert is an error, not an empty file.
    let other =
        ingress("o", "o.test", &[]).replace("ingressClassName: nginx", "ingressClassName: haproxy");
    assert!(limit_policies(&other, &tollgate_ingress::Options::default()).is_err());
}

#[test]
fn an_ingress_whose_limits_no_policy_holds_is_never_passed_over_quietly() {
    let c = convert(
        &[
            ingress(
                "named",
                "a.example.com",
                &[("tollgate.io/limits", "base.api")],
            ),
            ingress(
                "shaped",
                "b.example.com",
                &[("nginx.ingress.kubernetes.io/limit-rate", "1024")],
            ),
            ingress(
                "both",
                "c.example.com",
                &[
                    ("nginx.ingress.kubernetes.io/limit-rps", "5"),
                    ("nginx.ingress.kubernetes.io/limit-rate-after", "10k"),
                ],
            ),
            ingress("plain", "d.example.com", &[]),
        ]
        .concat(),
    );
    assert_eq!(c.policies, 1, "{}", c.yaml);
    let said = |who: &str, what: &str| {
        c.warnings
            .iter()
            .any(|w| w.starts_with(&format!("Ingress shop/{who}:")) && w.contains(what))
    };
    assert!(
        said("named", "tollgate.io/limits \"base.api\""),
        "{:?}",
        c.warnings
    );
    assert!(
        said("shaped", "limit-rate: a bandwidth"),
        "{:?}",
        c.warnings
    );
    assert!(
        said("both", "limit-rate-after: a bandwidth"),
        "{:?}",
        c.warnings
    );
    assert!(
        !c.warnings.iter().any(|w| w.contains("shop/plain")),
        "{:?}",
        c.warnings
    );
}
