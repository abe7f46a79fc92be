//! Passive outlier ejection, as Envoy's outlier detection (`consecutive_5xx`) does it: a target
//! whose requests fail `consecutive_failures` times in a row (a connect error or timeout, a
//! read timeout or reset, or a 5xx answer) is taken out of rotation for `ejection` times the
//! number of times it was ejected, at most `max_ejection`; an answer below 500 clears its
//! count. No more than `max_ejected_percent` of a pool's targets are out at once (at least
//! one may be), and the last target in rotation is never ejected: passive ejection only ever
//! moves traffic to another target, never refuses it. A target out for more than
//! `max_ejection` since its last return starts over at one `ejection`.
//!
//! The request path pays one relaxed load per answer while no target of the pool has failed
//! ([`crate::pool::Pool::answered`]); failures take the pool's targets and, to eject, one
//! process-wide lock.
//! Housekeeping puts targets back ([`Ejections::lift`]) and a tick with none out costs one load.

use crate::target::Target;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tollgate_config::model::Outlier;

/// The targets out of rotation, and when each comes back.
#[derive(Default)]
pub struct Ejections {
    out: Mutex<Vec<Out>>,
    count: AtomicUsize,
}

struct Out {
    target: Weak<Target>,
    upstream: Arc<str>,
    until: Instant,
}

/// The process's ejections (every pool's, unless a test gives its pool its own).
pub static EJECTIONS: std::sync::LazyLock<Ejections> = std::sync::LazyLock::new(Default::default);

/// A target just taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ejected {
    pub addr: SocketAddr,
    /// Failures in a row that took it out.
    pub failures: u32,
    /// How long it stays out.
    pub lasts: Duration,
    /// How many times it has been out (this one included) since it last started over.
    pub times: u32,
}

/// A target put back in rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    pub upstream: Arc<str>,
    pub addr: SocketAddr,
}

impl Ejections {
    /// How many targets are out.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts back every target whose time ran out by `now` (a target whose pool is gone is
    /// forgotten); what it put back.
    pub fn lift(&self, now: Instant) -> Vec<Returned> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut back = Vec::new();
        let mut out = self.out.lock();
        out.retain(|o| {
            let Some(t) = o.target.upgrade() else {
                return false;
            };
            if o.until > now {
                return true;
            }
            t.ejections.lock().1 = Some(now);
            t.ejected.store(false, Ordering::Relaxed);
            back.push(Returned {
                upstream: o.upstream.clone(),
                addr: t.addr,
            });
            false
        });
        self.count.store(out.len(), Ordering::Relaxed);
        back
    }
}

impl Ejections {
    /// `to` (a reload's new target for the same address) stays out until `from`'s time ends.
    pub(crate) fn carry(&self, from: &Arc<Target>, to: &Arc<Target>, upstream: &str) {
        let mut out = self.out.lock();
        let Some(until) = out
            .iter()
            .find(|o| std::ptr::eq(o.target.as_ptr(), Arc::as_ptr(from)))
            .map(|o| o.until)
        else {
            return;
        };
        to.ejected.store(true, Ordering::Relaxed);
        out.push(Out {
            target: Arc::downgrade(to),
            upstream: upstream.into(),
            until,
        });
        self.count.store(out.len(), Ordering::Relaxed);
    }
}

impl Ejections {
    /// An attempt on `addr` was answered below 500: its failures in a row start over.
    /// `suspects` counts the pool's targets with failures (see [`Ejections::failed`]).
    #[cold]
    pub(crate) fn answered(targets: &[Arc<Target>], suspects: &AtomicUsize, addr: SocketAddr) {
        for t in targets.iter().filter(|t| t.addr == addr) {
            if t.fails.swap(0, Ordering::Relaxed) > 0 {
                suspects.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// An attempt on `addr` of the pool `upstream` (its `targets` now) failed: the target is
    /// ejected when that makes `o.consecutive_failures` in a row and the pool may lose it.
    /// What was ejected, if anything.
    pub(crate) fn failed(
        &self,
        o: &Outlier,
        upstream: &str,
        targets: &[Arc<Target>],
        suspects: &AtomicUsize,
        addr: SocketAddr,
        now: Instant,
    ) -> Option<Ejected> {
        let t = targets.iter().find(|t| t.addr == addr)?;
        // Requests sent before it went out do not count against its return.
        if t.ejected.load(Ordering::Relaxed) {
            return None;
        }
        let n = t.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 {
            suspects.fetch_add(1, Ordering::Relaxed);
        }
        if n < o.consecutive_failures || t.ejected.load(Ordering::Relaxed) {
            return None;
        }
        // One decision at a time: two failing targets cannot both take the last places.
        let mut out = self.out.lock();
        let ejected = targets
            .iter()
            .filter(|t| t.ejected.load(Ordering::Relaxed))
            .count();
        let in_rotation = targets.iter().filter(|t| t.in_rotation()).count();
        let allowed = (targets.len() * usize::from(o.max_ejected_percent) / 100).max(1);
        if ejected >= allowed || in_rotation <= 1 || !t.in_rotation() {
            return None;
        }
        t.ejected.store(true, Ordering::Relaxed);
        if t.fails.swap(0, Ordering::Relaxed) > 0 {
            suspects.fetch_sub(1, Ordering::Relaxed);
        }
        let times = {
            let mut e = t.ejections.lock();
            // Back for longer than the longest ejection: it starts over.
            if e.1
                .is_some_and(|back| now.saturating_duration_since(back) >= o.max_ejection)
            {
                e.0 = 0;
            }
            e.0 = e.0.saturating_add(1);
            e.0
        };
        let lasts = o
            .ejection
            .saturating_mul(times)
            .min(o.max_ejection.max(o.ejection));
        out.push(Out {
            target: Arc::downgrade(t),
            upstream: upstream.into(),
            until: now + lasts,
        });
        self.count.store(out.len(), Ordering::Relaxed);
        Some(Ejected {
            addr,
            failures: n,
            lasts,
            times,
        })
    }
}

#[cfg(test)]
mod tests;
