//! The cluster's objects into Tollgate's TOML, by the importer itself (`import-ingress`'s
//! translation, with its fail-closed rules): the Ingresses this controller serves (see
//! [`crate::select`]) and the controller's ConfigMap, handed over as one `kind: List`. Each
//! Service stays a target by its cluster DNS name; its ready endpoints are placed under that
//! name apart ([`crate::endpoints`]), so an endpoint change needs no translation.

use crate::secrets;
use crate::select::Classes;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use std::collections::BTreeSet;
use std::sync::Arc;
use tollgate_config::mounted::Files;
use toml::Table;

/// What the reflectors hold, at one moment.
pub struct Cluster<'a> {
    pub classes: Vec<&'a IngressClass>,
    pub ingresses: Vec<&'a Ingress>,
    pub services: Vec<&'a Service>,
    pub configmap: Option<&'a ConfigMap>,
    /// The watched namespaces' ConfigMaps: those an Ingress names (`custom-headers`) go to
    /// the importer with it.
    pub configmaps: Vec<&'a ConfigMap>,
    pub secrets: Vec<&'a Secret>,
    /// `--default-ssl-certificate NAMESPACE/NAME`.
    pub default_certificate: Option<&'a str>,
    /// `--enable-ssl-passthrough`.
    pub ssl_passthrough: bool,
}

/// The cluster's part of the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translated {
    /// The TOML to add to BASE.toml; `None` when no Ingress is served.
    pub toml: Option<String>,
    /// The translation's warnings and what was refused, one line each.
    pub problems: Vec<String>,
    /// Ingresses served.
    pub served: usize,
    /// Those Ingresses, NAMESPACE/NAME (whose status the leader writes).
    pub ingresses: std::collections::BTreeSet<String>,
    /// The Secrets the TOML names, as files, and the default certificate
    /// ([`crate::secrets`]): to be held in memory while it serves.
    pub volume: Arc<Files>,
    /// The Gateways' listeners: (port, TLS), served besides BASE.toml's.
    pub listeners: Vec<(u16, bool)>,
}

impl Translated {
    /// No Ingress served: only the problems said, and the Secrets held (the default
    /// certificate).
    fn nothing(problems: Vec<String>, volume: Arc<Files>) -> Self {
        Translated {
            toml: None,
            problems,
            served: 0,
            ingresses: Default::default(),
            volume,
            listeners: Vec::new(),
        }
    }
}

fn id(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or(""),
        m.name.as_deref().unwrap_or("")
    )
}

/// The Ingresses served, in a stable order.
pub fn chosen<'a>(classes: &Classes, c: &Cluster<'a>) -> Vec<&'a Ingress> {
    let ours = classes.ours(c.classes.iter().filter_map(|k| {
        Some((
            k.metadata.name.as_deref()?,
            k.spec.as_ref()?.controller.as_deref()?,
        ))
    }));
    let mut out: Vec<&Ingress> = c
        .ingresses
        .iter()
        .copied()
        .filter(|i| {
            let class_name = i
                .spec
                .as_ref()
                .and_then(|s| s.ingress_class_name.as_deref());
            let annotation = i
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubernetes.io/ingress.class"))
                .map(String::as_str);
            classes.admits(&ours, class_name, annotation)
        })
        .collect();
    out.sort_by_key(|i| id(&i.metadata));
    out
}

/// Checks a cluster translation as the gateway would serve it (merged with BASE.toml, with
/// the Secrets it names held).
pub type Check<'a> = &'a dyn Fn(&str, &Arc<Files>) -> Result<(), String>;

/// [`Check`], owned and shared with the watch loop.
pub type SharedCheck = Arc<dyn Fn(&str, &Arc<Files>) -> Result<(), String> + Send + Sync>;

/// The Services by namespace and name (looked up once per backend, not scanned).
type Services<'a> = std::collections::BTreeMap<(&'a str, &'a str), &'a Service>;

fn by_name<'a>(services: &[&'a Service]) -> Services<'a> {
    services
        .iter()
        .filter_map(|s| {
            Some((
                (
                    s.metadata.namespace.as_deref()?,
                    s.metadata.name.as_deref()?,
                ),
                *s,
            ))
        })
        .collect()
}

