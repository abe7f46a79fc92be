//! Window algorithms: the fixed window, the weighted sliding window and the exact sliding log.
//!
//! All three count requests per window rather than hold a bucket: `burst` units per window,
//! where the window is the time the rate takes to accrue `burst` (so with the default
//! `burst = N` of `rate = "N/period"` the window is the period). That keeps one meaning for
//! `rate` and `burst` across algorithms: never more than `burst` at once, `rate` in the long run.
//! Windows are aligned to multiples of their length on the clock (Redis time for global limits,
//! the process's monotonic clock locally).
//!
//! Trade-offs, as users know them from other gateways: the fixed window admits up to twice its
//! limit across a window edge; the sliding window weights the previous window's count by how
//! much of it still overlaps (an estimate that assumes the previous window's requests were
//! spread evenly: O(1) memory); the sliding log is exact and keeps one timestamp per admitted
//! unit (memory grows with `burst`: prefer the sliding window for large limits).

use crate::algorithm::Algorithm;
use crate::calendar::Calendar;
use crate::cell::{MutexCell, PairCell};
use crate::clock::Nanos;
use crate::decision::{Decision, Rate};
use std::collections::VecDeque;

fn window_of(rate: Rate, burst: u64) -> Nanos {
    rate.time_for(burst).max(1)
}

/// Where a fixed window's windows fall: every `n` nanoseconds of the clock, or on calendar
/// periods (a quota: days, weeks, months, years, on calendar time).
#[derive(Debug, Clone, Copy)]
enum Windows {
    Every(Nanos),
    Calendar(Calendar),
}

impl Windows {
    /// The window containing `now`: its index and the time it ends.
    fn at(&self, now: Nanos) -> (u64, Nanos) {
        match self {
            Windows::Every(w) => {
                let index = now / w;
                (index, (index + 1).saturating_mul(*w))
            }
            Windows::Calendar(c) => c.period(now),
        }
    }
}

/// Counts per window; the count starts over at each window's start. Windows are aligned
/// stretches of the clock, or calendar periods for a quota ([`FixedWindow::calendar`]), whose
/// `now` is then calendar time ([`crate::Clock::unix_now`]).
#[derive(Debug, Clone, Copy)]
pub struct FixedWindow {
    windows: Windows,
    limit: u64,
}

/// The window's index and the units counted in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCount {
    index: u64,
    count: u64,
}

impl From<WindowCount> for (u64, u64) {
    fn from(s: WindowCount) -> Self {
        (s.index, s.count)
    }
}

impl From<(u64, u64)> for WindowCount {
    fn from((index, count): (u64, u64)) -> Self {
        Self { index, count }
    }
}

impl FixedWindow {
    pub fn new(rate: Rate, burst: u64) -> Self {
        let limit = burst.max(1);
        Self {
            windows: Windows::Every(window_of(rate, limit)),
            limit,
        }
    }

    /// A quota: `limit` units per calendar period.
    pub fn calendar(cal: Calendar, limit: u64) -> Self {
        Self {
            windows: Windows::Calendar(cal),
            limit: limit.max(1),
        }
    }

    /// The count as of `now` (zero once the stored window is over) and the time left in the
    /// current window.
    fn current(&self, s: &WindowCount, now: Nanos) -> (WindowCount, Nanos) {
        let (index, end) = self.windows.at(now);
        let left = end.saturating_sub(now).max(1);
        if s.index == index {
            (*s, left)
        } else {
            (WindowCount { index, count: 0 }, left)
        }
    }

    fn decide(&self, s: &WindowCount, now: Nanos, cost: u64) -> (Decision, WindowCount) {
        let (mut s, left) = self.current(s, now);
        if s.count.saturating_add(cost) <= self.limit {
            s.count += cost;
            let d = Decision::Allow {
                remaining: self.limit - s.count,
                reset: left,
                delay: 0,
            };
            (d, s)
        } else {
            (Decision::Deny { retry_after: left }, s)
        }
    }
}

