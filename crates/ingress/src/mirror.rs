//! `mirror-target`, `mirror-host` and `mirror-request-body`: the route's `mirror`
//! (docs/edge.md), read as ingress-nginx reads them.
//!
//! ingress-nginx validates the target and the host with its server-name characters; a value
//! outside them is dropped (a warning there, a warning here). A target ingress-nginx would take
//! but Tollgate cannot send (an nginx variable Tollgate does not fill, a variable in the host)
//! leaves the mirror off, named: the rest of the Ingress serves as before, as a mirror never
//! changes an answer.

use super::anns::Anns;
use super::text::{comment, q, Warnings};

/// ingress-nginx's `IsValidRegex` (its `ValidateServerName`): letters, digits and
/// `-._~/:^$[](){}*+?|&=\`.
fn server_name_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~/:^$[](){}*+?|&=\\".contains(&b))
}

/// The route's `mirror = { ... }` line for one Ingress, when it asks for one.
pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> Option<String> {
    let ctx = a.ctx();
    let target = a.get("mirror-target").map(|v| v.trim().to_string());
    let host = a.get("mirror-host").map(|v| v.trim().to_string());
    let body = a.get("mirror-request-body").map(|v| v.trim().to_string());
    let Some(target) = target else {
        for (k, v) in [("mirror-host", &host), ("mirror-request-body", &body)] {
            if v.is_some() {
                w.push(comment(&format!(
                    "{ctx}: {k} without mirror-target: nothing is mirrored (as by ingress-nginx)"
                )));
            }
        }
        return None;
    };
    if !server_name_chars(&target) || target.is_empty() {
        w.push(comment(&format!(
            "{ctx}: mirror-target \"{target}\" has characters ingress-nginx's annotation validation refuses: no mirror"
        )));
        return None;
    }
    if let Err(e) = tollgate_config::parse_mirror_url(&target) {
        w.push(comment(&format!(
            "{ctx}: mirror-target \"{target}\" cannot be sent by Tollgate ({e}): no mirror"
        )));
        return None;
    }
    let body = match body.as_deref() {
        None | Some("on") => true,
        Some("off") => false,
        Some(v) => {
            w.push(comment(&format!(
                "{ctx}: mirror-request-body \"{v}\" is not on or off: on, as ingress-nginx reads it"
            )));
            true
        }
    };
    let host = match host {
        Some(h) if !h.is_empty() && server_name_chars(&h) && !h.contains(['/', '\\', '$']) => {
            Some(h)
        }
        Some(h) => {
            w.push(comment(&format!(
                "{ctx}: mirror-host \"{h}\" is not a host name ingress-nginx's validation lets through: the target's host is sent"
            )));
            None
        }
        None => None,
    };
    let mut line = format!("# mirror-target\nmirror = {{ url = {}", q(&target));
    if let Some(h) = host {
        line.push_str(&format!(", host = {}", q(&h)));
    }
    if !body {
        line.push_str(", body = false");
    }
    line.push_str(" }");
    Some(line)
}
