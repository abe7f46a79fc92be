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
//! - Bounds: each shard holds at most its share of `max_keys`, and a new key always gets a
//!   state (a limit never fails open). Inserting into a full shard makes room in this order:
//!   1. every state at rest (lossless: [`StoreStats::evicted_idle`]);
//!   2. if the shard is still full, down to 7/8 of its share, the states that would admit a
//!      request of cost 1 now, lowest [`Algorithm::pressure`] first (those whose keys get the
//!      least back);
//!   3. refused states (a request of cost 1 would be refused now) only if the shard holds no
//!      other state, lowest pressure first (those nearest the end of their refusal).
//!
//!   Steps 2 and 3 are lossy ([`StoreStats::evicted_active`]; step 3 also
//!   [`StoreStats::evicted_refused`]). The guarantee: **a key refused at the moment its shard
//!   makes room is evicted only if every other key left in that shard (those at rest dropped)
//!   is refused too**. So a flood of fresh keys cannot lift a refusal while the fresh keys have
//!   allowance left after their request (any `burst` above 1); lifting one takes a whole shard
//!   of refused keys (a shard holds at least 1/64 of `max_keys`), and even then the refusals
//!   nearest their end go first. With `burst = 1` every key just used is refused: a flood
//!   then evicts refusals nearest their end, each worth at most one request.
//! - Cost: sweeping down to 7/8 amortises the O(shard) sweep over an eighth of a shard's
//!   inserts, so a flood of new keys stays O(1) per key. When step 2 cannot free an eighth
//!   (the shard is mostly refused keys) the keys arriving next are queued, and for an eighth
//!   of a shard's inserts each evicts the oldest of them that is not refused, in O(1), instead
//!   of sweeping; the next sweep comes after those (sooner if no such key is left).
//! - Evidence tables ([`KeyedStore::acquire_or_skip`], the block ladder's refusal counts): a
//!   state there is evidence against its key, so dropping it is a pardon. There a new key may
//!   displace only a state weighing no more than the new key's own state will (at rest, or
//!   one request's worth at most), and when no such state is left the new key goes uncounted
//!   ([`StoreStats::untracked`]) instead of displacing heavier evidence: a flood of fresh keys
//!   cannot wipe a key that has more against it than each of them. Cost: one O(shard) scan
//!   finds up to an eighth of a shard of such states, lightest first, which the next newcomers
//!   take in O(1) each; a scan that finds fewer leaves the rest of that eighth uncounted
//!   without a scan, so a flood stays O(1) per key.
//! - Not done: admission by frequency (TinyLFU, as Pingora's TinyUFO). A new key is always
//!   admitted, with a full allowance: exactly what dropping it later gives back, so the
//!   pressure order already puts it first in line.

use crate::algorithm::Algorithm;
use crate::cell::StateCell;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::shards::Sharding;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

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
    /// Of `evicted_active`, the states of refused keys (their shard held nothing else): a
    /// store too small for the keys it must hold back.
    pub evicted_refused: u64,
    /// Bytes held by the tables (slots and control bytes), not counting the shard headers.
    pub table_bytes: usize,
    /// New keys left without a state by [`KeyedStore::acquire_or_skip`]: their shard was full
    /// of heavier states.
    pub untracked: u64,
}

/// The dynamic face of a keyed limiter, as the proxy sees it.
pub trait LocalLimiter: Send + Sync + 'static {
    fn acquire(&self, key: u64, now: Nanos, cost: u64) -> Decision;
    fn peek(&self, key: u64, now: Nanos, cost: u64) -> Decision;
    fn refund(&self, key: u64, now: Nanos, cost: u64);
    /// Takes `cost` from `key` if this store holds a state for it, making none: a share that
    /// follows what another decider (Redis) admits for the keys it is watching.
    fn follow(&self, key: u64, now: Nanos, cost: u64);
    fn stats(&self) -> StoreStats;
}

// Padding each shard to its own cache line keeps two threads on two keys from sharing one.
#[repr(align(128))]
struct Shard<C> {
    table: RwLock<Table<C>>,
}

