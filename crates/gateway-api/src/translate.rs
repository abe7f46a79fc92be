//! The Gateway API's objects into Tollgate's config: the served Gateways' listeners (ports
//! to serve), their HTTPRoutes' routes in the spec's precedence, the RateLimitPolicies'
//! limits on them, the HTTPS listeners' certificates, and every status the spec asks.

use crate::attach::attach;
use crate::conditions::condition;
use crate::input::{id, ByName, Input};
use crate::objects::RouteObj;
use crate::rules::{Cx, Emitted, Sink, Target};
use serde_json::{json, Value as Json};
use std::collections::BTreeSet;
use toml::{Table, Value};

/// One status to write: the object's kind, namespace (none for a GatewayClass) and name,
/// and its `.status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub status: Json,
}

#[derive(Debug, Default)]
pub struct Output {
    /// Tollgate TOML: `upstreams`, `routes`, `limits`, `tls.certificates`.
    pub table: Table,
    /// The listeners to serve: (port, TLS).
    pub listeners: Vec<(u16, bool)>,
    pub statuses: Vec<Status>,
    /// What was left out, one line each.
    pub problems: Vec<String>,
    /// The routes served (`HTTPRoute NAMESPACE/NAME`, `GRPCRoute NAMESPACE/NAME`).
    pub routes: BTreeSet<String>,
    /// The policies' limits on the Ingresses' routes: route name, limits to add.
    pub ingress_limits: std::collections::BTreeMap<String, Vec<String>>,
}

/// The translation; the HTTPRoutes in `refused` (with why) are not served: their parents
/// say so.
pub fn translate(input: &Input, refused: &[(String, String)]) -> Output {
    let mut out = Output::default();
    let classes = crate::gateways::classes(input);
    for c in &classes {
        out.statuses.push(Status {
            kind: "GatewayClass",
            namespace: None,
            name: c.metadata.name.clone().unwrap_or_default(),
            status: crate::gateways::class_status(c),
        });
    }
    let mut served = crate::gateways::served(input, &classes);
    let cx = Cx {
        input,
        services: ByName::new(&input.services),
    };
    let mut emitted: Vec<Emitted> = Vec::new();
    let mut sink = Sink::default();
    let mut routes: Vec<RouteObj> = input
        .http_routes
        .iter()
        .map(|r| RouteObj::http(r))
        .chain(input.grpc_routes.iter().map(|r| RouteObj::grpc(r)))
        .collect();
    routes.sort_by_key(|r| crate::input::age_key(r.meta));
    for r in &routes {
        let rid = format!("{} {}", r.kind, id(r.meta));
        let why = refused
            .iter()
            .find(|(id, _)| *id == rid)
            .map(|(_, w)| w.as_str());
        if let Some(st) = route(&cx, &mut served, r, why, &mut emitted, &mut sink) {
            if why.is_none() && st.1 {
                out.routes.insert(rid);
            }
            out.statuses.push(st.0);
        }
    }
    out.problems.append(&mut sink.notes);
    for p in &input.backend_tls {
        let pid = id(&p.metadata);
        let Some(gateways) = sink.tls_reached.get(&pid) else {
            continue;
        };
        let gateways: Vec<String> = gateways.iter().cloned().collect();
        out.statuses.push(Status {
            kind: "BackendTLSPolicy",
            namespace: p.metadata.namespace.clone(),
            name: p.metadata.name.clone().unwrap_or_default(),
            status: crate::backend_tls::status(
                p,
                input.controller,
                &gateways,
                sink.tls_refused.get(&pid).map(String::as_str),
            ),
        });
    }
    for s in &served {
        out.statuses.push(Status {
            kind: "Gateway",
            namespace: s.gateway.metadata.namespace.clone(),
            name: s.gateway.metadata.name.clone().unwrap_or_default(),
            status: crate::gateways::gateway_status(s, input),
        });
    }
    out.listeners = listeners(&served);
    unrouted(&served, &mut emitted);
    let attached = crate::policy::attach(
        &input.policies,
        input.controller,
        &input.ingress_routes,
        &mut emitted,
    );
    for (ns, name, status) in attached.statuses {
        out.statuses.push(Status {
            kind: "RateLimitPolicy",
            namespace: Some(ns),
            name,
            status,
        });
    }
    out.ingress_limits = attached.ingress_limits;
    emitted.sort_by(|a, b| a.key.cmp(&b.key));
    write(
        &mut out.table,
        emitted,
        sink.upstreams,
        attached.limits,
        certificates(&served),
    );
    out
}

