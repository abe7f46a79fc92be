//! Time for the limiters: nanoseconds on a monotonic scale with an arbitrary origin.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

/// The real clock: monotonic time measured from the moment the clock was made, read from the
/// CPU's time-stamp counter (`quanta`: one `rdtsc` and a multiply, ~2x cheaper than the vDSO
/// `clock_gettime` behind `Instant`), calibrated against the OS's monotonic clock at start. Where
/// the counter is not invariant (or not x86), `quanta` reads the OS clock instead. Counters a
/// few nanoseconds apart between cores are harmless: every limiter takes a clock that goes
/// backwards as no time passed.
///
/// The origin is shifted one day into the past so that "time zero" states (a key never seen)
/// are always far behind `now`, whatever the process uptime.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

const ORIGIN_OFFSET: Nanos = 86_400 * NANOS_PER_SEC;

impl MonotonicClock {
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.now();
        Self { clock, origin }
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
        let elapsed = self.clock.now().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(ORIGIN_OFFSET)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The counter-based clock starts a day after its origin, never goes backwards on one
    /// thread, and keeps the OS clock's pace (no sleep: a bounded busy wait of ~20 ms).
    #[test]
    fn the_real_clock_is_monotonic_and_keeps_the_os_pace() {
        let clock = MonotonicClock::new();
        let (os_start, start) = (std::time::Instant::now(), clock.now());
        assert!(start >= ORIGIN_OFFSET);
        let mut last = start;
        while os_start.elapsed() < Duration::from_millis(20) {
            let now = clock.now();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        let (os, ours) = (os_start.elapsed().as_nanos() as u64, clock.now() - start);
        // Calibration error and the two reads' distance: well within 2 % + 100 us.
        let slack = os / 50 + 100_000;
        assert!(ours.abs_diff(os) <= slack, "ours {ours} ns, the OS {os} ns");
    }
}
