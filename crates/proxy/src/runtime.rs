//! The compiled model: everything a request needs, built once from a validated config.
//!
//! A [`Runtime`] is immutable; the live process ([`crate::shared::Shared`]) holds the current
//! one behind an `ArcSwap`, so a reload is one atomic pointer swap and requests in flight
//! finish on the runtime they started with. Limiter state and upstream pools (with their
//! health) are carried over from the previous runtime when their definitions did not change.

use crate::limits::compiled::{LimitRt, LimitSet, TarpitRt};
use http::HeaderValue;
use ipnet::IpNet;
use prometheus::IntCounter;
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_config::{Config, RouteAction, RouteConfig, UpstreamConfig};
use tollgate_core::error::BuildError;
use tollgate_core::observe::metrics::Metrics;
use tollgate_core::respond::policy_item;
use tollgate_store::GlobalStore;
use tollgate_upstream::pool::Pool;

pub mod series;

pub use tollgate_config::MAX_LIMITS_PER_ROUTE;

pub struct UpstreamRt {
    /// The targets, their health and the peers they are reached through (and the upstream's
    /// config: [`UpstreamRt::cfg`]).
    pub pool: Arc<Pool>,
}

impl UpstreamRt {
    pub fn cfg(&self) -> &UpstreamConfig {
        self.pool.config()
    }
}

/// Each target's TLS, in target order (the name verified is the target's host unless `sni`
/// says); empty for a plaintext upstream.
fn upstream_tls(
    cfg: &UpstreamConfig,
) -> Result<Vec<tollgate_core::tls::upstream::UpstreamTlsRt>, BuildError> {
    let Some(tls) = &cfg.tls else {
        return Ok(Vec::new());
    };
    if !tls.verify {
        tracing::warn!(
            event = "upstream_tls_unverified",
            upstream = %cfg.name,
            "upstream {}: tls.verify = false: its certificates are not verified",
            cfg.name
        );
    }
    cfg.targets
        .iter()
        .map(|target| {
            tollgate_core::tls::upstream::upstream_tls(tls, &target.host).map_err(|reason| {
                BuildError::UpstreamTls {
                    upstream: cfg.name.clone(),
                    reason,
                }
            })
        })
        .collect()
}

/// A route's authentication and its metric handles.
pub struct RouteAuth {
    pub auth: Arc<tollgate_auth::AuthRt>,
    /// `tollgate_auth_total{route,method,result}`, by [`tollgate_auth::RESULTS`].
    pub counts: [IntCounter; 6],
    /// `tollgate_auth_service_seconds{route}`.
    pub latency: prometheus::Histogram,
}

/// The previous runtime's parts by name, so that a reload finds what it keeps of each in one
/// lookup (15,000 routes and 10,000 upstreams: a scan per part would be quadratic). Where
/// names repeat, the first one is kept, as a scan would find it.
#[derive(Default)]
struct Kept<'a> {
    limits: HashMap<(&'a str, Option<usize>), &'a LimitRt>,
    upstreams: HashMap<&'a str, &'a UpstreamRt>,
    routes: HashMap<&'a str, &'a RouteRt>,
    auths: HashMap<&'a str, &'a Arc<tollgate_auth::AuthRt>>,
}

impl<'a> Kept<'a> {
    fn new(previous: Option<&'a Runtime>) -> Self {
        let Some(p) = previous else {
            return Self::default();
        };
        fn index<'a, K: std::hash::Hash + Eq, T>(
            items: &'a [T],
            key: impl Fn(&'a T) -> K,
        ) -> HashMap<K, &'a T> {
            let mut map = HashMap::with_capacity(items.len());
            for it in items {
                map.entry(key(it)).or_insert(it);
            }
            map
        }
        Self {
            limits: index(&p.limits, |l| (l.cfg.name.as_str(), l.cfg.plan)),
            upstreams: index(&p.upstreams, |u| u.cfg().name.as_str()),
            routes: index(&p.routes, |r| r.cfg.name.as_str()),
            auths: index(&p.auths, |a| a.cfg.name.as_str()),
        }
    }
}

