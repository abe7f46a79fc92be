//! BackendTLSPolicy: TLS from the gateway to a Service's pods, verified against the CA
//! bundles of the ConfigMaps it names (their `ca.crt`, held in memory by the controller at
//! `TLS_MOUNT/NAMESPACE/_configmap.NAME/ca.crt`) or the system's roots (`wellKnownCACertificates:
//! System`), the name verified and sent as SNI being `validation.hostname`. A policy whose
//! CA cannot be used leaves its Service's routes answering 500 rather than speaking to the
//! pods unverified (fail closed). Status: one ancestor per Gateway whose routes use the
//! Service.

use crate::conditions::condition;
use crate::types::backendtlspolicies::BackendTlsPolicy;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{json, Value as Json};
use toml::{Table, Value};

/// The folder a ConfigMap's keys are held in, under a namespace's: `_` begins no Secret's
/// name, so it cannot be one's.
pub fn configmap_dir(ns: &str, name: &str) -> std::path::PathBuf {
    std::path::Path::new(tollgate_config::TLS_MOUNT)
        .join(ns)
        .join(format!("_configmap.{name}"))
}

/// What an upstream to a Service port gets from the policy that targets it.
pub enum Upstream {
    /// `tls = {...}`.
    Tls(Table),
    /// The policy cannot be served: the upstream is not used (its shares answer 500).
    Refused(String),
}

/// The policy of `ns/service` (its port `port_name`), oldest first: one naming the port by
/// `sectionName` beats one naming the whole Service.
pub fn find<'a>(
    policies: &[&'a BackendTlsPolicy],
    ns: &str,
    service: &str,
    port_name: Option<&str>,
) -> Option<&'a BackendTlsPolicy> {
    let mut ps: Vec<(&BackendTlsPolicy, bool)> = policies
        .iter()
        .copied()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .filter_map(|p| {
            p.spec
                .target_refs
                .iter()
                .filter(|t| t.group.is_empty() && t.kind == "Service" && t.name == service)
                .filter(|t| {
                    t.section_name
                        .as_deref()
                        .is_none_or(|s| Some(s) == port_name)
                })
                .map(|t| t.section_name.is_some())
                .max()
                .map(|named| (p, named))
        })
        .collect();
    ps.sort_by_key(|(p, named)| (!named, crate::input::age_key(&p.metadata)));
    ps.first().map(|(p, _)| *p)
}

/// The upstream's `tls` for `p`, or why it cannot be.
pub fn upstream(p: &BackendTlsPolicy, configmaps: &[&ConfigMap]) -> Upstream {
    let ns = p.metadata.namespace.as_deref().unwrap_or("");
    let v = &p.spec.validation;
    let mut t = Table::new();
    t.insert("sni".into(), Value::String(v.hostname.clone()));
    t.insert("verify".into(), Value::Boolean(true));
    let refs = v.ca_certificate_refs.as_deref().unwrap_or(&[]);
    match (refs, v.well_known_ca_certificates.as_deref()) {
        ([], Some("System")) => {}
        ([r], None) => {
            if !(r.group.is_empty() && r.kind == "ConfigMap") {
                return Upstream::Refused(format!(
                    "caCertificateRefs {}/{} {}: only ConfigMaps are supported",
                    r.group, r.kind, r.name
                ));
            }
            let held = configmaps.iter().any(|c| {
                c.metadata.namespace.as_deref() == Some(ns)
                    && c.metadata.name.as_deref() == Some(r.name.as_str())
                    && c.data
                        .as_ref()
                        .is_some_and(|d| d.get("ca.crt").is_some_and(|v| !v.trim().is_empty()))
            });
            if !held {
                return Upstream::Refused(format!("ConfigMap {ns}/{} holds no ca.crt", r.name));
            }
            let path = configmap_dir(ns, &r.name).join("ca.crt");
            t.insert("ca".into(), Value::String(path.display().to_string()));
        }
        ([], _) => {
            return Upstream::Refused(
                "validation names no CA: caCertificateRefs or wellKnownCACertificates: System"
                    .into(),
            )
        }
        _ => return Upstream::Refused(
            "one CA bundle is served: one caCertificateRefs entry, without wellKnownCACertificates"
                .into(),
        ),
    }
    if v.subject_alt_names.as_ref().is_some_and(|s| !s.is_empty()) {
        return Upstream::Refused(
            "subjectAltNames: Tollgate verifies validation.hostname only".into(),
        );
    }
    Upstream::Tls(t)
}

/// A policy's status: Accepted (or why not) for each Gateway reaching its Service.
pub fn status(
    p: &BackendTlsPolicy,
    controller: &str,
    gateways: &[String],
    refused: Option<&str>,
) -> Json {
    let generation = p.metadata.generation;
    let accepted = match refused {
        Some(why) => condition("Accepted", false, "Invalid", why, generation),
        None => condition(
            "Accepted",
            true,
            "Accepted",
            "the Service's pods are spoken to over TLS",
            generation,
        ),
    };
    let resolved = match refused {
        Some(why) if why.contains("ConfigMap") || why.contains("caCertificateRefs") => condition(
            "ResolvedRefs",
            false,
            "InvalidCACertificateRef",
            why,
            generation,
        ),
        _ => condition(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every reference is resolved",
            generation,
        ),
    };
    let ancestors: Vec<Json> = gateways
        .iter()
        .map(|g| {
            let (gns, gname) = g.split_once('/').unwrap_or(("", g));
            json!({
                "ancestorRef": {"group": crate::input::GROUP, "kind": "Gateway", "name": gname, "namespace": gns},
                "controllerName": controller,
                "conditions": [accepted.clone(), resolved.clone()],
            })
        })
        .collect();
    json!({"ancestors": ancestors})
}
