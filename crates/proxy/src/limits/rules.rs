//! `[[rls.rules]]`, compiled, and how a descriptor finds its rule.
//!
//! A rule matches a descriptor with as many entries, the same keys in the same order, and the
//! value wherever the rule names one. Of the rules that match, the one naming the most values
//! wins (then the first): `[remote_address, path=/login]` over `[remote_address, path]`, as
//! envoyproxy/ratelimit prefers a value over the key's default. A descriptor no rule matches
//! is not limited (answered OK), as envoyproxy/ratelimit answers one its config lacks.

use crate::limits::compiled::LimitRt;
use tollgate_config::model::Config;
use tollgate_core::observe::metrics::Metrics;

pub struct RuleRt {
    pub domain: String,
    pub entries: Vec<(String, Option<String>)>,
    /// Indexes into `Runtime::limits` (empty: never limited).
    pub limits: Vec<usize>,
    /// Every matching descriptor is over the limit.
    pub deny: bool,
    /// Some limit takes its rate from the caller's plan (`[plans]`, read from the
    /// descriptor's entries).
    pub needs_plan: bool,
    specificity: usize,
}

impl RuleRt {
    /// Every rule of `config.rls`, its limits resolved by name (the config checked them).
    pub fn build_all(config: &Config, limits: &[LimitRt], _metrics: &Metrics) -> Vec<RuleRt> {
        let Some(rls) = &config.rls else {
            return Vec::new();
        };
        rls.rules
            .iter()
            .map(|r| RuleRt {
                domain: r.domain.clone(),
                entries: r.descriptor.clone(),
                // A plan limit is one limit per plan under one name: every variant.
                limits: r
                    .limits
                    .iter()
                    .flat_map(|n| {
                        limits
                            .iter()
                            .enumerate()
                            .filter(move |(_, l)| l.cfg.name == *n)
                            .map(|(i, _)| i)
                    })
                    // (The config counts them: never more than a plan can hold.)
                    .take(tollgate_config::MAX_LIMITS_PER_ROUTE)
                    .collect(),
                needs_plan: r.limits.iter().any(|n| {
                    limits
                        .iter()
                        .any(|l| l.cfg.name == *n && l.cfg.plan.is_some())
                }),
                deny: r.deny,
                specificity: r.specificity(),
            })
            .collect()
    }

    fn matches<'a>(&self, entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>) -> bool {
        entries.len() == self.entries.len()
            && entries
                .zip(&self.entries)
                .all(|((k, v), (rk, rv))| k == rk && rv.as_deref().is_none_or(|rv| rv == v))
    }
}

/// The rule (index into `rules`) for one descriptor of `domain`.
pub fn find<'a, F, I>(rules: &[RuleRt], domain: &str, entries: F) -> Option<usize>
where
    F: Fn() -> I,
    I: ExactSizeIterator<Item = (&'a str, &'a str)>,
{
    let mut best: Option<(usize, usize)> = None;
    for (i, r) in rules.iter().enumerate() {
        if r.domain != domain || !r.matches(entries()) {
            continue;
        }
        if best.is_none_or(|(_, s)| r.specificity > s) {
            best = Some((i, r.specificity));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(domain: &str, entries: &[(&str, Option<&str>)]) -> RuleRt {
        let entries: Vec<(String, Option<String>)> = entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect();
        let specificity = entries.iter().filter(|(_, v)| v.is_some()).count();
        RuleRt {
            domain: domain.into(),
            entries,
            limits: Vec::new(),
            deny: false,
            needs_plan: false,
            specificity,
        }
    }

    #[test]
    fn the_most_specific_rule_of_the_domain_wins() {
        let rules = [
            rule("edge", &[("remote_address", None)]),
            rule("edge", &[("remote_address", None), ("path", None)]),
            rule(
                "edge",
                &[("remote_address", None), ("path", Some("/login"))],
            ),
            rule("other", &[("remote_address", None)]),
        ];
        let q = |d: &str, e: &'static [(&'static str, &'static str)]| {
            find(&rules, d, || e.iter().map(|(k, v)| (*k, *v)))
        };
        assert_eq!(q("edge", &[("remote_address", "10.0.0.1")]), Some(0));
        assert_eq!(q("other", &[("remote_address", "10.0.0.1")]), Some(3));
        assert_eq!(
            q("edge", &[("remote_address", "1"), ("path", "/login")]),
            Some(2)
        );
        assert_eq!(
            q("edge", &[("remote_address", "1"), ("path", "/a")]),
            Some(1)
        );
        // Another order, another key, more entries, an unknown domain: no rule.
        assert_eq!(q("edge", &[("path", "/a"), ("remote_address", "1")]), None);
        assert_eq!(q("edge", &[("user", "1")]), None);
        assert_eq!(
            q(
                "edge",
                &[("remote_address", "1"), ("path", "/a"), ("x", "y")]
            ),
            None
        );
        assert_eq!(q("nope", &[("remote_address", "1")]), None);
        // A value is compared exactly: no case folding, no prefix.
        assert_eq!(
            q("edge", &[("remote_address", "1"), ("path", "/LOGIN")]),
            Some(1)
        );
        assert_eq!(
            q("edge", &[("remote_address", "1"), ("path", "/login/")]),
            Some(1)
        );
    }
}
