//! A circuit breaker on atomics: no lock, one load per call while closed.
//!
//! Closed: calls go through; `threshold` failures in a row open it. Open: calls are refused at
//! once until the back-off ends; then exactly one caller (whoever wins a compare-and-swap) is
//! let through as the probe, and the others keep being refused for another back-off. A probe's
//! success closes the breaker; its failure doubles the back-off (up to `max_backoff`). Calls
//! that were already in flight when it opened fail without moving anything: only a probe's
//! failure lengthens the back-off. A background probe may report success at any time too.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use tollgate_limit::Nanos;

pub struct Breaker {
    threshold: u32,
    base_backoff: Nanos,
    max_backoff: Nanos,
    failures: AtomicU32,
    /// 0 while closed; otherwise the time before which calls are refused.
    open_until: AtomicU64,
    backoff: AtomicU64,
    up: AtomicBool,
    /// The node it guards, for its log lines.
    node: Box<str>,
}

impl Breaker {
    pub fn new(threshold: u32, base_backoff: Nanos, max_backoff: Nanos) -> Self {
        Self {
            threshold: threshold.max(1),
            base_backoff: base_backoff.max(1),
            max_backoff: max_backoff.max(base_backoff),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            backoff: AtomicU64::new(base_backoff.max(1)),
            up: AtomicBool::new(true),
            node: Box::from(""),
        }
    }

    /// Names the node it guards in its log lines (one per change of state).
    pub fn for_node(mut self, node: &str) -> Self {
        self.node = Box::from(node);
        self
    }

    /// Whether a call may go to the store now: `None` refuses it; `Some(true)` lets it through
    /// as the probe of an open breaker (report its result with `probe = true`).
    #[inline]
    pub fn allow(&self, now: Nanos) -> Option<bool> {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Some(false);
        }
        if now < until {
            return None;
        }
        // The back-off is over: one caller becomes the probe.
        let next = now.saturating_add(self.backoff.load(Ordering::Relaxed));
        self.open_until
            .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| true)
    }

    /// The probe [`Breaker::allow`] elected was not made, or learnt nothing about the node
    /// (it met the gateway's own queue): the next call may probe at once, and the back-off
    /// stays as it was.
    pub fn release_probe(&self) {
        let until = self.open_until.load(Ordering::Acquire);
        if until > 1 {
            // 1: open, and due for a probe (0 would be closed).
            let _ = self
                .open_until
                .compare_exchange(until, 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    #[inline]
    pub fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.open_until.load(Ordering::Acquire) != 0 {
            self.open_until.store(0, Ordering::Release);
            self.backoff.store(self.base_backoff, Ordering::Relaxed);
            tracing::info!(
                event = "redis_up",
                node = %self.node,
                "Redis answers again: global limits on this node resume"
            );
        }
        if !self.up.load(Ordering::Relaxed) {
            self.up.store(true, Ordering::Relaxed);
        }
    }

    /// A failed call; `probe` when it was let through by [`Breaker::allow`] as the probe.
    pub fn failure(&self, now: Nanos, probe: bool) {
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        let was_open = self.open_until.load(Ordering::Acquire) != 0;
        if was_open && !probe {
            // In flight when the breaker opened: says nothing new.
        } else if was_open {
            // A failed probe: wait longer before the next one.
            let b = self.backoff.load(Ordering::Relaxed);
            let b = b.saturating_mul(2).min(self.max_backoff);
            self.backoff.store(b, Ordering::Relaxed);
            self.open_until
                .store(now.saturating_add(b).max(1), Ordering::Release);
        } else if failures >= self.threshold {
            let b = self.base_backoff;
            self.backoff.store(b, Ordering::Relaxed);
            self.open_until
                .store(now.saturating_add(b).max(1), Ordering::Release);
            tracing::warn!(
                event = "redis_down",
                node = %self.node,
                failures,
                backoff_ms = b / 1_000_000,
                "Redis failed repeatedly: this node is not called until a probe succeeds; its keys follow on_error"
            );
        }
        if failures >= self.threshold {
            self.up.store(false, Ordering::Relaxed);
        }
    }

    /// False once `threshold` failures in a row happened, until a success.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn opens_after_threshold_probes_once_and_backs_off() {
        let b = Breaker::new(3, 100 * MS, 400 * MS);
        let t = 1_000 * MS;
        assert_eq!(b.allow(t), Some(false));
        b.failure(t, false);
        b.failure(t, false);
        assert!(
            b.allow(t).is_some() && b.is_up(),
            "two failures: still closed"
        );
        b.failure(t, false);
        assert!(!b.is_up() && b.is_open());
        assert_eq!(b.allow(t + 99 * MS), None, "refused during back-off");
        // Calls in flight when it opened fail too: the back-off does not move.
        for _ in 0..100 {
            b.failure(t + 50 * MS, false);
        }
        // Back-off over: exactly one probe.
        assert_eq!(b.allow(t + 100 * MS), Some(true));
        assert_eq!(b.allow(t + 100 * MS), None);
        // The probe fails: the back-off doubles.
        b.failure(t + 100 * MS, true);
        assert_eq!(b.allow(t + 299 * MS), None);
        assert_eq!(b.allow(t + 300 * MS), Some(true));
        b.failure(t + 300 * MS, true);
        assert_eq!(b.allow(t + 699 * MS), None);
        assert_eq!(b.allow(t + 700 * MS), Some(true));
        b.failure(t + 700 * MS, true);
        // Capped at 400 ms.
        assert_eq!(b.allow(t + 1099 * MS), None);
        assert_eq!(b.allow(t + 1100 * MS), Some(true));
        // A probe that was not made gives the turn to the next call, back-off unchanged.
        b.release_probe();
        assert_eq!(b.allow(t + 1100 * MS), Some(true));
        assert_eq!(b.allow(t + 1100 * MS), None);
        b.success();
        assert!(b.is_up() && !b.is_open());
        b.release_probe();
        assert_eq!(
            b.allow(t + 1100 * MS),
            Some(false),
            "a closed breaker stays closed"
        );
        assert_eq!(b.allow(t + 1100 * MS), Some(false));
        // The back-off starts over after a recovery.
        for _ in 0..3 {
            b.failure(t + 1200 * MS, false);
        }
        assert_eq!(b.allow(t + 1300 * MS), Some(true));
    }
}
