//! Routing, pure: no proxy, no I/O, no clock. What the gateway reads of a request before any
//! concern decides on it.
//!
//! - [`normalize`]: the canonical path and host every later step reads, and the upstream is
//!   sent (dot segments, escapes, slashes, case), or why the request is refused (400);
//! - [`routing`]: which route a request takes (host tiers, exact, prefix and regex paths,
//!   methods and headers), its rewrite (held to the client's rules) and its canary's upstream;
//! - [`table`]: the match order indexed by host and path, so that a lookup never walks the
//!   routes it cannot match.
//!
//! `normalize` is below `routing`, `routing` below `table`; the proxy builds on them.

pub mod listeners;
pub mod matching;
pub mod normalize;
pub mod routing;
pub mod table;
