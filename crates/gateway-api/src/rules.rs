//! An HTTPRoute's rules as Tollgate routes: one route per match and listener (a PathPrefix
//! match is two: its exact path and the path with `/`, whole segments as the spec says),
//! written in the Gateway API's precedence so that the route table's first match is the
//! spec's. Filters become the route's keys; backendRefs its upstream or weighted
//! `backends`, a backend that cannot be used its share of 500s.

use crate::input::{ByName, Input};
use crate::refs::{backend, Ref, ServicePort, Unresolved};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use toml::{Table, Value};

/// The order routes are written in: the Gateway API's precedence among the matches of a
/// listener's routes (the route table's host tiers and path kinds keep theirs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub port: u16,
    pub host: (u8, std::cmp::Reverse<usize>),
    /// 0: an Exact match, 1: a PathPrefix, 2: a RegularExpression.
    pub kind: u8,
    pub len: std::cmp::Reverse<usize>,
    pub method: std::cmp::Reverse<bool>,
    pub headers: std::cmp::Reverse<usize>,
    pub query: std::cmp::Reverse<usize>,
    /// The route's age, namespace and name.
    pub age: (String, String),
    pub rule: usize,
    pub matched: usize,
    pub piece: u8,
}

/// Where a route came from, for the policies that attach to it.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The Gateway (NAMESPACE/NAME) and listener.
    pub gateway: String,
    pub listener: String,
    /// The route's kind, its NAMESPACE/NAME and its rule's name.
    pub kind: &'static str,
    pub route: String,
    pub rule: Option<String>,
}

impl Key {
    /// After every route of `port`: a listener's catch-all.
    pub fn last(port: u16) -> Key {
        Key {
            port,
            host: crate::hosts::rank(None),
            kind: u8::MAX,
            len: std::cmp::Reverse(0),
            method: std::cmp::Reverse(false),
            headers: std::cmp::Reverse(0),
            query: std::cmp::Reverse(0),
            age: (String::new(), String::new()),
            rule: usize::MAX,
            matched: 0,
            piece: 0,
        }
    }
}

pub struct Emitted {
    pub key: Key,
    pub origin: Origin,
    pub table: Table,
}

/// The upstreams the routes name: one per Service port.
pub type Upstreams = BTreeMap<String, Table>;

/// What the rules leave besides their routes.
#[derive(Default)]
pub struct Sink {
    pub upstreams: Upstreams,
    /// References not resolved (the route's `ResolvedRefs: False`), each once.
    pub unresolved: Vec<Unresolved>,
    /// What was left out, one line each.
    pub notes: Vec<String>,
    /// The BackendTLSPolicy (NAMESPACE/NAME) each upstream speaks TLS by.
    pub tls_of: BTreeMap<String, String>,
    /// The BackendTLSPolicies that cannot be served, and why.
    pub tls_refused: BTreeMap<String, String>,
    /// The policies a rule's backends met since its routes were last written.
    pub tls_met: Vec<String>,
    /// Each BackendTLSPolicy met, and the Gateways (NAMESPACE/NAME) whose routes met it.
    pub tls_reached: BTreeMap<String, std::collections::BTreeSet<String>>,
}

/// One listener a route attached to: its port, its hosts (empty: every host), and its
/// Gateway and name.
pub struct Target<'a> {
    pub port: u16,
    pub hosts: &'a [String],
    pub gateway: String,
    pub listener: &'a str,
    /// The listener's hostname, `""` for none: the route is that listener's alone.
    pub hostname: &'a str,
}

/// The Tollgate upstream of a Service port, over TLS when a BackendTLSPolicy says so;
/// `None` when that policy cannot be served (the pods are not spoken to unverified).
fn upstream(cx: &Cx, sp: &ServicePort, sink: &mut Sink) -> Option<String> {
    let policy = crate::backend_tls::find(
        &cx.input.backend_tls,
        &sp.namespace,
        &sp.name,
        sp.port_name.as_deref(),
    );
    let tls = match policy {
        Some(p) => {
            let pid = crate::input::id(&p.metadata);
            match crate::backend_tls::upstream(p, &cx.input.configmaps) {
                crate::backend_tls::Upstream::Tls(t) => {
                    sink.tls_met.push(pid.clone());
                    Some((pid, t))
                }
                crate::backend_tls::Upstream::Refused(why) => {
                    sink.tls_met.push(pid.clone());
                    sink.notes.push(format!(
                        "BackendTLSPolicy {pid}: {why}: Service {}/{} is not used",
                        sp.namespace, sp.name
                    ));
                    sink.tls_refused.insert(pid, why);
                    return None;
                }
            }
        }
        None => None,
    };
    // ':' and '/' are in no Kubernetes name: one name is one Service port, never another's.
    let h2 = if sp.h2c { "/h2" } else { "" };
    let name = format!("gw:{}/{}:{}{h2}", sp.namespace, sp.name, sp.port);
    if let Some((pid, _)) = &tls {
        sink.tls_of.insert(name.clone(), pid.clone());
    }
    sink.upstreams.entry(name.clone()).or_insert_with(|| {
        let mut t = Table::new();
        t.insert(
            "targets".into(),
            Value::Array(vec![Value::String(format!(
                "{}.{}.svc.cluster.local:{}",
                sp.name, sp.namespace, sp.port
            ))]),
        );
        if sp.h2c {
            t.insert("h2".into(), Value::Boolean(true));
        }
        if let Some((_, tls)) = tls {
            t.insert("tls".into(), Value::Table(tls));
        }
        t
    });
    Some(name)
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

/// `$` is a header rule's variable: a Gateway API value is literal.
fn literal(v: &str) -> Value {
    Value::String(v.replace('$', "$$"))
}

/// What the rules read: the cluster and its Services by name.
pub struct Cx<'a> {
    pub input: &'a Input<'a>,
    pub services: ByName<'a, Service>,
}

