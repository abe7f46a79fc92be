//! `tollgate run --kubernetes`: the config served is BASE.toml (`--config`, or nothing) with
//! the cluster's Ingresses added, translated live by `tollgate-kube`. Each translation goes
//! through the reload path every config change takes (one build, one atomic swap), so a
//! translation the config refuses leaves the last good one serving.

use crate::Reloader;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tollgate_config::model::Config;
use tollgate_config::mounted::Files;
use tollgate_kube::metrics::KubeMetrics;
use tollgate_kube::translate::Translated;

/// The flags of `run` that make it a controller (names as ingress-nginx's).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// Serve the cluster's Ingresses (on top of --config, if given).
    #[arg(long)]
    pub kubernetes: bool,
    /// The kubeconfig to use; without it $KUBECONFIG, then the pod's service account.
    #[arg(long, requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,
    /// The spec.controller of the IngressClasses served.
    #[arg(long, default_value = tollgate_kube::select::DEFAULT_CONTROLLER, requires = "kubernetes")]
    pub controller_class: String,
    /// A class served by name too (ingressClassName or the kubernetes.io/ingress.class
    /// annotation): `nginx` takes over ingress-nginx's Ingresses unedited.
    #[arg(long, requires = "kubernetes")]
    pub ingress_class: Option<String>,
    /// Serve Ingresses that name no class.
    #[arg(long, requires = "kubernetes")]
    pub watch_ingress_without_class: bool,
    /// Watch this namespace only.
    #[arg(long, requires = "kubernetes")]
    pub watch_namespace: Option<String>,
    /// The controller's ConfigMap (NAMESPACE/NAME): ingress-nginx's global keys.
    #[arg(long, requires = "kubernetes")]
    pub configmap: Option<String>,
    /// A kubernetes.io/tls Secret (NAMESPACE/NAME) served for names no other certificate
    /// holds (ingress-nginx's flag); without it, a self-signed one made at start.
    #[arg(long, requires = "kubernetes", value_name = "NAMESPACE/NAME")]
    pub default_ssl_certificate: Option<String>,
    /// The Service whose addresses the Ingresses' status gets (NAMESPACE/NAME).
    #[arg(
        long,
        requires = "kubernetes",
        value_name = "NAMESPACE/NAME",
        conflicts_with = "publish_status_address"
    )]
    pub publish_service: Option<String>,
    /// The addresses the Ingresses' status gets (IPs or host names, comma-separated).
    #[arg(long, requires = "kubernetes", value_name = "ADDR[,ADDR]")]
    pub publish_status_address: Option<String>,
    /// The Lease that elects the replica that writes status.
    #[arg(long, requires = "kubernetes", default_value = "tollgate-leader")]
    pub election_id: String,
    /// The Lease's namespace; default $POD_NAMESPACE, else `default`.
    #[arg(long, requires = "kubernetes")]
    pub election_namespace: Option<String>,
    /// How long a leader's Lease holds without renewal (renewed every quarter of it).
    #[arg(long, requires = "kubernetes", default_value = "30s", value_parser = ttl)]
    pub election_ttl: std::time::Duration,
    /// Honour the ssl-passthrough annotation: TLS for those hosts is relayed unread by its
    /// ClientHello's name (ingress-nginx's flag; without it the annotation is ignored).
    #[arg(long, requires = "kubernetes")]
    pub enable_ssl_passthrough: bool,
    /// The `controllerName` of the GatewayClasses served (the Gateway API).
    #[arg(
        long,
        requires = "kubernetes",
        default_value = "tollgate.io/gateway-controller"
    )]
    pub gateway_class_controller: String,
    /// On shutdown, the leader empties the status of the Ingresses it served.
    #[arg(long, requires = "kubernetes", num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    pub update_status_on_shutdown: bool,
}

fn ttl(s: &str) -> Result<std::time::Duration, String> {
    let d = tollgate_config::parse_duration(s)?;
    if d < std::time::Duration::from_secs(2) {
        return Err(format!("{s}: at least 2s"));
    }
    Ok(d)
}

/// This replica's name in the Lease: $POD_NAME (the Deployment sets it), else the host name
/// and process id.
fn identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "tollgate".into());
            format!("{host}-{}", std::process::id())
        })
}

