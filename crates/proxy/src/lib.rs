//! Tollgate's proxy: the Pingora `ProxyHttp` implementation and everything a request meets.
//!
//! Below this crate: `tollgate-route` (the canonical path and host, the route, its rewrite
//! and canary), `tollgate-core` (answers and RateLimit fields, filters, TLS, the HTTP client,
//! the client's address, connection bounds, metrics and traces), `tollgate-upstream` (targets,
//! peers, the choice among the healthy, retries) and `tollgate-auth` (JWTs and the JWKS,
//! forward auth, basic auth, API keys). Above it: `tollgate-rls` (Envoy's rate limit service)
//! and the gateway binary.
//!
//! What this crate owns, in layers (each imports only from its own or those below; the
//! table is `tests/layers.rs`, the map docs/where-things-are.md):
//! - L1: [`limits`]: a limit's compiled form and the RLS rule tables, keys
//!   ([`limits::identity`]), a route's limits into one verdict ([`limits::policy`], blocks
//!   included), concurrency slots ([`limits::slots`], given back however a request ends).
//! - L2: [`runtime`]: a complete, immutable serving state built from a validated config.
//!   Reload builds a new one and swaps it; limiter state and upstream health survive for
//!   definitions that did not change.
//! - L3: [`ctx`]: one request's state.
//! - L4: [`gateway`] (the `Gateway` and its request phases, one file each), [`answer`]
//!   (every edge answer, written in one place, and the refusals), [`inbound`] (reading the
//!   request: its canonical target, TLS, its body for keys), [`verdicts`] (what a limit
//!   verdict leaves behind), [`stages`] (the request phase's pipeline), [`shared`] (the live
//!   process), [`admin`]
//!   (/healthz, /readyz, /metrics), [`housekeeping`] (the background jobs), [`tools`] (dry
//!   runs, explain, simulate).
//!
//! Failure modes: a body over the route's cap (413), a client an access list denies or a
//! ladder blocked (403), a bearer token
//! that does not verify on a route keyed by its claims (401), a route's auth refusing (401,
//! 403, a sign-in redirect; 500/503 when its auth service fails, never a pass), a request that matches no route
//! (404), an upstream that cannot be reached (502), whose names never resolved (503) or that
//! does not answer in time (504); each is answered with problem+json and counted. Nothing
//! here panics on input.

pub mod admin;
pub mod answer;
pub mod ctx;
pub mod gateway;
pub mod housekeeping;
pub mod inbound;
pub mod limits;
pub mod passthrough;
pub mod runtime;
pub mod shared;
pub mod stages;
pub mod tools;
pub mod verdicts;

pub use gateway::Gateway;
pub use runtime::Runtime;
pub use shared::Shared;
