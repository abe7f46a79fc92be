//! A limit's definition as the limiters need it, and the local limiter built from it.

use crate::algorithm::{AlgorithmKind, Gcra, LeakyBucket, TokenBucket};
use crate::calendar::Calendar;
use crate::concurrency::Concurrency;
use crate::decision::Rate;
use crate::store::{KeyedStore, LocalLimiter};
use crate::windows::{CountingWindow, FixedWindow, SlidingLog, SlidingWindow};
use std::sync::Arc;

/// Algorithm, rate and capacity: everything that decides, nothing about keys or actions. The
/// same spec drives the local limiter and the Redis script, so a limit moves between scopes by
/// changing one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitSpec {
    pub algorithm: AlgorithmKind,
    pub rate: Rate,
    /// Capacity (buckets) or units per window (windows); at least 1 (0 only for a
    /// counting window, where every counted hit is over).
    pub burst: u64,
    /// Leaky bucket only: queued requests that pass without waiting (nginx's `delay=`).
    pub delay: u64,
    /// Quotas only: the calendar of their periods (`burst` is the quota).
    pub calendar: Option<Calendar>,
}

impl LimitSpec {
    /// A per-process limiter of this spec, bounded to `max_keys` keys.
    pub fn local(&self, max_keys: usize) -> Arc<dyn LocalLimiter> {
        let (rate, burst) = (self.rate, self.burst);
        match self.algorithm {
            AlgorithmKind::TokenBucket => {
                Arc::new(KeyedStore::new(TokenBucket::new(rate, burst), max_keys))
            }
            AlgorithmKind::Gcra => Arc::new(KeyedStore::new(Gcra::new(rate, burst), max_keys)),
            AlgorithmKind::LeakyBucket => Arc::new(KeyedStore::new(
                LeakyBucket::new(rate, burst, self.delay),
                max_keys,
            )),
            AlgorithmKind::FixedWindow => {
                Arc::new(KeyedStore::new(FixedWindow::new(rate, burst), max_keys))
            }
            AlgorithmKind::SlidingWindow => {
                Arc::new(KeyedStore::new(SlidingWindow::new(rate, burst), max_keys))
            }
            AlgorithmKind::SlidingLog => {
                Arc::new(KeyedStore::new(SlidingLog::new(rate, burst), max_keys))
            }
            AlgorithmKind::Concurrency => {
                Arc::new(KeyedStore::new(Concurrency::new(burst), max_keys))
            }
            AlgorithmKind::CountingWindow => {
                Arc::new(KeyedStore::new(CountingWindow::new(rate, burst), max_keys))
            }
            AlgorithmKind::Quota => {
                let cal = self.calendar.unwrap_or(Calendar {
                    unit: crate::calendar::CalendarUnit::Month,
                    offset_secs: 0,
                });
                Arc::new(KeyedStore::new(FixedWindow::calendar(cal, burst), max_keys))
            }
        }
    }

    /// This limit's share for one of `instances` gateways deciding alone (a global limit
    /// falling back to local state while Redis is away): the rate divided exactly (the period
    /// multiplied), the burst rounded up so that each instance still admits at least one.
    pub fn share(&self, instances: u32) -> LimitSpec {
        let n = instances.max(1);
        let rate =
            Rate::new(self.rate.count(), self.rate.period().saturating_mul(n)).unwrap_or(self.rate);
        LimitSpec {
            rate,
            burst: self.burst.div_ceil(n as u64).max(1),
            delay: self.delay.div_ceil(n as u64),
            ..*self
        }
    }
}
