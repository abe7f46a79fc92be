//! A bounded cache of auth answers (verified tokens, checked passwords, an auth service's
//! answers), keyed by a 128-bit SipHash of the credentials under a key drawn per cache: the
//! credentials themselves are never kept, and no client can aim two credentials at one entry.
//!
//! Bounded in entries: when full, expired entries are dropped; when still full, the new answer
//! is not kept (the next request asks again). Never past an entry's own deadline.

use parking_lot::Mutex;
use siphasher::sip128::{Hasher128, SipHasher13};
use std::collections::HashMap;
use std::hash::Hasher;
use std::time::Instant;

const SHARDS: usize = 16;

pub struct TtlCache<V> {
    keys: (u64, u64),
    shards: Vec<Mutex<HashMap<u128, (Instant, V)>>>,
    per_shard: usize,
}

impl<V: Clone> TtlCache<V> {
    /// At most `capacity` entries (rounded up to a multiple of the shard count).
    pub fn new(capacity: usize) -> Self {
        Self {
            keys: (fastrand::u64(..), fastrand::u64(..)),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    /// The key of these parts (each length-prefixed: `("ab", "c")` and `("a", "bc")` differ).
    pub fn key<'a>(&self, parts: impl IntoIterator<Item = &'a [u8]>) -> u128 {
        let mut h = SipHasher13::new_with_keys(self.keys.0, self.keys.1);
        for p in parts {
            h.write_usize(p.len());
            h.write(p);
        }
        h.finish128().as_u128()
    }

    fn shard(&self, key: u128) -> &Mutex<HashMap<u128, (Instant, V)>> {
        &self.shards[(key as usize) % SHARDS]
    }

    /// The answer kept for `key`, unless it has expired.
    pub fn get(&self, key: u128, now: Instant) -> Option<V> {
        let mut shard = self.shard(key).lock();
        match shard.get(&key) {
            Some((until, v)) if *until > now => Some(v.clone()),
            Some(_) => {
                shard.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps `v` until `until` (when there is room).
    pub fn insert(&self, key: u128, until: Instant, v: V, now: Instant) {
        if until <= now {
            return;
        }
        let mut shard = self.shard(key).lock();
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            shard.retain(|_, (u, _)| *u > now);
            if shard.len() >= self.per_shard {
                return;
            }
        }
        shard.insert(key, (until, v));
    }

    /// Entries held (expired ones included until they are met).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bounded_and_never_past_deadline() {
        let c: TtlCache<u32> = TtlCache::new(32);
        let now = Instant::now();
        let later = now + Duration::from_secs(10);
        for i in 0..1000u32 {
            let k = c.key([i.to_le_bytes().as_slice()]);
            c.insert(k, later, i, now);
        }
        assert!(c.len() <= 32, "{}", c.len());
        let k = c.key([b"a".as_slice(), b"bc".as_slice()]);
        assert_ne!(k, c.key([b"ab".as_slice(), b"c".as_slice()]));
        let c: TtlCache<u32> = TtlCache::new(32);
        c.insert(k, later, 7, now);
        assert_eq!(c.get(k, now), Some(7));
        assert_eq!(c.get(k, later), None, "expired at its deadline");
        // Full of live entries: a new one is not kept; once they expire, room again.
        for i in 0..1000u32 {
            c.insert(c.key([i.to_le_bytes().as_slice()]), later, i, now);
        }
        let fresh = c.key([b"fresh".as_slice()]);
        c.insert(fresh, later + Duration::from_secs(10), 1, later);
        assert_eq!(c.get(fresh, later), Some(1));
    }
}