/// Each upstream's pool, built anew (a reload reads the TLS files again), with the health
/// of the previous pool when the upstream did not change.
fn upstreams(
    configs: &[UpstreamConfig],
    kept: &Kept,
    preserve_case: bool,
) -> Result<Vec<UpstreamRt>, BuildError> {
    let mut upstreams = Vec::with_capacity(configs.len());
    for cfg in configs {
        let pool = Pool::new(cfg, &upstream_tls(cfg)?, preserve_case);
        if let Some(old) = kept.upstreams.get(cfg.name.as_str()) {
            pool.inherit(&old.pool);
        }
        upstreams.push(UpstreamRt {
            pool: Arc::new(pool),
        });
    }
    Ok(upstreams)
}

/// `[tracing]`, compiled: the previous runtime's while it is unchanged (its client and
/// queue stay).
fn tracing(
    config: &Config,
    previous: Option<&Runtime>,
) -> Result<Option<Arc<tollgate_core::observe::traces::TraceRt>>, BuildError> {
    Ok(match &config.tracing {
        None => None,
        Some(t) => match previous
            .and_then(|p| p.tracing.as_ref())
            .filter(|p| p.cfg == *t)
        {
            Some(kept) => Some(kept.clone()),
            None => Some(Arc::new(
                tollgate_core::observe::traces::TraceRt::build(t).map_err(BuildError::Tracing)?,
            )),
        },
    })
}

/// `[jwt] jwks_url`'s set: the previous runtime's when the URL, CA and refetch floor stay (its
/// keys and schedule go on), else a new one (fetched by housekeeping).
fn jwks(
    config: &Config,
    previous: Option<&Runtime>,
) -> Result<Option<Arc<tollgate_auth::jwks::Jwks>>, BuildError> {
    let Some(r) = config.jwt.as_ref().and_then(|j| j.remote.as_ref()) else {
        return Ok(None);
    };
    let kept = previous
        .and_then(|p| p.jwks.as_ref())
        .filter(|j| j.url == r.url && j.ca.as_deref() == r.ca.as_deref() && j.refetch == r.refetch);
    if let Some(j) = kept {
        return Ok(Some(j.clone()));
    }
    tollgate_auth::jwks::Jwks::new(&r.url, r.ca.as_deref(), r.refetch)
        .map(|j| Some(Arc::new(j)))
        .map_err(|e| BuildError::Auth("jwt.jwks_url".into(), e))
}

/// Each auth compiled, or the previous runtime's when unchanged (a `jwt` auth only while
/// `[jwt]` is unchanged too: tokens it verified stay verified only under the same keys).
fn auths(
    config: &Config,
    previous: Option<&Runtime>,
    kept: &Kept,
) -> Result<Vec<Arc<tollgate_auth::AuthRt>>, BuildError> {
    let same_jwt = previous.is_some_and(|p| p.config.jwt == config.jwt);
    config
        .auth
        .iter()
        .map(|cfg| {
            let kept = kept
                .auths
                .get(cfg.name.as_str())
                .filter(|a| a.cfg == *cfg)
                .filter(|a| same_jwt || !matches!(a.method, tollgate_auth::Method::Bearer(_)));
            match kept {
                Some(a) => Ok(Arc::clone(a)),
                None => tollgate_auth::AuthRt::build(
                    cfg,
                    config
                        .jwt
                        .as_ref()
                        .map_or("authorization", |j| j.header.as_str()),
                )
                .map(Arc::new)
                .map_err(|e| BuildError::Auth(cfg.name.clone(), e)),
            }
        })
        .collect()
}

