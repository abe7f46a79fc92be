//! Limits' compiled forms, below the per-request code that decides on them:
//!
//! - [`compiled`]: a limit (`[limits.NAME]`) compiled: its state, ladder, tarpit and quota;
//! - [`rules`]: `[[rls.rules]]` compiled: a domain and descriptor pattern to limits;
//! - [`tree`]: `[[rls.domains]]` compiled: envoyproxy/ratelimit's descriptor tree.

pub mod compiled;
pub mod rules;
pub mod tree;
