//! GatewayClasses and Gateways: which are Tollgate's, which of their listeners can be
//! served, and their statuses (Accepted, Programmed, and per listener Accepted, Conflicted,
//! ResolvedRefs, Programmed with attachedRoutes), as the spec says them.

use crate::conditions::condition;
use crate::input::{age_key, ByName, Input};
use crate::refs::{certificate, Unresolved};
use crate::types::gatewayclasses::GatewayClass;
use crate::types::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector, GatewayListenersTlsMode,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Which namespaces' routes a listener takes.
#[derive(Clone, Copy)]
pub enum From<'a> {
    Same,
    All,
    Selector(&'a GatewayListenersAllowedRoutesNamespacesSelector),
}

/// One listener of a served Gateway.
pub struct Listener<'a> {
    pub name: &'a str,
    pub port: u16,
    pub tls: bool,
    pub hostname: Option<&'a str>,
    pub from: From<'a>,
    /// The route kinds it takes (`supportedKinds`).
    pub kinds: Vec<&'static str>,
    /// A kind of `allowedRoutes.kinds` it cannot take.
    pub invalid_kinds: bool,
    /// Why it is not accepted: (reason, message).
    pub refused: Option<(&'static str, String)>,
    /// Why it conflicts with another: the reason.
    pub conflict: Option<&'static str>,
    /// Its certificates (NAMESPACE, NAME), or why one is not usable.
    pub certificates: Result<Vec<(String, String)>, Unresolved>,
    /// Why it cannot be programmed (no TLS runtime).
    pub unprogrammable: Option<String>,
    /// Routes attached by allowedRoutes and parentRefs.
    pub attached: i32,
}

impl Listener<'_> {
    /// Whether routes attached to it are served.
    pub fn usable(&self) -> bool {
        self.refused.is_none()
            && self.conflict.is_none()
            && self.certificates.is_ok()
            && self.unprogrammable.is_none()
    }
}

/// A served Gateway.
pub struct Served<'a> {
    pub gateway: &'a Gateway,
    pub listeners: Vec<Listener<'a>>,
}

/// The route kinds Tollgate serves on HTTP and HTTPS listeners.
pub const ROUTE_KINDS: [&str; 2] = ["HTTPRoute", "GRPCRoute"];

/// The GatewayClasses whose controllerName is Tollgate's, with their statuses.
pub fn classes<'a>(input: &Input<'a>) -> Vec<&'a GatewayClass> {
    let mut out: Vec<&GatewayClass> = input
        .classes
        .iter()
        .copied()
        .filter(|c| c.spec.controller_name == input.controller)
        .collect();
    out.sort_by_key(|c| c.metadata.name.clone());
    out
}

pub fn class_status(c: &GatewayClass) -> Value {
    let features: Vec<Value> = crate::supported::FEATURES
        .iter()
        .map(|f| json!({"name": f}))
        .collect();
    json!({
        "conditions": [condition("Accepted", true, "Accepted", "Tollgate serves this class", c.metadata.generation)],
        "supportedFeatures": features,
    })
}

/// The Gateways of Tollgate's classes, the oldest first, with their listeners judged; a port
/// spoken by two protocols goes to the first that asked.
pub fn served<'a>(input: &Input<'a>, classes: &[&GatewayClass]) -> Vec<Served<'a>> {
    let names: Vec<&str> = classes
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let mut gws: Vec<&Gateway> = input
        .gateways
        .iter()
        .copied()
        .filter(|g| names.contains(&g.spec.gateway_class_name.as_str()))
        .collect();
    gws.sort_by_key(|g| age_key(&g.metadata));
    let secrets = ByName::new(&input.secrets);
    let mut ports: BTreeMap<u16, bool> = BTreeMap::new();
    let mut out = Vec::new();
    for g in gws {
        let ns = g.metadata.namespace.as_deref().unwrap_or("");
        let mut listeners: Vec<Listener> = g
            .spec
            .listeners
            .iter()
            .map(|l| listener(input, &secrets, ns, l))
            .collect();
        conflicts(&mut listeners, &mut ports);
        out.push(Served {
            gateway: g,
            listeners,
        });
    }
    out
}