/// The request stages a route uses ([`crate::stages`]), compiled once per route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stages {
    /// It has access lists of its own or from `[access]`.
    pub access: bool,
    /// It requires authentication (`auth`).
    pub auth: bool,
    /// It lists limits.
    pub limits: bool,
    /// It answers CORS preflights and names allowed origins (`cors`).
    pub cors: bool,
}

pub struct RouteRt {
    pub cfg: RouteConfig,
    pub name: Arc<str>,
    /// The request stages this route uses (see [`crate::stages`]).
    pub stages: Stages,
    /// Its authentication, with its metric handles.
    pub auth: Option<Box<RouteAuth>>,
    /// The request body cap (`max_body_bytes`, the route's or `[server]`'s; 0: none).
    pub max_body: u64,
    /// Header rules, CORS, compression, bandwidth (`None`: the route uses none of them).
    pub shaping: Option<Box<tollgate_core::filters::shaping::ShapingRt>>,
    /// `path_regex`, compiled (anchored at the path's start).
    pub(crate) regex: Option<Box<regex::Regex>>,
    /// How the path sent upstream is made.
    pub rewrite: Option<Box<tollgate_route::routing::RewriteRt>>,
    /// Which requests go to the canary upstream.
    pub canary: Option<Box<tollgate_route::routing::CanaryRt>>,
    /// A limit of the route reads a bearer token's claim: the token is verified first.
    pub needs_jwt: bool,
    /// A limit of the route is a quota: decisions need calendar time too.
    pub needs_calendar: bool,
    /// A limit of the route reads a body field: the body is read (bounded) first.
    pub needs_body: bool,
    /// Headers and query parameters the route's keys, lists and token read: each must come
    /// once (400 `AMBIGUOUS_REQUEST` otherwise); and body fields likewise.
    pub inputs: tollgate_route::normalize::Inputs,
    pub body_fields: Vec<String>,
    /// The route's enforced policies as one RateLimit-Policy value per plan (one entry when
    /// there are no plans); `None` without limits.
    pub policy_headers: Vec<Option<HeaderValue>>,
    /// A limit of the route depends on the caller's plan.
    pub needs_plan: bool,
    /// The access lists that apply (the server's and the route's), if any; routes without
    /// lists of their own share the server's.
    pub access: Option<Arc<tollgate_core::filters::access::AccessRt>>,
    /// Refusals by `reject` limits are held here first.
    pub tarpit: Option<Arc<TarpitRt>>,
    /// A limit of the route counts only failed responses: units are given back after others.
    pub counts_failures: bool,
    /// A limit of the route is a concurrency limit: its slots are given back at the end.
    pub holds_slots: bool,
    /// Its metric series, each made on first use.
    pub series: series::RouteSeries,
}

impl RouteRt {
    /// Plaintext requests to this route are redirected to HTTPS.
    pub fn redirects(&self, server: &tollgate_config::ServerConfig) -> bool {
        self.cfg.https_redirect.unwrap_or(server.https_redirect)
    }

    /// `http_requests_total{route,status}`.
    pub fn count(&self, metrics: &Metrics, status: u16) {
        self.series.count(metrics, &self.name, status);
    }
}

/// Counts a request that matched no route.
pub fn count_unrouted(metrics: &Metrics, status: u16) {
    metrics
        .requests
        .with_label_values(&[
            tollgate_core::observe::metrics::NO_ROUTE,
            tollgate_core::observe::metrics::status_str(status),
        ])
        .inc();
}

