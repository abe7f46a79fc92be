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
    host: HeaderValue,
    pub body: bool,
    timeout: Duration,
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
            host: HeaderValue::from_str(&cfg.host).ok()?,
            body: cfg.body,
            timeout: cfg.timeout,
        }))
    }

    /// The URL for one request; `None` when its values make no URL (the copy is dropped).
    pub fn url(&self, r: &Request) -> Option<Uri> {
        let query = r.request_uri.split_once('?').map(|(_, q)| q);
        let mut out = String::with_capacity(64 + r.request_uri.len());
        for p in &self.url {
            match p {
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
        (uri.authority()?.as_str() == self.authority).then_some(uri)
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
        let Some(uri) = rt.url(r) else {
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
        headers.insert(http::header::HOST, rt.host.clone());
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
mod tests {
    use super::*;

    fn rt(url: &str) -> MirrorRt {
        *MirrorRt::build(&MirrorConfig {
            url: tollgate_config::parse_mirror_url(url).expect("url"),
            host: "m".into(),
            body: true,
            timeout: Duration::from_secs(1),
        })
        .expect("built")
    }

    fn req<'a>(request_uri: &'a str) -> Request<'a> {
        Request {
            request_uri,
            uri: request_uri.split('?').next().unwrap_or(""),
            host: "shop.example.com",
            secure: true,
        }
    }

    #[test]
    fn the_url_is_filled_per_request_and_its_host_stays_the_configs() {
        let u = rt("http://m.ns.svc:8080$request_uri")
            .url(&req("/a/b?x=1"))
            .expect("in the test");
        assert_eq!(u.to_string(), "http://m.ns.svc:8080/a/b?x=1");
        let u = rt("http://m").url(&req("/p?q")).expect("in the test");
        assert_eq!(u.to_string(), "http://m/p?q", "no path: the client's");
        let u = rt("http://m/copy$is_args$args")
            .url(&req("/p"))
            .expect("in the test");
        assert_eq!(u.to_string(), "http://m/copy");
        let u = rt("http://m/copy$is_args$args")
            .url(&req("/p?z=2"))
            .expect("in the test");
        assert_eq!(u.to_string(), "http://m/copy?z=2");
        let u = rt("http://m/$scheme/$host$uri")
            .url(&req("/p?z"))
            .expect("in the test");
        assert_eq!(u.to_string(), "http://m/https/shop.example.com/p");
        // A request URI cannot move the authority (origin-form always starts with "/",
        // but "*" and the like must not make another host either).
        for odd in ["@evil.com/x", ".evil.com/x", ":81/x", "*"] {
            assert!(rt("http://m$request_uri").url(&req(odd)).is_none(), "{odd}");
        }
    }

    fn mirrors() -> Mirrors {
        Mirrors::new(
            IntCounterVec::new(prometheus::Opts::new("m", "m"), &["route", "result"])
                .expect("in the test"),
            Arc::default(),
        )
    }

    #[test]
    fn copies_are_bounded_and_give_their_place_back() {
        let m = mirrors();
        let r = rt("http://m");
        let route: Arc<str> = "r".into();
        let mut h = http::HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("id"));
        h.insert("connection", HeaderValue::from_static("keep-alive"));
        h.insert("host", HeaderValue::from_static("shop"));
        let mut held = Vec::new();
        for _ in 0..MAX_IN_FLIGHT {
            held.push(
                m.start(&r, &route, &Method::POST, &h, &req("/"))
                    .expect("a place"),
            );
        }
        assert!(m.start(&r, &route, &Method::POST, &h, &req("/")).is_none());
        assert_eq!(m.total.with_label_values(&["r", "dropped"]).get(), 1);
        let c = &held[0];
        assert_eq!(c.req.headers().get("host").expect("in the test"), "m");
        assert!(c.req.headers().get("connection").is_none());
        assert_eq!(
            c.req.headers().get("x-request-id").expect("in the test"),
            "id"
        );
        let mut c = held.pop().expect("in the test");
        assert!(m.push(&mut c, &[0; 100], 150));
        assert!(!m.push(&mut c, &[0; 100], 150), "over the route's cap");
        assert_eq!(m.bytes.load(Ordering::Acquire), 200);
        drop(c);
        drop(held);
        assert_eq!(m.in_flight.load(Ordering::Acquire), 0);
        assert_eq!(m.bytes.load(Ordering::Acquire), 0);
        let mut big = m
            .start(&r, &route, &Method::PUT, &h, &req("/"))
            .expect("in the test");
        assert!(m.push(&mut big, &vec![0; MAX_BODY_BYTES], 0));
        let mut other = m
            .start(&r, &route, &Method::PUT, &h, &req("/"))
            .expect("in the test");
        assert!(!m.push(&mut other, &[0; 1], 0), "the bound in all");
    }
}
