//! Requests in flight per key (`algorithm = "concurrency"`, nginx's `limit_conn`): `burst` is
//! the cap; a request takes a slot when admitted and gives it back when it ends (as a refund).
//!
//! No time passes in this algorithm: a slot is held exactly as long as its request. The state
//! is the number of slots taken; at rest at 0, and its pressure is that number, so a full
//! store drops idle keys first and the busiest last.

use crate::algorithm::Algorithm;
use crate::clock::{Nanos, NANOS_PER_SEC};
use crate::decision::Decision;
use std::sync::atomic::AtomicU64;

/// A refusal cannot know when a slot frees: clients are told to retry after this.
pub const CONCURRENCY_RETRY: Nanos = NANOS_PER_SEC;

#[derive(Debug, Clone, Copy)]
pub struct Concurrency {
    cap: u64,
}

impl Concurrency {
    /// `cap` requests in flight per key; at least 1.
    pub fn new(cap: u64) -> Self {
        Self { cap: cap.max(1) }
    }
}

impl Algorithm for Concurrency {
    type State = u64;
    type Cell = AtomicU64;

    fn new_state(&self, _now: Nanos) -> u64 {
        0
    }

    fn acquire(&self, held: &mut u64, now: Nanos, cost: u64) -> Decision {
        let d = self.peek(held, now, cost);
        if d.is_allowed() {
            *held += cost;
        }
        d
    }

    fn peek(&self, held: &u64, _now: Nanos, cost: u64) -> Decision {
        match held.checked_add(cost) {
            Some(after) if after <= self.cap => Decision::Allow {
                remaining: self.cap - after,
                reset: 0,
                delay: 0,
            },
            _ => Decision::Deny {
                retry_after: CONCURRENCY_RETRY,
            },
        }
    }

    fn refund(&self, held: &mut u64, _now: Nanos, cost: u64) {
        *held = held.saturating_sub(cost);
    }

    fn at_rest(&self, held: &u64, _now: Nanos) -> bool {
        *held == 0
    }

    fn pressure(&self, held: &u64, _now: Nanos) -> u64 {
        *held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyedStore, LocalLimiter};

    #[test]
    fn slots_are_taken_up_to_the_cap_and_a_freed_one_is_reused_at_once() {
        let store = KeyedStore::new(Concurrency::new(3), 1000);
        let now = 5;
        for left in [2, 1, 0] {
            assert_eq!(
                store.acquire(7, now, 1),
                Decision::Allow {
                    remaining: left,
                    reset: 0,
                    delay: 0
                }
            );
        }
        // The fourth waits for a slot, however much time passes.
        for t in [now, now + 3600 * NANOS_PER_SEC] {
            assert_eq!(
                store.acquire(7, t, 1),
                Decision::Deny {
                    retry_after: CONCURRENCY_RETRY
                }
            );
        }
        // Another key has its own slots.
        assert!(store.acquire(8, now, 1).is_allowed());
        store.refund(7, now, 1);
        assert!(store.acquire(7, now, 1).is_allowed());
        assert!(!store.acquire(7, now, 1).is_allowed());
        // Releases past zero (a slot given back twice) cannot mint slots.
        for _ in 0..10 {
            store.refund(8, now, 1);
        }
        for _ in 0..3 {
            assert!(store.acquire(8, now, 1).is_allowed());
        }
        assert!(!store.acquire(8, now, 1).is_allowed());
    }

    #[test]
    fn a_key_with_slots_in_use_is_never_at_rest() {
        let c = Concurrency::new(2);
        assert!(c.at_rest(&0, 0));
        assert!(!c.at_rest(&1, 0));
        assert!(c.pressure(&2, 0) > c.pressure(&1, 0));
    }
}
