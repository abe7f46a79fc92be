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
/// CPU's counter through `quanta` (on x86 one `rdtsc` and a multiply, ~2.5x cheaper than the
/// vDSO `clock_gettime` behind `Instant`; on aarch64 the virtual counter), scaled by a
/// calibration against the OS's monotonic clock. On x86 `quanta` uses the counter when the CPU
/// reports it invariant and reads the OS clock otherwise; it does not consult the kernel's own
/// verdict on the TSC (a host whose cores' counters drift apart, which the kernel marks
/// unstable, skews the clock between threads by that drift). The limiters take a clock that
/// goes backwards as no time passed; a core ahead grants credit early by its lead, at most.
/// The first clock made in a process calibrates, which takes up to a few hundred milliseconds:
/// the gateway makes it once, at start.
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

    /// The counter-based clock keeps the OS clock's pace. Each of its two reads is bracketed
    /// by OS reads, so a preemption between them widens the bracket instead of failing the
    /// test; a bounded busy wait of ~50 ms in between (no sleep).
    #[test]
    fn the_real_clock_keeps_the_os_pace() {
        let clock = MonotonicClock::new();
        let bracket = || {
            let before = std::time::Instant::now();
            let ours = clock.now();
            (before, ours, std::time::Instant::now())
        };
        let (b0, start, a0) = bracket();
        while a0.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let (b1, end, a1) = bracket();
        let ours = end - start;
        let (least, most) = (
            b1.duration_since(a0).as_nanos() as u64,
            a1.duration_since(b0).as_nanos() as u64,
        );
        // Calibration error: 1 % of the span, either way.
        let slack = most / 100;
        assert!(
            ours + slack >= least && ours <= most + slack,
            "ours {ours} ns, the OS {least}..{most} ns"
        );
    }
}