pub struct Runtime {
    /// The config it was built from, less its `routes` and `upstreams`: those were moved into
    /// [`Runtime::routes`] (each [`RouteRt::cfg`]) and [`Runtime::upstreams`] (each
    /// [`UpstreamRt::cfg`]), so that 15,000 routes are held once, not twice.
    pub config: Config,
    /// How request paths are made canonical (`[server]` merge_slashes, escaped_slashes).
    pub path_rules: tollgate_route::normalize::PathRules,
    pub routes: Vec<RouteRt>,
    /// Route indexes in match order: exact hosts, wildcard hosts, no host; within each,
    /// exact paths, then longer prefixes, then regexes; then file order.
    pub(crate) order: Vec<tollgate_route::routing::Entry>,
    /// The hosts routes name, and the parents of wildcard ones (`*.example.com`:
    /// `example.com`): a request for one of them meets that host's routes only (unless
    /// `host_fallthrough`).
    pub(crate) hosts: tollgate_route::routing::Hosts,
    /// `order` indexed by host and path: a lookup costs the same whatever the route count.
    table: tollgate_route::table::Table,
    pub limits: Vec<LimitRt>,
    pub upstreams: Vec<UpstreamRt>,
    pub trusted_proxies: Vec<IpNet>,
    pub ipv6_prefix: u8,
    pub jwt: Option<tollgate_auth::jwt::Verifier>,
    /// `[jwt] jwks_url`'s key set (the previous runtime's while the URL and CA stay).
    pub jwks: Option<Arc<tollgate_auth::jwks::Jwks>>,
    /// `Config::auth`, compiled (the previous runtime's where unchanged: their caches stay).
    pub auths: Vec<Arc<tollgate_auth::AuthRt>>,
    /// `[tls] hsts`, for responses over TLS.
    pub hsts: Option<HeaderValue>,
    /// The port HTTPS redirects name (`None`: 443, left out).
    pub https_port: Option<u16>,
    /// `[server] preserve_header_case` as read at start (a reload keeps it, as Pingora's
    /// listeners do for the request side): the upstream pools' response side.
    preserve_case: bool,
    /// `[tracing]`, compiled (the previous runtime's while it is unchanged: its client and
    /// connections go on).
    pub tracing: Option<Arc<tollgate_core::observe::traces::TraceRt>>,
    /// `[[rls.rules]]`, compiled: limit set `routes.len() + i` (see [`Runtime::limits_of`]).
    pub rls: Vec<crate::limits::rules::RuleRt>,
    /// `[[rls.domains]]`, compiled (envoyproxy/ratelimit's trees).
    pub rls_tree: crate::limits::tree::TreeRt,
    /// The limits of the trees' nodes and of the `limit` overrides, one a set: limit set
    /// `routes.len() + rls.len() + j` is `[rls_limits[j]]`.
    pub rls_limits: Vec<usize>,
}

impl Runtime {
    /// The limits of limit set `set`: route `set`, or past the routes the RLS rule
    /// `set - routes.len()` (the policy decides either the same way).
    #[inline]
    pub fn limits_of(&self, set: usize) -> &[usize] {
        match self.routes.get(set) {
            Some(r) => &r.cfg.limits,
            None => {
                let i = set - self.routes.len();
                match self.rls.get(i) {
                    Some(r) => &r.limits[..],
                    None => self
                        .rls_limits
                        .get(i - self.rls.len())
                        .map_or(&[][..], std::slice::from_ref),
                }
            }
        }
    }

    /// The limit set deciding with limit `li` alone (a `[[rls.domains]]` node's, or an
    /// override's); `None` when no set is made of it.
    pub fn rls_set(&self, li: usize) -> Option<usize> {
        // (In limit order: made so by the build.)
        self.rls_limits
            .binary_search(&li)
            .ok()
            .map(|j| self.routes.len() + self.rls.len() + j)
    }

