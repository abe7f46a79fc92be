//! `tollgate import-envoy-ratelimit`: envoyproxy/ratelimit's configuration files (its runtime
//! directory's YAML, one domain a file) written as `[[rls.domains]]` (docs/rls.md): the same
//! trees, looked up and counted as the service does, with the service's defaults (no response
//! headers; a Redis failure fails the call so that Envoy's `failure_mode_deny` decides).
//!
//! The files are held to the service's loader ([`load`]): what it refuses is refused, each
//! problem in its words with the file, key path and line; nothing is dropped or approximated
//! with a warning in its place. Everything taken from the input reaches the TOML through `q`
//! (a TOML string), so no input can write configuration.

mod load;
mod yaml;

use crate::model::{RlsDomain, RlsNode};
use std::fmt::Write;

/// What to import, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// How the limits count (`counting_window`: as envoyproxy/ratelimit counts; any rate
    /// algorithm otherwise).
    pub algorithm: String,
    /// `[redis] url` to write.
    pub redis_url: String,
    /// `[rls] listen` to write.
    pub listen: String,
    /// `MERGE_DOMAIN_CONFIG`: files naming one domain add to it (else: an error).
    pub merge_domains: bool,
    /// `[rls] response_headers`: `none` (the service's default), `envoy`
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`) or `ietf`.
    pub response_headers: String,
    /// `SHADOW_MODE`: every call answered OK overall.
    pub shadow_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
    /// `LOCAL_CACHE_SIZE_IN_BYTES` above 0: counts known past their limit answered from
    /// memory (`[rls] local_cache`).
    pub local_cache: bool,
    /// The service's global quota mode: every descriptor is a quota descriptor.
    pub quota_mode: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub stop_increment_when_over: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            algorithm: "counting_window".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            listen: "0.0.0.0:8081".into(),
            merge_domains: false,
            response_headers: "none".into(),
            shadow_mode: false,
            dynamic_metadata: false,
            local_cache: false,
            quota_mode: false,
            stop_increment_when_over: false,
        }
    }
}

/// The TOML made, and what to know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    pub warnings: Vec<String>,
    /// Descriptor nodes with a `rate_limit`.
    pub rules: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

const ALGORITHMS: &[&str] = &[
    "counting_window",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "token_bucket",
    "gcra",
    "leaky_bucket",
];

/// Translates `files` (name, text), in order.
pub fn import(files: &[(String, String)], opts: &Options) -> Result<Imported, ImportError> {
    let bad = |m: String| ImportError::Invalid(vec![m]);
    if !ALGORITHMS.contains(&opts.algorithm.as_str()) {
        return Err(bad(format!(
            "--algorithm \"{}\": one of {}",
            opts.algorithm,
            ALGORITHMS.join(", ")
        )));
    }
    if !["none", "envoy", "ietf"].contains(&opts.response_headers.as_str()) {
        return Err(bad(format!(
            "--response-headers \"{}\": none, envoy or ietf",
            opts.response_headers
        )));
    }
    if files.is_empty() {
        return Err(bad("no file to import".into()));
    }
    let mut warnings = Vec::new();
    let mut problems = Vec::new();
    let mut docs = Vec::new();
    for (name, text) in files {
        match yaml::read(text) {
            Ok(r) => {
                if r.more_documents > 0 {
                    warnings.push(format!(
                        "{name}: {} more YAML document(s) after the first: envoyproxy/ratelimit reads the first of a file only, and so does this import (split them into files)",
                        r.more_documents
                    ));
                }
                docs.push((name.as_str(), r.doc));
            }
            Err(e) => problems.push(format!("{name}: error loading config file: {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(ImportError::Invalid(problems));
    }
    let loading: Vec<load::File> = docs
        .iter()
        .map(|(name, doc)| load::File {
            name,
            doc: doc.as_ref(),
        })
        .collect();
    let domains = load::load(&loading, opts.merge_domains).map_err(ImportError::Invalid)?;
    let rules = domains.iter().map(|d| count(&d.descriptors)).sum();
    let mut toml = String::new();
    header(&mut toml, files, &warnings, opts);
    for d in &domains {
        let _ = writeln!(toml, "\n[[rls.domains]]\ndomain = {}", q(&d.domain));
        for n in &d.descriptors {
            node(&mut toml, n, 1, &mut warnings);
        }
    }
    Ok(Imported {
        toml,
        warnings,
        rules,
    })
}

fn count(nodes: &[RlsNode]) -> usize {
    nodes
        .iter()
        .map(|n| usize::from(n.rate_limit.is_some()) + count(&n.descriptors))
        .sum()
}

fn header(out: &mut String, files: &[(String, String)], warnings: &[String], opts: &Options) {
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(
        out,
        "# Made by `tollgate import-envoy-ratelimit` from {}: envoyproxy/ratelimit's\n\
         # configuration, looked up and counted as that service does (docs/rls.md). Check it with\n\
         # `tollgate check FILE`.",
        comment(&names.join(", "))
    );
    for w in warnings {
        let _ = writeln!(out, "# warning: {}", comment(w));
    }
    let _ = writeln!(
        out,
        "\n# The limits count in Redis, as envoyproxy/ratelimit's: every Tollgate instance shares them.\n\
         [redis]\nurl = {}\n\
         # envoyproxy/ratelimit gives Redis no deadline: Envoy's own timeout on the call (20ms\n\
         # unless set) decides first. The longest Tollgate allows keeps it so.\n\
         timeout = \"10s\"\n\n\
         # The service trusts its callers: keep it on a private network, or add tls = true with\n\
         # [tls] client_ca and client_auth = \"require\" (docs/rls.md).\n\
         [rls]\nlisten = {}\n\
         # As envoyproxy/ratelimit counts: every hit, in windows of the unit from the Unix epoch.\n\
         algorithm = {}\n\
         # Redis in trouble fails the call (gRPC UNAVAILABLE): Envoy's failure_mode_deny decides.\n\
         on_error = \"fail\"\n\
         # LIMIT_RESPONSE_HEADERS_ENABLED: \"envoy\" (RateLimit-Limit, -Remaining, -Reset), \"ietf\"\n\
         # (Tollgate's RateLimit-Policy and RateLimit), or \"none\" (the service's default).\n\
         response_headers = {}",
        q(&opts.redis_url),
        q(&opts.listen),
        q(&opts.algorithm),
        q(&opts.response_headers),
    );
    let _ = writeln!(
        out,
        "# LOCAL_CACHE_SIZE_IN_BYTES: false (its default) counts every hit in Redis; true answers a\n\
         # count known past its limit from memory until its window ends (no Redis call).\n\
         local_cache = {}",
        opts.local_cache
    );
    if opts.stop_increment_when_over {
        out.push_str(
            "# STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.\nstop_increment_when_over = true\n",
        );
    }
    if opts.quota_mode {
        out.push_str("# Global quota mode: a call is over only when every descriptor is.\nquota_mode = true\n");
    }
    if opts.shadow_mode {
        out.push_str("# SHADOW_MODE: every call is answered OK overall.\nshadow_mode = true\n");
    }
    if opts.dynamic_metadata {
        out.push_str("# RESPONSE_DYNAMIC_METADATA.\ndynamic_metadata = true\n");
    }
}

/// One node, then its children (`[[rls.domains.descriptors.descriptors]]`, one level deeper).
fn node(out: &mut String, n: &RlsNode, depth: usize, warnings: &mut Vec<String>) {
    let _ = writeln!(
        out,
        "\n[[rls.domains{}]]\nkey = {}",
        ".descriptors".repeat(depth),
        q(&n.key)
    );
    if !n.value.is_empty() {
        let _ = writeln!(out, "value = {}", q(&n.value));
    }
    if let Some(l) = &n.rate_limit {
        let mut parts = Vec::new();
        if l.unlimited {
            parts.push("unlimited = true".to_string());
            if l.requests_per_unit > 0 {
                parts.push(format!("requests_per_unit = {}", l.requests_per_unit));
            }
        } else {
            parts.push(format!("requests_per_unit = {}", l.requests_per_unit));
            if let Some(u) = l.unit {
                parts.push(format!("unit = {}", q(&u.name().to_ascii_lowercase())));
            }
        }
        if !l.name.is_empty() {
            parts.push(format!("name = {}", q(&l.name)));
        }
        if !l.replaces.is_empty() {
            let r: Vec<String> = l
                .replaces
                .iter()
                .map(|r| format!("{{ name = {} }}", q(r)))
                .collect();
            parts.push(format!("replaces = [{}]", r.join(", ")));
        }
        let _ = writeln!(out, "rate_limit = {{ {} }}", parts.join(", "));
    }
    for (flag, on) in [
        ("shadow_mode", n.shadow_mode),
        ("quota_mode", n.quota_mode),
        ("detailed_metric", n.detailed_metric),
        ("value_to_metric", n.value_to_metric),
        ("share_threshold", n.share_threshold),
    ] {
        if on {
            let _ = writeln!(out, "{flag} = true");
        }
    }
    if let Some(m) = &n.metadata {
        let _ = writeln!(out, "metadata = {}", inline(m, warnings));
    }
    for c in &n.descriptors {
        node(out, c, depth + 1, warnings);
    }
}

/// JSON as a TOML inline value (metadata); a null (YAML's null, NaN or an infinity), which
/// Tollgate's metadata cannot hold, is left out with a warning.
fn inline(v: &serde_json::Value, warnings: &mut Vec<String>) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut parts = Vec::new();
            for (k, v) in m {
                if v.is_null() {
                    warnings.push(format!(
                        "metadata key {k}: a null, NaN or infinite value, which Tollgate's metadata cannot hold, is left out"
                    ));
                } else {
                    parts.push(format!("{} = {}", q(k), inline(v, warnings)));
                }
            }
            format!("{{ {} }}", parts.join(", "))
        }
        serde_json::Value::Array(a) => {
            let mut items = Vec::new();
            for v in a {
                if v.is_null() {
                    warnings.push("metadata: a null, NaN or infinite list item, which Tollgate's metadata cannot hold, is left out".into());
                } else {
                    items.push(inline(v, warnings));
                }
            }
            format!("[{}]", items.join(", "))
        }
        serde_json::Value::String(s) => q(s),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Null => "\"\"".into(),
    }
}

fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The domains a set of files loads to (for tests: the service's loader alone).
pub fn load_domains(
    files: &[(String, String)],
    merge: bool,
) -> Result<Vec<RlsDomain>, Vec<String>> {
    let mut docs = Vec::new();
    for (name, text) in files {
        let r = yaml::read(text)
            .map_err(|e| vec![format!("{name}: error loading config file: {e}")])?;
        docs.push((name.as_str(), r.doc));
    }
    let loading: Vec<load::File> = docs
        .iter()
        .map(|(name, doc)| load::File {
            name,
            doc: doc.as_ref(),
        })
        .collect();
    load::load(&loading, merge)
}