fn listener<'a>(
    input: &Input,
    secrets: &ByName<k8s_openapi::api::core::v1::Secret>,
    ns: &str,
    l: &'a GatewayListeners,
) -> Listener<'a> {
    let tls = l.protocol == "HTTPS";
    let mut refused = match l.protocol.as_str() {
        "HTTP" | "HTTPS" => None,
        p => Some((
            "UnsupportedProtocol",
            format!("protocol {p}: Tollgate serves HTTP and HTTPS listeners"),
        )),
    };
    let port = u16::try_from(l.port).ok().filter(|&p| p > 0);
    if port.is_none() && refused.is_none() {
        refused = Some(("PortUnavailable", format!("port {}", l.port)));
    }
    let allowed = l.allowed_routes.as_ref();
    let from = match allowed.and_then(|a| a.namespaces.as_ref()) {
        Some(n) => match (&n.from, &n.selector) {
            (Some(GatewayListenersAllowedRoutesNamespacesFrom::All), _) => From::All,
            (Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector), Some(s)) => {
                From::Selector(s)
            }
            _ => From::Same,
        },
        None => From::Same,
    };
    let mut kinds: Vec<&'static str> = Vec::new();
    let mut invalid_kinds = false;
    match allowed.and_then(|a| a.kinds.as_ref()) {
        Some(ks) => {
            for k in ks {
                let group_ok = k.group.as_deref().is_none_or(|g| g == crate::input::GROUP);
                match ROUTE_KINDS.iter().find(|r| **r == k.kind) {
                    Some(r) if group_ok => kinds.push(r),
                    _ => invalid_kinds = true,
                }
            }
        }
        None => kinds.extend(ROUTE_KINDS),
    }
    let mut certificates = Ok(Vec::new());
    let mut unprogrammable = None;
    if tls && refused.is_none() {
        let t = l.tls.as_ref();
        if matches!(
            t.and_then(|t| t.mode.as_ref()),
            Some(GatewayListenersTlsMode::Passthrough)
        ) {
            refused = Some((
                "UnsupportedProtocol",
                "an HTTPS listener terminates TLS: Passthrough is TLSRoute's".into(),
            ));
        }
        let refs = t.and_then(|t| t.certificate_refs.as_deref()).unwrap_or(&[]);
        certificates = if refs.is_empty() {
            Err(Unresolved {
                reason: "InvalidCertificateRef",
                message: "an HTTPS listener needs tls.certificateRefs".into(),
            })
        } else {
            refs.iter()
                .map(|c| {
                    certificate(
                        input,
                        secrets,
                        ns,
                        c.group.as_deref(),
                        c.kind.as_deref(),
                        &c.name,
                        c.namespace.as_deref(),
                    )
                })
                .collect()
        };
        if !input.tls {
            unprogrammable = Some("HTTPS listeners need TLS in BASE.toml (server.tls_listen): Tollgate's TLS runtime starts with it".to_string());
        }
    }
    Listener {
        name: &l.name,
        port: port.unwrap_or(0),
        tls,
        hostname: l.hostname.as_deref(),
        from,
        kinds,
        invalid_kinds,
        refused,
        conflict: None,
        certificates,
        unprogrammable,
        attached: 0,
    }
}

/// Two listeners of one port: HTTP and HTTPS conflict (ProtocolConflict, here or with an
/// older Gateway's), and so do two of one protocol and hostname (HostnameConflict).
fn conflicts(ls: &mut [Listener], ports: &mut BTreeMap<u16, bool>) {
    for i in 0..ls.len() {
        if ls[i].refused.is_some() {
            continue;
        }
        let (port, tls, host) = (ls[i].port, ls[i].tls, ls[i].hostname);
        let mut conflict = None;
        for (j, other) in ls.iter().enumerate() {
            if i == j || other.refused.is_some() || other.port != port {
                continue;
            }
            if other.tls != tls {
                conflict = Some("ProtocolConflict");
            } else if other.hostname == host && conflict.is_none() {
                conflict = Some("HostnameConflict");
            }
        }
        if conflict.is_none() && ports.get(&port).is_some_and(|&t| t != tls) {
            conflict = Some("ProtocolConflict");
        }
        ls[i].conflict = conflict;
        if conflict.is_none() {
            ports.entry(port).or_insert(tls);
        }
    }
}

