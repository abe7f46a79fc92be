//! An upstream's targets: chosen round robin among the healthy ones, each reached through a
//! peer built once at config load (address, TLS, SNI, ALPN and timeouts), so a request only
//! copies it.
//!
//! Health is an active TCP check (connect within `timeout`, every `interval`) run by
//! `tollgate_proxy::housekeeping`; a target that fails is out of rotation until it passes again. Without a
//! health check every target is always in rotation. A pool is kept across reloads while its
//! upstream's definition is unchanged, and its health with it.
//!
//! Before this, Pingora's `LoadBalancer` chose: its selection walks a hashed health table per
//! request (1,700 instructions per proxied request, measured with callgrind), and the peer
//! was rebuilt for every request (timeouts, TLS settings, SNI copied each time).

use super::target::Target;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use pingora::upstreams::peer::HttpPeer;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_config::model::{Balance, UpstreamConfig};
use tollgate_core::tls::upstream::UpstreamTlsRt;

/// Upstream connections idle longer than this are closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// One lookup of a name waits at most this.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the last lookups of one written target found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Resolved {
    addrs: Vec<SocketAddr>,
    /// Why the last lookup failed (the addresses found before are kept meanwhile).
    error: Option<String>,
    /// The addresses are the cluster's ([`crate::placed`]), not DNS's.
    placed: bool,
}

pub struct Pool {
    cfg: UpstreamConfig,
    /// Each written target's TLS, in target order (empty for plaintext upstreams).
    tls: Vec<UpstreamTlsRt>,
    preserve_case: bool,
    /// The targets in rotation: every address of every written target.
    targets: ArcSwap<Vec<Arc<Target>>>,
    next: AtomicUsize,
    /// Per written target (in order): its addresses (literal ones fixed, names as last found).
    resolved: Mutex<Vec<Resolved>>,
    /// Every name has been looked up once (successfully or not).
    settled: AtomicBool,
    resolving: AtomicBool,
    /// Some target is a name (looked up every `resolve_every`, unless the cluster places it).
    named: bool,
    /// The version of [`crate::placed::CLUSTER`] the names were last placed from.
    placed_at: AtomicU64,
    due: Mutex<Instant>,
    /// `balance = "hash"`: the Ketama ring over every target (healthy or not).
    ring: ArcSwap<Option<pingora_ketama::Continuum>>,
    /// Boxed, as the rest that few upstreams use: a cluster holds 10,000 pools.
    pub affinity: Option<Box<super::affinity::Affinities>>,
    pub budget: Option<Box<super::budget::RetryBudget>>,
    /// A policy, affinity or retries: requests take [`Pool::choose`].
    chooses: bool,
    /// Targets with failures in a row (passive outlier ejection, [`crate::outlier`]): while
    /// none has, an answer costs one load.
    pub(crate) suspects: AtomicUsize,
    /// Where its ejected targets wait to come back.
    pub(crate) ejections: &'static crate::outlier::Ejections,
}

/// What one choice of target must respect.
pub struct Choice<'a> {
    /// The `hash_key` bytes of the request (`balance = "hash"`).
    pub hash: Option<&'a [u8]>,
    /// The target a valid affinity cookie names.
    pub pinned: Option<u64>,
    /// Targets this request already tried.
    pub tried: &'a [u64],
}

