//! `[[rls.domains]]`, compiled: envoyproxy/ratelimit's descriptor trees, and its lookup
//! (`GetLimit`), step for step.
//!
//! A descriptor's entries are walked from the domain's top level. At each level the entry is
//! looked up as `KEY_VALUE` (the text joined with `_`, as the service joins it), then against
//! the level's wildcard values in the order the config lists them (each `*` matches any text,
//! the empty one too), then as `KEY` (the key's default). A node found by its value is kept
//! even when the entries below it find nothing there: the walk never goes back to try the
//! key's default (so a value node without `rate_limit` "whitelists" that value). The limit is
//! the node the last entry found, when it has one; a descriptor with more entries than the
//! tree is deep, or ending at a node without `rate_limit`, is not limited.
//!
//! Pure: no IO, no clock; the service ([`super`]) decides with the found node's limit.

use std::collections::HashMap;
use tollgate_config::model::{EnvoyUnit, RlsDomain, RlsNode};

/// The trees of every domain.
pub struct TreeRt {
    domains: HashMap<String, Level>,
    pub nodes: Vec<NodeRt>,
    /// Counts known past a number until their window ends (a counter key and the number).
    pub over: tollgate_limit::VerdictCache,
}

impl Default for TreeRt {
    fn default() -> Self {
        Self {
            domains: HashMap::new(),
            nodes: Vec::new(),
            over: tollgate_limit::VerdictCache::new(100_000),
        }
    }
}

/// One level: its nodes by final key, and its wildcard nodes in config order.
#[derive(Default)]
struct Level {
    by_key: HashMap<String, usize>,
    wildcards: Vec<Wildcard>,
}

struct Wildcard {
    /// The final key split on `*` (at load: no allocation per lookup).
    parts: Vec<String>,
    node: usize,
}

/// A node's limit as the service reports it.
pub struct LimitRt {
    pub requests_per_unit: u32,
    /// `None` when unlimited.
    pub unit: Option<EnvoyUnit>,
    pub unlimited: bool,
    pub name: String,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    /// Index into `Runtime::limits` of the limit counting it (none when unlimited).
    pub limit: Option<usize>,
}

pub struct NodeRt {
    pub key: String,
    /// `KEY` or `KEY_VALUE`: what the node is found by at its level.
    final_key: String,
    /// `DOMAIN.KEY_VALUE.KEY`: the service's stats key of the node.
    pub full_key: String,
    pub limit: Option<LimitRt>,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    /// The final key, when it is a wildcard value with `share_threshold`.
    wildcard_pattern: Option<String>,
    pub metadata: Option<serde_json::Value>,
    children: Level,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub node: usize,
    /// Per entry: the wildcard pattern its counter shares (`share_threshold`), or `""`;
    /// `None` when no entry shares.
    pub share: Option<Vec<String>>,
    /// The stats key of this lookup (`detailed_metric`, `value_to_metric` and `share_threshold`
    /// applied, as the service names its counters).
    pub stat_key: String,
}

impl NodeRt {
    /// Whether a level follows this node.
    pub fn has_children(&self) -> bool {
        !self.children.by_key.is_empty()
    }
}

impl TreeRt {
    /// Compiles `domains`; `limit_index` finds a node limit's index in `Runtime::limits`.
    pub fn build(domains: &[RlsDomain], limit_index: impl Fn(&str) -> Option<usize>) -> Self {
        let mut t = TreeRt::default();
        for d in domains {
            let level = t.level(&d.descriptors, &format!("{}.", d.domain), &limit_index);
            t.domains.insert(d.domain.clone(), level);
        }
        t
    }

    fn level(
        &mut self,
        nodes: &[RlsNode],
        parent: &str,
        limit_index: &impl Fn(&str) -> Option<usize>,
    ) -> Level {
        let mut level = Level::default();
        for n in nodes {
            let final_key = n.final_key();
            let full_key = format!("{parent}{final_key}");
            let children = self.level(&n.descriptors, &format!("{full_key}."), limit_index);
            let idx = self.nodes.len();
            self.nodes.push(NodeRt {
                key: n.key.clone(),
                final_key: final_key.clone(),
                full_key,
                limit: n.rate_limit.as_ref().map(|l| LimitRt {
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit,
                    unlimited: l.unlimited,
                    name: l.name.clone(),
                    replaces: l.replaces.clone(),
                    shadow_mode: n.shadow_mode,
                    quota_mode: n.quota_mode,
                    detailed_metric: n.detailed_metric,
                    limit: l.limit.as_deref().and_then(limit_index),
                }),
                value_to_metric: n.value_to_metric,
                share_threshold: n.share_threshold,
                wildcard_pattern: (n.share_threshold && final_key.contains('*'))
                    .then(|| final_key.clone()),
                metadata: n.metadata.clone(),
                children,
            });
            if final_key.contains('*') {
                level.wildcards.push(Wildcard {
                    parts: final_key.split('*').map(str::to_string).collect(),
                    node: idx,
                });
            }
            level.by_key.insert(final_key, idx);
        }
        level
    }

