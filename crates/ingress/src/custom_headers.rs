//! `custom-headers: NAMESPACE/NAME`: the response fields a ConfigMap lists, set on every
//! answer of the Ingress's routes (nginx's `more_set_headers`), as the route's
//! `response_headers = { set = { ... } }`.
//!
//! As ingress-nginx: the ConfigMap must exist, each name must be letters, digits, `-` and
//! `_`, each value of its characters, and each name listed (spelled alike) in the controller
//! ConfigMap's `global-allowed-response-headers` (empty by default, so nothing is allowed):
//! otherwise the location is denied, here its routes answer 403. Unlike ingress-nginx, a
//! ConfigMap of another namespace is refused too (its data would reach every client), and so
//! is a field Tollgate owns (`Content-Length`, the RateLimit fields, `Strict-Transport-Security`,
//! CORS's): a header asked for is never dropped silently.

use super::anns::{Anns, Refusal};
use super::global::ConfigMap;
use super::text::{nginx_header_name, q};

/// What a translation may look up: the input's ConfigMaps, and the controller's allow list.
pub(super) struct Lookup<'a> {
    pub maps: &'a [ConfigMap],
    /// `global-allowed-response-headers`, each name as written.
    pub allowed: &'a [String],
}

/// ingress-nginx's `valueRegexp`: printable ASCII but for a few (never a control character).
fn valid_value(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || b" _:;.,\\/\"'?!(){}[]@<>=-+*#$&`|~^%".contains(&b)
        })
}

/// The `response_headers` line, or why the Ingress's routes are refused.
pub(super) fn read(a: &mut Anns, cx: &Lookup) -> Option<Result<String, Refusal>> {
    let id = a.get("custom-headers")?.trim().to_string();
    let refuse = |why: String| {
        Some(Err(Refusal {
            annotation: "custom-headers".into(),
            why,
        }))
    };
    let Some((ns, name)) = id.split_once('/') else {
        return refuse(format!(
            "custom-headers \"{id}\" is not NAMESPACE/NAME (ingress-nginx finds no such ConfigMap and denies the location)"
        ));
    };
    if ns != a.ns() {
        return refuse(format!(
            "custom-headers \"{id}\" is a ConfigMap of another namespace: its data would be every client's to read"
        ));
    }
    let Some(map) = cx.maps.iter().find(|m| m.ns == ns && m.name == name) else {
        return refuse(format!(
            "custom-headers: ConfigMap {id} is not there (ingress-nginx denies the location)"
        ));
    };
    let mut set = Vec::new();
    for (k, v) in &map.data {
        if !nginx_header_name(k) || !valid_value(v) {
            return refuse(format!(
                "custom-headers: ConfigMap {id} holds {k:?} = {v:?}, a name or value ingress-nginx refuses (it denies the location)"
            ));
        }
        if !cx.allowed.iter().any(|x| x == k) {
            return refuse(format!(
                "custom-headers: {k} is not in the controller ConfigMap's global-allowed-response-headers (ingress-nginx denies the location)"
            ));
        }
        if let Some(why) = tollgate_config::response_header_refused(&k.to_ascii_lowercase()) {
            return refuse(format!(
                "custom-headers: {k} {why} (a header asked for is never dropped)"
            ));
        }
        // more_set_headers' value is literal (ingress-nginx escapes `$`); `$$` is the rule's.
        set.push(format!("{} = {}", q(k), q(&v.replace('$', "$$"))));
    }
    if set.is_empty() {
        return None;
    }
    Some(Ok(format!(
        "# custom-headers: ConfigMap {id}\nresponse_headers = {{ set = {{ {} }} }}",
        set.join(", ")
    )))
}
