//! OpenTelemetry traces (`[tracing]`, docs/tracing.md).
//!
//! Each request on a gateway with `[tracing]` gets a trace context at the start of the request
//! phase (`tollgate_proxy::stages::trace`): the client's W3C `traceparent` / `tracestate` when its
//! sender is trusted (`trust_context`), else a new trace; sampled by the parent's flag, or by
//! the trace id against `sample`. The upstream is sent the context (its parent: the gateway's
//! upstream span). Timings are taken as `Instant`s where the request crosses a stage (auth,
//! the Redis decision, the upstream call); the spans themselves are built only at the end of
//! a request that is sampled (or refused, with `sample_refusals`): one server span and a child
//! per crossing, in OTLP's protobuf types (opentelemetry-proto).
//!
//! Spans wait in a bounded queue ([`SpanQueue`], `max_queue` spans) that the housekeeping job
//! `traces` drains every [`EXPORT_EVERY`] (sooner when a batch is full) into OTLP/HTTP
//! exports of at most [`BATCH`] spans, over hyper's client, each within `timeout`. A full
//! queue drops the new spans, a failed export its batch, both counted in
//! `tollgate_trace_spans_dropped_total`:
//! a collector that is down or slow costs at most the queue's memory and never a request's
//! time (a request only ever pushes under a short lock).

use crate::observe::metrics::Metrics;
use crate::respond::names;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use pingora::http::RequestHeader;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate_config::model::{ClientAddress, TracingConfig, TrustContext};

/// The most spans one export carries.
pub const BATCH: usize = 512;
/// How often the queue is drained when no batch is full: the OpenTelemetry SDKs' batch span
/// processor's default delay (`OTEL_BSP_SCHEDULE_DELAY`, 5 s). An export is one HTTP request
/// whatever its size, so a shorter period costs a quiet gateway more per span.
pub const EXPORT_EVERY: Duration = Duration::from_secs(5);
/// The longest `tracestate` passed on (W3C: at least 512 bytes must be kept).
const MAX_TRACESTATE: usize = 512;

type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<crate::net::client::Placed>,
    http_body_util::Full<Bytes>,
>;

/// `[tracing]`, compiled.
pub struct TraceRt {
    pub cfg: TracingConfig,
    /// A trace id whose low 64 bits are below this is sampled (`sample` x 2^64).
    threshold: u64,
    all: bool,
    endpoint: http::Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    client: Client,
    resource: Resource,
}

impl TraceRt {
    pub fn build(cfg: &TracingConfig) -> Result<Self, String> {
        let endpoint: http::Uri = cfg
            .endpoint
            .parse()
            .map_err(|e| format!("tracing.otlp: {e}"))?;
        let mut headers = Vec::new();
        for (n, v) in &cfg.headers {
            let n = HeaderName::from_bytes(n.as_bytes())
                .map_err(|e| format!("tracing.headers: {e}"))?;
            let v = HeaderValue::from_str(v).map_err(|e| format!("tracing.headers: {e}"))?;
            headers.push((n, v));
        }
        let client = crate::net::client::build_for(None, false)?;
        let resource = Resource {
            attributes: vec![
                kv("service.name", &cfg.service_name),
                kv("service.version", env!("CARGO_PKG_VERSION")),
                kv("telemetry.sdk.name", "tollgate"),
            ],
            dropped_attributes_count: 0,
        };
        Ok(Self {
            cfg: cfg.clone(),
            threshold: (cfg.sample * 2f64.powi(64)) as u64,
            all: cfg.sample >= 1.0,
            endpoint,
            headers,
            client,
            resource,
        })
    }

    /// Whether a new trace with this id is sampled.
    fn samples(&self, trace_id: u128) -> bool {
        self.all || (trace_id as u64) < self.threshold
    }
}

/// One request's trace: its ids, and when it crossed each traced part.
#[derive(Debug)]
pub struct TraceCtx {
    pub trace_id: u128,
    /// The client's span (its `traceparent`), when trusted.
    pub parent: Option<u64>,
    /// The gateway's server span.
    pub span: u64,
    /// The upstream call's span: the upstream's parent.
    pub upstream_span: u64,
    /// Sampled: by the parent's flag, else by `sample`.
    pub sampled: bool,
    pub tracestate: Option<HeaderValue>,
    /// The client sent `tracestate` (removed upstream unless taken).
    pub client_tracestate: bool,
    /// The request's start (spans are placed from it in Unix time when they are built).
    pub start: Instant,
    pub auth: Option<(Instant, Instant)>,
    pub redis: Option<(Instant, Instant)>,
    pub upstream: Option<Instant>,
}

