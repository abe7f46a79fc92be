//! The leases of one global limit on this gateway: one [`Lease`] per key, bounded.
//!
//! Sharded like the other keyed tables (read lock to decide on a known key, write lock only to
//! add one); each lease has its own small lock, held for a few arithmetic steps. A key gets an
//! entry when the store first admits it. A full shard first drops the leases that hold
//! nothing; if it is still full the new key gets no entry and stays exact (one store call per
//! request, nothing held): the bound costs Redis calls, never allowance or correctness.
//!
//! Slices that end while their key is quiet are found by [`Leases::sweep`], which the caller
//! runs periodically and which returns the units to give back to the store.

use crate::clock::Nanos;
use crate::lease::{Grant, Lease, LeasePolicy, Take};
use crate::shards::Sharding;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock};

#[repr(align(128))]
struct Shard {
    map: RwLock<HashMap<u64, Mutex<Lease>, FixedState>>,
}

pub struct Leases {
    policy: LeasePolicy,
    shards: Box<[Shard]>,
    sharding: Sharding,
}

impl Leases {
    pub fn new(policy: LeasePolicy, max_keys: usize) -> Self {
        let sharding = Sharding::for_max(max_keys);
        Self {
            policy,
            shards: (0..sharding.count())
                .map(|_| Shard {
                    map: RwLock::new(HashMap::with_hasher(FixedState::default())),
                })
                .collect(),
            sharding,
        }
    }

    pub fn policy(&self) -> &LeasePolicy {
        &self.policy
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[self.sharding.of(key)]
    }

    /// One request on `key`: admitted from its slice, or what to ask the store.
    #[inline]
    pub fn take(&self, key: u64, now: Nanos) -> Take {
        match self.shard(key).map.read().get(&key) {
            Some(l) => l.lock().take(now, &self.policy),
            None => Take::Ask {
                want: 1,
                give_back: 0,
            },
        }
    }

    /// The store admitted an ask of `want` units for `key`: the remaining to report.
    pub fn grant(&self, key: u64, now: Nanos, want: u64, g: Grant) -> u64 {
        let shard = self.shard(key);
        if let Some(l) = shard.map.read().get(&key) {
            return l.lock().grant(now, want, g, &self.policy);
        }
        let mut map = shard.map.write();
        if map.len() >= self.sharding.cap && !map.contains_key(&key) {
            map.retain(|_, l| !l.get_mut().is_idle(now, &self.policy));
            if map.len() >= self.sharding.cap {
                // Every entry holds units: this key stays exact (want was 1: nothing to hold).
                return g.remaining;
            }
        }
        let mut lease = Lease::default();
        lease.last_seen = now;
        let r = lease.grant(now, want, g, &self.policy);
        map.insert(key, Mutex::new(lease));
        r
    }

    /// The store refused an ask of `want` units for `key`, or could not be asked.
    pub fn refused(&self, key: u64, want: u64) {
        if let Some(l) = self.shard(key).map.read().get(&key) {
            l.lock().refused(want);
        }
    }

    /// The store refused `key`: how long this gateway refuses it without asking (see
    /// [`Lease::store_refused`]). A key without a lease yet gets one, so that its dry spell is
    /// remembered.
    pub fn store_refused(&self, key: u64, now: Nanos, want: u64, retry_after: Nanos) -> Nanos {
        let shard = self.shard(key);
        if let Some(l) = shard.map.read().get(&key) {
            return l.lock().store_refused(now, want, retry_after, &self.policy);
        }
        if self.policy.unit_share == 0 {
            return retry_after;
        }
        let mut map = shard.map.write();
        if map.len() >= self.sharding.cap && !map.contains_key(&key) {
            map.retain(|_, l| !l.get_mut().is_idle(now, &self.policy));
            if map.len() >= self.sharding.cap {
                return retry_after;
            }
        }
        let l = map.entry(key).or_insert_with(|| {
            let mut lease = Lease::default();
            lease.last_seen = now;
            Mutex::new(lease)
        });
        l.get_mut()
            .store_refused(now, want, retry_after, &self.policy)
    }

