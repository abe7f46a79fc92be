//! A route's limits, decided together.
//!
//! Every listed limit applies and the strictest decides. Local limits are decided first, in
//! order, synchronously; global limits (Redis) after them, all at once, so a request waits for
//! one Redis round trip however many global limits it has. When one refuses, what the others
//! took is given back (locally at once; in Redis by a refund sent in the background), so a
//! refused request consumes nothing (the contract), and Retry-After covers the longest wait
//! known without asking Redis again. Shadow limits are decided the same way but never refuse.
//!
//! Global refusals are remembered in the limit's verdict cache until they expire: a key that
//! Redis refused is refused again from memory, with the remaining wait, and Redis is not asked
//! (checked in the synchronous step, so a hammered key costs no await at all). When Redis fails
//! (timeout, error, open breaker), the limit's `on_error` applies: `open` admits, `closed`
//! refuses with 503, `local` decides on this process's share of the limit.
//!
//! A global limit with `sync = "lease"` is decided in the local step too while its key's slice
//! (crates/limit `Lease`) holds units; otherwise the global step asks Redis for a new slice,
//! sized from the key's recent rate here (one unit for a cold key: an exact decision).

use crate::limits::compiled::{GlobalRt, LimitRt, LimitSet, LimitState};
use crate::limits::identity::{KeyHasher, KeyInput};
use tollgate_config::model::OnError;
use tollgate_config::MAX_LIMITS_PER_ROUTE;
use tollgate_limit::{Cached, Clock, Decision, Grant, LocalLimiter, Nanos, Take};

/// After a probe took the last unit, refusals stay cached this long before the next probe.
const EMPTY_HOLD: Nanos = 1_000_000;
use tollgate_store::{GlobalKey, Leased};

/// Where a limit took a request's unit from, so that it goes back to the same place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Took {
    /// This process's limiter (or a global limit's local fallback).
    pub local: bool,
    /// Redis.
    pub global: bool,
    /// The key's lease (`sync = "lease"`).
    pub lease: bool,
}

impl Took {
    pub fn any(self) -> bool {
        self.local || self.global || self.lease
    }
}

/// What the route's limits say about one request.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The refusing limit (index into `Runtime::limits`) and the wait before a retry can pass.
    pub denied: Option<(usize, Nanos)>,
    /// The enforced limit nearest to exhaustion after this request: (limit, remaining, reset).
    pub nearest: Option<(usize, u64, Nanos)>,
    /// Shadow limits that would have refused, as a bit set over the route's limit positions.
    pub shadow_exceeded: u32,
    /// How long to hold the request before passing it on (a leaky bucket's queue).
    pub delay: Nanos,
    /// A global limit with `on_error = "closed"` that could not be decided: answer 503.
    pub unavailable: Option<usize>,
    /// A quota admitted past its count (soft, overage, throttle): the limit and its usage.
    pub quota_warning: Option<(usize, u64)>,
    /// The key is blocked by this limit's escalation ladder for this much longer: 403.
    pub blocked: Option<(usize, Nanos)>,
    /// Enforced limits that refused (or found the key blocked), as a bit set over the route's
    /// limit positions: their ladders count the refusal.
    pub refused: u32,
}

/// The state between the local step and the global one.
pub struct Plan {
    v: Verdict,
    route: usize,
    now: Nanos,
    /// Calendar time, for quotas.
    unix: Nanos,
    keys: [u64; MAX_LIMITS_PER_ROUTE],
    /// Positions that took a unit (locally, or from a global limit's local fallback).
    taken: u32,
    /// Positions that took a unit in Redis.
    taken_global: u32,
    /// Positions that took a unit from their key's lease.
    taken_lease: u32,
    /// Units to ask Redis for, by position (leases; 1 for an exact limit).
    want: [u64; MAX_LIMITS_PER_ROUTE],
    /// Global positions still to ask Redis about.
    pending: u32,
    /// Of those, the ones whose cached refusal just expired (this request is the probe).
    probes: u32,
    /// Units this request spends on each limit (1; an RLS request's `hits_addend`).
    cost: u64,
    /// Leased positions asked from Redis exactly (a cost other than 1 is not taken from a
    /// lease).
    exact: u32,
}

impl Plan {
    /// The verdict, if the local step already settled it (refused, or nothing global to ask).
    pub fn settled(&self) -> Option<Verdict> {
        (self.v.denied.is_some() || self.v.blocked.is_some() || self.pending == 0).then_some(self.v)
    }