impl Pool {
    /// `tls`: each target's TLS, in target order (empty for plaintext upstreams).
    /// `preserve_case`: `[server] preserve_header_case`, for the names of HTTP/1 responses.
    /// Address targets are in rotation at once; names once [`Pool::resolve`] found them.
    pub fn new(cfg: &UpstreamConfig, tls: &[UpstreamTlsRt], preserve_case: bool) -> Self {
        let resolved: Vec<Resolved> = cfg
            .targets
            .iter()
            .map(|t| Resolved {
                addrs: t.addr.into_iter().collect(),
                error: None,
                placed: false,
            })
            .collect();
        let pool = Pool {
            cfg: cfg.clone(),
            tls: tls.to_vec(),
            preserve_case,
            targets: ArcSwap::from_pointee(Vec::new()),
            next: AtomicUsize::new(0),
            settled: AtomicBool::new(cfg.targets.iter().all(|t| t.addr.is_some())),
            resolved: Mutex::new(resolved),
            resolving: AtomicBool::new(false),
            named: cfg.targets.iter().any(|t| t.addr.is_none()),
            placed_at: AtomicU64::new(0),
            due: Mutex::new(Instant::now()),
            ring: ArcSwap::from_pointee(None),
            affinity: cfg
                .affinity
                .as_ref()
                .map(|a| Box::new(super::affinity::Affinities::new(&cfg.name, a))),
            budget: cfg
                .retry
                .map(|r| Box::new(super::budget::RetryBudget::new(r.budget))),
            chooses: cfg.balance != Balance::RoundRobin
                || cfg.affinity.is_some()
                || cfg.retry.is_some(),
            suspects: AtomicUsize::new(0),
            ejections: &crate::outlier::EJECTIONS,
        };
        {
            let mut r = pool.resolved.lock();
            pool.place_from(&mut r, false);
            pool.rebuild(&r);
        }
        pool
    }

    /// Whether the cluster's placements changed since this pool took them up.
    pub fn placement_due(&self) -> bool {
        self.named && self.placed_at.load(Ordering::Relaxed) != crate::placed::CLUSTER.version()
    }

    /// Takes up the cluster's placements now ([`crate::placed`]): the addresses of each name
    /// it places go in rotation (the targets that stay keep their health), and a name it no
    /// longer places keeps its addresses until DNS answers for it (due at once).
    pub fn place(&self) {
        let mut r = self.resolved.lock();
        if self.place_from(&mut r, true) {
            self.rebuild(&r);
        }
    }

    /// Whether anything changed; `settled` once every name is placed or literal.
    fn place_from(&self, r: &mut [Resolved], log: bool) -> bool {
        if !self.named {
            return false;
        }
        let (version, map) = crate::placed::CLUSTER.current();
        let (mut changed, mut unplaced) = (false, false);
        for (t, slot) in self.cfg.targets.iter().zip(r.iter_mut()) {
            if t.addr.is_some() {
                continue;
            }
            match map.get(t.written.as_str()) {
                Some(addrs) if !slot.placed || slot.addrs[..] != addrs[..] => {
                    if log {
                        tracing::info!(event = "upstream_placed", upstream = %self.name(),
                            target = %t.written, addresses = ?addrs, "upstream endpoints changed");
                    }
                    *slot = Resolved {
                        addrs: addrs.to_vec(),
                        error: None,
                        placed: true,
                    };
                    changed = true;
                }
                Some(_) => {}
                None if slot.placed => {
                    slot.placed = false;
                    unplaced = true;
                }
                None => {}
            }
        }
        if unplaced {
            *self.due.lock() = Instant::now();
        }
        if r.iter()
            .zip(&self.cfg.targets)
            .all(|(r, t)| r.placed || t.addr.is_some())
        {
            self.settled.store(true, Ordering::Relaxed);
        }
        self.placed_at.store(version, Ordering::Relaxed);
        changed
    }

    /// The targets in rotation now.
    pub fn targets(&self) -> Arc<Vec<Arc<Target>>> {
        self.targets.load_full()
    }

