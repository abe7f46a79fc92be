//! Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
//! on Tollgate's limits (docs/rls.md).
//!
//! Each descriptor of a call finds its rule ([`rules::find`]); the rule's limits are decided
//! by the same policy as a route's ([`tollgate_proxy::limits::policy`]: local limits, verdict caches, leases,
//! Redis), keyed by the descriptor's values (`key = "descriptor"`), spending `hits_addend`
//! units. The answer: one status per descriptor (its deciding limit, what remains, when it
//! resets), `overall_code` OVER_LIMIT when any is over, and the IETF RateLimit fields (with
//! `Retry-After` when over) in `response_headers_to_add`, so Envoy's client sees what
//! Tollgate's own proxy would send.
//!
//! Reads: the current runtime (a reload changes rules and limits at once), the clock.
//! Answers: OK for an unknown domain or a descriptor no rule matches (counted);
//! INVALID_ARGUMENT for the calls envoyproxy/ratelimit refuses (an empty domain, no
//! descriptor) and no other (an empty or long value is a value). A global limit Redis cannot
//! decide answers as its `on_error` says (`closed`: OVER_LIMIT; `fail`: the call fails with
//! UNAVAILABLE, and Envoy's `failure_mode_deny` decides).

mod envoy;
use tollgate_proxy::limits::rules;

/// The generated protobuf types and service (build.rs, proto/README.md).
#[allow(clippy::all, clippy::pedantic, missing_docs, unused_qualifications)]
pub mod pb {
    pub mod envoy {
        pub mod config {
            pub mod core {
                pub mod v3 {
                    tonic::include_proto!("envoy.config.core.v3");
                }
            }
        }
        pub mod extensions {
            pub mod common {
                pub mod ratelimit {
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    }
                }
            }
        }
        pub mod service {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.service.ratelimit.v3");
                }
            }
        }
    }
}

use pb::envoy::config::core::v3::HeaderValue as PbHeader;
use pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
pub use pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::sync::Arc;
use std::time::Instant;
use tollgate_core::respond::names;
use tollgate_limit::{ceil_secs, Nanos};
use tollgate_proxy::limits::identity::KeyInput;
use tollgate_proxy::limits::policy::{decide_global, decide_local_units, Verdict};
use tollgate_proxy::runtime::Runtime;
use tollgate_proxy::shared::Shared;
use tonic::{Request, Response, Status};

/// The service: one per process, reading the current runtime on each call.
pub struct Rls {
    shared: Arc<Shared>,
    /// The request head `KeyInput` wants: a descriptor key reads nothing of it.
    empty: pingora::http::RequestHeader,
}

impl Rls {
    pub fn new(shared: Arc<Shared>) -> Self {
        let empty = pingora::http::RequestHeader::build("GET", b"/", None)
            .unwrap_or_else(|_| unreachable!("a constant request head"));
        Self { shared, empty }
    }

