//! Rate-limit algorithms as plain state machines: no locking, no clock, no storage.
//!
//! Each algorithm owns a small `State` per key and answers `acquire`, `peek` and `refund` for a
//! given `now`. Storage ([`crate::KeyedStore`]) decides where states live; the proxy decides
//! what a decision means. All arithmetic saturates; a `now` earlier than a state's last update
//! (a clock going backwards) counts as no time passed.

use crate::cell::{PairCell, StateCell};
use crate::clock::Nanos;
use crate::decision::{Decision, Rate};
use std::sync::atomic::AtomicU64;

/// The algorithms a limit can use. What each can do (its script, leases, windows, cached
/// refusals, ...) is its row of the capability table: [`AlgorithmKind::caps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlgorithmKind {
    TokenBucket,
    Gcra,
    SlidingWindow,
    FixedWindow,
    SlidingLog,
    LeakyBucket,
    /// Requests in flight per key (`burst` is the cap; no rate).
    Concurrency,
    /// envoyproxy/ratelimit's counting: a fixed window of the whole period from the Unix
    /// epoch, every hit counted, refused ones too ([`crate::CountingWindow`]).
    CountingWindow,
    /// A calendar quota (`quota = "N/month"`): not named by `algorithm`, chosen by `quota`.
    Quota,
}

impl AlgorithmKind {
    /// The algorithms `algorithm = "..."` names: the table's rows but the last, the quota
    /// (chosen by `quota = "..."`; the capability test checks that this is so).
    pub const ALL: [AlgorithmKind; 8] = {
        let e = Self::EVERY;
        [e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]
    };

    pub fn name(&self) -> &'static str {
        self.caps().name
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether `burst` is a count per window rather than a bucket's capacity.
    pub fn is_window(&self) -> bool {
        self.caps().window
    }
}

/// One rate-limit algorithm. `State` is what it keeps per key; `Cell` is how that state is
/// stored so that an update is one atomic step (see [`StateCell`]).
pub trait Algorithm: Send + Sync + 'static {
    type State: Clone + PartialEq + Send + Sync + 'static;
    type Cell: StateCell<Self::State>;

    /// The state of a key seen for the first time at `now`: a full allowance.
    fn new_state(&self, now: Nanos) -> Self::State;
    /// Takes `cost` units if they are available; otherwise leaves the state as it was.
    fn acquire(&self, state: &mut Self::State, now: Nanos, cost: u64) -> Decision;
    /// What `acquire` would answer, without taking anything.
    fn peek(&self, state: &Self::State, now: Nanos, cost: u64) -> Decision;
    /// Gives back `cost` units taken by `acquire` (another limit denied the request).
    fn refund(&self, state: &mut Self::State, now: Nanos, cost: u64);
    /// True when the state is indistinguishable from a new one: dropping it loses nothing.
    fn at_rest(&self, state: &Self::State, now: Nanos) -> bool;
    /// How far the state is from rest at `now`: 0 exactly when [`Algorithm::at_rest`], larger
    /// the more its key would get back if the state were dropped (the buckets: the time until
    /// full again; the windows: the units counted against the key). Only compared between
    /// states of one algorithm at one `now`: a full [`crate::KeyedStore`] drops the lowest.
    fn pressure(&self, state: &Self::State, now: Nanos) -> u64;
}

/// A token bucket: capacity `burst`, refilled continuously at `rate`, exact integer arithmetic.
///
/// State is the whole tokens held and the time up to which refill has been credited. Refill
/// credits only whole tokens and advances the credit time by exactly the time those tokens
/// took (rounded up), so no fraction is ever lost or invented across calls.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    rate: Rate,
    burst: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketState {
    tokens: u64,
    credited_to: Nanos,
}

impl From<TokenBucketState> for (u64, u64) {
    fn from(s: TokenBucketState) -> Self {
        (s.tokens, s.credited_to)
    }
}

impl From<(u64, u64)> for TokenBucketState {
    fn from((tokens, credited_to): (u64, u64)) -> Self {
        Self {
            tokens,
            credited_to,
        }
    }
}

impl TokenBucket {
    /// `burst` is the capacity; at least 1.
    pub fn new(rate: Rate, burst: u64) -> Self {
        Self {
            rate,
            burst: burst.max(1),
        }
    }