    /// A unit `key`'s slice admitted comes back. False: its slice ended, the caller gives the
    /// unit back to the store.
    pub fn put_back(&self, key: u64, now: Nanos) -> bool {
        self.shard(key)
            .map
            .read()
            .get(&key)
            .is_some_and(|l| l.lock().put_back(now))
    }

    /// Ends the slices due by `now`; pushes `(key, units)` to give back to the store. Leases
    /// quiet for ten `ttl`s and holding nothing are dropped. Under each shard's read lock
    /// (decisions go on meanwhile); the write lock only when there is something to drop.
    pub fn sweep(&self, now: Nanos, out: &mut Vec<(u64, u64)>) {
        let quiet = self.policy.ttl.saturating_mul(10);
        let gone =
            |l: &Lease| l.is_idle(now, &self.policy) && now.saturating_sub(l.last_seen) > quiet;
        for s in self.shards.iter() {
            let mut drop_some = false;
            for (&k, l) in s.map.read().iter() {
                let mut l = l.lock();
                let give = l.end_if_due(now);
                if give > 0 {
                    out.push((k, give));
                }
                drop_some |= gone(&l);
            }
            if drop_some {
                s.map.write().retain(|_, l| !gone(l.get_mut()));
            }
        }
    }

    /// Ends every slice (shutdown): pushes `(key, units)` to give back to the store.
    pub fn drain(&self, out: &mut Vec<(u64, u64)>) {
        for s in self.shards.iter() {
            for (k, l) in s.map.write().drain() {
                let give = l.into_inner().end();
                if give > 0 {
                    out.push((k, give));
                }
            }
        }
    }

    /// Units held over all keys.
    pub fn held(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.map.read().values().map(|l| l.lock().held()).sum::<u64>())
            .sum()
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn g(granted: u64) -> Grant {
        Grant {
            granted,
            remaining: 50,
            reset: MS,
            lapse: None,
        }
    }

    /// Drives `key` for `n` requests a millisecond apart, granting every ask in full.
    fn drive(l: &Leases, key: u64, t: &mut Nanos, n: usize) -> usize {
        let mut asks = 0;
        for _ in 0..n {
            *t += MS;
            if let Take::Ask { want, .. } = l.take(key, *t) {
                asks += 1;
                l.grant(key, *t, want, g(want));
            }
        }
        asks
    }

    #[test]
    fn a_hot_key_asks_rarely_and_what_it_holds_goes_back_when_it_falls_quiet() {
        let l = Leases::new(LeasePolicy::new(32), 1000);
        let mut t = 0;
        let asks = drive(&l, 7, &mut t, 1000);
        assert!(asks < 1000 / 25, "{asks} asks for 1000 requests");
        let held = l.held();
        assert!(held > 0 && held < 32);
        let mut out = Vec::new();
        l.sweep(t + 1, &mut out);
        assert!(out.is_empty(), "not yet due");
        l.sweep(t + l.policy().ttl, &mut out);
        assert_eq!(out, vec![(7, held)]);
        assert_eq!(l.held(), 0);
        // Quiet for long enough: the entry goes.
        l.sweep(t + 11 * l.policy().ttl, &mut out);
        assert!(l.is_empty());
    }

    #[test]
    fn a_full_table_keeps_new_keys_exact_and_drops_idle_leases_first() {
        let l = Leases::new(LeasePolicy::new(32), 4);
        let mut t = 0;
        for k in 0..4 {
            drive(&l, k, &mut t, 50);
        }
        assert_eq!(l.len(), 4);
        // Every entry holds units: a new key gets no entry and asks for one unit each time.
        assert_eq!(drive(&l, 99, &mut t, 20), 20);
        assert_eq!(l.len(), 4);
        // Their slices end and go back: the table makes room.
        let mut out = Vec::new();
        l.sweep(t + l.policy().ttl, &mut out);
        assert_eq!(out.len(), 4);
        t += l.policy().ttl;
        drive(&l, 99, &mut t, 1);
        assert!(drive(&l, 99, &mut t, 100) < 20);
        let mut rest = Vec::new();
        l.drain(&mut rest);
        assert_eq!(rest.iter().map(|(k, _)| *k).collect::<Vec<_>>(), vec![99]);
        assert!(l.is_empty());
    }
}