    /// The answer to one call on runtime `rt`, or why it is INVALID_ARGUMENT. `domain`: the
    /// call's domain when a rule names it, else `""` (the metrics' label).
    async fn decide(
        &self,
        rt: &Runtime,
        req: &RateLimitRequest,
        domain: &str,
    ) -> Result<RateLimitResponse, Status> {
        check(req).map_err(Status::invalid_argument)?;
        // A domain no rule names, in a config with trees (an imported one), is answered as the
        // service answers one it lacks (dynamic metadata included).
        let by_rules = rt.rls.iter().any(|r| r.domain == req.domain);
        if rt.rls_tree.serves(&req.domain) || (!by_rules && rt.rls_tree.any()) {
            return self.decide_tree(rt, req).await;
        }
        let mut out = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        // The field the client is shown: the refusing limit, else the nearest to exhaustion.
        let mut shown: Option<Shown> = None;
        for d in &req.descriptors {
            let entries = || d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
            let Some(ri) = rules::find(&rt.rls, &req.domain, entries) else {
                self.shared
                    .metrics
                    .rls_descriptors
                    .with_label_values(&[domain, "unknown"])
                    .inc();
                out.statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                });
                continue;
            };
            self.shared
                .metrics
                .rls_descriptors
                .with_label_values(&[domain, "limited"])
                .inc();
            if rt.rls[ri].deny {
                out.overall_code = Code::OverLimit as i32;
                out.statuses.push(DescriptorStatus {
                    code: Code::OverLimit as i32,
                    ..Default::default()
                });
                continue;
            }
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            // The descriptor's own hits_addend (0: a check spending nothing), else the
            // request's, at least 1.
            let cost = d
                .hits_addend
                .unwrap_or_else(|| u64::from(req.hits_addend.max(1)))
                .min(MAX_COST);
            let v = self.verdict(rt, rt.routes.len() + ri, &entries, cost).await;
            let (status, s) = status(rt, ri, &v);
            if status.code == Code::OverLimit as i32 {
                out.overall_code = Code::OverLimit as i32;
            }
            if let Some(s) = s {
                if shown.as_ref().is_none_or(|old| s.before(old)) {
                    shown = Some(s);
                }
            }
            out.statuses.push(status);
        }
        if let Some(s) = shown {
            out.response_headers_to_add = match rt.config.rls.as_ref().map(|r| r.response_headers) {
                Some(tollgate_config::model::RlsHeaders::None) => Vec::new(),
                Some(tollgate_config::model::RlsHeaders::Envoy) => s.envoy_fields(rt),
                _ => s.fields(rt),
            };
        }
        Ok(out)
    }

    /// The verdict of rule `ri`'s limits for one descriptor.
    /// The verdict of limit set `set` (an RLS rule's, a tree node's) for one descriptor.
    async fn verdict(
        &self,
        rt: &Runtime,
        set: usize,
        entries: &[(&str, &str)],
        cost: u64,
    ) -> Verdict {
        let ri = set - rt.routes.len();
        // Plan limits: the caller's plan from `[plans]`, whose `header:NAME` sources read the
        // descriptor's entry NAME (a head is built for it, only then).
        let needs_plan = rt.rls.get(ri).is_some_and(|r| r.needs_plan);
        let with_entries = match (&rt.config.plans, needs_plan) {
            (Some(_), true) => {
                let mut h = self.empty.clone();
                for (k, v) in entries {
                    if let (Ok(n), Ok(v)) = (
                        http::HeaderName::from_bytes(k.as_bytes()),
                        http::HeaderValue::from_str(v),
                    ) {
                        let _ = h.append_header(n, v);
                    }
                }
                Some(h)
            }
            _ => None,
        };
        let input = KeyInput {
            req: with_entries.as_ref().unwrap_or(&self.empty),
            client_cert: None,
            client_ip: std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            path: "",
            query: None,
            route: set as u32,
            claims: None,
            body: None,
            consumer: None,
            descriptor: Some(entries),
        };
        let plan_index = match (&rt.config.plans, &with_entries) {
            (Some(plans), Some(_)) => tollgate_proxy::limits::identity::plan_of(plans, &input),
            _ => 0,
        };
        let clock = &self.shared.clock;
        let mut plan = decide_local_units(
            rt,
            set,
            &self.shared.hasher,
            &input,
            plan_index,
            clock.now(),
            clock.unix_now(),
            cost,
        );
        let v = match plan.settled() {
            Some(v) => v,
            None => decide_global(rt, &mut plan, &**clock).await,
        };
        if v.shadow_exceeded != 0 {
            for (pos, &li) in rt.limits_of(set).iter().enumerate() {
                if v.shadow_exceeded & (1 << pos) != 0 {
                    rt.limits[li].shadowed(&self.shared.metrics).inc();
                }
            }
        }
        v
    }
}

