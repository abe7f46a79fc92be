//! A limit's compiled form (filter_config in Envoy's words): its limiter state, local or
//! global, its ladder, tarpit and quota, built once per config and kept across reloads while
//! its definition stays. The per-request decision over these is [`crate::limits::policy`].

use prometheus::{IntCounter, IntGauge};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tollgate_config::model::{Action, Config, LimitConfig, OnError, Scope, TarpitConfig};
use tollgate_core::observe::metrics::Metrics;
use tollgate_core::respond::sf_string;
use tollgate_limit::{Ladder, LeasePolicy, Leases, LimitSpec, LocalLimiter, VerdictCache};
use tollgate_store::GlobalStore;

use tollgate_core::error::BuildError;

/// Where a limit's state lives.
pub enum LimitState {
    Local(Arc<dyn LocalLimiter>),
    Global(GlobalRt),
}

/// The slots one gateway holds in a global concurrency limit, per key.
#[derive(Default)]
pub struct Held(parking_lot::Mutex<std::collections::HashMap<u64, u64>>);

impl Held {
    pub(crate) fn add(&self, key: u64) {
        *self.0.lock().entry(key).or_insert(0) += 1;
    }

    pub(crate) fn remove(&self, key: u64) {
        let mut m = self.0.lock();
        if let Some(n) = m.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                m.remove(&key);
            }
        }
    }

    /// Every key with slots held, and how many.
    pub fn snapshot(&self) -> Vec<(u64, u64)> {
        self.0.lock().iter().map(|(&k, &n)| (k, n)).collect()
    }
}

/// A global limit: Redis decides; refusals are remembered at the edge; a local share stands in
/// while Redis is away when `on_error = "local"`, for keys Redis last refused whatever
/// `on_error` says, and for fresh keys while this gateway has its most calls in flight.
pub struct GlobalRt {
    pub store: Arc<dyn GlobalStore>,
    pub spec: LimitSpec,
    pub cache: Arc<VerdictCache>,
    /// This process's share (`rate / instances`) of the limit. Drained for a key when Redis
    /// refuses it, so that it knows the key is exhausted when Redis cannot be asked.
    pub fallback: Arc<dyn LocalLimiter>,
    pub on_error: OnError,
    /// How long others stay refused while one request re-asks Redis about an expired refusal
    /// (the decision budget: the probe's answer comes sooner or not at all).
    pub probe_hold: tollgate_limit::Nanos,
    /// The limit's name, owned: background refunds outlive the request.
    pub name: Arc<str>,
    instances: u32,
    /// `tollgate_verdict_cache_hits_total{limit}`
    pub cache_hits: IntCounter,
    /// `tollgate_redis_fallback_total{limit,on_error}`
    pub fallbacks: IntCounter,
    /// Set once a call of this limit failed on its own (not an outage), so that it is logged
    /// once with its reason rather than on every request.
    pub call_error_logged: std::sync::atomic::AtomicBool,
    /// `sync = "lease"`: this gateway's slices of the limit's keys.
    pub leases: Option<Arc<Leases>>,
    /// `tollgate_lease_decisions_total{limit}`
    pub lease_decisions: IntCounter,
    /// `tollgate_lease_returned_units_total{limit}`
    pub lease_returned: IntCounter,
    /// Refusals are remembered at the edge until their retry time; not a concurrency
    /// limit's (a slot frees when any request ends).
    pub caches_refusals: bool,
    /// A concurrency limit: the slots this gateway holds, renewed in Redis.
    pub held: Option<Arc<Held>>,
}

/// A tarpit: requests held before their answer, at most `max_concurrent` at once. Each held
/// request owns a [`TarpitSlot`], released when it is dropped (answered, failed or cancelled).
pub struct TarpitRt {
    pub cfg: TarpitConfig,
    held: AtomicUsize,
}

/// A held request's place in a tarpit: released (and the route's occupancy gauge lowered)
/// when dropped, however the request ends (answered, failed, or cancelled mid-hold).
pub struct TarpitSlot(Arc<TarpitRt>, IntGauge);

impl Drop for TarpitSlot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
        self.1.dec();
    }
}

impl TarpitRt {
    pub fn new(cfg: TarpitConfig) -> Self {
        Self {
            cfg,
            held: AtomicUsize::new(0),
        }
    }

