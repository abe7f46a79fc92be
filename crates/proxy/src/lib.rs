//! Tollgate's proxy: the Pingora `ProxyHttp` implementation and everything a request meets.
//!
//! What this crate owns:
//! - [`runtime`]: a complete, immutable serving state built from a validated config (routes,
//!   limiters, upstream pools, metric handles). Reload builds a new one and swaps it; limiter
//!   state and upstream health survive for definitions that did not change.
//! - [`identity`]: who is asking (client IP behind trusted proxies, key sources, key hashing).
//! - [`auth`]: authentication at the edge (required JWTs and the JWKS, forward auth, basic
//!   auth, API keys) and the bearer-token verifier `jwt:CLAIM` keys use too.
//! - [`access`]: allow and deny lists (addresses, User-Agents, API keys).
//! - [`policy`]: evaluating a route's limits into one verdict (blocks included).
//! - [`respond`]: problem+json answers and the IETF RateLimit fields.
//! - routing (the canonical path and host, the route, its rewrite and canary) is the
//!   `tollgate-route` crate, below this one.
//! - [`shaping`]: what a route does to a request and its answer at the edge: [`headers`]
//!   (header rules), [`cors`], compression and bandwidth; the body cap is the body stage's.
//! - [`slots`]: concurrency limits' slots, given back however a request ends.
//! - [`service`]: the request phases; [`admin`]: /healthz, /readyz, /metrics;
//!   [`metrics`]: the Prometheus registry and its families.
//! - [`upstream`]: an upstream's targets, the peers they are reached through, the choice among
//!   the healthy and retries; [`housekeeping`]: the background jobs (active health checks, Redis
//!   probes, block sync, lease sweeps, slot renewals).
//! - [`rls`]: Envoy's rate limit service (gRPC) on the same limits and policy.
//! - [`tls`]: certificates by SNI, client certificates, upstream TLS.
//! - [`logguard`]: what the libraries underneath may write to the log.
//!
//! Failure modes: a body over the route's cap (413), a client an access list denies or a
//! ladder blocked (403), a bearer token
//! that does not verify on a route keyed by its claims (401), a route's auth refusing (401,
//! 403, a sign-in redirect; 500/503 when its auth service fails, never a pass), a request that matches no route
//! (404), an upstream that cannot be reached (502), whose names never resolved (503) or that
//! does not answer in time (504); each is answered with problem+json and counted. Nothing
//! here panics on input.

pub mod access;
pub mod admin;
pub mod auth;
pub mod client_ip;
pub mod connections;
pub mod cors;
pub mod ctx;
pub mod dryrun;
pub mod edge;
pub mod error;
pub mod explain;
pub mod headers;
pub mod housekeeping;
pub mod identity;
pub mod limits;
pub mod logguard;
pub mod metrics;
pub mod policy;
pub mod respond;
pub mod rls;
pub mod runtime;
pub mod service;
pub mod shaping;
pub mod shared;
pub mod simulate;
pub mod slots;
pub mod stages;
pub mod tls;
pub mod traces;
pub mod upstream;

pub use edge::Gateway;
pub use runtime::Runtime;
pub use shared::Shared;