/// One route: its routes into `emitted`, and its status (with whether any parent took it);
/// `None` when no parent is a Gateway of Tollgate's.
fn route(
    cx: &Cx,
    served: &mut [crate::gateways::Served],
    r: &RouteObj,
    refused: Option<&str>,
    emitted: &mut Vec<Emitted>,
    sink: &mut Sink,
) -> Option<(Status, bool)> {
    let ns = r.meta.namespace.as_deref().unwrap_or("");
    let mut parents: Vec<(Json, Option<(&'static str, String)>)> = Vec::new();
    let mut targets: Vec<(u16, Vec<String>, String, String, String)> = Vec::new();
    for p in &r.parents {
        let pr = p.as_ref();
        let Some(a) = attach(cx.input, served, r.kind, ns, &r.hostnames, &pr) else {
            continue;
        };
        let g = &served[a.gateway];
        for (li, hosts) in &a.listeners {
            let l = &g.listeners[*li];
            let t = (
                l.port,
                hosts.clone(),
                id(&g.gateway.metadata),
                l.name.to_string(),
                l.hostname.unwrap_or("").to_ascii_lowercase(),
            );
            // Two parentRefs reaching one listener (by name and by port) serve it once.
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
        parents.push((pr.echo(ns), a.refused));
    }
    if parents.is_empty() {
        return None;
    }
    let before = sink.unresolved.len();
    if refused.is_none() {
        let ts: Vec<Target> = targets
            .iter()
            .map(|(port, hosts, gateway, listener, hostname)| Target {
                port: *port,
                hosts,
                gateway: gateway.clone(),
                listener,
                hostname,
            })
            .collect();
        crate::rules::route(cx, r, &ts, emitted, sink);
    }
    let unresolved: Vec<_> = sink.unresolved.drain(before..).collect();
    let generation = r.meta.generation;
    let mut any = false;
    let statuses: Vec<Json> = parents
        .into_iter()
        .map(|(parent_ref, why)| {
            let accepted = match (&why, refused) {
                (_, Some(msg)) => condition("Accepted", false, "UnsupportedValue", msg, generation),
                (Some((reason, msg)), None) => {
                    condition("Accepted", false, reason, msg, generation)
                }
                (None, None) => {
                    any = true;
                    condition("Accepted", true, "Accepted", "attached", generation)
                }
            };
            let resolved = match unresolved.first() {
                Some(u) => condition("ResolvedRefs", false, u.reason, &u.message, generation),
                None => condition(
                    "ResolvedRefs",
                    true,
                    "ResolvedRefs",
                    "every reference is resolved",
                    generation,
                ),
            };
            json!({
                "parentRef": parent_ref,
                "controllerName": cx.input.controller,
                "conditions": [accepted, resolved],
            })
        })
        .collect();
    Some((
        Status {
            kind: r.kind,
            namespace: r.meta.namespace.clone(),
            name: r.meta.name.clone().unwrap_or_default(),
            status: json!({"parents": statuses}),
        },
        any,
    ))
}

fn listeners(served: &[crate::gateways::Served]) -> Vec<(u16, bool)> {
    let mut out: Vec<(u16, bool)> = served
        .iter()
        .flat_map(|s| s.listeners.iter())
        .filter(|l| l.usable())
        .map(|l| (l.port, l.tls))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A 404 route for each listener that no route reached on a port where others have routes
/// (503 for one that cannot be served), so that it still takes the hosts it matches most closely from a less specific
/// listener of its port (listener isolation: `listener_host` only knows the listeners its
/// routes name).
fn unrouted(served: &[crate::gateways::Served], emitted: &mut Vec<Emitted>) {
    let routed: BTreeSet<(u16, String)> = emitted
        .iter()
        .filter_map(|e| {
            let h = e.table.get("listener_host")?.as_str()?;
            Some((e.key.port, h.to_string()))
        })
        .collect();
    let mut placed: BTreeSet<(u16, String)> = BTreeSet::new();
    for s in served {
        let gateway = id(&s.gateway.metadata);
        for l in &s.listeners {
            let host = l.hostname.unwrap_or("");
            // Needed only where another listener of the port has routes to lend it; once
            // per hostname (a conflict's loser is its winner's). A listener that cannot be
            // served keeps its hosts too: they are answered 503, never by another's routes.
            if routed.contains(&(l.port, host.to_string()))
                || !routed.iter().any(|(p, _)| *p == l.port)
                || !placed.insert((l.port, host.to_string()))
            {
                continue;
            }
            let (status, why) = if l.usable() {
                (404, "no route is attached to")
            } else {
                (503, "cannot be served:")
            };
            let mut table = Table::new();
            table.insert(
                "name".into(),
                Value::String(format!("gateway:listener/{gateway}/{}", l.name)),
            );
            table.insert("path_prefix".into(), Value::String("/".into()));
            table.insert("ports".into(), Value::Array(vec![i64::from(l.port).into()]));
            table.insert("listener_host".into(), Value::String(host.into()));
            let mut r = Table::new();
            r.insert("status".into(), status.into());
            r.insert(
                "body".into(),
                Value::String(format!("{why} listener {}\n", l.name)),
            );
            table.insert("respond".into(), Value::Table(r));
            emitted.push(Emitted {
                key: crate::rules::Key::last(l.port),
                origin: crate::rules::Origin {
                    gateway: gateway.clone(),
                    listener: l.name.to_string(),
                    kind: "Listener",
                    route: String::new(),
                    rule: None,
                },
                table,
            });
        }
    }
}

/// The usable HTTPS listeners' certificates, as files under `TLS_MOUNT` (held in memory by
/// the controller).
fn certificates(served: &[crate::gateways::Served]) -> Vec<Value> {
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for l in served
        .iter()
        .flat_map(|s| s.listeners.iter())
        .filter(|l| l.usable() && l.tls)
    {
        if let Ok(cs) = &l.certificates {
            seen.extend(cs.iter().cloned());
        }
    }
    seen.into_iter()
        .map(|(ns, name)| {
            let dir = std::path::Path::new(tollgate_config::TLS_MOUNT)
                .join(&ns)
                .join(&name);
            let mut t = Table::new();
            t.insert(
                "cert".into(),
                Value::String(dir.join("tls.crt").display().to_string()),
            );
            t.insert(
                "key".into(),
                Value::String(dir.join("tls.key").display().to_string()),
            );
            Value::Table(t)
        })
        .collect()
}

fn write(
    t: &mut Table,
    emitted: Vec<Emitted>,
    ups: crate::rules::Upstreams,
    limits: Table,
    certs: Vec<Value>,
) {
    if !ups.is_empty() {
        t.insert(
            "upstreams".into(),
            Value::Table(ups.into_iter().map(|(k, v)| (k, Value::Table(v))).collect()),
        );
    }
    if !limits.is_empty() {
        t.insert("limits".into(), Value::Table(limits));
    }
    if !emitted.is_empty() {
        t.insert(
            "routes".into(),
            Value::Array(emitted.into_iter().map(|e| Value::Table(e.table)).collect()),
        );
    }
    if !certs.is_empty() {
        let mut tls = Table::new();
        tls.insert("certificates".into(), Value::Array(certs));
        t.insert("tls".into(), Value::Table(tls));
    }
}
