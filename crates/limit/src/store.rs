//! Keyed limiter state: one state per key per process, shared by every worker thread.
//!
//! Why not a ready-made cache: a limiter needs an atomic get-or-insert (two threads seeing a
//! new key at once must share one bucket, or the burst is granted twice) and eviction that
//! knows which states are at rest (a full bucket can be dropped with no effect at all). Neither
//! dashmap (no per-shard sweep without its raw API) nor Pingora's TinyUFO (no get-or-insert)
//! offer both, so this is a small sharded map over `hashbrown` and `parking_lot`.
//!
//! - Keys are 64-bit hashes made by the caller with a per-process keyed hasher: the map never
//!   stores a raw identity, and fixed-size keys keep the hot path free of allocation.
//! - Locking: shards picked by the key's top bits, each a read-write lock around its table. A
//!   decision on a known key takes the shard's read lock (shared with every other reader) and
//!   updates the key's state with a compare-and-swap ([`StateCell`]): threads deciding at once,
//!   even on one key, never wait for each other. Only inserting a new key takes the write lock.
//!   There is no global lock.
//! - Bounds: each shard holds at most its share of `max_keys`. Inserting into a full shard first
//!   drops every state at rest (lossless), then, if still above 7/8 of its share, the least
//!   recently active states (lossy: counted in [`StoreStats::evicted_active`]). Sweeping down to
//!   7/8 amortises the O(shard) sweep over many inserts, so a flood of new keys stays O(1).

use crate::algorithm::Algorithm;
use crate::cell::StateCell;
use crate::clock::Nanos;
use crate::decision::Decision;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The default bound on keys per limit.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// Counters of a store, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub keys: usize,
    /// States dropped at rest: no effect on decisions.
    pub evicted_idle: u64,
    /// States dropped while not at rest, because the bound was reached: those keys start over.
    pub evicted_active: u64,
    /// Bytes held by the tables (slots and control bytes), not counting the shard headers.
    pub table_bytes: usize,
}

/// The dynamic face of a keyed limiter, as the proxy sees it.
pub trait LocalLimiter: Send + Sync + 'static {
    fn acquire(&self, key: u64, now: Nanos, cost: u64) -> Decision;
    fn peek(&self, key: u64, now: Nanos, cost: u64) -> Decision;
    fn refund(&self, key: u64, now: Nanos, cost: u64);
    fn stats(&self) -> StoreStats;
}

// Padding each shard to its own cache line keeps two threads on two keys from sharing one.
#[repr(align(128))]
struct Shard<C> {
    map: RwLock<HashMap<u64, C, FixedState>>,
}

pub struct KeyedStore<A: Algorithm> {
    alg: A,
    shards: Box<[Shard<A::Cell>]>,
    shard_bits: u32,
    shard_cap: usize,
    evicted_idle: AtomicU64,
    evicted_active: AtomicU64,
}

impl<A: Algorithm> KeyedStore<A> {
    pub fn new(alg: A, max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        // Enough shards to keep contention away, few enough that each holds a useful share.
        let shards = (max_keys / 256).clamp(1, 64).next_power_of_two().min(64);
        let shard_bits = shards.trailing_zeros();
        let shard_cap = max_keys.div_ceil(shards);
        let shards = (0..shards)
            .map(|_| Shard {
                map: RwLock::new(HashMap::with_hasher(FixedState::default())),
            })
            .collect();
        Self {
            alg,
            shards,
            shard_bits,
            shard_cap,
            evicted_idle: AtomicU64::new(0),
            evicted_active: AtomicU64::new(0),
        }
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard<A::Cell> {
        let i = if self.shard_bits == 0 {
            0
        } else {
            (key >> (64 - self.shard_bits)) as usize
        };
        &self.shards[i]
    }

    /// Makes room for one more key in a full shard (see the module docs).
    fn make_room(&self, map: &mut HashMap<u64, A::Cell, FixedState>, now: Nanos) {
        let before = map.len();
        map.retain(|_, c| !c.read(|s| self.alg.at_rest(s, now)));
        self.evicted_idle
            .fetch_add((before - map.len()) as u64, Ordering::Relaxed);
        let target = self.shard_cap - self.shard_cap / 8;
        if map.len() < self.shard_cap {
            return;
        }
        let excess = map.len() - target.min(self.shard_cap - 1);
        let mut ages: Vec<Nanos> = map
            .values()
            .map(|c| c.read(|s| self.alg.last_active(s)))
            .collect();
        let (_, &mut cutoff, _) = ages.select_nth_unstable(excess - 1);
        let mut dropped = 0usize;
        map.retain(|_, c| {
            if dropped < excess && c.read(|s| self.alg.last_active(s)) <= cutoff {
                dropped += 1;
                false
            } else {
                true
            }
        });
        self.evicted_active
            .fetch_add(dropped as u64, Ordering::Relaxed);
    }

    /// Updates the key's state with `f` (see [`StateCell::update`]), creating the state (and
    /// making room) if the key is new.
    #[inline]
    fn update<R>(&self, key: u64, now: Nanos, mut f: impl FnMut(&mut A::State) -> R) -> R {
        let shard = self.shard(key);
        if let Some(c) = shard.map.read().get(&key) {
            return c.update(&mut f);
        }
        let mut map = shard.map.write();
        if map.len() >= self.shard_cap && !map.contains_key(&key) {
            self.make_room(&mut map, now);
        }
        map.entry(key)
            .or_insert_with(|| A::Cell::new(self.alg.new_state(now)))
            .update(f)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.read().len()).sum()
    }

    /// Drops the key's state: it starts afresh.
    pub fn forget(&self, key: u64) {
        self.shard(key).map.write().remove(&key);
    }

    /// Drops every key's state.
    pub fn forget_all(&self) {
        for s in self.shards.iter() {
            s.map.write().clear();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Upper bound on keys this store holds.
    pub fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }
}

impl<A: Algorithm> LocalLimiter for KeyedStore<A> {
    #[inline]
    fn acquire(&self, key: u64, now: Nanos, cost: u64) -> Decision {
        self.update(key, now, |s| self.alg.acquire(s, now, cost))
    }

    fn peek(&self, key: u64, now: Nanos, cost: u64) -> Decision {
        match self.shard(key).map.read().get(&key) {
            Some(c) => c.read(|s| self.alg.peek(s, now, cost)),
            None => self.alg.peek(&self.alg.new_state(now), now, cost),
        }
    }

    fn refund(&self, key: u64, now: Nanos, cost: u64) {
        if let Some(c) = self.shard(key).map.read().get(&key) {
            c.update(|s| self.alg.refund(s, now, cost));
        }
    }

    fn stats(&self) -> StoreStats {
        let slot = std::mem::size_of::<(u64, A::Cell)>() + 1;
        let (keys, table_bytes) = self.shards.iter().fold((0, 0), |(k, b), s| {
            let m = s.map.read();
            let buckets = match m.capacity() {
                0 => 0,
                c => (c * 8 / 7).next_power_of_two(),
            };
            (k + m.len(), b + buckets * slot)
        });
        StoreStats {
            keys,
            evicted_idle: self.evicted_idle.load(Ordering::Relaxed),
            evicted_active: self.evicted_active.load(Ordering::Relaxed),
            table_bytes,
        }
    }
}
