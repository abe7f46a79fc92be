use super::*;
use serde_json::json;

fn ing(name: &str, class: Option<&str>, tls: bool) -> Ingress {
    let mut v = json!({"metadata": {"name": name, "namespace": "shop", "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"nginx.ingress.kubernetes.io/limit-rps": "5"}},
        "spec": {"rules": [{"host": format!("{name}.example"), "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}});
    if let Some(c) = class {
        v["spec"]["ingressClassName"] = json!(c);
    }
    if tls {
        v["spec"]["tls"] = json!([{"hosts": [format!("{name}.example")], "secretName": "cert"}]);
    }
    serde_json::from_value(v).expect("ingress")
}

#[test]
fn the_importer_translates_what_is_chosen_and_names_the_service() {
    let class: IngressClass = serde_json::from_value(json!({"metadata": {"name": "tollgate"}, "spec": {"controller": "tollgate.io/ingress-controller"}})).expect("class");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"port": 80}]}})).expect("svc");
    let (a, b, c, d) = (
        ing("a", Some("tollgate"), false),
        ing("b", Some("nginx"), false),
        ing("c", None, false),
        ing("d", Some("tollgate"), true),
    );
    let cluster = Cluster {
        classes: vec![&class],
        ingresses: vec![&a, &b, &c, &d],
        services: vec![&svc],
        configmap: None,
        secrets: vec![],
        default_certificate: None,
    };
    let t = translate(&Classes::default(), None, &cluster, &|_, _| Ok(()));
    assert_eq!(t.served, 2, "{:?}", t.problems);
    let toml = t.toml.expect("toml");
    assert!(
        toml.contains("a.example") && !toml.contains("b.example") && !toml.contains("c.example")
    );
    assert!(
        toml.contains("d.example") && !toml.contains("shop/cert/tls.crt"),
        "d is served, without the certificate its Secret does not hold yet: {toml}"
    );
    // The endpoints are placed under this name as they change, not written in the TOML.
    assert!(toml.contains("\"web.shop.svc.cluster.local:80\""), "{toml}");
    assert!(
        toml.contains("rate = \"5/s\""),
        "the annotation's limit, as import-ingress makes it"
    );
    assert!(
        t.problems
            .iter()
            .any(|p| p.starts_with("Secret shop/cert (spec.tls)")),
        "{:?}",
        t.problems
    );
    // A check that refuses what holds Ingress e's host: e alone is left out.
    let e = ing("e", Some("tollgate"), false);
    let both = Cluster {
        classes: vec![&class],
        ingresses: vec![&a, &e],
        services: vec![],
        configmap: None,
        secrets: vec![],
        default_certificate: None,
    };
    let t = translate(
        &Classes::default(),
        None,
        &both,
        &|t: &str, _: &Arc<Files>| {
            if t.contains("e.example") {
                Err("no".into())
            } else {
                Ok(())
            }
        },
    );
    assert_eq!(t.served, 1);
    assert!(t
        .toml
        .as_deref()
        .is_some_and(|t| t.contains("a.example") && !t.contains("e.example")));
    assert!(
        t.problems
            .iter()
            .any(|p| p.starts_with("Ingress shop/e: its translation is refused")),
        "{:?}",
        t.problems
    );
    // A port named by the Ingress: the Service's number for that name; a name it lacks: not served.
    let mut g = ing("g", Some("tollgate"), false);
    let named: serde_json::Value = serde_json::json!({"name": "http"});
    g.spec
        .as_mut()
        .expect("spec")
        .rules
        .as_mut()
        .expect("rules")[0]
        .http
        .as_mut()
        .expect("http")
        .paths[0]
        .backend
        .service
        .as_mut()
        .expect("svc")
        .port = Some(serde_json::from_value(named).expect("port"));
    let svc8: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"name": "legacy", "port": 80}, {"name": "http", "port": 8080}]}})).expect("svc");
    let c8 = Cluster {
        classes: vec![&class],
        ingresses: vec![&g],
        services: vec![&svc8],
        configmap: None,
        secrets: vec![],
        default_certificate: None,
    };
    let t = translate(&Classes::default(), None, &c8, &|_, _| Ok(()));
    assert!(
        t.toml
            .as_deref()
            .is_some_and(|t| t.contains("web.shop.svc.cluster.local:8080")),
        "{t:?}"
    );
    let c0 = Cluster {
        classes: vec![&class],
        ingresses: vec![&g],
        services: vec![&svc],
        configmap: None,
        secrets: vec![],
        default_certificate: None,
    };
    let t = translate(&Classes::default(), None, &c0, &|_, _| Ok(()));
    assert_eq!(t.served, 0);
    assert!(
        t.problems
            .iter()
            .any(|p| p.contains("no port named \"http\"")),
        "{:?}",
        t.problems
    );
    let mut f = ing("f", Some("tollgate"), false);
    let anns = f.metadata.annotations.get_or_insert_default();
    anns.insert(
        "nginx.ingress.kubernetes.io/auth-secret".into(),
        "users".into(),
    );
    anns.insert(
        "nginx.ingress.kubernetes.io/auth-type".into(),
        "basic".into(),
    );
    let secret = Cluster {
        classes: vec![&class],
        ingresses: vec![&f],
        services: vec![],
        configmap: None,
        secrets: vec![],
        default_certificate: None,
    };
    // The check the gateway makes: the config read with the Secrets held.
    let real = |t: &str, v: &Arc<Files>| {
        tollgate_config::mounted::replace(v.clone()).map_err(|p| p.display().to_string())?;
        tollgate_config::check_text(std::path::Path::new("/dev/null"), t)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let t = translate(&Classes::default(), None, &secret, &real);
    assert_eq!(
        (t.served, t.toml.as_deref()),
        (0, None),
        "a lone Ingress refused is not served, not kept at its last translation"
    );
    assert!(
        t.problems
            .iter()
            .any(|p| p.contains("Ingress shop/f") && p.contains("users/auth")),
        "without its Secret the htpasswd file cannot be read: {:?}",
        t.problems
    );
    let users = k8s_openapi::api::core::v1::Secret {
        metadata: serde_json::from_value(
            json!({"name": "users", "namespace": "shop", "resourceVersion": "1"}),
        )
        .expect("meta"),
        data: Some(
            [(
                "auth".to_string(),
                k8s_openapi::ByteString(
                    b"u:$2y$10$3Qyfgmi2F1fPpf7gMcBPRutg5vB.nvC5/LV2U8QjkG6wolTKqEuhS\n".to_vec(),
                ),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let g2 = ing("g2", Some("tollgate"), false);
    let with_users = Cluster {
        classes: vec![&class],
        ingresses: vec![&f, &g2],
        services: vec![],
        configmap: None,
        secrets: vec![&users],
        default_certificate: None,
    };
    let t = translate(&Classes::default(), None, &with_users, &real);
    assert_eq!(t.served, 2, "{:?}", t.problems);
    assert!(real(t.toml.as_deref().unwrap_or(""), &t.volume).is_ok());
    let without = Cluster {
        secrets: vec![],
        ..with_users
    };
    let t = translate(&Classes::default(), None, &without, &real);
    assert_eq!(t.served, 1, "f is left out, g2 stays: {:?}", t.problems);
    assert!(
        t.problems
            .iter()
            .any(|p| p.contains("Ingress shop/f") && p.contains("not served")),
        "{:?}",
        t.problems
    );
    tollgate_config::mounted::replace(Arc::default()).expect("empty");
    let none = Cluster {
        classes: vec![],
        ingresses: vec![&b],
        services: vec![],
        configmap: None,
        secrets: vec![],
        default_certificate: None,
    };
    assert_eq!(
        translate(&Classes::default(), None, &none, &|_, _| Ok(())).toml,
        None
    );
}
