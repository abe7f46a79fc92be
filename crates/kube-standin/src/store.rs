//! The objects, one resourceVersion counter for all of them (as etcd's revision), and the
//! recent history a watch resumes from. A watch from a resourceVersion older than the history
//! holds (after [`Store::compact`]) is told 410 Gone, as the API server does after etcd's
//! compaction.

use crate::kinds::{Kind, KINDS};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use tokio::sync::broadcast;

/// How many changes the history keeps before the oldest is compacted away by itself.
pub const HISTORY: usize = 20_000;

/// A change, as a watch sends it.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: usize,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub what: &'static str,
    pub object: Value,
    /// The object before a `MODIFIED` (a watch with a selector tells an object leaving it
    /// as `DELETED`, one entering it as `ADDED`).
    pub old: Option<Value>,
}

/// What a request for one object failed on, as a `Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub name: String,
    pub kind: usize,
}

impl Failure {
    pub fn status(&self) -> Value {
        let k = &KINDS[self.kind];
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": {"name": self.name, "group": k.group, "kind": k.resource},
            "code": self.code,
        })
    }
}

type Key = (usize, String, String);

/// Where an object is kept: cluster-scoped kinds under no namespace.
fn key(k: &Kind, kind: usize, ns: &str, name: &str) -> Key {
    let ns = if k.namespaced { ns } else { "" };
    (kind, ns.to_string(), name.to_string())
}

pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Change>,
    /// The oldest resourceVersion a watch may start after.
    compacted: u64,
    changes: broadcast::Sender<Change>,
    uid: u64,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Unix seconds as `2026-12-04T23:12:11Z`.
pub fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// The object's metadata, made an empty map first when it is missing or not a map. (Every
/// caller holds an object: bodies that are not are refused before.)
fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let slot = &mut obj["metadata"];
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("made a map above"),
    }
}