struct Table<C> {
    map: HashMap<u64, C, FixedState>,
    /// Evictions of newcomers left before the next sweep: set when the last sweep could not
    /// free an eighth of the shard without refused keys.
    cheap: usize,
    /// While `cheap`: keys inserted since that sweep, oldest first.
    newcomers: VecDeque<u64>,
    /// [`KeyedStore::acquire_or_skip`]: states light enough to give way to a new key, found by
    /// the last scan, heaviest first (the lightest is popped).
    light: Vec<u64>,
    /// [`KeyedStore::acquire_or_skip`]: new keys left to turn away before the next scan.
    skip: usize,
}

/// Where a state stands at the moment its shard makes room; the lowest is evicted first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Standing {
    Rest,
    Open(u64),
    Refused(u64),
}

pub struct KeyedStore<A: Algorithm> {
    alg: A,
    /// Made with the first key: a limit no request has reached holds no table (at cluster
    /// size, 5,000 limits held 41 MB of empty shards before; issue 40).
    shards: OnceLock<Box<[Shard<A::Cell>]>>,
    sharding: Sharding,
    evicted_idle: AtomicU64,
    evicted_active: AtomicU64,
    evicted_refused: AtomicU64,
    untracked: AtomicU64,
}

impl<A: Algorithm> KeyedStore<A> {
    pub fn new(alg: A, max_keys: usize) -> Self {
        Self {
            alg,
            shards: OnceLock::new(),
            sharding: Sharding::for_max(max_keys),
            evicted_idle: AtomicU64::new(0),
            evicted_active: AtomicU64::new(0),
            evicted_refused: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
        }
    }

    /// The key's shard, made with the others if this is the store's first key.
    #[inline]
    fn shard(&self, key: u64) -> &Shard<A::Cell> {
        let shards = self.shards.get_or_init(|| {
            (0..self.sharding.count())
                .map(|_| Shard {
                    table: RwLock::new(Table {
                        map: HashMap::with_hasher(FixedState::default()),
                        cheap: 0,
                        newcomers: VecDeque::new(),
                        light: Vec::new(),
                        skip: 0,
                    }),
                })
                .collect()
        });
        &shards[self.sharding.of(key)]
    }

    /// The key's shard if any key was ever stored (reads need not make the tables).
    #[inline]
    fn shard_if_made(&self, key: u64) -> Option<&Shard<A::Cell>> {
        self.shards.get().map(|s| &s[self.sharding.of(key)])
    }

    /// Every shard made (none before the first key).
    fn made(&self) -> &[Shard<A::Cell>] {
        self.shards.get().map_or(&[], |s| s)
    }

    /// One pressure and one peek per state: `pressure` is 0 exactly at rest (the trait's
    /// contract, checked by a proptest), so no separate `at_rest`.
    fn standing(&self, s: &A::State, now: Nanos) -> Standing {
        match self.alg.pressure(s, now) {
            0 => Standing::Rest,
            p if self.alg.peek(s, now, 1).is_allowed() => Standing::Open(p),
            p => Standing::Refused(p),
        }
    }

    /// Makes room for one more key in a full shard (see the module docs).
    fn make_room(&self, t: &mut Table<A::Cell>, now: Nanos) {
        while t.cheap > 0 {
            let Some(key) = t.newcomers.pop_front() else {
                break;
            };
            let standing = match t.map.get(&key) {
                Some(c) => c.read(|s| self.standing(s, now)),
                None => continue,
            };
            let counter = match standing {
                Standing::Refused(_) => continue,
                Standing::Rest => &self.evicted_idle,
                Standing::Open(_) => &self.evicted_active,
            };
            t.map.remove(&key);
            counter.fetch_add(1, Ordering::Relaxed);
            t.cheap -= 1;
            return;
        }
        t.cheap = 0;
        t.newcomers.clear();
        let before = t.map.len();
        let mut ranked = Vec::with_capacity(before);
        t.map
            .retain(|&key, c| match c.read(|s| self.standing(s, now)) {
                Standing::Rest => false,
                standing => {
                    ranked.push((standing, key));
                    true
                }
            });
        self.evicted_idle
            .fetch_add((before - t.map.len()) as u64, Ordering::Relaxed);
        if t.map.len() < self.sharding.cap {
            return;
        }
        let target = self.sharding.cap - self.sharding.cap / 8;
        let want = t.map.len() - target.min(self.sharding.cap - 1);
        let open = ranked
            .iter()
            .filter(|(s, _)| matches!(s, Standing::Open(_)))
            .count();
        // Refused keys go only when nothing else is left (the guarantee); short of an eighth,
        // the newcomers are the next victims.
        let n = if open == 0 { want } else { want.min(open) };
        if n < want {
            t.cheap = want;
        }
        ranked.select_nth_unstable(n - 1);
        let mut refused = 0u64;
        for (standing, key) in &ranked[..n] {
            t.map.remove(key);
            refused += matches!(standing, Standing::Refused(_)) as u64;
        }
        self.evicted_active.fetch_add(n as u64, Ordering::Relaxed);
        self.evicted_refused.fetch_add(refused, Ordering::Relaxed);
    }

