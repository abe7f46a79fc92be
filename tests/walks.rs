//! Hostile tests of the walks around features (issue 25): rewrites that smuggle query keys or
//! climb out of their template, a key flood against global limits, concurrency slots held by
//! slow uploads. Each test runs the issue's config and the exact request it names.

use std::path::Path;
use std::process::Command;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The key flood takes every core of this machine for seconds: the tests that time things
/// (a slot's deadline, an upload's pace) do not run beside it.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Item 1 and 2: a rewrite's output is held to a client's rules, and keys read what the
/// upstream reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_cannot_smuggle_query_keys_or_climb_past_deny_rules() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
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

# Another spelling of /admin in the template: still seen.
[[routes]]
name = "spelled"
path_prefix = "/spelled"
rewrite = { regex = "^/spelled/(.*)", replace = "//%61dmin/$1" }
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
    assert!(err.contains("routes[3].rewrite"), "{err}");
}

/// Item 3, end to end: three gateways on one Redis, 32 connections per gateway sending a new
/// key on every request, while a client hammers one exhausted key on an exact and on a leased
/// limit, both `on_error = "open"` (the old default). The exhausted key stays within its
/// stated bound, and no gateway's breaker opens while Redis answers PING promptly.
/// `FLOOD_SECS` sets the flood's length (5 s in `make test`; the issue's figure is 15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_fresh_keys_cannot_open_a_global_limit() {
    let _alone = ONE_AT_A_TIME.lock().await;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let redis = RedisServer::start().expect("redis-server");
    let be = Backend::start().await.expect("backend");
    let secs: u64 = std::env::var("FLOOD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let budget = std::env::var("FLOOD_BUDGET").unwrap_or_else(|_| "3ms".into());
    let conf = |port: u16, admin: u16| {
        serving_one_thread(
            port,
            admin,
            &format!(
                r#"
[redis]
url = "{}"
instances = 3
# A tight budget, so that this machine's own load makes calls late (the issue's figures came
# from wrk against release builds, where the default 20 ms met the same).
timeout = "{}"
[upstreams.app]
targets = ["{}"]
health_check = false
[[routes]]
name = "exact"
path_prefix = "/exact"
upstream = "app"
limits = ["exact"]
[[routes]]
name = "lease"
path_prefix = "/lease"
upstream = "app"
limits = ["lease"]
[limits.exact]
key = "header:x-key"
rate = "10/s"
burst = 20
scope = "global"
on_error = "open"
[limits.lease]
key = "header:x-key"
rate = "10/s"
burst = 20
scope = "global"
sync = "lease"
lease_max = 5
on_error = "open"
"#,
                redis.url(),
                budget,
                be.addr
            ),
        )
    };
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let mut gateways = Vec::new();
    for &(p, a) in &ports {
        gateways.push(running(Path::new(BIN), &conf(p, a), p, a).await);
    }
    // The victim's key, exhausted on both limits before the flood.
    let t0 = Instant::now();
    let admitted: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let victim = |port: u16, path: &'static str, slot: usize, until: Instant| {
        let admitted = admitted.clone();
        tokio::spawn(async move {
            let mut c = Conn::open(port).await.expect("connect");
            while Instant::now() < until {
                let r = c
                    .send("GET", path, &[("x-key", "victim")], "")
                    .await
                    .expect("victim request");
                if r.status == 200 {
                    admitted[slot].fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let warm = Instant::now() + Duration::from_millis(500);
    for (i, path) in ["/exact", "/lease"].into_iter().enumerate() {
        victim(ports[0].0, path, i, warm).await.expect("warm-up");
    }
    let calls_before = redis.command_calls("evalsha");
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let fresh = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (g, &(port, _)) in ports.iter().enumerate() {
        for c in 0..32u64 {
            let fresh = fresh.clone();
            tasks.push(tokio::spawn(async move {
                let Ok(mut conn) = Conn::open(port).await else {
                    return;
                };
                let mut n = 0u64;
                while Instant::now() < until {
                    let key = format!("flood-{g}-{c}-{n}");
                    let path = if n.is_multiple_of(2) {
                        "/exact"
                    } else {
                        "/lease"
                    };
                    n += 1;
                    if conn
                        .send("GET", path, &[("x-key", &key)], "")
                        .await
                        .is_err()
                    {
                        break;
                    }
                    fresh.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    // The victim on every gateway, both limits.
    for &(port, _) in &ports {
        tasks.push(victim(port, "/exact", 0, until));
        tasks.push(victim(port, "/lease", 1, until));
    }
    // Redis answers PING promptly throughout (its own health, apart from the gateways').
    let redis_port: u16 = redis
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("redis port");
    let pinger = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", redis_port))
            .await
            .expect("redis");
        let mut worst = Duration::ZERO;
        let mut buf = [0u8; 16];
        while Instant::now() < until {
            let t = Instant::now();
            s.write_all(b"PING\r\n").await.expect("ping");
            let n = s.read(&mut buf).await.expect("pong");
            assert_eq!(&buf[..n], b"+PONG\r\n");
            worst = worst.max(t.elapsed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        worst
    });
    for t in tasks {
        let _ = t.await;
    }
    let worst_ping = pinger.await.expect("pinger");
    let elapsed = t0.elapsed().as_secs_f64();
    let flood_secs = start.elapsed().as_secs_f64();
    let calls = redis.command_calls("evalsha") - calls_before;
    let exact = admitted[0].load(Ordering::Relaxed) as f64;
    let leased = admitted[1].load(Ordering::Relaxed) as f64;
    // From the victim's first request: burst + rate x time (+1 for the unit refilling as the
    // clock is read); a lease adds at most instances x lease_max.
    let bound = 20.0 + 10.0 * elapsed + 1.0;
    let lease_bound = bound + 3.0 * 5.0;
    let mut opened = 0.0;
    let mut late = 0.0;
    let mut shed = 0.0;
    for &(_, admin) in &ports {
        let m = metrics(admin).await;
        opened += metric(
            &m,
            "tollgate_redis_errors_total",
            &["kind=\"circuit_open\""],
        );
        late += metric(&m, "tollgate_redis_errors_total", &["kind=\"late\""]);
        shed += metric(&m, "tollgate_redis_errors_total", &["kind=\"saturated\""]);
    }
    let logs: String = gateways.iter().map(|g| g.log_text()).collect();
    eprintln!(
        "flood {flood_secs:.1} s: {} fresh-key requests ({:.0}/s), Redis {:.0} calls/s; victim exact {exact} (bound {bound:.0}), leased {leased} (bound {lease_bound:.0}); worst PING {worst_ping:?}; calls refused by an open breaker {opened}, late {late}, shed {shed}",
        fresh.load(Ordering::Relaxed),
        fresh.load(Ordering::Relaxed) as f64 / flood_secs,
        calls as f64 / flood_secs,
    );
    assert!(fresh.load(Ordering::Relaxed) > 0, "the flood ran");
    assert!(exact <= bound, "exact: {exact} admitted, bound {bound:.1}");
    assert!(
        leased <= lease_bound,
        "leased: {leased} admitted, bound {lease_bound:.1}"
    );
    if worst_ping < Duration::from_millis(20) {
        assert!(
            !logs.contains("redis_down"),
            "a breaker opened while Redis answered PING within {worst_ping:?}"
        );
        assert_eq!(opened, 0.0, "no call met an open breaker");
    }
}

/// Item 5: two uploads just over `min_body_rate` hold both slots of a concurrency limit; each
/// is cut with 408 at `slot_timeout`, its slot back, and the key's other requests pass again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_holds_a_concurrency_slot_no_longer_than_slot_timeout() {
    let _alone = ONE_AT_A_TIME.lock().await;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]
[limits.inflight]
key = "client_ip"
algorithm = "concurrency"
burst = 2
slot_timeout = "3s"
# Uploads this large are allowed here (the default body cap is 1 MiB).
[[routes]]
name = "upload"
path_prefix = "/"
upstream = "app"
limits = ["inflight"]
max_body_bytes = 0
"#,
            be = be.addr
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    // 10 MB announced, sent at 1.5 KB/s (just over min_body_rate = 1024).
    let upload = || async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n")
            .await
            .expect("head");
        let start = Instant::now();
        let chunk = vec![b'a'; 150];
        let mut buf = vec![0u8; 4096];
        loop {
            if s.write_all(&chunk).await.is_err() {
                break;
            }
            // Answered (or closed) yet?
            match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (String::new(), start.elapsed()),
                Ok(Ok(n)) => {
                    return (
                        String::from_utf8_lossy(&buf[..n]).into_owned(),
                        start.elapsed(),
                    )
                }
                Err(_) => {}
            }
            if start.elapsed() > Duration::from_secs(15) {
                return ("still uploading".into(), start.elapsed());
            }
        }
        (String::new(), start.elapsed())
    };
    let a = tokio::spawn(upload());
    let b = tokio::spawn(upload());
    // Both uploads admitted (their heads reached the upstream) before the key asks again: a
    // third request sent earlier could take a slot first and leave an upload refused.
    assert!(
        eventually(Duration::from_secs(3), || async { be.hits() >= 2 }).await,
        "both uploads reach the upstream"
    );
    // Both slots held: a third request on the key is refused while the uploads run.
    assert_eq!(
        get(port, "/other", &[]).await.expect("req").status,
        429,
        "two uploads hold both slots"
    );
    let (ra, ta) = a.await.expect("upload a");
    let (rb, tb) = b.await.expect("upload b");
    for (r, t) in [(&ra, ta), (&rb, tb)] {
        assert!(r.starts_with("HTTP/1.1 408"), "cut with 408: {r:?}");
        assert!(
            t >= Duration::from_millis(2500) && t < Duration::from_secs(6),
            "cut at slot_timeout, not at body size / rate: {t:?}"
        );
    }
    // Their slots are back.
    assert_eq!(get(port, "/other", &[]).await.expect("req").status, 200);
}

/// Item 6: `TOLLGATE_LOG=debug` writes no Authorization header, query or body (the libraries'
/// debug lines that print heads are left out), and `run` lowers `max_connections` to what
/// the open-file limit holds, loudly, rather than time everyone out at the ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_logs_keep_secrets_and_max_connections_fits_the_fd_limit() {
    use std::process::Stdio;
    use std::time::Duration;
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let dir = temp_dir("walks-debug");
    let cfg = dir.join("t.toml");
    std::fs::write(
        &cfg,
        serving_one_thread(
            port,
            admin,
            &format!(
                "max_connections = 50000\n[upstreams.app]\ntargets = [\"{}\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"app\"\n",
                be.addr
            ),
        ),
    )
    .expect("write");
    let log = dir.join("log");
    // 600 descriptors: (600 - 128) / 2 = 236 connections fit.
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n 600 && exec {BIN} run --config {}",
            cfg.display()
        ))
        .env("TOLLGATE_LOG", "debug")
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.join("err")).expect("log"))
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut child);
    assert!(
        wait_listening(port, Duration::from_secs(20)).await,
        "listening"
    );
    let r = request_from(
        "127.0.0.1".parse().expect("ip"),
        port,
        "POST",
        "/x?token=SECRETQUERY",
        &[
            ("authorization", "Bearer SECRETTOKEN"),
            ("cookie", "s=SECRETCOOKIE"),
        ],
        "SECRETBODY",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("err")).unwrap_or_default();
    assert!(
        text.contains("DEBUG") || text.contains("debug"),
        "debug logging is on"
    );
    for secret in ["SECRETQUERY", "SECRETTOKEN", "SECRETCOOKIE", "SECRETBODY"] {
        assert!(!text.contains(secret), "{secret} in the debug log");
    }
    assert!(
        text.contains("max_connections_lowered") && text.contains("at most 236 connections"),
        "the lowered bound is logged"
    );
    // The 237th connection is closed at accept; those within the bound are served.
    let mut held = Vec::new();
    for _ in 0..236 {
        held.push(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_connections_refused_total",
            &["reason=\"max_connections\""]
        ),
        0.0
    );
    let over = Conn::open(port).await;
    let refused = match over {
        Ok(mut c) => c.send("GET", "/", &[], "").await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "over the lowered bound: closed at accept");
    drop(held);
}