    /// The key of the limit at `pos` of the route (0 when it was not counted).
    pub fn key(&self, pos: usize) -> u64 {
        self.keys.get(pos).copied().unwrap_or(0)
    }

    /// The monotonic time the request was decided at.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Where the limit at `pos` took a unit for this request from, if it did.
    pub fn took(&self, pos: usize) -> Took {
        let bit = 1u32 << pos;
        Took {
            local: self.taken & bit != 0,
            global: self.taken_global & bit != 0,
            lease: self.taken_lease & bit != 0,
        }
    }
}

fn note_allow(
    v: &mut Verdict,
    li: usize,
    shadow: bool,
    remaining: u64,
    reset: Nanos,
    delay: Nanos,
) {
    if shadow {
        return;
    }
    let nearer = match v.nearest {
        None => true,
        Some((_, r, t)) => remaining < r || (remaining == r && reset > t),
    };
    if nearer {
        v.nearest = Some((li, remaining, reset));
    }
    v.delay = v.delay.max(delay);
}

/// A quota's admit seen through its overage strategy: `remaining` as the client sees it
/// (against the quota, not the limiter's ceiling), the 80/95/100 % crossings counted, and past
/// the quota the strategy decides (soft, overage: admitted with a warning; throttle: the reduced
/// rate decides). The flag says an admit became a refusal: the unit taken must go back.
fn quota_outcome(
    l: &LimitRt,
    li: usize,
    key: u64,
    d: Decision,
    now: Nanos,
    v: &mut Verdict,
) -> (Decision, bool) {
    let (
        Some(q),
        Decision::Allow {
            remaining,
            reset,
            delay,
        },
    ) = (&l.quota_rt, d)
    else {
        return (d, false);
    };
    let used = q.ceiling.saturating_sub(remaining);
    for (i, pct) in [80u128, 95, 100].into_iter().enumerate() {
        let t = q.quota as u128 * pct;
        if (used.saturating_sub(1) as u128) * 100 < t && t <= used as u128 * 100 {
            q.crossed[i].inc();
        }
    }
    let shown = Decision::Allow {
        remaining: q.quota.saturating_sub(used),
        reset,
        delay,
    };
    if used <= q.quota {
        return (shown, false);
    }
    if let Some(t) = &q.throttle {
        if let Decision::Deny { retry_after } = t.acquire(key, now, 1) {
            return (Decision::Deny { retry_after }, true);
        }
    }
    q.over.inc();
    if v.quota_warning.is_none() {
        v.quota_warning = Some((li, used));
    }
    (shown, false)
}

/// A request's key under a limit: global limits need the hash every instance computes alike.
pub(crate) fn limit_key(
    rt: &(impl LimitSet + ?Sized),
    l: &LimitRt,
    hasher: &KeyHasher,
    input: &KeyInput,
) -> Option<u64> {
    if l.stable_key {
        hasher.stable_key(&l.cfg.key, input, rt.ipv6_prefix())
    } else {
        hasher.key(&l.cfg.key, input, rt.ipv6_prefix())
    }
}

/// Ends the local step with a refusal: what was taken goes back, elected probes are released
/// (they will not ask Redis now: the next request does), and so are asks for lease slices;
/// nothing global is asked.
fn settle_refused(rt: &(impl LimitSet + ?Sized), p: &mut Plan) {
    give_back(rt, p);
    let limits = rt.limits_of(p.route);
    for (pos, &lj) in limits.iter().enumerate() {
        if p.pending & (1 << pos) == 0 {
            continue;
        }
        if let LimitState::Global(g) = &rt.limits()[lj].state {
            if p.probes & (1 << pos) != 0 {
                g.cache.release(p.keys[pos], p.now);
            }
            if let Some(leases) = &g.leases {
                leases.refused(p.keys[pos], p.want[pos]);
            }
        }
    }
    p.pending = 0;
    p.probes = 0;
}

/// The local step: keys, local limits, cached global refusals. Never waits.
pub fn decide_local(
    rt: &(impl LimitSet + ?Sized),
    route: usize,
    hasher: &KeyHasher,
    input: &KeyInput,
    plan: usize,
    now: Nanos,
    unix: Nanos,
) -> Plan {
    decide_local_units(rt, route, hasher, input, plan, now, unix, 1)
}

