//! The resources the stand-in serves, as the API server's discovery names them.

/// One resource: where it lives, what it is called, and whether it has a status subresource
/// (then a write of the object keeps the stored `.status`, and `/status` writes only that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// `""` for the core group (`/api/v1`).
    pub group: &'static str,
    pub version: &'static str,
    /// The plural, as in paths.
    pub resource: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub status: bool,
    pub short: &'static [&'static str],
}

impl Kind {
    /// `v1` or `networking.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `ingresses.networking.k8s.io`, as the API server's messages name a resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// One row of [`KINDS`] (a table constructor: each argument is a column).
#[allow(clippy::too_many_arguments)]
const fn k(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
    short: &'static [&'static str],
) -> Kind {
    Kind {
        group,
        version,
        resource,
        singular,
        kind,
        namespaced,
        status,
        short,
    }
}

/// Every kind served: what an ingress controller and a Gateway API controller read and write,
/// and what kubectl needs around them.
pub const KINDS: &[Kind] = &[
    k(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        true,
        &["ns"],
    ),
    k(
        "",
        "v1",
        "services",
        "service",
        "Service",
        true,
        true,
        &["svc"],
    ),
    k("", "v1", "secrets", "secret", "Secret", true, false, &[]),
    k(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        false,
        &["cm"],
    ),
    k("", "v1", "events", "event", "Event", true, false, &["ev"]),
    k("", "v1", "pods", "pod", "Pod", true, true, &["po"]),
    k(
        "",
        "v1",
        "endpoints",
        "endpoints",
        "Endpoints",
        true,
        false,
        &["ep"],
    ),
    k(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        true,
        false,
        &[],
    ),
    k(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "ingress",
        "Ingress",
        true,
        true,
        &["ing"],
    ),
    k(
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        "ingressclass",
        "IngressClass",
        false,
        false,
        &[],
    ),
    k(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        true,
        false,
        &[],
    ),
    k(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        true,
        false,
        &["ev"],
    ),
    k(
        "gateway.networking.k8s.io",
        "v1",
        "gatewayclasses",
        "gatewayclass",
        "GatewayClass",
        false,
        true,
        &["gc"],
    ),
    k(
        "gateway.networking.k8s.io",
        "v1",
        "gateways",
        "gateway",
        "Gateway",
        true,
        true,
        &["gtw"],
    ),
    k(
        "gateway.networking.k8s.io",
        "v1",
        "httproutes",
        "httproute",
        "HTTPRoute",
        true,
        true,
        &[],
    ),
    k(
        "gateway.networking.k8s.io",
        "v1",
        "grpcroutes",
        "grpcroute",
        "GRPCRoute",
        true,
        true,
        &[],
    ),
    k(
        "gateway.networking.k8s.io",
        "v1",
        "referencegrants",
        "referencegrant",
        "ReferenceGrant",
        true,
        false,
        &["refgrant"],
    ),
    k(
        "gateway.networking.k8s.io",
        "v1",
        "backendtlspolicies",
        "backendtlspolicy",
        "BackendTLSPolicy",
        true,
        true,
        &["btlspolicy"],
    ),
    k(
        "tollgate.io",
        "v1alpha1",
        "ratelimitpolicies",
        "ratelimitpolicy",
        "RateLimitPolicy",
        true,
        true,
        &[],
    ),
    k(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        true,
        &["crd", "crds"],
    ),
];

/// `namespaces`: the first kind (checked by a test), which every namespaced write looks up.
pub const NAMESPACES: usize = 0;

/// The kind at `group`/`version`/`resource`.
pub fn find(group: &str, version: &str, resource: &str) -> Option<usize> {
    KINDS
        .iter()
        .position(|k| k.group == group && k.version == version && k.resource == resource)
}

/// The API groups other than the core one, in the order first served, with their versions.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for k in KINDS.iter().filter(|k| !k.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == k.group) {
            Some((_, vs)) if !vs.contains(&k.version) => vs.push(k.version),
            Some(_) => {}
            None => out.push((k.group, vec![k.version])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn namespaces_is_the_first_kind() {
        assert_eq!(super::find("", "v1", "namespaces"), Some(super::NAMESPACES));
    }
}
