//! The route table: which entries of [`crate::routing::order`] a request can meet, found
//! without walking the others, so a request costs the same with 15 routes or 15,000.
//!
//! The entries are split by host: one bucket per exact host, one per wildcard's parent
//! (`*.example.com` and `**.example.com` under `example.com`; with a `**.` wildcard present a
//! host's further suffixes are looked up too, nearest first), one for the routes without a
//! host. Within a bucket,
//! exact paths are in a hash map, prefixes in a hash map per prefix length (the lengths
//! longest first), regexes in their order (from [`REGEX_SET_MIN`] on, behind one `RegexSet`
//! that names the ones matching the path). A lookup takes, bucket by bucket in tier order,
//! the first entry in match order that `accepts` (the caller's whole test: host tier, path,
//! methods), so the answer is the linear scan's by construction: each phase only leaves out
//! entries whose path cannot match, and takes the lowest position among those it keeps.
//! `table/tests.rs` checks it against the scan on random route sets and requests.
//!
//! A case-insensitive route's paths are kept in lower case (as the config gives them): its
//! candidates are looked up by the request path in lower case too, and a case-sensitive
//! route found that way is dropped by `accepts`.

use crate::routing::{Entry, Tier};
use std::collections::HashMap;

/// foldhash: a fast hash, seeded per process (the keys are the config's; lookups are the
/// client's paths and hosts).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use tollgate_config::model::{PathMatch, Wildcard};

/// Positions in the match order.
type Positions = Vec<u32>;

#[derive(Default, Debug)]
struct Bucket {
    exact: Map<Box<[u8]>, Positions>,
    /// Prefix lengths present, longest first.
    prefix_lens: Vec<usize>,
    prefix: Map<Box<[u8]>, Positions>,
    regex: Positions,
    /// The patterns of `regex` (as [`tollgate_config::path_regex`] compiles them), until
    /// `seal` makes them one set.
    patterns: Vec<String>,
    /// With [`REGEX_SET_MIN`] regexes or more: one pass over the path says which of them
    /// match, and only those are tried, in their order.
    regex_set: Option<regex::RegexSet>,
    /// Any route here matches case-insensitively: look up the lower-cased path too.
    any_ci: bool,
}

/// A host's regex routes go through one `RegexSet` from this many on (below it, trying each in
/// turn costs less than the set's pass and the winner's second match).
pub const REGEX_SET_MIN: usize = 3;

impl Bucket {
    fn add(&mut self, at: u32, path: &PathMatch, ci: bool) {
        self.any_ci |= ci;
        match path {
            PathMatch::Exact(p) => self.exact.entry(key(p, ci)).or_default().push(at),
            PathMatch::Prefix(p) => {
                if !self.prefix_lens.contains(&p.len()) {
                    self.prefix_lens.push(p.len());
                }
                self.prefix.entry(key(p, ci)).or_default().push(at);
            }
            PathMatch::Regex(p) => {
                self.regex.push(at);
                let flags = if ci { "(?i)" } else { "" };
                self.patterns.push(format!("{flags}^(?:{p})"));
            }
        }
    }

    fn seal(&mut self) {
        self.prefix_lens.sort_unstable_by(|a, b| b.cmp(a));
        let patterns = std::mem::take(&mut self.patterns);
        if patterns.len() >= REGEX_SET_MIN {
            // A set too big to build leaves the regexes tried one by one: the same answer.
            self.regex_set = regex::RegexSetBuilder::new(&patterns)
                .size_limit(patterns.len() << 20)
                .build()
                .ok();
        }
    }

