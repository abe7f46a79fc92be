//! An upstream's targets from the cluster: the importer names each Service as its cluster
//! DNS name (`SVC.NS.svc.cluster.local:PORT`, reached through the Service's ClusterIP); with
//! the Service and its EndpointSlices at hand, the controller places the ready endpoints
//! themselves under that name (pod balancing, as ingress-nginx does), on the Service port's
//! `targetPort` as the slices say it ([`tollgate_upstream::placed`]: the pools take them up
//! without a reload). Endpoints not ready (terminating ones included) are left out. A
//! Service without slices or without the port is not placed: its DNS name serves.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// The ready addresses of each Service port, by the target name the importer writes for it.
pub type Endpoints = BTreeMap<String, Vec<SocketAddr>>;

/// The target name of a Service port (the importer's [`tollgate_ingress`] spelling).
pub fn target_name(ns: &str, service: &str, port: i32) -> String {
    format!("{service}.{ns}.svc.cluster.local:{port}")
}

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
            let mut addrs: Vec<SocketAddr> = Vec::new();
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
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|&p| p != 0)
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
                    // Only addresses (an FQDN or garbage in an IP slice is left out).
                    let ips = e.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok());
                    addrs.extend(ips.map(|ip| SocketAddr::new(ip, target)));
                }
            }
            if seen {
                addrs.sort();
                addrs.dedup();
                out.insert(target_name(ns, name, p.port), addrs);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