/// A route's routes on `targets`, into `out`; its upstreams and what it refers to that is
/// not resolved into `sink`.
pub fn route(
    cx: &Cx,
    route: &crate::objects::RouteObj,
    targets: &[Target],
    out: &mut Vec<Emitted>,
    sink: &mut Sink,
) {
    let ns = route.meta.namespace.as_deref().unwrap_or("");
    let id = format!("{} {}", route.kind, crate::input::id(route.meta));
    let age = crate::input::age_key(route.meta);
    let rules = &route.rules;
    for (ri, rule) in rules.as_array().into_iter().flatten().enumerate() {
        let mut common = Table::new();
        let from = (route.kind, ns);
        let answerable = filters(cx, rule.get("filters"), &mut common, from, &id, sink);
        let mut action = backends(cx, rule, answerable, &common, from, route.h2, sink);
        if let Some(a) = persistence(rule.get("sessionPersistence"), route.meta, sink) {
            for u in action_upstreams(&mut action) {
                *u = variant(sink, u, "affinity", &a);
            }
        }
        for pid in std::mem::take(&mut sink.tls_met) {
            sink.tls_reached
                .entry(pid)
                .or_default()
                .extend(targets.iter().map(|t| t.gateway.clone()));
        }
        let name = rule.get("name").and_then(Json::as_str).map(str::to_string);
        let default_match = vec![serde_json::json!({"path": {"type": "PathPrefix", "value": "/"}})];
        let matches = rule
            .get("matches")
            .and_then(Json::as_array)
            .filter(|m| !m.is_empty())
            .unwrap_or(&default_match);
        for (mi, m) in matches.iter().enumerate() {
            for t in targets {
                for (piece, (path_key, path, kind, len)) in paths(m).into_iter().enumerate() {
                    let mut table = common.clone();
                    table.extend(action.clone());
                    fill_match(&mut table, m, path_key, &path);
                    if let Some(rw) = rewrite(rule.get("filters"), path_key, &path) {
                        table.insert("rewrite".into(), rw);
                    }
                    let host = t.hosts.first().map(String::as_str);
                    if !t.hosts.is_empty() {
                        table.insert(
                            "host".into(),
                            Value::Array(t.hosts.iter().map(|h| s(h)).collect()),
                        );
                    }
                    table.insert(
                        "ports".into(),
                        Value::Array(vec![Value::Integer(i64::from(t.port))]),
                    );
                    table.insert("listener_host".into(), s(t.hostname));
                    table.insert(
                        "name".into(),
                        s(&format!(
                            "gateway:{}/{ri}/{mi}/{}:{}/{piece}",
                            route_name(route),
                            t.gateway,
                            t.listener
                        )),
                    );
                    let count = |k: &str| m.get(k).and_then(Json::as_array).map_or(0, Vec::len);
                    out.push(Emitted {
                        key: Key {
                            port: t.port,
                            host: crate::hosts::rank(host),
                            kind,
                            len: std::cmp::Reverse(len),
                            method: std::cmp::Reverse(m.get("method").is_some()),
                            headers: std::cmp::Reverse(count("headers")),
                            query: std::cmp::Reverse(count("queryParams")),
                            age: age.clone(),
                            rule: ri,
                            matched: mi,
                            piece: piece as u8,
                        },
                        origin: Origin {
                            gateway: t.gateway.clone(),
                            listener: t.listener.to_string(),
                            kind: route.kind,
                            route: crate::input::id(route.meta),
                            rule: name.clone(),
                        },
                        table,
                    });
                }
            }
        }
    }
}

