//! The reflectors (kube-rs: list, then watch from the list's resourceVersion, re-listing on
//! 410 Gone, backing off while the API server is away) and the loop that batches their
//! changes ([`crate::holdoff`]) into translations. Nothing is translated before every
//! reflector has listed once; while the API server is away the reflectors keep what they
//! held, so nothing changes and the last translation keeps serving.

use crate::endpoints::Endpoints;
use crate::holdoff::Holdoff;
use crate::metrics::KubeMetrics;
use crate::translate::{translate, Cluster, Translated};
use crate::Options;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::{mpsc, watch as latest};

enum Seen {
    Changed,
    Synced,
}

fn reflect<K>(
    kind: &'static str,
    api: Api<K>,
    cfg: watcher::Config,
    tx: mpsc::UnboundedSender<(&'static str, Seen)>,
    m: KubeMetrics,
    trim: fn(&mut K),
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    reflect_some(kind, api, cfg, tx, m, trim, None)
}

/// Which changes of a kind are told to the translations (the others are kept, unsaid).
type Wanted<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

/// [`reflect`], telling only the changes `wanted` wants (all, without one).
fn reflect_some<K>(
    kind: &'static str,
    api: Api<K>,
    cfg: watcher::Config,
    tx: mpsc::UnboundedSender<(&'static str, Seen)>,
    m: KubeMetrics,
    trim: fn(&mut K),
    wanted: Option<Wanted<K>>,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    tokio::spawn(async move {
        let mut events = reflector::reflector(writer, watcher(api, cfg).modify(trim))
            .default_backoff()
            .boxed();
        let mut lists = 0u64;
        while let Some(ev) = events.next().await {
            let seen = match ev {
                Ok(watcher::Event::Init) => {
                    lists += 1;
                    if lists > 1 {
                        m.restarts.with_label_values(&[kind]).inc();
                        tracing::info!(event = "kube_relist", kind, "listing again");
                    }
                    continue;
                }
                Ok(watcher::Event::InitApply(_)) => continue,
                Ok(watcher::Event::InitDone) => Seen::Synced,
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o))
                    if wanted.as_ref().is_some_and(|w| !w(&o)) =>
                {
                    continue
                }
                Ok(_) => Seen::Changed,
                Err(e) => {
                    m.restarts.with_label_values(&[kind]).inc();
                    tracing::warn!(event = "kube_watch_failed", kind, error = %e, "watch failed: retrying with backoff; what was seen keeps serving");
                    continue;
                }
            };
            if tx.send((kind, seen)).is_err() {
                return;
            }
        }
    });
    reader
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

struct Stores {
    classes: Store<IngressClass>,
    ingresses: Store<Ingress>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    configmap: Option<Store<ConfigMap>>,
    /// The watched namespaces' ConfigMaps, for `custom-headers`: a change is told only when
    /// an Ingress names the ConfigMap (a leader-election lock's beat is not a translation).
    configmaps: Store<ConfigMap>,
    secrets: Store<Secret>,
    /// The Gateway API's, when the API server serves its CRDs.
    gateway: Option<crate::gateways::Stores>,
}

/// What every reflector but the Secrets' keeps: all but the managed fields.
fn keep<K: Resource>(k: &mut K) {
    k.meta_mut().managed_fields = None;
}

impl Stores {
    /// The translation, and the Gateway API's statuses.
    fn translate(
        &self,
        opts: &Options,
        m: &KubeMetrics,
        check: crate::translate::Check,
    ) -> (Translated, Vec<tollgate_gateway_api::translate::Status>) {
        let (c, i, s, sec) = (
            self.classes.state(),
            self.ingresses.state(),
            self.services.state(),
            self.secrets.state(),
        );
        let cm = self
            .configmap
            .as_ref()
            .map(|s| s.state())
            .unwrap_or_default();
        let maps = self.configmaps.state();
        for (kind, n) in [
            ("IngressClass", c.len()),
            ("Ingress", i.len()),
            ("Service", s.len()),
            ("ControllerConfigMap", cm.len()),
            ("ConfigMap", maps.len()),
            ("Secret", sec.len()),
        ] {
            m.objects.with_label_values(&[kind]).set(n as i64);
        }
        let cluster = Cluster {
            classes: c.iter().map(Arc::as_ref).collect(),
            ingresses: i.iter().map(Arc::as_ref).collect(),
            services: s.iter().map(Arc::as_ref).collect(),
            configmap: cm.first().map(Arc::as_ref),
            configmaps: maps.iter().map(Arc::as_ref).collect(),
            secrets: sec.iter().map(Arc::as_ref).collect(),
            default_certificate: opts.default_certificate.as_deref(),
            ssl_passthrough: opts.ssl_passthrough,
        };
        let t = translate(&opts.classes, opts.configmap.as_deref(), &cluster, check);
        let Some(gs) = &self.gateway else {
            return (t, Vec::new());
        };
        for (kind, n) in gs.counts() {
            m.objects.with_label_values(&[kind]).set(n as i64);
        }
        let around = crate::gateways::Around {
            controller: &opts.gateway_controller,
            services: &cluster.services,
            secrets: &cluster.secrets,
            configmaps: &cluster.configmaps,
            tls: opts.tls,
            addresses: published(&opts.publish, &cluster.services),
        };
        let (t, out) = crate::gateways::with_gateways(
            t,
            &|refused, ingress_routes| gs.translate(&around, refused, ingress_routes),
            &cluster.secrets,
            &cluster.configmaps,
            opts.default_certificate.as_deref(),
            check,
        );
        (t, out.statuses)
    }

    /// Every Service port's ready endpoints now.
    fn endpoints(&self, m: &KubeMetrics) -> Endpoints {
        let (s, e) = (self.services.state(), self.slices.state());
        m.objects
            .with_label_values(&["EndpointSlice"])
            .set(e.len() as i64);
        let services: Vec<&Service> = s.iter().map(Arc::as_ref).collect();
        let slices: Vec<&EndpointSlice> = e.iter().map(Arc::as_ref).collect();
        crate::endpoints::ready(&services, &slices)
    }
}

/// The addresses a Gateway's status names: `--publish-status-address`, or what the
/// published Service is reached at.
fn published(p: &crate::status::Publish, services: &[&Service]) -> Vec<String> {
    use crate::status::Publish;
    let entries = match p {
        Publish::Nothing => return Vec::new(),
        Publish::Addresses(a) => crate::status::of_addresses(a),
        Publish::Service { namespace, name } => services
            .iter()
            .find(|s| {
                s.metadata.namespace.as_deref() == Some(namespace.as_str())
                    && s.metadata.name.as_deref() == Some(name.as_str())
            })
            .map(|s| crate::status::of_service(s))
            .unwrap_or_default(),
    };
    entries
        .into_iter()
        .filter_map(|e| e.ip.or(e.hostname))
        .collect()
}

/// Where the cluster goes: each translation, and the endpoints (sent before each
/// translation, and alone when only they changed). In each, the newest wins.
pub struct Sinks {
    pub config: latest::Sender<Option<Translated>>,
    pub endpoints: latest::Sender<Arc<Endpoints>>,
}

/// Watches the cluster and sends each translation and the endpoints to `out`, until `out`
/// is dropped or `stop` turns true. `check` judges a translation as the gateway would serve
/// it. Beside it, the Lease election and the leader's status writer; on stop the writer
/// finishes (clearing status if asked) before the Lease is handed back.
pub async fn run(
    client: Client,
    opts: Options,
    m: KubeMetrics,
    check: crate::translate::SharedCheck,
    out: Sinks,
    stop: latest::Receiver<bool>,
) {
    let (leading_tx, leading) = latest::channel(false);
    let (served_tx, served) = latest::channel(BTreeSet::new());
    let (elect_stop_tx, elect_stop) = latest::channel(false);
    let election = tokio::spawn(crate::leader::run(
        client.clone(),
        opts.election.clone(),
        m.clone(),
        leading_tx,
        elect_stop,
    ));
    let (stores, kinds, rx) = start(&client, &opts, &m).await;
    let (statuses_tx, statuses) = latest::channel(Arc::new(Vec::new()));
    let gateway_writer = tokio::spawn(crate::gateway_status::run(
        client.clone(),
        opts.gateway_controller.clone(),
        statuses,
        leading.clone(),
        stop.clone(),
    ));
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let events = tokio::spawn(crate::events::run(
        client.clone(),
        opts.election.identity.clone(),
        stores.ingresses.clone(),
        leading.clone(),
        events_rx,
    ));
    let writer = tokio::spawn(
        crate::status::Writer {
            client: client.clone(),
            publish: opts.publish.clone(),
            clear_on_shutdown: opts.update_status_on_shutdown,
            ingresses: stores.ingresses.clone(),
            served,
            leading,
        }
        .run(stop.clone()),
    );
    let outlets = Outlets {
        out,
        served: served_tx,
        events: events_tx,
        statuses: statuses_tx,
    };
    translations(&stores, kinds, rx, &opts, &m, &check, &outlets, stop).await;
    drop(outlets);
    let _ = events.await;
    let _ = writer.await;
    let _ = gateway_writer.await;
    let _ = elect_stop_tx.send(true);
    let _ = election.await;
}

type Events = mpsc::UnboundedReceiver<(&'static str, Seen)>;

/// Where each translation goes: the gateway, the status writer (the Ingresses served), the
/// Event recorder (the problems first seen).
struct Outlets {
    out: Sinks,
    served: latest::Sender<BTreeSet<String>>,
    events: mpsc::UnboundedSender<Vec<String>>,
    /// The Gateway API's statuses, to the leader's writer.
    statuses: latest::Sender<Arc<Vec<tollgate_gateway_api::translate::Status>>>,
}

/// Whether an Ingress of `ingresses` names a ConfigMap (`custom-headers: NS/NAME`), or a
/// BackendTLSPolicy does (its CA).
fn named_by(
    ingresses: Store<Ingress>,
    backend_tls: Option<Store<tollgate_gateway_api::types::backendtlspolicies::BackendTlsPolicy>>,
) -> Wanted<ConfigMap> {
    Box::new(move |cm: &ConfigMap| {
        let (Some(ns), Some(name)) = (&cm.metadata.namespace, &cm.metadata.name) else {
            return false;
        };
        let by_policy = backend_tls.as_ref().is_some_and(|s| {
            s.state().iter().any(|p| {
                p.metadata.namespace.as_deref() == Some(ns.as_str())
                    && p.spec
                        .validation
                        .ca_certificate_refs
                        .iter()
                        .flatten()
                        .any(|r| r.kind == "ConfigMap" && r.name == *name)
            })
        });
        by_policy
            || ingresses.state().iter().any(|i| {
                crate::translate::custom_headers_of(i)
                    .is_some_and(|v| v.split_once('/') == Some((ns.as_str(), name.as_str())))
            })
    })
}

/// The reflectors, how many kinds must list before the first translation, and their events.
async fn start(client: &Client, opts: &Options, m: &KubeMetrics) -> (Stores, usize, Events) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gateway = gateway_stores(client, opts, m, &tx).await;
    let ns = opts.namespace.as_deref();
    let all = watcher::Config::default();
    let ingresses = reflect(
        "Ingress",
        api(client, ns),
        all.clone(),
        tx.clone(),
        m.clone(),
        keep,
    );
    let stores = Stores {
        classes: reflect(
            "IngressClass",
            Api::all(client.clone()),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        ingresses: ingresses.clone(),
        services: reflect(
            "Service",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        slices: reflect(
            "EndpointSlice",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        configmap: opts
            .configmap
            .as_deref()
            .and_then(|c| c.split_once('/'))
            .map(|(cns, name)| {
                let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
                reflect(
                    "ControllerConfigMap",
                    Api::namespaced(client.clone(), cns),
                    cfg,
                    tx.clone(),
                    m.clone(),
                    keep,
                )
            }),
        configmaps: reflect_some(
            "ConfigMap",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            crate::translate::trim_configmap,
            Some(named_by(
                ingresses.clone(),
                gateway.as_ref().map(|g| g.backend_tls.clone()),
            )),
        ),
        secrets: reflect(
            "Secret",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            crate::secrets::trim,
        ),
        gateway,
    };
    let kinds = 6
        + usize::from(stores.configmap.is_some())
        + stores
            .gateway
            .as_ref()
            .map_or(0, |g| 7 + usize::from(g.policies.is_some()));
    (stores, kinds, rx)
}

/// Whether the API server serves `group/version` (its CRDs installed).
async fn serves(client: &Client, group_version: &str) -> bool {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => !list.resources.is_empty(),
        Err(e) => {
            tracing::info!(event = "kube_group_absent", group = group_version, error = %e, "not served by the API server: not watched");
            false
        }
    }
}

/// The Gateway API's reflectors, when its CRDs are installed (and the RateLimitPolicies',
/// when Tollgate's is); checked once at start.
async fn gateway_stores(
    client: &Client,
    opts: &Options,
    m: &KubeMetrics,
    tx: &mpsc::UnboundedSender<(&'static str, Seen)>,
) -> Option<crate::gateways::Stores> {
    if !serves(client, "gateway.networking.k8s.io/v1").await {
        return None;
    }
    let ns = opts.namespace.as_deref();
    let all = watcher::Config::default();
    let policies = serves(client, "tollgate.io/v1alpha1").await.then(|| {
        reflect(
            "RateLimitPolicy",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        )
    });
    Some(crate::gateways::Stores {
        classes: reflect(
            "GatewayClass",
            Api::all(client.clone()),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        gateways: reflect(
            "Gateway",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        routes: reflect(
            "HTTPRoute",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        grpc_routes: reflect(
            "GRPCRoute",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        backend_tls: reflect(
            "BackendTLSPolicy",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        grants: reflect(
            "ReferenceGrant",
            api(client, ns),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
        policies,
        namespaces: reflect(
            "Namespace",
            Api::all(client.clone()),
            all.clone(),
            tx.clone(),
            m.clone(),
            keep,
        ),
    })
}

/// The loop: changes batched, then translated once every kind has listed.
#[allow(clippy::too_many_arguments)]
async fn translations(
    stores: &Stores,
    kinds: usize,
    mut rx: Events,
    opts: &Options,
    m: &KubeMetrics,
    check: &crate::translate::SharedCheck,
    to: &Outlets,
    mut stop: latest::Receiver<bool>,
) {
    let mut synced = BTreeSet::new();
    let mut hold = Holdoff::default();
    let mut said = BTreeSet::new();
    // The kinds changed since the last round; only EndpointSlices: no translation.
    let mut changed: BTreeSet<&'static str> = BTreeSet::new();
    let mut translated = false;
    loop {
        let due = hold.due();
        tokio::select! {
            ev = rx.recv() => match ev {
                Some((kind, seen)) => {
                    if matches!(seen, Seen::Synced) {
                        synced.insert(kind);
                    }
                    changed.insert(kind);
                    hold.changed(std::time::Instant::now());
                }
                None => return,
            },
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep_until(due.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std)), if due.is_some() && synced.len() == kinds => {}
        }
        if synced.len() < kinds || !hold.take(std::time::Instant::now()) {
            continue;
        }
        let eps = stores.endpoints(m);
        to.out.endpoints.send_if_modified(|now| {
            let differs = **now != eps;
            if differs {
                *now = Arc::new(eps);
            }
            differs
        });
        let only_endpoints = translated && changed.iter().all(|k| *k == "EndpointSlice");
        changed.clear();
        if only_endpoints {
            continue;
        }
        translated = true;
        let (t, statuses) = stores.translate(opts, m, &**check);
        // Each problem is logged and counted once, when first seen.
        let now: BTreeSet<String> = t.problems.iter().cloned().collect();
        let _ = to.events.send(now.difference(&said).cloned().collect());
        for p in now.difference(&said) {
            let kind = if p.starts_with("Secret ") {
                "Secret"
            } else if p.starts_with("GRPCRoute ") {
                "GRPCRoute"
            } else if p.starts_with("HTTPRoute ") || p.starts_with("Gateway API") {
                "HTTPRoute"
            } else if p.starts_with("Ingress ") || p.contains("Ingress ") {
                "Ingress"
            } else {
                "ConfigMap"
            };
            m.problems.with_label_values(&[kind]).inc();
            tracing::warn!(event = "kube_translation_problem", kind, problem = %p, "an object could not be served as it asks");
        }
        said = now;
        to.served.send_replace(t.ingresses.clone());
        to.statuses.send_if_modified(|now| {
            let differs = **now != statuses;
            if differs {
                *now = Arc::new(statuses);
            }
            differs
        });
        if to.out.config.send(Some(t)).is_err() {
            return;
        }
    }
}