    /// Updates the key's state with `f` (see [`StateCell::update`]), creating the state (and
    /// making room) if the key is new.
    #[inline]
    fn update<R>(&self, key: u64, now: Nanos, mut f: impl FnMut(&mut A::State) -> R) -> R {
        let shard = self.shard(key);
        if let Some(c) = shard.table.read().map.get(&key) {
            return c.update(&mut f);
        }
        let mut t = shard.table.write();
        if !t.map.contains_key(&key) {
            if t.map.len() >= self.sharding.cap {
                self.make_room(&mut t, now);
            }
            if t.cheap > 0 {
                // Bounded: older newcomers left out are found by the next sweep.
                if t.newcomers.len() > self.sharding.cap / 8 {
                    t.newcomers.pop_front();
                }
                t.newcomers.push_back(key);
            }
        }
        t.map
            .entry(key)
            .or_insert_with(|| A::Cell::new(self.alg.new_state(now)))
            .update(f)
    }

    /// Like [`LocalLimiter::acquire`], for a store of evidence against keys (the block ladder's
    /// refusal counts): a new key in a full shard displaces only a state weighing no more
    /// ([`Algorithm::pressure`]) than its own will once it took `cost`, lightest first; when
    /// none is left it gets no state and `None` is returned (counted in
    /// [`StoreStats::untracked`]). Known keys are never refused a decision. Use one of
    /// `acquire` and this per store (either keeps the bound).
    pub fn acquire_or_skip(&self, key: u64, now: Nanos, cost: u64) -> Option<Decision> {
        let shard = self.shard(key);
        if let Some(c) = shard.table.read().map.get(&key) {
            return Some(c.update(|s| self.alg.acquire(s, now, cost)));
        }
        let mut t = shard.table.write();
        if !t.map.contains_key(&key)
            && t.map.len() >= self.sharding.cap
            && !self.make_light_room(&mut t, now, cost)
        {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(
            t.map
                .entry(key)
                .or_insert_with(|| A::Cell::new(self.alg.new_state(now)))
                .update(|s| self.alg.acquire(s, now, cost)),
        )
    }

    /// Frees one slot of a full shard for a new key taking `cost`, by dropping a state that
    /// weighs no more than the new one will. False when there is none (see the module docs).
    fn make_light_room(&self, t: &mut Table<A::Cell>, now: Nanos, cost: u64) -> bool {
        let bar = {
            let mut s = self.alg.new_state(now);
            self.alg.acquire(&mut s, now, cost);
            self.alg.pressure(&s, now)
        };
        let pressure = |t: &Table<A::Cell>, key: &u64| {
            t.map
                .get(key)
                .map(|c| c.read(|s| self.alg.pressure(s, now)))
        };
        let mut scanned = false;
        loop {
            while let Some(key) = t.light.pop() {
                // Still as light? (It may have been refused again since, or forgotten.)
                match pressure(t, &key) {
                    Some(p) if p <= bar => {
                        t.map.remove(&key);
                        let counter = if p == 0 {
                            &self.evicted_idle
                        } else {
                            &self.evicted_active
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    _ => {}
                }
            }
            if t.skip > 0 || scanned {
                t.skip = t.skip.saturating_sub(1);
                return false;
            }
            scanned = true;
            let before = t.map.len();
            let mut light = Vec::new();
            t.map
                .retain(|&key, c| match c.read(|s| self.alg.pressure(s, now)) {
                    0 => false,
                    p => {
                        if p <= bar {
                            light.push((p, key));
                        }
                        true
                    }
                });
            self.evicted_idle
                .fetch_add((before - t.map.len()) as u64, Ordering::Relaxed);
            if t.map.len() < self.sharding.cap {
                return true;
            }
            // Up to an eighth of the shard, lightest first (popped from the end); ties go by
            // the keys, which are the caller's keyed hashes: no client can pick its place.
            let eighth = (self.sharding.cap / 8).max(1);
            if light.len() > eighth {
                light.select_nth_unstable(eighth - 1);
                light.truncate(eighth);
            }
            light.sort_unstable_by(|a, b| b.cmp(a));
            t.skip = eighth - light.len();
            t.light.clear();
            t.light.extend(light.into_iter().map(|(_, k)| k));
        }
    }

    pub fn len(&self) -> usize {
        self.made().iter().map(|s| s.table.read().map.len()).sum()
    }

    /// Whether the key has a state (one not evicted or forgotten since it was last used).
    pub fn contains(&self, key: u64) -> bool {
        self.shard_if_made(key)
            .is_some_and(|s| s.table.read().map.contains_key(&key))
    }

    /// Drops the key's state: it starts afresh.
    pub fn forget(&self, key: u64) {
        if let Some(s) = self.shard_if_made(key) {
            s.table.write().map.remove(&key);
        }
    }

    /// Drops every key's state.
    pub fn forget_all(&self) {
        for s in self.made() {
            let mut t = s.table.write();
            t.map.clear();
            t.newcomers.clear();
            t.cheap = 0;
            t.light.clear();
            t.skip = 0;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Upper bound on keys this store holds.
    pub fn capacity(&self) -> usize {
        self.sharding.cap * self.sharding.count()
    }
}

impl<A: Algorithm> LocalLimiter for KeyedStore<A> {
    #[inline]
    fn acquire(&self, key: u64, now: Nanos, cost: u64) -> Decision {
        self.update(key, now, |s| self.alg.acquire(s, now, cost))
    }

    fn peek(&self, key: u64, now: Nanos, cost: u64) -> Decision {
        if let Some(shard) = self.shard_if_made(key) {
            if let Some(c) = shard.table.read().map.get(&key) {
                return c.read(|s| self.alg.peek(s, now, cost));
            }
        }
        self.alg.peek(&self.alg.new_state(now), now, cost)
    }

    fn refund(&self, key: u64, now: Nanos, cost: u64) {
        if let Some(shard) = self.shard_if_made(key) {
            if let Some(c) = shard.table.read().map.get(&key) {
                c.update(|s| self.alg.refund(s, now, cost));
            }
        }
    }

    fn follow(&self, key: u64, now: Nanos, cost: u64) {
        if let Some(shard) = self.shard_if_made(key) {
            if let Some(c) = shard.table.read().map.get(&key) {
                c.update(|s| {
                    let _ = self.alg.acquire(s, now, cost);
                });
            }
        }
    }

    fn stats(&self) -> StoreStats {
        let slot = std::mem::size_of::<(u64, A::Cell)>() + 1;
        let (keys, table_bytes) = self.made().iter().fold((0, 0), |(k, b), s| {
            let t = s.table.read();
            let buckets = match t.map.capacity() {
                0 => 0,
                c => (c * 8 / 7).next_power_of_two(),
            };
            let queue = (t.newcomers.capacity() + t.light.capacity()) * std::mem::size_of::<u64>();
            (k + t.map.len(), b + buckets * slot + queue)
        });
        StoreStats {
            keys,
            evicted_idle: self.evicted_idle.load(Ordering::Relaxed),
            evicted_active: self.evicted_active.load(Ordering::Relaxed),
            evicted_refused: self.evicted_refused.load(Ordering::Relaxed),
            table_bytes,
            untracked: self.untracked.load(Ordering::Relaxed),
        }
    }
}