/// The object's `metadata.resourceVersion`, when it names one.
pub fn rv_of(obj: &Value) -> Option<&str> {
    meta(obj)
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Everything but `metadata` and `status`: a change to it is a new generation.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

impl Store {
    pub fn new() -> Self {
        let (changes, _) = broadcast::channel(4096);
        let mut s = Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 1,
            changes,
            uid: 0,
        };
        let ns = crate::kinds::NAMESPACES;
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            s.create(ns, "", obj).expect("a namespace");
        }
        s
    }

    /// The resourceVersion of the last change.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// The changes after `rv`, or `None` when the history no longer reaches back there.
    pub fn since(&self, rv: u64) -> Option<Vec<Change>> {
        if rv < self.compacted {
            return None;
        }
        Some(self.history.iter().filter(|c| c.rv > rv).cloned().collect())
    }

    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Forgets the history: a watch from any resourceVersion before now is told 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    pub fn get(&self, kind: usize, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(kind, ns.to_string(), name.to_string()))
    }

    /// The objects of `kind` in `ns` (all namespaces when `None`), in key order.
    pub fn list(&self, kind: usize, ns: Option<&str>) -> Vec<&Value> {
        let lo = (kind, ns.unwrap_or("").to_string(), String::new());
        self.objects
            .range(lo..)
            .take_while(|((k, n, _), _)| *k == kind && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
            .collect()
    }

    fn namespace_exists(&self, ns: &str) -> bool {
        let k = crate::kinds::NAMESPACES;
        self.get(k, "", ns).is_some()
    }

    fn fail(kind: usize, code: u16, reason: &'static str, name: &str, message: String) -> Failure {
        Failure {
            code,
            reason,
            message,
            name: name.to_string(),
            kind,
        }
    }

    fn not_found(kind: usize, name: &str) -> Failure {
        let k: &Kind = &KINDS[kind];
        Self::fail(
            kind,
            404,
            "NotFound",
            name,
            format!("{} \"{name}\" not found", k.qualified()),
        )
    }

    fn conflict(kind: usize, name: &str) -> Failure {
        Self::fail(kind, 409, "Conflict", name, format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            KINDS[kind].qualified()
        ))
    }

    fn record(&mut self, kind: usize, what: &'static str, object: Value, old: Option<Value>) {
        let c = Change {
            rv: self.rv,
            kind,
            what,
            object,
            old,
        };
        self.history.push_back(c.clone());
        while self.history.len() > HISTORY {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        let _ = self.changes.send(c);
    }

    /// Fills what the API server sets on every object it returns.
    fn stamp(&mut self, kind: usize, obj: &mut Value) {
        let k = &KINDS[kind];
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), Value::String(k.api_version()));
            o.insert("kind".into(), Value::String(k.kind.into()));
        }
        self.rv += 1;
        let rv = self.rv.to_string();
        meta_mut(obj).insert("resourceVersion".into(), Value::String(rv));
    }

    /// POST: a new object. `generateName` is honoured; 409 AlreadyExists for a taken name.
    pub fn create(&mut self, kind: usize, ns: &str, mut obj: Value) -> Result<Value, Failure> {
        if !obj.is_object() {
            return Err(Self::fail(
                kind,
                400,
                "BadRequest",
                "",
                "the body is not an object".into(),
            ));
        }
        let k = &KINDS[kind];
        let m = meta_mut(&mut obj);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            if let Some(g) = m.get("generateName").and_then(Value::as_str) {
                let suffix: String = (0..5)
                    .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
                    .collect();
                name = format!("{g}{suffix}");
            }
        }
        if name.is_empty() {
            return Err(Self::fail(kind, 422, "Invalid", "", format!(
                "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                k.kind
            )));
        }
        if !valid_name(&name) {
            return Err(Self::fail(kind, 422, "Invalid", &name, format!(
                "{} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
                k.kind
            )));
        }
        if let Some(body_ns) = m.get("namespace").and_then(Value::as_str) {
            if k.namespaced && body_ns != ns {
                return Err(Self::fail(kind, 400, "BadRequest", &name, "the namespace of the provided object does not match the namespace sent on the request".into()));
            }
        }
        if k.namespaced && !self.namespace_exists(ns) {
            let nsk = crate::kinds::NAMESPACES;
            return Err(Self::not_found(nsk, ns));
        }
        let key = key(k, kind, ns, &name);
        if self.objects.contains_key(&key) {
            return Err(Self::fail(
                kind,
                409,
                "AlreadyExists",
                &name,
                format!("{} \"{name}\" already exists", k.qualified()),
            ));
        }
        self.uid += 1;
        let m = meta_mut(&mut obj);
        m.insert("name".into(), Value::String(name));
        if k.namespaced {
            m.insert("namespace".into(), Value::String(ns.to_string()));
        } else {
            m.remove("namespace");
        }
        m.insert(
            "uid".into(),
            Value::String(format!("5d1c0a7e-0000-4000-8000-{:012x}", self.uid)),
        );
        m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        self.stamp(kind, &mut obj);
        self.objects.insert(key, obj.clone());
        self.record(kind, "ADDED", obj.clone(), None);
        Ok(obj)
    }

    /// PUT of the object (`status: false`) or of its status subresource (`status: true`).
    /// A body naming a resourceVersion other than the stored one is refused with 409.
    pub fn replace(
        &mut self,
        kind: usize,
        ns: &str,
        name: &str,
        mut obj: Value,
        status: bool,
    ) -> Result<Value, Failure> {
        let k = &KINDS[kind];
        let key = key(k, kind, ns, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(Self::not_found(kind, name));
        };
        if !obj.is_object() {
            return Err(Self::fail(
                kind,
                400,
                "BadRequest",
                name,
                "the body is not an object".into(),
            ));
        }
        let body_name = meta(&obj)
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str);
        if body_name.is_some_and(|n| n != name) {
            return Err(Self::fail(
                kind,
                400,
                "BadRequest",
                name,
                "the name of the object does not match the name on the URL".into(),
            ));
        }
        if let Some(rv) = rv_of(&obj) {
            if Some(rv) != rv_of(&old) {
                return Err(Self::conflict(kind, name));
            }
        }
        obj = if status {
            status_write(&old, &obj)
        } else {
            object_write(k, &old, obj)
        };
        self.stamp(kind, &mut obj);
        // A write that changes nothing is no change (the API server does not bump it).
        let mut same = obj.clone();
        meta_mut(&mut same).insert(
            "resourceVersion".into(),
            old["metadata"]["resourceVersion"].clone(),
        );
        if same == old {
            self.rv -= 1;
            return Ok(old);
        }
        self.objects.insert(key, obj.clone());
        self.record(kind, "MODIFIED", obj.clone(), Some(old));
        Ok(obj)
    }

    /// DELETE, with an optional precondition on the resourceVersion.
    pub fn delete(
        &mut self,
        kind: usize,
        ns: &str,
        name: &str,
        precondition_rv: Option<&str>,
    ) -> Result<Value, Failure> {
        let k = &KINDS[kind];
        let key = key(k, kind, ns, name);
        let Some(old) = self.objects.get(&key) else {
            return Err(Self::not_found(kind, name));
        };
        if let Some(rv) = precondition_rv {
            if Some(rv) != rv_of(old) {
                return Err(Self::fail(kind, 409, "Conflict", name, format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    k.qualified(),
                    rv_of(old).unwrap_or("")
                )));
            }
        }
        let Some(mut obj) = self.objects.remove(&key) else {
            return Err(Self::not_found(kind, name));
        };
        self.stamp(kind, &mut obj);
        self.record(kind, "DELETED", obj.clone(), None);
        Ok(obj)
    }
}

