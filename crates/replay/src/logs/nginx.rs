//! nginx's logs: the `combined` format (and those that append to it, such as ingress-nginx's
//! `upstreaminfo`), and JSON lines from an `escape=json` log format.

use super::json::{self, Fields, Val};
use super::{client_ip, method, request_line, show, target, time, Client, Parsed, Record};
use serde::de::{IgnoredAny, MapAccess};
use std::borrow::Cow;

/// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
/// "$http_referer" "$http_user_agent" ...`; a line that is not one but is the ingress-nginx
/// controller's own is skipped.
pub(super) fn combined(line: &[u8]) -> Result<Parsed, String> {
    match combined_record(line) {
        Ok(r) => Ok(Parsed::Record(r)),
        Err(_) if controller_line(line) => Ok(Parsed::Skip),
        Err(e) => Err(e),
    }
}

fn combined_record(line: &[u8]) -> Result<Record, String> {
    let space = find(line, b' ').ok_or("not a combined log line")?;
    let addr = &line[..space];
    let rest = &line[space..];
    let open = find(rest, b'[').ok_or("no [time]")?;
    let close = open + find(&rest[open..], b']').ok_or("no ] after the time")?;
    let t = &rest[open + 1..close];
    let time = std::str::from_utf8(t)
        .ok()
        .and_then(time::nginx_local)
        .ok_or_else(|| format!("bad time {}", show(&String::from_utf8_lossy(t))))?;
    let rest = rest[close + 1..]
        .strip_prefix(b" \"")
        .ok_or("no quoted request after the time")?;
    let (request, rest) = quoted(rest)?;
    let request = String::from_utf8_lossy(&request);
    let (method, t) = request_line(&request)?;
    let method = super::method(method)?;
    let mut host = None;
    let target = target(t, &mut host)?;
    let addr = std::str::from_utf8(addr).map_err(|_| "bad client address")?;
    let client = client_ip(addr)?;
    // $status $body_bytes_sent, then the quoted referer and user agent when there (the
    // `common` format stops before them).
    let mut headers = Vec::new();
    let rest = skip_token(skip_token(rest));
    if let Some(rest) = rest.strip_prefix(b" \"") {
        let (referer, rest) = quoted(rest)?;
        header(&mut headers, "referer", &referer);
        if let Some(rest) = rest.strip_prefix(b" \"") {
            let (agent, _) = quoted(rest)?;
            header(&mut headers, "user-agent", &agent);
        }
    }
    Ok(Record {
        time,
        method,
        host,
        target,
        client,
        headers,
    })
}

fn header(headers: &mut Vec<(String, String)>, name: &str, value: &[u8]) {
    if !value.is_empty() && value != b"-" {
        headers.push((name.to_owned(), String::from_utf8_lossy(value).into_owned()));
    }
}

fn find(s: &[u8], b: u8) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// Past a space and the token after it.
fn skip_token(s: &[u8]) -> &[u8] {
    let s = s.strip_prefix(b" ").unwrap_or(s);
    &s[find(s, b' ').unwrap_or(s.len())..]
}

