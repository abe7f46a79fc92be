//! Stage 1: YAML in, Ingress objects out. Every document, and the items of a `kind: List`;
//! objects of other kinds and versions are named and skipped. What cannot be read in a rule
//! (a bad host, a path without backend, a resource backend) skips that rule or path with a
//! warning, never the file.

use super::host_name::rule_host;
use super::text::{comment, k8s_name, Warnings};
use super::ImportError;
use serde_yaml_ng::Value;
use std::collections::BTreeMap;

/// The ingress-nginx annotation prefix.
pub(super) const ANN: &str = "nginx.ingress.kubernetes.io/";
/// Tollgate's own annotations (`tollgate.io/limit-scope`, `tollgate.io/limits`).
pub(super) const OWN: &str = "tollgate.io/";

/// One `networking.k8s.io/v1` Ingress, as far as it could be read.
pub(super) struct Ingress {
    pub ns: String,
    pub name: String,
    /// `NAMESPACE.NAME`, slugged: namespaces hold no dot, so it is unique.
    pub id: String,
    /// "Ingress NAMESPACE/NAME", for messages.
    pub ctx: String,
    /// The ingress-nginx annotations, prefix stripped, values as text.
    pub annotations: BTreeMap<String, String>,
    /// Tollgate's own (`tollgate.io/`), prefix stripped.
    pub own: BTreeMap<String, String>,
    /// `spec.ingressClassName`.
    pub class_name: Option<String>,
    /// The `kubernetes.io/ingress.class` annotation.
    pub class_annotation: Option<String>,
    /// `metadata.creationTimestamp` (RFC 3339), empty when absent: ingress-nginx merges
    /// Ingresses oldest first.
    pub created: String,
    pub tls: Vec<TlsEntry>,
    pub rules: Vec<Rule>,
    pub default_backend: Option<Backend>,
    /// `spec.rules` lists something (even if nothing of it could be read): ingress-nginx makes
    /// a `defaultBackend` the catch-all of every host only for an Ingress without rules.
    pub has_rules: bool,
}

impl Ingress {
    /// An ingress-nginx annotation.
    pub fn ann(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
}

pub(super) struct TlsEntry {
    pub hosts: Vec<String>,
    pub secret: Option<String>,
}

pub(super) struct Rule {
    /// None: the rule applies to any host.
    pub host: Option<String>,
    pub paths: Vec<IngPath>,
}

pub(super) struct IngPath {
    pub path: String,
    pub kind: PathKind,
    pub backend: Backend,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum PathKind {
    Exact,
    Prefix,
    ImplementationSpecific,
}

impl PathKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PathKind::Exact => "Exact",
            PathKind::Prefix => "Prefix",
            PathKind::ImplementationSpecific => "ImplementationSpecific",
        }
    }
}

/// The input's Services by namespace and name: their first port (what ingress-nginx's
/// `default-backend` is spoken to on).
pub(super) type Ports = BTreeMap<(String, String), u16>;

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct Backend {
    pub service: String,
    pub port: u16,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

fn seq(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A scalar annotation value as text (YAML may leave numbers and booleans unquoted).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

/// Every object of the input, and the Ingresses among them; its ConfigMaps into `maps` (the
/// controller's may be among them).
pub(super) fn read(
    yaml: &str,
    maps: &mut Vec<super::global::ConfigMap>,
    services: &mut Ports,
    w: &mut Warnings,
) -> Result<Vec<Ingress>, ImportError> {
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v = <Value as serde::Deserialize>::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        if str_at(&v, &["kind"]) == Some("List") {
            objects.extend(seq(v.get("items")).iter().cloned());
        } else {
            objects.push(v);
        }
    }
    let mut out = Vec::new();
    for obj in &objects {
        if !obj.is_mapping() {
            w.push("a YAML document that is not a Kubernetes object: skipped");
            continue;
        }
        let kind = str_at(obj, &["kind"]).unwrap_or("");
        let api = str_at(obj, &["apiVersion"]).unwrap_or("");
        let name = str_at(obj, &["metadata", "name"]).unwrap_or("unnamed");
        if kind == "ConfigMap" && api == "v1" {
            maps.push(super::global::ConfigMap::read(obj));
        } else if kind == "Service" && api == "v1" {
            let ns = str_at(obj, &["metadata", "namespace"]).unwrap_or("default");
            let first = seq(obj.get("spec").and_then(|s| s.get("ports")))
                .first()
                .and_then(|p| p.get("port")?.as_u64())
                .and_then(|p| u16::try_from(p).ok());
            if let Some(port) = first {
                services.insert((ns.to_string(), name.to_string()), port);
            }
        } else if kind != "Ingress" {
            w.push(comment(&format!("{kind} {name}: not an Ingress: skipped")));
        } else if api != "networking.k8s.io/v1" {
            w.push(comment(&format!(
                "Ingress {name}: apiVersion \"{api}\" is not networking.k8s.io/v1: skipped (convert it first)"
            )));
        } else {
            let ns = str_at(obj, &["metadata", "namespace"]).unwrap_or("default");
            if k8s_name(ns) {
                out.push(ingress(obj, w));
            } else {
                w.push(comment(&format!(
                    "Ingress {ns}/{name}: namespace \"{ns}\" is not a Kubernetes name: skipped"
                )));
            }
        }
    }
    Ok(out)
}

/// An Ingress's annotations: ingress-nginx's and Tollgate's own (prefixes stripped), and the
/// class annotation.
type Annotations = (
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    Option<String>,
);

fn annotations_of(obj: &Value, ctx: &str, w: &mut Warnings) -> Annotations {
    let mut annotations = BTreeMap::new();
    let mut own = BTreeMap::new();
    let mut class_annotation = None;
    if let Some(m) = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_mapping)
    {
        for (k, v) in m {
            let Some(k) = k.as_str() else { continue };
            let Some(v) = scalar(v) else {
                w.push(comment(&format!(
                    "{ctx}: annotation {k} is not a string: ignored"
                )));
                continue;
            };
            if k == "kubernetes.io/ingress.class" {
                class_annotation = Some(v);
            } else if let Some(short) = k.strip_prefix(ANN) {
                annotations.insert(short.to_string(), v);
            } else if let Some(short) = k.strip_prefix(OWN) {
                own.insert(short.to_string(), v);
            }
        }
    }
    (annotations, own, class_annotation)
}

