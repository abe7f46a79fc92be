//! A route's compiled form: the stages it uses, its auth, limits' needs, inputs, policies
//! and tarpit, built from its config and the runtime's limits.

use super::series;
use super::Kept;
use crate::limits::compiled::{LimitRt, TarpitRt};
use http::HeaderValue;
use prometheus::IntCounter;
use std::sync::Arc;
use tollgate_config::model::{Config, RouteConfig};
use tollgate_core::error::BuildError;
use tollgate_core::observe::metrics::Metrics;
use tollgate_core::respond::policy_item;

/// A route's authentication and its metric handles.
pub struct RouteAuth {
    pub auth: Arc<tollgate_auth::AuthRt>,
    /// `tollgate_auth_total{route,method,result}`, by [`tollgate_auth::RESULTS`].
    pub counts: [IntCounter; 6],
    /// `tollgate_auth_service_seconds{route}`.
    pub latency: prometheus::Histogram,
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
    /// `match_headers` and `match_query`, compiled.
    pub matches: Option<Box<tollgate_route::matching::MatchRt>>,
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
    pub fn redirects(&self, server: &tollgate_config::model::ServerConfig) -> bool {
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

impl RouteRt {
    /// The route's auth, when it requires one, with its metric handles.
    pub(super) fn with_auth(
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
    pub(super) fn build(
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
            matches: match cfg.matches.as_deref() {
                Some(m) => Some(Box::new(
                    tollgate_route::matching::MatchRt::new(m)
                        .map_err(|e| BuildError::Route(cfg.name.clone(), e))?,
                )),
                None => None,
            },
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
    let is_jwt = |k: &tollgate_config::model::KeySource| {
        matches!(k, tollgate_config::model::KeySource::Jwt(_))
    };
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
            .any(|k| matches!(k, tollgate_config::model::KeySource::Body(_)))
    })
}

/// A regex route's pattern, compiled.
fn route_regex(cfg: &RouteConfig) -> Result<Option<regex::Regex>, BuildError> {
    match &cfg.path {
        tollgate_config::model::PathMatch::Regex(p) => {
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
    use tollgate_config::model::KeySource;
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
