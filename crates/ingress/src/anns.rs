//! An Ingress's annotations as the families read them (each read marked, so that the
//! catalogue can name the rest), and the types the families' outputs are made of. A leaf:
//! the families import it, and the settings that gather their outputs import them.

use super::objects::Ingress;
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

    /// Tollgate's own annotations this build does not know (a typo, most likely).
    pub fn own_unknown(&self) -> impl Iterator<Item = &'a str> {
        self.ing
            .own
            .keys()
            .map(String::as_str)
            .filter(|k| !matches!(*k, "limit-scope" | "limits"))
    }

    /// Tollgate's own annotation `tollgate.io/KEY`.
    pub fn own(&self, key: &str) -> Option<&'a str> {
        self.ing.own.get(key).map(String::as_str)
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
    /// `tollgate.io/limit-scope: global`: counted in Redis, across every replica.
    pub global: bool,
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