    /// Builds the serving state for `config`, reusing what `previous` holds where unchanged.
    pub fn build(
        mut config: Config,
        previous: Option<&Runtime>,
        store: Option<&Arc<dyn GlobalStore>>,
        metrics: &Metrics,
    ) -> Result<Self, BuildError> {
        let route_configs = std::mem::take(&mut config.routes);
        let upstream_configs = std::mem::take(&mut config.upstreams);
        let kept = Kept::new(previous);
        let mut limits: Vec<LimitRt> = Vec::with_capacity(config.limits.len());
        // The first limit of each name built so far (a plan limit's variants share its
        // ladder and hot keys).
        let mut first: HashMap<&str, usize> = HashMap::with_capacity(config.limits.len());
        for cfg in &config.limits {
            let sibling = first.get(cfg.name.as_str()).map(|&i| &limits[i]);
            let prev = kept.limits.get(&(cfg.name.as_str(), cfg.plan)).copied();
            let l = LimitRt::build(cfg, sibling, prev, &config, store, metrics)?;
            first.entry(cfg.name.as_str()).or_insert(limits.len());
            limits.push(l);
        }

        let preserve_case =
            previous.map_or(config.server.preserve_header_case, |p| p.preserve_case);
        let upstreams = upstreams(&upstream_configs, &kept, preserve_case)?;
        drop(upstream_configs);

        let server_access =
            tollgate_core::filters::access::AccessRt::build(&config.access, None).map(Arc::new);
        let jwks = jwks(&config, previous)?;
        let auths = auths(&config, previous, &kept)?;
        let mut routes = Vec::with_capacity(route_configs.len());
        for cfg in route_configs {
            let r = RouteRt::build(cfg, &limits, &server_access, &kept, &config)?;
            routes.push(r.with_auth(&auths, metrics)?);
        }
        let order = tollgate_route::routing::order(routes.iter().map(|r| &r.cfg));
        let hosts = tollgate_route::routing::Hosts::new(&order);
        let table = tollgate_route::table::Table::new(&order, |i| {
            (&routes[i].cfg.path, routes[i].cfg.case_insensitive)
        });
        let rls = crate::limits::rules::RuleRt::build_all(&config, &limits, metrics);
        let index = |name: &str| first.get(name).copied();
        let rls_tree = crate::limits::tree::TreeRt::build(
            config.rls.as_ref().map_or(&[][..], |r| &r.domains[..]),
            index,
        );
        let rls_limits: Vec<usize> = limits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.cfg.name.starts_with("rls:"))
            .map(|(i, _)| i)
            .collect();
        let tracing = tracing(&config, previous)?;

        Ok(Self {
            rls,
            rls_tree,
            rls_limits,
            tracing,
            path_rules: tollgate_route::normalize::PathRules {
                merge_slashes: config.server.hardening.merge_slashes,
                escaped_slashes: config.server.hardening.escaped_slashes,
            },
            jwt: config
                .jwt
                .as_ref()
                .map(|j| tollgate_auth::jwt::Verifier::new(j, jwks.clone())),
            jwks,
            auths,
            trusted_proxies: config.server.trusted_proxies.clone(),
            hsts: config
                .tls
                .as_ref()
                .and_then(|t| t.hsts.as_deref())
                .and_then(|v| HeaderValue::from_str(v).ok()),
            https_port: config
                .server
                .https_port
                .or(config.server.tls_listen.first().map(|a| a.port()))
                .filter(|&p| p != 443),
            ipv6_prefix: config.server.ipv6_prefix,
            preserve_case,
            config,
            routes,
            order,
            hosts,
            table,
            limits,
            upstreams,
        })
    }

    /// The route for a request: its host's routes (an exact host before a wildcard one),
    /// else routes without a host; within them an exact path, then the longest prefix, then
    /// the first regex that matches; then the first in the file. `host` and `path` as
    /// [`tollgate_route::normalize`] made them (host in lower case without port), never as the client
    /// spelled them.
    pub fn route_for(&self, host: Option<&str>, path: &str, method: &str) -> Option<usize> {
        self.route_entry(host, path, method).map(|e| e.route)
    }

    /// [`Runtime::route_for`], with how the route was met (by its other spelling: a
    /// `www_redirect`).
    pub fn route_entry(
        &self,
        host: Option<&str>,
        path: &str,
        method: &str,
    ) -> Option<&tollgate_route::routing::Entry> {
        let tier = self.hosts.tier(host, self.config.server.host_fallthrough);
        // The table proposes only the entries whose host and path can match, in match
        // order; each is tested in full, as a scan of `order` would.
        let at = self.table.find(tier, host, path, |at| {
            let e = &self.order[at];
            let r = &self.routes[e.route];
            tier.admits(e.host.as_deref(), host)
                && tollgate_route::routing::path_matches(&r.cfg, r.regex.as_deref(), path)
                && r.cfg
                    .methods
                    .as_ref()
                    .is_none_or(|ms| ms.iter().any(|m| m == method))
        })?;
        self.order.get(at)
    }

    pub fn route_action(&self, route: usize) -> &RouteAction {
        &self.routes[route].cfg.action
    }
}

