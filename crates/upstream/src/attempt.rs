//! One request's attempts on an upstream that chooses (docs/upstreams.md, "Balancing" and
//! "Retries"): the peer of each attempt, whether a failed connect falls over, and whether a
//! failure or a status is retried within the budget.

use super::pool::{Choice, Pool};
use super::target::Pick;
use std::net::IpAddr;
use tollgate_config::model::RetryTargets;

/// A request's balancing state across its attempts (only on upstreams that choose).
#[derive(Default)]
pub struct BalanceCtx {
    /// The current attempt's target.
    pub pick: Option<Pick>,
    /// Targets of the attempts before it.
    pub tried: Vec<u64>,
    /// The target a valid affinity cookie named.
    pub pinned: Option<u64>,
    hash: Option<Vec<u8>>,
    /// The next attempt leaves the current target (a retry of ours). Pingora's own retry of an
    /// idempotent request on a stale pooled connection may go to the same target again.
    pub leave_current: bool,
    /// Retries of this request after a failure an upstream may have seen (a timeout, a reset,
    /// a status): what `retry.attempts` bounds. Falling over after a failed connect is not one.
    pub resent: u32,
    /// The current attempt's upstream answered with a response head.
    pub answered: bool,
    /// The next attempt is a retry that waits `retry.backoff` first.
    pub backoff: bool,
}

/// Why an attempt failed, for `retry.on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Timeout,
    /// The connection closed or was reset before a response head.
    Reset,
    Status(u16),
}

impl Failure {
    pub fn label(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Reset => "reset",
            Failure::Status(500) => "500",
            Failure::Status(502) => "502",
            Failure::Status(503) => "503",
            Failure::Status(504) => "504",
            Failure::Status(_) => "status",
        }
    }
}

/// The peer of one attempt on an upstream that [`Pool::chooses`]: the first attempt reads the
/// affinity cookie and the hash key and pays into the retry budget; a retry leaves the targets
/// already tried.
pub fn attempt(
    pool: &Pool,
    req: &pingora::http::RequestHeader,
    client: IpAddr,
    path: Option<&str>,
    b: &mut BalanceCtx,
    first: bool,
) -> Option<Box<pingora::upstreams::peer::HttpPeer>> {
    if first {
        if let Some(budget) = &pool.budget {
            budget.deposit();
        }
        if let Some(a) = &pool.affinity {
            b.pinned = a.pinned(req);
        }
        if let Some(k) = &pool.config().hash_key {
            b.hash = super::affinity::hash_input(k, req, client, path);
        }
    } else if let Some(prev) = b.pick.take() {
        if std::mem::take(&mut b.leave_current) {
            b.tried.push(prev.target.id);
        }
    }
    b.answered = false;
    let pick = pool.choose(&Choice {
        hash: b.hash.as_deref(),
        pinned: b.pinned,
        tried: &b.tried,
    })?;
    let peer = pick.target.peer();
    b.pick = Some(pick);
    Some(peer)
}

/// Whether a request whose connect just failed (nothing was sent) tries another target: in
/// every configuration, whatever its method or body, spending no retry budget and no
/// `retry.attempts`, while a healthy target it has not tried remains (without a choosing
/// pool, while it has made fewer attempts than the upstream has targets; Pingora's own bound,
/// 16 attempts, caps both). A retry policy can only add to this, never take from it.
pub fn may_fall_over(
    pool: &Pool,
    b: Option<&mut BalanceCtx>,
    tries: usize,
    metrics: &tollgate_core::observe::metrics::Metrics,
) -> bool {
    let more = match b {
        Some(b) => {
            let mut tried = b.tried.clone();
            tried.extend(b.pick.as_ref().map(|p| p.target.id));
            let more = pool.untried(&tried) > 0;
            b.leave_current |= more;
            more
        }
        None => tries < pool.len(),
    };
    if more {
        metrics
            .upstream_retries
            .with_label_values(&[pool.config().name.as_str(), "connect"])
            .inc();
    }
    more
}

/// Whether the attempt that just failed with `why`, after the upstream may have read the
/// request, is tried again: `retry.on` names it, fewer than `retry.attempts` such retries
/// were made, the method is idempotent, the request has no body, another healthy target is
/// untried (with `targets = "any"`: any healthy target, a new round once all were tried),
/// and the budget has a retry. Counted either way
/// once the budget is asked; on yes the current target is left and the retry counted in `b`.
pub fn may_retry(
    pool: &Pool,
    b: Option<&mut BalanceCtx>,
    idempotent_without_body: bool,
    why: Failure,
    metrics: &tollgate_core::observe::metrics::Metrics,
) -> bool {
    let Some(r) = pool.config().retry else {
        return false;
    };
    let on = match why {
        Failure::Timeout => r.on.timeout,
        Failure::Reset => r.on.reset,
        Failure::Status(code) => r.on.status(code),
    };
    let Some(b) = b else { return false };
    if !on || b.resent >= r.attempts || !idempotent_without_body {
        return false;
    }
    let mut tried = b.tried.clone();
    tried.extend(b.pick.as_ref().map(|p| p.target.id));
    // Every target tried: `targets = "any"` starts a new round over all of them.
    let again = pool.untried(&tried) == 0;
    if again && (r.targets != RetryTargets::Any || pool.untried(&[]) == 0) {
        return false;
    }
    let upstream = pool.config().name.as_str();
    if pool.budget.as_ref().is_some_and(|bud| !bud.take()) {
        metrics
            .upstream_retry_budget_exhausted
            .with_label_values(&[upstream])
            .inc();
        return false;
    }
    metrics
        .upstream_retries
        .with_label_values(&[upstream, why.label()])
        .inc();
    b.resent += 1;
    if again {
        b.tried.clear();
    }
    b.leave_current = !again;
    b.backoff = r.backoff.is_some();
    true
}
