//! Header rules (`request_headers` / `response_headers`, docs/edge.md), compiled: the
//! server's rules then the route's, names parsed once, constant values made once. Applied
//! before the gateway writes its own fields, so a rule can never forge one (the config
//! refuses them at load as well).

use crate::respond::Head;
use http::{HeaderName, HeaderValue};
use pingora::http::{RequestHeader, ResponseHeader, StaticHeaderName};
use std::net::IpAddr;
use tollgate_config::model::{HeaderPart, HeaderRules, HeaderTemplate, HeaderVar};

/// A value: made once, or filled per request.
#[derive(Debug)]
enum Val {
    Const(HeaderValue),
    Vars(HeaderTemplate),
}

#[derive(Debug, Default)]
pub struct RulesRt {
    /// Inserted under a name parsed once (no parse, no allocation per request).
    set: Vec<(StaticHeaderName, Val)>,
    add: Vec<(HeaderName, Val)>,
    remove: Vec<HeaderName>,
}

/// What a rule's variables read.
pub struct Vars<'a> {
    /// The client's address (through trusted proxies), worked out only when a value names it.
    pub client_ip: ClientIp<'a>,
    pub request_id: &'a HeaderValue,
    /// The request, for `$host` (its canonical host, made only when a value names it).
    pub req: Option<&'a RequestHeader>,
    pub route: &'a str,
    pub secure: bool,
}

/// The client's address: known, or to be read from the head through trusted proxies.
pub enum ClientIp<'a> {
    Known(IpAddr),
    Through {
        peer: IpAddr,
        req: &'a RequestHeader,
        proxies: &'a [ipnet::IpNet],
    },
}

impl ClientIp<'_> {
    fn get(&self) -> IpAddr {
        match self {
            ClientIp::Known(ip) => *ip,
            ClientIp::Through { peer, req, proxies } => {
                crate::client_ip::client_ip(*peer, req, proxies)
            }
        }
    }
}

impl Vars<'_> {
    /// The host the request was routed by: lower case, without port.
    fn host(&self) -> Option<std::borrow::Cow<'_, str>> {
        request_host(self.req?)
    }
}

/// nginx's `$host`: the request's host (its target's authority, else its Host), canonical
/// (lower case, without its port or a trailing dot).
pub fn request_host(req: &RequestHeader) -> Option<std::borrow::Cow<'_, str>> {
    let raw = match req.uri.authority() {
        Some(a) => a.as_str(),
        None => req.headers.get(http::header::HOST)?.to_str().ok()?,
    };
    tollgate_route::normalize::normalize_host(raw).ok()
}

impl RulesRt {
    /// The server's rules, then the route's (a route's `set` of a name replaces the server's
    /// rule for it); `None` when there are none.
    pub fn build(server: &HeaderRules, route: &HeaderRules) -> Option<Box<RulesRt>> {
        if server.is_empty() && route.is_empty() {
            return None;
        }
        let mut rt = RulesRt::default();
        let mut push = |rules: &HeaderRules| {
            for n in &rules.remove {
                if let Ok(n) = HeaderName::from_bytes(n.as_bytes()) {
                    rt.set.retain(|(k, _)| *k.name() != n);
                    rt.add.retain(|(k, _)| *k != n);
                    rt.remove.push(n);
                }
            }
            for (list, out) in [(&rules.set, 0), (&rules.add, 1)] {
                for (n, tpl) in list {
                    let Ok(name) = HeaderName::from_bytes(n.as_bytes()) else {
                        continue;
                    };
                    let val = match tpl.as_slice() {
                        [HeaderPart::Lit(s)] => match HeaderValue::from_str(s) {
                            Ok(v) => Val::Const(v),
                            Err(_) => continue,
                        },
                        _ => Val::Vars(tpl.clone()),
                    };
                    if out == 0 {
                        rt.set.retain(|(k, _)| *k.name() != name);
                        rt.add.retain(|(k, _)| *k != name);
                        rt.set.push((interned(&name), val));
                    } else {
                        rt.add.push((name, val));
                    }
                }
            }
        };
        push(server);
        push(route);
        Some(Box::new(rt))
    }