/// A call no Envoy sends is refused whole (envoyproxy/ratelimit's messages where it has one).
fn check(req: &RateLimitRequest) -> Result<(), &'static str> {
    // envoyproxy/ratelimit's two checks, and no other: a call refused whole is a call whose
    // every limit Envoy skips (failure_mode_deny: false), so a long header value, a long path
    // or one descriptor too many must never make one. gRPC's message bound (4 MiB) bounds the
    // rest; keys are hashed, stats keys capped.
    if req.domain.is_empty() {
        return Err("rate limit domain must not be empty");
    }
    if req.descriptors.is_empty() {
        return Err("rate limit descriptor list must not be empty");
    }
    Ok(())
}

/// The most units one descriptor spends: a count past it is past every limit (requests per
/// unit are 32-bit), and the Redis scripts count exactly up to it (2^53 - 1).
pub const MAX_COST: u64 = (1 << 53) - 1;

/// What the client may be shown of one descriptor's decision.
struct Shown {
    limit: usize,
    remaining: u64,
    /// Seconds until the limit resets (or, over it, until a retry can pass).
    reset: u64,
    rule: usize,
    over: bool,
}

impl Shown {
    /// A refusal before an admission, then the lower remaining.
    fn before(&self, other: &Shown) -> bool {
        (self.over, std::cmp::Reverse(self.remaining))
            > (other.over, std::cmp::Reverse(other.remaining))
    }

    /// envoyproxy/ratelimit's three fields (`response_headers = "envoy"`): the deciding
    /// limit's requests per unit (as `current_limit` reports it), what remains, the reset.
    fn envoy_fields(&self, rt: &Runtime) -> Vec<PbHeader> {
        let Some(rls) = rt.config.rls.as_ref() else {
            return Vec::new();
        };
        let h = |key: &str, value: String| PbHeader {
            key: key.to_string(),
            value,
            raw_value: Vec::new(),
        };
        let limit = current_limit(rt, self.limit).requests_per_unit;
        vec![
            h(&rls.header_names[0], limit.to_string()),
            h(&rls.header_names[1], self.remaining.to_string()),
            h(&rls.header_names[2], self.reset.max(1).to_string()),
        ]
    }

    /// `RateLimit-Policy` (the rule's limits), `RateLimit` and, over the limit, `Retry-After`.
    fn fields(&self, rt: &Runtime) -> Vec<PbHeader> {
        let mut out = Vec::with_capacity(3);
        let header = |name: &pingora::http::StaticHeaderName, value: String| PbHeader {
            key: name.name().as_str().to_string(),
            value,
            raw_value: Vec::new(),
        };
        let policy: Vec<String> = rt.rls[self.rule]
            .limits
            .iter()
            .map(|&li| &rt.limits[li])
            .filter(|l| !l.shadow && l.cfg.algorithm.caps().rated)
            .map(|l| {
                let (q, w) = tollgate_core::respond::quota_window(&l.cfg);
                tollgate_core::respond::policy_item(&l.name_sf, q, w)
            })
            .collect();
        if !policy.is_empty() {
            out.push(header(&names::RATELIMIT_POLICY, policy.join(", ")));
        }
        let l = &rt.limits[self.limit];
        out.push(header(
            &names::RATELIMIT,
            format!("{};r={};t={}", l.name_sf, self.remaining, self.reset),
        ));
        if self.over {
            out.push(header(&names::RETRY_AFTER, self.reset.max(1).to_string()));
        }
        out
    }
}

/// One descriptor's status, and what it may show the client.
fn status(rt: &Runtime, rule: usize, v: &Verdict) -> (DescriptorStatus, Option<Shown>) {
    let over = |li: usize, wait: Nanos| {
        let secs = ceil_secs(wait).max(1);
        (
            DescriptorStatus {
                code: Code::OverLimit as i32,
                current_limit: Some(current_limit(rt, li)),
                limit_remaining: 0,
                duration_until_reset: Some(duration(secs)),
            },
            Some(Shown {
                limit: li,
                remaining: 0,
                reset: secs,
                rule,
                over: true,
            }),
        )
    };
    if let Some((li, wait)) = v.blocked.or(v.denied) {
        return over(li, wait);
    }
    if let Some(li) = v.unavailable {
        // on_error = "closed" and Redis cannot decide: refused, as the proxy refuses (503).
        return over(li, 1_000_000_000);
    }
    match v.nearest {
        Some((li, remaining, reset)) => {
            let cfg = &rt.limits[li].cfg;
            let remaining = remaining.min(cfg.burst);
            let secs = tollgate_core::respond::reset_secs(cfg, remaining, reset);
            (
                DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: Some(current_limit(rt, li)),
                    limit_remaining: remaining.min(u64::from(u32::MAX)) as u32,
                    duration_until_reset: Some(duration(secs)),
                },
                Some(Shown {
                    limit: li,
                    remaining,
                    reset: secs,
                    rule,
                    over: false,
                }),
            )
        }
        None => (
            DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            },
            None,
        ),
    }
}

