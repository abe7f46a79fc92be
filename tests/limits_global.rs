//! End-to-end tests of global limits: the built `tollgate` binary, real redis-servers (and a real
//! 3-master cluster) spawned on free ports, real sockets. Limits are chosen so that no refill
//! happens during a test unless the test is about refill.

use std::path::Path;
use std::time::{Duration, Instant};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

async fn start(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(Path::new(BIN), toml, port, admin).await
}

fn server(port: u16, admin: u16) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\nthreads = 2\n"
    )
}

/// `[server]` and a `[redis]` section on `redis` with a generous budget (a debug build).
fn with_redis(port: u16, admin: u16, redis: &RedisServer) -> String {
    format!(
        "{}[redis]\nurl = \"{}\"\ntimeout = \"500ms\"\n",
        server(port, admin),
        redis.url()
    )
}

const ALGORITHMS: [&str; 6] = [
    "token_bucket",
    "gcra",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "leaky_bucket",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_moves_between_scopes_by_one_word() {
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let mut toml = server(port, admin);
    toml += &format!("[redis]\nurl = \"{}\"\ntimeout = \"500ms\"\n", redis.url());
    for alg in ALGORITHMS {
        for scope in ["local", "global"] {
            toml += &format!(
                r#"
[[routes]]
name = "{scope}-{alg}"
path_prefix = "/{scope}/{alg}"
respond = {{ status = 200, body = "ok" }}
limits = ["{scope}_{alg}"]
[limits.{scope}_{alg}]
key = "client_ip"
algorithm = "{alg}"
rate = "3/h"
scope = "{scope}"
"#
            );
            if alg == "leaky_bucket" {
                // Without free passes a leaky bucket holds queued requests for 20 min each.
                toml += "delay = 3\n";
            }
        }
    }
    let _gw = start(&toml, port, admin).await;
    for alg in ALGORITHMS {
        for scope in ["local", "global"] {
            let path = format!("/{scope}/{alg}");
            let mut c = Conn::open(port).await.expect("connect");
            for i in 0..3 {
                let r = c.send("GET", &path, &[], "").await.expect("request");
                assert_eq!(r.status, 200, "{path} request {i}");
                let want = format!("r={}", 2 - i);
                assert!(
                    r.header("ratelimit").is_some_and(|v| v.contains(&want)),
                    "{path}: {:?}",
                    r.header("ratelimit")
                );
            }
            let r = c.send("GET", &path, &[], "").await.expect("request");
            assert_eq!(r.status, 429, "{path}: the fourth is refused");
            assert_eq!(r.json()["error_code"], "RATE_LIMIT_EXCEEDED");
            let retry: u64 = r
                .header("retry-after")
                .and_then(|v| v.parse().ok())
                .expect("retry-after");
            assert!((1..=7200).contains(&retry), "{path}: retry-after {retry}");
        }
    }
    // The global ones wrote hash-tagged keys, each with a TTL.
    let keys = redis.cli(&["KEYS", "*"]);
    assert_eq!(keys.lines().count(), 6, "{keys}");
    for k in keys.lines() {
        assert!(
            k.starts_with("{tollgate:global_") && k.ends_with('}'),
            "{k}"
        );
        let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap_or(-3);
        assert!(ttl > 0, "{k}: PTTL {ttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_limit() {
    let redis = RedisServer::start().expect("redis-server");
    let conf = |port: u16, admin: u16| {
        format!(
            r#"{}
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["shared", "steady"]
[limits.shared]
key = "header:x-user"
rate = "1/h"
burst = 10
scope = "global"
[limits.steady]
key = "header:x-steady"
algorithm = "gcra"
rate = "20/s"
burst = 5
scope = "global"
"#,
            with_redis(port, admin, &redis)
        )
    };
    let (p1, a1, p2, a2) = (free_port(), free_port(), free_port(), free_port());
    let _g1 = start(&conf(p1, a1), p1, a1).await;
    let _g2 = start(&conf(p2, a2), p2, a2).await;

    // One burst, two doors: exactly 10 pass in total, whichever door they take.
    let mut admitted = 0;
    for i in 0..40 {
        let port = if i % 2 == 0 { p1 } else { p2 };
        let r = get(port, "/", &[("x-user", "alice")])
            .await
            .expect("request");
        admitted += (r.status == 200) as u32;
    }
    assert_eq!(admitted, 10);

    // A run at full speed from 8 clients on both gateways for 1.5 s: the total admitted is
    // burst + rate * t, as for one gateway (plus at most one per instance at the edges).
    let start_t = Instant::now();
    let run = Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for c in 0..8 {
        let port = if c % 2 == 0 { p1 } else { p2 };
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(port).await.expect("connect");
            let mut ok = 0u32;
            while start_t.elapsed() < run {
                let r = conn
                    .send("GET", "/", &[("x-steady", "k")], "")
                    .await
                    .expect("request");
                assert!(r.status == 200 || r.status == 429, "{}", r.status);
                ok += (r.status == 200) as u32;
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("client");
    }
    let secs = start_t.elapsed().as_secs_f64();
    let bound = 5.0 + 20.0 * secs + 2.0;
    assert!(
        (total as f64) <= bound,
        "{total} admitted in {secs:.2} s, bound {bound:.1}"
    );
    assert!(
        (total as f64) >= 5.0 + 20.0 * 1.5 * 0.8,
        "the limit admits its rate: {total} in {secs:.2} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_served_from_the_verdict_cache_until_their_reset() {
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[[routes]]
name = "hot"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["hot"]
[limits.hot]
key = "global"
algorithm = "gcra"
rate = "20/m"
burst = 1
scope = "global"
"#,
        with_redis(port, admin, &redis)
    );
    let _gw = start(&toml, port, admin).await;
    let mut c = Conn::open(port).await.expect("connect");
    assert_eq!(c.send("GET", "/", &[], "").await.expect("req").status, 200);
    let first_refusal = Instant::now();
    let r = c.send("GET", "/", &[], "").await.expect("req");
    assert_eq!(r.status, 429);
    let evalsha = redis.command_calls("evalsha");
    // One call per decision (plus one NOSCRIPT retry if a request beat the start-up probe's
    // SCRIPT LOAD).
    assert!((2..=3).contains(&evalsha), "{evalsha}");

    // 1000 more on 4 connections, all refused from memory.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(port).await.expect("connect");
            let mut retry_afters = Vec::new();
            for _ in 0..250 {
                let r = c.send("GET", "/", &[], "").await.expect("req");
                assert_eq!(r.status, 429);
                retry_afters.push(r.header("retry-after").unwrap_or("").to_string());
            }
            retry_afters
        }));
    }
    for t in tasks {
        for ra in t.await.expect("client") {
            let secs: u64 = ra.parse().expect("retry-after");
            assert!((1..=3).contains(&secs), "retry-after {secs}");
        }
    }
    assert!(
        first_refusal.elapsed() < Duration::from_secs(3),
        "the herd ran inside the window (too slow a machine for this check?)"
    );
    assert_eq!(
        redis.command_calls("evalsha"),
        evalsha,
        "the herd caused no EVALSHA"
    );
    let m = metrics(admin).await;
    assert!(metric(&m, "tollgate_verdict_cache_hits_total", &["limit=\"hot\""]) >= 1000.0);
    assert_eq!(
        metric(&m, "tollgate_verdict_cache_entries", &["limit=\"hot\""]),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"rate_limit\""]
        ),
        1001.0
    );

    // Right after the reset the key is admitted again (Redis asked again).
    let wait = Duration::from_secs(3).saturating_sub(first_refusal.elapsed());
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
    let r = c.send("GET", "/", &[], "").await.expect("req");
    assert_eq!(r.status, 200, "admitted after the reset");
    assert_eq!(redis.command_calls("evalsha"), evalsha + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_redis_degrades_as_configured_and_recovers() {
    let mut redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let be = Backend::start().await.expect("backend");
    let toml = format!(
        r#"{}
[redis]
url = "{}"
timeout = "50ms"
instances = 2
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "open"
path_prefix = "/open"
upstream = "app"
limits = ["open"]
[[routes]]
name = "closed"
path_prefix = "/closed"
upstream = "app"
limits = ["closed"]
[[routes]]
name = "local"
path_prefix = "/local"
upstream = "app"
limits = ["local"]
[limits.open]
key = "client_ip"
rate = "1/h"
burst = 1000
scope = "global"
on_error = "open"
[limits.closed]
key = "client_ip"
rate = "1/h"
burst = 1000
scope = "global"
on_error = "closed"
[limits.local]
key = "client_ip"
rate = "1/h"
burst = 6
scope = "global"
on_error = "local"
"#,
        server(port, admin),
        redis.url(),
        be.addr
    );
    let _gw = start(&toml, port, admin).await;
    for path in ["/open", "/closed", "/local"] {
        assert_eq!(
            get(port, path, &[]).await.expect("req").status,
            200,
            "{path}"
        );
    }
    let ready = get(admin, "/readyz", &[]).await.expect("readyz");
    assert!(ready.body.contains("redis: up"), "{}", ready.body);

    // Load on /open while Redis dies: every request is answered, none waits long.
    let load = tokio::spawn(async move {
        let mut c = Conn::open(port).await.expect("connect");
        let mut slowest = Duration::ZERO;
        let mut statuses = Vec::new();
        for _ in 0..300 {
            let t = Instant::now();
            let r = c.send("GET", "/open", &[], "").await.expect("request");
            slowest = slowest.max(t.elapsed());
            statuses.push(r.status);
        }
        (slowest, statuses)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    redis.stop();
    let (slowest, statuses) = load.await.expect("load");
    assert!(statuses.iter().all(|&s| s == 200), "open admits throughout");
    // The 50 ms budget plus a debug build's own time, loosely.
    assert!(slowest < Duration::from_millis(500), "slowest {slowest:?}");

    let r = get(port, "/closed", &[]).await.expect("req");
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error_code"], "RATE_LIMITER_UNAVAILABLE");
    assert_eq!(r.json()["limit"], "closed");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));

    // local: this instance's share of burst 6 over 2 instances is 3.
    let local: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(get(port, "/local", &[]).await.expect("req").status);
        }
        v
    };
    assert_eq!(local, vec![200, 200, 200, 429, 429, 429], "{local:?}");

    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(&metrics(admin).await, "tollgate_redis_up", &[]) == 0.0
        })
        .await,
        "tollgate_redis_up drops to 0"
    );
    let m = metrics(admin).await;
    assert!(metric(&m, "tollgate_redis_errors_total", &[]) > 0.0);
    assert!(metric(&m, "tollgate_redis_fallback_total", &["on_error=\"open\""]) > 0.0);
    assert!(
        metric(
            &m,
            "tollgate_redis_fallback_total",
            &["on_error=\"closed\""]
        ) > 0.0
    );
    assert!(metric(&m, "tollgate_redis_latency_seconds_count", &[]) > 0.0);
    let ready = get(admin, "/readyz", &[]).await.expect("readyz");
    assert_eq!(
        ready.status, 200,
        "Redis away does not make the instance unready"
    );
    assert!(ready.body.contains("redis: down"), "{}", ready.body);
    assert_eq!(
        get(admin, "/healthz", &[]).await.expect("healthz").status,
        200
    );

    // Redis back (empty: no scripts, no keys): global limiting resumes within seconds.
    redis.restart().expect("restart");
    assert!(
        eventually(Duration::from_secs(10), || async {
            get(port, "/closed", &[])
                .await
                .is_ok_and(|r| r.status == 200)
        })
        .await,
        "global limiting resumes"
    );
    assert!(redis.command_calls("evalsha") > 0);
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(&metrics(admin).await, "tollgate_redis_up", &[]) == 1.0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_holds_many_keys_across_its_masters() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let (port, admin) = (free_port(), free_port());
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let toml = format!(
        r#"{}
[redis]
cluster = [{}]
timeout = "1s"
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["per_user"]
[limits.per_user]
key = "header:x-user"
algorithm = "sliding_window"
rate = "2/h"
scope = "global"
"#,
        server(port, admin),
        nodes.join(", ")
    );
    let _gw = start(&toml, port, admin).await;
    let mut c = Conn::open(port).await.expect("connect");
    let mut admitted = 0;
    for u in 0..60 {
        let user = format!("user-{u}");
        for _ in 0..3 {
            let r = c
                .send("GET", "/", &[("x-user", &user)], "")
                .await
                .expect("req");
            assert!(
                r.status == 200 || r.status == 429,
                "{}: {}",
                r.status,
                r.body
            );
            admitted += (r.status == 200) as u32;
        }
    }
    assert_eq!(admitted, 120, "60 users x 2");
    let counts = cluster.key_counts();
    assert_eq!(counts.iter().sum::<u64>(), 60, "{counts:?}");
    assert!(
        counts.iter().all(|&n| n > 0),
        "spread over the masters: {counts:?}"
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_redis_errors_total", &[]),
        0.0,
        "no CROSSSLOT, no error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaky_bucket_holds_queued_requests_instead_of_refusing() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[[routes]]
name = "q"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["q"]
[limits.q]
key = "global"
algorithm = "leaky_bucket"
rate = "5/s"
burst = 4
"#,
        server(port, admin)
    );
    let _gw = start(&toml, port, admin).await;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..5 {
        tasks.push(tokio::spawn(async move {
            let r = get(port, "/", &[]).await.expect("req");
            (r.status, t0.elapsed())
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.expect("client"));
    }
    done.sort_by_key(|d| d.1);
    let statuses: Vec<u16> = done.iter().map(|d| d.0).collect();
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        4,
        "{done:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 429).count(),
        1,
        "{done:?}"
    );
    // The 4 admitted leave 200 ms apart: the last one about 600 ms after the first.
    let admitted: Vec<Duration> = done.iter().filter(|d| d.0 == 200).map(|d| d.1).collect();
    let spread = admitted[3] - admitted[0];
    assert!(
        spread >= Duration::from_millis(550) && spread < Duration::from_millis(1500),
        "{done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_example_holds_across_two_gateways() {
    let redis = RedisServer::start().expect("redis-server");
    let be = Backend::start().await.expect("backend");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let example = std::fs::read_to_string(root.join("conf/examples/saas-api.toml"))
        .expect("conf/examples/saas-api.toml");
    let conf = |port: u16, admin: u16| {
        let swaps = [
            (
                "listen = [\"0.0.0.0:8080\"]",
                format!("listen = [\"127.0.0.1:{port}\"]"),
            ),
            (
                "admin = \"127.0.0.1:9901\"",
                format!("admin = \"127.0.0.1:{admin}\""),
            ),
            (
                "url = \"redis://127.0.0.1:6379\"",
                format!("url = \"{}\"", redis.url()),
            ),
            (
                "targets = [\"127.0.0.1:3000\", \"127.0.0.1:3001\"]",
                format!("targets = [\"{}\"]", be.addr),
            ),
            (
                "targets = [\"127.0.0.1:3100\"]",
                format!("targets = [\"{}\"]", be.addr),
            ),
            (
                "public_keys = [\"keys/auth-example-public.pem\"]",
                format!(
                    "public_keys = [\"{}\"]",
                    root.join("conf/examples/keys/auth-example-public.pem")
                        .display()
                ),
            ),
        ];
        let mut t = example.clone();
        for (from, to) in swaps {
            assert!(t.contains(from), "the example no longer has {from}");
            t = t.replace(from, &to);
        }
        t
    };
    let (p1, a1, p2, a2) = (free_port(), free_port(), free_port(), free_port());
    let _g1 = start(&conf(p1, a1), p1, a1).await;
    let _g2 = start(&conf(p2, a2), p2, a2).await;
    let ip = |n: u8| std::net::IpAddr::from([127, 0, 0, n]);

    // Password reset: 3 per hour per client IP, fleet-wide (sliding log in Redis).
    let mut codes = Vec::new();
    for i in 0..6 {
        let port = if i % 2 == 0 { p1 } else { p2 };
        let r = request_from(ip(7), port, "POST", "/api/v1/auth/password-reset", &[], "")
            .await
            .expect("request");
        codes.push(r.status);
        if r.status == 429 {
            assert_eq!(r.json()["limit"], "password_reset");
            let policy = r.header("ratelimit-policy").unwrap_or("");
            for l in ["\"system\"", "\"per_ip\"", "\"password_reset\""] {
                assert!(policy.contains(l), "{policy}");
            }
        }
    }
    assert_eq!(codes, vec![200, 200, 200, 429, 429, 429]);

    // Credential stuffing on one account from 12 addresses through both gateways, every
    // attempt a failed login: the account's global limit (burst 10) stops it with a
    // challenge, whichever gateway and address.
    let mut failed = 0;
    for n in 0..12u8 {
        let port = if n % 2 == 0 { p1 } else { p2 };
        let r = request_from(
            ip(20 + n),
            port,
            "POST",
            "/api/v1/auth/login",
            &[
                ("content-type", "application/json"),
                ("x-want-status", "401"),
            ],
            r#"{"username": "alice@example.com", "password": "guess"}"#,
        )
        .await
        .expect("request");
        if r.status == 401 {
            failed += 1;
        } else {
            let j = r.json();
            assert_eq!(
                (r.status, j["limit"].as_str(), j["error_code"].as_str()),
                (429, Some("login_target"), Some("CHALLENGE_REQUIRED"))
            );
            assert_eq!(j["challenge_url"], "https://example.com/challenge");
        }
    }
    assert_eq!(failed, 10);
    // Its owner's successful logins never count: twelve in a row pass.
    for n in 0..12u8 {
        let r = request_from(
            ip(60 + n),
            if n % 2 == 0 { p1 } else { p2 },
            "POST",
            "/api/v1/auth/login",
            &[("content-type", "application/json")],
            r#"{"username": "carol@example.com", "password": "right"}"#,
        )
        .await
        .expect("request");
        assert_eq!(r.status, 200);
    }
    // Another account is untouched.
    let r = request_from(
        ip(40),
        p1,
        "POST",
        "/api/v1/auth/login",
        &[("content-type", "application/json")],
        r#"{"username": "bob@example.com", "password": "right"}"#,
    )
    .await
    .expect("request");
    assert_eq!(r.status, 200);
    // Identities: a token the example's issuer did not sign is refused on the routes keyed by
    // tenant and user, and never looked at on the login route.
    let forged = jwt(
        "RS256",
        &std::fs::read(root.join("tests/fixtures/jwt/rs256-private.pem")).expect("test key"),
        &serde_json::json!({"sub": "eve", "tenant": "t1", "exp": unix_now() + 600,
            "iss": "https://auth.example.com", "aud": "api.example.com"}),
    );
    let bearer = format!("Bearer {forged}");
    let r = request_from(
        ip(50),
        p1,
        "POST",
        "/api/v1/search",
        &[("authorization", &bearer)],
        "{}",
    )
    .await
    .expect("request");
    assert_eq!(
        (r.status, r.json()["error_code"].as_str()),
        (401, Some("INVALID_TOKEN"))
    );
    // Redis holds only hashes: no address or account name in clear.
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(
        !keys.contains("alice") && !keys.contains("127.0.0"),
        "{keys}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_by_one_global_limit_consumes_nothing_from_the_others() {
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[[routes]]
name = "both"
path_prefix = "/both"
respond = {{ status = 200, body = "ok" }}
limits = ["local_ip", "per_user", "tight"]
[[routes]]
name = "user"
path_prefix = "/user"
respond = {{ status = 200, body = "ok" }}
limits = ["per_user"]
[[routes]]
name = "ip"
path_prefix = "/ip"
respond = {{ status = 200, body = "ok" }}
limits = ["local_ip"]
[limits.local_ip]
key = "client_ip"
rate = "1/h"
burst = 10
[limits.per_user]
key = "header:x-user"
rate = "1/h"
burst = 5
scope = "global"
[limits.tight]
key = "global"
algorithm = "fixed_window"
rate = "2/h"
scope = "global"
"#,
        with_redis(port, admin, &redis)
    );
    let _gw = start(&toml, port, admin).await;
    let user = [("x-user", "u1")];
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(get(port, "/both", &user).await.expect("req").status);
    }
    // "tight" admits 2. The third is asked of Redis together with per_user (one round trip),
    // which took a unit: it goes back. The fourth and fifth meet tight's refusal in the verdict
    // cache, so per_user is not asked at all.
    assert_eq!(codes, vec![200, 200, 429, 429, 429]);
    // The refunds run in the background, right after each answer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut more = 0;
    for _ in 0..10 {
        more += (get(port, "/user", &user).await.expect("req").status == 200) as u32;
    }
    assert_eq!(more, 3, "per_user spent 2 of 5, not 5");
    let mut ip = 0;
    for _ in 0..20 {
        ip += (get(port, "/ip", &[]).await.expect("req").status == 200) as u32;
    }
    assert_eq!(ip, 8, "the local limit spent 2 of 10, not 5");
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_redis_calls_total", &["op=\"refund\""]),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_verdict_cache_hits_total",
            &["limit=\"tight\""]
        ),
        2.0
    );
}

