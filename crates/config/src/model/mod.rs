//! The model: the validated configuration as the proxy consumes it, one file per table.
//! Pure types; the readers (one per table, beside this folder) build them and depend on them,
//! never the other way.

mod access;
mod auth;
mod edge;
mod jwt;
mod limits;
mod plans;
mod redis;
mod rls;
mod routes;
mod server;
mod tls;
mod tracing;
mod upstreams;

pub use access::*;
pub use auth::*;
pub use edge::*;
pub use jwt::*;
pub use limits::*;
pub use plans::*;
pub use redis::*;
pub use rls::*;
pub use routes::*;
pub use server::*;
pub use tls::*;
pub use tracing::*;
pub use upstreams::*;

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub upstreams: Vec<UpstreamConfig>,
    pub routes: Vec<RouteConfig>,
    pub limits: Vec<LimitConfig>,
    /// `[redis]`: where global limits keep their state. `None`: every limit is local.
    pub redis: Option<RedisSettings>,
    /// `[jwt]`: how bearer tokens are verified for `jwt:CLAIM` key sources.
    pub jwt: Option<JwtSettings>,
    /// `[plans]`: what each caller paid for.
    pub plans: Option<Plans>,
    /// `[access]`: who is refused at once and who skips every limit, for all routes.
    pub access: AccessConfig,
    /// `[tls]`: what the TLS listeners (`server.tls_listen`) serve.
    pub tls: Option<TlsConfig>,
    /// Every authentication routes require: `[auth.NAME]` tables, then routes' inline `auth`
    /// tables (named after their route); routes point here by index.
    pub auth: Vec<AuthConfig>,
    /// Files the config read besides itself (list files, key files): a change to any of them
    /// is a change to the config.
    pub files: Vec<PathBuf>,
    /// `[rls]`: Envoy's rate limit service API on these limits.
    pub rls: Option<RlsConfig>,
    /// `[tracing]`: OpenTelemetry traces over OTLP/HTTP.
    pub tracing: Option<TracingConfig>,
    /// `[[tls_passthrough]]`: hosts whose TLS is relayed unread (docs/tls.md).
    pub tls_passthrough: Vec<Passthrough>,
}

/// The keys a reload cannot change (they are read once, at start or by Pingora's listeners),
/// declared beside the fields: each struct is taken apart field by field with no `..`, so a
/// new field does not compile until it is classed as changing at once or only on restart.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    old.server.restart_only_changes(&new.server, &mut changed);
    let tls = |c: &Config| c.tls.as_ref().map(|t| t.min_version);
    if tls(old) != tls(new) {
        changed.push("tls.min_version");
    }
    if old.rls.as_ref().map(|r| (r.listen, r.tls)) != new.rls.as_ref().map(|r| (r.listen, r.tls)) {
        changed.push("rls.listen, rls.tls");
    }
    if old.redis.as_ref().map(RedisSettings::restart_only)
        != new.redis.as_ref().map(RedisSettings::restart_only)
    {
        changed.push("redis (url, cluster, timeout, ca, client_cert, password_env, max_in_flight)");
    }
    changed
}
