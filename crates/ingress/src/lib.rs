//! `tollgate import-ingress`: Kubernetes `networking.k8s.io/v1` Ingress objects translated into
//! Tollgate's TOML, for an ingress-nginx user moving over. An import that never widens
//! exposure: any protection without an exact Tollgate equivalent makes the routes it covered
//! answer 403 ([`Imported::denied`], exit 3), unless [`Options::allow_insecure`].
//!
//! The stages, each a module:
//! 1. `objects`: YAML documents (and `kind: List` items) into Ingresses; a bad host, path or
//!    backend skips that rule or path, never the file. `global`: the controller's ConfigMap,
//!    when the input holds it, as `[server]` settings.
//! 2. `class`: only `--ingress-class` (and Ingresses without a class), in ingress-nginx's
//!    merge order (oldest first, then namespace and name), so the file's order never matters.
//! 3. `settings`: each production Ingress's annotations by family (`limits`, `access`,
//!    `timeouts`, `rewrite`, `tls`, `protect`, `auth`, `edge`, `balancing`), each reading
//!    through `anns` and returning its own output, gathered into one `Settings`; the
//!    `catalogue` names every other annotation. `listener`: the TLS listener across all
//!    Ingresses (certificates by host, the one client CA, HSTS).
//! 4. `routes`: rules, host defaults and `app-root` as routes (`paths` for the matchers, `hosts`
//!    for aliases and defaults, `host_name` for a rule's host); then `canary` attaches the
//!    canary Ingresses to the production routes they share.
//! 5. `deny`: the routes whose protection could not be kept.
//! 6. `emit`: the TOML, with every warning as a comment.
//!
//! docs/ingress-nginx.md lists every annotation and what becomes of it;
//! a test holds it to [`annotations`].

mod access;
mod anns;
mod auth;
mod balancing;
mod canary;
mod catalogue;
mod class;
mod custom_headers;
mod deny;
mod depth;
mod edge;
mod emit;
mod fallback;
mod global;
mod host_name;
mod hosts;
mod limits;
mod listener;
mod mirror;
mod objects;
mod passthrough;
mod paths;
mod protect;
mod proxyssl;
mod rewrite;
mod rewrite_back;
mod routes;
mod settings;
mod text;
mod timeouts;
mod tls;
mod upstreams;

pub use catalogue::{annotations, Annotation, Treatment};
pub use depth::MAX_DEPTH;

/// The id an Ingress's routes are named by (`ID.N`, N counting from 1): what a
/// RateLimitPolicy that targets the Ingress finds its routes by.
pub fn ingress_id(namespace: &str, name: &str) -> String {
    format!("{}.{}", text::slug(namespace), text::slug(name))
}

use objects::{Backend, Ingress};
use settings::Settings;
use std::collections::BTreeSet;
use text::Warnings;
use upstreams::UpKey;

/// The HTTPS listener: the container runs as non-root, the Service maps 443 to it.
const TLS_LISTEN: &str = "0.0.0.0:8443";

/// What to import, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Only Ingresses of this class (`spec.ingressClassName` or the
    /// `kubernetes.io/ingress.class` annotation), and those without a class.
    pub ingress_class: String,
    /// Serve routes whose protection cannot be translated, without it (a warning each),
    /// instead of making them answer 403.
    pub allow_insecure: bool,
    /// The controller's ConfigMap (`NS/NAME`) among the input's objects; `None`: the one named
    /// as ingress-nginx's manifests name it, when the input holds it.
    pub configmap: Option<String>,
    /// The Ingresses were chosen already (the live controller chooses by IngressClass
    /// objects, as ingress-nginx does): every one is translated, whatever its class.
    pub preselected: bool,
    /// `--enable-ssl-passthrough`: the `ssl-passthrough` annotation is honoured (ingress-nginx
    /// ignores it without the flag).
    pub ssl_passthrough: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ingress_class: "nginx".into(),
            allow_insecure: false,
            configmap: None,
            preselected: false,
            ssl_passthrough: false,
        }
    }
}

/// A route that lost a protection, and the annotations that asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub route: String,
    pub annotations: Vec<String>,
}

/// The TOML made from the Ingress objects, and what could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    /// Each said once, in the order found.
    pub warnings: Vec<String>,
    pub routes: usize,
    /// Routes made to answer 403 because a protection of theirs has no exact translation:
    /// the output must not be served as is (`import-ingress` exits 3).
    pub denied: Vec<Denied>,
    /// With `allow_insecure`: routes served without such a protection.
    pub unprotected: Vec<Denied>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// Refused before parsing: the parser's time grows with the square of the depth.
    #[error("line {line}: nested deeper than {max} levels (Ingress objects nest fewer than 20): refused before parsing")]
    TooDeep { line: usize, max: usize },
    #[error("{0}")]
    NoIngress(String),
    #[error("no route could be made:\n{0}")]
    NoRoute(String),
}

/// The upstream a path of `ing` goes to (a canary's too: it inherits the production
/// Ingress's protocol and timeouts).
fn upstream_of(ing: &Ingress, s: &Settings, b: &Backend) -> UpKey {
    UpKey {
        ns: ing.ns.clone(),
        backend: b.clone(),
        proto: s.proto,
        ssl: s.upstream_ssl.clone(),
        timeouts: s.timeouts,
        balancing: s.balancing.clone(),
    }
}

