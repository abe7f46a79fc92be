//! Small pure helpers: TOML strings and comments, names made from untrusted Kubernetes names,
//! boolean and list annotations read as ingress-nginx reads them, and the warning list.

use std::collections::{BTreeMap, HashSet};
use tollgate_config::TLS_MOUNT;

/// ingress-nginx's header name for `custom-headers` and `global-allowed-response-headers`
/// (its `headerRegexp`): letters, digits, `-` and `_`.
pub(super) fn nginx_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The folder a Secret is mounted at.
pub(super) fn secret_dir(ns: &str, secret: &str) -> String {
    format!("{TLS_MOUNT}/{ns}/{secret}")
}

/// A TOML basic string on one line: nothing in it can end the string or the line.
pub(super) fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text for a `#` comment: anything that could end the comment line (and so write
/// configuration) is replaced.
pub(super) fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A Kubernetes object name as part of a Tollgate name: DNS-1123 characters kept (lower
/// case), anything else replaced.
pub(super) fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A DNS-1123 subdomain (Secret and namespace names): what may become part of a file path.
/// No `/`, no empty, `.` or `..` segment can pass.
pub(super) fn k8s_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// A boolean annotation as ingress-nginx reads it (Go's `strconv.ParseBool`): `Err` with the
/// text when it is neither.
pub(super) fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(other.to_string()),
    }
}

/// A boolean annotation, `default` when absent; anything else is named and the default kept.
pub(super) fn flag(v: Option<&str>, default: bool, what: &str, w: &mut Warnings) -> bool {
    match v.map(parse_bool) {
        None => default,
        Some(Ok(b)) => b,
        Some(Err(other)) => {
            w.push(format!(
                "{what} \"{other}\" is not true or false: {default} used"
            ));
            default
        }
    }
}

/// A comma-separated address list: the CIDRs and addresses in it (as written), and the
/// entries that are neither.
pub(super) fn cidrs(v: &str) -> (Vec<String>, Vec<String>) {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if s.parse::<ipnet::IpNet>().is_ok() || s.parse::<std::net::IpAddr>().is_ok() {
            good.push(s.to_string());
        } else {
            bad.push(s.to_string());
        }
    }
    (good, bad)
}

/// The items in their first order, each once.
pub(super) fn unique<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// What could not be translated, in the order first said, each said once. Notes about one
/// annotation on many Ingresses are gathered into one line naming them all.
#[derive(Default)]
pub(super) struct Warnings {
    list: Vec<String>,
    seen: HashSet<String>,
    /// (annotation, why) -> the Ingresses that carry it.
    gathered: BTreeMap<(String, String), Vec<String>>,
}

impl Warnings {
    pub(super) fn push(&mut self, w: impl Into<String>) {
        let w = w.into();
        if self.seen.insert(w.clone()) {
            self.list.push(w);
        }
    }

    /// `annotation` on Ingress `ctx`, not translated because `why`: said once for all.
    pub(super) fn gather(&mut self, annotation: &str, why: &str, ctx: &str) {
        let who = self
            .gathered
            .entry((annotation.to_string(), why.to_string()))
            .or_default();
        if !who.iter().any(|c| c == ctx) {
            who.push(ctx.to_string());
        }
    }

    /// Every warning, the gathered ones last.
    pub(super) fn finish(mut self) -> Vec<String> {
        for ((annotation, why), who) in std::mem::take(&mut self.gathered) {
            let who: Vec<&str> = who
                .iter()
                .map(|c| c.strip_prefix("Ingress ").unwrap_or(c))
                .collect();
            self.push(format!(
                "annotation {annotation} is not translated ({why}): Ingress {}",
                who.join(", ")
            ));
        }
        self.list
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &String> {
        self.list.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_strings_cannot_escape() {
        assert_eq!(q("a\"b\n\\\u{7f}"), "\"a\\\"b\\n\\\\\\u007F\"");
        let parsed: toml::Table = format!("k = {}", q("x\"\n[y]\u{1}")).parse().expect("toml");
        assert_eq!(parsed["k"].as_str(), Some("x\"\n[y]\u{1}"));
        assert_eq!(comment("x\n[access]"), "x [access]");
        assert_eq!(slug("Weird NS\"]"), "weird_ns__");
        assert!(k8s_name("shop-tls") && !k8s_name("../etc") && !k8s_name("a..b"));
    }

    #[test]
    fn warnings_are_said_once_and_gathered_by_annotation() {
        let mut w = Warnings::default();
        w.push("a");
        w.push("a");
        w.gather("affinity", "balancing", "Ingress x/one");
        w.gather("affinity", "balancing", "Ingress x/two");
        w.gather("affinity", "balancing", "Ingress x/one");
        assert_eq!(
            w.finish(),
            [
                "a",
                "annotation affinity is not translated (balancing): Ingress x/one, x/two"
            ]
        );
    }

    #[test]
    fn lists_and_flags_read_as_ingress_nginx_reads_them() {
        assert_eq!(
            cidrs("10.0.0.0/8, 1.2.3.4,lab,"),
            (
                vec!["10.0.0.0/8".into(), "1.2.3.4".into()],
                vec!["lab".into()]
            )
        );
        assert_eq!(parse_bool("True"), Ok(true));
        assert!(parse_bool("yes").is_err());
    }
}
