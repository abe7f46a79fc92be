//! End-to-end tests of what an ingress-nginx user's routes need (issue 15): regex paths and
//! rewrites, wildcard hosts and a host's own 404, canaries, `only_from`, redirects, and
//! upstream names that resolve late (a hosts file private to the gateway's process).

use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_routes_rewrites_wildcard_hosts_and_a_hosts_own_404() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]

# ingress-nginx's rewrite example: /something/new reaches the upstream as /new.
[[routes]]
name = "rewrite"
path_regex = "^/something(/|$)(.*)"
rewrite = {{ regex = "^/something(/|$)(.*)", replace = "/$2" }}
upstream = "app"

[[routes]]
name = "strip"
path_prefix = "/api/"
strip_prefix = "/api"
upstream = "app"

# An exact path and a prefix win over a regex that also matches.
[[routes]]
name = "greedy-regex"
path_regex = "/(users|teams)/[0-9]+$"
case_insensitive = true
respond = {{ status = 200, body = "regex" }}
[[routes]]
name = "users-prefix"
path_prefix = "/users/1"
respond = {{ status = 200, body = "prefix" }}

[[routes]]
name = "api-host"
host = "api.example.com"
path_prefix = "/v1/"
upstream = "app"
[[routes]]
name = "wild"
host = "*.example.com"
path_prefix = "/"
respond = {{ status = 200, body = "wild" }}
[[routes]]
name = "app-root"
host = "shop.example.org"
path_exact = "/"
respond = {{ status = 302, location = "/app1" }}
# Regex routes come after every exact and prefix route: a catch-all written as a regex
# stays behind them (a prefix "/" would take every path first).
[[routes]]
name = "default"
path_regex = "/"
respond = {{ status = 200, body = "default" }}
"#,
            be = be.addr
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;

    let r = get(port, "/something/new?x=1", &[]).await.expect("req");
    assert_eq!((r.status, upstream_path(&r)), (200, "/new?x=1".into()));
    let r = get(port, "/something", &[]).await.expect("req");
    assert_eq!(upstream_path(&r), "/");
    // Anchored at the path's start: a path that only contains it is not taken.
    let r = get(port, "/x/something/new", &[]).await.expect("req");
    assert_eq!(r.body, "default");
    // The rewrite reads the canonical path: other spellings reach the same place.
    let r = get(port, "/something//%6Eew", &[]).await.expect("req");
    assert_eq!(upstream_path(&r), "/new");

    let r = get(port, "/api/v1/items?a=b", &[]).await.expect("req");
    assert_eq!(upstream_path(&r), "/v1/items?a=b");

    assert_eq!(
        get(port, "/users/1", &[]).await.expect("req").body,
        "prefix"
    );
    assert_eq!(
        get(port, "/TEAMS/42", &[]).await.expect("req").body,
        "regex"
    );
    assert_eq!(
        get(port, "/teams/42x", &[]).await.expect("req").body,
        "default"
    );

    let host = |h: &'static str| [("host", h)];
    let r = get(port, "/v1/x", &host("API.example.com."))
        .await
        .expect("req");
    assert_eq!((r.status, upstream_path(&r)), (200, "/v1/x".into()));
    // The host's own routes only: not the wildcard, not the host-less default.
    let r = get(port, "/other", &host("api.example.com"))
        .await
        .expect("req");
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["error_code"], "NO_ROUTE");
    assert_eq!(
        get(port, "/", &host("www.example.com"))
            .await
            .expect("req")
            .body,
        "wild"
    );
    // One label: deeper names and the parent are not covered.
    for h in ["a.b.example.com", "example.com"] {
        let r = get(port, "/", &[("host", h)]).await.expect("req");
        assert_eq!(r.body, "default", "{h}");
    }
    let r = get(port, "/", &host("shop.example.org"))
        .await
        .expect("req");
    assert_eq!((r.status, r.header("location")), (302, Some("/app1")));
    let r = get(port, "/app1", &host("shop.example.org"))
        .await
        .expect("req");
    assert_eq!(r.status, 404, "a named host's unmatched path");
}

/// ingress-nginx's canary: production stays the default; the header forces either way; the
/// weight sends its share (20 % of 2,000 requests, within 5 points).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_takes_its_weight_and_the_header_forces_it() {
    let prod = Backend::start().await.expect("backend");
    let canary = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.prod]