/// A limit whose Redis call fails on its own (here its key holds a value of another type, as
/// a stray write or a key collision would leave it) falls to its on_error on every request,
/// and the reason is logged once for the limit, not once per request; the breaker stays
/// closed and the other limits are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_fails_on_its_own_is_logged_once_per_limit() {
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[[routes]]
name = "broken"
path_prefix = "/broken"
respond = {{ status = 200, body = "ok" }}
limits = ["broken"]
[[routes]]
name = "fine"
path_prefix = "/fine"
respond = {{ status = 200, body = "ok" }}
limits = ["fine"]
[limits.broken]
key = "client_ip"
algorithm = "gcra"
rate = "100/h"
scope = "global"
on_error = "closed"
[limits.fine]
key = "client_ip"
rate = "100/h"
scope = "global"
on_error = "closed"
"#,
        with_redis(port, admin, &redis)
    );
    let mut gw = start(&toml, port, admin).await;
    assert_eq!(get(port, "/broken", &[]).await.expect("get").status, 200);
    let keys = redis.cli(&["KEYS", "{tollgate:broken:*"]);
    let k = keys
        .lines()
        .next()
        .expect("the limit's key")
        .trim()
        .to_string();
    redis.cli(&["DEL", &k]);
    redis.cli(&["HSET", &k, "not", "a TAT"]);
    for _ in 0..20 {
        let r = get(port, "/broken", &[]).await.expect("get");
        assert_eq!(r.status, 503, "on_error = closed: {}", r.body);
        assert_eq!(get(port, "/fine", &[]).await.expect("get").status, 200);
    }
    assert!(
        gw.wait_log("global_limit_call_failed", Duration::from_secs(2))
            .await
    );
    let log = gw.log_text();
    assert_eq!(log.matches("global_limit_call_failed").count(), 1, "{log}");
    assert!(log.contains("WRONGTYPE"), "{log}");
    let m = metrics(admin).await;
    assert_eq!(metric(&m, "tollgate_redis_up", &[]), 1.0);
}

