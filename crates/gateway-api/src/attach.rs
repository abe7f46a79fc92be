//! A route's parentRefs: to which served listeners it attaches, and each parent's
//! `Accepted` condition with the spec's reasons (NoMatchingParent, NotAllowedByListeners,
//! NoMatchingListenerHostname).

use crate::gateways::{From, Served};
use crate::input::Input;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{json, Value};

/// The fields every route kind's parentRef has.
pub struct ParentRef<'a> {
    pub group: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub section_name: Option<&'a str>,
    pub port: Option<i32>,
}

impl ParentRef<'_> {
    /// As the status's `parentRef` says it back.
    pub fn echo(&self, route_ns: &str) -> Value {
        let mut v = json!({
            "group": self.group.unwrap_or(crate::input::GROUP),
            "kind": self.kind.unwrap_or("Gateway"),
            "name": self.name,
            "namespace": self.namespace.unwrap_or(route_ns),
        });
        if let Some(s) = self.section_name {
            v["sectionName"] = json!(s);
        }
        if let Some(p) = self.port {
            v["port"] = json!(p);
        }
        v
    }
}

/// Where one parentRef attaches: the served Gateway (its index), its listeners' indexes
/// and the hosts each serves the route for, or why it does not attach.
pub struct Attached {
    pub gateway: usize,
    /// (listener index, hosts: empty for every host).
    pub listeners: Vec<(usize, Vec<String>)>,
    /// `None`: accepted; else (reason, message).
    pub refused: Option<(&'static str, String)>,
}

/// A parentRef: `None` when it names no Gateway of Tollgate's (its status is not ours to
/// write).
pub fn attach(
    input: &Input,
    gateways: &mut [Served],
    kind: &str,
    route_ns: &str,
    hostnames: &[String],
    p: &ParentRef,
) -> Option<Attached> {
    if p.group.unwrap_or(crate::input::GROUP) != crate::input::GROUP
        || p.kind.unwrap_or("Gateway") != "Gateway"
    {
        return None;
    }
    let ns = p.namespace.unwrap_or(route_ns);
    let gi = gateways.iter().position(|s| {
        s.gateway.metadata.namespace.as_deref() == Some(ns)
            && s.gateway.metadata.name.as_deref() == Some(p.name)
    })?;
    let gw_ns = ns;
    let mut out = Attached {
        gateway: gi,
        listeners: Vec::new(),
        refused: None,
    };
    let named: Vec<usize> = gateways[gi]
        .listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| p.section_name.is_none_or(|s| s == l.name))
        .filter(|(_, l)| p.port.is_none_or(|port| i32::from(l.port) == port))
        .map(|(i, _)| i)
        .collect();
    if named.is_empty() {
        out.refused = Some((
            "NoMatchingParent",
            "no listener of the Gateway has this sectionName and port".into(),
        ));
        return Some(out);
    }
    let labels = namespace_labels(&input.namespaces, route_ns);
    let allowed: Vec<usize> = named
        .into_iter()
        .filter(|&i| {
            let l = &gateways[gi].listeners[i];
            l.kinds.contains(&kind) && admits(l.from, gw_ns, route_ns, labels)
        })
        .collect();
    if allowed.is_empty() {
        out.refused = Some((
            "NotAllowedByListeners",
            "the listeners' allowedRoutes do not take this route".into(),
        ));
        return Some(out);
    }
    // A route counts among a listener's attachedRoutes once it is accepted there: allowed,
    // and a hostname of it meets the listener's (conformance's HTTPRouteHostnameIntersection).
    for i in allowed {
        let l = &mut gateways[gi].listeners[i];
        let Some(hosts) = crate::hosts::intersect(l.hostname, hostnames) else {
            continue;
        };
        l.attached += 1;
        if l.usable() {
            out.listeners.push((i, hosts));
        }
    }
    if out.listeners.is_empty() {
        let any_usable = gateways[gi].listeners.iter().any(|l| l.usable());
        out.refused = Some(if any_usable {
            (
                "NoMatchingListenerHostname",
                "no listener's hostname meets the route's hostnames".into(),
            )
        } else {
            (
                "NotAllowedByListeners",
                "no listener this route may attach to can be served".into(),
            )
        });
    }
    Some(out)
}

fn namespace_labels<'a>(
    namespaces: &[&'a Namespace],
    ns: &str,
) -> Option<&'a std::collections::BTreeMap<String, String>> {
    namespaces
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(ns))
        .and_then(|n| n.metadata.labels.as_ref())
}

/// Whether a listener's `allowedRoutes.namespaces` takes a route of `route_ns`.
fn admits(
    from: From,
    gw_ns: &str,
    route_ns: &str,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    match from {
        From::Same => gw_ns == route_ns,
        From::All => true,
        From::Selector(s) => {
            let get = |k: &str| labels.and_then(|l| l.get(k));
            let want = s
                .match_labels
                .iter()
                .flatten()
                .all(|(k, v)| get(k) == Some(v));
            let exprs = s.match_expressions.iter().flatten().all(|e| {
                let values = e.values.as_deref().unwrap_or(&[]);
                match e.operator.as_str() {
                    "In" => get(&e.key).is_some_and(|v| values.contains(v)),
                    "NotIn" => get(&e.key).is_none_or(|v| !values.contains(v)),
                    "Exists" => get(&e.key).is_some(),
                    "DoesNotExist" => get(&e.key).is_none(),
                    _ => false,
                }
            });
            want && exprs
        }
    }
}