/// A match's paths as Tollgate's: (key, path, kind, length). PathPrefix `/a` is `/a` exactly
/// and `/a/` as a prefix (a trailing `/` of the value is the same prefix); RegularExpression
/// matches the whole path.
fn paths(m: &Json) -> Vec<(&'static str, String, u8, usize)> {
    let kind = m
        .pointer("/path/type")
        .and_then(Json::as_str)
        .unwrap_or("PathPrefix");
    let value = m
        .pointer("/path/value")
        .and_then(Json::as_str)
        .unwrap_or("/");
    match kind {
        "Exact" => vec![("path_exact", value.to_string(), 0, value.len())],
        "RegularExpression" => vec![("path_regex", format!("(?:{value})$"), 2, 0)],
        _ => {
            let p = value.trim_end_matches('/');
            if p.is_empty() {
                vec![("path_prefix", "/".into(), 1, 1)]
            } else {
                vec![
                    ("path_exact", p.to_string(), 1, p.len()),
                    ("path_prefix", format!("{p}/"), 1, p.len()),
                ]
            }
        }
    }
}

fn fill_match(t: &mut Table, m: &Json, path_key: &str, path: &str) {
    t.insert(path_key.into(), s(path));
    if let Some(method) = m.get("method").and_then(Json::as_str) {
        t.insert("methods".into(), Value::Array(vec![s(method)]));
    }
    for (from, to, fold) in [
        ("headers", "match_headers", true),
        ("queryParams", "match_query", false),
    ] {
        let mut seen: Vec<String> = Vec::new();
        let mut list = Vec::new();
        for h in m.get(from).and_then(Json::as_array).into_iter().flatten() {
            let name = h.get("name").and_then(Json::as_str).unwrap_or("");
            let key = if fold {
                name.to_ascii_lowercase()
            } else {
                name.to_string()
            };
            // The spec: of entries with one name, only the first counts.
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let mut e = Table::new();
            e.insert("name".into(), s(name));
            let value = h.get("value").and_then(Json::as_str).unwrap_or("");
            let how = if h.get("type").and_then(Json::as_str) == Some("RegularExpression") {
                "regex"
            } else {
                "value"
            };
            e.insert(how.into(), s(value));
            list.push(Value::Table(e));
        }
        if !list.is_empty() {
            t.insert(to.into(), Value::Array(list));
        }
    }
}

/// A route's id in route names: an HTTPRoute's NAMESPACE/NAME, a GRPCRoute's with `grpc:`.
fn route_name(r: &crate::objects::RouteObj) -> String {
    match r.kind {
        "GRPCRoute" => format!("grpc:{}", crate::input::id(r.meta)),
        _ => crate::input::id(r.meta),
    }
}

/// `route` is the route's kind and id (`HTTPRoute NAMESPACE/NAME`).
fn note(sink: &mut Sink, route: &str, what: String) {
    sink.notes.push(format!("{route}: {what}"));
}

fn unresolved(sink: &mut Sink, u: Unresolved) {
    if !sink.unresolved.contains(&u) {
        sink.unresolved.push(u);
    }
}

/// The route's filters as route keys; `false` when one cannot be served (its requests are
/// answered 500, as the spec asks of a filter not understood).
fn filters(
    cx: &Cx,
    fs: Option<&Json>,
    t: &mut Table,
    from: (&str, &str),
    route: &str,
    sink: &mut Sink,
) -> bool {
    let mut ok = true;
    for f in fs.and_then(Json::as_array).into_iter().flatten() {
        match f.get("type").and_then(Json::as_str).unwrap_or("") {
            "RequestHeaderModifier" => {
                let m = header_rules(
                    f.get("requestHeaderModifier"),
                    tollgate_config::request_header_refused,
                    route,
                    sink,
                );
                t.insert("request_headers".into(), Value::Table(m));
            }
            "ResponseHeaderModifier" => {
                let m = header_rules(
                    f.get("responseHeaderModifier"),
                    tollgate_config::response_header_refused,
                    route,
                    sink,
                );
                t.insert("response_headers".into(), Value::Table(m));
            }
            "RequestRedirect" => {
                t.insert(
                    "redirect".into(),
                    Value::Table(redirect(f.get("requestRedirect"))),
                );
            }
            "URLRewrite" => {
                if let Some(h) = f.pointer("/urlRewrite/hostname").and_then(Json::as_str) {
                    t.insert("upstream_host".into(), s(h));
                }
            }
            "RequestMirror" => mirror(cx, f, t, from, route, sink),
            "CORS" => {
                if let Some(c) = cors(f.get("cors"), route, sink) {
                    t.insert("cors".into(), Value::Table(c));
                }
            }
            "ExternalAuth" => match external_auth(cx, f.get("externalAuth"), from, sink) {
                Ok(Some(a)) => {
                    t.insert("auth".into(), Value::Table(a));
                }
                // Its Service unresolved (the route says so): nothing passes.
                Ok(None) => ok = false,
                Err(why) => {
                    note(
                        sink,
                        route,
                        format!("filter ExternalAuth: {why}, the rule's requests are answered 500"),
                    );
                    ok = false;
                }
            },
            other => {
                note(
                    sink,
                    route,
                    format!("filter {other}: not supported, the rule's requests are answered 500"),
                );
                ok = false;
            }
        }
    }
    ok
}

