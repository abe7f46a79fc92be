//! Tollgate's configuration: TOML text in, validated runtime values out.
//!
//! What this crate owns: the file format (see docs/, one page per table), every
//! check on it, and the typed values the proxy runs on (durations, rates, CIDRs, references
//! resolved to indexes). Runtime code never sees raw strings like "10/s".
//!
//! Failure modes: a file that cannot be read or is not valid TOML, and any number of problems
//! in a valid TOML file. All are reported together in [`ConfigErrors`], each with its dotted key
//! path and line, so an operator can fix a file in one pass. Unknown keys are errors; keys the
//! format knows but this build does not serve yet say so instead of "unknown key".

mod abuse;
mod auth;
mod balance;
mod edge;
pub mod envoy_ratelimit;
mod fallback;
mod files;
mod hardening;
mod jwt;
mod limits;
pub mod matching;
mod mirror;
pub mod model;
pub mod mounted;
mod named;
mod parse;
mod passthrough;
mod plans;
mod reader;
mod redirect;
mod redis;
mod rls;
mod rls_tree;
mod routes;
mod scalars;
mod server;
mod split;
mod timeouts;
mod tls;
pub mod tracing;
mod upstreams;
mod values;

pub use auth::{bcrypt_cost, weak_hash_warnings, AUTH_FRAMING, BCRYPT_COST_FLOOR};
pub use edge::{origin_rule, parse_size, request_header_refused, response_header_refused};
pub use fallback::WRITTEN as ERROR_PAGE_WRITTEN;
pub use files::{read_bounded, MAX_FILE_BYTES};
pub use mirror::parse_url as parse_mirror_url;
pub use reader::Problem;
pub use rls_tree::counter as rls_counter;
pub use routes::{path_regex, rewrite_warnings};
pub use scalars::canonical_route_path;
pub use scalars::{dns_name, http_token};

/// Everything about a valid config worth an operator's look, one line each: rewrites that
/// reach a guarded path, weak password hashes (by file and line).
pub fn warnings(cfg: &Config) -> Vec<String> {
    let mut out = rewrite_warnings(cfg);
    out.extend(weak_hash_warnings(cfg));
    out
}
pub use values::{parse_duration, parse_rate};

use model::Config;
use std::path::Path;

/// At most this many limits on one route: a decision keeps their keys on the stack.
/// Where an imported config expects each Ingress TLS Secret mounted (`import-ingress`'s
/// Deployment mounts them read-only, without `subPath`, so renewals reach the file), at
/// `TLS_MOUNT/NAMESPACE/SECRET/`.
pub const TLS_MOUNT: &str = "/etc/tollgate/tls";

pub const MAX_LIMITS_PER_ROUTE: usize = 16;

/// Every problem found in one file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigErrors {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl ConfigErrors {
    /// One line per problem: `FILE: dotted.key.path: what is wrong (line N)`.
    pub fn lines(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|p| format!("{}: {}", self.file, p))
            .collect()
    }

    fn render(&self) -> String {
        self.lines().join("\n")
    }
}

/// Reads and validates a config file to serve it (upstream host names are resolved).
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    read_file(path, true)
}

/// Reads and validates a config file without resolving upstream host names (`tollgate check`,
/// which may run where the names mean nothing, e.g. in CI for a Kubernetes deployment).
pub fn check_file(path: &Path) -> Result<Config, ConfigErrors> {
    read_file(path, false)
}

fn read_file(path: &Path, resolve: bool) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let text = files::read_bounded_text(path).map_err(|e| ConfigErrors {
        file: file.clone(),
        problems: vec![Problem {
            path: String::new(),
            line: 0,
            message: format!("cannot read the file: {e}"),
        }],
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse::parse(&text, base, resolve).map_err(|problems| ConfigErrors { file, problems })
}

/// As [`load_file`], for `text` made from the file at `path` (BASE.toml with the cluster's
/// part, under `tollgate run --kubernetes`): relative names in it are read beside `path`.
pub fn load_text(path: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let base = path.parent().unwrap_or(Path::new("."));
    parse::parse(text, base, true).map_err(|problems| ConfigErrors {
        file: path.display().to_string(),
        problems,
    })
}

/// As [`load_text`] without resolving upstream host names (a translation judged before it
/// is served).
pub fn check_text(path: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let base = path.parent().unwrap_or(Path::new("."));
    parse::parse(text, base, false).map_err(|problems| ConfigErrors {
        file: path.display().to_string(),
        problems,
    })
}

/// Validates config text without resolving upstream host names (see [`check_file`]).
pub fn check_str(text: &str, file: &str) -> Result<Config, ConfigErrors> {
    parse::parse(text, Path::new("."), false).map_err(|problems| ConfigErrors {
        file: file.to_string(),
        problems,
    })
}

/// Validates an `import-ingress` output: as [`check_str`], except that the Secrets it expects
/// mounted (under [`TLS_MOUNT`]) may be absent where the import runs.
pub fn check_import_str(text: &str, file: &str) -> Result<Config, ConfigErrors> {
    parse::parse_import(text, TLS_MOUNT).map_err(|problems| ConfigErrors {
        file: file.to_string(),
        problems,
    })
}

/// Every key name the parser asks for while it reads `text` (each reader asks for every key
/// it knows, whether or not the text gives it): the keys it accepts in the tables `text`
/// has. For the test that keeps `docs/` and the parser in step.
pub fn keys_read(text: &str) -> std::collections::BTreeSet<String> {
    reader::keys_asked(|| parse::parse(text, Path::new("."), false)).1
}

/// Validates config text; `file` names it in errors. Relative file names in it (key files)
/// are read from the current directory.
pub fn parse_str(text: &str, file: &str) -> Result<Config, ConfigErrors> {
    parse::parse(text, Path::new("."), true).map_err(|problems| ConfigErrors {
        file: file.to_string(),
        problems,
    })
}