/// A quoted field whose opening quote has been read: its decoded text and what follows the
/// closing quote. nginx escapes `"`, `\`, control and non-ASCII bytes as `\xHH`; `\"` and `\\`
/// (other servers') are decoded too.
fn quoted(s: &[u8]) -> Result<(Cow<'_, [u8]>, &[u8]), String> {
    let mut i = 0;
    let mut escaped = false;
    while i < s.len() {
        match s[i] {
            b'"' => {
                let raw = &s[..i];
                let text = if escaped {
                    Cow::Owned(unescape(raw))
                } else {
                    Cow::Borrowed(raw)
                };
                return Ok((text, &s[i + 1..]));
            }
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Err("unterminated quoted field".to_owned())
}

fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' {
            match raw.get(i + 1) {
                Some(b'x') => {
                    let hex = raw
                        .get(i + 2..i + 4)
                        .and_then(|h| std::str::from_utf8(h).ok())
                        .and_then(|h| u8::from_str_radix(h, 16).ok());
                    if let Some(b) = hex {
                        out.push(b);
                        i += 4;
                        continue;
                    }
                }
                Some(&c @ (b'"' | b'\\')) => {
                    out.push(c);
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

/// Whether a line that shows a format is a combined log line: an address, then `[time]`
/// and a quoted request.
pub(super) fn looks_combined(line: &[u8]) -> bool {
    let Some(space) = find(line, b' ') else {
        return false;
    };
    let rest = &line[space..];
    if line[..space]
        .iter()
        .any(|&b| matches!(b, b'"' | b'{' | b','))
    {
        return false;
    }
    match find(rest, b'[') {
        Some(open) => {
            let rest = &rest[open..];
            find(rest, b']').is_some_and(|close| rest[close + 1..].starts_with(b" \""))
        }
        None => false,
    }
}

/// The ingress-nginx controller's own lines, which `kubectl logs` mixes with the access log:
/// klog lines (`I1202 11:15:49.123456 ...`), nginx error-log lines (`2026/12/02 11:15:49
/// [error] ...`), and the start-up banner (a rule of dashes, a title, indented lines).
fn controller_line(line: &[u8]) -> bool {
    let digits = |r: std::ops::Range<usize>| {
        line.get(r)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let at = |i: usize, b: u8| line.get(i) == Some(&b);
    let klog = matches!(line.first(), Some(b'I' | b'W' | b'E' | b'F'))
        && digits(1..5)
        && at(5, b' ')
        && digits(6..8)
        && at(8, b':');
    let error_log = digits(0..4) && at(4, b'/') && at(7, b'/') && at(10, b' ') && at(13, b':');
    klog || error_log
        || line.starts_with(b" ")
        || line.starts_with(b"\t")
        || line.starts_with(b"-----")
        || line.starts_with(b"NGINX Ingress controller")
}

/// The keys an nginx JSON line is read from.
#[derive(Default)]
struct Line<'a> {
    msec: Val<'a>,
    /// `time_iso8601`, `time`, `timestamp`: the first present wins.
    iso: [Val<'a>; 3],
    time_local: Val<'a>,
    request_method: Val<'a>,
    method: Val<'a>,
    request_uri: Val<'a>,
    uri: Val<'a>,
    args: Val<'a>,
    path: Val<'a>,
    request_query: Val<'a>,
    request: Val<'a>,
    /// `host`, `http_host`, `vhost`, `server_name`.
    host: [Val<'a>; 4],
    remote_addr: Val<'a>,
    x_forwarded_for: Val<'a>,
    headers: Vec<(String, String)>,
}

impl<'de> Fields<'de> for Line<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "msec" => &mut self.msec,
            "time_iso8601" => &mut self.iso[0],
            "time" => &mut self.iso[1],
            "timestamp" => &mut self.iso[2],
            "time_local" => &mut self.time_local,
            "request_method" => &mut self.request_method,
            "method" => &mut self.method,
            "request_uri" => &mut self.request_uri,
            "uri" => &mut self.uri,
            "args" => &mut self.args,
            "path" => &mut self.path,
            "request_query" => &mut self.request_query,
            "request" => &mut self.request,
            "host" => &mut self.host[0],
            "http_host" => &mut self.host[1],
            "vhost" => &mut self.host[2],
            "server_name" => &mut self.host[3],
            "remote_addr" => &mut self.remote_addr,
            "x_forwarded_for" => &mut self.x_forwarded_for,
            _ => {
                if let Some(name) = key.strip_prefix("http_").filter(|n| !n.is_empty()) {
                    if let Some(value) = map.next_value::<Val>()?.into_text() {
                        self.headers.push((header_name(name), value.into_owned()));
                    }
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
                return Ok(());
            }
        };
        *slot = map.next_value()?;
        Ok(())
    }
}

/// `user_agent` is `user-agent`; ingress-nginx's example logs the referer as `http_referrer`.
fn header_name(name: &str) -> String {
    if name.eq_ignore_ascii_case("referrer") {
        return "referer".to_owned();
    }
    name.bytes()
        .map(|b| match b {
            b'_' => '-',
            b => char::from(b.to_ascii_lowercase()),
        })
        .collect()
}

fn time_of(v: &Val) -> Option<Result<u64, String>> {
    match v {
        Val::Num(f) => Some(time::unix_seconds_f64(*f).ok_or_else(|| format!("bad time {f}"))),
        Val::Str(_) => v
            .text()
            .map(|s| time::any(s).ok_or_else(|| format!("bad time {}", show(s)))),
        Val::Other => None,
    }
}

pub(super) fn json(line: &[u8]) -> Result<Parsed, String> {
    let l: Line = json::object(line)?;
    let time = std::iter::once(&l.msec)
        .chain(&l.iso)
        .chain(std::iter::once(&l.time_local))
        .find_map(time_of)
        .ok_or("no time (msec, time_iso8601, time, timestamp or time_local)")??;
    // `$request` is read only when needed: a scanner's garbage there spoils nothing else.
    let request = || l.request.text().map(request_line).transpose();
    let method = match l.request_method.text().or(l.method.text()) {
        Some(m) => method(m)?,
        None => match request()? {
            Some((m, _)) => method(m)?,
            None => return Err("no request_method".to_owned()),
        },
    };
    let mut host = l.host.iter().find_map(Val::text).map(str::to_owned);
    let joined;
    let t = if let Some(uri) = l.request_uri.text() {
        uri
    } else if let Some((path, query)) = (l.uri.text().map(|u| (u, &l.args)))
        .or_else(|| l.path.text().map(|p| (p, &l.request_query)))
    {
        match query.text() {
            Some(q) => {
                joined = format!("{path}?{q}");
                &joined
            }
            None => path,
        }
    } else if let Some((_, t)) = request()? {
        t
    } else {
        return Err("no request_uri, uri, path or request".to_owned());
    };
    let target = target(t, &mut host)?;
    let client = match l.remote_addr.text() {
        Some(addr) => client_ip(addr)?,
        None => l
            .x_forwarded_for
            .text()
            .and_then(|x| x.split(',').next())
            .and_then(|a| a.trim().parse().ok())
            .map(Client::Ip),
    };
    Ok(Parsed::Record(Record {
        time,
        method,
        host,
        target,
        client,
        headers: l.headers,
    }))
}