/// [`decide_local`] for the limit set `set` (a route, or an RLS rule: see
/// [`Runtime::limits_of`]), each limit spending `cost` units.
#[allow(clippy::too_many_arguments)]
pub fn decide_local_units(
    rt: &(impl LimitSet + ?Sized),
    route: usize,
    hasher: &KeyHasher,
    input: &KeyInput,
    plan: usize,
    now: Nanos,
    unix: Nanos,
    cost: u64,
) -> Plan {
    // (A rate limit service's check-only call spends 0: answered, nothing taken.)
    let limits = rt.limits_of(route);
    let mut p = Plan {
        v: Verdict::default(),
        route,
        now,
        unix,
        keys: [0; MAX_LIMITS_PER_ROUTE],
        taken: 0,
        taken_global: 0,
        taken_lease: 0,
        want: [cost; MAX_LIMITS_PER_ROUTE],
        pending: 0,
        probes: 0,
        cost,
        exact: 0,
    };

    for (pos, &li) in limits.iter().enumerate() {
        let l = &rt.limits()[li];
        // Another plan's variant of a plan limit: not this caller's.
        if l.cfg.plan.is_some_and(|pl| pl != plan) {
            continue;
        }
        let Some(key) = limit_key(rt, l, hasher, input) else {
            continue;
        };
        p.keys[pos] = key;
        if let Some(lad) = &l.ladder {
            if let Some(wait) = lad.ladder.blocks.check(key, now) {
                if !l.shadow {
                    p.v.blocked = Some((li, wait));
                    p.v.refused |= 1 << pos;
                    settle_refused(rt, &mut p);
                    return p;
                }
            }
        }
        let mut from_lease = false;
        let d = match &l.state {
            LimitState::Local(limiter) => limiter.acquire(key, l.time(now, unix), cost),
            LimitState::Global(g) => match from_memory(g, key, pos, &mut p) {
                Some((d, leased)) => {
                    from_lease = leased;
                    d
                }
                None => continue,
            },
        };
        let (d, undo) = quota_outcome(l, li, key, d, now, &mut p.v);
        if undo {
            p.taken |= 1 << pos;
        }
        match d {
            Decision::Allow {
                remaining,
                reset,
                delay,
            } => {
                if from_lease {
                    p.taken_lease |= 1 << pos;
                } else {
                    p.taken |= 1 << pos;
                }
                note_allow(&mut p.v, li, l.shadow, remaining, reset, delay);
            }
            Decision::Deny { retry_after } => {
                if l.shadow {
                    p.v.shadow_exceeded |= 1 << pos;
                    continue;
                }
                p.v.denied = Some((li, retry_after));
                p.v.refused |= 1 << pos;
                give_back(rt, &mut p);
                later_refusals(rt, &mut p, pos, plan, hasher, input);
                settle_refused(rt, &mut p);
                return p;
            }
        }
    }
    p
}

/// A global limit decided here without Redis: a cached refusal, or a unit from this
/// process's lease. `None`: Redis is to be asked (the limit is marked pending in `p`). The
/// decision and whether it came from the lease.
#[inline]
fn from_memory(g: &GlobalRt, key: u64, pos: usize, p: &mut Plan) -> Option<(Decision, bool)> {
    let now = p.now;
    match g.cache.check(key, now, g.probe_hold) {
        Cached::Refused(wait) => {
            g.cache_hits.inc();
            Some((Decision::Deny { retry_after: wait }, false))
        }
        cached => {
            let probe = cached == Cached::Probe;
            let leases = g.leases.as_ref().filter(|_| p.cost == 1);
            if g.leases.is_some() && p.cost != 1 {
                p.exact |= 1 << pos;
            }
            match leases.map(|ls| ls.take(key, now)) {
                Some(Take::Wait {
                    retry_after,
                    give_back,
                }) => {
                    // Dry: refused here until a useful slice can be asked for.
                    if give_back > 0 {
                        give_back_lease(g, key, give_back);
                    }
                    g.cache_hits.inc();
                    Some((Decision::Deny { retry_after }, false))
                }
                Some(Take::Spent { remaining, reset }) => {
                    if probe {
                        g.cache.remove(key);
                    }
                    g.lease_decisions.inc();
                    let d = Decision::Allow {
                        remaining,
                        reset,
                        delay: 0,
                    };
                    Some((d, true))
                }
                ask => {
                    if let Some(Take::Ask { want, give_back }) = ask {
                        p.want[pos] = want;
                        if give_back > 0 {
                            give_back_lease(g, key, give_back);
                        }
                    }
                    p.probes |= (probe as u32) << pos;
                    p.pending |= 1 << pos;
                    None
                }
            }
        }
    }
}

