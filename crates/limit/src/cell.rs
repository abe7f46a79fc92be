//! Where one key's state lives: a cell updated as a whole in one atomic step.
//!
//! A decision reads the state, computes the next one with the algorithm's pure function and
//! publishes it with a compare-and-swap, retrying if another thread got there first. So two
//! threads on one key never lock or park, and a decision that changes nothing (a denial with no
//! refill) writes nothing, which keeps a hammered, denied key's cache line shared.

use portable_atomic::AtomicU128;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// Atomic storage for a state of type `S`.
pub trait StateCell<S>: Send + Sync + 'static {
    fn new(s: S) -> Self;
    fn load(&self) -> S;
    /// Reads the state in place (no copy of a large state).
    fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.load())
    }
    /// Applies `f` to a copy of the state and publishes the result atomically. `f` may run more
    /// than once (on contention) and must be a pure function of the state it is given.
    fn update<R>(&self, f: impl FnMut(&mut S) -> R) -> R;
}

impl StateCell<u64> for AtomicU64 {
    fn new(s: u64) -> Self {
        AtomicU64::new(s)
    }

    fn load(&self) -> u64 {
        AtomicU64::load(self, Ordering::Acquire)
    }

    #[inline]
    fn update<R>(&self, mut f: impl FnMut(&mut u64) -> R) -> R {
        let mut cur = AtomicU64::load(self, Ordering::Acquire);
        loop {
            let mut next = cur;
            let r = f(&mut next);
            if next == cur {
                return r;
            }
            match self.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return r,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A state of two u64 words in one 128-bit atomic (cmpxchg16b on x86-64, detected at run time
/// by `portable-atomic`; a lock-based fallback elsewhere).
pub struct PairCell<S> {
    bits: AtomicU128,
    _state: PhantomData<fn() -> S>,
}

fn pack(p: (u64, u64)) -> u128 {
    (p.0 as u128) << 64 | p.1 as u128
}

fn unpack(b: u128) -> (u64, u64) {
    ((b >> 64) as u64, b as u64)
}

impl<S> StateCell<S> for PairCell<S>
where
    S: Copy + PartialEq + Into<(u64, u64)> + From<(u64, u64)> + 'static,
{
    fn new(s: S) -> Self {
        Self {
            bits: AtomicU128::new(pack(s.into())),
            _state: PhantomData,
        }
    }

    fn load(&self) -> S {
        S::from(unpack(self.bits.load(Ordering::Acquire)))
    }

    #[inline]
    fn update<R>(&self, mut f: impl FnMut(&mut S) -> R) -> R {
        let mut cur = self.bits.load(Ordering::Acquire);
        loop {
            let mut s = S::from(unpack(cur));
            let r = f(&mut s);
            let next = pack(s.into());
            if next == cur {
                return r;
            }
            match self
                .bits
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return r,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A state too large for one atomic (the sliding log's timestamps) behind a mutex held only for
/// the pure update. Contention is per key, never across keys.
pub struct MutexCell<S>(parking_lot::Mutex<S>);

impl<S: Clone + Send + 'static> StateCell<S> for MutexCell<S> {
    fn new(s: S) -> Self {
        Self(parking_lot::Mutex::new(s))
    }

    fn load(&self) -> S {
        self.0.lock().clone()
    }

    fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.0.lock())
    }

    fn update<R>(&self, mut f: impl FnMut(&mut S) -> R) -> R {
        f(&mut self.0.lock())
    }
}
