//! `.status.loadBalancer.ingress` of the Ingresses served, written by the leader only
//! ([`crate::leader`]) and only when it differs: the addresses of `--publish-service` (as
//! ingress-nginx reads a Service: a LoadBalancer's ingress and external IPs, a NodePort's
//! external IPs, else its cluster IP; an ExternalName's name) or `--publish-status-address`.
//! Without either, no status is written (ingress-nginx then publishes its pods' node
//! addresses, which a controller behind a Service rarely wants).

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{Ingress, IngressLoadBalancerIngress};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

/// Where the addresses come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Publish {
    #[default]
    Nothing,
    /// `--publish-service NAMESPACE/NAME`.
    Service { namespace: String, name: String },
    /// `--publish-status-address ADDR[,ADDR]`: IP addresses or host names.
    Addresses(Vec<String>),
}

impl Publish {
    /// From the two flags (clap makes them exclusive). A service not `NAMESPACE/NAME` is an
    /// error, as an empty address is.
    pub fn from_flags(service: Option<&str>, addresses: Option<&str>) -> Result<Self, String> {
        match (service, addresses) {
            (Some(s), _) => match s.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    Ok(Publish::Service {
                        namespace: ns.into(),
                        name: name.into(),
                    })
                }
                _ => Err(format!("--publish-service {s:?}: not NAMESPACE/NAME")),
            },
            (None, Some(a)) => {
                let list: Vec<String> = a.split(',').map(|s| s.trim().to_string()).collect();
                if list.iter().any(String::is_empty) {
                    return Err(format!("--publish-status-address {a:?}: an empty address"));
                }
                Ok(Publish::Addresses(list))
            }
            (None, None) => Ok(Publish::Nothing),
        }
    }
}

fn entry(addr: &str) -> IngressLoadBalancerIngress {
    if addr.parse::<IpAddr>().is_ok() {
        IngressLoadBalancerIngress {
            ip: Some(addr.to_string()),
            ..Default::default()
        }
    } else {
        IngressLoadBalancerIngress {
            hostname: Some(addr.to_string()),
            ..Default::default()
        }
    }
}

/// Sorted and without repeats, so that a status that says the same in another order is not
/// written again.
fn tidy(mut v: Vec<IngressLoadBalancerIngress>) -> Vec<IngressLoadBalancerIngress> {
    let key = |e: &IngressLoadBalancerIngress| (e.ip.clone(), e.hostname.clone());
    v.sort_by_key(key);
    v.dedup_by_key(|e| key(e));
    v
}

/// The addresses `--publish-status-address` gives.
pub fn of_addresses(list: &[String]) -> Vec<IngressLoadBalancerIngress> {
    tidy(list.iter().map(|a| entry(a)).collect())
}

/// The addresses a Service is reached at, as ingress-nginx reads them.
pub fn of_service(svc: &Service) -> Vec<IngressLoadBalancerIngress> {
    let spec = svc.spec.clone().unwrap_or_default();
    let external: Vec<IngressLoadBalancerIngress> = spec
        .external_ips
        .iter()
        .flatten()
        .map(|a| entry(a))
        .collect();
    let cluster_ip = || {
        spec.cluster_ip
            .iter()
            .filter(|ip| !ip.is_empty() && *ip != "None")
            .map(|ip| entry(ip))
            .collect::<Vec<_>>()
    };
    let out = match spec.type_.as_deref().unwrap_or("ClusterIP") {
        "ExternalName" => spec.external_name.iter().map(|n| entry(n)).collect(),
        "LoadBalancer" => {
            let mut v: Vec<IngressLoadBalancerIngress> = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .into_iter()
                .flatten()
                .map(|i| IngressLoadBalancerIngress {
                    ip: i.ip.clone(),
                    hostname: i.hostname.clone(),
                    ..Default::default()
                })
                .collect();
            v.extend(external);
            v
        }
        "NodePort" if !external.is_empty() => external,
        _ => cluster_ip(),
    };
    tidy(out)
}

/// What an Ingress's status says now, tidied.
pub fn current(ing: &Ingress) -> Vec<IngressLoadBalancerIngress> {
    tidy(
        ing.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.clone())
            .unwrap_or_default(),
    )
}

