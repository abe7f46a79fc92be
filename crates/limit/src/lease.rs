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
//! **A dry key.** Driven past its limit, a key's store has nothing left: every ask would get
//! the one unit that came back, and every neighbour ask one more (two store calls per admitted
//! request, worse than exact mode). Instead, once the store refuses the key or gives its last
//! units, the key is *dry* on this gateway: it is refused here, without asking, until this
//! gateway's share of the refill (the emission interval times the instances) holds a useful
//! slice (half of `max`); then one request asks for that share, and its neighbours wait for it
//! rather than ask each. A gateway that got less than its share asks again sooner, so a busier
//! gateway does not take the others' share. A key stays dry until an ask finds a useful slice
//! left besides what it took (its traffic is back under the limit). No wait lasts past `ttl`, since other gateways'
//! unspent units come back to the store by then. Waiting only refuses more, so the bound
//! holds; a dry key costs about `2 / max` store calls per admitted request (checked by the
//! saturation proptest: at most 0.1 at 10x and 50x the rate, skewed traffic, 95 % of the rate
//! admitted, no gateway starved).
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
    /// How long this gateway's share of the store's refill takes to bring one unit: the
    /// limit's emission interval times the instances sharing it (0: never wait, ask).
    pub unit_share: Nanos,
}

impl LeasePolicy {
    /// Slices sized for half a second of a key's traffic, given back after one second.
    pub fn new(max: u64) -> Self {
        Self {
            max: max.max(1),
            horizon: 500_000_000,
            ttl: 1_000_000_000,
            unit_share: 0,
        }
    }

    /// [`LeasePolicy::new`] for a limit whose store refills one unit every `interval`, shared
    /// by `instances` gateways: a key the store has run dry of waits for a useful slice.
    pub fn refilled(max: u64, interval: Nanos, instances: u64) -> Self {
        Self {
            unit_share: interval.saturating_mul(instances.max(1)),
            ..Self::new(max)
        }
    }

    /// The units worth one ask when the store is dry: half a slice.
    pub fn useful(&self) -> u64 {
        (self.max / 2).max(1)
    }

    /// How long a dry key waits before this gateway asks again: until its share of the
    /// refill holds a useful slice.
    pub fn dry_wait(&self) -> Nanos {
        self.useful().saturating_mul(self.unit_share)
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
    /// Refused here, without asking: the store ran dry of this key and this gateway's share
    /// of its refill holds no useful slice before `retry_after` (or an ask for one is out).
    Wait { retry_after: Nanos, give_back: u64 },
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
    /// A request is asking for a slice since then (its neighbours ask for one unit, or wait
    /// when the key is dry).
    asking_since: Option<Nanos>,
    /// The store ran dry of the key (it refused, or granted its last units): until
    /// `dry_until` this gateway asks nothing, and neighbours of an ask wait for it.
    dry: bool,
    dry_until: Nanos,
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
        if self.dry && p.unit_share > 0 {
            if now < self.dry_until {
                return Take::Wait {
                    retry_after: self.dry_until - now,
                    give_back,
                };
            }
            if self.asking(now, p) {
                // The one ask for this key is out: its neighbours wait for it, they do not
                // each ask for the unit that may have come back.
                return Take::Wait {
                    retry_after: p.unit_share.max(1),
                    give_back,
                };
            }
        }
        if self.asking(now, p) {
            return Take::Ask { want: 1, give_back };
        }
        let want = if self.dry && p.unit_share > 0 {
            // Dry: one ask per period for this gateway's share of the refill, no more, so
            // that a busier neighbour gateway does not take the others' share.
            p.useful()
        } else {
            self.next_size(now, p)
        };
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
        // The store gave its last units: once they are spent, wait for a useful slice. A dry
        // key stays dry (one ask per period for this gateway's share) until an ask leaves half
        // a slice in the store: its traffic is back under the limit.
        self.dry = p.unit_share > 0
            && if self.dry {
                g.remaining < p.useful()
            } else {
                g.remaining == 0
            };
        // The next ask waits for this gateway's share of the refill to bring back what it
        // got (a quarter slice at least): a gateway that got little asks again sooner, one
        // that got a whole share waits a whole period, so the fleet's shares even out.
        self.dry_until = if self.dry {
            let got = granted.max(p.useful() / 4).min(p.useful());
            // Never past ttl: other gateways' unspent units come back to the store by then.
            now.saturating_add(got.saturating_mul(p.unit_share).min(p.ttl))
        } else {
            0
        };
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

    /// An ask that was not made after all (another limit refused the request), or that the
    /// store could not answer: nothing is held.
    pub fn refused(&mut self, want: u64) {
        if want > 1 {
            self.asking_since = None;
        }
    }

    /// The store refused an ask: the key is dry. Returns how long this gateway refuses it
    /// without asking: until the store would admit (`retry_after`), and at least until its
    /// share of the refill holds a useful slice.
    pub fn store_refused(
        &mut self,
        now: Nanos,
        want: u64,
        retry_after: Nanos,
        p: &LeasePolicy,
    ) -> Nanos {
        self.refused(want);
        if p.unit_share == 0 {
            return retry_after;
        }
        // (The wait of its own never past ttl: other gateways' unspent units come back by
        // then. The store's retry_after is the store's.)
        let hold = retry_after.max((p.dry_wait() / 2).min(p.ttl));
        self.dry = true;
        self.dry_until = now.saturating_add(hold);
        hold
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
        self.held == 0 && !self.asking(now, p) && now >= self.dry_until
    }
}

#[cfg(test)]
mod tests;