/// A `RequestMirror` filter as the route's `mirror` (all requests, or none).
fn mirror(cx: &Cx, f: &Json, t: &mut Table, from: (&str, &str), route: &str, sink: &mut Sink) {
    let Some(b) = f.pointer("/requestMirror/backendRef") else {
        return;
    };
    // A share of the requests is not what Tollgate's mirror does: none rather
    // than all (HTTPRouteRequestPercentageMirror is not claimed).
    let share = f
        .pointer("/requestMirror/percent")
        .is_some_and(|p| p.as_i64() != Some(100))
        || f.pointer("/requestMirror/fraction").is_some_and(|fr| {
            fr.get("numerator") != fr.get("denominator").or(Some(&serde_json::json!(100)))
        });
    match backend(cx.input, &cx.services, from.0, from.1, &json_ref(b)) {
        Ok(_) if share => note(
            sink,
            route,
            "RequestMirror percent/fraction: not supported, not mirrored".into(),
        ),
        // The Service's endpoints, as its routes reach them (no cluster DNS
        // needed); plain HTTP, so not to a backend a BackendTLSPolicy says
        // speaks TLS.
        Ok(sp) => match upstream(cx, &sp, sink) {
            Some(u) if !sink.tls_of.contains_key(&u) => {
                let mut m = Table::new();
                m.insert("upstream".into(), s(&u));
                t.insert("mirror".into(), Value::Table(m));
            }
            _ => note(
                sink,
                route,
                "RequestMirror to a backend over TLS: not mirrored".into(),
            ),
        },
        Err(u) => unresolved(sink, u),
    }
}

/// An `ExternalAuth` filter (GEP-1494, experimental channel) as the route's forward auth:
/// the Service's pods over HTTP (placed by the cluster, as backends are), the request's path
/// after `http.path`, `Authorization` and `allowedHeaders` sent, `allowedResponseHeaders`
/// copied upstream (none listed: every one but framing and representation fields). `Err`
/// for what Tollgate cannot ask (gRPC, a body); `Ok(None)` for a Service not resolved.
fn external_auth(
    cx: &Cx,
    a: Option<&Json>,
    from: (&str, &str),
    sink: &mut Sink,
) -> Result<Option<Table>, String> {
    let a = a.ok_or("no externalAuth")?;
    if a.get("protocol").and_then(Json::as_str) != Some("HTTP") {
        return Err("protocol GRPC (Envoy's ext_authz gRPC service) is not spoken".into());
    }
    if a.pointer("/forwardBody/maxSize")
        .and_then(Json::as_i64)
        .is_some_and(|n| n > 0)
    {
        return Err("forwardBody is not sent (Tollgate asks with the head alone)".into());
    }
    let list = |k: &str| -> Vec<Value> {
        a.pointer(&format!("/http/{k}"))
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .map(|h| s(&h.to_ascii_lowercase()))
            .collect()
    };
    // A name the config would refuse would refuse the whole route (its paths then fall to
    // a broader one): the rule answers 500 instead.
    for h in list("allowedHeaders")
        .iter()
        .chain(&list("allowedResponseHeaders"))
    {
        let h = h.as_str().unwrap_or("");
        if h.is_empty()
            || h == "*"
            || h.contains('_')
            || !tollgate_config::http_token(h)
            || tollgate_config::AUTH_FRAMING.contains(&h)
        {
            return Err(format!(
                "header \"{h}\" cannot be sent to or taken from the auth service"
            ));
        }
    }
    let b = a.get("backendRef").ok_or("no backendRef")?;
    let sp = match backend(cx.input, &cx.services, from.0, from.1, &json_ref(b)) {
        Ok(sp) => sp,
        Err(u) => {
            unresolved(sink, u);
            return Ok(None);
        }
    };
    if crate::backend_tls::find(
        &cx.input.backend_tls,
        &sp.namespace,
        &sp.name,
        sp.port_name.as_deref(),
    )
    .is_some()
    {
        return Err("its Service speaks TLS by a BackendTLSPolicy, and the auth request is not sent in the clear".into());
    }
    let path = a.pointer("/http/path").and_then(Json::as_str).unwrap_or("");
    if !path.is_empty()
        && (!path.starts_with('/') || path.contains(['?', '#', '\\']) || path.contains(".."))
    {
        return Err(format!("http.path \"{path}\" is not a plain path"));
    }
    let mut request = vec![s("authorization")];
    request.extend(list("allowedHeaders"));
    let mut response = list("allowedResponseHeaders");
    if response.is_empty() {
        response.push(s("*"));
    }
    let mut fwd = Table::new();
    fwd.insert(
        "url".into(),
        s(&format!(
            "http://{}.{}.svc.cluster.local:{}{path}",
            sp.name, sp.namespace, sp.port
        )),
    );
    fwd.insert("append_path".into(), Value::Boolean(true));
    fwd.insert("request_headers".into(), Value::Array(request));
    fwd.insert("response_headers".into(), Value::Array(response));
    let mut t = Table::new();
    t.insert("forward".into(), Value::Table(fwd));
    Ok(Some(t))
}

