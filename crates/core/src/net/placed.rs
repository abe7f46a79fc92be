//! Addresses placed by the cluster: under `run --kubernetes`, each Service port's ready
//! endpoints, by the target name the importer writes for it (`SVC.NS.svc.cluster.local:PORT`).
//!
//! A pool's target of that name takes its addresses from here instead of DNS, as a name
//! that resolved anew: the routes, the limits and the pool itself stay, the targets that
//! stay keep their health, and only the addresses in rotation change. So an endpoint change
//! reaches traffic without a reload. A name the cluster does not place (no EndpointSlice
//! names its Service port, or no controller runs) is looked up by DNS as before.
//!
//! The controller replaces the whole directory at once; each pool takes it up when built,
//! and housekeeping places every pool whose directory is older than the current one (every
//! 50 ms tick: one atomic load per pool while nothing changed).

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Addresses by target name (`host:port` exactly as written in `targets`).
pub type Placements = HashMap<String, Arc<[SocketAddr]>>;

#[derive(Default)]
pub struct Directory {
    map: ArcSwap<Placements>,
    /// Bumped after each replacement (so a version read before the map never names a map
    /// newer than the one read).
    version: AtomicU64,
}

/// The process's directory (empty unless the controller runs).
pub static CLUSTER: std::sync::LazyLock<Directory> = std::sync::LazyLock::new(Default::default);

impl Directory {
    /// Makes `map` the cluster's placements (every name not in it goes back to DNS).
    pub fn replace(&self, map: Placements) {
        self.map.store(Arc::new(map));
        self.version.fetch_add(1, Ordering::Release);
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The placements now, and the version they are at least as new as.
    pub fn current(&self) -> (u64, Arc<Placements>) {
        let v = self.version();
        (v, self.map.load_full())
    }
}