fn id(ing: &Ingress) -> String {
    format!(
        "{}/{}",
        ing.metadata.namespace.as_deref().unwrap_or(""),
        ing.metadata.name.as_deref().unwrap_or("")
    )
}

/// The Ingresses among `ingresses` that are served (`served`, by NAMESPACE/NAME) and whose
/// status is not `want`.
pub fn to_write<'a>(
    ingresses: &'a [Arc<Ingress>],
    served: &BTreeSet<String>,
    want: &[IngressLoadBalancerIngress],
) -> Vec<&'a Ingress> {
    ingresses
        .iter()
        .map(Arc::as_ref)
        .filter(|i| served.contains(&id(i)) && current(i) != want)
        .collect()
}

/// One round, by the leader: each served Ingress whose status differs is written (`clear`:
/// written empty, on shutdown). How many were written and how many refused.
pub async fn round(
    client: &kube::Client,
    publish: &Publish,
    ingresses: &[Arc<Ingress>],
    served: &BTreeSet<String>,
    clear: bool,
) -> (usize, usize) {
    use kube::api::{Api, Patch, PatchParams};
    let want = match (clear, publish) {
        (true, _) => Vec::new(),
        (false, Publish::Nothing) => return (0, 0),
        (false, Publish::Addresses(a)) => of_addresses(a),
        (false, Publish::Service { namespace, name }) => {
            let api: Api<Service> = Api::namespaced(client.clone(), namespace);
            match api.get_opt(name).await {
                Ok(Some(svc)) => of_service(&svc),
                Ok(None) => {
                    tracing::warn!(event = "kube_status_skipped", service = %format!("{namespace}/{name}"), "--publish-service names no Service: no status written");
                    return (0, 0);
                }
                Err(e) => {
                    tracing::warn!(event = "kube_status_skipped", error = %e, "the published Service could not be read: no status written");
                    return (0, 0);
                }
            }
        }
    };
    let (mut written, mut refused) = (0, 0);
    let body = serde_json::json!({"status": {"loadBalancer": {"ingress": want}}});
    for ing in to_write(ingresses, served, &want) {
        let ns = ing.metadata.namespace.as_deref().unwrap_or("");
        let name = ing.metadata.name.as_deref().unwrap_or("");
        let api: Api<Ingress> = Api::namespaced(client.clone(), ns);
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => written += 1,
            Err(e) => {
                refused += 1;
                tracing::warn!(event = "kube_status_failed", ingress = %format!("{ns}/{name}"), error = %e, "status not written");
            }
        }
    }
    if written > 0 {
        tracing::info!(
            event = "kube_status_written",
            ingresses = written,
            cleared = clear,
            "Ingress status written"
        );
    }
    (written, refused)
}

/// The leader's status writer: a round after each translation, each change of leadership
/// and every 30 s (a LoadBalancer's address may come late), until `stop`; then, with
/// `clear_on_shutdown` and still leading, every served Ingress's status emptied.
pub struct Writer {
    pub client: kube::Client,
    pub publish: Publish,
    pub clear_on_shutdown: bool,
    pub ingresses: kube::runtime::reflector::Store<Ingress>,
    pub served: tokio::sync::watch::Receiver<BTreeSet<String>>,
    pub leading: tokio::sync::watch::Receiver<bool>,
}

impl Writer {
    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            if *self.leading.borrow_and_update() {
                self.served.borrow_and_update();
                self.round(false).await;
            }
            tokio::select! {
                r = self.served.changed() => if r.is_err() { break },
                r = self.leading.changed() => if r.is_err() { break },
                _ = tokio::time::sleep(std::time::Duration::from_secs(30)) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        // Never with nothing published: it wrote nothing (during a switch with
        // --ingress-class nginx, the status is ingress-nginx's).
        if self.clear_on_shutdown && self.publish != Publish::Nothing && *self.leading.borrow() {
            self.round(true).await;
        }
    }

    /// One [`round`] on what is served now.
    async fn round(&self, clear: bool) -> (usize, usize) {
        let served = self.served.borrow().clone();
        round(
            &self.client,
            &self.publish,
            &self.ingresses.state(),
            &served,
            clear,
        )
        .await
    }
}

#[cfg(test)]
mod tests;