    fn value(v: &Val, vars: &Vars) -> Option<HeaderValue> {
        match v {
            Val::Const(c) => Some(c.clone()),
            Val::Vars(parts) => {
                let mut out = String::with_capacity(64);
                for p in parts {
                    match p {
                        HeaderPart::Lit(s) => out.push_str(s),
                        HeaderPart::Var(HeaderVar::ClientIp) => {
                            use std::fmt::Write;
                            let _ = write!(out, "{}", vars.client_ip.get());
                        }
                        HeaderPart::Var(HeaderVar::RequestId) => {
                            out.push_str(vars.request_id.to_str().unwrap_or(""))
                        }
                        HeaderPart::Var(HeaderVar::Host) => {
                            out.push_str(vars.host().as_deref().unwrap_or(""))
                        }
                        HeaderPart::Var(HeaderVar::Route) => out.push_str(vars.route),
                        HeaderPart::Var(HeaderVar::Scheme) => {
                            out.push_str(if vars.secure { "https" } else { "http" })
                        }
                    }
                }
                // What a variable wrote may not be a value (a route name outside ASCII):
                // the field is left out rather than written broken.
                HeaderValue::from_str(&out).ok()
            }
        }
    }

    /// Toward the upstream. A client's underscore spellings of every name a rule sets, adds
    /// or removes go too (present only with `[server] underscores_in_headers = true`).
    pub fn apply_request(&self, req: &mut RequestHeader, vars: &Vars) {
        remove_spellings(req, |k| {
            self.set
                .iter()
                .any(|(n, _)| underscore_spelling(k, n.name().as_str()))
                || self
                    .add
                    .iter()
                    .any(|(n, _)| underscore_spelling(k, n.as_str()))
                || self
                    .remove
                    .iter()
                    .any(|n| underscore_spelling(k, n.as_str()))
        });
        self.apply(req, vars);
    }

    /// Toward the client, on an upstream's response.
    pub fn apply_response(&self, resp: &mut ResponseHeader, vars: &Vars) {
        self.apply(resp, vars);
    }

    fn apply(&self, head: &mut impl HeaderMapMut, vars: &Vars) {
        for n in &self.remove {
            head.remove(n);
        }
        for (n, v) in &self.set {
            if let Some(v) = Self::value(v, vars) {
                head.insert(n, v);
            }
        }
        for (n, v) in &self.add {
            if let Some(v) = Self::value(v, vars) {
                head.append(n.clone(), v);
            }
        }
    }

    /// Toward the client, on an answer made at the edge (nothing to remove: the gateway
    /// wrote every field).
    pub fn apply_head(&self, head: &mut Head, vars: &Vars) {
        let set = self.set.iter().map(|(n, v)| (n.name(), v));
        for (n, v) in set.chain(self.add.iter().map(|(n, v)| (n, v))) {
            if let Some(v) = Self::value(v, vars) {
                head.put_named(n, &v);
            }
        }
    }
}

/// Whether header name `candidate` is `name` written with `_` for some of its `-` (both lower
/// case, as header maps hold names): CGI, WSGI, Rack and PHP read the two as one header
/// (`HTTP_X_REAL_IP`), so a client's `X_Real_IP` can shadow the gateway's `X-Real-IP`.
pub fn underscore_spelling(candidate: &str, name: &str) -> bool {
    candidate.len() == name.len()
        && candidate != name
        && candidate
            .bytes()
            .zip(name.bytes())
            .all(|(c, n)| c == n || (c == b'_' && n == b'-'))
}

