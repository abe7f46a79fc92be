//! A route's `mirror` (docs/edge.md): a copy of each request the route passes upstream,
//! sent on its own task, its answer read and dropped.
//!
//! The copy is the request as the upstream is sent it: after the route's header rules, with
//! what the gateway owns (X-Forwarded-*, X-Request-Id) and without what it removed (an API
//! key, a client's forged certificate fields). The client's answer never waits for it.
//!
//! Bounded, so a flood or a slow mirror cannot grow the process: at most [`MAX_IN_FLIGHT`]
//! copies at a time and [`MAX_BODY_BYTES`] of their bodies held in all; a copy past either
//! is not sent (`tollgate_mirror_requests_total{result="dropped"}`).

use bytes::BytesMut;
use http::{HeaderValue, Method, Uri};
use http_body_util::Full;
use prometheus::IntCounterVec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tollgate_config::model::{MirrorConfig, MirrorPart};

/// Copies on their way at once, in all.
pub const MAX_IN_FLIGHT: usize = 1024;
/// Request bodies held for copies (being read or on their way), in all.
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// What is read of a mirror's answer before it is dropped.
const ANSWER_READ: usize = 64 << 10;

/// Fields a copy never carries from the upstream request: the connection's own (the copy's
/// client writes its framing) and the Host (the mirror's).
const NOT_COPIED: &[http::HeaderName] = &[
    http::header::CONNECTION,
    http::header::TE,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::CONTENT_LENGTH,
    http::header::HOST,
    http::header::PROXY_AUTHORIZATION,
];

/// A route's mirror, compiled.
#[derive(Debug)]
pub struct MirrorRt {
    url: Vec<MirrorPart>,
    /// The URL's authority: every URL made must keep it.
    authority: String,
    /// The copy's Host; `None`: the request's, as the upstream is sent it.
    host: Option<HeaderValue>,
    pub body: bool,
    timeout: Duration,
    /// The upstream (by index) whose targets take the copies in turn; the URL's authority
    /// is then the target's.
    pub upstream: Option<usize>,
}

/// What the URL's variables are filled from.
pub struct Request<'a> {
    /// The path and query as the client sent them.
    pub request_uri: &'a str,
    /// The path the gateway routed by.
    pub uri: &'a str,
    pub host: &'a str,
    pub secure: bool,
}

impl MirrorRt {
    pub fn build(cfg: &MirrorConfig) -> Option<Box<MirrorRt>> {
        let Some(MirrorPart::Text(head)) = cfg.url.first() else {
            return None;
        };
        let authority = head.parse::<Uri>().ok()?.authority()?.to_string();
        Some(Box::new(MirrorRt {
            authority,
            url: cfg.url.clone(),
            host: match cfg.host.as_str() {
                "" if cfg.upstream.is_some() => None,
                h => Some(HeaderValue::from_str(h).ok()?),
            },
            body: cfg.body,
            timeout: cfg.timeout,
            upstream: cfg.upstream,
        }))
    }

    /// The URL for one request, to target `to` when the mirror is an upstream's; `None` when
    /// its values make no URL (the copy is dropped).
    pub fn url(&self, r: &Request, to: Option<std::net::SocketAddr>) -> Option<Uri> {
        let query = r.request_uri.split_once('?').map(|(_, q)| q);
        let mut out = String::with_capacity(64 + r.request_uri.len());
        let authority = match (self.upstream, to) {
            (Some(_), Some(addr)) => addr.to_string(),
            (Some(_), None) => return None,
            (None, _) => self.authority.clone(),
        };
        for (i, p) in self.url.iter().enumerate() {
            match p {
                MirrorPart::Text(_) if i == 0 && self.upstream.is_some() => {
                    out.push_str("http://");
                    out.push_str(&authority);
                }
                MirrorPart::Text(t) => out.push_str(t),
                MirrorPart::RequestUri => out.push_str(r.request_uri),
                MirrorPart::Uri => out.push_str(r.uri),
                MirrorPart::Args => out.push_str(query.unwrap_or("")),
                MirrorPart::IsArgs => {
                    if query.is_some() {
                        out.push('?')
                    }
                }
                MirrorPart::Host => out.push_str(r.host),
                MirrorPart::Scheme => out.push_str(if r.secure { "https" } else { "http" }),
            }
        }
        let uri: Uri = out.parse().ok()?;
        // The authority is the config's alone: a request's values only ever follow it.
        (uri.authority()?.as_str() == authority).then_some(uri)
    }
}