impl RouteRt {
    /// The route's auth, when it requires one, with its metric handles.
    fn with_auth(
        mut self,
        auths: &[Arc<tollgate_auth::AuthRt>],
        metrics: &Metrics,
    ) -> Result<Self, BuildError> {
        let cfg = &self.cfg;
        let Some(i) = cfg.auth else {
            return Ok(self);
        };
        // A route that names an auth never goes without it.
        let Some(auth) = auths.get(i) else {
            return Err(BuildError::Route(
                cfg.name.clone(),
                format!("auth #{i} is not defined"),
            ));
        };
        let method = auth.cfg.method.label();
        let route_auth = RouteAuth {
            auth: auth.clone(),
            counts: tollgate_auth::RESULTS
                .map(|r| metrics.auth.with_label_values(&[&cfg.name, method, r])),
            latency: metrics.auth_service.with_label_values(&[&cfg.name]),
        };
        self.stages.auth = true;
        self.auth = Some(Box::new(route_auth));
        Ok(self)
    }

    /// One route: its stages, its keys' inputs, its RateLimit-Policy per plan (its metric
    /// series are made on first use); its tarpit carried over from the previous runtime when unchanged.
    fn build(
        owned: RouteConfig,
        limits: &[LimitRt],
        server_access: &Option<Arc<tollgate_core::filters::access::AccessRt>>,
        kept: &Kept,
        config: &Config,
    ) -> Result<Self, BuildError> {
        let cfg = &owned;
        let plan_count = config.plans.as_ref().map_or(1, |p| p.names.len().max(1));
        let policy_headers = policy_headers(cfg, limits, plan_count);
        let needs_plan = cfg.limits.iter().any(|&i| limits[i].cfg.plan.is_some());
        let needs_jwt = needs_jwt(cfg, limits, config);
        let needs_calendar = cfg.limits.iter().any(|&i| limits[i].epoch);
        let needs_body = needs_body(cfg, limits);
        let access = match &cfg.access {
            None => server_access.clone(),
            Some(own) => tollgate_core::filters::access::AccessRt::build(&config.access, Some(own))
                .map(Arc::new),
        };
        let (inputs, body_fields) = route_inputs(
            config,
            cfg,
            limits,
            access.as_deref(),
            needs_jwt,
            needs_plan,
        );
        let tarpit = tarpit(cfg, kept);
        let shaping = tollgate_core::filters::shaping::ShapingRt::build(cfg, config);
        Ok(RouteRt {
            stages: Stages {
                access: access.is_some(),
                auth: false,
                limits: !cfg.limits.is_empty(),
                cors: shaping.as_ref().is_some_and(|s| s.cors.is_some()),
            },
            auth: None,
            max_body: cfg
                .edge
                .max_body_bytes
                .unwrap_or(config.server.max_body_bytes),
            shaping,
            regex: route_regex(cfg)?.map(Box::new),
            rewrite: tollgate_route::routing::RewriteRt::new(cfg.rewrite.as_deref())
                .map_err(|e| BuildError::Route(cfg.name.clone(), e))?
                .map(Box::new),
            canary: cfg
                .canary
                .as_deref()
                .map(|c| Box::new(tollgate_route::routing::CanaryRt::new(c))),
            access,
            inputs,
            body_fields,
            tarpit,
            counts_failures: cfg
                .limits
                .iter()
                .any(|&i| limits[i].cfg.count_failures.is_some()),
            holds_slots: cfg
                .limits
                .iter()
                .any(|&i| limits[i].cfg.algorithm.caps().holds),
            needs_jwt,
            needs_calendar,
            needs_body,
            name: Arc::from(cfg.name.as_str()),
            policy_headers,
            needs_plan,
            series: series::RouteSeries::new(cfg.limits.len()),
            cfg: owned,
        })
    }
}

