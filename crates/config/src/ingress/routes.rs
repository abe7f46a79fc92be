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

use super::canary::Canary;
use super::objects::{Backend, Ingress, PathKind};
use super::paths::{self, Matcher, Piece};
use super::rewrite::whole_path_regex;
use super::settings::Settings;
use super::text::{comment, Warnings};
use super::tls::ACME;
use super::upstreams::UpKey;
use std::collections::BTreeMap;

/// What a route does.
#[derive(Clone, Debug)]
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

/// Every route of the production Ingresses, in the order they are written.
pub(super) fn build(
    ings: &[Ingress],
    settings: &[Settings],
    upstream: impl Fn(&Ingress, &Settings, &Backend) -> UpKey,
    w: &mut Warnings,
) -> Vec<Route> {
    let regex = regex_hosts(ings, settings);
    for (host, by) in &regex {
        // Said where it changes something: a path not written as a regex.
        let literal = ings.iter().zip(settings).any(|(ing, s)| {
            ing.rules.iter().filter(|r| r.host == *host).any(|r| {
                r.paths
                    .iter()
                    .any(|p| !means_regex(s, &p.path) || p.kind != PathKind::ImplementationSpecific)
            })
        });
        if !literal {
            continue;
        }
        w.push(format!(
            "host {}: every path is a case-insensitive regular expression (use-regex or rewrite-target on {by}), tried longest first, as ingress-nginx does: Exact and Prefix paths of this host match as regex prefixes",
            host.as_deref().unwrap_or("*")
        ));
    }
    let mut routes = Vec::new();
    let mut defaults = Vec::new();
    // Host -> the first Ingress that names it.
    let mut first_of_host: BTreeMap<Option<String>, usize> = BTreeMap::new();
    let mut catch_all = false;
    for (i, (ing, s)) in ings.iter().zip(settings).enumerate() {
        let mut n = 0;
        let mut next_name = || {
            n += 1;
            format!("{}.{n}", ing.id)
        };
        let action = |backend: &Backend, rewrite: Option<(String, String)>| match &s.redirect {
            Some(r) => Action::Redirect {
                status: r.status,
                location: r.url.clone(),
            },
            None => Action::Proxy {
                upstream: upstream(ing, s, backend),
                rewrite,
                canary: None,
            },
        };
        for rule in &ing.rules {
            first_of_host.entry(rule.host.clone()).or_insert(i);
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
                for Piece {
                    matcher,
                    rank,
                    location,
                    pattern,
                } in pieces
                {
                    let rewrite = match (&s.rewrite, pattern) {
                        (Some(rw), Some(pat)) if rw.target != p.path => {
                            rw.replace.clone().map(|rep| (whole_path_regex(&pat), rep))
                        }
                        _ => None,
                    };
                    routes.push(Route {
                        ctx: ing.ctx.clone(),
                        name: next_name(),
                        host: rule.host.clone(),
                        matcher,
                        action: action(&p.backend, rewrite),
                        ing: i,
                        origin: Origin::Path {
                            host: rule.host.clone(),
                            path: p.path.clone(),
                            kind: p.kind,
                        },
                        rank,
                        location,
                        label: label.clone(),
                        acme: p.path.starts_with(ACME),
                    });
                }
            }
        }
        if let Some(root) = &s.app_root {
            let hosts: Vec<Option<String>> = dedup(ing.rules.iter().map(|r| r.host.clone()));
            for host in hosts {
                let suffix = host.as_deref().map(|h| format!(".{h}")).unwrap_or_default();
                routes.push(Route {
                    ctx: ing.ctx.clone(),
                    name: format!("{}.app-root{suffix}", ing.id),
                    matcher: Matcher::Exact("/".into()),
                    action: Action::Redirect {
                        status: 302,
                        location: root.clone(),
                    },
                    ing: i,
                    origin: Origin::AppRoot,
                    rank: 4,
                    location: "/".into(),
                    label: comment(&format!(
                        "{}: app-root {root} for {}",
                        ing.ctx,
                        host.as_deref().unwrap_or("any host")
                    )),
                    acme: false,
                    host,
                });
            }
        }
        let Some(backend) = &ing.default_backend else {
            continue;
        };
        let mut hosts: Vec<Option<String>> = Vec::new();
        if !ing.has_rules && !catch_all {
            catch_all = true;
            hosts.push(None);
        }
        for h in dedup(ing.rules.iter().map(|r| r.host.clone())) {
            if h.is_some() && first_of_host.get(&h) == Some(&i) {
                hosts.push(h);
            }
        }
        for host in hosts {
            let regex_host = regex.contains_key(&host);
            let suffix = host.as_deref().map(|h| format!(".{h}")).unwrap_or_default();
            defaults.push(Route {
                ctx: ing.ctx.clone(),
                name: format!("{}.default{suffix}", ing.id),
                matcher: if regex_host {
                    Matcher::Regex("^/".into())
                } else {
                    Matcher::Prefix("/".into())
                },
                action: action(backend, None),
                ing: i,
                origin: Origin::DefaultBackend,
                rank: 0,
                location: "/".into(),
                label: comment(&format!(
                    "{}: defaultBackend, for {}",
                    ing.ctx,
                    host.as_deref()
                        .map(|h| format!("{h}'s unmatched paths"))
                        .unwrap_or_else(|| "hosts no route names".into())
                )),
                acme: false,
                host,
            });
        }
    }
    routes.append(&mut defaults);
    let routes = dedupe(routes, w);
    order(routes)
}

fn dedup<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// One route per host and matcher.
fn dedupe(routes: Vec<Route>, w: &mut Warnings) -> Vec<Route> {
    let mut kept: Vec<Route> = Vec::with_capacity(routes.len());
    for r in routes {
        let Some(k) = kept
            .iter_mut()
            .find(|k| k.host == r.host && k.matcher == r.matcher)
        else {
            kept.push(r);
            continue;
        };
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
    let mut hosts: Vec<Option<String>> = Vec::new();
    for r in &regex {
        if !hosts.contains(&r.host) {
            hosts.push(r.host.clone());
        }
    }
    for h in hosts {
        let mut of_host: Vec<Route> = regex.iter().filter(|r| r.host == h).cloned().collect();
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