    /// A slot, unless `max_concurrent` requests are held already; `gauge` counts it while held.
    pub fn enter(self: &Arc<Self>, gauge: &IntGauge) -> Option<TarpitSlot> {
        let max = self.cfg.max_concurrent;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| {
                gauge.inc();
                TarpitSlot(self.clone(), gauge.clone())
            })
    }

    /// A random hold within the configured range.
    pub fn delay(&self) -> Duration {
        let (lo, hi) = (self.cfg.delay_min, self.cfg.delay_max);
        let span = u64::try_from((hi - lo).as_millis()).unwrap_or(0);
        lo + Duration::from_millis(if span == 0 {
            0
        } else {
            fastrand::u64(0..=span)
        })
    }

    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// A limit's escalation ladder (shared by a plan limit's variants) and its counters.
pub struct LadderRt {
    pub ladder: Arc<Ladder>,
    /// `tollgate_blocks_total{limit,rung}` by rung.
    pub imposed: Vec<IntCounter>,
}

pub struct LimitRt {
    pub cfg: LimitConfig,
    /// What a refusal by this limit becomes: 429 at once, a tarpit, a challenge.
    pub action: Action,
    /// `action = "tarpit"`: the limit's own tarpit (a route's applies to `reject` limits).
    pub tarpit: Option<Arc<TarpitRt>>,
    /// Automatic blocks of keys this limit refuses too often.
    pub ladder: Option<LadderRt>,
    /// Keys are the stable hash every instance computes alike (global limits, and limits whose
    /// blocks are shared through Redis or listed by the admin API).
    pub stable_key: bool,
    pub state: LimitState,
    /// A calendar quota: decided on calendar time, refused as QUOTA_EXCEEDED.
    pub quota: bool,
    /// Decided on calendar time (a quota, or a counting window aligned on the Unix epoch).
    pub epoch: bool,
    /// A quota's accounting past its count.
    pub quota_rt: Option<QuotaRt>,
    /// This limit never refuses (per-limit shadow or `[server] shadow`).
    pub shadow: bool,
    /// The policy name as a Structured Fields string.
    pub name_sf: String,
    /// The 429 body, rendered once: a refusal fills in its wait and request id.
    pub refusal: tollgate_core::respond::Template,
    /// `tollgate_shadow_exceeded_total{limit}`, made on first use ([`LimitRt::shadowed`]).
    shadow_counter: OnceLock<IntCounter>,
    /// `tollgate_limit_decisions_total{limit,result}`: allowed, refused, shadow_refused,
    /// blocked; each made on first use ([`LimitRt::decided`]), so that 5,000 limits hold no
    /// series before their first request.
    decisions: [OnceLock<IntCounter>; 4],
    /// Refusals per key this minute (shared by a plan limit's variants and across reloads).
    pub hot: Arc<tollgate_limit::HotKeys>,
}

/// Indexes of [`LimitRt::decisions`].
pub const ALLOWED: usize = 0;

pub const REFUSED: usize = 1;

pub const SHADOW_REFUSED: usize = 2;

pub const BLOCKED: usize = 3;

/// A quota's overage handling and usage metrics.
pub struct QuotaRt {
    /// The quota (N per period).
    pub quota: u64,
    /// What the limiter counts up to (the quota, or more: see `LimitConfig::quota_ceiling`).
    pub ceiling: u64,
    pub overage: tollgate_config::model::Overage,
    /// `overage = "throttle"`: the reduced rate past the quota (per process: a global quota's
    /// throttle takes `rate / instances`).
    pub throttle: Option<Arc<dyn LocalLimiter>>,
    /// `tollgate_quota_overage_total{limit}`: units admitted past the quota.
    pub over: IntCounter,
    /// `tollgate_quota_usage_crossed_total{limit,threshold}` for 80, 95 and 100 %.
    pub crossed: [IntCounter; 3],
}

impl LimitRt {
    /// The time this limit decides on: calendar time for quotas and counting windows (aligned
    /// on the Unix epoch), the monotonic clock else.
    #[inline]
    pub fn time(
        &self,
        now: tollgate_limit::Nanos,
        unix: tollgate_limit::Nanos,
    ) -> tollgate_limit::Nanos {
        if self.epoch {
            unix
        } else {
            now
        }
    }
}