impl KubeArgs {
    /// `tls`: the gateway runs TLS (a Gateway's HTTPS listeners can be served).
    pub fn options(&self, tls: bool) -> Result<tollgate_kube::Options, String> {
        Ok(tollgate_kube::Options {
            classes: tollgate_kube::select::Classes {
                controller: self.controller_class.clone(),
                ingress_class: self.ingress_class.clone(),
                without_class: self.watch_ingress_without_class,
            },
            namespace: self.watch_namespace.clone(),
            configmap: self.configmap.clone(),
            default_certificate: self.default_ssl_certificate.clone(),
            publish: tollgate_kube::status::Publish::from_flags(
                self.publish_service.as_deref(),
                self.publish_status_address.as_deref(),
            )?,
            election: tollgate_kube::leader::Election {
                name: self.election_id.clone(),
                namespace: self
                    .election_namespace
                    .clone()
                    .or_else(|| {
                        std::env::var("POD_NAMESPACE")
                            .ok()
                            .filter(|n| !n.is_empty())
                    })
                    .unwrap_or_else(|| "default".into()),
                identity: identity(),
                ttl: self.election_ttl,
            },
            update_status_on_shutdown: self.update_status_on_shutdown,
            ssl_passthrough: self.enable_ssl_passthrough,
            gateway_controller: self.gateway_class_controller.clone(),
            tls,
        })
    }
}

/// The cluster's part of the config, as last translated.
#[derive(Default)]
pub struct Cluster {
    latest: Mutex<Option<Translated>>,
}

impl Cluster {
    /// BASE.toml (`base`; `/dev/null` without --config) with the cluster's part, the Secrets
    /// it names held in memory (before the first translation: the default certificate).
    pub fn load(&self, base: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(base)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", base.display()))?;
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        mount(&volume_of(&latest)).map_err(|e| anyhow::anyhow!(e))?;
        let cluster = latest
            .as_ref()
            .and_then(|t| t.toml.as_deref())
            .unwrap_or("");
        let (merged, problems) = tollgate_kube::merge::merge(&text, cluster)
            .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
        for p in problems {
            tracing::warn!(event = "kube_translation_problem", problem = %p, "not served");
        }
        tollgate_config::load_text(base, &merged)
            .map_err(|e| anyhow::anyhow!("invalid config:\n{e}"))
    }
}

/// The Secrets a translation holds; before the first, the default certificate alone.
fn volume_of(latest: &Option<Translated>) -> Arc<Files> {
    match latest {
        Some(t) => t.volume.clone(),
        None => Arc::new(tollgate_kube::secrets::volume(
            &Default::default(),
            &[],
            None,
        )),
    }
}

/// The cluster's endpoints, placed under the names its targets are written as.
fn place(eps: &tollgate_kube::endpoints::Endpoints) {
    let map = eps
        .iter()
        .map(|(name, addrs)| (name.clone(), addrs.as_slice().into()))
        .collect();
    tollgate_upstream::placed::CLUSTER.replace(map);
}

fn mount(volume: &Arc<Files>) -> Result<(), String> {
    tollgate_config::mounted::replace(volume.clone())
        .map_err(|p| format!("{}: not a path a Secret is held at", p.display()))
}

/// `tollgate check --kubernetes BASE.toml`: BASE as the controller starts on it, before the
/// cluster's part (the default certificate held).
pub fn check_base(base: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(base).map_err(|e| format!("{}: {e}", base.display()))?;
    mount(&volume_of(&None))?;
    let (merged, _) = tollgate_kube::merge::merge(&text, "")?;
    tollgate_config::check_text(base, &merged).map_err(|e| e.to_string())
}

/// BASE.toml with `cluster` and the Secrets it names, checked as it would load (names not
/// looked up): the config, then the certificates as the TLS listeners would read them.
/// The candidate's Secrets are held only while it is checked, under the lock `load` takes,
/// and the served ones put back after: a reload never reads a candidate's files, and a
/// candidate refused leaves the listeners on what they serve.
fn check(c: &Cluster, base: &Path, cluster: &str, volume: &Arc<Files>) -> Result<(), String> {
    let text = std::fs::read_to_string(base).map_err(|e| format!("{}: {e}", base.display()))?;
    let (merged, _) = tollgate_kube::merge::merge(&text, cluster)?;
    let latest = c.latest.lock().unwrap_or_else(|e| e.into_inner());
    mount(volume)?;
    let checked = tollgate_config::check_text(base, &merged)
        .map_err(|e| e.to_string())
        .and_then(|cfg| crate::certificates_ok(&cfg).map_err(|e| e.join("; ")));
    mount(&volume_of(&latest))?;
    checked
}

