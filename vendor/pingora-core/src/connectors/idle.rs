// Idle upstream connections kept for reuse without a task each (Tollgate's vendored patch
// 0007; see vendor/patches). Pingora's pool spawned an `idle_poll` task per released
// connection, which woke on reuse: a task spawn, two channels and a wake-up per request.
//
// Here a released connection is only stored. It is checked when it is taken (its idle
// deadline, a read that must find nothing: the upstream closed it or sent what it should
// not) and, at most once a second, a sweep run by whoever releases or takes a connection
// drops those past their deadline or closed by the upstream. The pool is bounded: over
// `size`, the connection idle the longest goes.

use crate::protocols::Stream;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How often idle connections are looked over for ones closed or expired.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Idle {
    pub stream: Stream,
    pub since: Instant,
    pub deadline: Option<Instant>,
}

struct Inner {
    /// Per reuse key, oldest first.
    by_key: HashMap<u64, VecDeque<Idle>>,
    count: usize,
    next_sweep: Instant,
}

pub(crate) struct IdlePool {
    inner: Mutex<Inner>,
    size: usize,
}

impl IdlePool {
    pub fn new(size: usize) -> Self {
        IdlePool {
            inner: Mutex::new(Inner {
                by_key: HashMap::new(),
                count: 0,
                next_sweep: Instant::now() + SWEEP_EVERY,
            }),
            size,
        }
    }

    /// Stores a connection; returns what had to go to make room (the longest idle), whose
    /// idle time the caller may report.
    pub fn put(
        &self,
        key: u64,
        stream: Stream,
        idle_timeout: Option<Duration>,
        alive: impl Fn(&mut Stream) -> bool,
    ) -> Option<Duration> {
        if self.size == 0 {
            return None;
        }
        let now = Instant::now();
        let mut evicted = None;
        let mut g = self.inner.lock();
        Self::sweep_if_due(&mut g, now, &alive);
        if g.count >= self.size {
            // The connection idle the longest: the oldest at the front of some key's queue.
            let oldest = g
                .by_key
                .iter()
                .filter_map(|(k, q)| q.front().map(|i| (*k, i.since)))
                .min_by_key(|(_, since)| *since)
                .map(|(k, _)| k);
            if let Some(k) = oldest {
                if let Some(q) = g.by_key.get_mut(&k) {
                    evicted = q.pop_front().map(|i| now.saturating_duration_since(i.since));
                    if q.is_empty() {
                        g.by_key.remove(&k);
                    }
                }
                g.count -= 1;
            }
        }
        g.by_key.entry(key).or_default().push_back(Idle {
            stream,
            since: now,
            deadline: idle_timeout.map(|t| now + t),
        });
        g.count += 1;
        evicted
    }

    /// The connection released last under `key` that is not past its deadline (older ones
    /// past it are dropped on the way).
    pub fn take(&self, key: u64, alive: impl Fn(&mut Stream) -> bool) -> Option<Stream> {
        let now = Instant::now();
        let mut g = self.inner.lock();
        Self::sweep_if_due(&mut g, now, &alive);
        let q = g.by_key.get_mut(&key)?;
        let mut found = None;
        let mut taken = 0;
        while let Some(idle) = q.pop_back() {
            taken += 1;
            if idle.deadline.is_none_or(|d| d > now) {
                found = Some(idle.stream);
                break;
            }
        }
        if q.is_empty() {
            g.by_key.remove(&key);
        }
        g.count -= taken;
        found
    }

    /// At most once every [`SWEEP_EVERY`]: drops connections past their deadline and those
    /// the upstream closed (`alive` is false).
    fn sweep_if_due(g: &mut Inner, now: Instant, alive: &impl Fn(&mut Stream) -> bool) {
        if now < g.next_sweep {
            return;
        }
        g.next_sweep = now + SWEEP_EVERY;
        let mut count = 0;
        g.by_key.retain(|_, q| {
            q.retain_mut(|i| i.deadline.is_none_or(|d| d > now) && alive(&mut i.stream));
            count += q.len();
            !q.is_empty()
        });
        g.count = count;
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().count
    }
}