targets = ["{}"]
[upstreams.canary]
targets = ["{}"]
[[routes]]
path_prefix = "/"
upstream = "prod"
canary = {{ upstream = "canary", weight = 20, header = "X-Canary", cookie = "canary" }}
"#,
            prod.addr, canary.addr
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let mut conn = Conn::open(port).await.expect("conn");
    for _ in 0..2000 {
        let r = conn.send("GET", "/", &[], "").await.expect("req");
        assert_eq!(r.status, 200);
    }
    let share = canary.hits() as f64 / 2000.0;
    assert!((0.15..=0.25).contains(&share), "canary share {share}");
    assert_eq!(prod.hits() + canary.hits(), 2000);

    let (p0, c0) = (prod.hits(), canary.hits());
    for _ in 0..50 {
        conn.send("GET", "/", &[("x-canary", "always")], "")
            .await
            .expect("req");
        conn.send(
            "GET",
            "/",
            &[("x-canary", "never"), ("cookie", "canary=always")],
            "",
        )
        .await
        .expect("req");
        conn.send("GET", "/", &[("cookie", "a=1; canary=always")], "")
            .await
            .expect("req");
    }
    assert_eq!((prod.hits() - p0, canary.hits() - c0), (50, 100));
}

/// `only_from` (whitelist-source-range) refuses clients outside with 403 and keeps limits on
/// clients inside (unlike `allow`, which skips them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_from_refuses_outsiders_and_keeps_limits_on_insiders() {
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        r#"
[limits.one]
key = "client_ip"
rate = "1/h"
[[routes]]
path_prefix = "/inside"
access = { only_from = ["127.0.0.2/32", "10.0.0.0/8"] }
limits = ["one"]
respond = { status = 200, body = "in" }
"#,
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let from = |a: &str| a.parse::<IpAddr>().expect("ip");
    let r = request_from(from("127.0.0.1"), port, "GET", "/inside", &[], "")
        .await
        .expect("req");
    assert_eq!(
        (r.status, r.json()["error_code"].as_str()),
        (403, Some("ACCESS_DENIED"))
    );
    // A forged X-Forwarded-For from an untrusted peer changes nothing.
    let r = request_from(
        from("127.0.0.1"),
        port,
        "GET",
        "/inside",
        &[("x-forwarded-for", "10.1.1.1")],
        "",
    )
    .await
    .expect("req");
    assert_eq!(r.status, 403);
    let inside = |_| request_from(from("127.0.0.2"), port, "GET", "/inside", &[], "");
    assert_eq!(inside(()).await.expect("req").status, 200);
    assert_eq!(inside(()).await.expect("req").status, 429);
}

/// A gateway whose `/etc/hosts` is a file of the test's (a private mount namespace): names
/// resolve as the test writes them, without touching the machine's.
struct HostsFile {
    path: std::path::PathBuf,
}

impl HostsFile {
    fn write(&self, lines: &str) {
        // In place: the bind mount follows the inode, not the name.
        std::fs::write(&self.path, format!("127.0.0.1 localhost\n{lines}")).expect("hosts");
    }
}

fn spawn_with_hosts(toml: &str) -> (GatewayProc, HostsFile) {
    let dir = temp_dir("dns");
    let config = dir.join("tollgate.toml");
    std::fs::write(&config, toml).expect("config");
    let hosts = HostsFile {
        path: dir.join("hosts"),
    };
    hosts.write("");
    let log = dir.join("log");
    let out = std::fs::File::create(&log).expect("log");
    let ok = Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "this test needs `unshare -m` (util-linux, as root)");
    let child = Command::new("unshare")
        .arg("-m")
        .arg("sh")
        .arg("-c")
        .arg(r#"mount --bind "$1" /etc/hosts && exec "$2" run --config "$3""#)
        .arg("sh")
        .arg(&hosts.path)
        .arg(BIN)
        .arg(&config)
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn");
    (
        GatewayProc {
            child,
            dir,
            config,
            log,
        },
        hosts,
    )
}

/// A Service that does not exist yet: the gateway starts, that route answers 503 and
/// /readyz names it, the others serve; once the name resolves the route serves, without a
/// reload; a name with two addresses (a headless Service) uses both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_name_that_resolves_late_serves_once_it_does() {
    let other = Backend::start().await.expect("backend");
    // Two addresses of one name, one port (the pods of a headless Service).
    let a2 = Backend::start().await.expect("backend");
    let shared_port = a2.addr.port();
    let b2 = Backend::start_at(std::net::SocketAddr::from(([127, 0, 0, 3], shared_port)))
        .await
        .expect("backend on 127.0.0.3");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.late]
