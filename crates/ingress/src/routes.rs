//! Stage 4: the routes of the production Ingresses, as ingress-nginx lays out its locations.
//!
//! - Rules: each path as matchers (see `paths`), on a regex host (some Ingress of the host
//!   uses `use-regex` or `rewrite-target`) as case-insensitive regexes.
//! - A host's default: the `defaultBackend` of the first Ingress (in merge order) that names
//!   the host, for the host's unmatched paths; an Ingress with a `defaultBackend` and no rules
//!   is the catch-all of every host no route names.
//! - `app-root`: the root of each host of the Ingress answers 302 to it.
//! - Two matchers alike on one host: the higher rank wins, else the first (the oldest
//!   Ingress, as ingress-nginx merges them); a loser that went elsewhere is named.
//! - Regex routes last, each host's in ingress-nginx's order: longest location first.

use super::objects::{Backend, Ingress, PathKind};
use super::paths::{self, Matcher, Piece};
use super::rewrite::whole_path_regex;
use super::settings::Settings;
use super::text::{comment, unique, Warnings};
use super::tls::ACME;
use super::upstreams::UpKey;
use std::collections::{BTreeMap, HashMap};

/// What a route does. Most routes proxy: boxing the larger variant would only add an
/// allocation to nearly every route an import makes.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Action {
    Proxy {
        upstream: UpKey,
        /// (regex, replacement), in the config's syntax.
        rewrite: Option<(String, String)>,
        canary: Option<Box<Canary>>,
    },
    /// A built-in answer with a `Location`.
    Redirect { status: u16, location: String },
}

/// Where a route came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// A rule's path (what a canary is matched against).
    Path {
        host: Option<String>,
        path: String,
        kind: PathKind,
    },
    DefaultBackend,
    AppRoot,
}

#[derive(Clone, Debug)]
pub(super) struct Route {
    pub name: String,
    pub host: Option<String>,
    pub matcher: Matcher,
    /// "Ingress NS/NAME" of its Ingress.
    pub ctx: String,
    pub action: Action,
    /// Index of its Ingress among the production ones.
    pub ing: usize,
    pub origin: Origin,
    pub rank: u8,
    /// nginx's location path (the order of regex routes).
    pub location: String,
    /// "Ingress NS/NAME: HOST/PATH (TYPE)": the comment above it, and in messages.
    pub label: String,
    /// Its Ingress path is under `/.well-known/acme-challenge` (never redirected).
    pub acme: bool,
}

impl Route {
    pub fn is_regex(&self) -> bool {
        matches!(self.matcher, Matcher::Regex(_))
    }
}

/// The hosts whose every location is a regex, with the Ingress that made them so.
fn regex_hosts(ings: &[Ingress], settings: &[Settings]) -> BTreeMap<Option<String>, String> {
    let mut out = BTreeMap::new();
    for (ing, s) in ings.iter().zip(settings) {
        for rule in &ing.rules {
            if rule.paths.iter().any(|p| means_regex(s, &p.path)) {
                out.entry(rule.host.clone())
                    .or_insert_with(|| ing.ctx.clone());
            }
        }
    }
    out
}

/// ingress-nginx's `use-regex || needsRewrite(location)`.
fn means_regex(s: &Settings, path: &str) -> bool {
    s.use_regex || s.rewrite.as_ref().is_some_and(|r| r.target != path)
}

/// Every route of the production Ingresses: rules, `app-root`s and defaults, one per host and
/// matcher, regex routes in nginx's order.
pub(super) fn build(
    ings: &[Ingress],
    settings: &[Settings],
    upstream: impl Fn(&Ingress, &Settings, &Backend) -> UpKey,
    w: &mut Warnings,
) -> Vec<Route> {
    let regex = regex_hosts(ings, settings);
    note_regex_hosts(&regex, ings, settings, w);
    let mut routes = Vec::new();
    let mut defaults = Vec::new();
    for (i, (ing, s)) in ings.iter().zip(settings).enumerate() {
        let of = Of {
            i,
            ing,
            s,
            upstream: &upstream,
        };
        routes.extend(of.rules(&regex, w));
        routes.extend(of.app_roots());
    }
    for (host, i) in defaults_of(ings) {
        let Some(backend) = &ings[i].default_backend else {
            continue;
        };
        let of = Of {
            i,
            ing: &ings[i],
            s: &settings[i],
            upstream: &upstream,
        };
        let regex_host = regex.contains_key(&host);
        defaults.push(of.default(host, regex_host, backend));
    }
    // After every rule: a rule for a host's "/" always takes precedence.
    routes.append(&mut defaults);
    order(dedupe(routes, w))
}

