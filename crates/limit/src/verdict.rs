//! The edge verdict cache: denials of global limits remembered until they expire.
//!
//! When Redis refuses a key, the answer stays the same until its retry time (nothing another
//! gateway does can make it admissible sooner, except a refund, which only makes us stricter
//! for a moment). Remembering the refusal lets a hammered key be refused from memory: a
//! thundering herd on a blocked key costs no Redis call at all.
//!
//! When a refusal expires, a whole herd of concurrent requests would reach Redis at once (each
//! of them sees the expiry before the first answer is back). So the first request to see it
//! expired becomes the probe (a compare-and-swap): it asks Redis, and until its answer (at most
//! `hold`) the others are still refused from memory. The probe then reports back: refused
//! again (a new entry), admitted with room left (the entry goes: traffic flows to Redis), or
//! admitted with nothing left (a short hold, after which the next request probes). The price:
//! after a reset, refusals for at most one Redis round trip that Redis might have admitted.
//!
//! Bounded: each shard holds at most its share of `max_entries`; inserting into a full shard
//! drops expired entries, then the entries expiring soonest. Keys are the caller's 64-bit
//! hashes; time is the caller's clock (no clock read here).

use crate::clock::Nanos;
use crate::shards::Sharding;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the cache says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// Nothing known: ask Redis.
    Miss,
    /// Refused for this much longer: answer from memory.
    Refused(Nanos),
    /// The refusal just expired and this caller is the one to ask Redis; report the answer
    /// with [`VerdictCache::insert`], [`VerdictCache::remove`] or [`VerdictCache::hold`].
    Probe,
}

#[repr(align(128))]
struct Shard {
    map: RwLock<HashMap<u64, AtomicU64, FixedState>>,
}

pub struct VerdictCache {
    shards: Box<[Shard]>,
    sharding: Sharding,
}

impl VerdictCache {
    pub fn new(max_entries: usize) -> Self {
        let sharding = Sharding::for_max(max_entries);
        Self {
            shards: (0..sharding.count())
                .map(|_| Shard {
                    map: RwLock::new(HashMap::with_hasher(FixedState::default())),
                })
                .collect(),
            sharding,
        }
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[self.sharding.of(key)]
    }

    /// The remaining wait if `key` was refused and its refusal has not expired at `now`
    /// (a look only: no probe is elected).
    #[inline]
    pub fn peek(&self, key: u64, now: Nanos) -> Option<Nanos> {
        let until = self
            .shard(key)
            .map
            .read()
            .get(&key)?
            .load(Ordering::Acquire);
        (until > now).then(|| until - now)
    }

    /// Whether `key` is refused at `now`; elects one probe per expiry (held for `hold`). A
    /// refusal writes nothing to the entry (only the shard's read-lock count is touched).
    #[inline]
    pub fn check(&self, key: u64, now: Nanos, hold: Nanos) -> Cached {
        let map = self.shard(key).map.read();
        let Some(cell) = map.get(&key) else {
            return Cached::Miss;
        };
        let mut until = cell.load(Ordering::Acquire);
        loop {
            if until > now {
                return Cached::Refused(until - now);
            }
            let held = now.saturating_add(hold.max(1));
            match cell.compare_exchange(until, held, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Cached::Probe,
                Err(actual) => until = actual,
            }
        }
    }

    /// Refuses `key` from memory until `until`, without a probe's answer (a probe admitted
    /// with nothing left: the next unit is not due before then).
    pub fn hold(&self, key: u64, until: Nanos, now: Nanos) {
        self.insert(key, until, now)
    }

    /// Remembers that `key` is refused until `until`.
    pub fn insert(&self, key: u64, until: Nanos, now: Nanos) {
        let mut map = self.shard(key).map.write();
        if map.len() >= self.sharding.cap && !map.contains_key(&key) {
            map.retain(|_, u| u.load(Ordering::Relaxed) > now);
            if map.len() >= self.sharding.cap {
                // Still full of live refusals: forget the ones that end soonest (at most an
                // eighth, so the sweep is amortised); they cost one Redis call each when asked.
                let excess = (map.len() - self.sharding.cap + 1).max(self.sharding.cap / 8);
                let mut ends: Vec<Nanos> =
                    map.values().map(|u| u.load(Ordering::Relaxed)).collect();
                let (_, &mut cutoff, _) = ends.select_nth_unstable(excess - 1);
                let mut dropped = 0;
                map.retain(|_, u| {
                    let drop = dropped < excess && u.load(Ordering::Relaxed) <= cutoff;
                    dropped += drop as usize;
                    !drop
                });
            }
        }
        match map.get(&key) {
            Some(cell) => cell.store(until, Ordering::Release),
            None => {
                map.insert(key, AtomicU64::new(until));
            }
        }
    }

    /// Forgets `key` (a probe found room again, or its state was changed from here).
    /// An elected probe that was not sent (another limit refused the request first): the
    /// refusal stays known, due for a probe by the next request.
    pub fn release(&self, key: u64, now: Nanos) {
        if let Some(cell) = self.shard(key).map.read().get(&key) {
            cell.store(now, Ordering::Release);
        }
    }

    pub fn remove(&self, key: u64) {
        self.shard(key).map.write().remove(&key);
    }

    /// Entries still refusing at `now` (expired ones linger until a full shard sweeps them).
    pub fn live(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.map
                    .read()
                    .values()
                    .filter(|u| u.load(Ordering::Relaxed) > now)
                    .count()
            })
            .sum()
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