fn quota_rt(
    cfg: &LimitConfig,
    previous: Option<&LimitRt>,
    config: &Config,
    metrics: &Metrics,
) -> Option<QuotaRt> {
    cfg.calendar?;
    let throttle = match cfg.overage {
        tollgate_config::model::Overage::Throttle(rate) => {
            let kept = previous
                .filter(|p| p.cfg.same_state_as(cfg))
                .and_then(|p| p.quota_rt.as_ref())
                .and_then(|q| q.throttle.clone());
            Some(kept.unwrap_or_else(|| {
                let instances = match (cfg.scope, &config.redis) {
                    (Scope::Global, Some(r)) => r.instances,
                    _ => 1,
                };
                LimitSpec {
                    algorithm: tollgate_limit::AlgorithmKind::TokenBucket,
                    rate,
                    burst: rate.count(),
                    delay: 0,
                    calendar: None,
                }
                .share(instances)
                .local(cfg.max_keys)
            }))
        }
        _ => None,
    };
    let name = cfg.name.as_str();
    Some(QuotaRt {
        quota: cfg.burst,
        ceiling: cfg.quota_ceiling(),
        overage: cfg.overage,
        throttle,
        over: metrics.quota_overage.with_label_values(&[name]),
        crossed: ["80", "95", "100"].map(|t| metrics.quota_crossed.with_label_values(&[name, t])),
    })
}

fn limit_state(
    cfg: &LimitConfig,
    previous: Option<&LimitRt>,
    config: &Config,
    store: Option<&Arc<dyn GlobalStore>>,
    metrics: &Metrics,
) -> Result<LimitState, BuildError> {
    let kept = previous.filter(|p| p.cfg.name == cfg.name && p.cfg.same_state_as(cfg));
    if cfg.scope == Scope::Local {
        return Ok(LimitState::Local(match kept.map(|p| &p.state) {
            Some(LimitState::Local(l)) => l.clone(),
            _ => cfg.spec().local(cfg.max_keys),
        }));
    }
    let store = store.ok_or_else(|| BuildError::NoStore(cfg.name.clone()))?;
    let (instances, cache_size, timeout) = config
        .redis
        .as_ref()
        .map_or((1, 1, std::time::Duration::from_millis(20)), |r| {
            (r.instances, r.verdict_cache, r.timeout)
        });
    let prev = match kept.map(|p| &p.state) {
        Some(LimitState::Global(g)) => Some(g),
        _ => None,
    };
    let cache = prev
        .map(|g| g.cache.clone())
        .unwrap_or_else(|| Arc::new(VerdictCache::new(cache_size)));
    // Leases carry over a reload that keeps the limit's state and its lease_max.
    let leases = cfg.lease_max.map(|max| {
        prev.and_then(|g| g.leases.clone())
            .filter(|l| {
                l.policy().max == max
                    && l.policy().unit_share == {
                        let interval = cfg.rate.period_ns() / cfg.rate.count().max(1);
                        interval.saturating_mul(u64::from(instances).max(1))
                    }
            })
            .unwrap_or_else(|| {
                // The store brings one unit back every emission interval, shared by the fleet.
                let interval = cfg.rate.period_ns() / cfg.rate.count().max(1);
                let policy = LeasePolicy::refilled(max, interval, u64::from(instances));
                Arc::new(Leases::new(policy, cfg.max_keys))
            })
    });
    let fallback = prev
        .filter(|g| g.instances == instances)
        .map(|g| g.fallback.clone())
        .unwrap_or_else(|| cfg.spec().share(instances).local(cfg.max_keys));
    Ok(LimitState::Global(GlobalRt {
        store: store.clone(),
        spec: cfg.spec(),
        cache,
        fallback,
        on_error: cfg.on_error,
        probe_hold: u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
        name: Arc::from(cfg.name.as_str()),
        instances,
        cache_hits: metrics.verdict_cache_hits.with_label_values(&[&cfg.name]),
        fallbacks: metrics
            .redis_fallbacks
            .with_label_values(&[&cfg.name, cfg.on_error.name()]),
        call_error_logged: std::sync::atomic::AtomicBool::new(false),
        leases,
        lease_decisions: metrics.lease_decisions.with_label_values(&[&cfg.name]),
        lease_returned: metrics.lease_returned.with_label_values(&[&cfg.name]),
        caches_refusals: cfg.algorithm.caps().caches_refusals,
        held: cfg
            .algorithm
            .caps()
            .holds
            .then(|| prev.and_then(|g| g.held.clone()).unwrap_or_default()),
    }))
}

