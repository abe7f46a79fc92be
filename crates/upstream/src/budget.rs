//! The retry budget: each request to the upstream deposits `budget` tokens, each retry takes
//! one, so over any stretch of traffic retries <= budget x requests (upstream attempts <=
//! requests x (1 + budget)): retries cannot multiply an outage.

use std::sync::atomic::{AtomicU64, Ordering};

/// Retries per request over an upstream's traffic, in thousandths of a token.
pub struct RetryBudget {
    milli: AtomicU64,
    per_request: u64,
    cap: u64,
}

impl RetryBudget {
    /// `budget`: retries per request; the tokens saved in calm times are capped at 10 retries
    /// (or one second of a busy upstream's budget would fund a storm later).
    pub fn new(budget: f64) -> Self {
        Self {
            milli: AtomicU64::new(0),
            per_request: (budget * 1000.0).round() as u64,
            cap: 10_000,
        }
    }

    /// One request to the upstream (its first attempt).
    pub fn deposit(&self) {
        if self.per_request == 0 {
            return;
        }
        let _ = self
            .milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some((m + self.per_request).min(self.cap))
            });
    }

    /// Takes one retry's worth, when there is one.
    pub fn take(&self) -> bool {
        self.milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                m.checked_sub(1000)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_retries_as_a_ratio_of_requests() {
        let b = RetryBudget::new(0.2);
        let mut retries = 0;
        for _ in 0..100 {
            b.deposit();
            // A full outage: every request wants every retry it can get.
            while b.take() {
                retries += 1;
            }
        }
        assert_eq!(retries, 20);
        // Calm traffic saves at most 10 retries.
        let b = RetryBudget::new(1.0);
        (0..1000).for_each(|_| b.deposit());
        assert_eq!((0..50).filter(|_| b.take()).count(), 10);
        assert!(!RetryBudget::new(0.0).take());
    }
}
