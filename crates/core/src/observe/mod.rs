//! What the gateway shows of itself: the Prometheus registry and its families ([`metrics`]),
//! OpenTelemetry traces over OTLP/HTTP ([`traces`]), and what the libraries underneath may
//! write to the log ([`logguard`]).

pub mod logguard;
pub mod metrics;
pub mod traces;