fn json_ref(b: &Json) -> Ref<'_> {
    Ref {
        group: b.get("group").and_then(Json::as_str),
        kind: b.get("kind").and_then(Json::as_str),
        name: b.get("name").and_then(Json::as_str).unwrap_or(""),
        namespace: b.get("namespace").and_then(Json::as_str),
        port: b
            .get("port")
            .and_then(Json::as_i64)
            .and_then(|p| i32::try_from(p).ok()),
    }
}

/// `{ set, add, remove }` of a header modifier, without the fields no rule may write.
fn header_rules(
    m: Option<&Json>,
    refused: fn(&str) -> Option<&'static str>,
    route: &str,
    sink: &mut Sink,
) -> Table {
    let mut out = Table::new();
    let allowed = |name: &str, sink: &mut Sink| match refused(&name.to_ascii_lowercase()) {
        Some(why) => {
            note(sink, route, format!("header {name} {why}: left out"));
            false
        }
        None => true,
    };
    for key in ["set", "add"] {
        let mut t = Table::new();
        for h in m
            .and_then(|m| m.get(key))
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            let name = h.get("name").and_then(Json::as_str).unwrap_or("");
            if allowed(name, sink) {
                t.insert(
                    name.to_string(),
                    literal(h.get("value").and_then(Json::as_str).unwrap_or("")),
                );
            }
        }
        if !t.is_empty() {
            out.insert(key.into(), Value::Table(t));
        }
    }
    let remove: Vec<Value> = m
        .and_then(|m| m.get("remove"))
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
        .filter(|n| allowed(n, sink))
        .map(s)
        .collect();
    if !remove.is_empty() {
        out.insert("remove".into(), Value::Array(remove));
    }
    out
}

fn redirect(r: Option<&Json>) -> Table {
    let mut t = Table::new();
    let Some(r) = r else { return t };
    if let Some(code) = r.get("statusCode").and_then(Json::as_i64) {
        t.insert("status".into(), Value::Integer(code));
    }
    if let Some(v) = r.get("scheme").and_then(Json::as_str) {
        t.insert("scheme".into(), s(v));
    }
    if let Some(v) = r.get("hostname").and_then(Json::as_str) {
        t.insert("host".into(), s(v));
    }
    if let Some(v) = r.get("port").and_then(Json::as_i64) {
        t.insert("port".into(), Value::Integer(v));
    }
    match r.pointer("/path/type").and_then(Json::as_str) {
        Some("ReplaceFullPath") => {
            if let Some(p) = r.pointer("/path/replaceFullPath").and_then(Json::as_str) {
                t.insert("path".into(), s(p));
            }
        }
        Some("ReplacePrefixMatch") => {
            if let Some(p) = r.pointer("/path/replacePrefixMatch").and_then(Json::as_str) {
                t.insert("replace_prefix".into(), s(p));
            }
        }
        _ => {}
    }
    t
}