/// After a refusal at `pos`: would the later enforced limits refuse too, and for longer?
/// (Global ones are only asked from the cache: a refusal must not cost a Redis call.)
fn later_refusals(
    rt: &(impl LimitSet + ?Sized),
    p: &mut Plan,
    pos: usize,
    plan: usize,
    hasher: &KeyHasher,
    input: &KeyInput,
) {
    let (now, unix) = (p.now, p.unix);
    for (pos2, &lj) in rt.limits_of(p.route).iter().enumerate().skip(pos + 1) {
        let l2 = &rt.limits()[lj];
        if l2.shadow || l2.cfg.plan.is_some_and(|pl| pl != plan) {
            continue;
        }
        let Some(k) = limit_key(rt, l2, hasher, input) else {
            continue;
        };
        p.keys[pos2] = k;
        let wait = match &l2.state {
            LimitState::Local(limiter) => match limiter.peek(k, l2.time(now, unix), 1) {
                Decision::Deny { retry_after } => Some(retry_after),
                Decision::Allow { .. } => None,
            },
            LimitState::Global(g) => g.cache.peek(k, now),
        };
        if let Some(r2) = wait {
            p.v.refused |= 1 << pos2;
            if p.v.denied.is_some_and(|(_, r)| r2 > r) {
                p.v.denied = Some((lj, r2));
            }
        }
    }
}

/// The global step: asks Redis about every pending global limit at once.
pub async fn decide_global(
    rt: &(impl LimitSet + ?Sized),
    p: &mut Plan,
    clock: &dyn Clock,
) -> Verdict {
    if let Some(v) = p.settled() {
        return v;
    }
    let limits = rt.limits_of(p.route);
    let mut calls = Vec::with_capacity(p.pending.count_ones() as usize);
    for (pos, &li) in limits.iter().enumerate() {
        if p.pending & (1 << pos) == 0 {
            continue;
        }
        if let LimitState::Global(g) = &rt.limits()[li].state {
            let want = p.want[pos];
            let exact = p.exact & (1 << pos) != 0;
            let key = GlobalKey {
                limit: &g.name,
                key: p.keys[pos],
                // A cached refusal's probe: a key this gateway knows is refused, whose call a
                // flood of fresh keys must not crowd out. (Not a grown lease: two quick
                // requests grow one, so a flood could claim the reserve with them.)
                known: p.probes & (1 << pos) != 0,
                patient: rt.limits()[li].cfg.on_error == tollgate_config::model::OnError::Fail,
            };
            calls.push(async move {
                let r = if let (Some(leases), false) = (&g.leases, exact) {
                    // The store records the slices' ttl: refusals elsewhere are not cached
                    // past the time their units may come back.
                    let ttl = std::time::Duration::from_nanos(leases.policy().ttl);
                    g.store.lease(&g.spec, key, want, ttl).await
                } else {
                    g.store
                        .acquire(&g.spec, key, want)
                        .await
                        .map(|decision| Leased {
                            decision,
                            granted: decision.is_allowed() as u64,
                            lapse: None,
                        })
                };
                (pos, li, r)
            });
        }
    }
    // One pending limit (the common case) is awaited directly: no join machinery.
    let results = if calls.len() == 1 {
        match calls.pop() {
            Some(call) => vec![call.await],
            None => Vec::new(),
        }
    } else {
        futures_util::future::join_all(calls).await
    };
    let now = clock.now();
    for (pos, li, result) in results {
        let l = &rt.limits()[li];
        let LimitState::Global(g) = &l.state else {
            continue;
        };
        let key = p.keys[pos];
        let want = p.want[pos];
        let d = match result {
            Ok(leased) => answered(g, l, pos, key, want, leased, p, now),
            Err(e) => match undecided(g, l, li, pos, key, want, &e, p, now, clock) {
                Some(d) => d,
                None => continue,
            },
        };
        // A throttled global quota's refusal: its Redis unit is in taken_global and goes back
        // with the rest below.
        let (d, _) = quota_outcome(l, li, key, d, now, &mut p.v);
        note_global(&mut p.v, l, li, pos, d);
    }
    if p.v.denied.is_some() || p.v.unavailable.is_some() {
        give_back(rt, p);
    }
    p.v
}

