//! Tollgate's proxy: the Pingora `ProxyHttp` implementation and everything a request meets.
//!
//! What this crate owns:
//! - [`runtime`]: a complete, immutable serving state built from a validated config (routes,
//!   limiters, upstream pools, metric handles). Reload builds a new one and swaps it; limiter
//!   state and upstream health survive for definitions that did not change.
//! - [`identity`]: who is asking (client IP behind trusted proxies, key sources, key hashing);
//!   [`jwt`]: bearer tokens verified for `jwt:CLAIM` keys.
//! - [`access`]: allow and deny lists (addresses, User-Agents, API keys).
//! - [`policy`]: evaluating a route's limits into one verdict (blocks included).
//! - [`respond`]: problem+json answers and the IETF RateLimit fields.
//! - [`normalize`]: the canonical path and host every later step reads (and the upstream
//!   is sent); [`connections`]: bounds on open connections, in all and per client.
//! - [`service`]: the request phases; [`admin`]: /healthz, /readyz, /metrics;
//!   [`pool`]: an upstream's targets, chosen round robin among the healthy, and the peers
//!   they are reached through; [`health`]: the active health checks that keep them current.
//!
//! Failure modes: a client an access list denies or a ladder blocked (403), a bearer token that does not verify on a route keyed by its claims (401), a
//! request that matches no route (404), an upstream that cannot be reached
//! (502) or does not answer in time (504); each is answered with problem+json and counted.
//! Nothing here panics on input.

pub mod access;
pub mod admin;
pub mod connections;
pub mod health;
pub mod identity;
pub mod jwt;
pub mod logguard;
pub mod metrics;
pub mod normalize;
pub mod policy;
pub mod pool;
pub mod respond;
pub mod routing;
pub mod runtime;
pub mod service;
pub mod slots;
pub mod tls;

pub use runtime::{Runtime, Shared};
pub use service::Gateway;
