//! A route's `mirror` (docs/edge.md): `"URL"` or `{ url, host, body, timeout }`.
//!
//! Refused at load: a URL that is not `http://` or `https://` with a host, an unknown `$`
//! variable, and a variable in the scheme or the authority (a client's `Host` would choose
//! where the gateway connects); a `host` that could not be one header value.

use crate::model::{MirrorConfig, MirrorPart, UpstreamConfig};
use crate::named::Named;
use crate::reader::{as_bool, as_str, Cx, Tbl, Value};
use std::time::Duration;
use toml::de::DeValue;

/// nginx's own default for the mirror location's proxy timeouts (read and send).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn mirror(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    upstreams: &Named<UpstreamConfig>,
) -> Option<MirrorConfig> {
    if let DeValue::String(s) = v.get_ref() {
        return build(cx, path, v, s, None, true, DEFAULT_TIMEOUT);
    }
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut ok = true;
    let upstream = t.get("upstream").map(|u| {
        let i = upstreams.refer(cx, &t.key_path("upstream"), u, "upstream");
        ok &= i.is_some();
        i
    });
    let url = match (t.get("url"), &upstream) {
        (Some(u), _) => as_str(cx, &t.key_path("url"), u),
        // To an upstream the URL is the path alone: the client's by default.
        (None, Some(_)) => Some("$request_uri"),
        (None, None) => {
            cx.err(path, v.span(), "missing key \"url\" (or \"upstream\")");
            None
        }
    };
    let host = t
        .get("host")
        .and_then(|h| as_str(cx, &t.key_path("host"), h));
    let body = match t.get("body") {
        Some(b) => as_bool(cx, &t.key_path("body"), b).unwrap_or_else(|| {
            ok = false;
            true
        }),
        None => true,
    };
    let timeout = match t.get("timeout") {
        Some(d) => match crate::scalars::duration(cx, &t.key_path("timeout"), d) {
            Some(d) if !d.is_zero() => d,
            Some(_) => {
                cx.err(&t.key_path("timeout"), d.span(), "a duration above zero");
                ok = false;
                DEFAULT_TIMEOUT
            }
            None => {
                ok = false;
                DEFAULT_TIMEOUT
            }
        },
        None => DEFAULT_TIMEOUT,
    };
    t.finish(cx);
    let m = match upstream {
        Some(u) => to_upstream(cx, path, v, url?, host, body, timeout).map(|mut m| {
            m.upstream = u;
            m
        }),
        None => build(cx, path, v, url?, host, body, timeout),
    }?;
    ok.then_some(m)
}

/// Where the copy's authority is written when it goes to an upstream's target.
const TO_UPSTREAM: &str = "http://upstream";

/// A mirror to an upstream: `url` is a path (`/...`, `$request_uri` or `$uri` first).
fn to_upstream(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    url: &str,
    host: Option<&str>,
    body: bool,
    timeout: Duration,
) -> Option<MirrorConfig> {
    let full = format!("{TO_UPSTREAM}{url}");
    let path_first = url.starts_with('/')
        || (url.starts_with('$') && parse_url(&full).is_ok_and(|p| p.len() > 1));
    if !path_first {
        cx.err(
            path,
            v.span(),
            format!("mirror url \"{url}\": with an upstream, the url is a path (\"/...\", \"$request_uri\" or \"$uri\")"),
        );
        return None;
    }
    let mut m = build(cx, path, v, &full, host, body, timeout)?;
    if host.is_none() {
        m.host = String::new();
    }
    Some(m)
}

fn build(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    url: &str,
    host: Option<&str>,
    body: bool,
    timeout: Duration,
) -> Option<MirrorConfig> {
    let parts = match parse_url(url) {
        Ok(p) => p,
        Err(e) => {
            cx.err(path, v.span(), format!("mirror url \"{url}\": {e}"));
            return None;
        }
    };
    let host = match host {
        Some(h) if valid_host_field(h) => h.to_string(),
        Some(h) => {
            cx.err(
                &format!("{path}.host"),
                v.span(),
                format!("{h:?} is not a host: visible ASCII, no spaces, / or @"),
            );
            return None;
        }
        None => url_host(url),
    };
    Some(MirrorConfig {
        url: parts,
        host,
        body,
        timeout,
        upstream: None,
    })
}