/// Names the regex hosts where it changes something: a path not written as a regex.
fn note_regex_hosts(
    regex: &BTreeMap<Option<String>, String>,
    ings: &[Ingress],
    settings: &[Settings],
    w: &mut Warnings,
) {
    for (host, by) in regex {
        let literal = ings.iter().zip(settings).any(|(ing, s)| {
            let paths = ing
                .rules
                .iter()
                .filter(|r| r.host == *host)
                .flat_map(|r| &r.paths);
            paths
                .into_iter()
                .any(|p| !means_regex(s, &p.path) || p.kind != PathKind::ImplementationSpecific)
        });
        if literal {
            w.push(format!(
                "host {}: every path is a case-insensitive regular expression (use-regex or rewrite-target on {by}), tried longest first, as ingress-nginx does: Exact and Prefix paths of this host match as regex prefixes",
                host.as_deref().unwrap_or("*")
            ));
        }
    }
}

/// Which Ingress's `defaultBackend` answers which host's unmatched paths, as ingress-nginx
/// decides: the first Ingress that names a host makes its default; the first Ingress with a
/// `defaultBackend` and no rules is the catch-all (None).
fn defaults_of(ings: &[Ingress]) -> Vec<(Option<String>, usize)> {
    let mut first_of_host: BTreeMap<Option<String>, usize> = BTreeMap::new();
    for (i, ing) in ings.iter().enumerate() {
        for rule in ing.rules.iter().filter(|r| r.host.is_some()) {
            first_of_host.entry(rule.host.clone()).or_insert(i);
        }
    }
    let mut out: Vec<(Option<String>, usize)> = ings
        .iter()
        .position(|ing| ing.default_backend.is_some() && !ing.has_rules)
        .map(|i| (None, i))
        .into_iter()
        .collect();
    for (i, ing) in ings.iter().enumerate() {
        if ing.default_backend.is_none() {
            continue;
        }
        for h in unique(ing.rules.iter().map(|r| r.host.clone())) {
            if h.is_some() && first_of_host.get(&h) == Some(&i) {
                out.push((h, i));
            }
        }
    }
    out
}

/// The routes one Ingress makes.
struct Of<'a, F> {
    i: usize,
    ing: &'a Ingress,
    s: &'a Settings,
    upstream: &'a F,
}