fn duration(secs: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: secs.min(i64::MAX as u64) as i64,
        nanos: 0,
    }
}

/// The limit as Envoy's `RateLimit`: requests per second, minute, hour or day when its period
/// is one of them, else per second (rounded up).
fn current_limit(rt: &Runtime, li: usize) -> RateLimit {
    let cfg = &rt.limits[li].cfg;
    let (count, period) = (cfg.rate.count(), cfg.rate.period().as_secs().max(1));
    let (per, unit) = match period {
        1 => (count, Unit::Second),
        60 => (count, Unit::Minute),
        3600 => (count, Unit::Hour),
        86_400 => (count, Unit::Day),
        p => (count.div_ceil(p), Unit::Second),
    };
    RateLimit {
        name: cfg.name.clone(),
        requests_per_unit: per.min(u64::from(u32::MAX)) as u32,
        unit: unit as i32,
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let start = Instant::now();
        let req = request.into_inner();
        let rt = self.shared.runtime.load_full();
        let known =
            rt.rls.iter().any(|r| r.domain == req.domain) || rt.rls_tree.serves(&req.domain);
        let domain = if known { req.domain.as_str() } else { "" };
        let result = self.decide(&rt, &req, domain).await;
        let code = match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => "over_limit",
            Ok(_) => "ok",
            Err(s) if s.code() == tonic::Code::Unavailable => "unavailable",
            Err(_) => "invalid",
        };
        let m = &self.shared.metrics;
        m.rls_requests.with_label_values(&[domain, code]).inc();
        m.rls_seconds.observe(start.elapsed().as_secs_f64());
        result.map(Response::new)
    }
}

/// Serves the service on `listener` until `shutdown` says so (a Pingora background service).
pub struct RlsServer {
    shared: Arc<Shared>,
    listener: std::sync::Mutex<Option<std::net::TcpListener>>,
    /// Over TLS with `[tls]`'s certificates (`rls.tls`).
    tls: bool,
}

impl RlsServer {
    /// `listener`: bound at start, so an address in use fails the start, not the service.
    pub fn new(shared: Arc<Shared>, listener: std::net::TcpListener, tls: bool) -> Self {
        Self {
            shared,
            listener: std::sync::Mutex::new(Some(listener)),
            tls,
        }
    }
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for RlsServer {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let Some(std_listener) = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let addr = std_listener.local_addr().ok();
        let listener = match std_listener
            .set_nonblocking(true)
            .and_then(|_| tokio::net::TcpListener::from_std(std_listener))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(event = "rls_listen_failed", error = %e, "the rate limit service cannot listen");
                return;
            }
        };
        let tls = match (self.tls, &self.shared.tls) {
            (false, _) => None,
            (true, Some(certs)) => match certs.server_config() {
                Ok(c) => Some(tokio_rustls::TlsAcceptor::from(c)),
                Err(e) => {
                    tracing::error!(event = "rls_listen_failed", error = %e, "the rate limit service cannot serve TLS");
                    return;
                }
            },
            (true, None) => {
                tracing::error!(
                    event = "rls_listen_failed",
                    "rls.tls without [tls] at start"
                );
                return;
            }
        };
        tracing::info!(event = "rls_serving", listen = ?addr, tls = tls.is_some(), "rate limit service (gRPC) serving");
        let serving = &self.shared.rls_serving;
        serving.store(true, std::sync::atomic::Ordering::Relaxed);
        let service = RateLimitServiceServer::new(Rls::new(self.shared.clone()));
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        // Dead peers are found (h2 pings), a call gets 5 s, a connection 256 streams.
        let builder = || {
            tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
                .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
                .max_concurrent_streams(Some(256))
                .timeout(std::time::Duration::from_secs(5))
        };
        let served = match tls {
            None => {
                builder()
                    .add_service(service)
                    .serve_with_incoming_shutdown(plain_connections(listener), stop)
                    .await
            }
            Some(acceptor) => {
                builder()
                    .add_service(service)
                    .serve_with_incoming_shutdown(tls_connections(listener, acceptor), stop)
                    .await
            }
        };
        serving.store(false, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = served {
            tracing::error!(event = "rls_failed", error = %e, "the rate limit service stopped");
        }
    }
}

