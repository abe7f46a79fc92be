//! The reference (`docs/`) and the parser stay in step: every key the parser accepts is
//! named in the reference, and every key a reference table lists is one the parser accepts.

use std::collections::BTreeSet;
use std::path::Path;

/// A config that opens every table and inline table the parser reads, so that each reader
/// asks for every key it knows.
const EVERY_TABLE: &str = r#"
[server]
listen = ["127.0.0.1:8080"]
tls_listen = ["127.0.0.1:8443"]
max_body_bytes = "8m"
request_headers = { set = { "X-Env" = "prod" }, add = { "X-A" = "1" }, remove = ["X-Debug"] }
response_headers = { set = { "X-Frame-Options" = "DENY" } }
[redis]
url = "redis://127.0.0.1:6379"
[tls]
certificates = [{ cert = "a.pem", key = "a.key" }]
client_ca = "ca.pem"
[jwt]
algorithms = ["HS256"]
secret_env = "X"
jwks_url = "https://idp.example.com/jwks.json"
jwks_ca = "ca.pem"
jwks_refetch = "30s"
[auth.sso]
forward = { url = "http://auth:4180/", method = "GET", request_headers = ["cookie"], response_headers = ["x-user"], signin = "https://login.example.com/", redirect = "/", timeout = "2s", cache = "30s", cache_key = ["header:cookie"] }
[auth.staff]
basic = { htpasswd = "users.htpasswd", realm = "Staff" }
[auth.keys]
api_key = { header = "x-api-key", query = "api_key", keys_file = "keys.txt" }
[access]
deny = ["192.0.2.0/24"]
[plans]
default = "free"
from = "header:x-plan"
tenant = "header:x-tenant"
tenants = { acme = "pro" }
[plans.free]
rate = "1/s"
quota = "10/day"
[plans.pro]
rate = "2/s"
[upstreams.api]
targets = ["127.0.0.1:3000"]
tls = { ca = "ca.pem", client_cert = { cert = "c.pem", key = "c.key" } }
health_check = { interval = "2s", timeout = "1s" }
[upstreams.canary]
targets = ["127.0.0.1:3001"]
balance = "hash"
hash_key = "cookie:session"
affinity = { cookie = "route", max_age = "1h", path = "/", secure = true, secret = "0123456789abcdef" }
retry = { attempts = 2, on = ["connect", "timeout", "502", "503", "504"], budget = 0.2 }
[limits.by_descriptor]
key = "descriptor"
rate = "10/s"
[rls]
listen = "127.0.0.1:8081"
tls = true
[tracing]
otlp = "http://127.0.0.1:4318"
[[rls.rules]]
domain = "edge"
descriptor = [{ key = "remote_address", value = "10.0.0.1" }]
limits = ["by_descriptor"]
[limits.rated]
key = "client_ip"
rate = "1/s"
algorithm = "leaky_bucket"
scope = "global"
sync = "lease"
action = "tarpit"
tarpit = { delay = ["1s", "2s"] }
block = [{ after = 3, within = "1m", for = "5m" }]
count = "failures"
[limits.quota]
key = "header:x-api-key"
quota = "100/month"
scope = "global"
overage = "soft"
[limits.throttled]
key = "header:x-api-key"
quota = "100/month"
overage = "throttle"
throttle_rate = "1/s"
[limits.inflight]
key = "client_ip"
algorithm = "concurrency"
burst = 2
scope = "global"
[limits.challenged]
key = "client_ip"
rate = "1/s"
action = "challenge"
challenge_url = "https://example.com/challenge"
[limits.planned]
key = "client_ip"
plan = "rate"
[[routes]]
path_prefix = "/"
upstream = "api"
limits = ["rated"]
access = { deny = ["192.0.2.0/24"] }
tarpit = { delay = ["1s", "2s"] }
canary = { upstream = "canary", weight = 10 }
rewrite = { regex = "^/(.*)", replace = "/$1" }
auth = { jwt = "required", claims = { scope = "a" }, forward_claims = { sub = "X-User-Id" } }
host = ["a.example.com", "b.example.com"]
max_body_bytes = 10485760
cors = { allow_origins = ["https://app.example.com"], allow_methods = ["GET"], allow_headers = ["X-Token"], expose_headers = ["X-Total"], allow_credentials = true, max_age = 600 }
request_headers = { set = { "X-Route" = "$route" } }
response_headers = { remove = ["Server-Timing"] }
upstream_host = "internal.svc"
x_forwarded_prefix = "/api"
compress = true
limit_rate = 1048576
limit_rate_after = 1048576
[[routes]]
host = "example.com"
www_redirect = true
path_prefix = "/"
upstream = "api"
"#;

