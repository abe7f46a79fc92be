//! A route's `redirect` (docs/routes.md): the route answers with a redirect whose `Location`
//! is made from the request (the Gateway API's RequestRedirect filter): the scheme, host,
//! port and path each kept or replaced, the query kept.
//!
//! Refused at load: `redirect` with `upstream`, `backends` or `respond`; a status other than
//! 301, 302, 303, 307 and 308; a scheme other than http and https; a host that is not a DNS
//! name; a path that is not canonical; `replace_prefix` on a route whose path is a regex.

use crate::model::{PathMatch, Redirect, RedirectPath};
use crate::reader::{as_int_in, as_str, Cx, Tbl, Value};

/// `redirect = { status, scheme, host, port, path | replace_prefix }`, read against the
/// route's own path (`replace_prefix` replaces what a prefix route matched).
pub(crate) fn read(cx: &mut Cx, p: &str, v: &Value, path: Option<&PathMatch>) -> Option<Redirect> {
    let mut t = Tbl::of(cx, p.to_string(), v)?;
    let mut ok = true;
    let status = match t.get("status") {
        Some(sv) => {
            let kp = t.key_path("status");
            match as_int_in(cx, &kp, sv, 301, 308) {
                Some(s @ (301 | 302 | 303 | 307 | 308)) => s as u16,
                Some(s) => {
                    cx.err(
                        &kp,
                        sv.span(),
                        format!("{s} is not a redirect (301, 302, 303, 307 or 308)"),
                    );
                    ok = false;
                    302
                }
                None => {
                    ok = false;
                    302
                }
            }
        }
        None => 302,
    };
    let mut text =
        |t: &mut Tbl, key: &str, valid: fn(&str) -> bool, what: &str| -> Option<String> {
            let v = t.get(key)?;
            let kp = t.key_path(key);
            let s = as_str(cx, &kp, v)?;
            if valid(s) {
                Some(s.to_string())
            } else {
                cx.err(&kp, v.span(), format!("\"{s}\" is not {what}"));
                ok = false;
                None
            }
        };
    let scheme = text(
        &mut t,
        "scheme",
        |s| matches!(s, "http" | "https"),
        "http or https",
    );
    let host = text(&mut t, "host", crate::scalars::dns_name, "a host name")
        .map(|h| h.to_ascii_lowercase());
    let full = text(
        &mut t,
        "path",
        crate::scalars::canonical_route_path,
        "a canonical path starting with /",
    );
    let prefix = text(
        &mut t,
        "replace_prefix",
        crate::scalars::canonical_route_path,
        "a canonical path starting with /",
    );
    let port = t
        .get("port")
        .and_then(|pv| as_int_in(cx, &t.key_path("port"), pv, 1, 65535))
        .map(|n| n as u16);
    let path = match (full, prefix, path) {
        (Some(_), Some(_), _) => {
            cx.err(
                &t.key_path("replace_prefix"),
                t.span.clone(),
                "path and replace_prefix: set one",
            );
            ok = false;
            None
        }
        (Some(f), None, _) => Some(RedirectPath::Full(f)),
        (None, Some(with), Some(PathMatch::Prefix(m))) => Some(RedirectPath::Prefix {
            matched: m.trim_end_matches('/').to_string(),
            with,
        }),
        (None, Some(with), Some(PathMatch::Exact(m))) => Some(RedirectPath::Prefix {
            matched: m.trim_end_matches('/').to_string(),
            with,
        }),
        (None, Some(_), _) => {
            cx.err(&t.key_path("replace_prefix"), t.span.clone(), "replace_prefix needs a route with path_prefix or path_exact: it replaces what that matched");
            ok = false;
            None
        }
        (None, None, _) => None,
    };
    t.finish(cx);
    ok.then_some(Redirect {
        status,
        scheme,
        host,
        port,
        path,
    })
}
