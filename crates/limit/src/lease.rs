//! Budget leases: one gateway's slice of a global key's allowance, spent locally.
//!
//! An exact global limit asks Redis about every admitted request. A lease asks once for
//! several units (one script call takes up to `want` units, fewer if fewer are left) and this
//! gateway admits from them without asking again until they run out or expire.
//!
//! **The bound.** Units are taken from the store before they are spent, so the fleet never
//! admits more than the store granted: what a lease changes is *when* a unit is spent. Units
//! granted before an interval and spent in it are the only excess, and a gateway holds at most
//! one slice of a key (while one request asks for a slice, its neighbours on that key ask for
//! one unit each). Over any interval of length `t` the fleet therefore admits at most
//! `burst + rate·t + instances × max`. The proptest below checks it on a simulated fleet.
//!
//! **Sizing**, like TCP's slow start. A key's first request asks for one unit, as an exact
//! limit does: a key seen once wastes nothing. A slice spent in full asks next for twice its
//! size, but no more than lasts `horizon` at the rate it was spent, and at most `max`. A slice
//! that expired part spent sizes the next from what was spent. A key this gateway sees rarely
//! thus keeps asking for one unit: cold keys cost no allowance.
//!
//! **Expiry.** A slice ends `ttl` after it was granted, or when the store's window ends for the
//! window algorithms (their units count in one window: the rest lapses, since giving it back
//! to the next window would admit it twice). Unspent units of a slice that ends by `ttl` go
//! back to the store.

use crate::clock::Nanos;

/// How leases of one limit are sized and how long they last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// The most units one slice holds (`lease_max`).
    pub max: u64,
    /// A slice is sized to last this long at the rate the last one was spent.
    pub horizon: Nanos,
    /// Unspent units go back to the store this long after their slice was granted.
    pub ttl: Nanos,
}

impl LeasePolicy {
    /// Slices sized for half a second of a key's traffic, given back after one second.
    pub fn new(max: u64) -> Self {
        Self {
            max: max.max(1),
            horizon: 500_000_000,
            ttl: 1_000_000_000,
        }
    }
}

/// What a request gets from its key's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Admitted from the slice: the store's remaining when it granted the slice plus what
    /// this gateway still holds, and the store's reset then (from now).
    Spent { remaining: u64, reset: Nanos },
    /// Ask the store for up to `want` units (1: an exact decision, nothing held after). First
    /// give back `give_back` unspent units of a slice that ended (0: none).
    Ask { want: u64, give_back: u64 },
}

/// The store's answer to an ask that admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Units taken from the store, the asking request's own included (at least 1).
    pub granted: u64,
    /// The store's remaining after taking them, and its reset (from now).
    pub remaining: u64,
    pub reset: Nanos,
    /// The units lapse this long from now (the end of the store's window), if they do.
    pub lapse: Option<Nanos>,
}

/// One key's lease on one gateway. All times are the caller's monotonic clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    /// Units granted and not yet spent.
    held: u64,
    /// The current (or last) slice: its size, when it was granted, what was spent of it.
    size: u64,
    granted_at: Nanos,
    spent: u64,
    /// When the held units go back (or lapse, when `lapses`).
    ends: Nanos,
    lapses: bool,
    /// What the store said when it granted the slice.
    remaining: u64,
    reset_at: Nanos,
    /// A request is asking for a slice since then (its neighbours ask for one unit).
    asking_since: Option<Nanos>,
    /// The last request on the key (an idle lease holding nothing can be dropped).
    pub(crate) last_seen: Nanos,
}

impl Lease {
    /// Units held and not yet spent.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Whether a slice is being asked for (an ask older than `ttl` is taken as abandoned).
    fn asking(&self, now: Nanos, p: &LeasePolicy) -> bool {
        self.asking_since
            .is_some_and(|t| now.saturating_sub(t) < p.ttl)
    }

    /// One request on the key: admitted from the slice, or told what to ask the store.
    pub fn take(&mut self, now: Nanos, p: &LeasePolicy) -> Take {
        self.last_seen = now;
        let give_back = self.end_if_due(now);
        if self.held > 0 {
            self.held -= 1;
            self.spent += 1;
            return Take::Spent {
                remaining: self.remaining.saturating_add(self.held),
                reset: self.reset_at.saturating_sub(now),
            };
        }
        if self.asking(now, p) {
            return Take::Ask { want: 1, give_back };
        }
        let want = self.next_size(now, p);
        if want > 1 {
            self.asking_since = Some(now);
        }
        Take::Ask { want, give_back }
    }

