//! Tollgate's rate-limit core: pure algorithms and bounded keyed state, no IO, no async.
//!
//! What this crate owns:
//! - [`Clock`]: where "now" comes from. Only the binary picks the real clock; tests use
//!   [`ManualClock`] and never sleep.
//! - [`Rate`] and [`Decision`]: the vocabulary shared with the proxy, which turns decisions
//!   into actions (pass, 429, ...). Failure policy is never decided here.
//! - The algorithms ([`TokenBucket`], [`Gcra`], [`LeakyBucket`], [`FixedWindow`],
//!   [`SlidingWindow`], [`SlidingLog`]) as plain state machines over `&mut State`, chosen by a
//!   [`LimitSpec`] that the Redis scripts implement identically for global limits.
//! - [`script`]: what a Redis script can compute exactly (counts and times below 2^53), and the
//!   unit a global GCRA or leaky bucket steps in so that it admits what the local one does.
//! - [`Lease`]: a gateway's slice of a global key's allowance, spent without asking Redis,
//!   within a stated bound (`burst + rate·t + instances × lease_max`).
//! - [`VerdictCache`]: refusals of global limits remembered until they expire.
//! - [`Ladder`] and [`BlockTable`]: automatic blocks of keys a limit refuses too often.
//! - [`KeyedStore`]: one state per key per process, sharded so that no global lock exists,
//!   bounded to `max_keys` with eviction of idle keys first and refused keys last; each state
//!   is updated lock-free ([`StateCell`]).
//!
//! Failure modes: none at run time. Arithmetic saturates rather than wraps, a clock that goes
//! backwards is treated as "no time passed", and a store at capacity evicts rather than grows.

mod algorithm;
mod blocks;
mod calendar;
mod capabilities;
mod cell;
mod clock;
mod concurrency;
mod decision;
mod lease;
mod lease_table;
pub mod script;
mod shards;
mod spec;
mod store;
mod verdict;
mod windows;

pub use algorithm::{Algorithm, AlgorithmKind, Gcra, LeakyBucket, TokenBucket, TokenBucketState};
pub use blocks::{Block, BlockTable, HotKeys, Ladder, Rung, Tripped};
pub use calendar::{civil_from_days, days_from_civil, Calendar, CalendarUnit};
pub use capabilities::{Capabilities, MAX_SLIDING_LOG_BURST};
pub use cell::{MutexCell, PairCell, StateCell};
pub use clock::{Clock, ManualClock, MonotonicClock, Nanos, NANOS_PER_SEC};
pub use concurrency::{Concurrency, CONCURRENCY_RETRY};
pub use decision::{ceil_secs, Decision, Rate, RateError};
pub use lease::{Grant, Lease, LeasePolicy, Take};
pub use lease_table::Leases;
pub use script::{ScriptStep, SCRIPT_EXACT_MAX};
pub use spec::LimitSpec;
pub use store::{KeyedStore, LocalLimiter, StoreStats, DEFAULT_MAX_KEYS};
pub use verdict::{Cached, VerdictCache};
pub use windows::{
    CountingWindow, FixedWindow, Log, SlidingCounts, SlidingLog, SlidingWindow, WindowCount,
};
