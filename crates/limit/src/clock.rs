//! Time for the limiters: nanoseconds on a monotonic scale with an arbitrary origin.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Nanoseconds since the clock's own origin. Only differences are meaningful.
pub type Nanos = u64;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A source of monotonic time. Implementations must be cheap: it is read once per request.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Nanos;
    /// Calendar time (nanoseconds since the Unix epoch), for quotas on calendar periods. A
    /// manual clock's value is both.
    fn unix_now(&self) -> Nanos {
        self.now()
    }
}

/// The real clock: `Instant` measured from the moment the clock was made.
///
/// The origin is shifted one day into the past so that "time zero" states (a key never seen)
/// are always far behind `now`, whatever the process uptime.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    origin: Instant,
}

const ORIGIN_OFFSET: Duration = Duration::from_secs(86_400);

impl MonotonicClock {
    pub fn new() -> Self {
        let now = Instant::now();
        Self {
            origin: now.checked_sub(ORIGIN_OFFSET).unwrap_or(now),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Nanos {
        // u64 nanoseconds last 584 years: saturate rather than wrap past that.
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn unix_now(&self) -> Nanos {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: the clock of every limiter test.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start: Nanos) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the time, also backwards (to test clocks that misbehave).
    pub fn set(&self, to: Nanos) {
        self.now.store(to, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}
