//! `tollgate import-envoy-ratelimit`: envoyproxy/ratelimit's configuration (one YAML document
//! per domain: `domain`, nested `descriptors` with `key`, `value`, `rate_limit: { unit,
//! requests_per_unit, unlimited, name, replaces }`, `shadow_mode`, `detailed_metric`,
//! `quota_mode`) translated into `[rls]` rules and their limits (docs/rls.md).
//!
//! Each descriptor node with a `rate_limit` becomes a rule of its path from the root (its
//! keys, and the values the path names) and one limit keyed by `descriptor`, global (as the
//! service counts in Redis), a fixed window of `requests_per_unit` per unit as the service
//! counts (or `--algorithm`'s). What is exact, approximate or dropped is said per node, as
//! `import-ingress` does. Everything taken from the input reaches the TOML through `q` (a
//! TOML string) or a comment line, so no input can write configuration.

use serde_yaml_ng::Value;
use std::fmt::Write;

/// What to import, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The algorithm of every limit (`fixed_window`: as envoyproxy/ratelimit counts).
    pub algorithm: String,
    /// `[redis] url` to write.
    pub redis_url: String,
    /// `[rls] listen` to write.
    pub listen: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            algorithm: "fixed_window".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            listen: "0.0.0.0:8081".into(),
        }
    }
}

/// The TOML made, and what was not translated exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    pub warnings: Vec<String>,
    pub rules: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("{0}")]
    Invalid(String),
}

struct Rule {
    domain: String,
    path: Vec<(String, Option<String>)>,
    /// None: unlimited; Some(0): deny.
    limit: Option<(u64, &'static str)>,
    shadow: bool,
    comment: String,
}

const ALGORITHMS: &[&str] = &[
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "token_bucket",
    "gcra",
    "leaky_bucket",
];

/// Translates every document of `yaml` (one domain each).
pub fn import(yaml: &str, opts: &Options) -> Result<Imported, ImportError> {
    if !ALGORITHMS.contains(&opts.algorithm.as_str()) {
        return Err(ImportError::Invalid(format!(
            "--algorithm \"{}\": one of {}",
            opts.algorithm,
            ALGORITHMS.join(", ")
        )));
    }
    crate::ingress::depth_check(yaml).map_err(|e| ImportError::Invalid(e.to_string()))?;
    let mut rules = Vec::new();
    let mut warnings = Vec::new();
    let mut domains = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        let Some(domain) = v
            .get("domain")
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
        else {
            return Err(ImportError::Invalid(
                "a document without a domain (each file of envoyproxy/ratelimit names one)".into(),
            ));
        };
        if domains.iter().any(|d| d == domain) {
            return Err(ImportError::Invalid(format!(
                "domain \"{domain}\" is defined twice (envoyproxy/ratelimit refuses that too)"
            )));
        }
        domains.push(domain.to_string());
        let list = v
            .get("descriptors")
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default();
        walk(domain, &list, &mut Vec::new(), &mut rules, &mut warnings)?;
    }
    if domains.is_empty() {
        return Err(ImportError::Invalid("no domain in the input".into()));
    }
    Ok(Imported {
        toml: emit(&rules, &warnings, opts),
        warnings,
        rules: rules.len(),
    })
}

fn walk(
    domain: &str,
    list: &[Value],
    path: &mut Vec<(String, Option<String>)>,
    rules: &mut Vec<Rule>,
    warnings: &mut Vec<String>,
) -> Result<(), ImportError> {
    for node in list {
        let key = node
            .get("key")
            .and_then(scalar)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                ImportError::Invalid(format!("domain {domain}: a descriptor without a key"))
            })?;
        let value = node.get("value").and_then(scalar).filter(|v| !v.is_empty());
        path.push((key, value));
        if path.len() > crate::MAX_DESCRIPTOR_ENTRIES {
            return Err(ImportError::Invalid(format!(
                "domain {domain}: descriptors nested deeper than {}",
                crate::MAX_DESCRIPTOR_ENTRIES
            )));
        }
        let at = describe(domain, path);
        if let Some(rl) = node.get("rate_limit") {
            rules.push(rule(domain, path, node, rl, &at, warnings)?);
        }
        for (k, why) in [
            (
                "detailed_metric",
                "Tollgate counts per limit, not per descriptor value",
            ),
            (
                "quota_mode",
                "not translated: the descriptor is limited as any other",
            ),
            (
                "value_to_metric",
                "Tollgate counts per limit, not per descriptor value",
            ),
        ] {
            if node.get(k).and_then(Value::as_bool) == Some(true) {
                warnings.push(format!("{at}: {k}: {why}"));
            }
        }
        if let Some(children) = node.get("descriptors").and_then(Value::as_sequence) {
            walk(domain, children, path, rules, warnings)?;
        }
        path.pop();
    }
    Ok(())
}

/// A YAML scalar as text (keys and values may be written as numbers or booleans).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn describe(domain: &str, path: &[(String, Option<String>)]) -> String {
    let parts: Vec<String> = path
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.clone(),
        })
        .collect();
    format!("domain {domain}: {}", parts.join(" > "))
}

