//! Health per Redis node: which master owns a key, and a breaker for each master.
//!
//! A Redis Cluster fails one master at a time. With one breaker per process, a dead master's
//! failures opened it for every key (and the probe, landing on a healthy node, closed it again:
//! it flapped), so keys on healthy masters fell to `on_error` too. Here every master has its
//! own [`Breaker`] and `tollgate_redis_up{node}`; a key's calls go through the breaker of the
//! master that owns its slot (CRC16 of its hash tag, as Redis computes it), from the slot map
//! read with `CLUSTER SLOTS`. Only the failed master's keys follow `on_error`, and only until
//! the map shows a promoted replica in its place: the map is read again at once on MOVED or a
//! connection error, and every quarter second while a master is down.
//!
//! A single Redis is one node. A cluster whose map is not read yet is one pseudo-node,
//! `cluster`, until it is.

use crate::breaker::Breaker;
use parking_lot::RwLock;
use prometheus::{IntGauge, IntGaugeVec};
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_limit::Nanos;

/// Redis Cluster's slots.
pub const SLOTS: usize = 16384;

/// The slot of a key, as Redis Cluster computes it: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, when not empty), else of the whole key.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS as u16
}

/// One node's breaker, its `up` gauge and its name.
pub struct Node {
    pub addr: Arc<str>,
    pub breaker: Breaker,
    up: IntGauge,
    /// When a call to this node last succeeded (the store's clock): a call that times out
    /// after another one was answered met the gateway's own queue, not a node that is down.
    pub answered: std::sync::atomic::AtomicU64,
}

impl Node {
    /// Records the breaker's state in `tollgate_redis_up{node}`. (Two threads may publish in
    /// the opposite order of their results; [`Nodes::publish_all`] at every scrape sets every
    /// gauge from the breakers again, so what is scraped is what `/readyz` reads.)
    pub fn publish(&self) {
        let up = self.breaker.is_up() as i64;
        if self.up.get() != up {
            self.up.set(up);
        }
    }
}

/// The slot map: for each slot, its master (an index into `owners`).
struct SlotMap {
    owners: Vec<Arc<Node>>,
    slot_owner: Box<[u16]>,
}

pub struct Nodes {
    breaker: (u32, Nanos, Nanos),
    up: IntGaugeVec,
    /// A single Redis, or a cluster whose map is not known yet.
    whole: Arc<Node>,
    map: RwLock<Option<Arc<SlotMap>>>,
    /// Every node ever made, by address: a node keeps its breaker while it stays in the map.
    by_addr: RwLock<HashMap<Arc<str>, Arc<Node>>>,
}

impl Nodes {
    /// `whole`: the single Redis's address, or `cluster`.
    pub fn new(whole: &str, breaker: (u32, Nanos, Nanos), up: IntGaugeVec) -> Self {
        let node = Self::make(whole, breaker, &up);
        Self {
            breaker,
            up,
            by_addr: RwLock::new(HashMap::from([(node.addr.clone(), node.clone())])),
            whole: node,
            map: RwLock::new(None),
        }
    }