/// Whether a route's limits read a bearer token: a `jwt:CLAIM` key, or a plan taken from
/// one.
fn needs_jwt(cfg: &RouteConfig, limits: &[LimitRt], config: &Config) -> bool {
    let is_jwt = |k: &tollgate_config::KeySource| matches!(k, tollgate_config::KeySource::Jwt(_));
    let plans_by_jwt = config
        .plans
        .as_ref()
        .is_some_and(|p| p.from.iter().chain(p.tenant.iter()).any(is_jwt));
    cfg.limits.iter().any(|&i| {
        limits[i].cfg.key.iter().any(is_jwt) || (plans_by_jwt && limits[i].cfg.plan.is_some())
    })
}

/// Whether a route's limits key on a body field.
fn needs_body(cfg: &RouteConfig, limits: &[LimitRt]) -> bool {
    cfg.limits.iter().any(|&i| {
        limits[i]
            .cfg
            .key
            .iter()
            .any(|k| matches!(k, tollgate_config::KeySource::Body(_)))
    })
}

/// A regex route's pattern, compiled.
fn route_regex(cfg: &RouteConfig) -> Result<Option<regex::Regex>, BuildError> {
    match &cfg.path {
        tollgate_config::PathMatch::Regex(p) => {
            tollgate_config::path_regex(p, cfg.case_insensitive)
                .map(Some)
                .map_err(|e| BuildError::Route(cfg.name.clone(), e.to_string()))
        }
        _ => Ok(None),
    }
}

/// One RateLimit-Policy per plan: a caller sees the policies of its own plan.
fn policy_headers(
    cfg: &RouteConfig,
    limits: &[LimitRt],
    plan_count: usize,
) -> Vec<Option<HeaderValue>> {
    (0..plan_count)
        .map(|plan| {
            let items: Vec<String> = cfg
                .limits
                .iter()
                .map(|&i| &limits[i])
                .filter(|l| !l.shadow && l.cfg.plan.is_none_or(|p| p == plan))
                // Requests in flight have no window to state.
                .filter(|l| l.cfg.algorithm.caps().rated)
                .map(|l| {
                    let (q, w) = tollgate_core::respond::quota_window(&l.cfg);
                    policy_item(&l.name_sf, q, w)
                })
                .collect();
            if items.is_empty() {
                None
            } else {
                HeaderValue::from_str(&items.join(", ")).ok()
            }
        })
        .collect()
}

/// The route's tarpit: the previous runtime's when unchanged (its held requests stay counted).
fn tarpit(cfg: &RouteConfig, kept: &Kept) -> Option<Arc<TarpitRt>> {
    cfg.tarpit.as_deref().copied().map(|t| {
        kept.routes
            .get(cfg.name.as_str())
            .and_then(|r| r.tarpit.as_ref())
            .filter(|r| r.cfg == t)
            .cloned()
            .unwrap_or_else(|| Arc::new(TarpitRt::new(t)))
    })
}

