//! An upstream's target and one attempt's pick of it: the in-flight count and the peak-EWMA
//! latency that `least_request` and `ewma` balance on, and the stable id affinity cookies name.

use pingora::upstreams::peer::HttpPeer;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub struct Target {
    /// `host:port` as written in the config.
    pub name: String,
    pub addr: SocketAddr,
    /// Stable across instances and reloads (what an affinity cookie names).
    pub id: u64,
    pub(super) healthy: AtomicBool,
    /// Its settings, shared with the targets that have the same ([`crate::pool`]); the
    /// address in it may be another target's.
    pub(super) peer: Arc<HttpPeer>,
    /// Requests in flight (counted for `least_request` and `ewma` only).
    pub(crate) active: AtomicUsize,
    /// Peak-EWMA latency to the response head, in microseconds (`ewma` only), and when it
    /// was last fed (microseconds of [`crate::target::now_us`]): it halves every second
    /// without a sample, so a target penalised once is tried again.
    pub(crate) ewma_us: AtomicU64,
    pub(crate) ewma_at: AtomicU64,
    /// Out of rotation by passive outlier ejection until housekeeping puts it back
    /// ([`crate::outlier`]).
    pub(crate) ejected: AtomicBool,
    /// Failures in a row since its last answer below 500.
    pub(crate) fails: AtomicU32,
    /// Times ejected since it last started over, and when it last came back.
    pub(crate) ejections: parking_lot::Mutex<(u32, Option<Instant>)>,
}

impl Target {
    /// Whether its health check passes (always, without one).
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Healthy and not ejected: a request may go to it.
    #[inline]
    pub fn in_rotation(&self) -> bool {
        self.healthy.load(Ordering::Relaxed) && !self.ejected.load(Ordering::Relaxed)
    }

    /// Whether passive outlier ejection holds it out.
    pub fn ejected(&self) -> bool {
        self.ejected.load(Ordering::Relaxed)
    }

    pub(crate) fn new(name: String, addr: SocketAddr, id: u64, peer: Arc<HttpPeer>) -> Self {
        Self {
            name,
            addr,
            id,
            healthy: AtomicBool::new(true),
            peer,
            active: AtomicUsize::new(0),
            ewma_us: AtomicU64::new(0),
            ewma_at: AtomicU64::new(0),
            ejected: AtomicBool::new(false),
            fails: AtomicU32::new(0),
            ejections: parking_lot::Mutex::new((0, None)),
        }
    }

    /// The peer this target is reached through, for one request.
    pub fn peer(&self) -> Box<HttpPeer> {
        let mut p = Box::new((*self.peer).clone());
        p._address = pingora::protocols::l4::socket::SocketAddr::Inet(self.addr);
        p
    }
}

/// The chosen target of one attempt; its in-flight count is given back when dropped.
pub struct Pick {
    pub target: Arc<Target>,
    pub started: Instant,
    counted: bool,
}

impl Pick {
    pub(crate) fn new(target: Arc<Target>, counted: bool) -> Self {
        if counted {
            target.active.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            target,
            started: Instant::now(),
            counted,
        }
    }

    /// Feeds this attempt's latency (or a failure's penalty) to the target's EWMA.
    pub fn observe(&self, sample_us: u64) {
        let now = now_us();
        let old = decayed(
            self.target.ewma_us.load(Ordering::Relaxed),
            self.target.ewma_at.load(Ordering::Relaxed),
            now,
        );
        self.target.ewma_us.store(old, Ordering::Relaxed);
        observe(&self.target.ewma_us, sample_us);
        self.target.ewma_at.store(now, Ordering::Relaxed);
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        if self.counted {
            self.target.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Peak EWMA: a sample above the average replaces it (a target that turned slow is avoided at
/// once); below, the average moves 30 % of the way down.
fn observe(ewma: &AtomicU64, sample: u64) {
    let _ = ewma.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some(if sample >= old {
            sample
        } else {
            old - ((old - sample) / 10).saturating_mul(3)
        })
    });
}

/// Microseconds since this process's first call: the EWMA's clock.
pub(crate) fn now_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// An EWMA of `value` fed at `at`, seen at `now`: halved for every second without a sample.
fn decayed(value: u64, at: u64, now: u64) -> u64 {
    let halvings = now.saturating_sub(at) / 1_000_000;
    if halvings >= 64 {
        0
    } else {
        value >> halvings
    }
}

/// The score `ewma` balances on: lower is better.
pub(crate) fn ewma_score(t: &Target) -> u128 {
    let ewma = decayed(
        t.ewma_us.load(Ordering::Relaxed),
        t.ewma_at.load(Ordering::Relaxed),
        now_us(),
    );
    (ewma as u128 + 1) * (t.active.load(Ordering::Relaxed) as u128 + 1)
}

/// A target's id: the same for its name and address on every instance and after reloads.
pub(crate) fn target_id(name: &str, addr: std::net::SocketAddr) -> u64 {
    use std::hash::Hasher;
    let mut h =
        siphasher::sip::SipHasher13::new_with_keys(0x6166_6669_6e69_7479, 0x7461_7267_6574_6964);
    h.write(name.as_bytes());
    h.write_u8(0xff);
    h.write(addr.to_string().as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_ewma_jumps_up_and_decays_down() {
        let e = AtomicU64::new(0);
        observe(&e, 1000);
        assert_eq!(e.load(Ordering::Relaxed), 1000);
        observe(&e, 0);
        assert_eq!(e.load(Ordering::Relaxed), 700);
        observe(&e, 5000);
        assert_eq!(e.load(Ordering::Relaxed), 5000);
        // Without samples it halves every second: a penalised target is tried again.
        assert_eq!(decayed(5_000_000, 0, 500_000), 5_000_000);
        assert_eq!(decayed(5_000_000, 0, 3_000_000), 625_000);
        assert_eq!(decayed(5_000_000, 0, 100_000_000), 0);
    }
}
