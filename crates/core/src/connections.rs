//! Bounds on downstream connections: how many are open in this process and per client address.
//!
//! [`Admission`] is asked by the listeners: each accepted connection takes a slot before
//! anything is read from it (before its TLS handshake too) and gives it back when the
//! connection ends, however it ends (the slot is a guard). Over `max_connections` or `max_connections_per_client` a connection is
//! closed at once, unread, and counted in `tollgate_connections_refused_total{reason}`; the
//! open ones show in `tollgate_connections_open`.
//!
//! Per client means per address as the socket sees it (IPv6 by the configured prefix, so one
//! host cannot multiply itself over its /64): X-Forwarded-For is not read yet when a connection
//! arrives, so behind a load balancer this bound is per balancer and should stay off.
//!
//! The bounds are read from the current runtime for every connection, so a reload changes them
//! for new connections. `max_connections` is never above what the open-file limit can hold
//! ([`set_fd_ceiling`]): lowered at start, loudly, rather than every client timing out at the
//! descriptor ceiling.

use parking_lot::Mutex;
use prometheus::{IntCounter, IntGauge};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The most connections the process's open-file limit can hold (set once at start by the
/// binary; `usize::MAX` until then): `max_connections` above it is lowered to it, because at
/// the descriptor ceiling every accept fails and every client times out, not only new ones.
static FD_CEILING: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Descriptors kept for what is not a client connection: listeners, Redis, health checks,
/// upstream pools' spares, files read at reload.
pub const FD_RESERVE: u64 = 128;

/// The connections an open-file limit of `nofile` can hold: each proxied connection can hold
/// two descriptors (client and upstream).
pub fn connections_for_fds(nofile: u64) -> usize {
    usize::try_from(nofile.saturating_sub(FD_RESERVE) / 2).unwrap_or(usize::MAX)
}

/// Sets the ceiling [`connections_for_fds`] gives for this process's open-file limit.
pub fn set_fd_ceiling(connections: usize) {
    FD_CEILING.store(connections.max(1), Ordering::Relaxed);
}

/// `max_connections` as enforced: the configured bound, at most the descriptor ceiling.
pub fn effective_max_connections(configured: usize) -> usize {
    configured.min(FD_CEILING.load(Ordering::Relaxed))
}

/// Shards of the per-client table: connection set-up on many threads rarely meets one lock.
const SHARDS: usize = 16;

/// Open connections, in all and per client.
pub struct Connections {
    open: AtomicUsize,
    per_client: Box<[Mutex<HashMap<IpAddr, usize>>]>,
    gauge: IntGauge,
    refused_total: IntCounter,
    refused_client: IntCounter,
}

/// Why a connection was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Total,
    PerClient,
}

impl Connections {
    pub fn new(gauge: IntGauge, refused_total: IntCounter, refused_client: IntCounter) -> Self {
        Self {
            open: AtomicUsize::new(0),
            per_client: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            gauge,
            refused_total,
            refused_client,
        }
    }

    fn shard(&self, ip: IpAddr) -> &Mutex<HashMap<IpAddr, usize>> {
        let h = match ip {
            IpAddr::V4(a) => u32::from(a) as usize,
            IpAddr::V6(a) => (u128::from(a) >> 64) as usize,
        };
        &self.per_client[h.wrapping_mul(0x9E37_79B9) >> 7 & (SHARDS - 1)]
    }

    /// A slot for a connection from `client` (already cut to its key prefix), or why not.
    /// `per_client` 0 means no bound per client.
    pub fn admit(
        self: &Arc<Self>,
        client: Option<IpAddr>,
        max: usize,
        per_client: usize,
    ) -> Result<Slot, Refused> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.refused_total.inc();
            return Err(Refused::Total);
        }
        let client = client.filter(|_| per_client > 0);
        if let Some(ip) = client {
            let mut m = self.shard(ip).lock();
            let n = m.entry(ip).or_insert(0);
            if *n >= per_client {
                drop(m);
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.refused_client.inc();
                return Err(Refused::PerClient);
            }
            *n += 1;
        }
        self.gauge.inc();
        Ok(Slot {
            conns: self.clone(),
            client,
        })
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// One open connection's place in the counts, given back on drop.
pub struct Slot {
    conns: Arc<Connections>,
    client: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(ip) = self.client {
            let mut m = self.conns.shard(ip).lock();
            if let Some(n) = m.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&ip);
                }
            }
        }
        self.conns.open.fetch_sub(1, Ordering::AcqRel);
        self.conns.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conns() -> Arc<Connections> {
        let c = |n: &str| IntCounter::new(n, "x").unwrap_or_else(|_| unreachable!());
        Arc::new(Connections::new(
            IntGauge::new("g", "x").unwrap_or_else(|_| unreachable!()),
            c("a"),
            c("b"),
        ))
    }

    #[test]
    fn slots_bound_in_all_and_per_client_and_come_back() {
        let c = conns();
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let s1 = c.admit(Some(a), 3, 2);
        let s2 = c.admit(Some(a), 3, 2);
        assert!(s1.is_ok() && s2.is_ok());
        assert_eq!(c.admit(Some(a), 3, 2).err(), Some(Refused::PerClient));
        let s3 = c.admit(Some(b), 3, 2);
        assert!(s3.is_ok());
        assert_eq!(c.admit(Some(b), 3, 2).err(), Some(Refused::Total));
        assert_eq!(c.open(), 3);
        drop(s1);
        assert!(
            c.admit(Some(a), 3, 2).is_ok(),
            "a slot given back is free again"
        );
        assert_eq!(c.open(), 2, "the admitted slot was dropped at once");
        drop((s2, s3));
        assert_eq!(c.open(), 0);
        assert!(
            c.per_client.iter().all(|m| m.lock().is_empty()),
            "no entry left behind"
        );
        assert_eq!(c.gauge.get(), 0);
        assert_eq!((c.refused_total.get(), c.refused_client.get()), (1, 1));
    }

    #[test]
    fn no_per_client_bound_when_zero() {
        let c = conns();
        let a: IpAddr = [10, 0, 0, 1].into();
        let slots: Vec<_> = (0..50).map(|_| c.admit(Some(a), 100, 0)).collect();
        assert!(slots.iter().all(Result::is_ok));
        assert!(c.per_client.iter().all(|m| m.lock().is_empty()));
    }
}
