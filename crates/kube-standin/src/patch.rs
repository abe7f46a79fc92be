//! PATCH bodies by content type: JSON merge patch (RFC 7386) and JSON patch (RFC 6902), from
//! the json-patch crate; strategic merge patch (what `kubectl apply` and `kubectl patch` send
//! by default) as a merge patch that also reads its directives; and server-side apply's YAML
//! as a merge of the applied fields.
//!
//! Where the stand-in differs from the API server: a strategic merge patch merges a list by
//! key only when the patch says the key (`$setElementOrder/FIELD`, which `kubectl apply`
//! sends for every list it merges); any other list is replaced whole, as in a merge patch.
//! Server-side apply keeps no field managers and reports no conflicts.

use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        Some(match base {
            "application/merge-patch+json" => PatchType::Merge,
            "application/json-patch+json" => PatchType::Json,
            "application/strategic-merge-patch+json" => PatchType::Strategic,
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchType::Apply,
            _ => return None,
        })
    }
}

/// `target` with `body` applied; an error says why the patch cannot apply.
pub fn apply(kind: PatchType, target: &Value, body: &[u8]) -> Result<Value, String> {
    let mut out = target.clone();
    match kind {
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
            json_patch::merge(&mut out, &p);
        }
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body).map_err(|e| e.to_string())?;
            json_patch::patch(&mut out, &p).map_err(|e| e.to_string())?;
        }
        PatchType::Strategic => {
            let p: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
            strategic(&mut out, &p);
        }
        PatchType::Apply => {
            let p: Value = serde_yaml_ng::from_slice(body).map_err(|e| e.to_string())?;
            json_patch::merge(&mut out, &p);
        }
    }
    Ok(out)
}

/// A strategic merge patch: maps merge (null deletes a key), `$patch: replace` / `delete`
/// on a map, lists merged by the key `$setElementOrder/FIELD` names (elements with
/// `$patch: delete` removed, the order as the directive says), other lists replaced;
/// `$retainKeys` keeps only the keys it names.
fn strategic(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *target = Value::Object(m);
            return;
        }
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(t) = target.as_object_mut() else {
        return;
    };
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()) || p.contains_key(k));
    }
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let order = p
            .get(&format!("$setElementOrder/{k}"))
            .and_then(Value::as_array);
        match (v, order) {
            (Value::Array(items), Some(order)) => {
                let merged = merge_list(t.get(k), items, order);
                t.insert(k.clone(), Value::Array(merged));
            }
            (Value::Object(_), _) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                strategic(slot, v);
                if slot.is_null() {
                    t.remove(k);
                }
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The key a `$setElementOrder` list names (each entry `{KEY: VALUE}`), if it names one.
fn merge_key(order: &[Value]) -> Option<String> {
    let first = order.first()?.as_object()?;
    let key = first.keys().next()?.clone();
    Some(key)
}

fn merge_list(old: Option<&Value>, patch: &[Value], order: &[Value]) -> Vec<Value> {
    let Some(key) = merge_key(order) else {
        // A list of primitives: the order is the list.
        return order.to_vec();
    };
    let old: Vec<Value> = old.and_then(Value::as_array).cloned().unwrap_or_default();
    let id = |v: &Value| v.get(&key).cloned();
    let mut out = Vec::new();
    for want in order {
        let Some(wanted) = want.get(&key) else {
            continue;
        };
        let before = old.iter().find(|o| id(o).as_ref() == Some(wanted));
        let change = patch.iter().find(|p| id(p).as_ref() == Some(wanted));
        let mut el = before.cloned().unwrap_or(Value::Null);
        match change {
            Some(c) if c.get("$patch").and_then(Value::as_str) == Some("delete") => continue,
            Some(c) => strategic(&mut el, c),
            None if before.is_none() => continue,
            None => {}
        }
        out.push(el);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(target: Value, patch: Value) -> Value {
        apply(PatchType::Strategic, &target, patch.to_string().as_bytes()).expect("applies")
    }

    #[test]
    fn strategic_merges_maps_and_keyed_lists() {
        let svc = json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}], "type": "ClusterIP"}, "metadata": {"labels": {"a": "1", "b": "2"}}});
        // kubectl apply changing one port's name and dropping a label.
        let out = smp(
            svc.clone(),
            json!({
                "metadata": {"labels": {"b": null}},
                "spec": {"$setElementOrder/ports": [{"port": 80}, {"port": 443}], "ports": [{"port": 443, "name": "tls"}]}
            }),
        );
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "http"}, {"port": 443, "name": "tls"}])
        );
        assert_eq!(out["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(out["spec"]["type"], "ClusterIP");
        // An element deleted; one added; the order as the directive says.
        let out = smp(
            svc.clone(),
            json!({"spec": {
                "$setElementOrder/ports": [{"port": 8080}, {"port": 80}],
                "ports": [{"port": 8080, "name": "alt"}, {"port": 443, "$patch": "delete"}]
            }}),
        );
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 8080, "name": "alt"}, {"port": 80, "name": "http"}])
        );
        // Without the directive a list is replaced, as by a merge patch.
        let out = smp(svc.clone(), json!({"spec": {"ports": [{"port": 1}]}}));
        assert_eq!(out["spec"]["ports"], json!([{"port": 1}]));
        // $patch: replace on a map.
        let out = smp(
            svc,
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"c": "3"}));
    }

    #[test]
    fn merge_json_and_apply_patches() {
        let t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        let m = apply(PatchType::Merge, &t, br#"{"a": {"b": null}, "l": [3]}"#).expect("merge");
        assert_eq!(m, json!({"a": {"c": 2}, "l": [3]}));
        let j = apply(PatchType::Json, &t, br#"[{"op": "replace", "path": "/a/b", "value": 5}, {"op": "add", "path": "/l/-", "value": 9}]"#).expect("json");
        assert_eq!(j, json!({"a": {"b": 5, "c": 2}, "l": [1, 2, 9]}));
        assert!(apply(
            PatchType::Json,
            &t,
            br#"[{"op": "remove", "path": "/nope"}]"#
        )
        .is_err());
        let y = apply(PatchType::Apply, &t, b"a:\n  c: 7\n").expect("apply");
        assert_eq!(y["a"], json!({"b": 1, "c": 7}));
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(PatchType::from_content_type("text/plain"), None);
    }
}
