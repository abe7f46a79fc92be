//! What the Gateway API crate's tests share: YAML documents read, a cluster made of them
//! (the Services their backendRefs name, the Gateways they name, the class made
//! Tollgate's), and a translation loaded as Tollgate loads its config.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Namespace, Service};
use std::path::Path;
use tollgate_gateway_api::input::Input;
use tollgate_gateway_api::translate::Output;
use tollgate_gateway_api::types::gatewayclasses::GatewayClass;
use tollgate_gateway_api::types::gateways::Gateway;
use tollgate_gateway_api::types::httproutes::HttpRoute;
use tollgate_gateway_api::types::policy::RateLimitPolicy;
use tollgate_gateway_api::types::referencegrants::ReferenceGrant;

pub const CONTROLLER: &str = "tollgate.io/gateway-controller";

pub fn docs(text: &str) -> Vec<serde_json::Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .filter_map(|d| {
            let v: serde_json::Value = serde::Deserialize::deserialize(d).ok()?;
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// A cluster of these objects, with the Services their backendRefs name (each port they
/// name) and the class they name made Tollgate's.
pub struct Cluster {
    pub classes: Vec<GatewayClass>,
    pub gateways: Vec<Gateway>,
    pub routes: Vec<HttpRoute>,
    pub grpc_routes: Vec<tollgate_gateway_api::types::grpcroutes::GrpcRoute>,
    pub grants: Vec<ReferenceGrant>,
    pub services: Vec<Service>,
    pub namespaces: Vec<Namespace>,
    pub policies: Vec<RateLimitPolicy>,
    pub backend_tls: Vec<tollgate_gateway_api::types::backendtlspolicies::BackendTlsPolicy>,
    pub configmaps: Vec<k8s_openapi::api::core::v1::ConfigMap>,
}

impl Cluster {
    pub fn of(text: &str) -> Self {
        let mut c = Cluster {
            classes: vec![],
            gateways: vec![],
            routes: vec![],
            grpc_routes: vec![],
            grants: vec![],
            services: vec![],
            namespaces: vec![],
            policies: vec![],
            backend_tls: vec![],
            configmaps: vec![],
        };
        let mut ports: std::collections::BTreeMap<(String, String), Vec<i64>> = Default::default();
        for mut v in docs(text) {
            if v.pointer("/metadata/namespace").is_none() && v["kind"] != "GatewayClass" {
                v["metadata"]["namespace"] = "default".into();
            }
            match v["kind"].as_str().unwrap_or("") {
                "Gateway" => {
                    let g: Gateway = serde_json::from_value(v).expect("gateway");
                    let class = g.spec.gateway_class_name.clone();
                    if !c
                        .classes
                        .iter()
                        .any(|k| k.metadata.name.as_deref() == Some(&class))
                    {
                        c.classes.push(serde_json::from_value(serde_json::json!({
                            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                            "metadata": {"name": class}, "spec": {"controllerName": CONTROLLER},
                        })).expect("class"));
                    }
                    c.gateways.push(g);
                }
                kind @ ("HTTPRoute" | "GRPCRoute") => {
                    let grpc = kind == "GRPCRoute";
                    // An example without parentRefs shows a rule alone: it is given a Gateway.
                    if v.pointer("/spec/parentRefs").is_none() {
                        v["spec"]["parentRefs"] = serde_json::json!([{"name": "example-gateway"}]);
                    }
                    let ns = v["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("default")
                        .to_string();
                    for rule in v["spec"]["rules"].as_array().into_iter().flatten() {
                        for b in rule["backendRefs"].as_array().into_iter().flatten() {
                            let bns = b["namespace"].as_str().unwrap_or(&ns).to_string();
                            let name = b["name"].as_str().unwrap_or("").to_string();
                            ports
                                .entry((bns, name))
                                .or_default()
                                .push(b["port"].as_i64().unwrap_or(80));
                        }
                    }
                    if grpc {
                        c.grpc_routes
                            .push(serde_json::from_value(v).expect("grpc route"));
                    } else {
                        c.routes.push(serde_json::from_value(v).expect("route"));
                    }
                }
                "ReferenceGrant" => c.grants.push(serde_json::from_value(v).expect("grant")),
                "Namespace" => c
                    .namespaces
                    .push(serde_json::from_value(v).expect("namespace")),
                "RateLimitPolicy" => c.policies.push(serde_json::from_value(v).expect("policy")),
                "BackendTLSPolicy" => c
                    .backend_tls
                    .push(serde_json::from_value(v).expect("backend tls policy")),
                "ConfigMap" => c
                    .configmaps
                    .push(serde_json::from_value(v).expect("configmap")),
                _ => {}
            }
        }
        // A Gateway each route names that the example leaves out: HTTP on 80, its listener
        // named as the parentRef names it, taking routes of every namespace.
        let mut wanted: Vec<(String, String, String)> = Vec::new();
        let parents: Vec<(String, String, Option<String>, Option<String>)> = c
            .routes
            .iter()
            .flat_map(|r| {
                r.spec.parent_refs.iter().flatten().map(|p| {
                    (
                        r.metadata.namespace.clone().unwrap_or_default(),
                        p.name.clone(),
                        p.namespace.clone(),
                        p.section_name.clone(),
                    )
                })
            })
            .chain(c.grpc_routes.iter().flat_map(|r| {
                r.spec.parent_refs.iter().flatten().map(|p| {
                    (
                        r.metadata.namespace.clone().unwrap_or_default(),
                        p.name.clone(),
                        p.namespace.clone(),
                        p.section_name.clone(),
                    )
                })
            }))
            .collect();
        for (rns, pname, pns, psection) in parents {
            {
                let key = (pns.unwrap_or(rns), pname, psection.unwrap_or("http".into()));
                let have = c.gateways.iter().any(|g| {
                    g.metadata.name.as_deref() == Some(&key.1)
                        && g.metadata.namespace.as_deref() == Some(&key.0)
                });
                if !have && !wanted.contains(&key) {
                    wanted.push(key);
                }
            }
        }
        for (ns, name, listener) in wanted {
            if c.classes.is_empty() {
                c.classes.push(
                    serde_json::from_value(serde_json::json!({
                        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                        "metadata": {"name": "tollgate"}, "spec": {"controllerName": CONTROLLER},
                    }))
                    .expect("class"),
                );
            }
            let class = c.classes[0].metadata.name.clone().unwrap_or_default();
            c.gateways.push(serde_json::from_value(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"namespace": ns, "name": name},
                "spec": {"gatewayClassName": class, "listeners": [{"name": listener, "protocol": "HTTP", "port": 80, "allowedRoutes": {"namespaces": {"from": "All"}}}]},
            })).expect("gateway"));
        }
        for ((ns, name), ps) in ports {
            let ports: Vec<serde_json::Value> =
                ps.iter().map(|p| serde_json::json!({"port": p})).collect();
            c.services.push(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"namespace": ns, "name": name}, "spec": {"ports": ports},
                }))
                .expect("service"),
            );
        }
        c
    }

    pub fn input(&self) -> Input<'_> {
        Input {
            controller: CONTROLLER,
            classes: self.classes.iter().collect(),
            gateways: self.gateways.iter().collect(),
            http_routes: self.routes.iter().collect(),
            grpc_routes: self.grpc_routes.iter().collect(),
            grants: self.grants.iter().collect(),
            services: self.services.iter().collect(),
            namespaces: self.namespaces.iter().collect(),
            policies: self.policies.iter().collect(),
            backend_tls: self.backend_tls.iter().collect(),
            configmaps: self.configmaps.iter().collect(),
            tls: true,
            addresses: vec!["192.0.2.10".into()],
            ..Default::default()
        }
    }
}

/// The translation as Tollgate loads it (with a `[server]` of its own and the TLS files it
/// names left to the controller: only the HTTP examples are loaded).
pub fn loads(out: &Output) -> tollgate_config::model::Config {
    let mut t = out.table.clone();
    t.remove("tls");
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:8080\"]\n{}",
        toml::to_string(&t).expect("toml")
    );
    match tollgate_config::check_text(Path::new("gateway-api.toml"), &text) {
        Ok(c) => c,
        Err(e) => panic!("{e}\n{text}"),
    }
}