impl Algorithm for FixedWindow {
    type State = WindowCount;
    type Cell = PairCell<WindowCount>;

    fn new_state(&self, now: Nanos) -> WindowCount {
        WindowCount {
            index: self.windows.at(now).0,
            count: 0,
        }
    }

    fn acquire(&self, state: &mut WindowCount, now: Nanos, cost: u64) -> Decision {
        let (d, next) = self.decide(state, now, cost);
        if d.is_allowed() {
            *state = next;
        }
        d
    }

    fn peek(&self, state: &WindowCount, now: Nanos, cost: u64) -> Decision {
        self.decide(state, now, cost).0
    }

    fn refund(&self, state: &mut WindowCount, now: Nanos, cost: u64) {
        if state.index == self.windows.at(now).0 {
            state.count = state.count.saturating_sub(cost);
        }
    }

    fn at_rest(&self, state: &WindowCount, now: Nanos) -> bool {
        self.current(state, now).0.count == 0
    }

    fn pressure(&self, state: &WindowCount, now: Nanos) -> u64 {
        // Windows are aligned, so every key's count ends at the same time: the count alone
        // says what dropping the state would give back.
        self.current(state, now).0.count
    }
}

/// envoyproxy/ratelimit's counting (`algorithm = "counting_window"`): a fixed window of the
/// rate's whole period, aligned on the Unix epoch (its `now` is calendar time), in which every
/// hit counts, refused ones too (the service's `INCRBY`); a hit is over the limit when the count
/// after it passes `limit`. So, unlike [`FixedWindow`], `acquire` changes the state even when
/// it refuses, a refused request of many units leaves the count past the limit (and the next
/// single unit refused too), and a check of 0 units passes at exactly the limit but not past
/// it. `limit` may be 0 (the service's `requests_per_unit: 0`): every counted hit is over.
#[derive(Debug, Clone, Copy)]
pub struct CountingWindow {
    window: Nanos,
    limit: u64,
}

impl CountingWindow {
    pub fn new(rate: Rate, limit: u64) -> Self {
        Self {
            window: rate.period_ns().max(1),
            limit,
        }
    }

    fn current(&self, s: &WindowCount, now: Nanos) -> (WindowCount, Nanos) {
        let index = now / self.window;
        let end = (index + 1).saturating_mul(self.window);
        let left = end.saturating_sub(now).max(1);
        if s.index == index {
            (*s, left)
        } else {
            (WindowCount { index, count: 0 }, left)
        }
    }

    fn decide(&self, s: &WindowCount, now: Nanos, cost: u64) -> (Decision, WindowCount) {
        let (mut s, left) = self.current(s, now);
        s.count = s.count.saturating_add(cost);
        let d = if s.count <= self.limit {
            Decision::Allow {
                remaining: self.limit - s.count,
                reset: left,
                delay: 0,
            }
        } else {
            Decision::Deny { retry_after: left }
        };
        (d, s)
    }
}

impl Algorithm for CountingWindow {
    type State = WindowCount;
    type Cell = PairCell<WindowCount>;

    fn new_state(&self, now: Nanos) -> WindowCount {
        WindowCount {
            index: now / self.window,
            count: 0,
        }
    }

    /// Counts the hit whatever the answer (the service counts every hit).
    fn acquire(&self, state: &mut WindowCount, now: Nanos, cost: u64) -> Decision {
        let (d, next) = self.decide(state, now, cost);
        *state = next;
        d
    }

    fn peek(&self, state: &WindowCount, now: Nanos, cost: u64) -> Decision {
        self.decide(state, now, cost).0
    }

    fn refund(&self, state: &mut WindowCount, now: Nanos, cost: u64) {
        if state.index == now / self.window {
            state.count = state.count.saturating_sub(cost);
        }
    }

    fn at_rest(&self, state: &WindowCount, now: Nanos) -> bool {
        self.current(state, now).0.count == 0
    }

