//! `[redis]`: where global limits keep their state, and what a limit does when Redis fails.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    pub target: RedisTarget,
    /// Budget of one global decision; past it the limit's `on_error` applies.
    pub timeout: Duration,
    /// The default for global limits that do not say.
    pub on_error: OnError,
    /// Gateways sharing the limits: a `local` fallback takes `rate / instances` each.
    pub instances: u32,
    /// Refusals remembered per global limit (the edge verdict cache).
    pub verdict_cache: usize,
    /// Redis calls this process may have waiting at once (a quarter kept for known keys).
    pub max_in_flight: usize,
    /// Set exactly when the URL(s) are `rediss://`: how the server is verified, and the
    /// client certificate shown for mutual TLS.
    pub tls: Option<RedisTls>,
    /// The password from `password_env` (a password written in the URL stays in the URL).
    pub password: Option<String>,
}

/// TLS to Redis. The server is always verified; nothing here can turn that off.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// `ca`: the PEM CA bundle that verifies the server; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// `client_cert`: a certificate (chain) and its key, as PEM, for mutual TLS.
    pub client_cert: Option<RedisClientCert>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct RedisClientCert {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field(
                "ca",
                &self.ca.as_ref().map(|c| format!("{} bytes", c.len())),
            )
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<set>"))
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Url(String),
    Cluster(Vec<String>),
}

/// What a global limit does when Redis does not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Admit (availability first).
    Open,
    /// Answer 503 (protection first).
    Closed,
    /// Decide on this process's own state at `rate / instances`.
    Local,
    /// The rate limit service fails the call (gRPC `UNAVAILABLE`), so that its caller's own
    /// failure policy decides (Envoy's `failure_mode_deny`); a route answers 503, as `closed`.
    Fail,
}

impl OnError {
    pub fn name(&self) -> &'static str {
        match self {
            OnError::Open => "open",
            OnError::Closed => "closed",
            OnError::Local => "local",
            OnError::Fail => "fail",
        }
    }
}

impl RedisSettings {
    /// The settings the Redis connections are made from, at start.
    #[allow(clippy::type_complexity)]
    pub(super) fn restart_only(
        &self,
    ) -> (
        &RedisTarget,
        Duration,
        &Option<RedisTls>,
        &Option<String>,
        usize,
    ) {
        let RedisSettings {
            target,
            timeout,
            tls,
            password,
            max_in_flight,
            // Read by the runtime, rebuilt on reload.
            on_error: _,
            instances: _,
            verdict_cache: _,
        } = self;
        (target, *timeout, tls, password, *max_in_flight)
    }
}