/// A W3C `traceparent`: (trace id, parent span id, sampled). `None` for anything the
/// Recommendation says to ignore: another length, upper-case or non-hex digits, version `ff`,
/// an all-zero id, a version 00 header with more after it.
pub fn parse_traceparent(v: &[u8]) -> Option<(u128, u64, bool)> {
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let hex = |b: &[u8]| -> Option<u128> {
        let mut n = 0u128;
        for &c in b {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            n = (n << 4) | d as u128;
        }
        Some(n)
    };
    let version = hex(&v[0..2])?;
    if version == 0xff || (version == 0 && v.len() != 55) || (v.len() > 55 && v[55] != b'-') {
        return None;
    }
    let trace = hex(&v[3..35])?;
    let parent = hex(&v[36..52])? as u64;
    let flags = hex(&v[53..55])?;
    if trace == 0 || parent == 0 {
        return None;
    }
    Some((trace, parent, flags & 1 == 1))
}

/// Each byte's two lower-case hex digits.
const HEX2: [[u8; 2]; 256] = {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [D[i >> 4], D[i & 0xf]];
        i += 1;
    }
    t
};

/// `n`'s low `out.len() * 4` bits as lower-case hex, most significant first, a byte (two
/// digits) at a time.
fn hex_into(out: &mut [u8], n: u128) {
    let bytes = n.to_be_bytes();
    let skip = 16 - out.len() / 2;
    for (pair, &b) in out.chunks_exact_mut(2).zip(&bytes[skip..]) {
        pair.copy_from_slice(&HEX2[b as usize]);
    }
}

/// A span id from random bits: splitmix64's finaliser, never 0.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

fn nonzero_u64() -> u64 {
    loop {
        let n = fastrand::u64(..);
        if n != 0 {
            return n;
        }
    }
}

/// The request's trace context: the client's when `trusted` (and given once), else new.
pub fn begin(t: &TraceRt, req: &RequestHeader, trusted: bool, start: Instant) -> Box<TraceCtx> {
    // Which trace fields the head has, in one walk over its few names: the common request,
    // with none, costs no hashed lookup. Names compare as parsed names (a standard name is
    // told from these custom ones by its kind alone, with no spelling looked at).
    let (parent, state) = (names::TRACEPARENT, names::TRACESTATE);
    let (parent_name, state_name) = (parent.name(), state.name());
    let (mut has_parent, mut has_state) = (false, false);
    for name in req.headers.keys() {
        has_parent |= name == parent_name;
        has_state |= name == state_name;
    }
    let taken = matches!(
        (t.cfg.trust, trusted),
        (TrustContext::All, _) | (TrustContext::TrustedProxies, true)
    );
    let given = (taken && has_parent)
        .then(|| {
            let mut all = req.headers.get_all(parent_name).iter();
            match (all.next(), all.next()) {
                (Some(v), None) => parse_traceparent(v.as_bytes()),
                _ => None,
            }
        })
        .flatten();
    // Several tracestate fields are one list (W3C), passed on joined; over the length the
    // gateway keeps, or not visible ASCII, it is dropped.
    let tracestate = given.filter(|_| has_state).and_then(|_| {
        let mut all = req.headers.get_all(state_name).iter();
        let first = all.next()?;
        let mut joined = first.as_bytes().to_vec();
        for v in all {
            joined.extend_from_slice(b",");
            joined.extend_from_slice(v.as_bytes());
        }
        let visible = joined.iter().all(|&b| (0x20..0x7f).contains(&b));
        (visible && joined.len() <= MAX_TRACESTATE)
            .then(|| HeaderValue::from_bytes(&joined).ok())
            .flatten()
    });
    // One draw: a new trace's id, and (mixed) the gateway's two span ids.
    let r = fastrand::u128(..);
    let (trace_id, parent, sampled) = match given {
        Some((trace, parent, sampled)) => (trace, Some(parent), sampled),
        None => {
            let id = r.max(1);
            (id, None, t.samples(id))
        }
    };
    let (span, upstream_span) = (mix(r as u64), mix((r >> 64) as u64 ^ 0x9e37_79b9_7f4a_7c15));
    Box::new(TraceCtx {
        trace_id,
        parent,
        span,
        upstream_span,
        sampled,
        tracestate,
        client_tracestate: has_state,
        start,
        auth: None,
        redis: None,
        upstream: None,
    })
}

