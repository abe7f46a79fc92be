use super::*;
use serde_json::json;

/// The held files are one per process ([`tollgate_config::mounted`]): the tests that check
/// with them take turns.
static MOUNTED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The gateway's check: the config read with the Secrets held, and each upstream's CA and
/// client certificate files read (as `certificates_ok` reads them before a reload).
fn real(t: &str, v: &Arc<Files>) -> Result<(), String> {
    tollgate_config::mounted::replace(v.clone()).map_err(|p| p.display().to_string())?;
    let cfg = tollgate_config::check_text(std::path::Path::new("/dev/null"), t)
        .map_err(|e| e.to_string())?;
    for u in &cfg.upstreams {
        let Some(tls) = &u.tls else { continue };
        let client = tls.client_cert.iter().flat_map(|c| [&c.cert, &c.key]);
        for f in tls.ca.iter().chain(client) {
            tollgate_config::read_bounded(f)
                .map_err(|e| format!("upstreams.{}.tls: {}: {e}", u.name, f.display()))?;
        }
    }
    Ok(())
}

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
        configmaps: vec![],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
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
        configmaps: vec![],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
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
        configmaps: vec![],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
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
        configmaps: vec![],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
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
        configmaps: vec![],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
    };
    let _turn = MOUNTED.lock().unwrap_or_else(|e| e.into_inner());
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
        configmaps: vec![],
        secrets: vec![&users],
        default_certificate: None,
        ssl_passthrough: false,
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
        configmaps: vec![],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
    };
    assert_eq!(
        translate(&Classes::default(), None, &none, &|_, _| Ok(())).toml,
        None
    );
}