    /// The state as of `now`, refilled (pure: used by both `peek` and `acquire`).
    fn refilled(&self, s: &TokenBucketState, now: Nanos) -> TokenBucketState {
        if s.tokens >= self.burst || now <= s.credited_to {
            // Full (or the clock went backwards): refill time starts counting from now on.
            let credited_to = if s.tokens >= self.burst {
                now.max(s.credited_to)
            } else {
                s.credited_to
            };
            return TokenBucketState {
                tokens: s.tokens.min(self.burst),
                credited_to,
            };
        }
        let added = self.rate.units_in(now - s.credited_to);
        let room = (self.burst - s.tokens) as u128;
        if added >= room {
            TokenBucketState {
                tokens: self.burst,
                credited_to: now,
            }
        } else {
            let added = added as u64; // < room <= u64::MAX
            TokenBucketState {
                tokens: s.tokens + added,
                credited_to: s.credited_to + self.rate.time_for(added).min(now - s.credited_to),
            }
        }
    }

    /// Time from `now` until the bucket holds `want` tokens.
    fn time_until(&self, s: &TokenBucketState, now: Nanos, want: u64) -> Nanos {
        if s.tokens >= want {
            return 0;
        }
        let needed = self.rate.time_for(want - s.tokens);
        let already = now.saturating_sub(s.credited_to);
        needed.saturating_sub(already).max(1)
    }

    fn decide(&self, s: &TokenBucketState, now: Nanos, cost: u64) -> Decision {
        if s.tokens >= cost {
            let after = TokenBucketState {
                tokens: s.tokens - cost,
                credited_to: s.credited_to,
            };
            Decision::Allow {
                remaining: after.tokens,
                reset: self.time_until(&after, now, self.burst),
                delay: 0,
            }
        } else {
            // A cost above the capacity can never pass: report the time to a full bucket.
            let want = cost.min(self.burst);
            Decision::Deny {
                retry_after: self.time_until(s, now, want).max(1),
            }
        }
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;
    type Cell = PairCell<TokenBucketState>;

    fn new_state(&self, now: Nanos) -> TokenBucketState {
        TokenBucketState {
            tokens: self.burst,
            credited_to: now,
        }
    }

    fn acquire(&self, state: &mut TokenBucketState, now: Nanos, cost: u64) -> Decision {
        let s = self.refilled(state, now);
        let d = self.decide(&s, now, cost);
        *state = s;
        if d.is_allowed() {
            state.tokens -= cost;
        }
        d
    }

    fn peek(&self, state: &TokenBucketState, now: Nanos, cost: u64) -> Decision {
        self.decide(&self.refilled(state, now), now, cost)
    }

    fn refund(&self, state: &mut TokenBucketState, now: Nanos, cost: u64) {
        let mut s = self.refilled(state, now);
        s.tokens = s.tokens.saturating_add(cost).min(self.burst);
        *state = s;
    }

    fn at_rest(&self, state: &TokenBucketState, now: Nanos) -> bool {
        self.refilled(state, now).tokens >= self.burst
    }

    fn pressure(&self, state: &TokenBucketState, now: Nanos) -> u64 {
        self.time_until(&self.refilled(state, now), now, self.burst)
    }
}

/// The generic cell rate algorithm (virtual scheduling), as in ITU-T I.371 and nginx-style
/// limiters: the state is one timestamp, the theoretical arrival time (TAT) of the next request.
///
/// It admits the same traffic as a continuous token bucket (burst then the rate) with a state
/// half the size. The emission interval is `period / count` rounded up to whole nanoseconds,
/// so for rates that do not divide a second evenly GCRA is at most 1 ns per request stricter.
#[derive(Debug, Clone, Copy)]
pub struct Gcra {
    /// Emission interval: time per unit.
    t: Nanos,
    /// Burst tolerance plus one interval: how far TAT may run ahead of now (u128: the product
    /// of a long interval and a large burst exceeds u64).
    tau: u128,
    burst: u64,
}

impl Gcra {
    pub fn new(rate: Rate, burst: u64) -> Self {
        let burst = burst.max(1);
        let t = rate.time_for(1).max(1);
        Self {
            t,
            tau: t as u128 * burst as u128,
            burst,
        }
    }