    /// How many targets are in rotation (the retries a request may make).
    pub fn len(&self) -> usize {
        self.targets.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next healthy target after the last one chosen; `None` when none is healthy (or no
    /// name resolved).
    #[cfg(test)]
    fn select(&self) -> Option<Arc<Target>> {
        self.with_next(|t| t.clone())
    }

    /// The peer of the next healthy target (what a request needs; no reference count taken).
    pub fn select_peer(&self) -> Option<Box<HttpPeer>> {
        self.with_next(|t| t.peer())
    }

    /// The address of the next healthy target (a mirror's copy goes there).
    pub fn select_addr(&self) -> Option<std::net::SocketAddr> {
        self.with_next(|t| t.addr)
    }

    fn with_next<R>(&self, f: impl FnOnce(&Arc<Target>) -> R) -> Option<R> {
        let targets = self.targets.load();
        let n = targets.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let in_turn = (0..n).map(|i| &targets[start.wrapping_add(i) % n]);
        in_turn
            .clone()
            .find(|t| t.in_rotation())
            // None in rotation, yet some healthy: ejection never empties a pool (a reload,
            // a name resolving anew or a health check may have left only ejected ones).
            .or_else(|| in_turn.clone().find(|t| t.healthy()))
            .map(f)
    }

    /// Whether a request needs [`Pool::choose`] (a policy, affinity or retries) rather than
    /// the round robin of [`Pool::select_peer`].
    #[inline]
    pub fn chooses(&self) -> bool {
        self.chooses
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.cfg
    }

    /// The target for one attempt: the pinned one while it is healthy (and untried), else by
    /// the upstream's policy among the healthy targets not tried yet. The pick counts itself
    /// in flight for the policies that read it.
    pub fn choose(&self, c: &Choice) -> Option<crate::target::Pick> {
        let targets = self.targets.load();
        let strict = |t: &Target| t.in_rotation() && !c.tried.contains(&t.id);
        // With none of those left, the healthy ones that are ejected: ejection never empties
        // a pool (see `with_next`).
        let relaxed = |t: &Target| t.healthy() && !c.tried.contains(&t.id);
        let counted = matches!(self.cfg.balance, Balance::LeastRequest | Balance::Ewma);
        let pick = |t: &Arc<Target>| crate::target::Pick::new(t.clone(), counted);
        if let Some(id) = c.pinned {
            if let Some(t) = targets.iter().find(|t| t.id == id && strict(t)) {
                return Some(pick(t));
            }
        }
        let n = targets.len();
        if n == 0 {
            return None;
        }
        // A retry does not move the turn: the next request still gets the next target.
        let start = if c.tried.is_empty() {
            self.next.fetch_add(1, Ordering::Relaxed)
        } else {
            self.next.load(Ordering::Relaxed)
        };
        let in_turn = (0..n).map(|i| &targets[start.wrapping_add(i) % n]);
        let choose_by = |ok: &dyn Fn(&Target) -> bool| match self.cfg.balance {
            Balance::RoundRobin => in_turn.clone().find(|t| ok(t)),
            Balance::LeastRequest => in_turn
                .clone()
                .filter(|t| ok(t))
                .min_by_key(|t| t.active.load(Ordering::Relaxed)),
            Balance::Ewma => in_turn
                .clone()
                .filter(|t| ok(t))
                .min_by_key(|t| super::target::ewma_score(t)),
            Balance::Hash => match (c.hash, self.ring.load().as_ref()) {
                (Some(key), Some(ring)) => ring
                    .node_iter(key)
                    .take(n * 160)
                    .filter_map(|a| targets.iter().find(|t| t.addr == *a))
                    .find(|t| ok(t))
                    .or_else(|| in_turn.clone().find(|t| ok(t))),
                _ => in_turn.clone().find(|t| ok(t)),
            },
        };
        choose_by(&strict).or_else(|| choose_by(&relaxed)).map(pick)
    }

    /// Healthy targets this request has not tried yet.
    pub fn untried(&self, tried: &[u64]) -> usize {
        let targets = self.targets.load();
        let count = |ok: &dyn Fn(&Target) -> bool| targets.iter().filter(|t| ok(t)).count();
        match count(&|t| t.in_rotation() && !tried.contains(&t.id)) {
            0 => count(&|t| t.healthy() && !tried.contains(&t.id)),
            n => n,
        }
    }

    /// Takes over what `old` (the same upstream before a reload) knew: the addresses its
    /// names resolved to, its targets' health, and which of them are ejected until when.
    pub fn inherit(&self, old: &Pool) {
        {
            let before = old.resolved.lock();
            let mut now = self.resolved.lock();
            for (i, t) in self.cfg.targets.iter().enumerate() {
                let kept = old
                    .cfg
                    .targets
                    .iter()
                    .position(|o| o.written == t.written)
                    .and_then(|j| before.get(j));
                // A name placed by the cluster has its addresses already; one the cluster
                // no longer places keeps the old ones until DNS answers.
                if let (None, Some(k), false) = (t.addr, kept, now[i].placed) {
                    now[i] = Resolved {
                        placed: false,
                        ..k.clone()
                    };
                }
            }
            self.rebuild(&now);
        }
        self.settled
            .fetch_or(old.settled.load(Ordering::Relaxed), Ordering::Relaxed);
        let old_targets = old.targets.load();
        let by_key = by_addr_and_name(&old_targets);
        for t in self.targets.load().iter() {
            if let Some(o) = by_key.get(&(t.addr, t.name.as_str())) {
                t.healthy.store(o.healthy(), Ordering::Relaxed);
                // An ejected target stays out for the rest of its time, and its count goes on.
                *t.ejections.lock() = *o.ejections.lock();
                if o.ejected() && self.cfg.outlier.is_some() {
                    self.ejections.carry(o, t, self.name());
                }
            }
        }
    }

    /// Every name has been looked up at least once.
    pub fn settled(&self) -> bool {
        self.settled.load(Ordering::Relaxed)
    }

    /// The names that resolve to nothing now, with why.
    pub fn unresolved(&self) -> Vec<(String, String)> {
        let r = self.resolved.lock();
        self.cfg
            .targets
            .iter()
            .zip(r.iter())
            .filter(|(t, r)| t.addr.is_none() && r.addrs.is_empty())
            .map(|(t, r)| {
                let why = r.error.clone().unwrap_or_else(|| {
                    if r.placed {
                        "no ready endpoint".into()
                    } else if self.settled() {
                        "no address".into()
                    } else {
                        "not looked up yet".into()
                    }
                });
                (t.written.clone(), why)
            })
            .collect()
    }

    /// Whether the pool has names and their next lookup is due; if so, claims it (one lookup
    /// round at a time).
    pub fn claim_resolve(&self, now: Instant) -> bool {
        if !self.named || *self.due.lock() > now {
            return false;
        }
        !self.resolving.swap(true, Ordering::AcqRel)
    }

    /// Looks up every name (through the system's resolver: /etc/hosts, then DNS with the
    /// search domains of /etc/resolv.conf, as a Kubernetes pod resolves Service names) and
    /// puts what it found in rotation. A name that fails keeps the addresses it had (a DNS
    /// blip does not empty an upstream; health checks judge stale ones); one that never
    /// resolved has none, and its upstream's routes answer 503 meanwhile.
    pub async fn resolve(&self) {
        let placed: Vec<bool> = self.resolved.lock().iter().map(|r| r.placed).collect();
        let lookups = self
            .cfg
            .targets
            .iter()
            .zip(placed)
            .map(|(t, placed)| async move {
                if t.addr.is_some() || placed {
                    return None;
                }
                let host = (t.host.as_str(), t.port);
                Some(
                    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(host)).await
                    {
                        Ok(Ok(addrs)) => {
                            let mut v: Vec<SocketAddr> = addrs.collect();
                            v.sort();
                            v.dedup();
                            if v.is_empty() {
                                Err("no address".to_string())
                            } else {
                                Ok(v)
                            }
                        }
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err(format!("no answer within {RESOLVE_TIMEOUT:?}")),
                    },
                )
            });
        let found = futures_util::future::join_all(lookups).await;
        {
            let mut r = self.resolved.lock();
            let before = r.clone();
            for ((t, slot), got) in self.cfg.targets.iter().zip(r.iter_mut()).zip(found) {
                match got {
                    // Placed by the cluster meanwhile: the cluster's addresses stand.
                    _ if slot.placed => {}
                    None => {}
                    Some(Ok(addrs)) => {
                        if slot.addrs != addrs {
                            tracing::info!(event = "upstream_resolved", upstream = %self.name(),
                                target = %t.written, addresses = ?addrs, "upstream name resolved");
                        }
                        *slot = Resolved {
                            addrs,
                            error: None,
                            placed: false,
                        };
                    }
                    Some(Err(why)) => {
                        if slot.error.as_deref() != Some(why.as_str()) {
                            tracing::warn!(event = "upstream_unresolved", upstream = %self.name(),
                                target = %t.written, reason = %why, kept = slot.addrs.len(),
                                "upstream name does not resolve");
                        }
                        slot.error = Some(why);
                    }
                }
            }
            if *r != before {
                self.rebuild(&r);
            }
        }
        self.settled.store(true, Ordering::Relaxed);
        *self.due.lock() = Instant::now() + self.cfg.resolve_every;
        self.resolving.store(false, Ordering::Release);
    }

    /// Puts every address of `resolved` in rotation, keeping the targets (and their health)
    /// that stay.
    fn rebuild(&self, resolved: &[Resolved]) {
        let old = self.targets.load();
        let by_key = by_addr_and_name(&old);
        let mut next = Vec::new();
        for (i, (t, r)) in self.cfg.targets.iter().zip(resolved).enumerate() {
            for &addr in &r.addrs {
                let kept = by_key.get(&(addr, t.written.as_str())).copied();
                next.push(kept.cloned().unwrap_or_else(|| {
                    Arc::new(Target::new(
                        t.written.clone(),
                        addr,
                        super::target::target_id(&t.written, addr),
                        peer(&self.cfg, addr, self.tls.get(i), self.preserve_case),
                    ))
                }));
            }
        }
        if self.cfg.balance == Balance::Hash {
            let buckets: Vec<pingora_ketama::Bucket> = next
                .iter()
                .map(|t| pingora_ketama::Bucket::new(t.addr, 1))
                .collect();
            self.ring
                .store(Arc::new(Some(pingora_ketama::Continuum::new(&buckets))));
        }
        // A target that leaves takes its failures in a row with it (the count of targets
        // with failures stays true, so answers go back to one load).
        let staying: std::collections::HashSet<*const Target> =
            next.iter().map(Arc::as_ptr).collect();
        for o in old.iter().filter(|o| !staying.contains(&Arc::as_ptr(o))) {
            if o.fails.swap(0, Ordering::Relaxed) > 0 {
                self.suspects.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.targets.store(Arc::new(next));
        TARGETS_EPOCH.fetch_add(1, Ordering::Relaxed);
    }

    /// Puts `t` in or out of rotation; whether that changed it (the caller logs, once per
    /// address: [`crate::health`]).
    pub(crate) fn set_health(&self, t: &Target, up: bool) -> bool {
        let changed = t.healthy.swap(up, Ordering::Relaxed) != up;
        if changed && up {
            // Back in rotation: its old latency says nothing of it now.
            t.ewma_us.store(0, Ordering::Relaxed);
        }
        changed
    }

    /// An attempt on `addr` was answered below 500 (passive outlier ejection,
    /// [`crate::outlier`]): its failures in a row start over. One load while none failed.
    #[inline]
    pub fn answered(&self, addr: SocketAddr) {
        if self.suspects.load(Ordering::Relaxed) != 0 {
            crate::outlier::Ejections::answered(&self.targets.load(), &self.suspects, addr);
        }
    }

    /// An attempt on `addr` failed (a connect error or timeout, a read timeout or reset, or a
    /// 5xx answer): what was ejected, if that made enough failures in a row.
    pub fn failed(&self, addr: SocketAddr, now: Instant) -> Option<crate::outlier::Ejected> {
        let o = self.cfg.outlier.as_ref()?;
        let targets = self.targets.load();
        self.ejections
            .failed(o, self.name(), &targets, &self.suspects, addr, now)
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }
}

/// Targets by address and written name (a pool of thousands of pods is matched in one pass,
/// not a scan per target).
fn by_addr_and_name(targets: &[Arc<Target>]) -> HashMap<(SocketAddr, &str), &Arc<Target>> {
    targets
        .iter()
        .map(|t| ((t.addr, t.name.as_str()), t))
        .collect()
}

/// Bumped whenever any pool's targets change (a name resolved to other addresses), so that
/// the health rounds regroup only then.
static TARGETS_EPOCH: AtomicU64 = AtomicU64::new(0);

/// How many times any pool's targets changed.
pub fn targets_epoch() -> u64 {
    TARGETS_EPOCH.load(Ordering::Relaxed)
}

/// The peer for one target, without its address (each request's copy is given the target's):
/// everything Pingora needs to connect and reuse connections, decided once. A plain peer is
/// the same for every upstream with the same timeouts, so all such targets share one (a
/// cluster's 10,000 upstreams hold a few instead of 10,000 copies of 672 bytes); a TLS one
/// carries its upstream's SNI, CA and client certificate and is its own.
fn peer(
    cfg: &UpstreamConfig,
    addr: SocketAddr,
    tls: Option<&UpstreamTlsRt>,
    preserve_case: bool,
) -> Arc<HttpPeer> {
    if tls.is_some() {
        return Arc::new(make_peer(cfg, addr, tls, preserve_case));
    }
    type Key = (bool, bool, [Duration; 3]);
    static PLAIN: std::sync::LazyLock<
        Mutex<std::collections::HashMap<Key, std::sync::Weak<HttpPeer>>>,
    > = std::sync::LazyLock::new(Default::default);
    let key = (
        cfg.h2,
        preserve_case,
        [cfg.connect_timeout, cfg.read_timeout, cfg.write_timeout],
    );
    let mut plain = PLAIN.lock();
    if let Some(p) = plain.get(&key).and_then(std::sync::Weak::upgrade) {
        return p;
    }
    // Settings no target holds any more are dropped as new ones come.
    plain.retain(|_, w| w.strong_count() > 0);
    let p = Arc::new(make_peer(cfg, addr, None, preserve_case));
    plain.insert(key, Arc::downgrade(&p));
    p
}

fn make_peer(
    cfg: &UpstreamConfig,
    addr: SocketAddr,
    tls: Option<&UpstreamTlsRt>,
    preserve_case: bool,
) -> HttpPeer {
    let mut peer = HttpPeer::new(
        addr,
        tls.is_some(),
        tls.map_or_else(String::new, |t| t.sni.clone()),
    );
    if let Some(t) = tls {
        peer.client_cert_key = t.client_cert.clone();
        peer.options.verify_cert = t.verify;
        peer.options.verify_hostname = t.verify;
        peer.options.ca = t.ca.clone();
    }
    if cfg.h2 {
        // gRPC and other h2-only upstreams: ALPN h2 over TLS, prior knowledge without.
        peer.options.alpn = pingora::protocols::ALPN::H2;
    }
    let o = &mut peer.options;
    o.connection_timeout = Some(cfg.connect_timeout);
    o.total_connection_timeout = Some(cfg.connect_timeout);
    o.read_timeout = Some(cfg.read_timeout);
    o.write_timeout = Some(cfg.write_timeout);
    o.idle_timeout = Some(IDLE_TIMEOUT);
    // Without it (the default) a response's names go to the client as an h2 upstream's do,
    // and the head is read into one map instead of two (vendor patch 0013).
    o.preserve_response_header_case = preserve_case;
    peer
}

#[cfg(test)]
pub(crate) mod tests;