/// What a route reads from a request to key, list or verify it (see [`RouteRt::inputs`]).
fn route_inputs(
    config: &Config,
    route: &RouteConfig,
    limits: &[LimitRt],
    access: Option<&tollgate_core::filters::access::AccessRt>,
    needs_jwt: bool,
    needs_plan: bool,
) -> (tollgate_route::normalize::Inputs, Vec<String>) {
    use tollgate_config::KeySource;
    let mut inputs = tollgate_route::normalize::Inputs::default();
    let mut body = Vec::new();
    let plan_sources = config
        .plans
        .iter()
        .filter(|_| needs_plan)
        .flat_map(|p| p.from.iter().chain(p.tenant.iter()));
    let sources = route
        .limits
        .iter()
        .flat_map(|&i| limits[i].cfg.key.iter())
        .chain(plan_sources);
    for src in sources {
        match src {
            KeySource::Header(name) => {
                if let Ok(h) = http::HeaderName::from_bytes(name.as_bytes()) {
                    inputs.header(h);
                }
            }
            KeySource::Query(name) => inputs.query(name),
            KeySource::UserAgent | KeySource::IpUa => inputs.header(http::header::USER_AGENT),
            KeySource::Body(field) if !body.contains(field) => body.push(field.clone()),
            _ => {}
        }
    }
    if let Some(a) = access {
        for h in a.inputs() {
            inputs.header(h);
        }
    }
    if let (true, Some(j)) = (needs_jwt, &config.jwt) {
        if let Ok(h) = http::HeaderName::from_bytes(j.header.as_bytes()) {
            inputs.header(h);
        }
    }
    (inputs, body)
}

impl LimitSet for Runtime {
    #[inline]
    fn limits(&self) -> &[LimitRt] {
        &self.limits
    }
    #[inline]
    fn limits_of(&self, set: usize) -> &[usize] {
        Runtime::limits_of(self, set)
    }
    #[inline]
    fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(toml: &str) -> Runtime {
        let cfg = tollgate_config::parse_str(toml, "t.toml").expect("config");
        Runtime::build(cfg, None, None, &Metrics::new().expect("metrics")).expect("runtime")
    }

    #[test]
    fn routing_prefers_host_then_longest_prefix_then_methods() {
        let r = rt(r#"
[[routes]]
name = "root"
path_prefix = "/"
respond = { status = 200, body = "root" }
[[routes]]
name = "api"
path_prefix = "/api"
respond = { status = 200 }
[[routes]]
name = "login"
path_prefix = "/api/login"
methods = ["POST"]
respond = { status = 200 }
[[routes]]
name = "hosted"
host = "Admin.Example.com"
path_prefix = "/"
respond = { status = 200 }
"#);
        let name = |i: Option<usize>| i.map(|i| r.routes[i].cfg.name.clone());
        assert_eq!(name(r.route_for(None, "/api/x", "GET")), Some("api".into()));
        assert_eq!(
            name(r.route_for(None, "/api/login", "POST")),
            Some("login".into())
        );
        assert_eq!(
            name(r.route_for(None, "/api/login", "GET")),
            Some("api".into())
        );
        assert_eq!(
            name(r.route_for(Some("admin.example.com"), "/api/x", "GET")),
            Some("hosted".into())
        );
        assert_eq!(
            name(r.route_for(Some("other"), "/zzz", "GET")),
            Some("root".into())
        );
        let e = rt(r#"
[[routes]]
name = "prefix"
path_prefix = "/foo/"
respond = { status = 200 }
[[routes]]
name = "exact"
path_exact = "/foo"
respond = { status = 200 }
[[routes]]
name = "root"
path_prefix = "/"
respond = { status = 200 }
"#);
        let n = |p: &str| {
            e.route_for(None, p, "GET")
                .map(|i| e.routes[i].cfg.name.clone())
        };
        assert_eq!(n("/foo").as_deref(), Some("exact"));
        assert_eq!(n("/foo/bar").as_deref(), Some("prefix"));
        assert_eq!(
            n("/foobar").as_deref(),
            Some("root"),
            "not a segment of /foo"
        );
    }
}
