//! The HTTP side: discovery, the object paths (list, watch, get, create, replace, patch,
//! delete, the status subresource) and the stand-in's own hooks under `/standin/`.

use crate::kinds::{self, Kind, KINDS};
use crate::patch::{self, PatchType};
use crate::select::Selector;
use crate::store::{rv_of, Change, Failure, Store};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

pub type Body = BoxBody<Bytes, Infallible>;

/// Bodies larger than this are refused (the API server's limit is 3 MiB per object).
const MAX_BODY: usize = 8 << 20;

/// What the hooks tell open watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Close every open watch (the client watches again from its last resourceVersion).
    Drop,
    /// Send every open watch `ERROR` 410 Expired, then close it (the client lists again).
    Expire,
}

pub struct State {
    pub store: Mutex<Store>,
    pub control: broadcast::Sender<Control>,
    /// Every request but the hooks': method, path, query, user agent, status.
    pub log: Mutex<Vec<Value>>,
    pub bookmark_every: Duration,
    /// The server's address, for discovery's `serverAddressByClientCIDRs`.
    pub addr: std::net::SocketAddr,
    /// Asked for by `/standin/outage`: the listener closes this long.
    pub outage: mpsc::UnboundedSender<Duration>,
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

/// A JSON answer: `body` with `code` (any code the handlers use is a valid one).
fn json_body(code: u16, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    json_body(code, full(v.to_string()))
}

fn status_response(code: u16, reason: &str, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

fn failure(f: &Failure) -> Response<Body> {
    json_response(f.code, &f.status())
}

/// Where a request goes: a kind, maybe a namespace, maybe a name, maybe `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: usize,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub status: bool,
}

/// The object path's segments after `/api/v1` or `/apis/G/V`.
pub fn target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let kind_at = |r: &str| kinds::find(group, version, r);
    let tail = |kind: usize, ns: Option<String>, rest: &[&str]| -> Option<Target> {
        match rest {
            [] => Some(Target {
                kind,
                ns,
                name: None,
                status: false,
            }),
            [name] => Some(Target {
                kind,
                ns,
                name: Some((*name).into()),
                status: false,
            }),
            [name, "status"] => Some(Target {
                kind,
                ns,
                name: Some((*name).into()),
                status: true,
            }),
            _ => None,
        }
    };
    match rest {
        ["namespaces", ns, resource, more @ ..] if *resource != "status" => {
            let kind = kind_at(resource)?;
            if !KINDS[kind].namespaced {
                return None;
            }
            tail(kind, Some((*ns).into()), more)
        }
        [resource, more @ ..] => tail(kind_at(resource)?, None, more),
        [] => None,
    }
}