    /// Whether `domain` has a tree.
    pub fn serves(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Whether any domain has one.
    pub fn any(&self) -> bool {
        !self.domains.is_empty()
    }

    /// The service's `GetLimit` for one descriptor of `domain` (without a `limit` override).
    pub fn find(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Found> {
        let mut level = self.domains.get(domain)?;
        let mut found: Option<(usize, usize)> = None;
        let mut share: HashMap<usize, String> = HashMap::new();
        let mut detailed = String::from(domain);
        let mut to_metric = String::from(domain);
        for (i, (k, v)) in entries.iter().enumerate() {
            let final_key = format!("{k}_{v}");
            detailed.push('.');
            detailed.push_str(&final_key);
            let mut next = level.by_key.get(&final_key).copied();
            let mut wild: Option<usize> = None;
            if next.is_none() {
                if let Some(w) = level
                    .wildcards
                    .iter()
                    .find(|w| wildcard_match(&w.parts, &final_key))
                {
                    next = Some(w.node);
                    wild = Some(w.node);
                }
            }
            let by_value = next.is_some();
            if next.is_none() {
                next = level.by_key.get(*k).copied();
            }
            if let (Some(_), Some(n)) = (wild, next) {
                let node = &self.nodes[n];
                if let (true, Some(p)) = (node.share_threshold, &node.wildcard_pattern) {
                    let prefix = format!("{k}_");
                    share.insert(i, p.strip_prefix(&prefix).unwrap_or(p).to_string());
                }
            }
            to_metric.push('.');
            match next {
                Some(n) => {
                    let node = &self.nodes[n];
                    let value = self.metric_value(node, wild, share.get(&i), by_value, k, v);
                    to_metric.push_str(k);
                    if !value.is_empty() {
                        to_metric.push('_');
                        to_metric.push_str(&value);
                    }
                }
                None => to_metric.push_str(k),
            }
            if let Some(n) = next {
                if self.nodes[n].limit.is_some() && i == entries.len() - 1 {
                    found = Some((n, i));
                }
            }
            match next {
                Some(n) if !self.nodes[n].children.by_key.is_empty() => {
                    level = &self.nodes[n].children;
                }
                _ => break,
            }
        }
        let (node, _) = found?;
        let limit = self.nodes[node].limit.as_ref()?;
        let share_vec = (!share.is_empty()).then(|| {
            (0..entries.len())
                .map(|i| share.get(&i).cloned().unwrap_or_default())
                .collect::<Vec<_>>()
        });
        let stat_key = if limit.detailed_metric {
            match &share_vec {
                Some(pats) => shared_key(domain, entries, pats),
                None => detailed,
            }
        } else {
            to_metric
        };
        Some(Found {
            node,
            share: share_vec,
            stat_key,
        })
    }

    /// The value a matched entry shows in its metric key: a shared wildcard's pattern, the
    /// value (matched by value, or `value_to_metric`), a wildcard's own text, or nothing.
    fn metric_value(
        &self,
        node: &NodeRt,
        wild: Option<usize>,
        shared: Option<&String>,
        by_value: bool,
        k: &str,
        v: &str,
    ) -> String {
        if let Some(wn) = wild {
            match shared {
                Some(p) => p.clone(),
                None if node.value_to_metric => v.to_string(),
                None => {
                    let fk = &self.nodes[wn].final_key;
                    fk.strip_prefix(&format!("{k}_")).unwrap_or(fk).to_string()
                }
            }
        } else if by_value || node.value_to_metric {
            v.to_string()
        } else {
            String::new()
        }
    }
}

/// Whether `value` matches the pattern `parts` (a final key split on `*`; each `*` matches
/// any text, the empty one too), as the service's `wildcardMatch`.
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A detailed metric key with shared wildcards: each entry's pattern in place of its value.
fn shared_key(domain: &str, entries: &[(&str, &str)], pats: &[String]) -> String {
    let mut s = String::from(domain);
    for (i, (k, v)) in entries.iter().enumerate() {
        s.push('.');
        s.push_str(k);
        let p = &pats[i];
        if !p.is_empty() {
            s.push('_');
            s.push_str(p);
        } else if !v.is_empty() {
            s.push('_');
            s.push_str(v);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_string).collect()
    }

    #[test]
    fn wildcards_match_as_the_service_matches() {
        for (p, v, want) in [
            ("key_foo*", "key_foo", true),
            ("key_foo*", "key_foobar", true),
            ("key_foo*", "key_fo", false),
            ("key_*", "key_", true),
            ("path_/api/*/v1", "path_/api/x/v1", true),
            ("path_/api/*/v1", "path_/api//v1", true),
            ("path_/api/*/v1", "path_/api/v1", false),
            ("svc_a*b*c", "svc_abc", true),
            ("svc_a*b*c", "svc_aXbYc", true),
            ("svc_a*b*c", "svc_acb", false),
            ("k_a*a", "k_a", false),
            ("k_a*a", "k_aa", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(wildcard_match(&parts(p), v), want, "{p} {v}");
        }
    }
}
