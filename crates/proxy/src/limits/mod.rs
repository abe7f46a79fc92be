//! Limits' compiled forms, below the per-request code that decides on them:
//!
//! - [`compiled`]: a limit (`[limits.NAME]`) compiled: its state, ladder, tarpit and quota;
//! - [`rules`]: `[[rls.rules]]` compiled: a domain and descriptor pattern to limits;
//! - [`tree`]: `[[rls.domains]]` compiled: envoyproxy/ratelimit's descriptor tree;
//!
//! and the code that decides on them, reading the runtime only through
//! [`compiled::LimitSet`]:
//!
//! - [`identity`]: a request's key for each limit (`ip`, `header:`, `jwt:`, plans);
//! - [`policy`]: a route's limits into one verdict: local, global (Redis, verdict caches,
//!   leases), refunds, blocks;
//! - [`slots`]: concurrency slots, given back however a request ends.

pub mod compiled;
pub mod identity;
pub mod policy;
pub mod rules;
pub mod slots;
pub mod tree;