/// The URL's pieces: its scheme and authority plain text, its path and query with variables.
/// Without a path the client's own path and query follow the authority (`$request_uri`).
pub fn parse_url(url: &str) -> Result<Vec<MirrorPart>, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("not an http:// or https:// URL")?;
    if url.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err("a URL is visible ASCII, no spaces".into());
    }
    let end = rest.find(['/', '?', '$']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if rest[end..].starts_with('?') {
        return Err("a query needs a path before it".into());
    }
    let head = &url[..url.len() - rest.len() + end];
    let checked: http::Uri = head
        .parse()
        .map_err(|_| format!("\"{authority}\" is not a host[:port]"))?;
    if checked.host().is_none_or(str::is_empty) || authority.contains('@') {
        return Err(format!("\"{authority}\" is not a host[:port]"));
    }
    let mut parts = vec![MirrorPart::Text(head.to_string())];
    let tail = &rest[end..];
    // Right after the authority only a variable that starts with `/` may follow: any other
    // would write into the host the gateway connects to.
    let starts_a_path = ["$request_uri", "$uri", "$document_uri"].iter().any(|v| {
        tail.strip_prefix(v)
            .is_some_and(|r| !r.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    });
    if tail.starts_with('$') && !starts_a_path {
        return Err(
            "only $request_uri or $uri may follow the host (another variable would write into it)"
                .into(),
        );
    }
    if tail.is_empty() {
        parts.push(MirrorPart::RequestUri);
        return Ok(parts);
    }
    let mut text = String::new();
    let mut i = 0;
    while i < tail.len() {
        let c = tail.as_bytes()[i];
        if c != b'$' {
            text.push(c as char);
            i += 1;
            continue;
        }
        let name_len = tail[i + 1..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let name = &tail[i + 1..i + 1 + name_len];
        let part = match name {
            "request_uri" => MirrorPart::RequestUri,
            "uri" | "document_uri" => MirrorPart::Uri,
            "args" | "query_string" => MirrorPart::Args,
            "is_args" => MirrorPart::IsArgs,
            "host" => MirrorPart::Host,
            "scheme" => MirrorPart::Scheme,
            "" => return Err("a lone \"$\"".into()),
            other => {
                return Err(format!(
                    "${other} is not a variable a mirror URL takes ($request_uri, $uri, $args, $is_args, $host, $scheme)"
                ))
            }
        };
        if !text.is_empty() {
            parts.push(MirrorPart::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
        i += 1 + name_len;
    }
    if !text.is_empty() {
        parts.push(MirrorPart::Text(text));
    }
    Ok(parts)
}

/// The URL's host (with its port when given), the copy's Host by default.
fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '$']).unwrap_or(rest.len());
    rest[..end].to_string()
}

fn valid_host_field(h: &str) -> bool {
    !h.is_empty()
        && h.bytes()
            .all(|b| b.is_ascii_graphic() && !b"/@\\".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use MirrorPart::*;

    #[test]
    fn variables_only_after_the_authority() {
        assert_eq!(
            parse_url("https://test.env.com/$request_uri").expect("in the test"),
            vec![
                Text("https://test.env.com".into()),
                Text("/".into()),
                RequestUri
            ]
        );
        assert_eq!(
            parse_url("http://m.ns.svc:8080$request_uri").expect("in the test"),
            vec![Text("http://m.ns.svc:8080".into()), RequestUri]
        );
        assert_eq!(
            parse_url("http://m:81").expect("in the test"),
            vec![Text("http://m:81".into()), RequestUri],
            "no path: the client's"
        );
        assert_eq!(
            parse_url("http://m/copy$is_args$args").expect("in the test"),
            vec![Text("http://m".into()), Text("/copy".into()), IsArgs, Args]
        );
        for bad in [
            "http://$host/x",
            "http://a$host",
            "ftp://m/",
            "m/x",
            "http:///x",
            "http://user@m/x",
            "http://m/$remote_addr",
            "http://m/$",
            "http://m/a b",
            "http://m?x=1",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        // "$host" in the authority cannot come back by another spelling either.
        assert!(parse_url("http://a$host/x").is_err());
    }

    #[test]
    fn the_host_is_the_urls_by_default() {
        assert_eq!(
            url_host("http://m.ns.svc:8080$request_uri"),
            "m.ns.svc:8080"
        );
        assert_eq!(
            url_host("https://test.env.com/$request_uri"),
            "test.env.com"
        );
        assert!(valid_host_field("a.b:80"));
        for bad in ["", "a b", "a\r\nX: y", "a/b", "u@h"] {
            assert!(!valid_host_field(bad), "{bad:?}");
        }
    }
}