fn reference() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut text = String::new();
    for e in std::fs::read_dir(&root).expect("docs/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            text.push_str(&std::fs::read_to_string(&p).expect("page"));
        }
    }
    text
}

/// Names written as `name` (or `name = ...`, or a table `[name]`, `[[name]]`,
/// `[name.SUB]`) in backticks.
fn named(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| {
            let s = s.split([' ', '=']).next().unwrap_or(s);
            let s = s.trim_matches(['[', ']']);
            s.split('.').next().unwrap_or(s).to_string()
        })
        .collect()
}

/// Keys written in the reference's TOML examples: `name = ...` on a line, or inside an
/// inline table (`{ name = ... }`).
fn in_examples(text: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            continue;
        }
        let code = line.split('#').next().unwrap_or("");
        for part in code.split(['{', ',', '[']) {
            if let Some((k, _)) = part.split_once('=') {
                let k = k.trim();
                if !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    keys.insert(k.to_string());
                }
            }
        }
    }
    keys
}

#[test]
fn every_key_the_parser_accepts_is_in_the_reference() {
    let asked = tollgate_config::keys_read(EVERY_TABLE);
    assert!(
        asked.len() > 100,
        "the config opens every table: {}",
        asked.len()
    );
    let text = reference();
    let mut docs = named(&text);
    docs.extend(in_examples(&text));
    // Inline tables written in backticks: `{ interval = "2s", timeout = "1s" }`.
    for span in text.split('`').skip(1).step_by(2) {
        docs.extend(in_examples(&format!("```\n{span}\n```")));
    }
    let missing: Vec<_> = asked.iter().filter(|k| !docs.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "accepted by the parser, not in docs/: {missing:?}"
    );
}

#[test]
fn every_key_a_reference_table_lists_is_accepted() {
    let asked = tollgate_config::keys_read(EVERY_TABLE);
    // The first cell of each row of a "| key | default | meaning |" table.
    let mut listed = BTreeSet::new();
    for page in [
        "server",
        "upstreams",
        "routes",
        "limits",
        "global-limits",
        "identity",
        "tls",
        "hardening",
        "abuse",
        "auth",
        "edge",
        "rls",
        "tracing",
    ] {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../docs/{page}.md")),
        )
        .expect("page");
        let mut in_key_table = false;
        for line in text.lines() {
            if line.starts_with("| key |") {
                in_key_table = true;
                continue;
            }
            if !line.starts_with('|') {
                in_key_table = false;
                continue;
            }
            if in_key_table && !line.starts_with("|---") {
                let cell = line
                    .trim_start_matches('|')
                    .split(" | ")
                    .next()
                    .unwrap_or("");
                for k in named(cell) {
                    listed.insert((page, k));
                }
            }
        }
    }
    assert!(
        listed.len() > 50,
        "the reference's key tables were found: {}",
        listed.len()
    );
    let unknown: Vec<_> = listed.iter().filter(|(_, k)| !asked.contains(k)).collect();
    assert!(
        unknown.is_empty(),
        "listed in docs/ but refused by the parser: {unknown:?}"
    );
}