/// The process's mirrors: their client (made at the first copy) and bounds.
pub struct Mirrors {
    client: Arc<crate::net::client::Side>,
    in_flight: Arc<AtomicUsize>,
    bytes: Arc<AtomicUsize>,
    total: IntCounterVec,
}

/// One copy being made: its head now, its body as it arrives. Holds its place in the bounds
/// until sent or dropped.
pub struct Copy {
    req: http::Request<()>,
    body: BytesMut,
    timeout: Duration,
    route: Arc<str>,
    held: Held,
}

/// A copy's place in the bounds, given back on drop.
struct Held {
    in_flight: Arc<AtomicUsize>,
    bytes: Arc<AtomicUsize>,
    body: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(self.body, Ordering::AcqRel);
    }
}

impl Mirrors {
    /// `total` is `tollgate_mirror_requests_total{route,result}`; `client` the process's
    /// side client.
    pub fn new(total: IntCounterVec, client: Arc<crate::net::client::Side>) -> Self {
        Self {
            client,
            in_flight: Arc::default(),
            bytes: Arc::default(),
            total,
        }
    }

    fn count(&self, route: &str, result: &str) {
        self.total.with_label_values(&[route, result]).inc();
    }

    /// A copy of `upstream` (the request as the upstream is sent it) for `rt`'s URL, or
    /// `None` when the bounds are full or the request's values make no URL (counted).
    pub fn start(
        &self,
        rt: &MirrorRt,
        route: &Arc<str>,
        method: &Method,
        upstream: &http::HeaderMap,
        r: &Request,
        to: Option<std::net::SocketAddr>,
    ) -> Option<Copy> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.count(route, "dropped");
            return None;
        }
        let held = Held {
            in_flight: self.in_flight.clone(),
            bytes: self.bytes.clone(),
            body: 0,
        };
        let Some(uri) = rt.url(r, to) else {
            self.count(route, "dropped");
            return None;
        };
        let mut req = http::Request::new(());
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        for (name, value) in upstream {
            if !NOT_COPIED.contains(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let host = match &rt.host {
            Some(h) => Some(h.clone()),
            None => upstream
                .get(http::header::HOST)
                .cloned()
                .or_else(|| HeaderValue::from_str(r.host).ok()),
        };
        if let Some(h) = host {
            headers.insert(http::header::HOST, h);
        }
        Some(Copy {
            req,
            body: BytesMut::new(),
            timeout: rt.timeout,
            route: route.clone(),
            held,
        })
    }

    /// Adds a piece of the body, within `cap` for this copy (0: none) and the bound in all;
    /// `false` when the copy cannot be held (it is dropped, counted).
    pub fn push(&self, copy: &mut Copy, chunk: &[u8], cap: u64) -> bool {
        let after = copy.body.len() + chunk.len();
        let fits_own = cap == 0 || after as u64 <= cap;
        let prev = self.bytes.fetch_add(chunk.len(), Ordering::AcqRel);
        copy.held.body += chunk.len();
        if !fits_own || prev + chunk.len() > MAX_BODY_BYTES {
            self.count(&copy.route, "dropped");
            return false;
        }
        copy.body.extend_from_slice(chunk);
        true
    }

    /// The body gathered so far dropped: a retry replays the body from its start.
    pub fn restart_body(&self, copy: &mut Copy) {
        self.bytes.fetch_sub(copy.held.body, Ordering::AcqRel);
        copy.held.body = 0;
        copy.body.clear();
    }

    /// Sends `copy` on a task of its own; its result is counted when it ends.
    pub fn send(&self, copy: Copy) {
        let Some(client) = self.client.get().cloned() else {
            self.count(&copy.route, "failed");
            return;
        };
        let total = self.total.clone();
        let Copy {
            req,
            body,
            timeout,
            route,
            held,
        } = copy;
        let (parts, ()) = req.into_parts();
        let req = http::Request::from_parts(parts, Full::new(body.freeze()));
        tokio::spawn(async move {
            let result =
                match crate::net::client::exchange(&client, req, timeout, ANSWER_READ).await {
                    Ok(_) | Err(crate::net::client::Failure::TooLarge) => "answered",
                    Err(e) => {
                        tracing::debug!(route = %route, error = %e, "mirror: no answer");
                        "failed"
                    }
                };
            total.with_label_values(&[&route, result]).inc();
            drop(held);
        });
    }
}

#[cfg(test)]
mod tests;
