//! An upstream's targets from the cluster: the importer names each Service as its cluster
//! DNS name (`SVC.NS.svc.cluster.local:PORT`, reached through the Service's ClusterIP); with
//! the Service and its EndpointSlices at hand, the target becomes the ready endpoints
//! themselves (pod balancing, as ingress-nginx does), on the Service port's `targetPort` as
//! the slices say it. Endpoints not ready (terminating ones included) are left out. A
//! Service without slices or without the port keeps its DNS name.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::BTreeMap;

/// The ready addresses (`IP:PORT`) of each Service port: by (namespace, service, port).
pub type Endpoints = BTreeMap<(String, String, i32), Vec<String>>;

/// What the slices say of every Service port.
pub fn ready(services: &[&Service], slices: &[&EndpointSlice]) -> Endpoints {
    let mut out = Endpoints::new();
    // The slices by namespace and Service, looked up once per Service port (not every slice
    // per port: a cluster of 5,000 Services and 20,000 slices made that 10^8 comparisons).
    let mut by_service: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if !matches!(s.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let ns = s.metadata.namespace.as_deref().unwrap_or("");
        if let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
        {
            by_service.entry((ns, svc.as_str())).or_default().push(s);
        }
    }
    for svc in services {
        let (Some(ns), Some(name)) = (&svc.metadata.namespace, &svc.metadata.name) else {
            continue;
        };
        let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
        for p in ports.into_iter().flatten() {
            let mut addrs: Vec<String> = Vec::new();
            let mut seen = false;
            // FQDN slices (deprecated) would name hosts outside the cluster: only addresses.
            let theirs = by_service.get(&(ns.as_str(), name.as_str()));
            for slice in theirs.into_iter().flatten() {
                // The slice's port of the same name (unnamed: the Service's only port).
                let Some(target) = slice
                    .ports
                    .iter()
                    .flatten()
                    .find(|sp| sp.name.as_deref().unwrap_or("") == p.name.as_deref().unwrap_or(""))
                    .and_then(|sp| sp.port)
                else {
                    continue;
                };
                seen = true;
                for e in &slice.endpoints {
                    let c = e.conditions.as_ref();
                    // Unset means ready (the API's rule); terminating endpoints are not ready.
                    let ready = c.and_then(|c| c.ready).unwrap_or(true)
                        && !c.and_then(|c| c.terminating).unwrap_or(false);
                    if !ready {
                        continue;
                    }
                    for a in &e.addresses {
                        let a = if a.contains(':') {
                            format!("[{a}]:{target}")
                        } else {
                            format!("{a}:{target}")
                        };
                        if !addrs.contains(&a) {
                            addrs.push(a);
                        }
                    }
                }
            }
            if seen {
                addrs.sort();
                out.insert((ns.clone(), name.clone(), p.port), addrs);
            }
        }
    }
    out
}

/// `SVC.NS.svc.cluster.local:PORT` as (namespace, service, port).
pub fn service_of(target: &str) -> Option<(String, String, i32)> {
    let (host, port) = target.rsplit_once(':')?;
    let rest = host.strip_suffix(".svc.cluster.local")?;
    let (svc, ns) = rest.split_once('.')?;
    if ns.contains('.') {
        return None;
    }
    Some((ns.to_string(), svc.to_string(), port.parse().ok()?))
}

/// Every upstream target of the translated config that names a Service with ready endpoints
/// becomes those endpoints. One with none keeps its DNS name (the ClusterIP, which has no
/// ready endpoint either: the connection fails and its routes answer 502/503).
pub fn place(config: &mut toml::Table, eps: &Endpoints) {
    let Some(toml::Value::Table(ups)) = config.get_mut("upstreams") else {
        return;
    };
    for (_, up) in ups.iter_mut() {
        let Some(toml::Value::Array(targets)) = up.get_mut("targets") else {
            continue;
        };
        let mut next = Vec::new();
        for t in targets.iter() {
            let Some(s) = t.as_str() else {
                next.push(t.clone());
                continue;
            };
            match service_of(s).and_then(|k| eps.get(&k)) {
                Some(addrs) if !addrs.is_empty() => {
                    next.extend(addrs.iter().cloned().map(toml::Value::String))
                }
                _ => next.push(t.clone()),
            }
        }
        *targets = next;
    }
}

#[cfg(test)]
mod tests {
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
        let eps = ready(&[&s], &[&a, &b, &other, &fqdn]);
        assert_eq!(
            eps[&("shop".into(), "web".into(), 80)],
            ["10.0.0.1:8080", "10.0.0.2:8080", "[fd00::1]:8080"]
        );
        assert!(
            !eps.contains_key(&("shop".into(), "web".into(), 81)),
            "no slice names port admin"
        );
        let mut cfg: toml::Table = "[upstreams.u]\ntargets = [\"web.shop.svc.cluster.local:80\", \"web.shop.svc.cluster.local:81\", \"127.0.0.1:9\"]\n".parse().expect("toml");
        place(&mut cfg, &eps);
        let t: Vec<&str> = cfg["upstreams"]["u"]["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(
            t,
            [
                "10.0.0.1:8080",
                "10.0.0.2:8080",
                "[fd00::1]:8080",
                "web.shop.svc.cluster.local:81",
                "127.0.0.1:9"
            ]
        );
    }

    #[test]
    fn service_names() {
        assert_eq!(
            service_of("web.shop.svc.cluster.local:80"),
            Some(("shop".into(), "web".into(), 80))
        );
        for no in [
            "web.shop.svc.cluster.local",
            "web.svc.cluster.local:80",
            "a.b.c.svc.cluster.local:80",
            "web.shop:80",
            "web.shop.svc.cluster.local:x",
        ] {
            assert_eq!(service_of(no), None, "{no}");
        }
    }
}
