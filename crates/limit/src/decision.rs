//! The vocabulary between limiters and the proxy: rates in, decisions out.

use crate::clock::{Nanos, NANOS_PER_SEC};
use std::time::Duration;

/// `count` units per `period`, e.g. 10 per second. Both are non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("the count must be at least 1")]
    ZeroCount,
    #[error("the period must be at least 1ns")]
    ZeroPeriod,
}

impl Rate {
    pub fn new(count: u64, period: Duration) -> Result<Self, RateError> {
        if count == 0 {
            return Err(RateError::ZeroCount);
        }
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        if period_ns == 0 {
            return Err(RateError::ZeroPeriod);
        }
        Ok(Self { count, period_ns })
    }

    /// `count` per second.
    pub fn per_second(count: u64) -> Result<Self, RateError> {
        Self::new(count, Duration::from_secs(1))
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Time needed to accrue `units`, rounded up (never admits early).
    pub(crate) fn time_for(&self, units: u64) -> Nanos {
        let t = (units as u128 * self.period_ns as u128).div_ceil(self.count as u128);
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// Whole units accrued in `elapsed`, rounded down (never admits early).
    pub(crate) fn units_in(&self, elapsed: Nanos) -> u128 {
        elapsed as u128 * self.count as u128 / self.period_ns as u128
    }
}

/// What a limiter says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted. `remaining` units are left right after this request; `reset` is the time until
    /// the limit is back at full capacity; `delay` is how long to hold the request before passing
    /// it on (only the leaky bucket queues; every other algorithm says 0).
    Allow {
        remaining: u64,
        reset: Nanos,
        delay: Nanos,
    },
    /// Refused. The same request would be admitted after `retry_after` if nothing else arrived.
    Deny { retry_after: Nanos },
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// Whole seconds for headers: rounded up, so a client that waits that long is admitted.
pub fn ceil_secs(ns: Nanos) -> u64 {
    ns.div_ceil(NANOS_PER_SEC)
}