impl LimitRt {
    /// `tollgate_limit_decisions_total{limit,result}` for result `i` (`ALLOWED`, `REFUSED`,
    /// `SHADOW_REFUSED`, `BLOCKED`).
    pub fn decided(&self, m: &Metrics, i: usize) -> &IntCounter {
        self.decisions[i].get_or_init(|| {
            let result = ["allowed", "refused", "shadow_refused", "blocked"][i];
            m.decisions.with_label_values(&[&self.cfg.name, result])
        })
    }

    /// `tollgate_shadow_exceeded_total{limit}`.
    pub fn shadowed(&self, m: &Metrics) -> &IntCounter {
        self.shadow_counter
            .get_or_init(|| m.shadow_exceeded.with_label_values(&[&self.cfg.name]))
    }

    /// One limit, with what `prev` (the previous runtime's limit of the same name and plan)
    /// knew of it (its limiter state, ladder, tarpit, hot keys) when its definition did not
    /// change; `sibling`: the first limit of the same name built before it (a plan limit's
    /// variants share one ladder and one hot-key table).
    pub(crate) fn build(
        cfg: &LimitConfig,
        sibling: Option<&LimitRt>,
        prev: Option<&LimitRt>,
        config: &Config,
        store: Option<&Arc<dyn GlobalStore>>,
        metrics: &Metrics,
    ) -> Result<Self, BuildError> {
        let shadow_all = config.server.shadow;
        let ladder = (!cfg.block.is_empty()).then(|| {
            // One ladder per limit name: a plan limit's variants share it, and a reload
            // keeps it while the key and the steps stay the same.
            let kept = sibling
                .and_then(|l| l.ladder.as_ref())
                .or_else(|| {
                    prev.filter(|p| p.cfg.same_blocks_as(cfg))
                        .and_then(|p| p.ladder.as_ref())
                })
                .map(|l| l.ladder.clone());
            LadderRt {
                ladder: kept.unwrap_or_else(|| Arc::new(Ladder::new(&cfg.block, cfg.max_keys))),
                imposed: (0..cfg.block.len())
                    .map(|i| {
                        metrics.blocks_total.with_label_values(&[
                            &cfg.name,
                            tollgate_core::observe::metrics::status_str(i as u16),
                        ])
                    })
                    .collect(),
            }
        });
        let tarpit = (cfg.action == Action::Tarpit).then(|| {
            let t = cfg.tarpit.unwrap_or_default();
            prev.and_then(|p| p.tarpit.as_ref())
                .filter(|p| p.cfg == t)
                .cloned()
                .unwrap_or_else(|| Arc::new(TarpitRt::new(t)))
        });
        let quota = cfg.algorithm.caps().calendar;
        Ok(LimitRt {
            action: cfg.action,
            tarpit,
            stable_key: cfg.scope == Scope::Global || ladder.is_some(),
            ladder,
            state: limit_state(cfg, prev, config, store, metrics)?,
            quota,
            epoch: cfg.algorithm.caps().epoch,
            quota_rt: quota_rt(cfg, prev, config, metrics),
            shadow: cfg.shadow || shadow_all,
            name_sf: sf_string(&cfg.name),
            refusal: tollgate_core::respond::refusal(cfg, quota),
            shadow_counter: OnceLock::new(),
            decisions: Default::default(),
            hot: sibling
                .map(|l| l.hot.clone())
                .or_else(|| prev.map(|p| p.hot.clone()))
                .unwrap_or_else(|| {
                    Arc::new(tollgate_limit::HotKeys::new(cfg.max_keys.min(100_000)))
                }),
            cfg: cfg.clone(),
        })
    }
}

/// What per-request limit code reads of a serving state: the compiled limits, the limits of
/// each route (and RLS rule), and the IPv6 key prefix. [`crate::runtime::Runtime`] implements
/// it, above this layer, so that the decision code never names the runtime.
pub trait LimitSet: Send + Sync {
    /// Every compiled limit, by index.
    fn limits(&self) -> &[LimitRt];
    /// The indexes of the limits of `set` (a route, then the RLS rules and node limits).
    fn limits_of(&self, set: usize) -> &[usize];
    /// IPv6 clients are keyed by this prefix length.
    fn ipv6_prefix(&self) -> u8;
}
