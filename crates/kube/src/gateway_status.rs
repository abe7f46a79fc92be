//! The Gateway API's statuses, written by the leader: GatewayClasses and Gateways whole (they
//! are Tollgate's), HTTPRoutes' `parents` and RateLimitPolicies' `ancestors` only where the
//! `controllerName` is Tollgate's (other controllers' entries are theirs). A condition keeps
//! its `lastTransitionTime` while its status stays; nothing is written when nothing changed,
//! so the write's own watch event translates to the same status and stops there.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use tollgate_gateway_api::translate::Status;

/// The status to write over `current`, or `None` when it would change nothing. `now`: an
/// RFC 3339 time for conditions whose status changed.
pub fn merged(
    kind: &str,
    controller: &str,
    current: Option<&Value>,
    ours: &Value,
    now: &str,
) -> Option<Value> {
    let empty = json!({});
    let current = current.unwrap_or(&empty);
    let mut want = ours.clone();
    stamp(&mut want, current, now);
    let list = match kind {
        "HTTPRoute" | "GRPCRoute" => Some("parents"),
        "RateLimitPolicy" | "BackendTLSPolicy" => Some("ancestors"),
        _ => None,
    };
    if let Some(key) = list {
        // Theirs first, as they were; ours after.
        let mut all: Vec<Value> = current
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("controllerName").and_then(Value::as_str) != Some(controller))
            .cloned()
            .collect();
        all.extend(
            want.get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        want[key] = Value::Array(all);
    }
    let same = match list {
        Some(key) => current.get(key) == want.get(key),
        None => strip(current) == strip(&want),
    };
    (!same).then_some(want)
}

/// A status without what the writer does not decide (for comparison).
fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.retain(|k, _| {
            matches!(
                k.as_str(),
                "conditions"
                    | "listeners"
                    | "addresses"
                    | "supportedFeatures"
                    | "parents"
                    | "ancestors"
            )
        });
    }
    v
}

/// Every condition in `want` gets its `lastTransitionTime`: the current one's while the
/// status is the same, else `now`. Conditions are found by their path (the list they are in,
/// its entry's name or parentRef) and type.
fn stamp(want: &mut Value, current: &Value, now: &str) {
    let mut times: BTreeMap<String, (String, String)> = BTreeMap::new();
    walk(current, "", &mut |path, c| {
        if let (Some(t), Some(s), Some(at)) = (
            c.get("type").and_then(Value::as_str),
            c.get("status").and_then(Value::as_str),
            c.get("lastTransitionTime").and_then(Value::as_str),
        ) {
            times.insert(format!("{path}/{t}"), (s.to_string(), at.to_string()));
        }
    });
    walk_mut(want, "", &mut |path, c| {
        let t = c
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let s = c
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let at = match times.get(&format!("{path}/{t}")) {
            Some((was, at)) if *was == s => at.clone(),
            _ => now.to_string(),
        };
        c["lastTransitionTime"] = Value::String(at);
    });
}

/// Where an entry of a status list is: by its name, parentRef or ancestorRef.
fn entry_key(e: &Value) -> String {
    e.get("name")
        .or_else(|| e.get("parentRef"))
        .or_else(|| e.get("ancestorRef"))
        .map(|k| k.to_string())
        .unwrap_or_default()
}

fn walk(v: &Value, path: &str, f: &mut dyn FnMut(&str, &Value)) {
    let Some(o) = v.as_object() else { return };
    for (k, x) in o {
        match (k.as_str(), x) {
            ("conditions", Value::Array(cs)) => cs.iter().for_each(|c| f(path, c)),
            (_, Value::Array(es)) => {
                for e in es {
                    walk(e, &format!("{path}/{k}/{}", entry_key(e)), f);
                }
            }
            _ => {}
        }
    }
}

fn walk_mut(v: &mut Value, path: &str, f: &mut dyn FnMut(&str, &mut Value)) {
    let Some(o) = v.as_object_mut() else { return };
    for (k, x) in o.iter_mut() {
        match (k.as_str(), x) {
            ("conditions", Value::Array(cs)) => cs.iter_mut().for_each(|c| f(path, c)),
            (_, Value::Array(es)) => {
                for e in es.iter_mut() {
                    let p = format!("{path}/{k}/{}", entry_key(e));
                    walk_mut(e, &p, f);
                }
            }
            _ => {}
        }
    }
}

