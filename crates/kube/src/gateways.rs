//! The Gateway API beside the Ingresses: its reflectors' objects through
//! [`tollgate_gateway_api`]'s translation, added to the Ingresses' part. The Gateways'
//! listeners go to the gateway to serve; the statuses to the leader's writer
//! ([`crate::gateway_status`]). When the config check refuses the combined part, each
//! served HTTPRoute is tried alone with the Ingresses' part, and those refused are left out
//! (their parents say so): one HTTPRoute never holds the others back.

use crate::translate::{Check, Translated};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::runtime::reflector::Store;
use std::sync::Arc;
use tollgate_gateway_api::input::Input;
use tollgate_gateway_api::translate::{translate, Output};
use tollgate_gateway_api::types::backendtlspolicies::BackendTlsPolicy;
use tollgate_gateway_api::types::gatewayclasses::GatewayClass;
use tollgate_gateway_api::types::gateways::Gateway;
use tollgate_gateway_api::types::grpcroutes::GrpcRoute;
use tollgate_gateway_api::types::httproutes::HttpRoute;
use tollgate_gateway_api::types::policy::RateLimitPolicy;
use tollgate_gateway_api::types::referencegrants::ReferenceGrant;
use toml::{Table, Value};

/// The Gateway API's reflectors (only when the API server serves its CRDs; the policies'
/// when it serves Tollgate's).
pub struct Stores {
    pub classes: Store<GatewayClass>,
    pub gateways: Store<Gateway>,
    pub routes: Store<HttpRoute>,
    pub grpc_routes: Store<GrpcRoute>,
    pub grants: Store<ReferenceGrant>,
    pub policies: Option<Store<RateLimitPolicy>>,
    pub backend_tls: Store<BackendTlsPolicy>,
    pub namespaces: Store<Namespace>,
}

/// What the translation reads besides the Gateway API's own objects.
pub struct Around<'a> {
    pub controller: &'a str,
    pub services: &'a [&'a Service],
    pub secrets: &'a [&'a Secret],
    /// The watched namespaces' ConfigMaps (a BackendTLSPolicy's CA).
    pub configmaps: &'a [&'a ConfigMap],
    pub tls: bool,
    pub addresses: Vec<String>,
}

impl Stores {
    /// `ingress_routes`: the names of the Ingresses' routes (policies may target Ingresses).
    pub fn translate(
        &self,
        around: &Around,
        refused: &[(String, String)],
        ingress_routes: &[&str],
    ) -> Output {
        let (c, g, r, gr, n) = (
            self.classes.state(),
            self.gateways.state(),
            self.routes.state(),
            self.grants.state(),
            self.namespaces.state(),
        );
        let p = self.policies.as_ref().map(Store::state).unwrap_or_default();
        let gr_routes = self.grpc_routes.state();
        let btls = self.backend_tls.state();
        let input = Input {
            controller: around.controller,
            classes: c.iter().map(Arc::as_ref).collect(),
            gateways: g.iter().map(Arc::as_ref).collect(),
            http_routes: r.iter().map(Arc::as_ref).collect(),
            grpc_routes: gr_routes.iter().map(Arc::as_ref).collect(),
            grants: gr.iter().map(Arc::as_ref).collect(),
            policies: p.iter().map(Arc::as_ref).collect(),
            backend_tls: btls.iter().map(Arc::as_ref).collect(),
            configmaps: around.configmaps.to_vec(),
            services: around.services.to_vec(),
            secrets: around.secrets.to_vec(),
            namespaces: n.iter().map(Arc::as_ref).collect(),
            tls: around.tls,
            addresses: around.addresses.clone(),
            ingress_routes: ingress_routes.to_vec(),
        };
        translate(&input, refused)
    }

