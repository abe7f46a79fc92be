//! Upstreams: an upstream's targets and the peers they are reached through, how a request's
//! target is chosen among the healthy ones, and its retries.
//!
//! - [`target`]: a target, and one attempt's pick of it (in-flight count, peak EWMA, stable id);
//! - [`affinity`]: `hash_key` inputs and the signed affinity cookie;
//! - [`budget`]: the retry budget, so that retries cannot multiply an outage;
//! - [`pool`]: an upstream's targets, their health and name resolution, and the choice among
//!   them: round robin (the default, in [`pool::Pool::select_peer`]: no counter, no reference
//!   taken), `least_request`, `ewma` (the lowest peak-EWMA latency times requests in flight + 1),
//!   `hash` (Ketama over every target; an unhealthy target's keys go to the next point) and
//!   `affinity`;
//! - [`health`]: active TCP checks, one per distinct address and timeout however many
//!   upstreams name it;
//! - [`outlier`]: passive outlier ejection (failures in a row take a target out for a while);
//! - [`placed`] (core's `net::placed`, re-exported: the auth client reads it too): the
//!   addresses the cluster places under a target's name (a Service port's ready endpoints,
//!   under `run --kubernetes`), taken up by the pools in place of DNS;
//! - [`attempt`]: one request's attempts, fall-over and retries.
//!
//! Imports point down: `attempt`, `health` -> `pool` -> `outlier` (the ejection list and its
//! rules, over a pool's targets) -> `target`; and `pool` -> `affinity`, `budget`, `placed`.

pub mod affinity;
pub mod attempt;
pub mod budget;
pub mod health;
pub mod outlier;
pub mod pool;
pub mod target;

pub use tollgate_core::net::placed;