targets = ["svc.tollgate.test:{shared_port}"]
resolve_every = "200ms"
health_check = false
[upstreams.here]
targets = ["{}"]
[[routes]]
path_prefix = "/late"
upstream = "late"
[[routes]]
path_prefix = "/"
upstream = "here"
"#,
            other.addr
        ),
    );
    let (gw, hosts) = spawn_with_hosts(&toml);
    assert!(
        wait_listening(port, Duration::from_secs(20)).await,
        "{}",
        gw.log_text()
    );
    let ready = eventually(Duration::from_secs(5), || async {
        get(admin, "/readyz", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    let r = get(admin, "/readyz", &[]).await.expect("readyz");
    assert!(ready, "{}\n{}", r.body, gw.log_text());
    assert!(
        r.body.contains("upstream late: svc.tollgate.test:"),
        "{}",
        r.body
    );
    let r = get(port, "/late", &[]).await.expect("req");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error_code"], "UPSTREAM_UNAVAILABLE");
    // With a body: the same answer, and nothing of the body is taken for a next request
    // (the connection is closed after it, as after any failure to proxy).
    let mut conn = Conn::open(port).await.expect("conn");
    let r = conn
        .send("POST", "/late", &[], "GET /smuggled HTTP/1.1\r\n\r\n")
        .await
        .expect("req");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        conn.send("GET", "/", &[], "").await.is_err(),
        "the connection stays open"
    );
    assert_eq!(other.hits(), 0, "a body was read as a request");
    assert_eq!(get(port, "/", &[]).await.expect("req").status, 200);

    hosts.write("127.0.0.1 svc.tollgate.test\n127.0.0.3 svc.tollgate.test\n");
    let served = eventually(Duration::from_secs(5), || async {
        get(port, "/late", &[]).await.is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served, "{}", gw.log_text());
    for _ in 0..20 {
        assert_eq!(get(port, "/late", &[]).await.expect("req").status, 200);
    }
    assert!(
        a2.hits() > 0 && b2.hits() > 0,
        "{} {}",
        a2.hits(),
        b2.hits()
    );
    let r = get(admin, "/readyz", &[]).await.expect("readyz");
    assert!(!r.body.contains("does not resolve"), "{}", r.body);
    assert!(
        gw.log_text().contains("upstream_resolved"),
        "{}",
        gw.log_text()
    );
}

/// `match_headers`, `match_query` and `backends` (the Gateway API's header and query matches
/// and weighted backendRefs) over a real socket: a request that lacks a match falls through
/// to the next route, and the hostile spellings (a second field, an escaped or repeated
/// parameter) reach the route the upstream would read them as.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_query_matches_fall_through_and_backends_split_by_weight() {
    let (a, b, c) = (
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
    );
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.a]
targets = ["{}"]
[upstreams.b]
targets = ["{}"]
[upstreams.c]
targets = ["{}"]
[[routes]]
name = "env-canary"
path_prefix = "/"
match_headers = [{{ name = "X-Env", value = "canary" }}]
upstream = "b"
[[routes]]
name = "query"
path_prefix = "/"
match_query = [{{ name = "animal", value = "whale" }}, {{ name = "v", regex = "[12]" }}]
upstream = "c"
[[routes]]
name = "split"
path_prefix = "/split"
backends = [{{ upstream = "a", weight = 3 }}, {{ upstream = "b", weight = 1 }}, {{ status = 500, weight = 1 }}]
[[routes]]
name = "rest"
path_prefix = "/"
upstream = "a"
"#,
            a.addr, b.addr, c.addr
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let mut conn = Conn::open(port).await.expect("conn");
    let hits = || (a.hits(), b.hits(), c.hits());
    let to = |before: (usize, usize, usize), after: (usize, usize, usize)| match (
        after.0 - before.0,
        after.1 - before.1,
        after.2 - before.2,
    ) {
        (1, 0, 0) => 'a',
        (0, 1, 0) => 'b',
        (0, 0, 1) => 'c',
        other => panic!("one request, hits {other:?}"),
    };
    /// A target, its headers, and the backend that should take it.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], char);
    let cases: &[Case] = &[
        ("/x", &[("x-env", "canary")], 'b'),
        ("/x", &[("X-ENV", "canary")], 'b'),
        ("/x", &[("x-env", "Canary")], 'a'),
        ("/x", &[("x-env", "canary"), ("x-env", "prod")], 'a'),
        ("/x", &[("x-env", "")], 'a'),
        ("/x?animal=whale&v=1", &[], 'c'),
        ("/x?animal=%77hale&v=2", &[], 'c'),
        ("/x?animal=whale&v=12", &[], 'a'),
        ("/x?animal=whale&animal=dolphin&v=1", &[], 'a'),
        ("/x?Animal=whale&v=1", &[], 'a'),
        ("/x?animal=whale", &[], 'a'),
    ];
    for (target, headers, want) in cases {
        let before = hits();
        let r = conn.send("GET", target, headers, "").await.expect("req");
        assert_eq!(r.status, 200, "{target} {headers:?}");
        assert_eq!(to(before, hits()), *want, "{target} {headers:?}");
    }
    let before = hits();
    let mut refused = 0;
    for _ in 0..1000 {
        let r = conn.send("GET", "/split", &[], "").await.expect("req");
        match r.status {
            200 => {}
            500 => refused += 1,
            s => panic!("status {s}"),
        }
    }
    let (da, db) = (a.hits() - before.0, b.hits() - before.1);
    assert_eq!(da + db + refused, 1000);
    assert!((520..=680).contains(&da), "a {da}");
    assert!((140..=260).contains(&db), "b {db}");
    assert!((140..=260).contains(&refused), "500s {refused}");
}