/// A `/status` write: the stored object with the body's `.status` (or none).
fn status_write(old: &Value, obj: &Value) -> Value {
    let mut next = old.clone();
    put_status(&mut next, obj);
    next
}

/// `to`'s `.status` made `from`'s (none if `from` has none).
fn put_status(to: &mut Value, from: &Value) {
    match from.get("status") {
        Some(s) => to["status"] = s.clone(),
        None => {
            if let Some(o) = to.as_object_mut() {
                o.remove("status");
            }
        }
    }
}

/// A write of the object: identity and bookkeeping stay the server's, a kind with a status
/// subresource keeps its stored `.status`, and a changed spec is a new generation.
fn object_write(k: &Kind, old: &Value, mut obj: Value) -> Value {
    let om = meta(old).cloned().unwrap_or_default();
    let m = meta_mut(&mut obj);
    for f in [
        "uid",
        "creationTimestamp",
        "namespace",
        "name",
        "generation",
    ] {
        match om.get(f) {
            Some(v) => m.insert(f.into(), v.clone()),
            None => m.remove(f),
        };
    }
    if k.status {
        put_status(&mut obj, old);
    }
    if spec_part(&obj) != spec_part(old) {
        let g = om.get("generation").and_then(Value::as_i64).unwrap_or(1);
        meta_mut(&mut obj).insert("generation".into(), json!(g + 1));
    }
    obj
}

/// A DNS subdomain (RFC 1123), as most kinds' names must be.
pub fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ing() -> usize {
        crate::kinds::find("networking.k8s.io", "v1", "ingresses").expect("ingresses")
    }

    #[test]
    fn versions_conflicts_and_history() {
        let mut s = Store::new();
        let a = s
            .create(
                ing(),
                "default",
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}}),
            )
            .expect("create");
        let rv = rv_of(&a).expect("rv").to_string();
        assert_eq!(a["metadata"]["generation"], 1);
        let err = s
            .create(ing(), "default", json!({"metadata": {"name": "a"}}))
            .expect_err("taken");
        assert_eq!((err.code, err.reason), (409, "AlreadyExists"));
        let err = s
            .create(ing(), "nowhere", json!({"metadata": {"name": "a"}}))
            .expect_err("no ns");
        assert_eq!(err.code, 404);
        // A stale resourceVersion is a conflict; the current one passes and bumps it.
        let mut b = a.clone();
        b["spec"]["x"] = json!(2);
        let b2 = s
            .replace(ing(), "default", "a", b.clone(), false)
            .expect("update");
        assert_eq!(b2["metadata"]["generation"], 2);
        let err = s
            .replace(ing(), "default", "a", b, false)
            .expect_err("stale");
        assert_eq!((err.code, err.reason), (409, "Conflict"));
        // The object's write keeps the status; the status write keeps the rest.
        let mut st = b2.clone();
        st["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}});
        st["spec"]["x"] = json!(99);
        let s3 = s.replace(ing(), "default", "a", st, true).expect("status");
        assert_eq!(s3["spec"]["x"], 2);
        assert_eq!(s3["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.1");
        assert_eq!(s3["metadata"]["generation"], 2);
        let mut nost = s3.clone();
        nost["status"] = json!({});
        let s4 = s
            .replace(ing(), "default", "a", nost, false)
            .expect("no-op");
        assert_eq!(s4, s3, "a write that changes nothing keeps the version");
        let since: Vec<_> = s
            .since(rv.parse().expect("n"))
            .expect("history")
            .iter()
            .map(|c| c.what)
            .collect();
        assert_eq!(since, ["MODIFIED", "MODIFIED"]);
        s.compact();
        assert!(s.since(rv.parse().expect("n")).is_none(), "compacted: 410");
        assert!(s.since(s.rv()).is_some());
        let d = s
            .delete(ing(), "default", "a", Some("1"))
            .expect_err("precondition");
        assert_eq!(d.code, 409);
        s.delete(ing(), "default", "a", None).expect("delete");
        assert!(s.get(ing(), "default", "a").is_none());
    }

    #[test]
    fn names_and_dates() {
        for ok in ["a", "a-b.c", "x1"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a_b"] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_425_931), "2026-12-04T23:12:11Z");
    }
}
