//! End-to-end tests of the built `tollgate` binary: real sockets on loopback, ephemeral ports,
//! a real backend. Limiter time here is real but the limits are chosen so that no refill can
//! happen during a test (rates per hour or minute); the limiter's timing itself is tested on a
//! manual clock in crates/limit.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn bin() -> &'static Path {
    Path::new(BIN)
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// A config serving on `port` with its admin on `admin`; `rest` goes on inside `[server]`.
fn serving(port: u16, admin: u16, rest: &str) -> String {
    format!("[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\n{rest}")
}

/// A loopback backend and a gateway serving `rest(backend address)` (inside `[server]`).
async fn with_backend(
    rest: impl FnOnce(std::net::SocketAddr) -> String,
) -> (Backend, GatewayProc, u16, u16) {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let gw = start(&serving(port, admin, &rest(be.addr)), port, admin).await;
    (be, gw, port, admin)
}

async fn start(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(bin(), toml, port, admin).await
}

/// Request counters are bumped in the logging phase, which runs just after the response is
/// sent: wait briefly for a sample to reach its value.
async fn metric_reaches(admin: u16, name: &str, labels: &[&str], want: f64) -> bool {
    eventually(Duration::from_secs(3), || async {
        metric(&metrics(admin).await, name, labels) == want
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_host_longest_prefix_and_method() {
    let (_be, _gw, port, admin) = with_backend(|be| {
        format!(
            r#"
threads = 1
[upstreams.app]
targets = ["{be}"]
[[routes]]
name = "api"
path_prefix = "/api"
upstream = "app"
[[routes]]
name = "api-admin"
path_prefix = "/api/admin"
respond = {{ status = 403, body = "admins only" }}
[[routes]]
name = "login"
path_prefix = "/api/login"
methods = ["POST"]
respond = {{ status = 200, body = "login" }}
[[routes]]
name = "docs-host"
host = "docs.example.com"
path_prefix = "/"
respond = {{ status = 200, body = "docs" }}
"#
        )
    })
    .await;

    let r = get(port, "/api/users?x=1", &[]).await.expect("req");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/api/users?x=1", "proxied with the query");
    let r = get(port, "/api/admin/x", &[]).await.expect("req");
    assert_eq!(
        (r.status, r.body.as_str()),
        (403, "admins only"),
        "longest prefix wins"
    );
    let r = request_from(ip("127.0.0.1"), port, "POST", "/api/login", &[], "")
        .await
        .expect("req");
    assert_eq!(r.body, "login");
    let r = get(port, "/api/login", &[]).await.expect("req");
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("\"method\":\"GET\""),
        "GET skips the POST-only route: {}",
        r.body
    );
    let r = get(port, "/api/x", &[("host", "docs.example.com")])
        .await
        .expect("req");
    assert_eq!(
        r.body, "docs",
        "an exact host beats a longer prefix without host"
    );

    let r = get(port, "/nothing", &[]).await.expect("req");
    assert_eq!(r.status, 404);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/problem+json")));
    let j = r.json();
    assert_eq!(j["status"], 404);
    assert_eq!(j["error_code"], "NO_ROUTE");
    assert_eq!(j["request_id"].as_str(), r.header("x-request-id"));

    assert!(
        metric_reaches(
            admin,
            "http_requests_total",
            &["route=\"api\"", "status=\"200\""],
            2.0
        )
        .await
    );
    assert!(
        metric_reaches(
            admin,
            "http_requests_total",
            &["route=\"\"", "status=\"404\""],
            1.0
        )
        .await
    );
    assert!(
        metric_reaches(
            admin,
            "http_request_duration_seconds_count",
            &["route=\"api\""],
            2.0
        )
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_exact_and_the_429_follows_the_contract() {
    let (be, _gw, port, admin) = with_backend(|be| {
        format!(
            r#"
[upstreams.app]
targets = ["{be}"]
[[routes]]
name = "api"
path_prefix = "/"
upstream = "app"
limits = ["per_ip", "wide"]
[limits.per_ip]
key = "client_ip"
rate = "1/m"
burst = 5
[limits.wide]
key = "global"
algorithm = "gcra"
rate = "100/h"
"#
        )
    })
    .await;
    let mut replies = Vec::new();
    for _ in 0..8 {
        replies.push(
            get(port, "/x", &[("x-request-id", "req-42")])
                .await
                .expect("req"),
        );
    }
    let codes: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(codes, [200, 200, 200, 200, 200, 429, 429, 429]);
    assert_eq!(be.hits(), 5, "refused requests never reach the backend");

    // The draft's fields: a bucket's quota is its capacity (5) and its window the time that
    // capacity takes to refill (5 min), so r never exceeds q; t is when more of the quota is
    // available (the next token, within a minute), not when the bucket is full again.
    let ok = &replies[1];
    assert_eq!(
        ok.header("ratelimit-policy"),
        Some("\"per_ip\";q=5;w=300, \"wide\";q=100;w=3600")
    );
    assert_eq!(
        ok.header("ratelimit"),
        Some("\"per_ip\";r=3;t=60"),
        "nearest to exhaustion"
    );
    assert_eq!(
        ok.header("x-request-id"),
        Some("req-42"),
        "the client's id is kept"
    );

    let r = &replies[7];
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("ratelimit"), Some("\"per_ip\";r=0;t=60"));
    assert!(r
        .header("ratelimit-policy")
        .is_some_and(|p| p.contains("\"per_ip\";q=5;w=300")));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let j = r.json();
    for k in ["type", "title", "detail"] {
        assert!(j[k].as_str().is_some_and(|s| !s.is_empty()), "{k} in {j}");
    }
    assert_eq!(j["status"], 429);
    assert_eq!(j["error_code"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(j["request_id"], "req-42");

    // The refused requests consumed nothing from "wide": 5 of 100 taken.
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"rate_limit\"", "route=\"api\"", "limit=\"per_ip\""]
        ),
        3.0
    );
    assert!(
        metric_reaches(
            admin,
            "http_requests_total",
            &["route=\"api\"", "status=\"429\""],
            3.0
        )
        .await
    );
    // Another client has its own per_ip bucket; "wide" (5 of 100 spent) is not the nearest.
    let r = request_from(ip("127.0.0.9"), port, "GET", "/x", &[], "")
        .await
        .expect("req");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit"), Some("\"per_ip\";r=4;t=60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_behind_a_trusted_proxy_are_keyed_apart_and_untrusted_xff_is_ignored() {
    let (port, admin) = (free_port(), free_port());
    let conf = |trusted: &str| {
        format!(
            r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
trusted_proxies = [{trusted}]
[[routes]]
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["per_ip"]
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 3
"#
        )
    };
    let count = |xff: &'static str| async move {
        let mut ok = 0;
        for _ in 0..5 {
            let r = get(port, "/", &[("x-forwarded-for", xff)])
                .await
                .expect("req");
            ok += usize::from(r.status == 200);
        }
        ok
    };
    {
        let _gw = start(&conf("\"127.0.0.0/8\""), port, admin).await;
        assert_eq!(count("203.0.113.1").await, 3, "client one gets its burst");
        assert_eq!(count("203.0.113.2").await, 3, "client two gets its own");
        assert_eq!(
            count("198.51.100.1, 203.0.113.2").await,
            0,
            "right-most untrusted entry"
        );
    }
    let (port2, admin2) = (free_port(), free_port());
    let conf2 = conf("\"10.0.0.0/8\"")
        .replace(&port.to_string(), &port2.to_string())
        .replace(&admin.to_string(), &admin2.to_string());
    let _gw = start(&conf2, port2, admin2).await;
    let mut ok = 0;
    for xff in [
        "203.0.113.1",
        "203.0.113.2",
        "203.0.113.3",
        "203.0.113.4",
        "203.0.113.5",
    ] {
        ok += usize::from(
            get(port2, "/", &[("x-forwarded-for", xff)])
                .await
                .expect("req")
                .status
                == 200,
        );
    }
    assert_eq!(
        ok, 3,
        "an untrusted peer's X-Forwarded-For is ignored: one bucket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_worker_threads_and_50_concurrent_requests_admit_exactly_burst() {
    let (be, _gw, port, _admin) = with_backend(|be| {
        format!(
            r#"
threads = 2
[upstreams.app]
targets = ["{be}"]
[[routes]]
path_prefix = "/"
upstream = "app"
limits = ["per_ip"]
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 20
"#
        )
    })
    .await;
    let tasks: Vec<_> = (0..50)
        .map(|_| tokio::spawn(async move { get(port, "/", &[]).await.map(|r| r.status) }))
        .collect();
    let mut ok = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.expect("task").expect("request") {
            200 => ok += 1,
            429 => refused += 1,
            s => panic!("status {s}"),
        }
    }
    assert_eq!(
        (ok, refused),
        (20, 30),
        "limits are per process, never per thread"
    );
    assert_eq!(be.hits(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_take_a_dead_target_out_and_bring_it_back() {
    let live = Backend::start().await.expect("backend");
    let dead_port = free_port();
    let (port, admin) = (free_port(), free_port());
    let conf = serving(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{live}", "127.0.0.1:{dead_port}"]
health_check = {{ interval = "100ms", timeout = "100ms" }}
[[routes]]
path_prefix = "/"
upstream = "app"
"#,
            live = live.addr
        ),
    );
    let _gw = start(&conf, port, admin).await;
    let dead_label = format!("target=\"127.0.0.1:{dead_port}\"");
    let marked_down = eventually(Duration::from_secs(5), || {
        let l = dead_label.clone();
        async move {
            metrics(admin).await.contains(&format!(
                "tollgate_upstream_target_healthy{{{l},upstream=\"app\"}} 0"
            )) || {
                let m = metrics(admin).await;
                m.lines().any(|x| {
                    x.starts_with("tollgate_upstream_target_healthy")
                        && x.contains(&l)
                        && x.ends_with(" 0")
                })
            }
        }
    })
    .await;
    assert!(marked_down, "the dead target is marked unhealthy");
    for _ in 0..10 {
        assert_eq!(get(port, "/", &[]).await.expect("req").status, 200);
    }
    assert_eq!(live.hits(), 10, "every request went to the live target");

    // Bring it back: it rejoins the rotation.
    let revived = Backend::start_on(dead_port).await.expect("revive");
    let back = eventually(Duration::from_secs(5), || {
        let l = dead_label.clone();
        async move {
            let m = metrics(admin).await;
            m.lines().any(|x| {
                x.starts_with("tollgate_upstream_target_healthy")
                    && x.contains(&l)
                    && x.ends_with(" 1")
            })
        }
    })
    .await;
    assert!(back, "the revived target is healthy again");
    for _ in 0..10 {
        assert_eq!(get(port, "/", &[]).await.expect("req").status, 200);
    }
    assert!(
        revived.hits() >= 4,
        "round robin sends it traffic again: {}",
        revived.hits()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_slow_upstreams_get_problem_json() {
    let be = Backend::start().await.expect("backend");
    let dead = free_port();
    let (port, admin) = (free_port(), free_port());
    let conf = serving(
        port,
        admin,
        &format!(
            r#"
[upstreams.gone]
targets = ["127.0.0.1:{dead}"]
health_check = false
[upstreams.slow]
targets = ["{be}"]
read_timeout = "200ms"
[[routes]]
name = "gone"
path_prefix = "/gone"
upstream = "gone"
[[routes]]
name = "slow"
path_prefix = "/slow"
upstream = "slow"
"#,
            be = be.addr
        ),
    );
    let _gw = start(&conf, port, admin).await;
    let r = get(port, "/gone", &[]).await.expect("req");
    assert_eq!(r.status, 502);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.json()["error_code"], "UPSTREAM_UNAVAILABLE");
    assert!(r.header("x-request-id").is_some());
    let started = std::time::Instant::now();
    let r = get(port, "/slow?ms=3000", &[]).await.expect("req");
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error_code"], "UPSTREAM_TIMEOUT");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "read_timeout applies"
    );
    assert!(
        metric_reaches(
            admin,
            "http_requests_total",
            &["route=\"gone\"", "status=\"502\""],
            1.0
        )
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_is_told_request_id_forwarded_for_and_proto() {
    let (_be, _gw, port, _admin) = with_backend(|be| {
        format!(
            r#"
[upstreams.app]
targets = ["{be}"]
[[routes]]
path_prefix = "/"
upstream = "app"
"#
        )
    })
    .await;
    let r = request_from(
        ip("127.0.0.7"),
        port,
        "GET",
        "/",
        &[
            ("x-forwarded-for", "198.51.100.1"),
            ("x-ratelimit-shadow-exceeded", "true"),
        ],
        "",
    )
    .await
    .expect("req");
    let seen = r.json();
    let h = &seen["headers"];
    assert_eq!(
        h["x-forwarded-for"], "198.51.100.1, 127.0.0.7",
        "the peer is appended"
    );
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(
        h["x-request-id"].as_str(),
        r.header("x-request-id"),
        "the same id both ways"
    );
    assert_eq!(r.header("x-request-id").map(str::len), Some(32));
    assert!(
        h.get("x-ratelimit-shadow-exceeded").is_none(),
        "a client cannot forge the marker"
    );
    // An unsafe client id is replaced.
    let r = get(port, "/", &[("x-request-id", "<script>")])
        .await
        .expect("req");
    assert_ne!(r.header("x-request-id"), Some("<script>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_passes_marks_and_counts() {
    let (_be, _gw, port, admin) = with_backend(|be| {
        format!(
            r#"
[upstreams.app]
targets = ["{be}"]
[[routes]]
path_prefix = "/"
upstream = "app"
limits = ["trial"]
[limits.trial]
key = "client_ip"
rate = "1/h"
burst = 2
shadow = true
"#
        )
    })
    .await;
    let mut marked = 0;
    for _ in 0..5 {
        let r = get(port, "/", &[]).await.expect("req");
        assert_eq!(r.status, 200, "shadow limits never refuse");
        assert!(
            r.header("x-ratelimit-shadow-exceeded").is_none(),
            "never told to the client"
        );
        marked += usize::from(r.json()["headers"]["x-ratelimit-shadow-exceeded"] == "true");
    }
    assert_eq!(marked, 3);
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_shadow_exceeded_total", &["limit=\"trial\""]),
        3.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge() {
    let (port, admin) = (free_port(), free_port());
    let conf = serving(
        port,
        admin,
        r#"
[[routes]]
path_prefix = "/"
respond = { status = 200, body = "over h2" }
"#,
    );
    let _gw = start(&conf, port, admin).await;
    let r = get_h2(port, "/").await.expect("h2 request");
    assert_eq!((r.status, r.body.as_str()), (200, "over h2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_keeps_the_old_config_when_the_new_one_is_bad() {
    let (port, admin) = (free_port(), free_port());
    let conf = |body: &str| {
        format!(
            r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
[[routes]]
path_prefix = "/"
respond = {{ status = 200, body = "{body}" }}
limits = ["per_ip"]
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 4
"#
        )
    };
    let gw = start(&conf("one"), port, admin).await;
    let admitted = std::sync::atomic::AtomicUsize::new(0);
    let fetch = || async {
        let r = get(port, "/", &[]).await.expect("req");
        if r.status == 200 {
            admitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        r
    };
    assert_eq!(fetch().await.body, "one");
    std::fs::write(&gw.config, conf("two")).expect("write");
    gw.signal(libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(5), || async {
            fetch().await.body == "two"
        })
        .await
    );
    // Limiter state survived the reload: the burst of 4 spans both configs.
    while fetch().await.status == 200 {}
    assert_eq!(admitted.load(std::sync::atomic::Ordering::SeqCst), 4);

    std::fs::write(&gw.config, "[server]\nthreads = \"many\"\n").expect("write");
    gw.signal(libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(
                &metrics(admin).await,
                "tollgate_config_reloads_total",
                &["result=\"error\""],
            ) == 1.0
        })
        .await
    );
    // The rejected file has no routes: had it been applied, this would be a 404.
    let r = get(port, "/", &[]).await.expect("req");
    assert_eq!(
        r.status, 429,
        "still serving the old config (its limit, spent above)"
    );
    assert!(
        gw.log_text().contains("server.threads"),
        "the log names the bad key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_within_two_seconds_and_sigterm_within_the_grace_period() {
    for (sig, limit) in [
        (libc::SIGINT, Duration::from_secs(2)),
        (libc::SIGTERM, Duration::from_secs(3)),
    ] {
        let (port, admin) = (free_port(), free_port());
        let conf = format!(
            r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
grace_period = "2s"
[[routes]]
path_prefix = "/"
respond = {{ status = 200 }}
"#
        );
        let mut gw = start(&conf, port, admin).await;
        gw.signal(sig);
        let took = gw.wait_exit(limit).await;
        assert!(
            took.is_some(),
            "signal {sig}: still running after {limit:?}:\n{}",
            gw.log_text()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_accepts_the_shipped_configs_and_names_every_problem() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("conf/tollgate.toml")];
    for e in std::fs::read_dir(root.join("conf/examples")).expect("conf/examples") {
        let path = e.expect("entry").path();
        if path.extension().is_some_and(|x| x == "toml") {
            files.push(path);
        }
    }
    for f in &files {
        let out = std::process::Command::new(BIN)
            .arg("check")
            .arg(f)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }

    let dir = temp_dir("check");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        r#"[server]
listen = ["127.0.0.1:1"]
workers = 2

[limits.per_ip]
key = "client_ip"
rate = "10/fortnight"

[limits.typo]
key = "cookie:session"
rate = "1/s"
scope = "global"

[[routes]]
path_prefix = "/"
upstream = "nowhere"
limits = ["per_ip", "missing"]
"#,
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .arg("check")
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let f = bad.display().to_string();
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    let want = [
        format!("{f}: server.workers: unknown key (line 3)"),
        format!("{f}: limits.per_ip.rate: \"10/fortnight\" is not a rate: write N/s, N/m, N/h or N/d, e.g. \"10/s\" (line 7)"),
        format!("{f}: limits.typo.key: unknown key source \"cookie:session\" (use client_ip, header:NAME, query:NAME, jwt:CLAIM, body:FIELD, user_agent, ip_ua, route, path, method or global) (line 10)"),
        format!("{f}: limits.typo.scope: scope \"global\" keeps state in Redis: add a [redis] section (url or cluster) (line 12)"),
        format!("{f}: routes[0].upstream: unknown upstream \"nowhere\" (defined: none) (line 16)"),
        format!("{f}: routes[0].limits[1]: unknown limit \"missing\" (defined: per_ip, typo) (line 17)"),
    ];
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        want.iter().map(String::as_str).collect::<Vec<_>>()
    );

    std::fs::write(&bad, "[server\nlisten = 1").expect("write");
    let out = std::process::Command::new(BIN)
        .arg("check")
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not valid TOML"));

    // `run` refuses a bad file with the same messages and a non-zero exit.
    std::fs::write(&bad, "[server]\nthreads = 0\n").expect("write");
    let out = std::process::Command::new(BIN)
        .args(["run", "--config"])
        .arg(&bad)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("server.threads: must be between 1 and 1024, got 0 (line 2)"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_requests_in_flight_then_exits_without_waiting_out_the_grace_period() {
    let (_be, gw, port, _admin) = with_backend(|be| {
        format!(
            r#"grace_period = "10s"
[upstreams.app]
targets = ["{be}"]
[[routes]]
path_prefix = "/"
upstream = "app"
"#
        )
    })
    .await;
    let mut gw = gw;
    let slow = tokio::spawn(async move { get(port, "/slow?ms=1000", &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.signal(libc::SIGTERM);
    let r = slow
        .await
        .expect("task")
        .expect("the request in flight completes");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("/slow"));
    let took = gw.wait_exit(Duration::from_secs(4)).await;
    assert!(
        took.is_some(),
        "exits once drained, long before the 10 s grace period:\n{}",
        gw.log_text()
    );
    assert!(gw.log_text().contains("drained"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_post_keeps_its_connection() {
    let (port, admin) = (free_port(), free_port());
    let conf = serving(
        port,
        admin,
        r#"
[[routes]]
path_prefix = "/login"
respond = { status = 200, body = "welcome" }
limits = ["login"]
[limits.login]
key = "client_ip"
rate = "1/h"
burst = 1
"#,
    );
    let _gw = start(&conf, port, admin).await;
    let form = "user=alice&password=".to_string() + &"x".repeat(4000);
    let replies = on_one_connection(
        port,
        &[
            ("POST", "/login", &form),
            ("POST", "/login", &form),
            ("POST", "/login", &form),
        ],
    )
    .await
    .expect("three requests on one connection");
    let codes: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(codes, [200, 429, 429]);
    assert_eq!(replies[1].header("connection"), Some("keep-alive"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_sources_split_and_skip_as_configured() {
    let (port, admin) = (free_port(), free_port());
    let conf = serving(
        port,
        admin,
        r#"
[[routes]]
name = "by-key"
path_prefix = "/key"
respond = { status = 200 }
limits = ["per_api_key"]
[[routes]]
name = "by-page"
path_prefix = "/page"
respond = { status = 200 }
limits = ["per_page_and_method"]
[limits.per_api_key]
key = "header:X-API-Key"
rate = "1/h"
burst = 2
[limits.per_page_and_method]
key = ["query:page", "method"]
rate = "1/h"
burst = 1
"#,
    );
    let _gw = start(&conf, port, admin).await;
    let status = |path: &'static str,
                  headers: Vec<(&'static str, &'static str)>,
                  method: &'static str| async move {
        request_from(ip("127.0.0.1"), port, method, path, &headers, "")
            .await
            .expect("req")
            .status
    };
    // Per API key: each key its own bucket; no key, not counted.
    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(status("/key", vec![("x-api-key", "alpha")], "GET").await);
    }
    assert_eq!(a, [200, 200, 429]);
    assert_eq!(
        status("/key", vec![("x-api-key", "beta")], "GET").await,
        200
    );
    for _ in 0..5 {
        assert_eq!(
            status("/key", vec![], "GET").await,
            200,
            "a request without the header is not counted"
        );
    }
    // Composite key: the decoded query value and the method together.
    assert_eq!(status("/page?page=A", vec![], "GET").await, 200);
    assert_eq!(
        status("/page?page=%41", vec![], "GET").await,
        429,
        "%41 is A: same key"
    );
    assert_eq!(
        status("/page?page=A", vec![], "POST").await,
        200,
        "another method, another key"
    );
    assert_eq!(status("/page?page=B", vec![], "GET").await, 200);
    assert_eq!(
        status("/page", vec![], "GET").await,
        200,
        "no page parameter: not counted"
    );
    assert_eq!(status("/page", vec![], "GET").await, 200);
}

/// An HTTP/1.1 upstream that answers every request on a connection with keep-alive, counts
/// the connections it accepted, and (with `close_after`) closes a connection that stays idle
/// that long, as upstreams with a short keep-alive timeout do.
async fn keepalive_upstream(
    close_after: Option<Duration>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let read = match close_after {
                        Some(d) => match tokio::time::timeout(d, s.read(&mut chunk)).await {
                            Ok(r) => r,
                            Err(_) => return, // idle too long: closed
                        },
                        None => s.read(&mut chunk).await,
                    };
                    match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, accepted)
}

fn pool_config(port: u16, admin: u16, upstream: u16) -> String {
    format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 1
[upstreams.app]
targets = ["127.0.0.1:{upstream}"]
health_check = false
[[routes]]
path_prefix = "/"
upstream = "app"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_and_one_the_upstream_closed_is_not() {
    // Reused: ten requests in a row over one upstream connection.
    let (up, accepted) = keepalive_upstream(None).await;
    let (port, admin) = (free_port(), free_port());
    let gw = start(&pool_config(port, admin, up), port, admin).await;
    for _ in 0..10 {
        assert_eq!(get(port, "/x", &[]).await.expect("GET").status, 200);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(gw);

    // An upstream that closes idle connections after 100 ms: the pooled connection it closed
    // is found closed when taken (or swept), never used, so no request fails.
    let (up, accepted) = keepalive_upstream(Some(Duration::from_millis(100))).await;
    let (port, admin) = (free_port(), free_port());
    let gw = start(&pool_config(port, admin, up), port, admin).await;
    for i in 0..4 {
        let r = get(port, "/y", &[]).await.expect("GET");
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 4);
    drop(gw);
}

/// An HTTP/1.1 upstream that keeps every request head it receives, byte for byte, and
/// answers each with 200 "ok".
async fn head_recording_upstream() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        kept.lock()
                            .expect("heads")
                            .push(String::from_utf8_lossy(&head).into_owned());
                        // Its own names in mixed case, as an upstream may write them.
                        let resp = b"HTTP/1.1 200 OK\r\nX-Backend-ID: 9\r\ncontent-TYPE: text/plain\r\nX-Up: c\r\nx-UP: d\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, heads)
}

/// Sends `head` as is on a new connection and returns the whole response (the head should
/// ask for `Connection: close`).
async fn raw_response(port: u16, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(head.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The names the upstream saw, in order, for the request headers a test sent (the gateway's
/// own X-Forwarded-* and X-Request-Id, and the hop-by-hop Connection, left out).
fn sent_names(head: &str) -> Vec<&str> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':').map(|(n, _)| n))
        .filter(|n| {
            let n = n.to_ascii_lowercase();
            !n.starts_with("x-forwarded-") && n != "x-request-id" && n != "connection"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_names_go_upstream_and_back_in_one_case_unless_the_case_is_preserved() {
    // Mixed spellings, a standard name in an odd case, and one name twice in two spellings:
    // both values must arrive, in order, in either mode. The same for the upstream's answer
    // on its way to the client.
    let head = "GET /case HTTP/1.1\r\nHost: case.test\r\nX-Custom-ID: 7\r\n\
                content-TYPE: text/plain\r\nX-Dup: a\r\nx-DUP: b\r\nConnection: close\r\n\r\n";
    for (preserve, want, want_back) in [
        (
            false,
            vec!["Host", "x-custom-id", "Content-Type", "x-dup", "x-dup"],
            ["x-backend-id", "Content-Type", "x-up", "x-up"],
        ),
        (
            true,
            vec!["Host", "X-Custom-ID", "content-TYPE", "X-Dup", "x-DUP"],
            ["X-Backend-ID", "content-TYPE", "X-Up", "x-UP"],
        ),
    ] {
        let (up, heads) = head_recording_upstream().await;
        let (port, admin) = (free_port(), free_port());
        let mut toml = pool_config(port, admin, up);
        toml = toml.replace(
            "threads = 1\n",
            &format!("threads = 1\npreserve_header_case = {preserve}\n"),
        );
        let gw = start(&toml, port, admin).await;
        let answer = raw_response(port, head).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        let back: Vec<&str> = answer
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':').map(|(n, _)| n))
            .filter(|n| want_back.iter().any(|w| w.eq_ignore_ascii_case(n)))
            .collect();
        assert_eq!(
            back, want_back,
            "preserve_header_case = {preserve}: {answer}"
        );
        let (c, d) = (answer.find(": c\r\n"), answer.find(": d\r\n"));
        assert!(c.is_some() && c < d, "both values, in order: {answer}");
        assert!(answer.contains(": 9\r\n") && answer.ends_with("\r\n\r\nok"));
        let got = heads.lock().expect("heads").clone();
        assert_eq!(got.len(), 1, "one request upstream: {got:?}");
        let mut names = sent_names(&got[0]);
        // Pingora may move Host; the order of the others is the client's.
        names.retain(|n| !n.eq_ignore_ascii_case("host"));
        let mut want = want;
        want.retain(|n| !n.eq_ignore_ascii_case("host"));
        assert_eq!(names, want, "preserve_header_case = {preserve}: {}", got[0]);
        let (a, b) = (got[0].find(": a\r\n"), got[0].find(": b\r\n"));
        assert!(a.is_some() && a < b, "both values, in order: {}", got[0]);
        assert!(got[0].contains(": 7\r\n") && got[0].contains(": text/plain\r\n"));
        drop(gw);
    }
}

/// The standard hop-by-hop fields never reach the upstream, in any case or repeated, whether
/// the head has one of them or all (vendor patch 0019 strips them only when one is there);
/// the fields beside them arrive, in both `preserve_header_case` modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_fields_never_reach_the_upstream() {
    let hop = [
        "Keep-Alive: timeout=5",
        "PROXY-CONNECTION: keep-alive",
        "Proxy-Authorization: Basic YTpi",
        "Proxy-Authenticate: Basic",
        "te: trailers",
        "Trailer: X-Sum",
        "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
        "keep-alive: again",
    ];
    for preserve in [false, true] {
        let (up, heads) = head_recording_upstream().await;
        let (port, admin) = (free_port(), free_port());
        let toml = pool_config(port, admin, up).replace(
            "threads = 1\n",
            &format!("threads = 1\npreserve_header_case = {preserve}\n"),
        );
        let gw = start(&toml, port, admin).await;
        for fields in [&hop[..1], &hop[..]] {
            let head = format!(
                "GET /hop HTTP/1.1\r\nHost: hop.test\r\nX-Before: 1\r\n{}\r\nX-After: 2\r\nConnection: close\r\n\r\n",
                fields.join("\r\n")
            );
            let answer = raw_response(port, &head).await;
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
            let got = heads
                .lock()
                .expect("heads")
                .pop()
                .expect("one request upstream");
            let lower = got.to_ascii_lowercase();
            for f in &hop {
                let name = f.split(':').next().unwrap_or_default().to_ascii_lowercase();
                assert!(
                    !lower.contains(&format!("\r\n{name}:")),
                    "{name} reached the upstream: {got}"
                );
            }
            assert!(
                lower.contains("\r\nx-before: 1\r\n") && lower.contains("\r\nx-after: 2\r\n"),
                "{got}"
            );
        }
        drop(gw);
    }
}

/// One HTTP/1 response read off a raw connection: the status, the fields in order (names
/// lower-cased) and the body, framed by Content-Length exactly (no body for a HEAD request or
/// a 204/304). None at the end of the stream.
async fn read_response(
    r: &mut tokio::io::BufReader<tokio::net::TcpStream>,
    head_request: bool,
) -> Option<(u16, Vec<(String, String)>, Vec<u8>)> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut fields = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).await.ok()?;
        let l = l.trim_end_matches("\r\n");
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').expect("a field line");
        fields.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = fields
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().expect("a length"));
    let mut body = vec![
        0;
        if head_request || status == 204 || status == 304 {
            0
        } else {
            len
        }
    ];
    r.read_exact(&mut body).await.ok()?;
    Some((status, fields, body))
}

/// A raw connection to `port` that has sent `bytes`, read through a buffer.
async fn sent_raw(port: u16, bytes: &[u8]) -> tokio::io::BufReader<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(bytes).await.expect("write");
    tokio::io::BufReader::new(s)
}

/// A read that fails the test rather than hanging it.
async fn within_5s<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("within 5 s")
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Edge answers over HTTP/1 are written in one piece by vendor patch 0012 (no header map):
/// one after the other on one connection, each must be framed exactly, carry every field once, keep
/// the connection as the client asked, and leave the next request's response intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_answers_on_http1_are_framed_exactly_and_keep_the_connection_as_asked() {
    use tokio::io::AsyncWriteExt;
    let (port, admin) = (free_port(), free_port());
    let conf = serving(
        port,
        admin,
        r#"legacy_headers = true
[[routes]]
path_prefix = "/r"
respond = { status = 200, body = "passed" }
limits = ["one"]
[[routes]]
path_prefix = "/empty"
respond = { status = 204, body = "ignored" }
[limits.one]
key = "client_ip"
rate = "1/h"
burst = 1
"#,
    );
    let _gw = start(&conf, port, admin).await;
    let mut r = sent_raw(port, b"").await;
    // One after the other on one kept-alive connection (Pingora does not pipeline): each
    // answer must be framed on its own, or the next response is read from the wrong place.
    let requests = [
        "GET /r HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /r HTTP/1.1\r\nHost: t\r\nX-Request-Id: client-id-1\r\n\r\n",
        "HEAD /r HTTP/1.1\r\nHost: t\r\n\r\n",
        "POST /r HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
        "GET /empty HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /r HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    ];
    let mut got = Vec::new();
    for req in requests {
        r.get_mut().write_all(req.as_bytes()).await.expect("write");
        let resp = within_5s(read_response(&mut r, req.starts_with("HEAD")))
            .await
            .unwrap_or_else(|| panic!("a response to {req:?}"));
        got.push(resp);
    }
    let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
    assert_eq!(statuses, [200, 429, 429, 429, 204, 404, 429]);
    assert_eq!(got[0].2, b"passed");

    for (i, (status, fields, body)) in got.iter().enumerate() {
        // Every answer carries its framing and its own fields exactly once.
        for name in [
            "content-length",
            "date",
            "connection",
            "x-request-id",
            "content-type",
        ] {
            if *status == 204 && name == "content-length" {
                // RFC 9110 8.6: a 204 carries no length.
                assert!(field(fields, name).is_empty(), "answer {i}: {fields:?}");
                continue;
            }
            assert_eq!(
                field(fields, name).len(),
                1,
                "answer {i}: {name} in {fields:?}"
            );
        }
        let want_conn = if i == 6 { "close" } else { "keep-alive" };
        assert_eq!(field(fields, "connection"), [want_conn], "answer {i}");
        if *status != 429 {
            continue;
        }
        // Written in one piece by the session (patch 0012), not from a header map: the
        // framing the session owns comes last, in this order.
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[names.len() - 3..],
            ["content-length", "date", "connection"],
            "answer {i}"
        );
        let id = field(fields, "x-request-id")[0];
        for (name, want) in [
            ("retry-after", None),
            ("cache-control", Some("no-store")),
            ("content-type", Some("application/problem+json")),
            ("ratelimit-policy", Some("\"one\";q=1;w=3600")),
            ("x-ratelimit-limit", Some("1")),
            ("x-ratelimit-remaining", Some("0")),
        ] {
            let v = field(fields, name);
            assert_eq!(v.len(), 1, "answer {i}: {name} once in {fields:?}");
            if let Some(want) = want {
                assert_eq!(v[0], want, "answer {i}: {name}");
            }
        }
        let wait: u64 = field(fields, "retry-after")[0].parse().expect("seconds");
        assert!(
            (3590..=3600).contains(&wait),
            "answer {i}: retry-after {wait}"
        );
        assert_eq!(
            field(fields, "ratelimit"),
            [format!("\"one\";r=0;t={wait}").as_str()],
            "answer {i}"
        );
        assert_eq!(
            field(fields, "x-ratelimit-reset"),
            [wait.to_string().as_str()]
        );
        let len: usize = field(fields, "content-length")[0].parse().expect("length");
        if i == 2 {
            // HEAD: the length of the body a GET would get, and no body.
            assert!(body.is_empty());
            assert_eq!(len, got[1].2.len() - "client-id-1".len() + id.len());
            continue;
        }
        assert_eq!(len, body.len(), "answer {i}");
        let v: serde_json::Value = serde_json::from_slice(body).expect("problem+json");
        assert_eq!(v["status"], 429);
        assert_eq!(v["error_code"], "RATE_LIMIT_EXCEEDED");
        assert_eq!(v["retry_after"], wait);
        assert_eq!(
            v["request_id"], id,
            "answer {i}: the body's id is the field's"
        );
    }
    assert_eq!(field(&got[1].1, "x-request-id"), ["client-id-1"]);
    // After `Connection: close` the gateway closes: nothing more arrives.
    assert!(within_5s(read_response(&mut r, false)).await.is_none());

    // HTTP/1.0 without keep-alive: the answer, then the end of the connection.
    let mut r = sent_raw(port, b"GET /r HTTP/1.0\r\nHost: t\r\n\r\n").await;
    let (status, fields, body) = within_5s(read_response(&mut r, false))
        .await
        .expect("an answer");
    assert_eq!(status, 429);
    assert_eq!(field(&fields, "connection"), ["close"]);
    assert!(!body.is_empty());
    assert!(
        within_5s(read_response(&mut r, false)).await.is_none(),
        "one answer, then closed"
    );

    // A body too large to drain (under the 1 MiB body cap, over the 64 KiB drain bound): the
    // answer says close, and the connection ends after it.
    let mut r = sent_raw(
        port,
        b"POST /r HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\npartial",
    )
    .await;
    let (status, fields, _) = within_5s(read_response(&mut r, false))
        .await
        .expect("an answer");
    assert_eq!(status, 429);
    assert_eq!(field(&fields, "connection"), ["close"]);
    assert!(within_5s(read_response(&mut r, false)).await.is_none());
}

/// An upstream that frames each request by its Content-Length or chunked body (names in any
/// case), records `METHOD PATH BODY` for each, and answers by path: `/up-close` with a
/// `CONNECTION: CLOSE` answer (and then keeps serving, so only the gateway's reading of that
/// field keeps it from reusing the connection), `/up-chunked` with a chunked one, anything
/// else with `cOnTeNt-LeNgTh: 2`. It counts the connections it accepted.
async fn framing_upstream() -> (
    u16,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (kept, count) = (seen.clone(), accepted.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One whole request in `buf`: its head and its body as framed.
                    let parsed = loop {
                        if let Some(r) = one_framed_request(&buf) {
                            break r;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let (used, line, body) = parsed;
                    buf.drain(..used);
                    let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                    kept.lock().expect("seen").push(format!("{line} {body}"));
                    let resp: &[u8] = match path.as_str() {
                        "/up-close" => b"HTTP/1.1 200 OK\r\nCONNECTION: CLOSE\r\ncontent-LENGTH: 2\r\n\r\nok",
                        "/up-chunked" => b"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                        _ => b"HTTP/1.1 200 OK\r\ncOnTeNt-LeNgTh: 2\r\n\r\nok",
                    };
                    if s.write_all(resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, seen, accepted)
}

/// The first request in `buf`, if it is all there: the bytes it took, its request line and
/// its body (de-chunked).
fn one_framed_request(buf: &[u8]) -> Option<(usize, String, String)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let field = |name: &str| {
        head.split("\r\n").find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let line = head.split("\r\n").next().unwrap_or_default().to_string();
    if field("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let (mut at, mut body) = (end, Vec::new());
        loop {
            let size_end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[at..size_end]).ok()?, 16).ok()?;
            let data = size_end + 2;
            if buf.len() < data + size + 2 {
                return None;
            }
            body.extend_from_slice(&buf[data..data + size]);
            at = data + size + 2;
            if size == 0 {
                return Some((at, line, String::from_utf8_lossy(&body).into_owned()));
            }
        }
    }
    let len: usize = field("content-length").map_or(0, |v| v.parse().unwrap_or(0));
    (buf.len() >= end + len).then(|| {
        let body = String::from_utf8_lossy(&buf[end..end + len]).into_owned();
        (end + len, line, body)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_and_connection_fields_are_honoured_in_any_spelling() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Pingora notes Content-Length, Transfer-Encoding, Connection and Keep-Alive as it reads
    // a head (vendor patch 0020) instead of looking each up: every spelling must frame and
    // keep or close exactly as the lookups did, both ways.
    let (up, seen, accepted) = framing_upstream().await;
    let (port, admin) = (free_port(), free_port());
    let gw = start(&pool_config(port, admin, up), port, admin).await;
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut r = tokio::io::BufReader::new(s);
    // One connection, one request after another: a body framed by an odd-case
    // Content-Length, one chunked under an upper-case Transfer-Encoding, and bodiless GETs
    // between them (Tollgate does not pipeline: bytes past a request close the connection).
    for req in [
        "POST /a HTTP/1.1\r\nHost: f.test\r\ncOnTeNt-LeNgTh: 5\r\n\r\nhello",
        "GET /b HTTP/1.1\r\nHost: f.test\r\n\r\n",
        "POST /c HTTP/1.1\r\nHost: f.test\r\nTRANSFER-encoding: chunked\r\n\r\n5\r\nworld\r\n0\r\n\r\n",
        "GET /d HTTP/1.1\r\nHost: f.test\r\n\r\n",
    ] {
        r.get_mut().write_all(req.as_bytes()).await.expect("write");
        let (status, _, body) = read_response(&mut r, false).await.expect("an answer");
        assert_eq!((status, &body[..]), (200, &b"ok"[..]), "{req}");
    }
    let got = seen.lock().expect("seen").clone();
    assert_eq!(
        got,
        [
            "POST /a HTTP/1.1 hello",
            "GET /b HTTP/1.1 ",
            "POST /c HTTP/1.1 world",
            "GET /d HTTP/1.1 "
        ]
    );
    // An upstream answer that closes in capitals is not pooled: the next request opens a
    // new upstream connection; one framed by `cOnTeNt-LeNgTh` is pooled.
    let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
    for path in ["/up-close", "/x", "/y"] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: f.test\r\n\r\n");
        r.get_mut().write_all(head.as_bytes()).await.expect("write");
        let (status, _, body) = read_response(&mut r, false).await.expect("an answer");
        assert_eq!((status, &body[..]), (200, &b"ok"[..]), "{path}");
    }
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        before + 1,
        "one new upstream connection after CONNECTION: CLOSE, none after that"
    );
    // A chunked upstream answer under TRANSFER-ENCODING: Chunked comes through whole.
    let chunked = raw_response(
        port,
        "GET /up-chunked HTTP/1.1\r\nHost: f.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 200 OK\r\n"), "{chunked}");
    assert!(
        chunked.contains("\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
        "{chunked}"
    );
    // CONNECTION: CLOSE from the client closes after its answer.
    let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    c.write_all(b"GET /e HTTP/1.1\r\nHost: f.test\r\nCONNECTION: CLOSE\r\n\r\n")
        .await
        .expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out))
        .await
        .expect("closed by the gateway")
        .expect("read");
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
    // HTTP/1.0 keeps its connection only when it asks, in any case.
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut r = tokio::io::BufReader::new(s);
    for _ in 0..2 {
        r.get_mut()
            .write_all(b"GET /g HTTP/1.0\r\nHost: f.test\r\nconnection: KEEP-ALIVE\r\n\r\n")
            .await
            .expect("write");
        let (status, _, _) = read_response(&mut r, false).await.expect("kept alive");
        assert_eq!(status, 200);
    }
    r.get_mut()
        .write_all(b"GET /h HTTP/1.0\r\nHost: f.test\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(read_response(&mut r, false).await.expect("answer").0, 200);
    assert!(
        within_5s(read_response(&mut r, false)).await.is_none(),
        "HTTP/1.0 without keep-alive is closed after its answer"
    );
    // Both framings at once: Transfer-Encoding wins (the upstream gets the chunked body) and
    // the connection is not kept (RFC 9112 6.1): closed after the answer, before any next
    // request is sent.
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut r = tokio::io::BufReader::new(s);
    r.get_mut()
        .write_all(b"POST /both HTTP/1.1\r\nHost: f.test\r\ncontent-length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
        .await
        .expect("write");
    let (status, fields, body) = within_5s(read_response(&mut r, false))
        .await
        .expect("an answer");
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    assert_eq!(field(&fields, "connection"), ["close"]);
    assert!(
        within_5s(read_response(&mut r, false)).await.is_none(),
        "closed after a head with both framings"
    );
    assert_eq!(
        seen.lock().expect("seen").last().map(String::as_str),
        Some("POST /both HTTP/1.1 hi")
    );
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_in_any_spelling_is_tunnelled_and_the_session_fields_keep_their_case() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An upstream that upgrades whatever asks (its 101 in capitals), then echoes.
    let up = upgrading_echo_upstream(
        b"HTTP/1.1 101 Switching Protocols\r\nUPGRADE: websocket\r\nCONNECTION: UPGRADE\r\n\r\n",
    )
    .await;
    for preserve in [false, true] {
        let (port, admin) = (free_port(), free_port());
        let toml = pool_config(port, admin, up).replace(
            "threads = 1\n",
            &format!("threads = 1\npreserve_header_case = {preserve}\n"),
        );
        let gw = start(&toml, port, admin).await;
        // Upgrade noted in an odd case (vendor patch 0021): the upgrade goes through.
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(b"GET /ws HTTP/1.1\r\nHost: u.test\r\nuPgRaDe: websocket\r\nCONNECTION: upgrade\r\n\r\n")
            .await
            .expect("write");
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.expect("101");
            head.push(b[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        s.write_all(b"ping").await.expect("write");
        let mut echo = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut echo))
            .await
            .expect("echoed in time")
            .expect("echo");
        assert_eq!(&echo, b"ping");
        // The Date and Connection the session writes keep the title case they had when
        // inserted by `header::DATE` (vendor patch 0021 inserts them by static names). Only
        // the `preserve = true` pass reads the case map; without it the writer titles
        // standard names itself.
        let answer = raw_response(
            port,
            "GET /plain HTTP/1.1\r\nHost: u.test\r\nConnection: close\r\n\r\n",
        )
        .await;
        let (date, conn) = ("\r\nDate: ", "\r\nConnection: close\r\n");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains(date) && answer.contains(conn), "{answer}");
        drop(gw);
    }
}