    fn make(
        addr: &str,
        (threshold, base, max): (u32, Nanos, Nanos),
        up: &IntGaugeVec,
    ) -> Arc<Node> {
        // 0 until a probe or a call has reached it: "connecting" is not "up".
        let gauge = up.with_label_values(&[addr]);
        gauge.set(0);
        Arc::new(Node {
            addr: Arc::from(addr),
            breaker: Breaker::new(threshold, base, max).for_node(addr),
            up: gauge,
            answered: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The node whose breaker guards calls on `key` (a Redis key name).
    #[inline]
    pub fn node_for(&self, key: &str) -> Arc<Node> {
        match &*self.map.read() {
            Some(m) => m.owners[m.slot_owner[slot(key.as_bytes()) as usize] as usize].clone(),
            None => self.whole.clone(),
        }
    }

    /// The node for calls that are not about one key (a single Redis; the cluster as a whole).
    pub fn whole(&self) -> &Arc<Node> {
        &self.whole
    }

    /// Every node in use: the masters of the map, or the whole.
    pub fn all(&self) -> Vec<Arc<Node>> {
        match &*self.map.read() {
            Some(m) => m.owners.clone(),
            None => vec![self.whole.clone()],
        }
    }

    /// Whether a cluster's slot map is known (else every key is on the whole).
    pub fn mapped(&self) -> bool {
        self.map.read().is_some()
    }

    /// Whether every node in use answers.
    pub fn all_up(&self) -> bool {
        self.all().iter().all(|n| n.breaker.is_up())
    }

    /// Sets every node's `tollgate_redis_up` from its breaker, as [`Nodes::all_up`] reads it;
    /// 0 for all while `ready` is false (the first probe has not finished).
    pub fn publish_all(&self, ready: bool) {
        for n in self.all() {
            n.up.set((ready && n.breaker.is_up()) as i64);
        }
    }

    /// Installs a slot map read from `CLUSTER SLOTS`: `(first, last, master address)` ranges.
    /// Nodes that stay keep their breakers; nodes gone from the map lose their gauge. Returns
    /// whether any slot changed master.
    pub fn install(&self, ranges: &[(u16, u16, String)]) -> bool {
        let mut by_addr = self.by_addr.write();
        let mut owners: Vec<Arc<Node>> = Vec::new();
        let mut slot_owner = vec![u16::MAX; SLOTS].into_boxed_slice();
        for (first, last, addr) in ranges {
            let i = match owners.iter().position(|n| &*n.addr == addr.as_str()) {
                Some(i) => i,
                None => {
                    let node = by_addr
                        .entry(Arc::from(addr.as_str()))
                        .or_insert_with(|| Self::make(addr, self.breaker, &self.up))
                        .clone();
                    owners.push(node);
                    owners.len() - 1
                }
            };
            for s in *first as usize..=(*last as usize).min(SLOTS - 1) {
                slot_owner[s] = i as u16;
            }
        }
        if owners.is_empty() || slot_owner.contains(&u16::MAX) {
            // A map with unassigned slots (a cluster mid-change): the old one stays.
            return false;
        }
        let mut map = self.map.write();
        let changed = match &*map {
            None => true,
            Some(old) => (0..SLOTS).any(|s| {
                old.owners[old.slot_owner[s] as usize].addr != owners[slot_owner[s] as usize].addr
            }),
        };
        // Nodes no longer masters (failed over, removed): their gauge goes; the pseudo-node's
        // too once a map is known.
        let keep: Vec<Arc<str>> = owners.iter().map(|n| n.addr.clone()).collect();
        by_addr.retain(|addr, _| {
            let stay = keep.contains(addr);
            if !stay {
                let _ = self.up.remove_label_values(&[addr]);
            }
            stay
        });
        *map = Some(Arc::new(SlotMap { owners, slot_owner }));
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from Redis's CLUSTER KEYSLOT.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(
            slot(b"foo{}{bar}"),
            slot(b"bar"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn each_master_has_its_own_breaker_and_a_failover_gives_its_slots_a_fresh_one() {
        let up = IntGaugeVec::new(Opts::new("up", "up"), &["node"]).expect("gauge");
        let nodes = Nodes::new("cluster", (2, 1, 1), up.clone());
        let key = "{tollgate:l:gcra:0000000000000001}";
        assert_eq!(&*nodes.node_for(key).addr, "cluster");
        let ranges = |third: &str| {
            vec![
                (0, 5460, "a:1".to_string()),
                (5461, 10922, "b:1".to_string()),
                (10923, 16383, third.to_string()),
            ]
        };
        assert!(nodes.install(&ranges("c:1")));
        assert_eq!(nodes.all().len(), 3);
        assert!(
            up.remove_label_values(&["cluster"]).is_err(),
            "the pseudo-node is gone"
        );
        let owner = |s: u16| {
            (0..u64::MAX)
                .map(|k| format!("{{tollgate:l:gcra:{k:016x}}}"))
                .find(|k| slot(k.as_bytes()) >= s)
                .expect("a key")
        };
        let on_c = owner(10923);
        let c = nodes.node_for(&on_c);
        assert_eq!(&*c.addr, "c:1");
        c.breaker.failure(1, false);
        c.breaker.failure(1, false);
        c.publish();
        assert!(!nodes.all_up());
        assert!(nodes.node_for(&owner(0)).breaker.is_up(), "a is unaffected");
        assert!(
            !nodes.install(&ranges("c:1")),
            "the same map: nothing changed"
        );
        // c's replica d is promoted: c's slots get d's (closed) breaker; c's gauge goes.
        assert!(nodes.install(&ranges("d:1")));
        assert!(nodes.node_for(&on_c).breaker.is_up());
        assert!(nodes.all_up());
        assert!(up.remove_label_values(&["c:1"]).is_err());
        // A map with a hole is not installed.
        assert!(!nodes.install(&[(0, 100, "a:1".to_string())]));
        assert_eq!(&*nodes.node_for(&on_c).addr, "d:1");
    }
}
