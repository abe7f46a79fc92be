//! Concurrency limits (`algorithm = "concurrency"`): a request's slots, given back when the
//! request ends however it ends (answered, failed, or the client gone), and a global limit's
//! slots renewed in Redis while their requests run.
//!
//! A slot is taken like any unit (the limit's decision); this module only makes sure it
//! comes back: [`Slots`] lives in the request's context and gives every slot back when it is
//! dropped. For a global limit each gateway also counts the slots it holds per key
//! ([`Held`]); the health loop renews them every third of `slot_ttl`, so Redis counts them
//! while they run and forgets them `slot_ttl` after a gateway stops (a crash).

use crate::limits::compiled::{LimitSet, LimitState};
use crate::limits::policy::{return_unit, Took};
use std::sync::Arc;
use tollgate_limit::Clock;

/// The slots one request took; given back on drop.
pub struct Slots {
    rt: Arc<dyn LimitSet>,
    clock: Arc<dyn Clock>,
    /// (limit, key, where the slot came from).
    held: Vec<(usize, u64, Took)>,
}

impl Slots {
    pub fn new(rt: Arc<dyn LimitSet>, clock: Arc<dyn Clock>) -> Self {
        Slots {
            rt,
            clock,
            held: Vec::new(),
        }
    }

    /// Records a slot the request took from limit `li` for `key`.
    pub fn push(&mut self, li: usize, key: u64, took: Took) {
        if let (LimitState::Global(g), true) = (&self.rt.limits()[li].state, took.global) {
            if let Some(h) = &g.held {
                h.add(key);
            }
        }
        self.held.push((li, key, took));
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        let now = self.clock.now();
        for &(li, key, took) in &self.held {
            let l = &self.rt.limits()[li];
            if let (LimitState::Global(g), true) = (&l.state, took.global) {
                if let Some(h) = &g.held {
                    h.remove(key);
                }
            }
            return_unit(l, key, l.time(now, 0), took);
        }
    }
}