    fn pressure(&self, state: &WindowCount, now: Nanos) -> u64 {
        self.current(state, now).0.count
    }
}

/// The weighted sliding window: `count(current) + count(previous) * overlap`, where overlap is
/// the share of the previous window still inside the sliding window ending now.
#[derive(Debug, Clone, Copy)]
pub struct SlidingWindow {
    window: Nanos,
    limit: u64,
}

/// The current window's index with its count and the previous window's count (u32 each, so the
/// state fits one 128-bit atomic; `burst` is capped to u32::MAX for this algorithm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounts {
    index: u64,
    current: u32,
    previous: u32,
}

impl From<SlidingCounts> for (u64, u64) {
    fn from(s: SlidingCounts) -> Self {
        (s.index, (s.current as u64) << 32 | s.previous as u64)
    }
}

impl From<(u64, u64)> for SlidingCounts {
    fn from((index, counts): (u64, u64)) -> Self {
        Self {
            index,
            current: (counts >> 32) as u32,
            previous: counts as u32,
        }
    }
}

impl SlidingWindow {
    pub fn new(rate: Rate, burst: u64) -> Self {
        let limit = burst.clamp(1, u32::MAX as u64);
        Self {
            window: window_of(rate, limit),
            limit,
        }
    }

    /// The counts rolled forward to the window containing `now`.
    fn rolled(&self, s: &SlidingCounts, now: Nanos) -> SlidingCounts {
        let index = now / self.window;
        if s.index == index || index < s.index {
            *s
        } else if s.index + 1 == index {
            SlidingCounts {
                index,
                current: 0,
                previous: s.current,
            }
        } else {
            SlidingCounts {
                index,
                current: 0,
                previous: 0,
            }
        }
    }

    fn decide(&self, s: &SlidingCounts, now: Nanos, cost: u64) -> (Decision, SlidingCounts) {
        let mut s = self.rolled(s, now);
        let w = self.window as u128;
        let elapsed = (now.saturating_sub(s.index * self.window) as u128).min(w);
        let (p, n, l) = (s.previous as u128, s.current as u128, self.limit as u128);
        let c = cost as u128;
        // Everything scaled by the window length, so the estimate stays in integers.
        let weighted_prev = p * (w - elapsed);
        let used = weighted_prev + (n + c) * w;
        let to_next = w - elapsed;
        if used <= l * w {
            s.current = (n + c) as u32; // <= limit <= u32::MAX
            let d = Decision::Allow {
                remaining: ((l * w - used) / w) as u64,
                // Both windows must pass before the estimate is back to zero.
                reset: u64::try_from(to_next + w).unwrap_or(u64::MAX),
                delay: 0,
            };
            return (d, s);
        }
        let retry = if c > l {
            // Never admissible: report the time until the estimate is zero.
            if n > 0 {
                to_next + w
            } else {
                to_next
            }
        } else if n + c <= l {
            // The previous window's weight must fall: p * (w - e) <= (l - n - c) * w.
            let e_min = w - ((l - n - c) * w / p.max(1));
            e_min.saturating_sub(elapsed)
        } else {
            // This window alone is too full: in the next one, this one's count is the previous.
            to_next + (w - ((l - c) * w / n.max(1)))
        };
        let d = Decision::Deny {
            retry_after: u64::try_from(retry).unwrap_or(u64::MAX).max(1),
        };
        (d, s)
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingCounts;
    type Cell = PairCell<SlidingCounts>;

    fn new_state(&self, now: Nanos) -> SlidingCounts {
        SlidingCounts {
            index: now / self.window,
            current: 0,
            previous: 0,
        }
    }

    fn acquire(&self, state: &mut SlidingCounts, now: Nanos, cost: u64) -> Decision {
        let (d, next) = self.decide(state, now, cost);
        if d.is_allowed() {
            *state = next;
        }
        d
    }

    fn peek(&self, state: &SlidingCounts, now: Nanos, cost: u64) -> Decision {
        self.decide(state, now, cost).0
    }

    fn refund(&self, state: &mut SlidingCounts, now: Nanos, cost: u64) {
        let mut s = self.rolled(state, now);
        s.current = s
            .current
            .saturating_sub(u32::try_from(cost).unwrap_or(u32::MAX));
        *state = s;
    }

    fn at_rest(&self, state: &SlidingCounts, now: Nanos) -> bool {
        let s = self.rolled(state, now);
        s.current == 0 && s.previous == 0
    }

    fn pressure(&self, state: &SlidingCounts, now: Nanos) -> u64 {
        let s = self.rolled(state, now);
        let w = self.window as u128;
        let elapsed = (now.saturating_sub(s.index * self.window) as u128).min(w);
        let used = s.previous as u128 * (w - elapsed) + s.current as u128 * w;
        // The weighted count in 1/65536ths of a unit (< 2^49), rounded up so that only rest
        // is 0.
        u64::try_from((used << 16).div_ceil(w)).unwrap_or(u64::MAX)
    }
}

/// The exact sliding log: one timestamp per admitted unit, at most `burst` of them, dropped when
/// they leave the window. Admits at most `burst` units in any window-long interval.
#[derive(Debug, Clone, Copy)]
pub struct SlidingLog {
    window: Nanos,
    limit: u64,
}

/// Admission times, oldest first.
pub type Log = VecDeque<Nanos>;

impl SlidingLog {
    pub fn new(rate: Rate, burst: u64) -> Self {
        let limit = burst.max(1);
        Self {
            window: window_of(rate, limit),
            limit,
        }
    }

