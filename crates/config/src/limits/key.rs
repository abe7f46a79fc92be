//! A limit's `key`: the key sources, each known and each with what it reads (a `jwt:` source
//! needs `[jwt]`).

use super::{Draft, Env};
use crate::model::*;
use crate::reader::{as_str_list, Cx, Tbl};
use crate::scalars::http_token;

/// `key`: one key source or a list of them (a composite key).
pub(super) fn read(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft, env: &Env) {
    let path = d.path.clone();
    let jwt_present = env.jwt_present;
    let key = match l.get("key") {
        Some(kv) => {
            let p = l.key_path("key");
            as_str_list(cx, &p, kv, true).and_then(|items| {
                if items.is_empty() {
                    cx.err(&p, kv.span(), "needs at least one key source");
                    return None;
                }
                let keys: Vec<_> = items
                    .iter()
                    .filter_map(|(ip, s, span)| {
                        let k = key_source(cx, ip, s, span.clone())?;
                        if matches!(k, KeySource::Jwt(_)) && !jwt_present {
                            cx.err(ip, span.clone(), format!("\"{s}\" reads a verified bearer token: add a [jwt] section (keys to verify it with)"));
                            return None;
                        }
                        Some(k)
                    })
                    .collect();
                (keys.len() == items.len()).then_some(keys)
            })
        }
        None => {
            cx.err(
                &path,
                l.span.clone(),
                "missing key \"key\" (e.g. key = \"client_ip\")",
            );
            None
        }
    };
    d.key = key;
}

/// One key source (`client_ip`, `header:NAME`, ...).
pub(crate) fn key_source(
    cx: &mut Cx,
    path: &str,
    s: &str,
    span: std::ops::Range<usize>,
) -> Option<KeySource> {
    let named = |prefix: &str| {
        s.strip_prefix(prefix)
            .map(str::trim)
            .filter(|n| !n.is_empty())
    };
    let k = match s {
        "client_ip" => KeySource::ClientIp,
        "user_agent" => KeySource::UserAgent,
        "ip_ua" => KeySource::IpUa,
        "route" => KeySource::Route,
        "path" => KeySource::Path,
        "method" => KeySource::Method,
        "global" => KeySource::Global,
        "client_cert" => KeySource::ClientCert,
        "consumer" => KeySource::Consumer,
        "descriptor" => KeySource::Descriptor,
        _ if s.starts_with("header:") => match named("header:") {
            Some(h) if http_token(h) => {
                if !cx.client_header(path, span, h) {
                    return None;
                }
                KeySource::Header(h.to_ascii_lowercase())
            }
            _ => {
                cx.err(
                    path,
                    span,
                    format!("\"{s}\": header:NAME needs a valid header name"),
                );
                return None;
            }
        },
        _ if s.starts_with("query:") => match named("query:") {
            Some(q) => KeySource::Query(q.to_string()),
            None => {
                cx.err(
                    path,
                    span,
                    format!("\"{s}\": query:NAME needs a parameter name"),
                );
                return None;
            }
        },
        _ if s.starts_with("jwt:") => match named("jwt:") {
            Some(c) => KeySource::Jwt(c.to_string()),
            None => {
                cx.err(
                    path,
                    span,
                    format!("\"{s}\": jwt:CLAIM needs a claim name, e.g. jwt:sub"),
                );
                return None;
            }
        },
        _ if s.starts_with("body:") => match named("body:") {
            Some(f) => KeySource::Body(f.to_string()),
            None => {
                cx.err(
                    path,
                    span,
                    format!("\"{s}\": body:FIELD needs a field name, e.g. body:username"),
                );
                return None;
            }
        },
        _ => {
            cx.err(
                path,
                span,
                format!(
                    "unknown key source \"{s}\" (use client_ip, header:NAME, query:NAME, jwt:CLAIM, body:FIELD, user_agent, ip_ua, route, path, method or global)"
                ),
            );
            return None;
        }
    };
    Some(k)
}