/// Redis answered a global limit's call: the refusal cached (and the local share drained),
/// or the units granted recorded (in the lease, or as taken), the cached refusal lifted.
#[allow(clippy::too_many_arguments)]
#[inline]
fn answered(
    g: &GlobalRt,
    l: &LimitRt,
    pos: usize,
    key: u64,
    want: u64,
    leased: Leased,
    p: &mut Plan,
    now: Nanos,
) -> Decision {
    let Leased {
        decision,
        granted,
        lapse,
    } = leased;
    let mut d = decision;
    match &mut d {
        Decision::Deny { retry_after } => {
            if let Some(leases) = &g.leases {
                // Dry: this gateway waits for a useful slice, its refusals cached meanwhile.
                *retry_after = leases.store_refused(key, now, want, *retry_after);
            }
            if g.caches_refusals {
                g.cache.insert(key, now.saturating_add(*retry_after), now);
                // The local share knows it too: when Redis cannot be asked, this
                // key starts from empty, never from a full burst.
                drain(&*g.fallback, key, l.time(now, p.unix));
            }
        }
        Decision::Allow {
            remaining, reset, ..
        } => {
            match g.leases.as_ref().filter(|_| p.exact & (1 << pos) == 0) {
                Some(leases) => {
                    p.taken_lease |= 1 << pos;
                    let lapse = lapse.map(|l| l.as_nanos().min(u64::MAX as u128) as u64);
                    *remaining = leases.grant(
                        key,
                        now,
                        want,
                        Grant {
                            granted,
                            remaining: *remaining,
                            reset: *reset,
                            lapse,
                        },
                    );
                }
                None => {
                    p.taken_global |= 1 << pos;
                    // A key whose share was drained (Redis refused it before)
                    // spends from it too: when Redis cannot be asked, the share
                    // has not refilled by what Redis admitted meanwhile.
                    g.fallback.follow(key, l.time(now, p.unix), 1);
                }
            }
            let remaining = *remaining;
            if p.probes & (1 << pos) != 0 {
                if remaining == 0 {
                    // Nothing left: the next unit is not due at once, so the herd
                    // stays refused a moment longer, then one probes again.
                    g.cache.hold(key, now.saturating_add(EMPTY_HOLD), now);
                } else {
                    g.cache.remove(key);
                }
            }
        }
    }
    d
}

/// A global limit's decision into the verdict: shadow refusals noted, the longest
/// enforced refusal kept.
#[inline]
fn note_global(v: &mut Verdict, l: &LimitRt, li: usize, pos: usize, d: Decision) {
    match d {
        Decision::Allow {
            remaining,
            reset,
            delay,
        } => note_allow(v, li, l.shadow, remaining, reset, delay),
        Decision::Deny { retry_after } => {
            if l.shadow {
                v.shadow_exceeded |= 1 << pos;
            } else {
                v.refused |= 1 << pos;
                if v.denied.is_none_or(|(_, r)| retry_after > r) {
                    v.denied = Some((li, retry_after));
                }
            }
        }
    }
}