/// Removes the request's headers whose names `doomed` picks among those holding `_`. Costs one
/// look at each name when none holds `_` (always so under the default
/// `underscores_in_headers = false`, which dropped them on arrival).
pub fn remove_spellings(req: &mut RequestHeader, doomed: impl Fn(&str) -> bool) {
    if !req.headers.keys().any(|k| has_underscore(k.as_str())) {
        return;
    }
    let names: Vec<HeaderName> = req
        .headers
        .keys()
        .filter(|k| has_underscore(k.as_str()) && doomed(k.as_str()))
        .cloned()
        .collect();
    for k in names {
        req.remove_header(&k);
    }
}

/// Whether a header name holds `_`, eight bytes at a time (every request's names are looked
/// at: a call to `memchr` per short name cost ~55 instructions, this ~10).
#[inline]
pub fn has_underscore(name: &str) -> bool {
    const UNDERSCORES: u64 = u64::from_ne_bytes([b'_'; 8]);
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // A zero byte of `w ^ UNDERSCORES` is a `_` (the classic has-zero-byte test).
    let zero_byte = |w: u64| {
        let x = w ^ UNDERSCORES;
        x.wrapping_sub(LOW) & !x & HIGH != 0
    };
    let bytes = name.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        if zero_byte(u64::from_ne_bytes(w)) {
            return true;
        }
    }
    let rest = chunks.remainder();
    let mut w = [0u8; 8];
    w[..rest.len()].copy_from_slice(rest);
    zero_byte(u64::from_ne_bytes(w))
}

/// `[server] underscores_in_headers = false` (nginx's default): every request header whose
/// name holds `_` removed on arrival, before routing, keys, auth or the upstream read the head.
/// How many were removed (for `tollgate_request_headers_dropped_total`).
pub fn drop_underscored(req: &mut RequestHeader) -> usize {
    if !req.headers.keys().any(|k| has_underscore(k.as_str())) {
        return 0;
    }
    let names: Vec<HeaderName> = req
        .headers
        .keys()
        .filter(|k| has_underscore(k.as_str()))
        .cloned()
        .collect();
    let mut n = 0;
    for k in names {
        n += req.headers.get_all(&k).iter().count();
        req.remove_header(&k);
    }
    n
}

/// The rule's name as a [`StaticHeaderName`]: each distinct name is leaked once per process
/// (a config names a few; reloads reuse them), so inserting it costs no parse or allocation.
fn interned(name: &HeaderName) -> StaticHeaderName {
    static NAMES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let s: &'static str = match names.get(name.as_str()) {
        Some(s) => s,
        None => {
            let leaked: &'static str = Box::leak(name.as_str().to_string().into_boxed_str());
            names.insert(leaked);
            leaked
        }
    };
    // A parsed HeaderName is lower case and valid: `new` cannot panic on it.
    StaticHeaderName::new(s)
}

/// A request or response head a rule writes to.
trait HeaderMapMut {
    fn remove(&mut self, n: &HeaderName);
    fn insert(&mut self, n: &StaticHeaderName, v: HeaderValue);
    fn append(&mut self, n: HeaderName, v: HeaderValue);
}

impl HeaderMapMut for RequestHeader {
    fn remove(&mut self, n: &HeaderName) {
        self.remove_header(n);
    }
    fn insert(&mut self, n: &StaticHeaderName, v: HeaderValue) {
        self.insert_static_header(n, v);
    }
    fn append(&mut self, n: HeaderName, v: HeaderValue) {
        let _ = self.append_header(n, v);
    }
}

impl HeaderMapMut for ResponseHeader {
    fn remove(&mut self, n: &HeaderName) {
        self.remove_header(n);
    }
    fn insert(&mut self, n: &StaticHeaderName, v: HeaderValue) {
        self.insert_static_header(n, v);
    }
    fn append(&mut self, n: HeaderName, v: HeaderValue) {
        let _ = self.append_header(n, v);
    }
}

#[cfg(test)]
mod tests;