impl TraceCtx {
    /// `traceparent` for the upstream: this trace, the upstream span as its parent.
    #[allow(unsafe_code)]
    pub fn upstream_traceparent(&self) -> HeaderValue {
        let mut b = *b"00-00000000000000000000000000000000-0000000000000000-00";
        hex_into(&mut b[3..35], self.trace_id);
        hex_into(&mut b[36..52], self.upstream_span as u128);
        b[54] = b'0' + self.sampled as u8;
        // SAFETY: the value is lower-case hex digits and dashes only (the template, HEX2's
        // digits and '0'/'1'), all visible ASCII as a header value must be; `http` checks it
        // again in debug builds. Validating it byte by byte cost ~120 instructions (callgrind)
        // on every request of a gateway with `[tracing]`.
        unsafe { HeaderValue::from_maybe_shared_unchecked(Bytes::copy_from_slice(&b)) }
    }

    /// The trace id as logs show it.
    pub fn id_hex(&self) -> String {
        let mut b = [0u8; 32];
        hex_into(&mut b, self.trace_id);
        String::from_utf8_lossy(&b).into_owned()
    }

    /// The spans this request makes: its server span and one per part it crossed.
    pub fn span_count(&self) -> usize {
        1 + self.auth.is_some() as usize
            + self.redis.is_some() as usize
            + self.upstream.is_some() as usize
    }
}

/// What the end of a request tells its spans.
pub struct Finished<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub host: Option<&'a str>,
    pub route: &'a str,
    pub status: u16,
    pub decision: &'a str,
    pub limit: &'a str,
    pub client: Option<String>,
    pub request_id: &'a str,
    pub upstream: Option<&'a str>,
    pub tries: u32,
    pub error: Option<String>,
    pub end: Instant,
}

/// The server span's attributes (OpenTelemetry's HTTP semantic conventions, and Tollgate's
/// route, decision, limit and request id).
fn server_attributes(f: &Finished) -> Vec<KeyValue> {
    let mut attrs = vec![
        kv("http.request.method", f.method),
        kv("url.path", f.path),
        kv_int("http.response.status_code", f.status as i64),
        kv("tollgate.route", f.route),
        kv("tollgate.decision", f.decision),
        kv("tollgate.request_id", f.request_id),
    ];
    if let Some(h) = f.host {
        attrs.push(kv("server.address", h));
    }
    if !f.limit.is_empty() {
        attrs.push(kv("tollgate.limit", f.limit));
    }
    if let Some(c) = &f.client {
        attrs.push(kv("client.address", c));
    }
    if let Some(e) = &f.error {
        attrs.push(kv("error.type", e));
    }
    attrs
}

