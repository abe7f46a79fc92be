//! Tollgate's live Kubernetes ingress controller (`tollgate run --kubernetes`).
//!
//! The parts, each a module:
//! - [`select`]: which Ingresses are served, by class, as ingress-nginx decides it;
//! - [`translate`]: the chosen Ingresses (and the controller's ConfigMap) through the
//!   importer's own translation, `import-ingress`'s fail-closed rules included;
//! - [`endpoints`]: Service targets made their ready endpoints (EndpointSlices);
//! - [`secrets`]: the Secrets a translation names, held in memory, and the default
//!   certificate;
//! - [`merge`]: BASE.toml with the cluster's part added (BASE wins; an Ingress cannot take
//!   over a BASE definition);
//! - [`holdoff`]: changes batched (100 ms quiet, 500 ms at most);
//! - [`leader`]: the Lease election (client-go's), so one replica writes;
//! - [`status`]: the Ingresses' `.status.loadBalancer`, written by the leader;
//! - [`events`]: each Ingress's translation problems as Events on it, by the leader;
//! - [`gateways`]: the Gateway API's objects through `tollgate-gateway-api`, beside the
//!   Ingresses; [`gateway_status`]: their statuses, by the leader;
//! - [`watch`]: the reflectors and the loop;
//! - [`metrics`]: the `tollgate_kube_*` series.
//!
//! The pure parts are tested without IO; `gateway/tests/kubernetes.rs` runs the binary
//! against the API server stand-in (`crates/kube-standin`) with kubectl.

pub mod endpoints;
pub mod events;
pub mod gateway_status;
pub mod gateways;
pub mod holdoff;
pub mod leader;
pub mod merge;
pub mod metrics;
pub mod secrets;
pub mod select;
pub mod status;
pub mod translate;
pub mod watch;

use std::path::Path;

/// The controller's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub classes: select::Classes,
    /// `--watch-namespace`: Ingresses, Services and EndpointSlices of this namespace only.
    pub namespace: Option<String>,
    /// `--configmap NS/NAME`: ingress-nginx's global keys that Tollgate maps.
    pub configmap: Option<String>,
    /// `--default-ssl-certificate NS/NAME`: the certificate for names no other holds.
    pub default_certificate: Option<String>,
    /// Where the Ingresses' status addresses come from.
    pub publish: status::Publish,
    /// The Lease that elects the one replica that writes status.
    pub election: leader::Election,
    /// `--update-status-on-shutdown`: the leader empties the status as it stops.
    pub update_status_on_shutdown: bool,
    /// `--enable-ssl-passthrough`: the `ssl-passthrough` annotation is honoured.
    pub ssl_passthrough: bool,
    /// `--gateway-class-controller`: the GatewayClasses' `controllerName` served.
    pub gateway_controller: String,
    /// The gateway runs TLS (BASE.toml's `tls_listen`): Gateways' HTTPS listeners can be
    /// served.
    pub tls: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    #[error("no cluster to talk to (no --kubeconfig, no $KUBECONFIG, not in a pod): {0}")]
    Infer(String),
    #[error("the Kubernetes client: {0}")]
    Client(String),
}

/// The client type the controller talks to the API server with.
pub use kube::Client;

/// A client from `kubeconfig`, else `$KUBECONFIG` or `~/.kube/config`, else the pod's
/// service account.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, Error> {
    let config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| Error::Kubeconfig(p.display().to_string(), e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Kubeconfig(p.display().to_string(), e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Infer(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}