/// At most this many connections at once (plain or TLS, handshakes included).
const MAX_CONNECTIONS: usize = 4096;

/// The accepted connections of `listener`, as tonic's server takes them, each holding one of
/// `MAX_CONNECTIONS` permits; an accept that fails (out of descriptors, say) is retried
/// shortly rather than in a spin.
fn plain_connections(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<Conn<tokio::net::TcpStream>>> {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    futures_util::stream::unfold((listener, permits), |(l, permits)| async move {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return None;
            };
            match l.accept().await {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    return Some((Ok(Conn(s, permit)), (l, permits)));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
    })
}

/// A TLS handshake gets this long; a client that stalls in it is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The connections of `listener` once their TLS handshake is done. Each handshake runs in a
/// task of its own, so a client that stalls in one never holds up the others; one that fails
/// is dropped (and logged at debug), never handed to the server.
fn tls_connections(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
) -> impl futures_util::Stream<Item = std::io::Result<TlsConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<TlsConn>(64);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let Ok((tcp, peer)) = listener.accept().await else {
                // Out of descriptors, say: try again shortly rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            if tx.is_closed() {
                return;
            }
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Conn(tls, permit)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "rls: TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "rls: TLS handshake timed out"),
                }
            });
        }
    });
    futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|c| (Ok(c), rx)) },
    )
}

/// A connection as tonic's server takes it, holding its permit while it lives (dropped with
/// it: the permit is never read, only held).
pub struct Conn<S>(S, #[allow(dead_code)] tokio::sync::OwnedSemaphorePermit);

/// A TLS connection.
pub type TlsConn = Conn<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>;

impl<S> tonic::transport::server::Connected for Conn<S> {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Conn<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };

    fn call(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors: descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .iter()
                        .map(|(k, v)| Entry {
                            key: k.to_string(),
                            value: v.to_string(),
                        })
                        .collect(),
                    limit: None,
                    hits_addend: None,
                })
                .collect(),
            hits_addend: 0,
        }
    }

    #[test]
    fn calls_no_envoy_sends_are_invalid() {
        assert!(check(&call("edge", &[&[("a", "1")]])).is_ok());
        // Envoy sends an empty descriptor for a skipped action.
        assert!(check(&call("edge", &[&[("a", "1")], &[]])).is_ok());
        // A header sent empty is an empty value: legal, looked up and counted (as
        // envoyproxy/ratelimit does), never a way past a limit.
        assert!(check(&call("edge", &[&[("a", "")]])).is_ok());
        assert!(check(&call("edge", &[&[("", "1")]])).is_ok());
        for bad in [call("", &[&[("a", "1")]]), call("edge", &[])] {
            assert!(check(&bad).is_err());
        }
        // A long value, many descriptors, many entries: answered, never refused whole (a
        // refused call is one whose limits Envoy skips).
        assert!(check(&call("edge", &[&[("a", &"x".repeat(100_000))]])).is_ok());
        let many: Vec<&[(&str, &str)]> = vec![&[("a", "1")]; 500];
        assert!(check(&call("edge", &many)).is_ok());
    }
}