/// The request's spans: the server span, and a child for each part it crossed.
pub fn spans(t: &TraceCtx, f: &Finished) -> Vec<Span> {
    // Unix time is read once, here (never on a request that is not traced), and the
    // request's instants placed from it.
    let unix_end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let at =
        |i: Instant| unix_end.saturating_sub(f.end.saturating_duration_since(i).as_nanos() as u64);
    let start_unix = at(t.start);
    let trace_id = t.trace_id.to_be_bytes().to_vec();
    let flags = 0x100 | (t.parent.is_some() as u32) << 9 | 1;
    let attrs = server_attributes(f);
    let failed = f.status >= 500 || f.error.is_some();
    let server = Span {
        trace_id: trace_id.clone(),
        span_id: t.span.to_be_bytes().to_vec(),
        trace_state: t
            .tracestate
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        parent_span_id: t
            .parent
            .map(|p| p.to_be_bytes().to_vec())
            .unwrap_or_default(),
        flags,
        name: if f.route.is_empty() {
            f.method.to_string()
        } else {
            format!("{} {}", f.method, f.route)
        },
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: start_unix,
        end_time_unix_nano: unix_end,
        attributes: attrs,
        status: Some(Status {
            message: String::new(),
            code: if failed {
                status::StatusCode::Error as i32
            } else {
                status::StatusCode::Unset as i32
            },
        }),
        ..Default::default()
    };
    let child =
        |id: u64, name: &str, kind: span::SpanKind, (a, b): (Instant, Instant), attrs| Span {
            trace_id: trace_id.clone(),
            span_id: id.to_be_bytes().to_vec(),
            parent_span_id: t.span.to_be_bytes().to_vec(),
            flags: 0x100 | 1,
            name: name.to_string(),
            kind: kind as i32,
            start_time_unix_nano: at(a),
            end_time_unix_nano: at(b),
            attributes: attrs,
            ..Default::default()
        };
    let mut out = vec![server];
    if let Some(w) = t.auth {
        out.push(child(
            nonzero_u64(),
            "auth",
            span::SpanKind::Internal,
            w,
            vec![],
        ));
    }
    if let Some(w) = t.redis {
        out.push(child(
            nonzero_u64(),
            "rate limit decision",
            span::SpanKind::Client,
            w,
            vec![kv("db.system", "redis")],
        ));
    }
    if let Some(a) = t.upstream {
        let mut attrs = vec![kv_int("tollgate.upstream_tries", f.tries as i64)];
        if let Some(u) = f.upstream {
            attrs.push(kv("tollgate.upstream", u));
        }
        if f.status != 0 {
            attrs.push(kv_int("http.response.status_code", f.status as i64));
        }
        out.push(child(
            t.upstream_span,
            "upstream",
            span::SpanKind::Client,
            (a, f.end),
            attrs,
        ));
    }
    out
}

/// The client address on spans, as `client_address` says.
pub fn client_text(
    how: ClientAddress,
    ip: std::net::IpAddr,
    pseudonym: impl FnOnce() -> u64,
) -> Option<String> {
    match how {
        ClientAddress::Plain => Some(ip.to_string()),
        ClientAddress::Hashed => Some(format!("{:016x}", pseudonym())),
        ClientAddress::None => None,
    }
}

fn kv(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
    }
}

fn kv_int(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
    }
}

/// Spans waiting for export, at most `max_queue`.
pub struct SpanQueue {
    epoch: Instant,
    /// The second (since `epoch`) and the refusals traced in it.
    refusals: parking_lot::Mutex<(u64, u32)>,
    spans: parking_lot::Mutex<Vec<Span>>,
    len: AtomicUsize,
    /// An export is under way (one at a time).
    pub exporting: AtomicBool,
    /// When a failed export was last logged.
    warned: parking_lot::Mutex<Option<Instant>>,
}

/// Refusals traced per second at most (`sample_refusals`): a flood of refused requests, which
/// a client can make at will, costs no more than this in spans.
pub const REFUSALS_PER_SECOND: u32 = 100;

impl Default for SpanQueue {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            refusals: parking_lot::Mutex::new((0, 0)),
            spans: parking_lot::Mutex::new(Vec::new()),
            len: AtomicUsize::new(0),
            exporting: AtomicBool::new(false),
            warned: parking_lot::Mutex::new(None),
        }
    }
}

impl SpanQueue {
    /// Whether `n` more spans fit under `max`; when not, they are counted as dropped
    /// (`queue_full`) and the caller builds nothing.
    pub fn room(&self, n: usize, max: usize, metrics: &Metrics) -> bool {
        if self.len() + n <= max {
            return true;
        }
        metrics
            .trace_dropped
            .with_label_values(&["queue_full"])
            .inc_by(n as u64);
        false
    }

    /// Whether one more refusal may be traced this second ([`REFUSALS_PER_SECOND`]); past it,
    /// its spans are counted as dropped (`refusal_cap`).
    pub fn refusal_allowed(&self, n: usize, metrics: &Metrics) -> bool {
        let sec = self.epoch.elapsed().as_secs();
        let mut w = self.refusals.lock();
        if w.0 != sec {
            *w = (sec, 0);
        }
        if w.1 < REFUSALS_PER_SECOND {
            w.1 += 1;
            return true;
        }
        drop(w);
        metrics
            .trace_dropped
            .with_label_values(&["refusal_cap"])
            .inc_by(n as u64);
        false
    }