    /// The size of the next slice, from how the last one was spent.
    fn next_size(&self, now: Nanos, p: &LeasePolicy) -> u64 {
        if self.size == 0 || self.spent == 0 {
            return 1;
        }
        let elapsed = now.saturating_sub(self.granted_at).max(1) as u128;
        let by_rate = (self.spent as u128 * p.horizon as u128 / elapsed).min(u64::MAX as u128);
        let want = if self.spent >= self.size {
            // Spent in full: grow, at most doubling.
            (by_rate as u64).min(self.size.saturating_mul(2))
        } else {
            by_rate as u64
        };
        want.clamp(1, p.max)
    }

    /// Ends the slice if it is due: the unspent units to give back (none if they lapse).
    pub fn end_if_due(&mut self, now: Nanos) -> u64 {
        if self.held == 0 || now < self.ends {
            return 0;
        }
        self.end()
    }

    /// Ends the slice now (the lease is dropped): the unspent units to give back.
    pub fn end(&mut self) -> u64 {
        let held = std::mem::take(&mut self.held);
        if self.lapses {
            0
        } else {
            held
        }
    }

    /// The store admitted an ask for `want` units (one of them the asking request's).
    /// Returns the remaining to report for that request.
    pub fn grant(&mut self, now: Nanos, want: u64, g: Grant, p: &LeasePolicy) -> u64 {
        let granted = g.granted.max(1);
        if want > 1 {
            // The slice this gateway asked for (units put back meanwhile stay with it).
            self.asking_since = None;
            self.start(now, granted, g, p);
            self.held += granted - 1;
        } else if self.held == 0 && !self.asking(now, p) {
            // An exact decision while nothing is held: the next slice is sized from it.
            self.start(now, 1, g, p);
        }
        g.remaining.saturating_add(self.held)
    }

    fn start(&mut self, now: Nanos, size: u64, g: Grant, p: &LeasePolicy) {
        self.size = size;
        self.spent = 1;
        self.granted_at = now;
        // Ended by the window before ttl: the rest lapses; ended by ttl: it goes back.
        self.lapses = g.lapse.is_some_and(|l| l <= p.ttl);
        self.ends = now.saturating_add(g.lapse.unwrap_or(Nanos::MAX).min(p.ttl));
        self.remaining = g.remaining;
        self.reset_at = now.saturating_add(g.reset);
    }

    /// The store refused an ask, or could not be asked: nothing is held.
    pub fn refused(&mut self, want: u64) {
        if want > 1 {
            self.asking_since = None;
        }
    }

    /// A unit spent from the slice comes back (another limit refused the request). False when
    /// the slice has ended: the caller gives it back to the store.
    pub fn put_back(&mut self, now: Nanos) -> bool {
        if now >= self.ends || self.spent == 0 {
            return false;
        }
        self.held += 1;
        self.spent -= 1;
        true
    }