/// Each backend's `port.name` made the number the Service gives that name (the importer
/// reads numbers only); a name the Service does not have is an error.
fn named_ports(ing: &mut serde_json::Value, ns: &str, services: &Services) -> Result<(), String> {
    if let Some(d) = ing.pointer_mut("/spec/defaultBackend") {
        resolve_port(d, ns, services)?;
    }
    if let Some(rules) = ing
        .pointer_mut("/spec/rules")
        .and_then(|r| r.as_array_mut())
    {
        for rule in rules {
            if let Some(paths) = rule
                .pointer_mut("/http/paths")
                .and_then(|p| p.as_array_mut())
            {
                for b in paths.iter_mut().filter_map(|p| p.get_mut("backend")) {
                    resolve_port(b, ns, services)?;
                }
            }
        }
    }
    Ok(())
}

fn resolve_port(
    backend: &mut serde_json::Value,
    ns: &str,
    services: &Services,
) -> Result<(), String> {
    let Some(svc) = backend.get_mut("service") else {
        return Ok(());
    };
    let name = svc
        .get("name")
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .to_string();
    let Some(port_name) = svc
        .pointer("/port/name")
        .and_then(|n| n.as_str())
        .map(str::to_string)
    else {
        return Ok(());
    };
    let number = services
        .get(&(ns, name.as_str()))
        .and_then(|s| {
            s.spec
                .as_ref()?
                .ports
                .as_ref()?
                .iter()
                .find(|p| p.name.as_deref() == Some(port_name.as_str()))
                .map(|p| p.port)
        })
        .ok_or_else(|| format!("Service {ns}/{name} has no port named {port_name:?}"))?;
    svc["port"] = serde_json::json!({"number": number});
    Ok(())
}

/// The chosen Ingresses as the importer reads them, by id.
fn items_of(
    classes: &Classes,
    c: &Cluster,
    problems: &mut Vec<String>,
) -> Vec<(String, serde_json::Value)> {
    let mut items = Vec::new();
    let services = by_name(&c.services);
    for ing in chosen(classes, c) {
        let ns = ing.metadata.namespace.as_deref().unwrap_or("");
        match serde_json::to_value(ing).map(|mut v| (named_ports(&mut v, ns, &services), v)) {
            Ok((Err(why), _)) => problems.push(format!(
                "Ingress {}: {why}: the Ingress is not served",
                id(&ing.metadata)
            )),
            Ok((Ok(()), v)) => items.push((id(&ing.metadata), v)),
            Err(e) => problems.push(format!("Ingress {}: {e}", id(&ing.metadata))),
        }
    }
    items
}

const CUSTOM_HEADERS: &str = "nginx.ingress.kubernetes.io/custom-headers";

/// An Ingress's `custom-headers` value (`NAMESPACE/NAME` of a ConfigMap).
pub fn custom_headers_of(i: &Ingress) -> Option<&str> {
    i.metadata
        .annotations
        .as_ref()?
        .get(CUSTOM_HEADERS)
        .map(|v| v.trim())
}