fn listener_status(l: &Listener, generation: Option<i64>) -> Value {
    let c = |t: &str, ok: bool, reason: &str, message: &str| {
        condition(t, ok, reason, message, generation)
    };
    let accepted = match &l.refused {
        Some((reason, message)) => c("Accepted", false, reason, message),
        None => c("Accepted", true, "Accepted", "the listener is valid"),
    };
    let conflicted = match l.conflict {
        Some(reason) => c(
            "Conflicted",
            true,
            reason,
            "another listener of this port conflicts with it",
        ),
        None => c("Conflicted", false, "NoConflicts", "no conflict"),
    };
    let resolved = match (&l.certificates, l.invalid_kinds) {
        (Err(u), _) => c("ResolvedRefs", false, u.reason, &u.message),
        (Ok(_), true) => c(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            "allowedRoutes.kinds names a kind Tollgate does not serve",
        ),
        _ => c(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every reference is resolved",
        ),
    };
    let programmed = match (l.usable(), &l.unprogrammable) {
        (true, _) => c("Programmed", true, "Programmed", "served"),
        (false, Some(why)) => c("Programmed", false, "Invalid", why),
        (false, None) => c("Programmed", false, "Invalid", "the listener is not valid"),
    };
    let kinds: Vec<Value> = l
        .kinds
        .iter()
        .map(|k| json!({"group": crate::input::GROUP, "kind": k}))
        .collect();
    json!({
        "name": l.name,
        "supportedKinds": kinds,
        "attachedRoutes": l.attached,
        "conditions": [accepted, conflicted, resolved, programmed],
    })
}

/// A Gateway's status: its conditions, its listeners', and the addresses it is reached at.
pub fn gateway_status(s: &Served, input: &Input) -> Value {
    let generation = s.gateway.metadata.generation;
    let usable = s.listeners.iter().filter(|l| l.usable()).count();
    let all = s.listeners.len();
    let accepted = if usable == all {
        condition(
            "Accepted",
            true,
            "Accepted",
            "every listener is valid",
            generation,
        )
    } else {
        condition(
            "Accepted",
            usable > 0,
            "ListenersNotValid",
            &format!("{} of {all} listeners cannot be served", all - usable),
            generation,
        )
    };
    let asked: Vec<&str> = s
        .gateway
        .spec
        .addresses
        .iter()
        .flatten()
        .filter_map(|a| a.value.as_deref())
        .collect();
    let unassigned: Vec<&str> = asked
        .iter()
        .copied()
        .filter(|a| !input.addresses.iter().any(|p| p == a))
        .collect();
    let programmed = if !unassigned.is_empty() {
        condition(
            "Programmed",
            false,
            "AddressNotAssigned",
            &format!("Tollgate is not reached at {}", unassigned.join(", ")),
            generation,
        )
    } else if usable == 0 {
        condition(
            "Programmed",
            false,
            "Invalid",
            "no listener can be served",
            generation,
        )
    } else {
        condition("Programmed", true, "Programmed", "served", generation)
    };
    let addresses: Vec<Value> = input
        .addresses
        .iter()
        .map(|a| {
            let kind = if a.parse::<std::net::IpAddr>().is_ok() {
                "IPAddress"
            } else {
                "Hostname"
            };
            json!({"type": kind, "value": a})
        })
        .collect();
    let listeners: Vec<Value> = s
        .listeners
        .iter()
        .map(|l| listener_status(l, generation))
        .collect();
    json!({
        "conditions": [accepted, programmed],
        "listeners": listeners,
        "addresses": addresses,
    })
}