/// `ports` keeps two listeners' routes apart, `**.` takes names of any depth (the nearest
/// parent first), and `redirect` makes its Location from the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_keep_listeners_apart_deep_wildcards_and_redirects() {
    let (a, b) = (
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
    );
    let (port, other, admin) = (free_port(), free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}", "127.0.0.1:{other}"]
admin = "127.0.0.1:{admin}"
threads = 1
[upstreams.a]
targets = ["{}"]
[upstreams.b]
targets = ["{}"]
[[routes]]
name = "api-on-port"
host = "api.example.com"
path_prefix = "/"
ports = [{port}]
upstream = "a"
[[routes]]
name = "deep"
host = "**.example.com"
path_prefix = "/"
ports = [{other}]
upstream = "b"
[[routes]]
name = "nearer"
host = "*.x.example.com"
path_prefix = "/"
upstream = "a"
[[routes]]
name = "moved"
host = "old.example.com"
path_prefix = "/old"
ports = [{port}]
redirect = {{ status = 301, replace_prefix = "/new" }}
[[routes]]
name = "secure"
host = "plain.example.com"
path_exact = "/login"
redirect = {{ scheme = "https", host = "login.example.com" }}
"#,
        a.addr, b.addr
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let mut on_port = Conn::open(port).await.expect("conn");
    let mut on_other = Conn::open(other).await.expect("conn");
    let get = |host: &'static str| [("host", host)];
    let r = on_port
        .send("GET", "/", &get("api.example.com"), "")
        .await
        .expect("req");
    assert_eq!((r.status, a.hits(), b.hits()), (200, 1, 0));
    // api.example.com has no route on the other port: the deep wildcard of that port takes it.
    let r = on_other
        .send("GET", "/", &get("api.example.com"), "")
        .await
        .expect("req");
    assert_eq!((r.status, a.hits(), b.hits()), (200, 1, 1));
    let r = on_other
        .send("GET", "/", &get("p.q.example.com"), "")
        .await
        .expect("req");
    assert_eq!((r.status, b.hits()), (200, 2));
    // The nearer parent's one-label wildcard wins over the deeper one.
    let r = on_other
        .send("GET", "/", &get("p.x.example.com"), "")
        .await
        .expect("req");
    assert_eq!((r.status, a.hits()), (200, 2));
    let r = on_other
        .send("GET", "/", &get("example.com"), "")
        .await
        .expect("req");
    assert_eq!(r.status, 404);
    // The deep wildcard is on the other port only.
    let r = on_port
        .send("GET", "/", &get("p.q.example.com"), "")
        .await
        .expect("req");
    assert_eq!(r.status, 404);

    let r = on_port
        .send("GET", "/old/a/b?x=1", &get("old.example.com"), "")
        .await
        .expect("req");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://old.example.com:{port}/new/a/b?x=1").as_str())
    );
    let r = on_port
        .send("GET", "/old", &get("old.example.com"), "")
        .await
        .expect("req");
    assert_eq!(
        r.header("location"),
        Some(format!("http://old.example.com:{port}/new").as_str())
    );
    let r = on_port
        .send("GET", "/login", &get("plain.example.com"), "")
        .await
        .expect("req");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("https://login.example.com/login")
    );
    assert_eq!((a.hits(), b.hits()), (2, 2));
}
