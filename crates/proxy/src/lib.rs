//! Tollgate's proxy: the Pingora `ProxyHttp` implementation and everything a request meets.
//!
//! What this crate owns, in layers (each imports only from its own or those below; the
//! table is `tests/layers.rs`, the map docs/where-things-are.md):
//! - L0: [`respond`] (problem+json answers and the IETF RateLimit fields), [`filters`]
//!   (access lists, CORS, header rules, compression and bandwidth), [`tls`] (certificates by
//!   SNI, client certificates, upstream TLS), [`net`] (the HTTP client), [`client_ip`],
//!   [`connections`] (connection bounds), [`observe`] (metrics, traces, the log guard),
//!   [`error`]. Routing (the canonical path and host, the route, its rewrite and canary) is the
//!   `tollgate-route` crate, below this one.
//! - L1: [`auth`] (required JWTs and the JWKS, forward auth, basic auth, API keys, and the
//!   bearer-token verifier `jwt:CLAIM` keys use too), [`limits`] (a limit's compiled form,
//!   the RLS rule tables), [`identity`] (keys), [`policy`] (a route's limits into one verdict,
//!   blocks included), [`slots`] (concurrency slots, given back however a request ends),
//!   [`upstream`] (targets, peers, the choice among the healthy, retries).
//! - L2: [`runtime`]: a complete, immutable serving state built from a validated config.
//!   Reload builds a new one and swaps it; limiter state and upstream health survive for
//!   definitions that did not change.
//! - L3: [`ctx`]: one request's state.
//! - L4: [`edge`] (the `Gateway` and edge answers), [`service`] (the request phases),
//!   [`stages`] (the request phase's pipeline), [`shared`] (the live process), [`rls`]
//!   (Envoy's rate limit service), [`admin`] (/healthz, /readyz, /metrics), [`housekeeping`]
//!   (the background jobs), [`tools`] (dry runs, explain, simulate).
//!
//! Failure modes: a body over the route's cap (413), a client an access list denies or a
//! ladder blocked (403), a bearer token
//! that does not verify on a route keyed by its claims (401), a route's auth refusing (401,
//! 403, a sign-in redirect; 500/503 when its auth service fails, never a pass), a request that matches no route
//! (404), an upstream that cannot be reached (502), whose names never resolved (503) or that
//! does not answer in time (504); each is answered with problem+json and counted. Nothing
//! here panics on input.

pub mod admin;
pub mod auth;
pub mod client_ip;
pub mod connections;
pub mod ctx;
pub mod edge;
pub mod error;
pub mod filters;
pub mod housekeeping;
pub mod identity;
pub mod limits;
pub mod net;
pub mod observe;
pub mod policy;
pub mod respond;
pub mod rls;
pub mod runtime;
pub mod service;
pub mod shared;
pub mod slots;
pub mod stages;
pub mod tls;
pub mod tools;
pub mod upstream;

pub use edge::Gateway;
pub use runtime::Runtime;
pub use shared::Shared;