/// `sync = "lease"` on three gateways: a hot key is decided from leases with almost no Redis
/// call; the fleet stays within burst + rate·t + instances × lease_max; unspent slices go back
/// to Redis, so over a whole run a key that never refills admits exactly its burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_with_leases_stay_within_their_bound_and_lose_nothing() {
    let redis = RedisServer::start().expect("redis-server");
    let conf = |port: u16, admin: u16| {
        format!(
            r#"{}instances = 3
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["hot", "steady", "hourly"]
[limits.hot]
key = "header:x-hot"
algorithm = "gcra"
rate = "1000000/s"
burst = 1000000
scope = "global"
sync = "lease"
[limits.steady]
key = "header:x-steady"
rate = "50/s"
burst = 60
scope = "global"
sync = "lease"
[limits.hourly]
key = "header:x-hourly"
rate = "1/h"
burst = 100
scope = "global"
sync = "lease"
lease_max = 20
"#,
            with_redis(port, admin, &redis)
        )
    };
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let mut gateways = Vec::new();
    for &(p, a) in &ports {
        gateways.push(start(&conf(p, a), p, a).await);
    }
    // Clients hammer `header` on every gateway (two each) for `run`: admitted, refused.
    let hammer = |header: &'static str, run: Duration| {
        let ports = ports.clone();
        async move {
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for c in 0..6 {
                let port = ports[c % 3].0;
                tasks.push(tokio::spawn(async move {
                    let mut conn = Conn::open(port).await.expect("connect");
                    let (mut ok, mut no) = (0u64, 0u64);
                    while t0.elapsed() < run {
                        let r = conn
                            .send("GET", "/", &[(header, "k")], "")
                            .await
                            .expect("request");
                        assert!(r.status == 200 || r.status == 429, "{}", r.status);
                        if r.status == 200 {
                            ok += 1
                        } else {
                            no += 1
                        }
                    }
                    (ok, no)
                }));
            }
            let mut total = (0, 0);
            for t in tasks {
                let (ok, no) = t.await.expect("client");
                total = (total.0 + ok, total.1 + no);
            }
            (total.0, total.1, t0.elapsed().as_secs_f64())
        }
    };
    let sum = |name: &'static str, labels: &'static [&'static str]| {
        let ports = ports.clone();
        async move {
            let mut n = 0.0;
            for &(_, a) in &ports {
                n += metric(&metrics(a).await, name, labels);
            }
            n
        }
    };

    // A hot key never refused: almost every decision is local.
    let (ok, no, _) = hammer("x-hot", Duration::from_millis(1500)).await;
    assert_eq!(no, 0);
    let calls = sum("tollgate_redis_calls_total", &["op=\"lease\""]).await;
    let local = sum("tollgate_lease_decisions_total", &["limit=\"hot\""]).await;
    assert!(
        calls / ok as f64 <= 0.05,
        "{calls} Redis calls for {ok} admitted ({local} from leases)"
    );
    assert_eq!(
        sum("tollgate_redis_calls_total", &["op=\"acquire\""]).await,
        0.0
    );

    // A key at its rate: the fleet admits at most burst + rate·t + 3 × lease_max (60/6 = 10).
    let (ok, no, secs) = hammer("x-steady", Duration::from_millis(1500)).await;
    let bound = 60.0 + 50.0 * secs + 3.0 * 10.0;
    assert!(
        no > 0 && (ok as f64) <= bound,
        "{ok} admitted in {secs:.2} s, bound {bound:.1}"
    );
    assert!(ok >= 60, "the burst at least: {ok}");

    // A key that never refills: three rounds, each followed by the slices' ttl (1 s), so the
    // units held unspent go back; then one gateway alone takes the rest. Exactly the burst.
    // First one gateway alone, four requests in a row: slices of 1, 2 (one left, spent by the
    // third) and 4, of which 3 are left and go back when the slice ends.
    let mut admitted = 0;
    for _ in 0..4 {
        let r = get(ports[0].0, "/", &[("x-hourly", "k")])
            .await
            .expect("request");
        assert_eq!(r.status, 200);
        admitted += 1;
    }
    tokio::time::sleep(Duration::from_millis(1400)).await;
    let returned = metric(
        &metrics(ports[0].1).await,
        "tollgate_lease_returned_units_total",
        &["limit=\"hourly\""],
    );
    assert_eq!(returned, 3.0);
    for _ in 0..3 {
        let (ok, _, _) = hammer("x-hourly", Duration::from_millis(100)).await;
        admitted += ok;
        tokio::time::sleep(Duration::from_millis(1400)).await;
    }
    loop {
        let r = get(ports[0].0, "/", &[("x-hourly", "k")])
            .await
            .expect("request");
        if r.status != 200 {
            break;
        }
        admitted += 1;
    }
    assert_eq!(admitted, 100, "the burst, no more, no less");
    drop(gateways);
}

