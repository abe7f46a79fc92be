//! The cluster's objects into Tollgate's TOML, by the importer itself (`import-ingress`'s
//! translation, with its fail-closed rules): the Ingresses this controller serves (see
//! [`crate::select`]) and the controller's ConfigMap, handed over as one `kind: List`; then
//! each Service target made its ready endpoints ([`crate::endpoints`]).

use crate::endpoints;
use crate::select::Classes;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

/// What the reflectors hold, at one moment.
pub struct Cluster<'a> {
    pub classes: Vec<&'a IngressClass>,
    pub ingresses: Vec<&'a Ingress>,
    pub services: Vec<&'a Service>,
    pub slices: Vec<&'a EndpointSlice>,
    pub configmap: Option<&'a ConfigMap>,
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

pub fn translate(classes: &Classes, configmap: Option<&str>, c: &Cluster) -> Translated {
    let mut problems = Vec::new();
    let mut items = Vec::new();
    for ing in chosen(classes, c) {
        // TLS from Secrets is not read yet: an Ingress that asks for it is not served rather
        // than served over plain HTTP only.
        if ing
            .spec
            .as_ref()
            .and_then(|s| s.tls.as_ref())
            .is_some_and(|t| !t.is_empty())
        {
            problems.push(format!(
                "Ingress {}: spec.tls: certificates from Secrets are not served by this build: the Ingress is not served",
                id(&ing.metadata)
            ));
            continue;
        }
        match serde_json::to_value(ing) {
            Ok(v) => items.push(v),
            Err(e) => problems.push(format!("Ingress {}: {e}", id(&ing.metadata))),
        }
    }
    let served = items.len();
    if served == 0 {
        return Translated {
            toml: None,
            problems,
            served,
        };
    }
    if let Some(cm) = c.configmap {
        if let Ok(v) = serde_json::to_value(cm) {
            items.push(v);
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let yaml = match serde_yaml_ng::to_string(&list) {
        Ok(y) => y,
        Err(e) => {
            problems.push(format!(
                "the Ingresses could not be written for the importer: {e}"
            ));
            return Translated {
                toml: None,
                problems,
                served: 0,
            };
        }
    };
    let opts = tollgate_ingress::Options {
        ingress_class: String::new(),
        allow_insecure: false,
        configmap: configmap.map(str::to_string),
        preselected: true,
    };
    match tollgate_ingress::import(&yaml, &opts) {
        Ok(i) => {
            problems.extend(
                i.warnings
                    .iter()
                    .map(|w| w.trim_start_matches("# ").to_string()),
            );
            let mut table: toml::Table = match i.toml.parse() {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("the importer's output does not parse: {e}"));
                    return Translated {
                        toml: None,
                        problems,
                        served: 0,
                    };
                }
            };
            endpoints::place(&mut table, &endpoints::ready(&c.services, &c.slices));
            let toml = toml::to_string(&table).ok();
            Translated {
                toml,
                problems,
                served,
            }
        }
        Err(e) => {
            problems.push(e.to_string());
            Translated {
                toml: None,
                problems,
                served: 0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ing(name: &str, class: Option<&str>, tls: bool) -> Ingress {
        let mut v = json!({"metadata": {"name": name, "namespace": "shop", "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"nginx.ingress.kubernetes.io/limit-rps": "5"}},
            "spec": {"rules": [{"host": format!("{name}.example"), "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}});
        if let Some(c) = class {
            v["spec"]["ingressClassName"] = json!(c);
        }
        if tls {
            v["spec"]["tls"] =
                json!([{"hosts": [format!("{name}.example")], "secretName": "cert"}]);
        }
        serde_json::from_value(v).expect("ingress")
    }

    #[test]
    fn the_importer_translates_what_is_chosen_and_endpoints_replace_the_service() {
        let class: IngressClass = serde_json::from_value(json!({"metadata": {"name": "tollgate"}, "spec": {"controller": "tollgate.io/ingress-controller"}})).expect("class");
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"port": 80}]}})).expect("svc");
        let slice: EndpointSlice = serde_json::from_value(json!({"metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": [{"addresses": ["127.0.0.1"]}]})).expect("slice");
        let (a, b, c, d) = (
            ing("a", Some("tollgate"), false),
            ing("b", Some("nginx"), false),
            ing("c", None, false),
            ing("d", Some("tollgate"), true),
        );
        let cluster = Cluster {
            classes: vec![&class],
            ingresses: vec![&a, &b, &c, &d],
            services: vec![&svc],
            slices: vec![&slice],
            configmap: None,
        };
        let t = translate(&Classes::default(), None, &cluster);
        assert_eq!(t.served, 1, "{:?}", t.problems);
        let toml = t.toml.expect("toml");
        assert!(
            toml.contains("a.example")
                && !toml.contains("b.example")
                && !toml.contains("c.example")
        );
        assert!(toml.contains("127.0.0.1:8080"), "{toml}");
        assert!(
            toml.contains("rate = \"5/s\""),
            "the annotation's limit, as import-ingress makes it"
        );
        assert!(
            t.problems
                .iter()
                .any(|p| p.contains("Ingress shop/d") && p.contains("not served")),
            "{:?}",
            t.problems
        );
        let none = Cluster {
            classes: vec![],
            ingresses: vec![&b],
            services: vec![],
            slices: vec![],
            configmap: None,
        };
        assert_eq!(translate(&Classes::default(), None, &none).toml, None);
    }
}