/// The CORS filter as the route's `cors`. The spec's rules where Tollgate's defaults differ:
/// a `*` with `allowCredentials` echoes what the request named (`echo_wildcards`); without
/// `allowMethods` only the CORS-safelisted methods, without `allowHeaders` none; `maxAge`
/// 5 s when unset. An `exposeHeaders` `*` with credentials is left out (the spec forbids
/// sending it, and there is nothing to echo).
fn cors(c: Option<&Json>, route: &str, sink: &mut Sink) -> Option<Table> {
    let c = c?;
    let list = |k: &str| -> Vec<String> {
        c.get(k)
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .map(str::to_string)
            .collect()
    };
    let origins = list("allowOrigins");
    if origins.is_empty() {
        return None;
    }
    let credentials = c.get("allowCredentials").and_then(Json::as_bool) == Some(true);
    let mut methods = list("allowMethods");
    if methods.is_empty() {
        methods = ["GET", "HEAD", "POST"].map(String::from).to_vec();
    }
    let headers = list("allowHeaders");
    let mut expose = list("exposeHeaders");
    let star = |l: &[String]| l.iter().any(|x| x == "*");
    if credentials && star(&expose) {
        note(
            sink,
            route,
            "CORS exposeHeaders \"*\" with allowCredentials: the spec forbids sending it, so no header is exposed by it".into(),
        );
        expose.retain(|h| h != "*");
    }
    let echo = credentials && (star(&origins) || star(&methods) || star(&headers));
    let arr = |l: Vec<String>| Value::Array(l.into_iter().map(Value::String).collect());
    let mut t = Table::new();
    t.insert("allow_origins".into(), arr(origins));
    t.insert("allow_methods".into(), arr(methods));
    t.insert("allow_headers".into(), arr(headers));
    if !expose.is_empty() {
        t.insert("expose_headers".into(), arr(expose));
    }
    if credentials {
        t.insert("allow_credentials".into(), Value::Boolean(true));
    }
    if echo {
        t.insert("echo_wildcards".into(), Value::Boolean(true));
    }
    let age = c.get("maxAge").and_then(Json::as_i64).unwrap_or(5);
    t.insert("max_age".into(), Value::Integer(age));
    Some(t)
}

/// The rule's action keys: `upstream`, `backends`, or `respond` 500 (no backend, none usable,
/// weights of 0, a filter not served); none with a redirect (the redirect answers).
fn backends(
    cx: &Cx,
    rule: &Json,
    answerable: bool,
    common: &Table,
    from: (&str, &str),
    h2: bool,
    sink: &mut Sink,
) -> Table {
    let mut t = Table::new();
    let fail = |t: &mut Table, body: &str| {
        let mut r = Table::new();
        r.insert("status".into(), Value::Integer(500));
        r.insert("body".into(), s(body));
        t.insert("respond".into(), Value::Table(r));
    };
    if !answerable {
        fail(&mut t, "a filter of this rule is not served");
        return t;
    }
    if common.contains_key("redirect") {
        return t;
    }
    let refs = rule
        .get("backendRefs")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let mut list: Vec<(Option<String>, i64)> = Vec::new();
    for b in &refs {
        let weight = b.get("weight").and_then(Json::as_i64).unwrap_or(1);
        if b.get("filters")
            .and_then(Json::as_array)
            .is_some_and(|f| !f.is_empty())
        {
            sink.notes.push(
                "a backendRef's own filters are not served: its share is answered 500".into(),
            );
            list.push((None, weight));
            continue;
        }
        match backend(cx.input, &cx.services, from.0, from.1, &json_ref(b)) {
            Ok(mut sp) => {
                sp.h2c |= h2;
                list.push((upstream(cx, &sp, sink), weight))
            }
            Err(u) => {
                unresolved(sink, u);
                list.push((None, weight));
            }
        }
    }
    if let Some(retry) = retry(rule.get("retry"), sink) {
        for (u, _) in &mut list {
            if let Some(name) = u.as_mut() {
                *name = variant(sink, name, "retry", &retry);
            }
        }
    }
    let total: i64 = list.iter().map(|(_, w)| *w).sum();
    if !list.iter().any(|(u, w)| u.is_some() && *w > 0) || total == 0 {
        fail(&mut t, "no backend of this rule can be used");
        return t;
    }
    match &list[..] {
        [(Some(u), _)] => {
            t.insert("upstream".into(), s(u));
        }
        _ => {
            let items = list
                .iter()
                .map(|(u, w)| {
                    let mut e = Table::new();
                    match u {
                        Some(u) => e.insert("upstream".into(), s(u)),
                        None => e.insert("status".into(), Value::Integer(500)),
                    };
                    e.insert("weight".into(), Value::Integer(*w));
                    Value::Table(e)
                })
                .collect();
            t.insert("backends".into(), Value::Array(items));
        }
    }
    if let Some(timeouts) = timeouts(rule.get("timeouts"), sink) {
        t.insert("timeouts".into(), Value::Table(timeouts));
    }
    t
}

