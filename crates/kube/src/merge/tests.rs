use super::*;

#[test]
fn base_wins_and_the_cluster_adds() {
    let base = "[server]\nlisten = [\"127.0.0.1:1\"]\nhsts = true\n\n[upstreams.api]\ntargets = [\"127.0.0.1:2\"]\n\n[[routes]]\nname = \"api\"\npath_prefix = \"/api\"\nupstream = \"api\"\n";
    let cluster = "[server]\nlisten = [\"0.0.0.0:8080\"]\nadmin = \"0.0.0.0:9901\"\nhost_fallthrough = false\nhsts = false\n\n[upstreams.\"shop.web.80\"]\ntargets = [\"web.shop.svc.cluster.local:80\"]\n\n[[routes]]\nname = \"shop.web.1\"\nhost = \"shop.example\"\npath_prefix = \"/\"\nupstream = \"shop.web.80\"\n";
    let (text, problems) = merge(base, cluster).expect("merges");
    assert!(problems.is_empty());
    let t: Table = text.parse().expect("toml");
    assert_eq!(t["server"]["listen"].as_array().expect("listen").len(), 1);
    assert_eq!(
        t["server"]["listen"][0].as_str(),
        Some("127.0.0.1:1"),
        "the cluster cannot move listeners"
    );
    assert!(t["server"].get("admin").is_none());
    assert_eq!(t["server"]["hsts"].as_bool(), Some(true), "BASE wins");
    assert_eq!(
        t["server"]["host_fallthrough"].as_bool(),
        Some(false),
        "the cluster fills in"
    );
    assert_eq!(t["routes"].as_array().expect("routes").len(), 2);
    assert!(t["upstreams"].get("shop.web.80").is_some());
}