/// The ConfigMaps the Ingresses name (`custom-headers`), `NAMESPACE/NAME`.
fn named_maps(all: &[Ingress]) -> std::collections::BTreeSet<String> {
    all.iter()
        .filter_map(|i| i.ann("custom-headers"))
        .map(|v| v.trim().to_string())
        .collect()
}

/// Each production Ingress's annotations, with the input's ConfigMaps to look up.
fn read_settings(
    prod: &[Ingress],
    maps: &[global::ConfigMap],
    ports: &objects::Ports,
    global: &global::Global,
    w: &mut Warnings,
) -> Vec<Settings> {
    let lookup = custom_headers::Lookup {
        maps,
        allowed: &global.allowed_response_headers,
    };
    prod.iter()
        .map(|i| settings::read(i, &lookup, ports, w))
        .collect()
}

pub fn import(yaml: &str, opts: &Options) -> Result<Imported, ImportError> {
    let mut w = Warnings::default();
    depth::check(yaml)?;
    let (mut maps, mut ports) = (Vec::new(), objects::Ports::new());
    let all = objects::read(yaml, &mut maps, &mut ports, &mut w)?;
    let global = global::decide(&maps, opts.configmap.as_deref(), &named_maps(&all), &mut w);
    if all.is_empty() {
        return Err(ImportError::NoIngress(
            "no networking.k8s.io/v1 Ingress in the input".into(),
        ));
    }
    let ings = class::select(all, opts, &mut w);
    if ings.is_empty() {
        let said: Vec<&String> = w.iter().collect();
        return Err(ImportError::NoIngress(format!(
            "no Ingress of class \"{}\" (--ingress-class) in the input: {}",
            opts.ingress_class,
            said.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    let count = ings.len();
    let (canaries, prod): (Vec<Ingress>, Vec<Ingress>) =
        ings.into_iter().partition(|i| canary::is_canary(i, &mut w));
    let mut settings = read_settings(&prod, &maps, &ports, &global, &mut w);
    let tls = listener::decide(&prod, &mut settings, &mut w);
    hosts::aliases(&prod, &mut settings, &mut w);
    let mut routes = routes::build(&prod, &settings, upstream_of, &mut w);
    canary::attach(&canaries, &mut routes, &settings, upstream_of, &mut w);
    unique_names(&mut routes);
    let covering = deny::decide(&prod, &settings, &mut routes, opts.allow_insecure, &mut w);
    let redirects: Vec<Option<bool>> = routes
        .iter()
        .map(|r| match r.action {
            routes::Action::Redirect { .. } => None,
            routes::Action::Proxy { .. } => {
                tls.redirect(&settings[r.ing], r.host.as_deref(), r.acme)
            }
        })
        .collect();
    for (r, red) in routes.iter().zip(&redirects) {
        let s = &settings[r.ing];
        if *red == Some(true) && tls.requires_certificate(s) && (r.acme || !s.ssl_redirect) {
            w.push(format!("{}: redirected to HTTPS although ingress-nginx would not: its Ingress requires a client certificate, which plain HTTP cannot present", r.label));
        }
    }
    if redirects.contains(&Some(true)) && !tls.serve {
        w.push("force-ssl-redirect without a certificate here: redirects name port 443 (https_port), for TLS served in front of Tollgate; name that load balancer in trusted_proxies: Tollgate believes its X-Forwarded-Proto: https, otherwise every request is redirected again");
    }
    let passed = passthrough::decide(&settings, &routes, opts.ssl_passthrough, tls.serve, &mut w);
    let warnings = w.finish();
    if routes.is_empty() {
        return Err(ImportError::NoRoute(warnings.join("\n")));
    }
    let mut keys: Vec<&UpKey> = Vec::new();
    let mut fallbacks: Vec<UpKey> = Vec::new();
    for r in &routes {
        if let routes::Action::Proxy {
            upstream, canary, ..
        } = &r.action
        {
            keys.push(upstream);
            if let Some(c) = canary {
                keys.push(&c.upstream);
            }
            let (backend, pages) = settings[r.ing].fallback.keys(upstream);
            fallbacks.extend(backend.into_iter().chain(pages));
        }
    }
    let upstreams = upstreams::names(keys.into_iter().chain(&fallbacks).chain(passed.values()));
    let toml = emit::write(&emit::Plan {
        ingresses: count,
        warnings: &warnings,
        tls: &tls,
        settings: &settings,
        routes: &routes,
        redirects: &redirects,
        covering: &covering,
        allow_insecure: opts.allow_insecure,
        upstreams: &upstreams,
        global: &global,
        passthrough: &passed,
    });
    let listed = deny::listed(&routes, &covering);
    let (denied, unprotected) = if opts.allow_insecure {
        (Vec::new(), listed)
    } else {
        (listed, Vec::new())
    };
    Ok(Imported {
        toml,
        warnings,
        routes: routes.len(),
        denied,
        unprotected,
    })
}

/// Route names are made from Kubernetes names, which may hold dots: two can meet
/// (`a` / `b.1` and `a` / `b`, route 1). The later gets a suffix.
fn unique_names(routes: &mut [routes::Route]) {
    let mut seen = BTreeSet::new();
    for r in routes.iter_mut() {
        let mut name = r.name.clone();
        let mut n = 1;
        while !seen.insert(name.clone()) {
            n += 1;
            name = format!("{}~{n}", r.name);
        }
        r.name = name;
    }
}
