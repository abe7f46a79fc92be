//! `[tracing]`: OpenTelemetry traces over OTLP/HTTP.

use std::time::Duration;

/// `[tracing]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// The collector's traces endpoint: `otlp` as written, with `/v1/traces` added when it
    /// names no path.
    pub endpoint: String,
    /// The share of requests traced (0.0 to 1.0), decided on the trace id; a client's
    /// `traceparent` (when trusted) decides for its trace.
    pub sample: f64,
    /// Every request the gateway refused (4xx/5xx answered at the edge by a limit, a block,
    /// an access list or auth) is traced, whatever `sample` says.
    pub sample_refusals: bool,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Sent with every export (a collector's API key).
    pub headers: Vec<(String, String)>,
    /// The most one export may take; past it its spans are dropped and counted.
    pub timeout: Duration,
    /// Spans held for export at most; more are dropped and counted, never waited for.
    pub max_queue: usize,
    /// Whose `traceparent` / `tracestate` continue their trace.
    pub trust: TrustContext,
    /// How the client's address is put on spans.
    pub client_address: ClientAddress,
}

/// Whose trace context is taken (`trust_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustContext {
    /// Only from `[server] trusted_proxies` (the default: a client cannot choose which
    /// traces are sampled, nor join someone else's).
    TrustedProxies,
    /// From anyone (a gateway behind another that always traces).
    All,
    /// Never: every request starts its own trace.
    None,
}

/// `client_address`: on spans as the access log keeps it (`hashed`, the default), as it is
/// (`plain`), or not at all (`none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAddress {
    Hashed,
    Plain,
    None,
}

pub const SAMPLE_DEFAULT: f64 = 0.01;

pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

pub const MAX_QUEUE_DEFAULT: usize = 4096;
