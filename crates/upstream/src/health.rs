//! Active TCP health checks, one per distinct (address, timeout) however many upstreams name
//! it. A cluster's 10,000 Services behind a few pods make a few probes a round, not 10,000.
//!
//! [`HealthRounds`] groups every health-checked target of every pool by its address and check
//! timeout; a group is probed at the shortest `interval` among its members, and its result is
//! applied to all of them (each flip logged once per address, naming how many upstreams it
//! moved). The groups are rebuilt only when the set of pools (a reload) or a pool's targets (a
//! name resolved to new addresses) changed; a tick with nothing due costs one comparison.

use crate::pool::{self, Pool};
use crate::target::Target;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A group's members: each pool and its target at the group's address.
type Member = (Arc<Pool>, Arc<Target>);
type Members = Arc<[Member]>;
/// What regrouping gathers per (address, timeout): the shortest interval, and the members.
type Gathered = HashMap<(SocketAddr, Duration), (Duration, Vec<Member>)>;

/// The rounds of every group: when each is next due.
#[derive(Default)]
pub struct HealthRounds {
    /// The pool set and the targets epoch the groups were built from.
    seen: Option<(usize, u64)>,
    groups: Vec<Group>,
    /// The earliest `due` among the groups (`None`: no group).
    next: Option<Instant>,
}

struct Group {
    addr: SocketAddr,
    timeout: Duration,
    interval: Duration,
    due: Instant,
    members: Members,
}

/// One probe due now: connect to `addr` within `timeout`, and apply the answer to `members`.
pub struct Probe {
    pub addr: SocketAddr,
    pub timeout: Duration,
    members: Members,
}

impl HealthRounds {
    /// The probes due at `now`. `set` identifies the pool set (e.g. the runtime's address):
    /// `pools` is called only when it, or any pool's targets, changed since the last call.
    pub fn due<'a, I>(&mut self, set: usize, pools: impl FnOnce() -> I, now: Instant) -> Vec<Probe>
    where
        I: IntoIterator<Item = &'a Arc<Pool>>,
    {
        let seen = (set, pool::targets_epoch());
        if self.seen != Some(seen) {
            self.regroup(pools, now);
            self.seen = Some(seen);
        }
        if self.next.is_none_or(|t| t > now) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        for g in &mut self.groups {
            if g.due <= now {
                g.due = now + g.interval;
                out.push(Probe {
                    addr: g.addr,
                    timeout: g.timeout,
                    members: g.members.clone(),
                });
            }
            next = Some(next.map_or(g.due, |n| n.min(g.due)));
        }
        self.next = next;
        out
    }

    /// How many distinct probes a round makes (one per group).
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// Groups every health-checked target by (address, timeout). A group that existed with
    /// the same members keeps its due time; a new one, or one whose members changed (another
    /// upstream names the address), is due at once, so a new target's health is known before
    /// a round's interval.
    fn regroup<'a, I>(&mut self, pools: impl FnOnce() -> I, now: Instant)
    where
        I: IntoIterator<Item = &'a Arc<Pool>>,
    {
        let old: HashMap<(SocketAddr, Duration), (Instant, Members)> = self
            .groups
            .drain(..)
            .map(|g| ((g.addr, g.timeout), (g.due, g.members)))
            .collect();
        let mut by: Gathered = HashMap::new();
        for p in pools() {
            let Some(hc) = p.config().health_check else {
                continue;
            };
            for t in p.targets().iter() {
                let e = by
                    .entry((t.addr, hc.timeout))
                    .or_insert((hc.interval, Vec::new()));
                e.0 = e.0.min(hc.interval);
                e.1.push((p.clone(), t.clone()));
            }
        }
        let mut groups: Vec<Group> = by
            .into_iter()
            .map(|((addr, timeout), (interval, members))| {
                let due = match old.get(&(addr, timeout)) {
                    Some((due, was)) if same(was, &members) => (*due).min(now + interval),
                    _ => now,
                };
                Group {
                    addr,
                    timeout,
                    interval,
                    due,
                    members: members.into(),
                }
            })
            .collect();
        groups.sort_by_key(|g| (g.addr, g.timeout));
        self.next = groups.iter().map(|g| g.due).min();
        self.groups = groups;
    }
}

/// The same upstreams' same targets (a reload builds new pools, which inherit the health of
/// the old ones: their schedule goes on).
fn same(a: &Members, b: &[Member]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((p, x), (q, y))| p.name() == q.name() && x.name == y.name && x.addr == y.addr)
}

impl Probe {
    /// Connects once, bounded by the timeout, and applies the answer.
    pub async fn run(self) {
        let up = matches!(
            tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(self.addr)).await,
            Ok(Ok(_))
        );
        self.apply(up);
    }

    /// Puts every member in or out of rotation; returns how many changed. A change is logged
    /// once for the address: the first upstream it moved, and how many it moved.
    pub fn apply(&self, up: bool) -> usize {
        let mut first = None;
        let mut changed = 0;
        for (p, t) in self.members.iter() {
            if p.set_health(t, up) {
                changed += 1;
                first.get_or_insert((p.name(), t.name.as_str()));
            }
        }
        if let Some((upstream, target)) = first {
            if up {
                tracing::info!(event = "upstream_target_up", upstream, target, address = %self.addr,
                    upstreams = changed, "upstream target passes its health check again");
            } else {
                tracing::warn!(event = "upstream_target_down", upstream, target, address = %self.addr,
                    upstreams = changed, "upstream target failed its health check: out of rotation");
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests;