/// The API of a kind, for its status subresource.
fn api(client: &kube::Client, s: &Status) -> kube::Api<kube::api::DynamicObject> {
    let (group, version, plural) = match s.kind {
        "GatewayClass" => (tollgate_gateway_api::input::GROUP, "v1", "gatewayclasses"),
        "Gateway" => (tollgate_gateway_api::input::GROUP, "v1", "gateways"),
        "HTTPRoute" => (tollgate_gateway_api::input::GROUP, "v1", "httproutes"),
        "GRPCRoute" => (tollgate_gateway_api::input::GROUP, "v1", "grpcroutes"),
        "BackendTLSPolicy" => (
            tollgate_gateway_api::input::GROUP,
            "v1",
            "backendtlspolicies",
        ),
        _ => ("tollgate.io", "v1alpha1", "ratelimitpolicies"),
    };
    let ar = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: s.kind.into(),
        plural: plural.into(),
    };
    match &s.namespace {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
        None => kube::Api::all_with(client.clone(), &ar),
    }
}

/// One round by the leader: each status that differs is written. (Written, refused.)
pub async fn round(client: &kube::Client, controller: &str, statuses: &[Status]) -> (usize, usize) {
    use kube::api::{Patch, PatchParams};
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let (mut written, mut refused) = (0, 0);
    for s in statuses {
        let api = api(client, s);
        let current = match api.get_status(&s.name).await {
            Ok(o) => o.data.get("status").cloned(),
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => {
                refused += 1;
                tracing::warn!(event = "kube_status_failed", kind = s.kind, name = %s.name, error = %e, "status not read");
                continue;
            }
        };
        let Some(body) = merged(s.kind, controller, current.as_ref(), &s.status, &now) else {
            continue;
        };
        match api
            .patch_status(
                &s.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": body})),
            )
            .await
        {
            Ok(_) => written += 1,
            Err(e) => {
                refused += 1;
                tracing::warn!(event = "kube_status_failed", kind = s.kind, name = %s.name, error = %e, "status not written");
            }
        }
    }
    if written > 0 {
        tracing::info!(
            event = "kube_status_written",
            objects = written,
            "Gateway API status written"
        );
    }
    (written, refused)
}

/// The leader's writer: a round after each translation and each change of leadership.
pub async fn run(
    client: kube::Client,
    controller: String,
    mut statuses: tokio::sync::watch::Receiver<std::sync::Arc<Vec<Status>>>,
    mut leading: tokio::sync::watch::Receiver<bool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if *leading.borrow_and_update() {
            let now = statuses.borrow_and_update().clone();
            round(&client, &controller, &now).await;
        }
        tokio::select! {
            r = statuses.changed() => if r.is_err() { break },
            r = leading.changed() => if r.is_err() { break },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::merged;
    use serde_json::json;

    #[test]
    fn a_condition_keeps_its_time_while_it_stays_and_others_parents_stay() {
        let ours = json!({"parents": [{"parentRef": {"name": "gw"}, "controllerName": "us", "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]}]});
        let theirs =
            json!({"parentRef": {"name": "other"}, "controllerName": "them", "conditions": []});
        let current = json!({"parents": [theirs.clone()]});
        let first = merged("HTTPRoute", "us", Some(&current), &ours, "T1").expect("written");
        assert_eq!(first["parents"][0], theirs);
        assert_eq!(
            first["parents"][1]["conditions"][0]["lastTransitionTime"],
            "T1"
        );
        // The same again: nothing to write.
        assert_eq!(merged("HTTPRoute", "us", Some(&first), &ours, "T2"), None);
        // Its status changes: a new time.
        let refused = json!({"parents": [{"parentRef": {"name": "gw"}, "controllerName": "us", "conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners"}]}]});
        let second = merged("HTTPRoute", "us", Some(&first), &refused, "T3").expect("written");
        assert_eq!(
            second["parents"][1]["conditions"][0]["lastTransitionTime"],
            "T3"
        );
        assert_eq!(second["parents"][0], theirs);
    }

    #[test]
    fn a_gateway_s_listener_conditions_are_stamped_by_listener() {
        let ours = json!({"conditions": [{"type": "Accepted", "status": "True"}], "listeners": [{"name": "a", "conditions": [{"type": "Programmed", "status": "True"}]}, {"name": "b", "conditions": [{"type": "Programmed", "status": "False"}]}]});
        let first = merged("Gateway", "us", None, &ours, "T1").expect("written");
        let mut changed = ours.clone();
        changed["listeners"][1]["conditions"][0]["status"] = json!("True");
        let second = merged("Gateway", "us", Some(&first), &changed, "T2").expect("written");
        assert_eq!(
            second["listeners"][0]["conditions"][0]["lastTransitionTime"],
            "T1"
        );
        assert_eq!(
            second["listeners"][1]["conditions"][0]["lastTransitionTime"],
            "T2"
        );
        assert_eq!(second["conditions"][0]["lastTransitionTime"], "T1");
    }
}