    /// The first position, in match order, that `accepts`.
    fn find(&self, path: &str, accepts: &mut impl FnMut(usize) -> bool) -> Option<usize> {
        let p = path.as_bytes();
        let lower =
            (self.any_ci && p.iter().any(u8::is_ascii_uppercase)).then(|| p.to_ascii_lowercase());
        let first =
            |m: &Map<Box<[u8]>, Positions>, k: &[u8], accepts: &mut dyn FnMut(usize) -> bool| {
                if m.is_empty() {
                    return None;
                }
                let mut best: Option<usize> = None;
                let keys = std::iter::once(k).chain(lower.as_deref().map(|l| &l[..k.len()]));
                for k in keys {
                    for &at in m.get(k).into_iter().flatten() {
                        let at = at as usize;
                        if best.is_none_or(|b| at < b) && accepts(at) {
                            best = Some(at);
                        }
                    }
                }
                best
            };
        if let Some(at) = first(&self.exact, p, &mut *accepts) {
            return Some(at);
        }
        for &len in &self.prefix_lens {
            if len > p.len() {
                continue;
            }
            if let Some(at) = first(&self.prefix, &p[..len], &mut *accepts) {
                return Some(at);
            }
        }
        if let Some(set) = &self.regex_set {
            // The set's matches come in pattern order, which is match order.
            return set
                .matches(path)
                .iter()
                .map(|i| self.regex[i] as usize)
                .find(|&at| accepts(at));
        }
        self.regex
            .iter()
            .map(|&at| at as usize)
            .find(|&at| accepts(at))
    }
}

fn key(p: &str, ci: bool) -> Box<[u8]> {
    if ci {
        p.to_ascii_lowercase().into_bytes().into()
    } else {
        p.as_bytes().into()
    }
}

/// The entries of one match order, indexed by host and path.
#[derive(Default, Debug)]
pub struct Table {
    exact: Map<Box<str>, Bucket>,
    /// By the wildcard's parent: `*.example.com` and `**.example.com` under `example.com`.
    wildcard: Map<Box<str>, Bucket>,
    none: Bucket,
    /// A wildcard of any depth (`**.`) is here: a host's further suffixes are looked up too.
    deep: bool,
}

impl Table {
    /// `entries` in match order ([`crate::routing::order`]); `path_of(route)` is the route's
    /// path and whether it ignores case.
    pub fn new<'a>(entries: &[Entry], path_of: impl Fn(usize) -> (&'a PathMatch, bool)) -> Self {
        let mut t = Table::default();
        for (at, e) in entries.iter().enumerate() {
            let (path, ci) = path_of(e.route);
            let wild = e.host.as_deref().and_then(Wildcard::of);
            t.deep |= matches!(wild, Some(Wildcard::AnyDepth(_)));
            let bucket = match (e.host.as_deref(), wild) {
                (_, Some(w)) => t.wildcard.entry(w.parent().into()).or_default(),
                (Some(h), None) => t.exact.entry(h.into()).or_default(),
                (None, _) => &mut t.none,
            };
            bucket.add(at as u32, path, ci);
        }
        for b in t.exact.values_mut().chain(t.wildcard.values_mut()) {
            b.seal();
        }
        t.none.seal();
        t
    }

    /// The position of the first entry, in match order, that a request for `host` and `path`
    /// may meet under `tier` and that `accepts` (given the position).
    pub fn find(
        &self,
        tier: Tier,
        host: Option<&str>,
        path: &str,
        mut accepts: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if let (Tier::Exact | Tier::Any, Some(h)) = (tier, host) {
            if let Some(at) = self.exact.get(h).and_then(|b| b.find(path, &mut accepts)) {
                return Some(at);
            }
        }
        if let (Tier::Wildcard | Tier::Any, Some(h)) = (tier, host) {
            // The nearest parent first (the most specific wildcard); beyond it only `**.`
            // routes can take the host, which `accepts` checks.
            let mut parent = crate::routing::wildcard_parent(h);
            while let Some(p) = parent {
                if let Some(at) = self
                    .wildcard
                    .get(p)
                    .and_then(|b| b.find(path, &mut accepts))
                {
                    return Some(at);
                }
                parent = if self.deep {
                    crate::routing::wildcard_parent(p)
                } else {
                    None
                };
            }
        }
        match tier {
            Tier::None | Tier::Any => self.none.find(path, &mut accepts),
            Tier::Exact | Tier::Wildcard => None,
        }
    }
}

#[cfg(test)]
mod tests;
