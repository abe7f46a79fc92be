//! References across objects: ReferenceGrants, and what a backendRef or a certificateRef
//! names, resolved with the spec's reasons.

use crate::input::{ByName, Input};
use crate::types::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Secret, Service};

/// Whether a `from_kind` (group `gateway.networking.k8s.io`) in `from_ns` may refer to the
/// `to_kind` object `name` in `to_ns` (core group): the same namespace, or a ReferenceGrant
/// there that allows it.
pub fn granted(
    grants: &[&ReferenceGrant],
    from_kind: &str,
    from_ns: &str,
    to_kind: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    from_ns == to_ns
        || grants.iter().any(|g| {
            g.metadata.namespace.as_deref() == Some(to_ns)
                && g.spec.from.iter().any(|f| {
                    f.group == crate::input::GROUP && f.kind == from_kind && f.namespace == from_ns
                })
                && g.spec.to.iter().any(|t| {
                    t.group.is_empty()
                        && t.kind == to_kind
                        && t.name.as_deref().is_none_or(|n| n == name)
                })
        })
}

/// A backendRef resolved: the Service port it names, and whether it speaks h2c
/// (`appProtocol: kubernetes.io/h2c`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    pub port: u16,
    pub h2c: bool,
    /// The Service port's name (a BackendTLSPolicy's `sectionName`).
    pub port_name: Option<String>,
}

/// Why a reference is not resolved: the reason of `ResolvedRefs: False`, and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    pub reason: &'static str,
    pub message: String,
}

/// The fields every kind of backendRef has.
pub struct Ref<'a> {
    pub group: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub port: Option<i32>,
}

pub fn backend(
    input: &Input,
    services: &ByName<Service>,
    from_kind: &str,
    from_ns: &str,
    r: &Ref,
) -> Result<ServicePort, Unresolved> {
    let (group, kind) = (r.group.unwrap_or(""), r.kind.unwrap_or("Service"));
    if !group.is_empty() || kind != "Service" {
        return Err(Unresolved {
            reason: "InvalidKind",
            message: format!(
                "backendRef {group}/{kind} {}: only Services are supported",
                r.name
            ),
        });
    }
    let ns = r.namespace.unwrap_or(from_ns);
    if !granted(&input.grants, from_kind, from_ns, "Service", ns, r.name) {
        return Err(Unresolved {
            reason: "RefNotPermitted",
            message: format!("Service {ns}/{}: no ReferenceGrant in {ns} allows a {from_kind} of {from_ns} to refer to it", r.name),
        });
    }
    let Some(svc) = services.get(ns, r.name) else {
        return Err(Unresolved {
            reason: "BackendNotFound",
            message: format!("Service {ns}/{} does not exist", r.name),
        });
    };
    let Some(port) = r
        .port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p > 0)
    else {
        return Err(Unresolved {
            reason: "UnsupportedValue",
            message: format!(
                "Service {ns}/{}: a backendRef to a Service needs its port",
                r.name
            ),
        });
    };
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    let Some(sp) = ports.and_then(|ps| ps.iter().find(|p| p.port == i32::from(port))) else {
        return Err(Unresolved {
            reason: "BackendNotFound",
            message: format!("Service {ns}/{} has no port {port}", r.name),
        });
    };
    Ok(ServicePort {
        namespace: ns.to_string(),
        name: r.name.to_string(),
        port,
        h2c: sp.app_protocol.as_deref() == Some("kubernetes.io/h2c"),
        port_name: sp.name.clone(),
    })
}

/// A listener's certificateRef resolved to its Secret (which must hold `tls.crt` and
/// `tls.key`).
pub fn certificate(
    input: &Input,
    secrets: &ByName<Secret>,
    gateway_ns: &str,
    group: Option<&str>,
    kind: Option<&str>,
    name: &str,
    namespace: Option<&str>,
) -> Result<(String, String), Unresolved> {
    let (group, kind) = (group.unwrap_or(""), kind.unwrap_or("Secret"));
    if !group.is_empty() || kind != "Secret" {
        return Err(Unresolved {
            reason: "InvalidCertificateRef",
            message: format!("certificateRef {group}/{kind} {name}: only Secrets are supported"),
        });
    }
    let ns = namespace.unwrap_or(gateway_ns);
    if !granted(&input.grants, "Gateway", gateway_ns, "Secret", ns, name) {
        return Err(Unresolved {
            reason: "RefNotPermitted",
            message: format!("Secret {ns}/{name}: no ReferenceGrant in {ns} allows a Gateway of {gateway_ns} to refer to it"),
        });
    }
    let holds = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .is_some_and(|d| d.get(k).is_some_and(|v| !v.0.is_empty()))
            || s.string_data
                .as_ref()
                .is_some_and(|d| d.get(k).is_some_and(|v| !v.is_empty()))
    };
    match secrets.get(ns, name) {
        Some(s) if holds(s, "tls.crt") && holds(s, "tls.key") => {
            Ok((ns.to_string(), name.to_string()))
        }
        Some(_) => Err(Unresolved {
            reason: "InvalidCertificateRef",
            message: format!("Secret {ns}/{name} holds no tls.crt and tls.key"),
        }),
        None => Err(Unresolved {
            reason: "InvalidCertificateRef",
            message: format!("Secret {ns}/{name} does not exist"),
        }),
    }
}