    /// Whether an entry stamped `t` still counts at `now`.
    fn live(&self, t: Nanos, now: Nanos) -> bool {
        t.saturating_add(self.window) > now
    }

    fn live_from(&self, log: &Log, now: Nanos) -> usize {
        log.iter()
            .position(|&t| self.live(t, now))
            .unwrap_or(log.len())
    }

    fn decide(&self, log: &Log, now: Nanos, cost: u64) -> Decision {
        let from = self.live_from(log, now);
        let live = (log.len() - from) as u64;
        if live.saturating_add(cost) <= self.limit {
            return Decision::Allow {
                remaining: self.limit - live - cost,
                reset: self.window,
                delay: 0,
            };
        }
        let expires = |t: Nanos| t.saturating_add(self.window).saturating_sub(now);
        let retry = if cost > self.limit {
            log.back().map_or(0, |&t| expires(t))
        } else {
            // The oldest (live + cost - limit) entries must leave.
            let i = from + (live + cost - self.limit - 1) as usize;
            log.get(i).map_or(0, |&t| expires(t))
        };
        Decision::Deny {
            retry_after: retry.max(1),
        }
    }
}

impl Algorithm for SlidingLog {
    type State = Log;
    type Cell = MutexCell<Log>;

    fn new_state(&self, _now: Nanos) -> Log {
        VecDeque::new()
    }

    fn acquire(&self, log: &mut Log, now: Nanos, cost: u64) -> Decision {
        let from = self.live_from(log, now);
        log.drain(..from);
        let d = self.decide(log, now, cost);
        if d.is_allowed() {
            // A clock that went backwards must not break the order the trim relies on.
            let t = log.back().map_or(now, |&b| b.max(now));
            log.extend(std::iter::repeat_n(t, cost as usize));
        }
        d
    }

    fn peek(&self, log: &Log, now: Nanos, cost: u64) -> Decision {
        self.decide(log, now, cost)
    }

    fn refund(&self, log: &mut Log, _now: Nanos, cost: u64) {
        let keep = log.len().saturating_sub(cost as usize);
        log.truncate(keep);
    }

    fn at_rest(&self, log: &Log, now: Nanos) -> bool {
        log.back().is_none_or(|&t| !self.live(t, now))
    }

    fn pressure(&self, log: &Log, now: Nanos) -> u64 {
        (log.len() - self.live_from(log, now)) as u64
    }
}
