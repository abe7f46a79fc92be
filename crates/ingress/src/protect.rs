//! Protections Tollgate cannot keep: the parts of authentication it cannot translate
//! (`auth-snippet`, `auth-proxy-set-headers`; the rest is `auth.rs`'s), nginx snippets (they may add
//! checks or hide paths), ModSecurity, the controller's global authentication. Each becomes a
//! refusal: the routes it covers answer 403 until someone decides (or `--allow-insecure`).
//!
//! A `server-snippet` is nginx's server block: it covers every route of the Ingress's hosts,
//! whichever Ingress made them.

use super::anns::{Anns, Refusal};
use super::text::{comment, parse_bool, Warnings};

const AUTH: &str = "it changes the auth request in ways Tollgate cannot see or run (auth-url and auth-type basic are translated: see auth.rs)";
const SNIPPET: &str = "an nginx snippet may add checks or hide paths, and Tollgate cannot run it";
const WAF: &str = "ModSecurity (a web application firewall) has no Tollgate equivalent";

/// Refused whatever their value.
const ALWAYS: &[(&str, &str)] = &[
    ("auth-proxy-set-headers", AUTH),
    ("auth-snippet", AUTH),
    ("configuration-snippet", SNIPPET),
    // Not an ingress-nginx annotation (a ConfigMap key), but if someone wrote it, it was meant.
    ("location-snippet", SNIPPET),
    ("modsecurity-snippet", WAF),
];

/// Refused when "true".
const WHEN_ON: &[(&str, &str)] = &[
    ("enable-modsecurity", WAF),
    ("enable-owasp-core-rules", WAF),
    ("enable-global-auth", "the controller's global-auth-url (its ConfigMap) authenticated this Ingress, and the import cannot see the ConfigMap: write the route's auth"),
];

/// The protections of one Ingress that cannot be kept: of its own routes, and of every
/// route of its hosts (`server-snippet`).
#[derive(Default)]
pub(super) struct ProtectOut {
    pub refusals: Vec<Refusal>,
    pub host_refusals: Vec<Refusal>,
}

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> ProtectOut {
    let mut s = ProtectOut::default();
    let ctx = a.ctx();
    for (key, why) in ALWAYS {
        match a.get(key) {
            None => {}
            // An empty value (a Helm template's unset value) configures nothing in ingress-nginx.
            Some(v) if v.trim().is_empty() => {
                w.push(format!("{ctx}: {key} is empty: nothing to translate"));
            }
            Some(_) => s.refusals.push(refusal(key, why)),
        }
    }
    for (key, why) in WHEN_ON {
        match a.get(key).map(parse_bool) {
            None | Some(Ok(false)) => {}
            Some(Ok(true)) => s.refusals.push(refusal(key, why)),
            // Not a boolean: whatever it meant, fail closed.
            Some(Err(v)) => s.refusals.push(refusal(
                key,
                &comment(&format!("\"{v}\" is not true or false; {why}")),
            )),
        }
    }
    if a.get("enable-global-auth").map(parse_bool) == Some(Ok(false)) {
        w.push(format!("{ctx}: enable-global-auth \"false\": the controller's ConfigMap probably sets global-auth-url, which authenticated every other Ingress; the import cannot see it, and their routes are served without it: check"));
    }
    match a.get("server-snippet") {
        None => {}
        Some(v) if v.trim().is_empty() => {
            w.push(format!(
                "{ctx}: server-snippet is empty: nothing to translate"
            ));
        }
        Some(_) => s.host_refusals.push(refusal("server-snippet", SNIPPET)),
    }
    s
}

fn refusal(key: &str, why: &str) -> Refusal {
    Refusal {
        annotation: key.to_string(),
        why: why.to_string(),
    }
}