impl<F: Fn(&Ingress, &Settings, &Backend) -> UpKey> Of<'_, F> {
    /// Proxied to `backend`, unless the Ingress redirects everything.
    fn action(&self, backend: &Backend, rewrite: Option<(String, String)>) -> Action {
        match &self.s.redirect {
            Some(r) => Action::Redirect {
                status: r.status,
                location: r.url.clone(),
            },
            None => Action::Proxy {
                upstream: (self.upstream)(self.ing, self.s, backend),
                rewrite,
                canary: None,
            },
        }
    }

    /// A route of this Ingress. Its ACME exemption follows from where it came from.
    fn route(
        &self,
        name: String,
        host: Option<String>,
        piece: Piece,
        action: Action,
        origin: Origin,
        label: String,
    ) -> Route {
        let acme = matches!(&origin, Origin::Path { path, .. } if path.starts_with(ACME));
        Route {
            ctx: self.ing.ctx.clone(),
            name,
            host,
            matcher: piece.matcher,
            action,
            ing: self.i,
            origin,
            rank: piece.rank,
            location: piece.location,
            label,
            acme,
        }
    }

    /// Each path of each rule, as matchers; a path that cannot be matched is named and
    /// skipped.
    fn rules(&self, regex: &BTreeMap<Option<String>, String>, w: &mut Warnings) -> Vec<Route> {
        let (ing, s) = (self.ing, self.s);
        let mut out = Vec::new();
        for rule in &ing.rules {
            let on_regex_host = regex.contains_key(&rule.host);
            for p in &rule.paths {
                let label = comment(&format!(
                    "{}: {}{} ({})",
                    ing.ctx,
                    rule.host.as_deref().unwrap_or("*"),
                    p.path,
                    p.kind.as_str()
                ));
                let is_regex = means_regex(s, &p.path);
                let pieces = if on_regex_host {
                    paths::regex(&p.path, p.kind, is_regex)
                } else {
                    paths::literal(&p.path, p.kind)
                };
                let pieces = match pieces {
                    Ok(v) => v,
                    Err(why) => {
                        w.push(comment(&format!("{label}: {why}: skipped")));
                        continue;
                    }
                };
                for piece in pieces {
                    let rewrite = match (&s.rewrite, &piece.pattern) {
                        (Some(rw), Some(pat)) if rw.target != p.path => {
                            rw.replace.clone().map(|rep| (whole_path_regex(pat), rep))
                        }
                        _ => None,
                    };
                    let name = format!("{}.{}", ing.id, out.len() + 1);
                    let action = self.action(&p.backend, rewrite);
                    let origin = Origin::Path {
                        host: rule.host.clone(),
                        path: p.path.clone(),
                        kind: p.kind,
                    };
                    out.push(self.route(
                        name,
                        rule.host.clone(),
                        piece,
                        action,
                        origin,
                        label.clone(),
                    ));
                }
            }
        }
        out
    }

    /// `app-root`: the root of each host of the Ingress answers 302 to it (nginx's
    /// server-level `if ($uri = /)`, before any location: the highest rank).
    fn app_roots(&self) -> Vec<Route> {
        let Some(root) = &self.s.app_root else {
            return Vec::new();
        };
        unique(self.ing.rules.iter().map(|r| r.host.clone()))
            .into_iter()
            .map(|host| {
                let suffix = host.as_deref().map(|h| format!(".{h}")).unwrap_or_default();
                let piece = Piece::new(Matcher::Exact("/".into()), 4, "/");
                let action = Action::Redirect {
                    status: 302,
                    location: root.clone(),
                };
                let label = comment(&format!(
                    "{}: app-root {root} for {}",
                    self.ing.ctx,
                    host.as_deref().unwrap_or("any host")
                ));
                let name = format!("{}.app-root{suffix}", self.ing.id);
                self.route(name, host, piece, action, Origin::AppRoot, label)
            })
            .collect()
    }

    /// The Ingress's `defaultBackend` for a host's unmatched paths (None: any host).
    fn default(&self, host: Option<String>, regex_host: bool, backend: &Backend) -> Route {
        let suffix = host.as_deref().map(|h| format!(".{h}")).unwrap_or_default();
        let matcher = if regex_host {
            Matcher::Regex("^/".into())
        } else {
            Matcher::Prefix("/".into())
        };
        let label = comment(&format!(
            "{}: defaultBackend, for {}",
            self.ing.ctx,
            host.as_deref()
                .map(|h| format!("{h}'s unmatched paths"))
                .unwrap_or_else(|| "hosts no route names".into())
        ));
        self.route(
            format!("{}.default{suffix}", self.ing.id),
            host,
            Piece::new(matcher, 0, "/"),
            self.action(backend, None),
            Origin::DefaultBackend,
            label,
        )
    }
}