/// A boolean query parameter as the API server reads it (Go's `strconv.ParseBool`: the
/// Python client sends `True`).
fn truthy(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn resource_list(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for k in KINDS
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        resources.push(json!({
            "name": k.resource, "singularName": k.singular, "namespaced": k.namespaced,
            "kind": k.kind, "shortNames": k.short,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        }));
        if k.status {
            resources.push(json!({
                "name": format!("{}/status", k.resource), "singularName": "",
                "namespaced": k.namespaced, "kind": k.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

fn discovery(st: &State, path: &[&str]) -> Option<Response<Body>> {
    let v = match path {
        ["version"] => json!({
            "major": "1", "minor": "32", "gitVersion": "v1.32.0-tollgate-standin",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-12-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
            "platform": "linux/amd64"
        }),
        ["api"] => json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.addr.to_string()}]
        }),
        ["api", "v1"] => resource_list("", "v1"),
        ["apis"] => {
            let groups: Vec<Value> = kinds::groups()
                .iter()
                .map(|(g, vs)| group_json(g, vs))
                .collect();
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        }
        ["apis", g] => {
            let (_, vs) = kinds::groups().into_iter().find(|(name, _)| name == g)?;
            let mut v = group_json(g, &vs);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        }
        ["apis", g, v]
            if kinds::groups()
                .iter()
                .any(|(n, vs)| n == g && vs.contains(v)) =>
        {
            resource_list(g, v)
        }
        ["healthz"] | ["livez"] | ["readyz"] => {
            return Some(Response::new(full("ok")));
        }
        _ => return None,
    };
    Some(json_response(200, &v))
}

pub async fn handle(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let q = req.uri().query().unwrap_or("").to_string();
    let agent = req
        .headers()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let hook = path.starts_with("/standin/");
    let resp = route(&st, req).await;
    if !hook {
        let mut log = st.log.lock();
        if log.len() < 100_000 {
            log.push(json!({"method": method.as_str(), "path": path, "query": q,
                             "agent": agent, "status": resp.status().as_u16()}));
        }
    }
    Ok(resp)
}

async fn route(st: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().trim_matches('/').to_string();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segs.first() == Some(&"standin") {
        return hooks(st, &segs[1..], &query(&req));
    }
    if req.method() == Method::GET {
        if let Some(r) = discovery(st, &segs) {
            return r;
        }
    }
    let t = match segs.as_slice() {
        ["api", "v1", rest @ ..] => target("", "v1", rest),
        ["apis", g, v, rest @ ..] => target(g, v, rest),
        _ => None,
    };
    let Some(t) = t else {
        return status_response(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    objects(st, t, req).await
}

fn hooks(st: &Arc<State>, segs: &[&str], q: &HashMap<String, String>) -> Response<Body> {
    match segs {
        ["compact"] => {
            st.store.lock().compact();
            json_response(200, &json!({"compacted": st.store.lock().compacted()}))
        }
        ["drop-watches"] => {
            let _ = st.control.send(Control::Drop);
            json_response(200, &json!({}))
        }
        ["expire-watches"] => {
            st.store.lock().compact();
            let _ = st.control.send(Control::Expire);
            json_response(200, &json!({}))
        }
        ["outage"] => {
            let ms = q.get("ms").and_then(|v| v.parse().ok()).unwrap_or(1000);
            let _ = st.outage.send(Duration::from_millis(ms));
            json_response(200, &json!({"ms": ms}))
        }
        ["log"] => json_response(200, &Value::Array(st.log.lock().clone())),
        ["rv"] => json_response(
            200,
            &json!({"resourceVersion": st.store.lock().rv().to_string()}),
        ),
        _ => status_response(404, "NotFound", "no such hook"),
    }
}

async fn body(req: Request<Incoming>) -> Result<Bytes, Box<Response<Body>>> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(_) => Err(Box::new(status_response(
            413,
            "RequestEntityTooLarge",
            "the request body is too large",
        ))),
    }
}

fn parse_json(b: &[u8]) -> Result<Value, Box<Response<Body>>> {
    serde_json::from_slice(b).map_err(|e| {
        Box::new(status_response(
            400,
            "BadRequest",
            &format!("the body is not JSON: {e}"),
        ))
    })
}

fn selector(q: &HashMap<String, String>) -> Result<Selector, Box<Response<Body>>> {
    Selector::parse(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    )
    .map_err(|e| Box::new(status_response(400, "BadRequest", &e)))
}

fn not_found(t: &Target, name: &str) -> Response<Body> {
    failure(&Failure {
        code: 404,
        reason: "NotFound",
        message: format!("{} \"{name}\" not found", KINDS[t.kind].qualified()),
        name: name.into(),
        kind: t.kind,
    })
}

fn written(r: Result<Value, Failure>, code: u16) -> Response<Body> {
    match r {
        Ok(o) => json_response(code, &o),
        Err(f) => failure(&f),
    }
}

async fn objects(st: &Arc<State>, t: Target, req: Request<Incoming>) -> Response<Body> {
    let q = query(&req);
    if KINDS[t.kind].namespaced && t.name.is_some() && t.ns.is_none() {
        return status_response(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    }
    if q.get("dryRun").is_some_and(|v| !v.is_empty()) && req.method() != Method::GET {
        return status_response(400, "BadRequest", "the stand-in does not serve dryRun");
    }
    let ns = t.ns.clone().unwrap_or_default();
    let ct = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let r = match (req.method().clone(), t.name.clone()) {
        (Method::GET, None) => selector(&q).map(|sel| {
            if q.get("watch").is_some_and(|v| truthy(v)) {
                watch(st, t, sel, &q)
            } else {
                list(st, &t, &sel, &q)
            }
        }),
        (Method::GET, Some(name)) => Ok(match st.store.lock().get(t.kind, &ns, &name) {
            Some(o) => json_response(200, o),
            None => not_found(&t, &name),
        }),
        (Method::POST, None) => body(req).await.and_then(|b| parse_json(&b)).map(|b| {
            written(st.store.lock().create(t.kind, &ns, b), 201)
        }),
        (Method::PUT, Some(name)) => body(req).await.and_then(|b| parse_json(&b)).map(|b| {
            written(st.store.lock().replace(t.kind, &ns, &name, b, t.status), 200)
        }),
        (Method::PATCH, Some(name)) => match PatchType::from_content_type(&ct) {
            None => Ok(status_response(415, "UnsupportedMediaType", &format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"))),
            Some(pt) => body(req).await.map(|b| patch_object(st, &t, &ns, &name, pt, &b)),
        },
        (Method::DELETE, Some(name)) => body(req).await.map(|b| delete_one(st, &t, &ns, &name, &b)),
        (Method::DELETE, None) => selector(&q).map(|sel| delete_all(st, &t, &sel)),
        _ => Ok(status_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    };
    r.unwrap_or_else(|e| *e)
}

/// DELETE of one object: `Status` Success, as the API server answers for kinds without
/// graceful deletion; a `preconditions.resourceVersion` that no longer holds is a 409.
fn delete_one(st: &Arc<State>, t: &Target, ns: &str, name: &str, b: &[u8]) -> Response<Body> {
    let k = &KINDS[t.kind];
    let opts: Value = serde_json::from_slice(b).unwrap_or(Value::Null);
    let pre = opts
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str);
    let result = st.store.lock().delete(t.kind, ns, name, pre);
    match result {
        Ok(o) => json_response(
            200,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": k.group, "kind": k.resource,
                            "uid": o.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)}
            }),
        ),
        Err(f) => failure(&f),
    }
}

/// DELETE of the collection: every object the selectors pick.
fn delete_all(st: &Arc<State>, t: &Target, sel: &Selector) -> Response<Body> {
    let mut s = st.store.lock();
    let names: Vec<(String, String)> = s
        .list(t.kind, t.ns.as_deref())
        .into_iter()
        .filter(|o| sel.matches(o))
        .map(|o| {
            let m = |f: &str| {
                o.pointer(f)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (m("/metadata/namespace"), m("/metadata/name"))
        })
        .collect();
    for (n, name) in &names {
        let _ = s.delete(t.kind, n, name, None);
    }
    json_response(
        200,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
}

fn patch_object(
    st: &Arc<State>,
    t: &Target,
    ns: &str,
    name: &str,
    pt: PatchType,
    b: &[u8],
) -> Response<Body> {
    let mut s = st.store.lock();
    let Some(old) = s.get(t.kind, ns, name).cloned() else {
        if pt == PatchType::Apply {
            // Server-side apply creates what is not there.
            return match serde_yaml_ng::from_slice::<Value>(b) {
                Ok(o) => match s.create(t.kind, ns, o) {
                    Ok(o) => json_response(201, &o),
                    Err(f) => failure(&f),
                },
                Err(e) => status_response(400, "BadRequest", &e.to_string()),
            };
        }
        return failure(&Failure {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", KINDS[t.kind].qualified()),
            name: name.into(),
            kind: t.kind,
        });
    };
    let mut next = match patch::apply(pt, &old, b) {
        Ok(n) => n,
        Err(e) => {
            return status_response(422, "Invalid", &format!("the patch does not apply: {e}"))
        }
    };
    // A patch naming no resourceVersion applies to the current object; one naming another
    // is a conflict, as for a replace.
    if rv_of(&next) == rv_of(&old) || patch_names_no_rv(pt, b) {
        if let Some(rv) = rv_of(&old).map(str::to_string) {
            next["metadata"]["resourceVersion"] = Value::String(rv);
        }
    }
    match s.replace(t.kind, ns, name, next, t.status) {
        Ok(o) => json_response(200, &o),
        Err(f) => failure(&f),
    }
}

fn patch_names_no_rv(pt: PatchType, b: &[u8]) -> bool {
    match pt {
        PatchType::Json => !String::from_utf8_lossy(b).contains("/metadata/resourceVersion"),
        PatchType::Apply => serde_yaml_ng::from_slice::<Value>(b)
            .ok()
            .is_none_or(|v| rv_of(&v).is_none()),
        _ => serde_json::from_slice::<Value>(b)
            .ok()
            .is_none_or(|v| rv_of(&v).is_none()),
    }
}

fn list_kind(k: &Kind) -> String {
    format!("{}List", k.kind)
}

fn list(
    st: &Arc<State>,
    t: &Target,
    sel: &Selector,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let k = &KINDS[t.kind];
    let s = st.store.lock();
    let limit: usize = q
        .get("limit")
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(usize::MAX);
    // The continue token: the list's resourceVersion and the last key sent, hex-encoded.
    let (list_rv, after) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => match decode_continue(c) {
            Some((rv, after)) if rv >= s.compacted() => (rv, Some(after)),
            Some(_) => return status_response(410, "Expired", "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results."),
            None => return status_response(400, "BadRequest", "invalid continue token"),
        },
        None => (s.rv(), None),
    };
    let all: Vec<&Value> = s
        .list(t.kind, t.ns.as_deref())
        .into_iter()
        .filter(|o| sel.matches(o))
        .filter(|o| after.as_ref().is_none_or(|a| key_of(o) > *a))
        .collect();
    let page: Vec<Value> = all.iter().take(limit).map(|o| (*o).clone()).collect();
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if all.len() > page.len() {
        let last = page.last().map(key_of).unwrap_or_default();
        meta["continue"] = Value::String(encode_continue(list_rv, &last));
        meta["remainingItemCount"] = json!(all.len() - page.len());
    }
    json_response(
        200,
        &json!({"kind": list_kind(k), "apiVersion": k.api_version(), "metadata": meta, "items": page}),
    )
}

fn key_of(o: &Value) -> String {
    let m = |f: &str| {
        o.pointer(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    format!("{}/{}", m("/metadata/namespace"), m("/metadata/name"))
}

fn encode_continue(rv: u64, after: &str) -> String {
    format!("{rv}:{after}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(c: &str) -> Option<(u64, String)> {
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| c.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (rv, after) = text.split_once(':')?;
    Some((rv.parse().ok()?, after.to_string()))
}

fn event_line(what: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": what, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn gone_line(rv: u64, compacted: u64) -> Bytes {
    event_line(
        "ERROR",
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {rv} ({compacted})"),
            "reason": "Expired", "code": 410
        }),
    )
}

fn bookmark(k: &Kind, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": k.kind, "apiVersion": k.api_version(), "metadata": meta}),
    )
}

/// The event a watch with this selector sends for `c`, if any: an object entering the
/// selection is `ADDED`, one leaving it `DELETED`.
fn seen(c: &Change, t: &Target, sel: &Selector) -> Option<&'static str> {
    if c.kind != t.kind {
        return None;
    }
    if let Some(ns) = &t.ns {
        if c.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            != Some(ns)
        {
            return None;
        }
    }
    let now = sel.matches(&c.object);
    match (c.what, c.old.as_ref().map(|o| sel.matches(o))) {
        ("MODIFIED", Some(true)) if !now => Some("DELETED"),
        ("MODIFIED", Some(false)) if now => Some("ADDED"),
        ("MODIFIED", Some(false)) => None,
        (w, _) if now => Some(w),
        _ => None,
    }
}

/// One watch: what it selects and how it was asked for.
struct Watch {
    t: Target,
    sel: Selector,
    bookmarks: bool,
    initial: bool,
    timeout: Duration,
}

impl Watch {
    fn kind(&self) -> &'static Kind {
        &KINDS[self.t.kind]
    }

    /// The current objects as `ADDED` (a watch from no version, or `sendInitialEvents`), and
    /// with bookmarks allowed, the bookmark that says they are all sent.
    fn current(&self, s: &Store, out: &mut Vec<Bytes>, initial_end: bool) {
        for o in s
            .list(self.t.kind, self.t.ns.as_deref())
            .into_iter()
            .filter(|o| self.sel.matches(o))
        {
            out.push(event_line("ADDED", o));
        }
        if initial_end && self.bookmarks {
            out.push(bookmark(self.kind(), s.rv(), true));
        }
    }

    /// What the watch sends before the changes to come; `Err` for a version that is no number.
    fn backlog(&self, s: &Store, from: Option<&str>) -> Result<Vec<Bytes>, Box<Response<Body>>> {
        let mut out = Vec::new();
        match from.map(str::parse::<u64>) {
            // Unset or "0": the current objects as ADDED, then what follows.
            None | Some(Ok(0)) => self.current(s, &mut out, self.initial),
            Some(Ok(rv)) => match s.since(rv) {
                Some(_) if self.initial => self.current(s, &mut out, true),
                Some(changes) => {
                    for c in &changes {
                        if let Some(w) = seen(c, &self.t, &self.sel) {
                            out.push(event_line(w, &c.object));
                        }
                    }
                }
                // Too old: 200, then an ERROR 410 event, as the API server answers.
                None => out.push(gone_line(rv, s.compacted())),
            },
            Some(Err(_)) => {
                return Err(Box::new(status_response(
                    400,
                    "BadRequest",
                    "resourceVersion: not a number",
                )));
            }
        }
        Ok(out)
    }

    /// Sends the changes as they come, bookmarks on the clock, until the timeout, a hook, a
    /// reader too slow for the change feed, or the client leaving.
    async fn pump(
        self,
        tx: mpsc::Sender<Bytes>,
        mut sub: broadcast::Receiver<Change>,
        mut control: broadcast::Receiver<Control>,
        mut last: u64,
        every: Duration,
    ) {
        let k = self.kind();
        let end = tokio::time::sleep(self.timeout);
        tokio::pin!(end);
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut end => {
                    // The API server sends a bookmark before it ends a watch on its timeout.
                    if self.bookmarks {
                        let _ = tx.send(bookmark(k, last, false)).await;
                    }
                    return;
                }
                _ = tick.tick(), if self.bookmarks => {
                    if tx.send(bookmark(k, last, false)).await.is_err() {
                        return;
                    }
                }
                c = control.recv() => match c {
                    Ok(Control::Drop) | Err(_) => return,
                    Ok(Control::Expire) => {
                        let _ = tx.send(gone_line(last, last)).await;
                        return;
                    }
                },
                c = sub.recv() => match c {
                    Ok(c) => {
                        last = c.rv;
                        if let Some(w) = seen(&c, &self.t, &self.sel) {
                            if tx.send(event_line(w, &c.object)).await.is_err() {
                                return;
                            }
                        }
                    }
                    // Too slow a reader, or the store gone: the watch ends; the client
                    // watches again from the last version it saw.
                    Err(_) => return,
                },
                _ = tx.closed() => return,
            }
        }
    }
}