/// A rule's `sessionPersistence` (GEP-1619, experimental channel) as an upstream `affinity`:
/// a cookie named `sessionName` (default `tollgate-session`) that pins the client to the pod
/// that answered it, `Max-Age` its `absoluteTimeout` when `lifetimeType: Permanent`, signed
/// with a key every replica derives alike (the route's uid). `None` (and a problem) for what
/// Tollgate cannot keep: a `Header` session.
fn persistence(p: Option<&Json>, meta: &ObjectMeta, sink: &mut Sink) -> Option<Table> {
    let p = p?;
    if p.get("type").and_then(Json::as_str).unwrap_or("Cookie") != "Cookie" {
        sink.notes.push(
            "sessionPersistence type Header is not served (Tollgate pins by a cookie): the rule is served without it".into(),
        );
        return None;
    }
    let name = p
        .get("sessionName")
        .and_then(Json::as_str)
        .unwrap_or("tollgate-session");
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        sink.notes.push(format!(
            "sessionPersistence sessionName \"{name}\" is not a cookie name Tollgate writes (letters, digits, '-', '_', '.'): the rule is served without it"
        ));
        return None;
    }
    let mut t = Table::new();
    t.insert("cookie".into(), s(name));
    let permanent = p
        .pointer("/cookieConfig/lifetimeType")
        .and_then(Json::as_str)
        == Some("Permanent");
    match (p.get("absoluteTimeout").and_then(Json::as_str).map(|v| (v, gep_duration(v))), permanent) {
        (Some((_, Some(ms))), true) if ms > 0 => {
            t.insert("max_age".into(), s(&format!("{}s", ms.div_ceil(1000))));
        }
        (Some((v, _)), true) => sink.notes.push(format!(
            "sessionPersistence absoluteTimeout \"{v}\" is not a duration: the cookie lasts the browser's session"
        )),
        (None, true) => sink.notes.push(
            "sessionPersistence lifetimeType Permanent without absoluteTimeout: the cookie lasts the browser's session".into(),
        ),
        (Some((v, _)), false) => sink.notes.push(format!(
            "sessionPersistence absoluteTimeout \"{v}\" of a Session cookie is not tracked: the pin lasts the browser's session"
        )),
        (None, false) => {}
    }
    let key = meta.uid.clone().unwrap_or_else(|| crate::input::id(meta));
    t.insert("secret".into(), s(&format!("gateway-api-session/{key}")));
    Some(t)
}