    /// Queues a request's spans, or drops and counts them when the queue is full.
    pub fn push(&self, spans: Vec<Span>, max: usize, metrics: &Metrics) {
        let n = spans.len();
        let mut q = self.spans.lock();
        if q.len() + n > max {
            drop(q);
            metrics
                .trace_dropped
                .with_label_values(&["queue_full"])
                .inc_by(n as u64);
            return;
        }
        q.extend(spans);
        self.len.store(q.len(), Ordering::Relaxed);
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take(&self) -> Vec<Span> {
        let mut q = self.spans.lock();
        self.len.store(0, Ordering::Relaxed);
        std::mem::take(&mut *q)
    }
}

/// Exports everything queued, [`BATCH`] spans a request; what the collector does not accept
/// is counted as dropped. Without `[tracing]` (a reload took it away) the queue is emptied.
pub async fn export(
    t: Option<&TraceRt>,
    queue: &SpanQueue,
    metrics: &Metrics,
    deadline: Option<Instant>,
) {
    let spans = queue.take();
    let Some(t) = t else {
        metrics
            .trace_dropped
            .with_label_values(&["export_failed"])
            .inc_by(spans.len() as u64);
        return;
    };
    let scope = InstrumentationScope {
        name: "tollgate".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    // The spans are moved into their batches, never copied: a span is a dozen strings.
    let total = spans.len();
    let mut spans = spans.into_iter();
    for i in 0.. {
        let batch: Vec<Span> = spans.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        let n = batch.len() as u64;
        let timeout = match deadline {
            None => t.cfg.timeout,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(t.cfg.timeout),
                // Out of time (at shutdown): the rest is dropped, and counted.
                _ => {
                    let rest = total - i * BATCH;
                    metrics
                        .trace_dropped
                        .with_label_values(&["export_failed"])
                        .inc_by(rest as u64);
                    return;
                }
            },
        };
        let body = prost::Message::encode_to_vec(&ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(t.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope.clone()),
                    spans: batch,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        });
        let mut req = http::Request::new(http_body_util::Full::new(Bytes::from(body)));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = t.endpoint.clone();
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        for (k, v) in &t.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        match crate::net::client::exchange(&t.client, req, timeout, 64 << 10).await {
            Ok((parts, _)) if parts.status.is_success() => metrics.trace_exported.inc_by(n),
            failed => {
                metrics
                    .trace_dropped
                    .with_label_values(&["export_failed"])
                    .inc_by(n);
                let why = match failed {
                    Ok((parts, _)) => format!("status {}", parts.status),
                    Err(e) => e.to_string(),
                };
                // A line a minute at most: a collector that is down is one line, not a storm.
                let now = Instant::now();
                let mut last = queue.warned.lock();
                if last.is_none_or(|l| now.duration_since(l) >= Duration::from_secs(60)) {
                    *last = Some(now);
                    tracing::warn!(event = "trace_export_failed", endpoint = %t.cfg.endpoint, error = %why, spans = n, "the OTLP collector did not take a batch of spans; they are dropped (tollgate_trace_spans_dropped_total)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_traceparent_is_what_the_parser_reads() {
        for (trace, span, sampled) in [
            (1u128, 1u64, true),
            (u128::MAX, u64::MAX, false),
            (0x4bf92f3577b34da6a3ce929d0e0e4736, 0xf067aa0ba902b7, true),
        ] {
            let t = TraceCtx {
                trace_id: trace,
                parent: None,
                span: 7,
                upstream_span: span,
                sampled,
                tracestate: None,
                client_tracestate: false,
                start: Instant::now(),
                auth: None,
                redis: None,
                upstream: None,
            };
            let v = t.upstream_traceparent();
            assert_eq!(v.len(), 55);
            assert_eq!(
                parse_traceparent(v.as_bytes()),
                Some((trace, span, sampled))
            );
            assert_eq!(t.id_hex(), format!("{trace:032x}"));
        }
    }

    #[test]
    fn traceparent_spellings() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_traceparent(ok.as_bytes()),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, true))
        );
        assert_eq!(
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .map(|t| t.2),
            Some(false)
        );
        // A later version may append fields after a dash.
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(parse_traceparent(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
