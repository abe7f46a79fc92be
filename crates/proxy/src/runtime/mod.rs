//! The compiled model: everything a request needs, built once from a validated config.
//!
//! A [`Runtime`] is immutable; the live process ([`crate::shared::Shared`]) holds the current
//! one behind an `ArcSwap`, so a reload is one atomic pointer swap and requests in flight
//! finish on the runtime they started with. Limiter state and upstream pools (with their
//! health) are carried over from the previous runtime when their definitions did not change.
//!
//! One file per part: this one holds the [`Runtime`] and what a reload keeps ([`Kept`]);
//! [`route`] a route's compiled form, [`upstream`] the upstreams' pools, [`reuse`] the
//! parts carried over whole while unchanged (traces, the JWKS, the auths), and [`series`]
//! the metric series a route makes on first use.

use crate::limits::compiled::{LimitRt, LimitSet};
use http::HeaderValue;
use ipnet::IpNet;
use route::RouteRt;
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_config::model::{Config, RouteAction};
use tollgate_core::error::BuildError;
use tollgate_core::observe::metrics::Metrics;
use tollgate_store::GlobalStore;
use upstream::UpstreamRt;

mod reuse;
pub mod route;
pub mod series;
pub mod upstream;

/// The previous runtime's parts by name, so that a reload finds what it keeps of each in one
/// lookup (15,000 routes and 10,000 upstreams: a scan per part would be quadratic). Where
/// names repeat, the first one is kept, as a scan would find it.
#[derive(Default)]
pub(crate) struct Kept<'a> {
    pub(crate) limits: HashMap<(&'a str, Option<usize>), &'a LimitRt>,
    pub(crate) upstreams: HashMap<&'a str, &'a UpstreamRt>,
    pub(crate) routes: HashMap<&'a str, &'a RouteRt>,
    pub(crate) auths: HashMap<&'a str, &'a Arc<tollgate_auth::AuthRt>>,
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
    /// Some route has `ports`: a request's local port is looked up for routing.
    pub any_ports: bool,
    /// The Gateway listeners' hostnames by port, when routes name them (`listener_host`).
    pub(crate) listeners: Option<Box<tollgate_route::listeners::Listeners>>,
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
        let upstreams = upstream::upstreams(&upstream_configs, &kept, preserve_case)?;
        drop(upstream_configs);

        let server_access =
            tollgate_core::filters::access::AccessRt::build(&config.access, None).map(Arc::new);
        let jwks = reuse::jwks(&config, previous)?;
        let auths = reuse::auths(&config, previous, &kept)?;
        let mut routes = Vec::with_capacity(route_configs.len());
        for cfg in route_configs {
            let r = RouteRt::build(cfg, &limits, &server_access, &kept, &config)?;
            routes.push(r.with_auth(&auths, metrics)?);
        }
        let order = tollgate_route::routing::order(routes.iter().map(|r| &r.cfg));
        let hosts = tollgate_route::routing::Hosts::new(&order, |i| {
            let c = &routes[i].cfg;
            c.ports.as_deref().map(|p| (p, c.listener_host.as_deref()))
        });
        let any_ports = routes.iter().any(|r| r.cfg.ports.is_some());
        let listeners =
            tollgate_route::listeners::Listeners::new(routes.iter().map(|r| &r.cfg)).map(Box::new);
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
        let tracing = reuse::tracing(&config, previous)?;

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
            any_ports,
            listeners,
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
        let none = http::HeaderMap::new();
        self.route_entry(host, path, method, Asked::bare(&none))
            .map(|e| e.route)
    }

    /// [`Runtime::route_for`], with how the route was met (by its other spelling: a
    /// `www_redirect`), for a request with these headers and query (`match_headers`,
    /// `match_query`).
    pub fn route_entry(
        &self,
        host: Option<&str>,
        path: &str,
        method: &str,
        asked: Asked,
    ) -> Option<&tollgate_route::routing::Entry> {
        // Listener isolation: the request is its listener's (by port and hostname).
        let listener = match (&self.listeners, asked.port) {
            (Some(l), Some(port)) => l.of(port, host),
            _ => None,
        };
        let tier = self.hosts.tier(
            host,
            asked.port,
            listener,
            self.config.server.host_fallthrough,
        );
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
                && r.matches
                    .as_ref()
                    .is_none_or(|m| m.accepts(asked.headers, asked.query))
                && r.cfg
                    .ports
                    .as_ref()
                    .is_none_or(|ps| asked.port.is_none_or(|p| ps.contains(&p)))
                && r.cfg
                    .listener_host
                    .as_deref()
                    .is_none_or(|lh| asked.port.is_none() || listener == Some(lh))
        })?;
        self.order.get(at)
    }

    pub fn route_action(&self, route: usize) -> &RouteAction {
        &self.routes[route].cfg.action
    }
}

/// What of a request, besides host, path and method, a route's `match_headers`,
/// `match_query` and `ports` read: its headers, its query as the client sent it, and the
/// local port it came in on.
#[derive(Clone, Copy)]
pub struct Asked<'a> {
    pub headers: &'a http::HeaderMap,
    pub query: Option<&'a str>,
    /// `None`: unknown (every route's `ports` admit it).
    pub port: Option<u16>,
}

impl<'a> Asked<'a> {
    /// `port`: the local port, looked up only when some route has `ports`.
    pub fn of(req: &'a pingora::http::RequestHeader, port: Option<u16>) -> Self {
        Asked {
            headers: &req.headers,
            query: req.uri.query(),
            port,
        }
    }

    /// Headers alone, without a query or a port.
    pub fn bare(headers: &'a http::HeaderMap) -> Self {
        Asked {
            headers,
            query: None,
            port: None,
        }
    }
}

/// The local port a request came in on.
pub fn local_port(session: &pingora::proxy::Session) -> Option<u16> {
    session
        .server_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.port())
}

/// The port routing reads for a request whose local port was looked up: the port, or
/// [`NO_PORT`] when the socket has none (no route's `ports` nor Gateway listener admits it,
/// so an unknown listener never falls into another's routes).
pub fn routing_port(local: Option<u16>) -> u16 {
    local.unwrap_or(NO_PORT)
}

/// A port no route names (`ports` are 1 to 65535).
pub const NO_PORT: u16 = 0;

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
mod tests;