/// One route per host and matcher.
fn dedupe(routes: Vec<Route>, w: &mut Warnings) -> Vec<Route> {
    let mut kept: Vec<Route> = Vec::with_capacity(routes.len());
    // Where each (host, matcher) was kept: one lookup a route, not a scan of those kept.
    let mut at: HashMap<(Option<String>, Matcher), usize> = HashMap::with_capacity(routes.len());
    for r in routes {
        let slot = at.entry((r.host.clone(), r.matcher.clone()));
        let std::collections::hash_map::Entry::Occupied(slot) = slot else {
            slot.or_insert(kept.len());
            kept.push(r);
            continue;
        };
        let k = &mut kept[*slot.get()];
        let (winner, loser) = if r.rank > k.rank {
            (&r, &*k)
        } else {
            (&*k, &r)
        };
        if let Some(msg) = conflict(winner, loser) {
            w.push(msg);
        }
        if r.rank > k.rank {
            *k = r;
        }
    }
    kept
}

/// What to say when `loser` gives way to `winner` (nothing when it would have done the same).
fn conflict(winner: &Route, loser: &Route) -> Option<String> {
    let same_target = target_text(winner) == target_text(loser);
    if (winner.ing == loser.ing && same_target) || loser.origin == Origin::DefaultBackend {
        // The same thing twice; or a rule for the host's "/", which a default gives way to.
        return None;
    }
    let prefix_path = |r: &Route| match &r.origin {
        Origin::Path {
            path,
            kind: PathKind::Prefix,
            ..
        } => Some(path.clone()),
        _ => None,
    };
    if let (Some(a), Some(b)) = (prefix_path(winner), prefix_path(loser)) {
        if winner.ing == loser.ing && a != b && a.trim_end_matches('/') == b.trim_end_matches('/') {
            // Whichever collision this is, the outcome is the same: the path itself goes where
            // the path written without the slash goes, what lies below where the other goes.
            let (bare, slashed) = if a.ends_with('/') {
                ((b, loser), (a, winner))
            } else {
                ((a, winner), (b, loser))
            };
            return Some(comment(&format!(
                "{}: Prefix paths {} and {} are one match set in Kubernetes: {} itself goes to {}, the paths below it to {} (as ingress-nginx's documentation orders them)",
                winner.ctx,
                bare.0,
                slashed.0,
                bare.0.trim_end_matches('/'),
                target_text(bare.1),
                target_text(slashed.1),
            )));
        }
    }
    Some(format!(
        "{}: the same host and path as {}: skipped",
        loser.label, winner.label
    ))
}

/// Where a route sends requests, for messages.
fn target_text(r: &Route) -> String {
    match &r.action {
        Action::Proxy { upstream, .. } => format!(
            "Service {}/{}:{}",
            upstream.ns, upstream.backend.service, upstream.backend.port
        ),
        Action::Redirect { status, location } => format!("a {status} redirect to {location}"),
    }
}

/// Literal routes as written; then each regex host's routes, longest location first (nginx
/// tries regex locations in order, and ingress-nginx sorts them by length, then by path).
fn order(routes: Vec<Route>) -> Vec<Route> {
    let (mut literal, regex): (Vec<Route>, Vec<Route>) =
        routes.into_iter().partition(|r| !r.is_regex());
    // Each host's regex routes, hosts in the order first seen.
    let mut hosts: Vec<Vec<Route>> = Vec::new();
    let mut at: HashMap<Option<String>, usize> = HashMap::new();
    for r in regex {
        let i = *at.entry(r.host.clone()).or_insert_with(|| {
            hosts.push(Vec::new());
            hosts.len() - 1
        });
        hosts[i].push(r);
    }
    for mut of_host in hosts {
        of_host.sort_by(|a, b| {
            b.location
                .len()
                .cmp(&a.location.len())
                .then_with(|| b.location.cmp(&a.location))
        });
        literal.extend(of_host);
    }
    literal
}

/// A canary on a route: where chosen requests go.
/// How requests are chosen for the canary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Choice {
    pub weight: u32,
    pub weight_total: u32,
    pub header: Option<String>,
    pub header_value: Option<String>,
    /// `canary-by-header-pattern` (only without a value).
    pub header_pattern: Option<String>,
    pub cookie: Option<String>,
}

#[derive(Clone, Debug)]
pub(super) struct Canary {
    pub upstream: UpKey,
    pub choice: Choice,
    /// "Ingress NS/NAME" of the canary.
    pub ctx: String,
}