#[test]
fn an_ingress_cannot_take_over_a_base_definition() {
    let base = "[upstreams.admin]\ntargets = [\"127.0.0.1:2\"]\n\n[limits.strict]\nkey = \"client_ip\"\nrate = \"1/s\"\n\n[[routes]]\nname = \"admin\"\npath_prefix = \"/admin\"\nupstream = \"admin\"\nlimits = [\"strict\"]\n";
    // An Ingress whose translated names meet BASE's: its upstream and its limit.
    let cluster = "[upstreams.admin]\ntargets = [\"evil:80\"]\n\n[limits.strict]\nkey = \"client_ip\"\nrate = \"1000/s\"\n\n[upstreams.ok]\ntargets = [\"ok:80\"]\n\n[[routes]]\nname = \"x.1\"\nhost = \"x.example\"\nupstream = \"admin\"\npath_prefix = \"/\"\n\n[[routes]]\nname = \"x.2\"\nhost = \"x.example\"\nupstream = \"ok\"\nlimits = [\"strict\"]\npath_prefix = \"/b\"\n\n[[routes]]\nname = \"y.1\"\nhost = \"y.example\"\nupstream = \"ok\"\npath_prefix = \"/c\"\n";
    let (text, problems) = merge(base, cluster).expect("merges");
    let t: Table = text.parse().expect("toml");
    assert_eq!(
        t["upstreams"]["admin"]["targets"][0].as_str(),
        Some("127.0.0.1:2")
    );
    assert_eq!(t["limits"]["strict"]["rate"].as_str(), Some("1/s"));
    let names: Vec<&str> = t["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["admin", "y.1"],
        "the routes naming the taken definitions are dropped; the rest stay"
    );
    assert_eq!(problems.len(), 4, "{problems:?}");
    // A route named as BASE's: the cluster's is dropped, BASE's stays.
    let (text, problems) = merge(
        base,
        "[[routes]]\nname = \"admin\"\npath_prefix = \"/\"\nupstream = \"x\"\n",
    )
    .expect("merges");
    let t: Table = text.parse().expect("toml");
    assert_eq!(t["routes"].as_array().expect("routes").len(), 1);
    assert_eq!(t["routes"][0]["upstream"].as_str(), Some("admin"));
    assert_eq!(problems.len(), 1);
    // BASE's hosts are BASE's: an Ingress naming one, or one its wildcard covers, or a
    // wildcard over it, is not served there; host-less cluster routes meet BASE's
    // host-less ones; other hosts are the cluster's.
    let base = "[upstreams.api]\ntargets = [\"127.0.0.1:2\"]\n\n[[routes]]\nname = \"api\"\nhost = \"api.example\"\npath_prefix = \"/\"\nupstream = \"api\"\n\n[[routes]]\nname = \"w\"\nhost = \"*.corp.example\"\npath_prefix = \"/\"\nupstream = \"api\"\n\n[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nupstream = \"api\"\n";
    let route = |n: &str, host: Option<&str>| {
        match host {
        Some(h) => format!("[[routes]]\nname = \"{n}\"\nhost = \"{h}\"\npath_prefix = \"/v1\"\nupstream = \"x\"\n\n"),
        None => format!("[[routes]]\nname = \"{n}\"\npath_prefix = \"/v1\"\nupstream = \"x\"\n\n"),
    }
    };
    let cluster = [
        route("c1", Some("API.example.")),
        route("c2", Some("a.corp.example")),
        route("c3", Some("*.example")),
        route("c4", None),
        route("c5", Some("shop.example")),
    ]
    .concat();
    let (text, problems) = merge(base, &cluster).expect("merges");
    let t: Table = text.parse().expect("toml");
    let names: Vec<&str> = t["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["api", "w", "all", "c5"], "{problems:?}");
    assert!(merge("not = [toml", "").is_err());
}

fn certs(merged: &str) -> Vec<String> {
    let t: Table = merged.parse().expect("toml");
    t.get("tls")
        .and_then(|t| t.get("certificates"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("cert")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

const CLUSTER_TLS: &str = "[tls]\nhsts = \"max-age=1\"\ncertificates = [{ cert = \"/etc/tollgate/tls/shop/site/tls.crt\", key = \"/etc/tollgate/tls/shop/site/tls.key\" }]\n";

#[test]
fn with_tls_listeners_the_default_certificate_comes_first_unless_base_has_its_own() {
    let default = "/etc/tollgate/tls/_default/tls.crt";
    let listens = "[server]\nlisten = [\"127.0.0.1:1\"]\ntls_listen = [\"127.0.0.1:2\"]\n";
    // BASE alone (no translation yet): the listeners have the default certificate.
    let (m, p) = merge(listens, "").expect("merge");
    assert_eq!(certs(&m), [default], "{p:?}");
    let (m, _) = merge(listens, CLUSTER_TLS).expect("merge");
    assert_eq!(
        certs(&m),
        [default, "/etc/tollgate/tls/shop/site/tls.crt"],
        "the default for names no Secret holds, then the cluster's"
    );
    // BASE's own certificates: BASE's first one is the default, the cluster's follow, and a
    // certificate both name is listed once.
    let own = format!(
        "{listens}\n[tls]\nhsts = \"max-age=9\"\ncertificates = [{{ cert = \"/base.crt\", key = \"/base.key\" }}, {{ cert = \"/etc/tollgate/tls/shop/site/tls.crt\", key = \"/etc/tollgate/tls/shop/site/tls.key\" }}]\n"
    );
    let (m, _) = merge(&own, CLUSTER_TLS).expect("merge");
    assert_eq!(
        certs(&m),
        ["/base.crt", "/etc/tollgate/tls/shop/site/tls.crt"]
    );
    let t: Table = m.parse().expect("toml");
    assert_eq!(t["tls"]["hsts"].as_str(), Some("max-age=9"), "BASE wins");
}

#[test]
fn without_tls_listeners_the_clusters_tls_is_left_out_and_said() {
    let base = "[server]\nlisten = [\"127.0.0.1:1\"]\n";
    let (m, p) = merge(base, CLUSTER_TLS).expect("merge");
    assert!(certs(&m).is_empty());
    assert!(!m.contains("[tls]"), "{m}");
    assert!(
        p.iter().any(|p| p.contains("no server.tls_listen")),
        "{p:?}"
    );
    let (m, p) = merge(base, "").expect("merge");
    assert!(!m.contains("tls"), "{m}");
    assert!(p.is_empty(), "nothing to say: {p:?}");
}

#[test]
fn a_route_names_base_limits_and_its_own_namespaces_never_anothers() {
    let base = "[server]\nlisten = [\"127.0.0.1:1\"]\n\n[limits.api]\nkey = \"client_ip\"\nrate = \"5/s\"\n";
    let cluster = "[limits.\"shop.a.rps\"]\nkey = \"client_ip\"\nrate = \"1/s\"\n\n[limits.\"bank.v.rps\"]\nkey = \"client_ip\"\nrate = \"1/s\"\n\n\
        [[routes]]\nname = \"shop.a.1\"\nhost = \"a.example\"\npath_prefix = \"/\"\nupstream = \"u\"\nlimits = [\"shop.a.rps\", \"api\"]\n\n\
        [[routes]]\nname = \"shop.b.1\"\nhost = \"b.example\"\npath_prefix = \"/\"\nupstream = \"u\"\nlimits = [\"bank.v.rps\"]\n\n\
        [[routes]]\nname = \"bank.v.1\"\nhost = \"v.example\"\npath_prefix = \"/\"\nupstream = \"u\"\nlimits = [\"bank.v.rps\"]\n";
    let (m, problems) = merge(base, cluster).expect("merge");
    let t: Table = m.parse().expect("toml");
    let names: Vec<&str> = t["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["shop.a.1", "bank.v.1"], "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains("shop.b.1") && p.contains("bank.v.rps")),
        "{problems:?}"
    );
}

#[test]
fn client_certificates_stand_only_where_base_sets_the_same() {
    let listens = "[server]\nlisten = [\"127.0.0.1:1\"]\ntls_listen = [\"127.0.0.1:2\"]\n";
    let mtls =
        "[tls]\nclient_ca = \"/etc/tollgate/tls/shop/ca/ca.crt\"\nclient_auth = \"require\"\n";
    // BASE serves certificates of its own: a tenant cannot impose client certificates on
    // BASE's hosts.
    let own =
        format!("{listens}[tls]\ncertificates = [{{ cert = \"/b.crt\", key = \"/b.key\" }}]\n");
    assert!(merge(&own, mtls).is_err());
    // BASE sets none and serves none: the listeners are the cluster's.
    assert!(merge(listens, mtls).is_ok());
    // BASE looser (optional) or another CA: the Ingress would be served looser than asked.
    let optional = format!("{listens}[tls]\nclient_ca = \"/etc/tollgate/tls/shop/ca/ca.crt\"\nclient_auth = \"optional\"\n");
    assert!(merge(&optional, mtls).is_err());
    let other =
        format!("{listens}[tls]\nclient_ca = \"/base-ca.crt\"\nclient_auth = \"require\"\n");
    assert!(merge(&other, mtls).is_err());
    // BASE alike: served.
    let same = format!("{listens}{mtls}");
    let (m, _) = merge(&same, mtls).expect("alike");
    let t: Table = m.parse().expect("toml");
    assert_eq!(t["tls"]["client_auth"].as_str(), Some("require"));
    // And an Ingress that asks nothing leaves BASE's as they are.
    assert!(merge(&same, CLUSTER_TLS).is_ok());
}

#[test]
fn a_tenant_never_passes_bases_tls_through() {
    let base = "[upstreams.admin]\ntargets = [\"127.0.0.1:2\"]\n\n[[tls_passthrough]]\nhosts = [\"vault.example\"]\nupstream = \"admin\"\n\n[[routes]]\nname = \"admin\"\nhost = \"admin.example\"\npath_prefix = \"/\"\nupstream = \"admin\"\n";
    let cluster = "[upstreams.admin]\ntargets = [\"evil:443\"]\n\n[upstreams.\"t.ok.443\"]\ntargets = [\"ok:443\"]\n\n[[tls_passthrough]]\nhosts = [\"ADMIN.example\"]\nupstream = \"t.ok.443\"\n\n[[tls_passthrough]]\nhosts = [\"*.example\"]\nupstream = \"t.ok.443\"\n\n[[tls_passthrough]]\nhosts = [\"mine.example\"]\nupstream = \"admin\"\n\n[[tls_passthrough]]\nhosts = [\"tenant.test\"]\nupstream = \"t.ok.443\"\n";
    let (text, problems) = merge(base, cluster).expect("merges");
    let t: Table = text.parse().expect("toml");
    let passed: Vec<String> = t["tls_passthrough"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|p| {
            format!(
                "{} {}",
                p["hosts"][0].as_str().unwrap_or(""),
                p["upstream"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(passed, ["vault.example admin", "tenant.test t.ok.443"]);
    for want in [
        "tls_passthrough of admin.example: the host is BASE.toml's",
        "tls_passthrough of *.example: the host is BASE.toml's",
        "tls_passthrough to admin: BASE.toml defines that upstream",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{want}: {problems:?}"
        );
    }
}