    fn decide(&self, tat: Nanos, now: Nanos, cost: u64) -> (Decision, Nanos) {
        // u128: a large cost times a long interval must not saturate into an admit.
        let t = self.t as u128;
        let tau = self.tau;
        let new_tat = tat.max(now) as u128 + t * cost as u128;
        let ahead = new_tat - now as u128;
        if ahead <= tau {
            let remaining = ((tau - ahead) / t) as u64;
            (
                Decision::Allow {
                    remaining: remaining.min(self.burst),
                    reset: ahead as u64,
                    delay: 0,
                },
                u64::try_from(new_tat).unwrap_or(u64::MAX),
            )
        } else {
            // A cost above the burst can never pass: report the time to a full allowance.
            let retry_after = if cost > self.burst {
                tat.saturating_sub(now) as u128
            } else {
                ahead - tau
            };
            (
                Decision::Deny {
                    retry_after: u64::try_from(retry_after).unwrap_or(u64::MAX).max(1),
                },
                tat,
            )
        }
    }
}

impl Algorithm for Gcra {
    /// The theoretical arrival time.
    type State = Nanos;
    type Cell = AtomicU64;

    fn new_state(&self, _now: Nanos) -> Nanos {
        0
    }

    fn acquire(&self, tat: &mut Nanos, now: Nanos, cost: u64) -> Decision {
        let (d, new_tat) = self.decide(*tat, now, cost);
        *tat = new_tat;
        d
    }

    fn peek(&self, tat: &Nanos, now: Nanos, cost: u64) -> Decision {
        self.decide(*tat, now, cost).0
    }

    fn refund(&self, tat: &mut Nanos, _now: Nanos, cost: u64) {
        *tat = tat.saturating_sub(self.t.saturating_mul(cost));
    }

    fn at_rest(&self, tat: &Nanos, now: Nanos) -> bool {
        *tat <= now
    }

    fn pressure(&self, tat: &Nanos, now: Nanos) -> u64 {
        tat.saturating_sub(now)
    }
}

/// nginx's `limit_req` leaky bucket: the GCRA admission test (at most `burst` queued at once,
/// drained at the rate), but a request admitted while others are queued ahead of it is held
/// until its turn instead of passing at once. The first `delay` queued requests pass without
/// waiting (nginx's `delay=`; `delay >= burst` is nginx's `nodelay`, which is plain GCRA).
///
/// Mapping from nginx: `limit_req burst=B` queues B requests beyond the one being served, so it
/// is `burst = B + 1` here (`burst` is the capacity, as for every other algorithm).
#[derive(Debug, Clone, Copy)]
pub struct LeakyBucket {
    gcra: Gcra,
    /// Queue depth (as time) that passes without waiting.
    free: u128,
}

impl LeakyBucket {
    pub fn new(rate: Rate, burst: u64, delay: u64) -> Self {
        let gcra = Gcra::new(rate, burst);
        Self {
            gcra,
            free: gcra.t as u128 * delay as u128,
        }
    }

    fn with_delay(&self, d: Decision, tat: Nanos, now: Nanos) -> Decision {
        match d {
            Decision::Allow {
                remaining, reset, ..
            } => {
                let queued = tat.saturating_sub(now) as u128;
                let delay = u64::try_from(queued.saturating_sub(self.free)).unwrap_or(u64::MAX);
                Decision::Allow {
                    remaining,
                    reset,
                    delay,
                }
            }
            deny => deny,
        }
    }
}

impl Algorithm for LeakyBucket {
    type State = Nanos;
    type Cell = AtomicU64;

    fn new_state(&self, now: Nanos) -> Nanos {
        self.gcra.new_state(now)
    }

    fn acquire(&self, tat: &mut Nanos, now: Nanos, cost: u64) -> Decision {
        let before = *tat;
        let d = self.gcra.acquire(tat, now, cost);
        self.with_delay(d, before, now)
    }

    fn peek(&self, tat: &Nanos, now: Nanos, cost: u64) -> Decision {
        self.with_delay(self.gcra.peek(tat, now, cost), *tat, now)
    }

    fn refund(&self, tat: &mut Nanos, now: Nanos, cost: u64) {
        self.gcra.refund(tat, now, cost)
    }

    fn at_rest(&self, tat: &Nanos, now: Nanos) -> bool {
        self.gcra.at_rest(tat, now)
    }

    fn pressure(&self, tat: &Nanos, now: Nanos) -> u64 {
        self.gcra.pressure(tat, now)
    }
}
