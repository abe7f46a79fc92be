//! What a route does to a request and its answer at the edge, compiled and applied: access
//! lists ([`access`]), CORS ([`cors`]), header rules ([`headers`]), and compression and
//! bandwidth ([`shaping`]). None of them knows the request's state: the stages call them.

pub mod access;
pub mod cors;
pub mod headers;
pub mod rewrite_back;
pub mod shaping;
