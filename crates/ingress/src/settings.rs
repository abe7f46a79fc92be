//! Stage 3: each production Ingress's annotations, translated by family (one module each);
//! whatever no translator read is named by the catalogue: a warning with why it is harmless,
//! once for all the Ingresses that carry it.

use super::catalogue::{self, Treatment};
use super::objects::Ingress;
use super::text::{comment, Warnings};
use super::upstreams::{Proto, Timeouts};
use super::{access, auth, balancing, edge, limits, protect, rewrite, timeouts, tls};
use std::collections::BTreeSet;

/// An Ingress's annotations, remembering which were read.
pub(super) struct Anns<'a> {
    ing: &'a Ingress,
    used: BTreeSet<String>,
}

impl<'a> Anns<'a> {
    pub fn new(ing: &'a Ingress) -> Self {
        Anns {
            ing,
            used: BTreeSet::new(),
        }
    }

    /// The annotation's value, marked read.
    pub fn get(&mut self, key: &str) -> Option<&'a str> {
        self.used.insert(key.to_string());
        self.ing.ann(key)
    }

    /// "Ingress NAMESPACE/NAME".
    pub fn ctx(&self) -> &'a str {
        &self.ing.ctx
    }

    /// Every rule of the Ingress names one exact host (no wildcard, no catch-all), so that
    /// `$host` in its annotations stands for one name per route.
    pub fn exact_hosts(&self) -> bool {
        !self.ing.rules.is_empty()
            && self.ing.default_backend.is_none()
            && self
                .ing
                .rules
                .iter()
                .all(|r| r.host.as_deref().is_some_and(|h| !h.starts_with('*')))
    }

    /// The Ingress's namespace.
    pub fn ns(&self) -> &'a str {
        &self.ing.ns
    }

    /// `NAMESPACE.NAME`, for names made from it.
    pub fn id(&self) -> &'a str {
        &self.ing.id
    }

    /// The annotations no translator read.
    pub fn unread(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.ing
            .annotations
            .keys()
            .map(String::as_str)
            .filter(|k| !self.used.contains(*k))
    }
}

/// A protection that has no exact Tollgate equivalent: the routes it covers answer 403.
#[derive(Clone, Debug)]
pub(super) struct Refusal {
    pub annotation: String,
    pub why: String,
}

/// A limit of one Ingress (`[limits.NAME]`).
pub(super) struct Limit {
    pub name: String,
    pub kind: LimitKind,
}

pub(super) enum LimitKind {
    /// nginx's `limit_req rate=RATE burst=BURST nodelay`.
    Rate { rate: String, burst: u64 },
    /// nginx's `limit_conn`: requests in flight per client.
    Concurrency { max: u64 },
}

/// A redirect answered instead of proxying (`permanent-redirect`, `temporal-redirect`).
#[derive(Clone, Debug)]
pub(super) struct Redirect {
    pub status: u16,
    pub url: String,
}

/// `rewrite-target`, translated.
#[derive(Clone, Debug)]
pub(super) struct Rewrite {
    /// As written (ingress-nginx does not rewrite a path equal to it).
    pub target: String,
    /// In the regex crate's replacement syntax; None when it cannot be translated.
    pub replace: Option<String>,
}

/// What one production Ingress asks for.
pub(super) struct Settings {
    pub limits: Vec<Limit>,
    /// `limit-whitelist`: exempt from the Ingress's limits.
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// `whitelist-source-range`: nobody else may connect.
    pub only_from: Vec<String>,
    pub timeouts: Timeouts,
    pub proto: Proto,
    pub ssl_redirect: bool,
    pub force_redirect: bool,
    /// `auth-tls-*`: None when absent or off; `Err(why)` when it cannot be translated.
    pub client_auth: Option<Result<tls::ClientCa, String>>,
    /// The hsts* keys when any is set: the header value, or None for off.
    pub hsts: Option<Option<String>>,
    pub use_regex: bool,
    pub rewrite: Option<Rewrite>,
    pub app_root: Option<String>,
    pub redirect: Option<Redirect>,
    /// `auth-url` or `auth-type: basic`, translated.
    pub auth: Option<super::auth::AuthOut>,
    /// Protections of the Ingress's own routes that cannot be kept.
    pub refusals: Vec<Refusal>,
    /// Protections of every route of its hosts (`server-snippet`: nginx's server block).
    pub host_refusals: Vec<Refusal>,
    /// Body cap, CORS, aliases, www redirect, upstream Host, X-Forwarded-Prefix, bandwidth.
    pub edge: edge::EdgeOut,
    /// The upstream's balancing, affinity and retries.
    pub balancing: balancing::Balancing,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            limits: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            only_from: Vec::new(),
            timeouts: Timeouts::DEFAULT,
            proto: Proto::Http,
            ssl_redirect: true,
            force_redirect: false,
            client_auth: None,
            hsts: None,
            use_regex: false,
            rewrite: None,
            app_root: None,
            redirect: None,
            auth: None,
            refusals: Vec::new(),
            host_refusals: Vec::new(),
            edge: Default::default(),
            balancing: Default::default(),
        }
    }
}

/// Every annotation of a production Ingress.
pub(super) fn read(ing: &Ingress, w: &mut Warnings) -> Settings {
    let mut a = Anns::new(ing);
    let mut s = Settings::default();
    limits::read(&mut a, &mut s, w);
    access::read(&mut a, &mut s, w);
    timeouts::read(&mut a, &mut s, w);
    rewrite::read(&mut a, &mut s, w);
    tls::read(&mut a, &mut s, w);
    auth::read(&mut a, &mut s, w);
    protect::read(&mut a, &mut s, w);
    edge::read(&mut a, &mut s, w);
    balancing::read(&mut a, &mut s, w);
    for key in super::canary::KEYS {
        if key != "canary" && a.get(key).is_some() {
            w.push(format!(
                "{}: {key} without canary: \"true\": ignored (as by ingress-nginx)",
                a.ctx()
            ));
        }
    }
    a.get("canary");
    unread(&a, w);
    s
}

/// Names what no translator read: the catalogue's reason, or an unknown annotation.
pub(super) fn unread(a: &Anns, w: &mut Warnings) {
    for key in a.unread() {
        match catalogue::find(key) {
            Some(c) if c.treatment == Treatment::Ignored => w.gather(key, c.why, a.ctx()),
            // Known, translated elsewhere (a canary's own keys on a canary, say).
            Some(_) => {}
            None => w.gather(
                &comment(key),
                "not an ingress-nginx annotation the import knows",
                a.ctx(),
            ),
        }
    }
}
