//! An Ingress path as route matchers.
//!
//! On an ordinary host, Kubernetes' semantics: `Exact` is `path_exact`; `Prefix` matches whole
//! segments and ignores a trailing slash (`/foo` and `/foo/` are one match set), so it becomes
//! `path_exact = "/foo"` plus `path_prefix = "/foo/"`; `ImplementationSpecific` is a plain
//! character prefix, as ingress-nginx reads it.
//!
//! On a host where some Ingress uses `use-regex` or `rewrite-target`, ingress-nginx writes
//! every location of the host as `~* "^PATH"`: a case-insensitive regex, tried in order of
//! length. A Prefix path of an Ingress without either is still split in two (`^/foo/` and
//! `^/foo`), as ingress-nginx splits it.
//!
//! Two paths can make the same matcher. The rank decides, as ingress-nginx and Kubernetes
//! would: an `Exact` path (3) over the form a path was written in (2) over the form derived
//! from it (1); the first of equals.

use super::objects::PathKind;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Matcher {
    Exact(String),
    Prefix(String),
    /// Written with its `^`, matched case-insensitively.
    Regex(String),
}

impl Matcher {
    pub fn key(&self) -> &'static str {
        match self {
            Matcher::Exact(_) => "path_exact",
            Matcher::Prefix(_) => "path_prefix",
            Matcher::Regex(_) => "path_regex",
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Matcher::Exact(s) | Matcher::Prefix(s) | Matcher::Regex(s) => s,
        }
    }
}

/// One matcher made from a path.
#[derive(Clone, Debug)]
pub(super) struct Piece {
    pub matcher: Matcher,
    pub rank: u8,
    /// nginx's location path: regex locations are tried longest first.
    pub location: String,
    /// The regex the location is (for a rewrite), when on a regex host.
    pub pattern: Option<String>,
}

impl Piece {
    pub fn new(matcher: Matcher, rank: u8, location: &str) -> Piece {
        Piece {
            matcher,
            rank,
            location: location.to_string(),
            pattern: None,
        }
    }
}

/// On an ordinary host.
pub(super) fn literal(path: &str, kind: PathKind) -> Result<Vec<Piece>, String> {
    if !canonical(path) {
        return Err(format!("path \"{path}\" is not one Tollgate can match (requests are matched in canonical form: no \"//\", \".\" or \"..\" segment, space, backslash, ?, # or non-ASCII; escapes as %XX in upper case)"));
    }
    Ok(match kind {
        PathKind::Exact => vec![Piece::new(Matcher::Exact(path.into()), 3, path)],
        PathKind::ImplementationSpecific => vec![Piece::new(Matcher::Prefix(path.into()), 2, path)],
        PathKind::Prefix => {
            let trimmed = path.trim_end_matches('/');
            if trimmed.is_empty() {
                vec![Piece::new(Matcher::Prefix("/".into()), 2, "/")]
            } else {
                let slash = path.ends_with('/');
                let below = format!("{trimmed}/");
                vec![
                    Piece::new(
                        Matcher::Exact(trimmed.into()),
                        if slash { 1 } else { 2 },
                        trimmed,
                    ),
                    Piece::new(
                        Matcher::Prefix(below.clone()),
                        if slash { 2 } else { 1 },
                        &below,
                    ),
                ]
            }
        }
    })
}

/// On a regex host. `is_regex`: the Ingress means its paths as regexes (use-regex, or a
/// rewrite of this path); a literal path that is no valid RE2 regex is matched literally.
pub(super) fn regex(path: &str, kind: PathKind, is_regex: bool) -> Result<Vec<Piece>, String> {
    let pattern = match compiles(path) {
        Ok(()) => path.to_string(),
        Err(e) if is_regex => {
            return Err(format!(
                "path \"{path}\" is not a regular expression Tollgate can run (RE2 syntax: no look-around, no back-references): {e}"
            ))
        }
        Err(_) => regex::escape(path),
    };
    let re = |p: &str, rank: u8, location: &str| Piece {
        matcher: Matcher::Regex(format!("^{p}")),
        rank,
        location: location.to_string(),
        pattern: Some(p.to_string()),
    };
    Ok(match kind {
        PathKind::Exact => vec![re(&pattern, 3, path)],
        PathKind::Prefix if !is_regex && path != "/" && !path.ends_with('/') => vec![
            re(&format!("{pattern}/"), 1, &format!("{path}/")),
            re(&pattern, 2, path),
        ],
        _ => vec![re(&pattern, 2, path)],
    })
}

/// The pattern as the config parser compiles a `path_regex` (docs/routes.md).
fn compiles(pattern: &str) -> Result<(), String> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})"))
        .case_insensitive(true)
        .size_limit(1 << 20)
        .build()
        .map(|_| ())
        .map_err(|e| {
            e.to_string()
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string()
        })
}

/// A route path as requests are matched: the config parser's own rule.
pub(super) fn canonical(p: &str) -> bool {
    tollgate_config::canonical_route_path(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matchers(v: Vec<Piece>) -> Vec<(Matcher, u8)> {
        v.into_iter().map(|p| (p.matcher, p.rank)).collect()
    }

    #[test]
    fn a_prefix_and_its_trailing_slash_are_one_match_set() {
        let e = |s: &str| Matcher::Exact(s.into());
        let p = |s: &str| Matcher::Prefix(s.into());
        assert_eq!(
            matchers(literal("/foo/bar", PathKind::Prefix).expect("ok")),
            [(e("/foo/bar"), 2), (p("/foo/bar/"), 1)]
        );
        assert_eq!(
            matchers(literal("/foo/bar/", PathKind::Prefix).expect("ok")),
            [(e("/foo/bar"), 1), (p("/foo/bar/"), 2)]
        );
        assert_eq!(
            matchers(literal("/", PathKind::Prefix).expect("ok")),
            [(p("/"), 2)]
        );
        assert_eq!(
            matchers(literal("/x", PathKind::ImplementationSpecific).expect("ok")),
            [(p("/x"), 2)]
        );
    }

    #[test]
    fn regex_hosts_split_literal_prefixes_as_ingress_nginx() {
        let r = |s: &str| Matcher::Regex(s.into());
        assert_eq!(
            matchers(regex("/foo", PathKind::Prefix, false).expect("ok")),
            [(r("^/foo/"), 1), (r("^/foo"), 2)]
        );
        assert_eq!(
            matchers(regex("/foo/(.*)", PathKind::Prefix, true).expect("ok")),
            [(r("^/foo/(.*)"), 2)]
        );
        assert_eq!(
            matchers(regex("/a{b}", PathKind::ImplementationSpecific, false).expect("ok")),
            [(r("^/a\\{b\\}"), 2)],
            "not a regex: matched literally"
        );
        assert!(regex("/(?!admin)", PathKind::ImplementationSpecific, true).is_err());
    }

    #[test]
    fn only_canonical_paths_are_literal_routes() {
        for bad in [
            "/a//b",
            "/a/../b",
            "/./a",
            "/sp ace",
            "/caf\u{e9}",
            "/%2f",
            "/%41",
            "/a?b",
            "x",
        ] {
            assert!(!canonical(bad), "{bad}");
        }
        for good in ["/", "/a/", "/%2F", "/foo/.*", "/v1.0"] {
            assert!(canonical(good), "{good}");
        }
    }
}