/// The upstream names of a rule's action (`upstream`, or each `backends` entry's).
fn action_upstreams(action: &mut Table) -> Vec<&mut String> {
    let mut out = Vec::new();
    for (k, v) in action.iter_mut() {
        match (k.as_str(), v) {
            ("upstream", Value::String(u)) => out.push(u),
            ("backends", Value::Array(list)) => {
                for e in list {
                    if let Some(Value::String(u)) = e.get_mut("upstream") {
                        out.push(u);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A rule's `retry` (GEP-1731, experimental channel) as an upstream `retry`: `codes` and, as
/// always, a reset or a backend timeout; `attempts` retries (default 2, at most 10); the same
/// pod again when none is left untried (`targets = "any"`: a Service of one pod is retried);
/// `backoff`; and a budget of every attempt (the spec has none).
fn retry(r: Option<&Json>, sink: &mut Sink) -> Option<Table> {
    let r = r?;
    let mut on: Vec<Value> = ["connect", "reset", "timeout"].map(s).to_vec();
    for c in r
        .get("codes")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        match c.as_u64().filter(|c| (400..=599).contains(c)) {
            Some(c) => on.push(s(&c.to_string())),
            None => sink.notes.push(format!(
                "retry.codes {c}: not a status from 400 to 599, left out"
            )),
        }
    }
    let mut attempts = r.get("attempts").and_then(Json::as_i64).unwrap_or(2).max(0);
    if attempts > 10 {
        sink.notes
            .push(format!("retry.attempts {attempts}: at most 10 are made"));
        attempts = 10;
    }
    let mut t = Table::new();
    t.insert("attempts".into(), Value::Integer(attempts));
    t.insert("on".into(), Value::Array(on));
    t.insert("targets".into(), s("any"));
    t.insert("budget".into(), Value::Float(attempts as f64));
    if let Some(b) = r.get("backoff").and_then(Json::as_str) {
        match gep_duration(b) {
            Some(0) => {}
            Some(ms) if ms > 60_000 => {
                sink.notes.push(format!(
                    "retry.backoff \"{b}\" is past 60s, the longest: 60s"
                ));
                t.insert("backoff".into(), s("60s"));
            }
            Some(ms) => {
                t.insert("backoff".into(), s(&format!("{ms}ms")));
            }
            None => sink
                .notes
                .push(format!("retry.backoff \"{b}\" is not a duration: left out")),
        }
    }
    Some(t)
}

/// The upstream `base` with `key` set to `value` (a rule's `retry`, its session's
/// `affinity`): one per Service port and policy, named after both
/// (`gw:NS/SVC:PORT/retry:3,100ms,500`), with the same targets. What varies goes into the
/// name (a key as a hash of it), so two policies never share an upstream.
fn variant(sink: &mut Sink, base: &str, key: &str, value: &Table) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (k, v) in value {
        match v {
            Value::Array(a) => parts.extend(a.iter().filter_map(Value::as_str).map(str::to_string)),
            Value::String(x) if k == "secret" => parts.push(format!("{:016x}", fnv(x))),
            Value::String(x) => parts.push(x.clone()),
            Value::Integer(n) => parts.push(n.to_string()),
            _ => {}
        }
    }
    parts.retain(|x| !matches!(x.as_str(), "connect" | "reset" | "timeout" | "any"));
    let name = format!("{base}/{key}:{}", parts.join(","));
    if !sink.upstreams.contains_key(&name) {
        let mut t = sink.upstreams.get(base).cloned().unwrap_or_default();
        t.insert(key.into(), Value::Table(value.clone()));
        sink.upstreams.insert(name.clone(), t);
        if let Some(p) = sink.tls_of.get(base).cloned() {
            sink.tls_of.insert(name.clone(), p);
        }
    }
    name
}

/// FNV-1a: a name's stand-in for a key (not a secret: only what tells two keys apart).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A rule's `timeouts` as the route's: `request` and `backendRequest` (its `upstream`), in
/// milliseconds; a zero one is none (the spec's "0s" disables it).
fn timeouts(t: Option<&Json>, sink: &mut Sink) -> Option<Table> {
    let mut out = Table::new();
    for (from, to) in [("request", "request"), ("backendRequest", "upstream")] {
        let Some(v) = t?.get(from).and_then(Json::as_str) else {
            continue;
        };
        match gep_duration(v) {
            Some(0) => {}
            Some(ms) if ms > DAY_MS => {
                sink.notes.push(format!(
                    "timeouts.{from} \"{v}\" is past 24h, the longest a route takes: 24h"
                ));
                out.insert(to.into(), s("24h"));
            }
            Some(ms) => {
                out.insert(to.into(), s(&format!("{ms}ms")));
            }
            None => sink.notes.push(format!(
                "timeouts.{from} \"{v}\" is not a duration: left out"
            )),
        }
    }
    (!out.is_empty()).then_some(out)
}

const DAY_MS: u64 = 24 * 3_600_000;

/// A Gateway API duration (GEP-2257: one to four of a number and `h`, `m`, `s` or `ms`, as
/// `1h30m`), in milliseconds.
pub fn gep_duration(v: &str) -> Option<u64> {
    let (mut total, mut parts, mut rest) = (0u64, 0, v);
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = match rest.as_bytes() {
            [b'm', b's', ..] => (1, 2),
            [b'h', ..] => (3_600_000, 1),
            [b'm', ..] => (60_000, 1),
            [b's', ..] => (1_000, 1),
            _ => return None,
        };
        rest = &rest[len..];
        total += n * unit;
        parts += 1;
    }
    (1..=4).contains(&parts).then_some(total)
}

/// URLRewrite's path on one piece of a match: the whole path, or the matched prefix, replaced.
fn rewrite(fs: Option<&Json>, path_key: &str, path: &str) -> Option<Value> {
    let f = fs?
        .as_array()?
        .iter()
        .find(|f| f.get("type").and_then(Json::as_str) == Some("URLRewrite"))?;
    let p = f.pointer("/urlRewrite/path")?;
    let (regex, replace) = match p.get("type").and_then(Json::as_str)? {
        "ReplaceFullPath" => (
            "^.*$".to_string(),
            p.get("replaceFullPath")?.as_str()?.replace('$', "$$"),
        ),
        "ReplacePrefixMatch" => {
            let with = p.get("replacePrefixMatch")?.as_str()?.replace('$', "$$");
            match path_key {
                "path_exact" => ("^.*$".to_string(), with),
                "path_prefix" => {
                    let prefix = path.trim_end_matches('/');
                    (
                        format!("^{}(/.*)$", regex::escape(prefix)),
                        format!("{}${{1}}", with.trim_end_matches('/')),
                    )
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    let mut t = Table::new();
    t.insert("regex".into(), s(&regex));
    t.insert("replace".into(), s(&replace));
    Some(Value::Table(t))
}

#[cfg(test)]
mod tests {
    use super::gep_duration;

    #[test]
    fn gep_2257_durations_in_milliseconds() {
        for (v, ms) in [
            ("0s", 0),
            ("500ms", 500),
            ("1s", 1_000),
            ("1m30s", 90_000),
            ("1h30m10s500ms", 5_410_500),
            ("10ms10ms", 20),
            ("24h", 86_400_000),
            ("99999h", 359_996_400_000),
        ] {
            assert_eq!(gep_duration(v), Some(ms), "{v}");
        }
        // Not GEP-2257's: empty, signs, fractions, spaces, unknown or missing units, more
        // than five digits or four parts.
        for v in [
            "",
            "-1s",
            "1.5s",
            "1 s",
            "1d",
            "10",
            "s",
            "123456s",
            "1h1m1s1ms1ms",
            "1us",
        ] {
            assert_eq!(gep_duration(v), None, "{v}");
        }
    }
}