/// What the ConfigMap reflector keeps: all but the managed fields and kubectl's copy.
pub fn trim_configmap(cm: &mut ConfigMap) {
    cm.metadata.managed_fields = None;
    if let Some(a) = cm.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The importer on `items` (and the ConfigMaps): the table and the importer's warnings.
fn import_items(
    items: &[(String, serde_json::Value)],
    configmap: Option<&str>,
    c: &Cluster,
) -> Result<(Table, Vec<String>), String> {
    let mut objects: Vec<&serde_json::Value> = items.iter().map(|(_, v)| v).collect();
    let cm = c.configmap.and_then(|cm| serde_json::to_value(cm).ok());
    objects.extend(cm.as_ref());
    // The ConfigMaps the items name (the controller's is there already).
    let named: BTreeSet<&str> = items
        .iter()
        .filter_map(|(_, v)| {
            v.get("metadata")?
                .get("annotations")?
                .get(CUSTOM_HEADERS)?
                .as_str()
                .map(str::trim)
        })
        .collect();
    let id = |m: &ConfigMap| {
        format!(
            "{}/{}",
            m.metadata.namespace.as_deref().unwrap_or(""),
            m.metadata.name.as_deref().unwrap_or("")
        )
    };
    let controller = c.configmap.map(id);
    let theirs: Vec<serde_json::Value> = c
        .configmaps
        .iter()
        .filter(|m| {
            let m = id(m);
            named.contains(m.as_str()) && controller.as_deref() != Some(m.as_str())
        })
        .filter_map(|m| serde_json::to_value(m).ok())
        .collect();
    objects.extend(&theirs);
    let backends = default_backends(items, c);
    objects.extend(&backends);
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let yaml = serde_yaml_ng::to_string(&list)
        .map_err(|e| format!("the Ingresses could not be written for the importer: {e}"))?;
    let opts = tollgate_ingress::Options {
        ingress_class: String::new(),
        allow_insecure: false,
        configmap: configmap.map(str::to_string),
        preselected: true,
        ssl_passthrough: c.ssl_passthrough,
    };
    let i = tollgate_ingress::import(&yaml, &opts).map_err(|e| e.to_string())?;
    let warnings = i
        .warnings
        .iter()
        .map(|w| w.trim_start_matches("# ").to_string())
        .collect();
    let table: toml::Table = i
        .toml
        .parse()
        .map_err(|e| format!("the importer's output does not parse: {e}"))?;
    Ok((table, warnings))
}

const DEFAULT_BACKEND: &str = "nginx.ingress.kubernetes.io/default-backend";

/// The Services the items' `default-backend` names, as the importer reads them (their first
/// port); one the cluster lacks is named by the importer.
fn default_backends(items: &[(String, serde_json::Value)], c: &Cluster) -> Vec<serde_json::Value> {
    let services = by_name(&c.services);
    let named: BTreeSet<(&str, &str)> = items
        .iter()
        .filter_map(|(_, v)| {
            let m = v.get("metadata")?;
            Some((
                m.get("namespace")?.as_str()?,
                m.get("annotations")?.get(DEFAULT_BACKEND)?.as_str()?.trim(),
            ))
        })
        .collect();
    named
        .into_iter()
        .filter_map(|key| {
            let svc = services.get(&key)?;
            let port = svc.spec.as_ref()?.ports.as_ref()?.first()?.port;
            Some(serde_json::json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"namespace": key.0, "name": key.1},
                "spec": {"ports": [{"port": port}]},
            }))
        })
        .collect()
}

/// An import's table, its certificates not in `volume` left out ([`secrets`]), as TOML.
fn finish(
    (mut table, mut warnings): (Table, Vec<String>),
    volume: &Files,
) -> Result<(String, Vec<String>), String> {
    warnings.extend(secrets::unheld_certificates(&mut table, volume));
    warnings.extend(secrets::unheld_upstream_tls(&mut table, volume));
    Ok((
        toml::to_string(&table).map_err(|e| e.to_string())?,
        warnings,
    ))
}

/// The cluster's part. When `check` refuses it, each Ingress is tried alone and those
/// refused are left out (a problem each): one Ingress never holds the others' changes back,
/// and a lone one refused is not served (rather than its last good translation).
pub fn translate(
    classes: &Classes,
    configmap: Option<&str>,
    c: &Cluster,
    check: Check,
) -> Translated {
    let mut problems = Vec::new();
    let mut items = items_of(classes, c, &mut problems);
    let whole = import_items(&items, configmap, c);
    let empty = Table::new();
    let volume = Arc::new(secrets::volume(
        whole.as_ref().map_or(&empty, |(t, _)| t),
        &c.secrets,
        c.default_certificate,
    ));
    if items.is_empty() {
        return Translated::nothing(problems, volume);
    }
    let mut out = whole.and_then(|w| finish(w, &volume));
    if let Ok((t, _)) = &out {
        if check(t, &volume).is_err() {
            items.retain(|item| match import_items(std::slice::from_ref(item), configmap, c)
                .and_then(|w| finish(w, &volume))
            {
                Ok((alone, _)) => match check(&alone, &volume) {
                    Ok(()) => true,
                    Err(e) => {
                        problems.push(format!("Ingress {}: its translation is refused ({e}): the Ingress is not served", item.0));
                        false
                    }
                },
                Err(_) => true,
            });
            if items.is_empty() {
                return Translated::nothing(problems, volume);
            }
            out = import_items(&items, configmap, c).and_then(|w| finish(w, &volume));
        }
    }
    match out {
        Ok((toml, warnings)) => {
            problems.extend(warnings);
            Translated {
                toml: Some(toml),
                problems,
                served: items.len(),
                ingresses: items.iter().map(|(id, _)| id.clone()).collect(),
                volume,
                listeners: Vec::new(),
            }
        }
        Err(e) => {
            problems.push(e);
            Translated::nothing(problems, volume)
        }
    }
}

#[cfg(test)]
mod tests;
