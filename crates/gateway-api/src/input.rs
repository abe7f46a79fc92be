//! What the translation reads: the Gateway API's objects and the core ones they name, as the
//! reflectors hold them at one moment, with lookups by namespace and name.

use crate::types::backendtlspolicies::BackendTlsPolicy;
use crate::types::gatewayclasses::GatewayClass;
use crate::types::gateways::Gateway;
use crate::types::grpcroutes::GrpcRoute;
use crate::types::httproutes::HttpRoute;
use crate::types::policy::RateLimitPolicy;
use crate::types::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use std::collections::BTreeMap;

pub const GROUP: &str = "gateway.networking.k8s.io";

/// The cluster, as the translation reads it.
#[derive(Default)]
pub struct Input<'a> {
    /// `--gateway-class-controller`: the GatewayClasses whose `controllerName` this is are
    /// served.
    pub controller: &'a str,
    pub classes: Vec<&'a GatewayClass>,
    pub gateways: Vec<&'a Gateway>,
    pub http_routes: Vec<&'a HttpRoute>,
    pub grpc_routes: Vec<&'a GrpcRoute>,
    pub grants: Vec<&'a ReferenceGrant>,
    pub policies: Vec<&'a RateLimitPolicy>,
    pub backend_tls: Vec<&'a BackendTlsPolicy>,
    /// The ConfigMaps BackendTLSPolicies may name (their `ca.crt`).
    pub configmaps: Vec<&'a ConfigMap>,
    pub services: Vec<&'a Service>,
    pub secrets: Vec<&'a Secret>,
    pub namespaces: Vec<&'a Namespace>,
    /// The gateway runs TLS (BASE.toml's `tls_listen`): HTTPS listeners can be served.
    pub tls: bool,
    /// The addresses Gateways are reached at (`--publish-service` / `--publish-status-address`).
    pub addresses: Vec<String>,
    /// The names of the Ingresses' routes (`ID.N`, [`tollgate_ingress::ingress_id`]): a
    /// policy that targets an Ingress reaches them.
    pub ingress_routes: Vec<&'a str>,
}

/// Objects by (namespace, name).
pub struct ByName<'a, T>(BTreeMap<(&'a str, &'a str), &'a T>);

impl<'a, T: kube::Resource> ByName<'a, T> {
    pub fn new(items: &[&'a T]) -> Self {
        ByName(
            items
                .iter()
                .map(|o| {
                    let m = o.meta();
                    (
                        (
                            m.namespace.as_deref().unwrap_or(""),
                            m.name.as_deref().unwrap_or(""),
                        ),
                        *o,
                    )
                })
                .collect(),
        )
    }

    pub fn get(&self, ns: &str, name: &str) -> Option<&'a T> {
        self.0.get(&(ns, name)).copied()
    }
}

/// `NAMESPACE/NAME` of an object.
pub fn id(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or(""),
        m.name.as_deref().unwrap_or("")
    )
}

/// The order the Gateway API breaks ties in: the oldest first, then by namespace and name.
pub fn age_key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        m.creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        id(m),
    )
}