fn watch(st: &Arc<State>, t: Target, sel: Selector, q: &HashMap<String, String>) -> Response<Body> {
    let w = Watch {
        t,
        sel,
        bookmarks: q.get("allowWatchBookmarks").is_some_and(|v| truthy(v)),
        initial: q.get("sendInitialEvents").is_some_and(|v| truthy(v)),
        timeout: q
            .get("timeoutSeconds")
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs),
    };
    let from = q.get("resourceVersion").filter(|v| !v.is_empty()).cloned();
    // Subscribed under the lock that reads the backlog: no change falls between them.
    let (backlog, sub, last) = {
        let s = st.store.lock();
        match w.backlog(&s, from.as_deref()) {
            Ok(b) => (b, s.subscribe(), s.rv()),
            Err(r) => return *r,
        }
    };
    let expired = backlog
        .last()
        .is_some_and(|b| b.starts_with(b"{\"type\":\"ERROR\""));
    let control = st.control.subscribe();
    let every = st.bookmark_every;
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    tokio::spawn(async move {
        for b in backlog {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if !expired {
            w.pump(tx, sub, control, last, every).await;
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    // A body of unknown length: hyper sends it chunked.
    json_body(200, StreamBody::new(stream).boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let ing = kinds::find("networking.k8s.io", "v1", "ingresses").expect("ing");
        let ns = kinds::NAMESPACES;
        let t = |g, v, p: &str| target(g, v, &p.split('/').collect::<Vec<_>>());
        assert_eq!(
            t("networking.k8s.io", "v1", "ingresses"),
            Some(Target {
                kind: ing,
                ns: None,
                name: None,
                status: false
            })
        );
        assert_eq!(
            t("networking.k8s.io", "v1", "namespaces/a/ingresses/b/status"),
            Some(Target {
                kind: ing,
                ns: Some("a".into()),
                name: Some("b".into()),
                status: true
            })
        );
        assert_eq!(
            t("", "v1", "namespaces/a"),
            Some(Target {
                kind: ns,
                ns: None,
                name: Some("a".into()),
                status: false
            })
        );
        assert_eq!(
            t("", "v1", "namespaces/a/status"),
            Some(Target {
                kind: ns,
                ns: None,
                name: Some("a".into()),
                status: true
            })
        );
        assert_eq!(t("", "v1", "namespaces/a/namespaces/b"), None);
        assert_eq!(t("", "v1", "nothing"), None);
        assert_eq!(t("networking.k8s.io", "v1", "ingresses/a/b/c"), None);
        let c = encode_continue(42, "ns/a");
        assert_eq!(decode_continue(&c), Some((42, "ns/a".into())));
        assert_eq!(decode_continue("zz"), None);
    }
}
