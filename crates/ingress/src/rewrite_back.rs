//! `proxy-redirect-from` / `-to`, `proxy-cookie-domain` and `proxy-cookie-path`: the route's
//! `proxy_redirect`, `proxy_cookie_domain` and `proxy_cookie_path` (docs/edge.md), read as
//! ingress-nginx reads them. Its annotation validation (on by default since v1.9) drops a
//! value outside its characters to the default, `off`; so does this, with a warning.

use super::anns::Anns;
use super::text::{comment, q, Warnings};

/// ingress-nginx's `URLIsValidRegex`: letters, digits and `-._~/:,?&=`.
fn url_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~/:,?&=".contains(&b))
}

/// ingress-nginx's `cookieDomainChars`: letters, digits and `-._~/:`.
fn domain_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~/:".contains(&b))
}

/// The route's response-rewrite lines for one Ingress.
pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> Vec<String> {
    let ctx = a.ctx();
    let mut out = Vec::new();
    let from = a.get("proxy-redirect-from").map(|v| v.trim().to_string());
    let to = a.get("proxy-redirect-to").map(|v| v.trim().to_string());
    let valid = |k: &str, v: Option<String>, w: &mut Warnings| match v {
        Some(v) if !url_chars(&v) => {
            w.push(comment(&format!(
                "{ctx}: {k} \"{v}\" has characters ingress-nginx's annotation validation refuses: off, as there"
            )));
            None
        }
        v => v,
    };
    let (from, to) = (
        valid("proxy-redirect-from", from, w),
        valid("proxy-redirect-to", to, w),
    );
    match (from.as_deref(), to.as_deref()) {
        // `default` rewrites ingress-nginx's own `http://upstream_balancer` URLs, which no
        // upstream sends: nothing to do, as `off`.
        (None | Some("off" | "default"), _) | (_, None | Some("off")) => {}
        (Some(""), _) => w.push(comment(&format!(
            "{ctx}: proxy-redirect-from is empty: nothing rewritten"
        ))),
        (Some(f), Some(t)) if f.starts_with('~') => w.push(comment(&format!(
            "{ctx}: proxy-redirect-from \"{f}\" is a regular expression (nginx's ~): not translated, Location {t} not rewritten"
        ))),
        (Some(f), Some(t)) => out.push(format!(
            "# proxy-redirect-from, proxy-redirect-to\nproxy_redirect = {{ from = {}, to = {} }}",
            q(f),
            q(t)
        )),
    }
    if let Some(v) = a.get("proxy-cookie-domain").map(str::trim) {
        let parts: Vec<&str> = v.split_whitespace().collect();
        match parts.as_slice() {
            ["off"] => {}
            [f, t] if domain_chars(f) && domain_chars(t) && !f.starts_with('~') => {
                out.push(format!(
                    "# proxy-cookie-domain\nproxy_cookie_domain = {{ from = {}, to = {} }}",
                    q(f),
                    q(t)
                ));
            }
            _ => w.push(comment(&format!(
                "{ctx}: proxy-cookie-domain \"{v}\" is not off or DOMAIN REPLACEMENT of the characters ingress-nginx's annotation validation lets through: off, as there"
            ))),
        }
    }
    // Validated with its spaces removed (ingress-nginx's ValidateRegex(URLIsValidRegex,
    // true)), then given to nginx as written: "PATH REPLACEMENT".
    if let Some(v) = a.get("proxy-cookie-path").map(str::trim) {
        let parts: Vec<&str> = v.split_whitespace().collect();
        match parts.as_slice() {
            ["off"] => {}
            [f, t] if url_chars(f) && url_chars(t) && !f.starts_with('~') => {
                out.push(format!(
                    "# proxy-cookie-path\nproxy_cookie_path = {{ from = {}, to = {} }}",
                    q(f),
                    q(t)
                ));
            }
            _ => w.push(comment(&format!(
                "{ctx}: proxy-cookie-path \"{v}\" is not off or PATH REPLACEMENT of the characters ingress-nginx's annotation validation lets through: off"
            ))),
        }
    }
    out
}