/// What a global limit says when Redis gave no answer (`e`): a key Redis last refused stays
/// refused whatever the breaker says (from memory until the next probe while Redis is there
/// but this call went unanswered; by this process's share, drained when Redis refused it, in
/// an outage); any other key is decided by the share when the call was not made or met a
/// queue (a flood of fresh keys is met at `rate / instances` rather than queued until every
/// call is late), and by the limit's `on_error` in an outage. `None`: nothing to report for
/// this limit (admitted by `open`, or `closed`'s 503 noted in the verdict).
#[allow(clippy::too_many_arguments)]
fn undecided(
    g: &GlobalRt,
    l: &LimitRt,
    li: usize,
    pos: usize,
    key: u64,
    want: u64,
    e: &tollgate_store::StoreError,
    p: &mut Plan,
    now: Nanos,
    clock: &dyn Clock,
) -> Option<Decision> {
    if let Some(leases) = &g.leases {
        leases.refused(key, want);
    }
    // An outage shows in the store's metrics and breaker log; a call that failed on its own
    // (the script refused its arguments, the key holds another type) repeats on every
    // request: logged once per limit, with its reason.
    if !e.is_outage()
        && !e.is_unasked()
        && !g
            .call_error_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::error!(
            event = "global_limit_call_failed",
            limit = %g.name,
            error = %e,
            on_error = g.on_error.name(),
            "this limit's Redis call fails on its own, not from an outage; on_error applies to it (logged once per limit until a reload)"
        );
    }
    g.fallbacks.inc();
    let known_refused = p.probes & (1 << pos) != 0;
    let unasked = e.is_unasked();
    if known_refused && unasked {
        g.cache.insert(key, now.saturating_add(g.probe_hold), now);
        return Some(Decision::Deny {
            retry_after: g.probe_hold.max(1),
        });
    }
    let share = |p: &mut Plan| {
        let d = g
            .fallback
            .acquire(key, l.time(now, clock.unix_now()), p.cost);
        if d.is_allowed() {
            p.taken |= 1 << pos;
        }
        d
    };
    match g.on_error {
        // (fail: the caller's own failure policy decides, whatever Redis's state.)
        _ if (known_refused || unasked) && g.on_error != OnError::Fail => {
            let d = share(p);
            if let (Decision::Deny { retry_after }, true) = (d, known_refused) {
                // Still refused: from memory until the share refills; the next probe asks
                // Redis again then.
                g.cache.insert(key, now.saturating_add(retry_after), now);
            }
            Some(d)
        }
        OnError::Local => Some(share(p)),
        // Fail: the rate limit service fails the call (its caller's own failure policy
        // decides); on a route, answered as closed.
        OnError::Closed | OnError::Fail => {
            if !l.shadow && p.v.unavailable.is_none() {
                p.v.unavailable = Some(li);
            }
            None
        }
        // Open: admitted, and no RateLimit field can be reported for it.
        OnError::Open => None,
    }
}

/// Gives back one unit `l` took for `key` where it came from: this process's limiter (or a
/// global limit's local fallback), the key's lease, or Redis (in the background: nobody waits
/// for it; also for a lease unit whose slice has ended).
pub fn return_unit(l: &LimitRt, key: u64, t: Nanos, took: Took) {
    return_units(l, key, t, took, 1);
}

/// [`return_unit`] for `units` units (never from a lease: a cost over 1 is not leased).
fn return_units(l: &LimitRt, key: u64, t: Nanos, took: Took, units: u64) {
    match &l.state {
        LimitState::Local(limiter) if took.local => limiter.refund(key, t, units),
        LimitState::Global(g) => {
            if took.local {
                g.fallback.refund(key, t, units);
            }
            let kept = took.lease && g.leases.as_ref().is_some_and(|ls| ls.put_back(key, t));
            if took.global || (took.lease && !kept) {
                refund_global(g, key, units);
            }
        }
        LimitState::Local(_) => {}
    }
}

/// Takes everything `key` has left in a local limiter (a global limit's share, when Redis
/// refused the key): what peek says remains after one unit, and that one.
fn drain(limiter: &dyn LocalLimiter, key: u64, t: Nanos) {
    if let Decision::Allow { remaining, .. } = limiter.peek(key, t, 1) {
        let _ = limiter.acquire(key, t, remaining.saturating_add(1));
    }
}

/// Gives `units` back to Redis in the background.
fn refund_global(g: &GlobalRt, key: u64, units: u64) {
    let (store, spec, name) = (g.store.clone(), g.spec, g.name.clone());
    // A request context dropped outside the runtime (at exit) has nowhere to send it.
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        // Known: a refund shed would leave units taken in Redis.
        let key = GlobalKey {
            limit: &name,
            key,
            known: true,
            patient: false,
        };
        let _ = store.refund(&spec, key, units).await;
    });
}

/// Gives the unspent units of an ended slice back to Redis.
pub fn give_back_lease(g: &GlobalRt, key: u64, units: u64) {
    g.lease_returned.inc_by(units);
    refund_global(g, key, units);
}

/// Refunds every unit this request took, because it is refused after all.
fn give_back(rt: &(impl LimitSet + ?Sized), p: &mut Plan) {
    let limits = rt.limits_of(p.route);
    for (pos, &li) in limits.iter().enumerate() {
        let l = &rt.limits()[li];
        return_units(l, p.keys[pos], l.time(p.now, p.unix), p.took(pos), p.cost);
    }
    p.taken = 0;
    p.taken_global = 0;
    p.taken_lease = 0;
    p.v.nearest = None;
    p.v.shadow_exceeded = 0;
    p.v.delay = 0;
    p.v.quota_warning = None;
}

#[cfg(test)]
mod tests;
