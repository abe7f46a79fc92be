//! Hostile tests of the walks around features (issue 25): rewrites that smuggle query keys or
//! climb out of their template, a key flood against global limits, concurrency slots held by
//! slow uploads. Each test runs the issue's config and the exact request it names.

use std::path::Path;
use std::process::Command;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn serving(port: u16, admin: u16, rest: &str) -> String {
    format!("[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\nthreads = 1\n{rest}")
}

/// The path (with query) the echo backend was sent.
fn upstream_path(r: &Reply) -> String {
    r.json()["path"].as_str().unwrap_or_default().to_string()
}

/// Item 1 and 2: a rewrite's output is held to a client's rules, and keys read what the
/// upstream reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_cannot_smuggle_query_keys_or_climb_past_deny_rules() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]

[limits.per_key]
key = "query:api_key"
rate = "1/h"
burst = 2

[[routes]]
name = "search"
path_regex = "^/q/"
rewrite = {{ regex = "^/q/([^/]*)", replace = "/search?term=$1" }}
upstream = "app"
limits = ["per_key"]

[[routes]]
name = "apps"
path_regex = "^/app-[^/]*/"
rewrite = {{ regex = "^/app-([^/]*)/(.*)", replace = "/apps/$1/$2" }}
upstream = "app"

[[routes]]
name = "api"
path_prefix = "/api"
rewrite = {{ regex = "^/api(.*)", replace = "/$1" }}
upstream = "app"

[[routes]]
name = "admin"
path_prefix = "/admin"
upstream = "app"
access = {{ deny = ["0.0.0.0/0", "::/0"] }}
"#,
            be = be.addr
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;

    // /q/x&api_key=K: the path text is one term value upstream, never an api_key the limit
    // did not see.
    let r = get(port, "/q/x&api_key=K", &[]).await.expect("req");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(upstream_path(&r), "/search?term=x%26api_key%3DK");
    // A real api_key is counted, whether the client gives it once or the same key again.
    let hits_before = be.hits();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = get(port, "/q/x?api_key=K", &[]).await.expect("req");
        statuses.push(r.status);
    }
    assert_eq!(statuses, vec![200, 200, 429, 429], "the key's burst is 2");
    assert_eq!(be.hits() - hits_before, 2);
    // The issue's smuggle with a duplicate: the path's api_key is a term now, and the
    // client's own api_key is the one counted (K is exhausted).
    let r = get(port, "/q/x&api_key=K?api_key=NEW", &[])
        .await
        .expect("req");
    assert_eq!(r.status, 200, "NEW is a fresh key: {}", r.body);
    assert_eq!(
        upstream_path(&r),
        "/search?term=x%26api_key%3DK&api_key=NEW"
    );
    // A parameter the template writes, given by the client too: 400, nothing forwarded.
    let before = be.hits();
    let r = get(port, "/q/x?term=y", &[]).await.expect("req");
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error_code"], "AMBIGUOUS_REQUEST");
    assert_eq!(be.hits(), before);

    // /app-../admin/secret would reach the upstream as /admin/secret past the admin route's
    // deny list: 400, nothing forwarded.
    let r = get(port, "/app-../admin/secret", &[]).await.expect("req");
    assert_eq!(r.status, 400, "{}", r.body);
    let r = get(port, "/app-%2e%2e/admin/secret", &[])
        .await
        .expect("req");
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(be.hits(), before);
    let r = get(port, "/app-x/y", &[]).await.expect("req");
    assert_eq!((r.status, upstream_path(&r)), (200, "/apps/x/y".into()));
    // The admin route itself is denied, in every spelling.
    for p in ["/admin/secret", "/x/../admin/secret", "//admin/secret"] {
        assert_eq!(get(port, p, &[]).await.expect("req").status, 403, "{p}");
    }
    // replace = "/$1" on /api/evil.com: a path, never the network-path reference //evil.com.
    let r = get(port, "/api/evil.com", &[]).await.expect("req");
    assert_eq!((r.status, upstream_path(&r)), (200, "/evil.com".into()));
}

/// `check` warns when a rewrite or strip_prefix can reach a path another route guards.
#[test]
fn check_warns_when_a_rewrite_reaches_a_guarded_path() {
    let dir = temp_dir("walks-check");
    let cfg = dir.join("t.toml");
    std::fs::write(
        &cfg,
        r#"
[upstreams.svc]
targets = ["127.0.0.1:9"]

[[routes]]
name = "svc"
path_prefix = "/svc"
strip_prefix = "/svc"
upstream = "svc"

[[routes]]
name = "admin"
path_prefix = "/admin"
upstream = "svc"
access = { deny = ["0.0.0.0/0"] }

[[routes]]
name = "other"
path_prefix = "/other"
rewrite = { regex = "^/other/(.*)", replace = "/public/$1" }
upstream = "svc"
"#,
    )
    .expect("write");
    let out = Command::new(BIN)
        .arg("check")
        .arg(&cfg)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning is not an error: {err}"
    );
    assert!(
        err.contains("routes[0].strip_prefix") && err.contains("\"admin\""),
        "{err}"
    );
    // /public/... never meets /admin: no warning for the rewrite route.
    assert!(!err.contains("routes[2]"), "{err}");
}