/// Three gateways started cold against Redis with `on_error = "open"` and hammered at once, as
/// a rollout does once /readyz says 200: connections, the scripts and the first decisions are
/// ready by then, so nothing falls back and the fleet admits within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_cold_gateways_hammered_at_once_stay_within_the_bound() {
    let redis = RedisServer::start().expect("redis-server");
    let conf = |port: u16, admin: u16| {
        format!(
            r#"{}
[redis]
url = "{}"
timeout = "100ms"
on_error = "open"
instances = 3
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["fleet"]
[limits.fleet]
key = "global"
algorithm = "gcra"
rate = "100/s"
burst = 100
scope = "global"
"#,
            server(port, admin),
            redis.url()
        )
    };
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let (c0, c1, c2) = (
        conf(ports[0].0, ports[0].1),
        conf(ports[1].0, ports[1].1),
        conf(ports[2].0, ports[2].1),
    );
    let (g0, g1, g2) = tokio::join!(
        start(&c0, ports[0].0, ports[0].1),
        start(&c1, ports[1].0, ports[1].1),
        start(&c2, ports[2].0, ports[2].1),
    );
    for &(_, admin) in &ports {
        assert!(
            eventually(Duration::from_secs(5), || async move {
                get(admin, "/readyz", &[])
                    .await
                    .is_ok_and(|r| r.status == 200)
            })
            .await,
            "ready"
        );
    }
    let t0 = Instant::now();
    let run = Duration::from_millis(1000);
    let mut tasks = Vec::new();
    for c in 0..6 {
        let port = ports[c % 3].0;
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(port).await.expect("connect");
            let mut ok = 0u64;
            while t0.elapsed() < run {
                let r = conn.send("GET", "/", &[], "").await.expect("request");
                ok += (r.status == 200) as u64;
            }
            ok
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.expect("client");
    }
    let secs = t0.elapsed().as_secs_f64();
    let bound = 100.0 + 100.0 * secs + 3.0;
    let mut fallbacks = 0.0;
    for &(_, admin) in &ports {
        fallbacks += metric(&metrics(admin).await, "tollgate_redis_fallback_total", &[]);
    }
    assert_eq!(fallbacks, 0.0, "no decision fell back to on_error");
    assert!(
        (admitted as f64) <= bound,
        "{admitted} admitted in {secs:.2} s, bound {bound:.1}"
    );
    drop((g0, g1, g2));
}