/// The background service: the reflectors, and a reload for each translation.
pub struct Controller {
    pub args: KubeArgs,
    pub reloader: Arc<Reloader>,
    pub cluster: Arc<Cluster>,
    /// The Gateways' listeners, served as translations name them.
    pub added: Arc<crate::added::Added>,
}

/// A Kubernetes client, retried every 5 s until there is one; `None` on shutdown.
async fn client(
    kubeconfig: Option<&std::path::Path>,
    shutdown: &mut pingora::server::ShutdownWatch,
) -> Option<tollgate_kube::Client> {
    loop {
        match tollgate_kube::client(kubeconfig).await {
            Ok(c) => return Some(c),
            Err(e) => {
                tracing::error!(event = "kube_unreachable", error = %e, "no Kubernetes client yet: retrying in 5 s; BASE.toml serves meanwhile");
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                    _ = shutdown.changed() => return None,
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Controller {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let shared = self.reloader.shared.clone();
        let metrics = match KubeMetrics::register(&shared.metrics.registry) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(event = "kube_failed", error = %e, "controller metrics");
                return;
            }
        };
        let Some(client) = client(self.args.kubeconfig.as_deref(), &mut shutdown).await else {
            return;
        };
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        let (eps_tx, mut eps) = tokio::sync::watch::channel(Arc::default());
        let base = self.reloader.path.clone();
        let cl = self.cluster.clone();
        let check =
            Arc::new(move |cluster: &str, volume: &Arc<Files>| check(&cl, &base, cluster, volume));
        let opts = match self.args.options(shared.tls.is_some()) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(event = "kube_failed", error = %e, "the controller's flags");
                return;
            }
        };
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut watching = tokio::spawn(tollgate_kube::watch::run(
            client,
            opts,
            metrics.clone(),
            check,
            tollgate_kube::watch::Sinks {
                config: tx,
                endpoints: eps_tx,
            },
            stop,
        ));
        // `ready`: the cluster's config serves (endpoints placed alone never make /readyz
        // ready before the first translation does).
        let synced = |ok: bool, ready: bool| {
            metrics
                .syncs
                .with_label_values(&[if ok { "ok" } else { "error" }])
                .inc();
            if ok {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                metrics.last_sync.set(now as i64);
                if ready {
                    shared.kube_syncing.store(false, Ordering::Relaxed);
                }
            }
        };
        loop {
            tokio::select! {
                // Endpoints alone: placed, and the pools take them up within a housekeeping
                // tick (no reload: routes, limits and pools stay).
                changed = eps.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    place(&eps.borrow_and_update());
                    metrics.endpoint_updates.inc();
                    synced(true, false);
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    // The endpoints sent before this translation, placed before its pools are built.
                    place(&eps.borrow_and_update());
                    let t = rx.borrow_and_update().clone();
                    let listeners = t.as_ref().map(|t| t.listeners.clone()).unwrap_or_default();
                    *self.cluster.latest.lock().unwrap_or_else(|e| e.into_inner()) = t;
                    let r = self.reloader.clone();
                    let ok = tokio::task::spawn_blocking(move || r.reload()).await.unwrap_or(false);
                    // The routes first, then the ports: a new port serves its routes at once.
                    if ok {
                        for p in self.added.set(&listeners, &shutdown).await {
                            tracing::warn!(event = "listener_failed", problem = %p, "a Gateway's listener is not served");
                        }
                    }
                    synced(ok, true);
                }
                _ = shutdown.changed() => break,
            }
        }
        // The status cleared (--update-status-on-shutdown) and the Lease handed back, within
        // bounds: an API server away does not hold the shutdown.
        let _ = stop_tx.send(true);
        if tokio::time::timeout(std::time::Duration::from_secs(10), &mut watching)
            .await
            .is_err()
        {
            watching.abort();
        }
    }
}