fn ingress(obj: &Value, w: &mut Warnings) -> Ingress {
    let name = str_at(obj, &["metadata", "name"])
        .unwrap_or("unnamed")
        .to_string();
    let ns = str_at(obj, &["metadata", "namespace"])
        .unwrap_or("default")
        .to_string();
    let ctx = comment(&format!("Ingress {ns}/{name}"));
    let (annotations, own, class_annotation) = annotations_of(obj, &ctx, w);
    let spec = obj.get("spec");
    let tls = seq(spec.and_then(|s| s.get("tls")))
        .iter()
        .map(|t| TlsEntry {
            hosts: seq(t.get("hosts"))
                .iter()
                .filter_map(Value::as_str)
                .filter_map(|h| match rule_host(h) {
                    Ok(h) => Some(h),
                    Err(why) => {
                        w.push(comment(&format!(
                            "{ctx}: tls host \"{h}\": {why}: left out"
                        )));
                        None
                    }
                })
                .collect(),
            secret: str_at(t, &["secretName"])
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        })
        .collect();
    let raw_rules = seq(spec.and_then(|s| s.get("rules")));
    let mut rules = Vec::new();
    for (ri, rule) in raw_rules.iter().enumerate() {
        let host = match str_at(rule, &["host"]) {
            None | Some("") => None,
            Some(h) => match rule_host(h) {
                Ok(h) => Some(h),
                Err(why) => {
                    w.push(comment(&format!(
                        "{ctx}: rules[{ri}]: host \"{h}\": {why}: rule skipped"
                    )));
                    continue;
                }
            },
        };
        let mut paths = Vec::new();
        for (pi, p) in seq(rule.get("http").and_then(|h| h.get("paths")))
            .iter()
            .enumerate()
        {
            let label = format!("{ctx}: rules[{ri}].http.paths[{pi}]");
            if let Some(p) = ing_path(p, &label, w) {
                paths.push(p);
            }
        }
        rules.push(Rule { host, paths });
    }
    let default_backend = spec
        .and_then(|s| s.get("defaultBackend"))
        .and_then(|b| backend(b, &format!("{ctx}: defaultBackend"), w));
    Ingress {
        id: crate::ingress_id(&ns, &name),
        ctx,
        ns,
        name,
        annotations,
        own,
        class_name: str_at(obj, &["spec", "ingressClassName"]).map(str::to_string),
        class_annotation,
        created: str_at(obj, &["metadata", "creationTimestamp"])
            .unwrap_or("")
            .to_string(),
        tls,
        has_rules: !raw_rules.is_empty(),
        rules,
        default_backend,
    }
}

fn ing_path(p: &Value, label: &str, w: &mut Warnings) -> Option<IngPath> {
    let path = str_at(p, &["path"]).unwrap_or("/");
    if !path.starts_with('/') {
        w.push(comment(&format!(
            "{label}: path \"{path}\" does not start with /: skipped"
        )));
        return None;
    }
    let kind = match str_at(p, &["pathType"]).unwrap_or("ImplementationSpecific") {
        "Exact" => PathKind::Exact,
        "Prefix" => PathKind::Prefix,
        "ImplementationSpecific" => PathKind::ImplementationSpecific,
        other => {
            w.push(comment(&format!(
                "{label}: unknown pathType \"{other}\": skipped"
            )));
            return None;
        }
    };
    let Some(b) = p.get("backend") else {
        w.push(format!("{label}: no backend: skipped"));
        return None;
    };
    Some(IngPath {
        path: path.to_string(),
        kind,
        backend: backend(b, label, w)?,
    })
}

fn backend(b: &Value, label: &str, w: &mut Warnings) -> Option<Backend> {
    if b.get("resource").is_some() {
        w.push(format!(
            "{label}: a resource backend is not translated: skipped"
        ));
        return None;
    }
    let Some(svc) = str_at(b, &["service", "name"]) else {
        w.push(format!("{label}: no backend Service: skipped"));
        return None;
    };
    if !k8s_name(svc) || svc.contains('.') {
        w.push(comment(&format!(
            "{label}: Service name \"{svc}\" is not a Kubernetes name: skipped"
        )));
        return None;
    }
    let svc = svc.to_string();
    let port = match b.get("service").and_then(|s| s.get("port")) {
        None => {
            w.push(format!("{label}: Service {svc} has no port: 80 used"));
            80
        }
        Some(p) => match (p.get("number"), str_at(p, &["name"])) {
            (Some(n), _) => match n.as_u64().and_then(|n| u16::try_from(n).ok()) {
                Some(n) if n > 0 => n,
                _ => {
                    let shown = match n {
                        Value::Number(x) => x.to_string(),
                        other => scalar(other).unwrap_or_else(|| "?".into()),
                    };
                    w.push(comment(&format!(
                        "{label}: Service {svc} port {shown} is not a port number: skipped"
                    )));
                    return None;
                }
            },
            (None, named) => {
                let named = comment(named.unwrap_or("?"));
                w.push(format!("{label}: Service {svc} port \"{named}\" is named: write its number (Tollgate does not read Services); 80 used"));
                80
            }
        },
    };
    Some(Backend { service: svc, port })
}