fn rule(
    domain: &str,
    path: &[(String, Option<String>)],
    node: &Value,
    rl: &Value,
    at: &str,
    warnings: &mut Vec<String>,
) -> Result<Rule, ImportError> {
    let shadow = node.get("shadow_mode").and_then(Value::as_bool) == Some(true);
    let mut comment = at.to_string();
    if rl.get("unlimited").and_then(Value::as_bool) == Some(true) {
        return Ok(Rule {
            domain: domain.into(),
            path: path.to_vec(),
            limit: None,
            shadow,
            comment: format!("{comment}: unlimited"),
        });
    }
    let n = rl
        .get("requests_per_unit")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            ImportError::Invalid(format!(
                "{at}: rate_limit needs requests_per_unit (a whole number) or unlimited: true"
            ))
        })?;
    let unit = rl
        .get("unit")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let unit: &'static str = match unit.as_str() {
        "second" => "s",
        "minute" => "m",
        "hour" => "h",
        "day" => "d",
        "week" | "month" | "year" => {
            warnings.push(format!("{at}: unit {unit}: a calendar quota (\"{n}/{unit}\"), aligned to the calendar, where envoyproxy/ratelimit counts fixed spans from the Unix epoch (a month of 30 days)"));
            match unit.as_str() {
                "week" => "week",
                "month" => "month",
                _ => "year",
            }
        }
        other => {
            return Err(ImportError::Invalid(format!(
                "{at}: unit \"{other}\": second, minute, hour, day, week, month or year"
            )))
        }
    };
    if let Some(name) = rl.get("name").and_then(Value::as_str) {
        comment.push_str(&format!(" (name {name})"));
    }
    if let Some(r) = rl.get("replaces").and_then(Value::as_sequence) {
        let names: Vec<String> = r
            .iter()
            .filter_map(|x| x.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        warnings.push(format!(
            "{at}: replaces {}: not translated: in Tollgate each descriptor meets its own rule's limits, so a call with both descriptors meets both",
            names.join(", ")
        ));
    }
    if shadow && n == 0 {
        warnings.push(format!(
            "{at}: shadow_mode with requests_per_unit 0: never refused (shadow)"
        ));
    }
    Ok(Rule {
        domain: domain.into(),
        path: path.to_vec(),
        limit: Some((n, unit)),
        shadow,
        comment,
    })
}

/// A limit name for `path` of `domain`: letters, digits, `_`, `-` and `.` only.
fn limit_name(domain: &str, path: &[(String, Option<String>)], taken: &mut Vec<String>) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut base = clean(domain);
    for (k, v) in path {
        base.push('.');
        base.push_str(&clean(k));
        if let Some(v) = v {
            base.push('_');
            base.push_str(&clean(v));
        }
    }
    let mut name = base.clone();
    let mut n = 1;
    while taken.contains(&name) {
        n += 1;
        name = format!("{base}~{n}");
    }
    taken.push(name.clone());
    name
}

fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn emit(rules: &[Rule], warnings: &[String], opts: &Options) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Made by `tollgate import-envoy-ratelimit`: envoyproxy/ratelimit's descriptors as [rls]\n\
         # rules (docs/rls.md). Check it with `tollgate check FILE`."
    );
    for w in warnings {
        let _ = writeln!(out, "# warning: {}", comment(w));
    }
    let _ = writeln!(
        out,
        "\n# The limits are global, as envoyproxy/ratelimit's: every Tollgate instance shares them.\n[redis]\nurl = {}\n\n# The service trusts its callers: keep it on a private network, or add tls = true with\n# [tls] client_ca and client_auth = \"require\" (docs/rls.md).\n[rls]\nlisten = {}",
        q(&opts.redis_url),
        q(&opts.listen)
    );
    let mut taken = Vec::new();
    let mut names = Vec::with_capacity(rules.len());
    for r in rules {
        let name = match r.limit {
            Some((n, unit)) if n > 0 => {
                let name = limit_name(&r.domain, &r.path, &mut taken);
                let _ = writeln!(out, "\n# {}", comment(&r.comment));
                let _ = writeln!(
                    out,
                    "[limits.{}]\nkey = \"descriptor\"\nscope = \"global\"",
                    q(&name)
                );
                if matches!(unit, "week" | "month" | "year") {
                    let _ = writeln!(out, "quota = \"{n}/{unit}\"");
                } else {
                    let _ = writeln!(
                        out,
                        "algorithm = {}\nrate = \"{n}/{unit}\"",
                        q(&opts.algorithm)
                    );
                    if opts.algorithm != "fixed_window" {
                        // A bucket holds as many as the window counted.
                        let _ = writeln!(out, "burst = {n}");
                    }
                }
                if r.shadow {
                    out.push_str("shadow = true\n");
                }
                Some(name)
            }
            _ => None,
        };
        names.push(name);
    }
    for (r, name) in rules.iter().zip(&names) {
        let entries: Vec<String> = r
            .path
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{{ key = {}, value = {} }}", q(k), q(v)),
                None => format!("{{ key = {} }}", q(k)),
            })
            .collect();
        let _ = writeln!(
            out,
            "\n# {}\n[[rls.rules]]\ndomain = {}\ndescriptor = [{}]",
            comment(&r.comment),
            q(&r.domain),
            entries.join(", ")
        );
        match (r.limit, name) {
            (None, _) => out.push_str("limits = []   # unlimited\n"),
            (Some((0, _)), _) if r.shadow => {
                out.push_str("limits = []   # requests_per_unit 0 in shadow mode\n")
            }
            (Some((0, _)), _) => out.push_str("deny = true   # requests_per_unit 0\n"),
            (_, Some(n)) => {
                let _ = writeln!(out, "limits = [{}]", q(n));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_unique() {
        let mut taken = Vec::new();
        let p = vec![("k".to_string(), Some("a b\"]\n".to_string()))];
        let a = limit_name("d", &p, &mut taken);
        assert_eq!(a, "d.k_a_b___");
        assert_eq!(limit_name("d", &p, &mut taken), "d.k_a_b___~2");
    }
}