fn secret(name: &str, keys: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Secret {
    k8s_openapi::api::core::v1::Secret {
        metadata: serde_json::from_value(
            json!({"name": name, "namespace": "shop", "resourceVersion": "1", "uid": name}),
        )
        .expect("meta"),
        data: Some(
            keys.iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        k8s_openapi::ByteString(v.as_bytes().to_vec()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// `proxy-ssl-secret`: the upstream's tls names the Secret's ca.crt, tls.crt and tls.key; a
/// key the Secret lacks is left out as ingress-nginx leaves it (no ca.crt: not verified), a
/// Secret with neither (or none) leaves its Ingress unserved, the others served.
#[test]
fn proxy_ssl_secret_keys_the_secret_lacks_are_left_out() {
    let _turn = MOUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["web.shop.svc.cluster.local".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert")
        .pem();
    let pem_key = key.serialize_pem();
    let class: IngressClass = serde_json::from_value(json!({"metadata": {"name": "tollgate"}, "spec": {"controller": "tollgate.io/ingress-controller"}})).expect("class");
    let with = |name: &str, sec: &str| {
        let mut i = ing(name, Some("tollgate"), false);
        let a = i.metadata.annotations.get_or_insert_default();
        for (k, v) in [
            ("backend-protocol", "HTTPS"),
            ("proxy-ssl-secret", sec),
            ("proxy-ssl-verify", "on"),
            ("proxy-ssl-name", "web.internal"),
        ] {
            a.insert(format!("nginx.ingress.kubernetes.io/{k}"), v.into());
        }
        // Another Service each: one upstream each.
        let v = serde_json::to_value(&i).expect("json");
        let mut v = v;
        v["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!(name);
        serde_json::from_value::<Ingress>(v).expect("ingress")
    };
    let (full, ca_only, client_only, empty, gone) = (
        with("full", "shop/full"),
        with("caonly", "shop/caonly"),
        with("clientonly", "shop/clientonly"),
        with("empty", "shop/empty"),
        with("gone", "shop/gone"),
    );
    let s_full = secret(
        "full",
        &[("ca.crt", &cert), ("tls.crt", &cert), ("tls.key", &pem_key)],
    );
    let s_ca = secret("caonly", &[("ca.crt", &cert)]);
    let s_client = secret("clientonly", &[("tls.crt", &cert), ("tls.key", &pem_key)]);
    let s_empty = secret("empty", &[("other", "x")]);
    let cluster = Cluster {
        classes: vec![&class],
        ingresses: vec![&full, &ca_only, &client_only, &empty, &gone],
        services: vec![],
        configmap: None,
        configmaps: vec![],
        secrets: vec![&s_full, &s_ca, &s_client, &s_empty],
        default_certificate: None,
        ssl_passthrough: false,
    };
    let t = translate(&Classes::default(), None, &cluster, &real);
    assert_eq!(t.served, 3, "{:?}", t.problems);
    for lost in ["shop/empty", "shop/gone"] {
        assert!(
            t.problems
                .iter()
                .any(|p| p.contains(&format!("Ingress {lost}")) && p.contains("not served")),
            "{lost}: {:?}",
            t.problems
        );
    }
    let toml = t.toml.expect("toml");
    real(&toml, &t.volume).expect("the served config loads");
    let table: Table = toml.parse().expect("toml");
    let tls = |up: &str| table["upstreams"][up]["tls"].clone();
    let full = tls("shop.full.80.https");
    assert_eq!(full["verify"].as_bool(), Some(true), "{full}");
    assert_eq!(full["sni"].as_str(), Some("web.internal"));
    assert!(full["ca"]
        .as_str()
        .is_some_and(|c| c.ends_with("shop/full/ca.crt")));
    assert!(full.get("client_cert").is_some());
    let ca = tls("shop.caonly.80.https");
    assert!(
        ca.get("client_cert").is_none() && ca["verify"].as_bool() == Some(true),
        "{ca}"
    );
    let client = tls("shop.clientonly.80.https");
    assert!(client.get("ca").is_none(), "{client}");
    assert_eq!(
        client["verify"].as_bool(),
        Some(true),
        "verify asked for, no ca.crt: the system's roots, never unverified"
    );
    assert!(client.get("client_cert").is_some());
    assert!(
        t.problems
            .iter()
            .any(|p| p.contains("shop/clientonly") && p.contains("holds no ca.crt")),
        "{:?}",
        t.problems
    );
    tollgate_config::mounted::replace(Arc::default()).expect("empty");
}

/// `custom-headers`: the ConfigMap an Ingress names goes to the importer with it, under the
/// controller ConfigMap's allow list; one it does not name stays out of the translation.
#[test]
fn the_configmap_an_ingress_names_is_read_with_it() {
    let class: IngressClass = serde_json::from_value(json!({"metadata": {"name": "tollgate"}, "spec": {"controller": "tollgate.io/ingress-controller"}})).expect("class");
    let cm = |ns: &str, name: &str, data: serde_json::Value| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "data": data}))
            .expect("configmap")
    };
    let controller = cm(
        "tollgate",
        "tollgate-controller",
        json!({"global-allowed-response-headers": "X-Frame-Options"}),
    );
    let security = cm("shop", "security", json!({"X-Frame-Options": "DENY"}));
    let stray = cm("shop", "stray", json!({"X-Other": "1"}));
    let mut a = ing("a", Some("tollgate"), false);
    a.metadata.annotations.get_or_insert_default().insert(
        "nginx.ingress.kubernetes.io/custom-headers".into(),
        "shop/security".into(),
    );
    let cluster = Cluster {
        classes: vec![&class],
        ingresses: vec![&a],
        services: vec![],
        configmap: Some(&controller),
        configmaps: vec![&security, &stray, &controller],
        secrets: vec![],
        default_certificate: None,
        ssl_passthrough: false,
    };
    let t = translate(
        &Classes::default(),
        Some("tollgate/tollgate-controller"),
        &cluster,
        &|_, _| Ok(()),
    );
    assert_eq!(t.served, 1, "{:?}", t.problems);
    let toml = t.toml.expect("toml");
    assert!(
        toml.contains("X-Frame-Options") && toml.contains("DENY"),
        "{toml}"
    );
    assert!(
        !t.problems
            .iter()
            .any(|p| p.contains("stray") || p.contains("skipped")),
        "{:?}",
        t.problems
    );
    assert_eq!(custom_headers_of(&a), Some("shop/security"));
}