    /// How many objects of each kind are held.
    pub fn counts(&self) -> [(&'static str, usize); 7] {
        [
            ("GatewayClass", self.classes.state().len()),
            ("Gateway", self.gateways.state().len()),
            ("HTTPRoute", self.routes.state().len()),
            ("GRPCRoute", self.grpc_routes.state().len()),
            ("ReferenceGrant", self.grants.state().len()),
            ("BackendTLSPolicy", self.backend_tls.state().len()),
            (
                "RateLimitPolicy",
                self.policies.as_ref().map_or(0, |p| p.state().len()),
            ),
        ]
    }
}

/// `ingress` (the Ingresses' part) with `g`'s table added: routes after the Ingresses',
/// upstreams and limits beside theirs (their names cannot meet: `gw:` and `policy:`),
/// certificates after theirs; and the limits of policies that target Ingresses on their
/// routes.
fn combined(ingress: &Table, g: &Output) -> Table {
    let mut t = ingress.clone();
    if let Some(Value::Array(routes)) = t.get_mut("routes") {
        for r in routes.iter_mut().filter_map(Value::as_table_mut) {
            let name = r
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if let Some(more) = g.ingress_limits.get(&name) {
                let list = r
                    .entry("limits")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = list {
                    a.extend(more.iter().map(|m| Value::String(m.clone())));
                }
            }
        }
    }
    for (k, v) in &g.table {
        match (t.get_mut(k), v) {
            (Some(Value::Array(a)), Value::Array(b)) => a.extend(b.iter().cloned()),
            (Some(Value::Table(a)), Value::Table(b)) if k == "tls" => {
                match (a.get_mut("certificates"), b.get("certificates")) {
                    (Some(Value::Array(x)), Some(Value::Array(y))) => x.extend(y.iter().cloned()),
                    (_, Some(y)) => {
                        a.insert("certificates".into(), y.clone());
                    }
                    _ => {}
                }
            }
            (Some(Value::Table(a)), Value::Table(b)) => {
                a.extend(b.iter().map(|(k, v)| (k.clone(), v.clone())))
            }
            (_, v) => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    t
}

/// The names of a part's routes.
fn route_names(t: &Table) -> Vec<String> {
    t.get("routes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name")?.as_str().map(str::to_string))
        .collect()
}

/// The ConfigMap files a part names (a BackendTLSPolicy's `ca.crt`, at
/// `TLS_MOUNT/NAMESPACE/_configmap.NAME/KEY`), held beside the Secrets'.
fn configmap_files(
    table: &Table,
    configmaps: &[&ConfigMap],
    out: &mut tollgate_config::mounted::Files,
) {
    use std::hash::{Hash, Hasher};
    let mut paths = Vec::new();
    if let Some(Value::Table(ups)) = table.get("upstreams") {
        for u in ups.values() {
            if let Some(ca) = u
                .get("tls")
                .and_then(|t| t.get("ca"))
                .and_then(Value::as_str)
            {
                paths.push(ca.to_string());
            }
        }
    }
    for p in paths {
        let path = std::path::Path::new(&p);
        let Ok(rest) = path.strip_prefix(tollgate_config::TLS_MOUNT) else {
            continue;
        };
        let parts: Vec<&str> = rest.iter().filter_map(|c| c.to_str()).collect();
        let [ns, dir, key] = parts[..] else {
            continue;
        };
        let Some(name) = dir.strip_prefix("_configmap.") else {
            continue;
        };
        let held = configmaps.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(ns) && c.metadata.name.as_deref() == Some(name)
        });
        if let Some(v) = held.and_then(|c| c.data.as_ref()?.get(key)) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (ns, name, key, v).hash(&mut h);
            out.insert(
                path.to_path_buf(),
                tollgate_config::mounted::Held {
                    bytes: Arc::from(v.as_bytes()),
                    version: h.finish(),
                },
            );
        }
    }
}

/// The Gateway API's translation, leaving out the routes given (`KIND NAMESPACE/NAME`, why),
/// with the names of the Ingresses' routes.
pub type Translate<'a> = &'a dyn Fn(&[(String, String)], &[&str]) -> Output;

/// The config checked with its Secrets held: the TOML, the volume, what was left out.
type Checked = (String, Arc<tollgate_config::mounted::Files>, Vec<String>);

/// The Ingresses' part `t` with the Gateway API's; `gateway(refused, ingress routes)`
/// translates it leaving those HTTPRoutes out. The final Gateway API output (its statuses)
/// is returned too.
pub fn with_gateways(
    mut t: Translated,
    gateway: Translate,
    secrets: &[&Secret],
    configmaps: &[&ConfigMap],
    default_certificate: Option<&str>,
    check: Check,
) -> (Translated, Output) {
    let ingress: Table = match t.toml.as_deref().map(str::parse::<Table>) {
        Some(Ok(table)) => table,
        Some(Err(e)) => {
            t.problems
                .push(format!("the Ingresses' part does not parse: {e}"));
            Table::new()
        }
        None => Table::new(),
    };
    let names = route_names(&ingress);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let translate = |refused: &[(String, String)]| gateway(refused, &names);
    let attempt = |g: &Output| -> Result<Checked, String> {
        let mut table = combined(&ingress, g);
        let mut files = crate::secrets::volume(&table, secrets, default_certificate);
        configmap_files(&table, configmaps, &mut files);
        let volume = Arc::new(files);
        let mut problems = crate::secrets::unheld_certificates(&mut table, &volume);
        problems.extend(crate::secrets::unheld_upstream_tls(&mut table, &volume));
        let text = toml::to_string(&table).map_err(|e| e.to_string())?;
        check(&text, &volume)?;
        Ok((text, volume, problems))
    };
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut out = translate(&refused);
    if out.table.is_empty() && out.ingress_limits.is_empty() {
        t.listeners = out.listeners.clone();
        return (t, out);
    }
    let mut done = attempt(&out);
    if let Err(whole) = &done {
        // Each served HTTPRoute alone with the Ingresses' part: those refused are left out.
        let served: Vec<String> = out.routes.iter().cloned().collect();
        for r in &served {
            let others: Vec<(String, String)> = served
                .iter()
                .filter(|o| *o != r)
                .map(|o| (o.clone(), String::new()))
                .collect();
            if let Err(e) = attempt(&translate(&others)) {
                refused.push((
                    r.clone(),
                    format!("its translation is refused by the config check: {e}"),
                ));
            }
        }
        if refused.is_empty() {
            refused = served
                .iter()
                .map(|r| {
                    (
                        r.clone(),
                        format!("the Gateway API's part is refused by the config check: {whole}"),
                    )
                })
                .collect();
        }
        out = translate(&refused);
        done = attempt(&out);
    }
    match done {
        Ok((text, volume, problems)) => {
            t.toml = Some(text);
            t.volume = volume;
            t.problems.extend(problems);
        }
        Err(e) => t.problems.push(format!("Gateway API: {e}: not served")),
    }
    for (r, why) in &refused {
        t.problems.push(format!("{r}: {why}: not served"));
    }
    t.problems.extend(out.problems.iter().cloned());
    t.listeners = out.listeners.clone();
    (t, out)
}