    /// Nothing held and nothing asked: dropping it loses nothing but the key's sizing.
    pub fn is_idle(&self, now: Nanos, p: &LeasePolicy) -> bool {
        self.held == 0 && !self.asking(now, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Gcra, TokenBucket};
    use crate::decision::{Decision, Rate};
    use crate::store::{KeyedStore, LocalLimiter};
    use crate::windows::FixedWindow;
    use proptest::prelude::*;
    use std::time::Duration;

    const MS: Nanos = 1_000_000;

    fn grant(granted: u64, lapse: Option<Nanos>) -> Grant {
        Grant {
            granted,
            remaining: 100,
            reset: 10 * MS,
            lapse,
        }
    }

    #[test]
    fn a_cold_key_asks_for_one_unit_and_a_hot_one_grows_to_the_max() {
        let p = LeasePolicy::new(16);
        let mut l = Lease::default();
        assert_eq!(
            l.take(0, &p),
            Take::Ask {
                want: 1,
                give_back: 0
            }
        );
        l.grant(0, 1, grant(1, None), &p);
        // Seen again two seconds later: still cold.
        assert_eq!(
            l.take(2_000 * MS, &p),
            Take::Ask {
                want: 1,
                give_back: 0
            }
        );
        l.grant(2_000 * MS, 1, grant(1, None), &p);
        // Then every millisecond: 2, 4, 8, 16, 16.
        let mut t = 2_000 * MS;
        let mut sizes = Vec::new();
        for _ in 0..64 {
            t += MS;
            match l.take(t, &p) {
                Take::Spent { .. } => {}
                Take::Ask { want, give_back } => {
                    assert_eq!(give_back, 0);
                    sizes.push(want);
                    l.grant(t, want, grant(want, None), &p);
                }
            }
        }
        assert_eq!(&sizes[..5], &[2, 4, 8, 16, 16]);
    }

    #[test]
    fn neighbours_of_an_ask_decide_exactly_and_an_abandoned_ask_is_forgotten() {
        let p = LeasePolicy::new(8);
        let mut l = Lease::default();
        l.take(0, &p);
        l.grant(0, 1, grant(1, None), &p);
        assert_eq!(
            l.take(MS, &p),
            Take::Ask {
                want: 2,
                give_back: 0
            }
        );
        // While that ask is out, others ask for one unit each, and their grants hold nothing.
        assert_eq!(
            l.take(MS, &p),
            Take::Ask {
                want: 1,
                give_back: 0
            }
        );
        assert_eq!(l.grant(MS, 1, grant(1, None), &p), 100);
        assert_eq!(l.held(), 0);
        // The ask's answer never came (its request was cancelled): after ttl the key is
        // sized again, as if nobody asked.
        assert_eq!(
            l.take(MS + p.ttl - 1, &p),
            Take::Ask {
                want: 1,
                give_back: 0
            }
        );
        l.grant(MS + p.ttl - 1, 1, grant(1, None), &p);
        let t = MS + p.ttl;
        assert_eq!(
            l.take(t, &p),
            Take::Ask {
                want: 1,
                give_back: 0
            }
        );
        l.grant(t, 1, grant(1, None), &p);
        assert_eq!(
            l.take(t + MS, &p),
            Take::Ask {
                want: 2,
                give_back: 0
            }
        );
    }

    #[test]
    fn unspent_units_go_back_after_ttl_but_lapse_at_a_window_end() {
        let p = LeasePolicy::new(8);
        let mut l = Lease::default();
        l.take(0, &p);
        l.grant(0, 1, grant(1, None), &p);
        l.take(MS, &p);
        // Asked for 2 at 1 ms; took 2 of them (1 left), then silence.
        assert_eq!(l.grant(MS, 2, grant(2, None), &p), 101);
        assert_eq!(
            l.take(2 * MS, &p),
            Take::Spent {
                remaining: 100,
                reset: 9 * MS
            }
        );
        assert_eq!(l.held(), 0);
        l.take(3 * MS, &p);
        l.grant(3 * MS, 4, grant(4, None), &p);
        assert_eq!(l.held(), 3);
        assert_eq!(l.end_if_due(3 * MS + p.ttl - 1), 0);
        assert!(matches!(
            l.take(3 * MS + p.ttl, &p),
            Take::Ask { give_back: 3, .. }
        ));
        // A window's units lapse at its end: nothing goes back.
        let mut w = Lease::default();
        w.take(0, &p);
        w.grant(0, 1, grant(1, None), &p);
        w.take(MS, &p);
        w.grant(MS, 2, grant(2, Some(5 * MS)), &p);
        assert_eq!(w.held(), 1);
        assert!(matches!(w.take(6 * MS, &p), Take::Ask { give_back: 0, .. }));
        assert_eq!(w.held(), 0);
    }

    #[test]
    fn a_unit_put_back_is_spent_again_unless_its_slice_ended() {
        let p = LeasePolicy::new(8);
        let mut l = Lease::default();
        l.take(0, &p);
        l.grant(0, 1, grant(1, None), &p);
        l.take(MS, &p);
        l.grant(MS, 2, grant(2, None), &p);
        assert!(l.put_back(2 * MS));
        assert_eq!(l.held(), 2);
        assert!(!l.put_back(MS + p.ttl), "ended: back to the store");
        assert_eq!(l.end(), 2);
    }

    /// The store of the simulation: a local limiter answering asks as the scripts do (up to
    /// `want`, at least one, what is available).
    fn ask(store: &dyn LocalLimiter, now: Nanos, want: u64) -> Option<u64> {
        match store.peek(0, now, 1) {
            Decision::Allow { remaining, .. } => {
                let n = want.min(remaining + 1);
                assert!(store.acquire(0, now, n).is_allowed());
                Some(n)
            }
            Decision::Deny { .. } => None,
        }
    }

    fn simulate(
        store: &dyn LocalLimiter,
        window: Option<Nanos>,
        instances: usize,
        max: u64,
        arrivals: &[(u8, u32)],
    ) -> Vec<Nanos> {
        let p = LeasePolicy::new(max);
        let mut leases = vec![Lease::default(); instances];
        let mut admitted = Vec::new();
        let mut now: Nanos = 1_000_000_000_000;
        for &(who, gap_us) in arrivals {
            now += gap_us as Nanos * 1_000;
            let l = &mut leases[who as usize % instances];
            match l.take(now, &p) {
                Take::Spent { .. } => admitted.push(now),
                Take::Ask { want, give_back } => {
                    if give_back > 0 {
                        store.refund(0, now, give_back);
                    }
                    match ask(store, now, want) {
                        Some(granted) => {
                            let lapse = window.map(|w| w - now % w);
                            l.grant(now, want, grant(granted, lapse), &p);
                            admitted.push(now);
                        }
                        None => l.refused(want),
                    }
                }
            }
        }
        admitted
    }

    /// Every interval between two admissions holds at most `bound(t)` of them.
    fn within(admitted: &[Nanos], bound: impl Fn(Nanos) -> u64) -> Result<(), TestCaseError> {
        for i in 0..admitted.len() {
            for j in i..admitted.len() {
                let n = (j - i + 1) as u64;
                let t = admitted[j] - admitted[i];
                prop_assert!(n <= bound(t), "{n} admitted in {t} ns, bound {}", bound(t));
            }
        }
        Ok(())
    }

    /// Mostly a busy key (gaps up to 3 ms), now and then a pause (0.1-0.9 s) during which the
    /// store refills while slices are still held: the case that shows a lease's excess.
    fn gaps() -> impl Strategy<Value = u32> {
        prop_oneof![19 => 0u32..3_000, 1 => 100_000u32..900_000]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// A fleet of gateways with leases on one token bucket admits, over every interval,
        /// at most burst + rate·t + instances × max; and never more than the store granted.
        #[test]
        fn a_leased_fleet_stays_within_burst_plus_rate_plus_one_slice_per_instance(
            instances in 1usize..8,
            burst in 1u64..200,
            per_sec in 1u64..5_000,
            max_div in 1u64..4,
            arrivals in proptest::collection::vec((0u8..8, gaps()), 1..600),
        ) {
            let max = (burst / (max_div * instances as u64)).max(1);
            let rate = Rate::new(per_sec, Duration::from_secs(1)).expect("rate");
            for gcra in [false, true] {
                let store: Box<dyn LocalLimiter> = if gcra {
                    Box::new(KeyedStore::new(Gcra::new(rate, burst), 1))
                } else {
                    Box::new(KeyedStore::new(TokenBucket::new(rate, burst), 1))
                };
                let admitted = simulate(&*store, None, instances, max, &arrivals);
                within(&admitted, |t| {
                    let accrued = (t as u128 * per_sec as u128).div_ceil(1_000_000_000) as u64;
                    burst + accrued + instances as u64 * max
                })?;
            }
        }

        /// With a fixed window, slices lapse at the window's end: every window admits at most
        /// its count, leases or not.
        #[test]
        fn leases_on_a_fixed_window_never_spill_into_the_next_window(
            instances in 1usize..8,
            burst in 1u64..100,
            max in 1u64..50,
            arrivals in proptest::collection::vec((0u8..8, gaps()), 1..600),
        ) {
            let window: Nanos = 50 * MS;
            let rate = Rate::new(burst, Duration::from_nanos(window)).expect("rate");
            let store = KeyedStore::new(FixedWindow::new(rate, burst), 1);
            let admitted = simulate(&store, Some(window), instances, max, &arrivals);
            let mut per_window = std::collections::HashMap::new();
            for t in admitted {
                *per_window.entry(t / window).or_insert(0u64) += 1;
            }
            for (w, n) in per_window {
                prop_assert!(n <= burst, "window {w}: {n} admitted, count {burst}");
            }
        }
    }
}
