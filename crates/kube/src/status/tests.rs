use super::*;
use serde_json::json;

fn svc(v: serde_json::Value) -> Service {
    serde_json::from_value(v).expect("service")
}

fn ips(v: &[IngressLoadBalancerIngress]) -> Vec<String> {
    v.iter()
        .map(|e| {
            e.ip.clone()
                .or_else(|| e.hostname.clone())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_service_is_read_as_ingress_nginx_reads_it() {
    let lb = svc(
        json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1", "externalIPs": ["192.0.2.9"]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example"}]}}}),
    );
    assert_eq!(
        ips(&of_service(&lb)),
        ["lb.example", "192.0.2.9", "203.0.113.7"]
    );
    let pending = svc(json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}}));
    assert!(of_service(&pending).is_empty(), "no address yet: nothing");
    let node = svc(
        json!({"spec": {"type": "NodePort", "clusterIP": "10.0.0.2", "externalIPs": ["192.0.2.1"]}}),
    );
    assert_eq!(ips(&of_service(&node)), ["192.0.2.1"]);
    let plain = svc(json!({"spec": {"clusterIP": "10.0.0.3"}}));
    assert_eq!(ips(&of_service(&plain)), ["10.0.0.3"]);
    let headless = svc(json!({"spec": {"clusterIP": "None"}}));
    assert!(of_service(&headless).is_empty());
    let name = svc(json!({"spec": {"type": "ExternalName", "externalName": "edge.example"}}));
    assert_eq!(
        of_service(&name)[0].hostname.as_deref(),
        Some("edge.example")
    );
}

#[test]
fn the_flags_and_hostile_spellings() {
    assert_eq!(
        Publish::from_flags(Some("ingress/tollgate"), None),
        Ok(Publish::Service {
            namespace: "ingress".into(),
            name: "tollgate".into()
        })
    );
    for bad in ["tollgate", "/x", "x/", "a/b/c"] {
        assert!(Publish::from_flags(Some(bad), None).is_err(), "{bad}");
    }
    let a = Publish::from_flags(None, Some("203.0.113.7, lb.example,203.0.113.7")).expect("ok");
    let Publish::Addresses(list) = a else {
        panic!("addresses")
    };
    let e = of_addresses(&list);
    assert_eq!(
        ips(&e),
        ["lb.example", "203.0.113.7"],
        "tidy: sorted, once each"
    );
    assert_eq!(e[1].ip.as_deref(), Some("203.0.113.7"));
    assert_eq!(e[0].hostname.as_deref(), Some("lb.example"));
    assert!(Publish::from_flags(None, Some("1.2.3.4,,")).is_err());
    assert_eq!(Publish::from_flags(None, None), Ok(Publish::Nothing));
}

#[test]
fn only_served_ingresses_whose_status_differs_are_written() {
    let ing = |name: &str, ip: Option<&str>| -> Arc<Ingress> {
        let mut v = json!({"metadata": {"name": name, "namespace": "shop"}});
        if let Some(ip) = ip {
            v["status"] = json!({"loadBalancer": {"ingress": [{"ip": ip}]}});
        }
        Arc::new(serde_json::from_value(v).expect("ingress"))
    };
    let all = vec![
        ing("same", Some("203.0.113.7")),
        ing("old", Some("198.51.100.1")),
        ing("none", None),
        ing("theirs", None),
    ];
    let served: BTreeSet<String> = ["shop/same", "shop/old", "shop/none"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let want = of_addresses(&["203.0.113.7".to_string()]);
    let names: Vec<&str> = to_write(&all, &served, &want)
        .iter()
        .filter_map(|i| i.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["old", "none"]);
    // Cleared on shutdown: those that say anything.
    let names: Vec<&str> = to_write(&all, &served, &[])
        .iter()
        .filter_map(|i| i.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["same", "old"]);
}
