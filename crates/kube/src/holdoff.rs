//! Changes batched before a rebuild, as Contour holds off: a rebuild waits for the cluster to
//! be quiet for `delay` after the last change, and never longer than `max` after the first
//! change of the batch (a steady trickle of changes still gets served). Time is passed in:
//! the model has no clock of its own.

use std::time::{Duration, Instant};

/// Contour's figures: 100 ms quiet, 500 ms at most.
pub const DELAY: Duration = Duration::from_millis(100);
pub const MAX: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct Holdoff {
    delay: Duration,
    max: Duration,
    /// The first change of the batch waiting, and when it is due.
    first: Option<Instant>,
    due: Option<Instant>,
}

impl Default for Holdoff {
    fn default() -> Self {
        Self::new(DELAY, MAX)
    }
}

impl Holdoff {
    pub fn new(delay: Duration, max: Duration) -> Self {
        Holdoff {
            delay,
            max,
            first: None,
            due: None,
        }
    }

    /// A change at `now`.
    pub fn changed(&mut self, now: Instant) {
        let first = *self.first.get_or_insert(now);
        self.due = Some((now + self.delay).min(first + self.max));
    }

    /// When the batch is due (`None`: nothing waits).
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Whether the batch is due at `now`; if so, it is taken (the next change starts another).
    pub fn take(&mut self, now: Instant) -> bool {
        match self.due {
            Some(d) if now >= d => {
                self.first = None;
                self.due = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_then_due_and_never_later_than_max() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut h = Holdoff::default();
        assert!(!h.take(ms(0)) && h.due().is_none());
        h.changed(ms(0));
        assert_eq!(h.due(), Some(ms(100)));
        h.changed(ms(50));
        assert!(!h.take(ms(120)), "a later change restarts the quiet time");
        assert!(h.take(ms(150)));
        assert!(!h.take(ms(1000)), "taken: nothing waits");
        // A change every 60 ms: the batch is due 500 ms after its first change.
        for n in (0..20).map(|i| 2000 + 60 * i) {
            h.changed(ms(n));
            if h.take(ms(n)) {
                assert_eq!(n, 2540, "due at 2500, seen at the change after it");
                return;
            }
            assert!(n < 2500, "{n}");
        }
        panic!("never due");
    }
}
