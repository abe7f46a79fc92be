//! End-to-end tests of running Tollgate at the edge: reload when the config file (or a file it
//! reads) changes, under traffic; an invalid file; a zero-downtime binary upgrade with a client
//! looping throughout; `import-ingress`; the access log.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_testkit::*;

use failures::Failures;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

async fn start(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(Path::new(BIN), toml, port, admin).await
}

/// Requests in a loop on one keep-alive connection (a new one when the gateway closes it),
/// counting statuses; anything but 200/429, or a failed connection, is a failure.
struct Traffic {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    failures: Arc<Failures>,
    task: tokio::task::JoinHandle<()>,
}

mod failures {
    /// Failure descriptions, kept for the assertion message.
    #[derive(Default)]
    pub struct Failures(pub std::sync::Mutex<Vec<String>>);
    impl Failures {
        pub fn push(&self, s: String) {
            if let Ok(mut v) = self.0.lock() {
                v.push(s);
            }
        }
        pub fn list(&self) -> Vec<String> {
            self.0.lock().map(|v| v.clone()).unwrap_or_default()
        }
    }
}

impl Traffic {
    fn start(port: u16, path: &'static str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Failures::default());
        let (s, o, r, f) = (stop.clone(), ok.clone(), refused.clone(), failures.clone());
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut conn = None;
            while !s.load(Ordering::SeqCst) && Instant::now() < deadline {
                if conn.is_none() {
                    match Conn::open(port).await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            f.push(format!("connect: {e}"));
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            continue;
                        }
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                match c.send("GET", path, &[], "").await {
                    Ok(reply) => match reply.status {
                        200 => {
                            o.fetch_add(1, Ordering::SeqCst);
                        }
                        429 => {
                            r.fetch_add(1, Ordering::SeqCst);
                        }
                        other => f.push(format!("status {other}: {}", reply.body)),
                    },
                    // Nothing here closes connections (a reload keeps them): a request that
                    // fails is a failure.
                    Err(e) => {
                        f.push(format!("request: {e}"));
                        conn = None;
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Self {
            stop,
            ok,
            refused,
            failures,
            task,
        }
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.ok.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
        )
    }

    async fn finish(self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let (ok, refused) = (
            self.ok.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
        );
        (ok, refused, self.failures.list())
    }
}

fn conf(port: u16, admin: u16, rate: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2
[[routes]]
name = "api"
path_prefix = "/api"
respond = {{ status = 200, body = "ok" }}
limits = ["rate"]
[[routes]]
name = "steady"
path_prefix = "/steady"
respond = {{ status = 200, body = "ok" }}
limits = ["steady"]
[limits.rate]
key = "global"
rate = "{rate}"
[limits.steady]
key = "client_ip"
rate = "1/h"
burst = 5
{extra}
"#
    )
}

/// Admitted requests in `window` of continuous traffic.
async fn admitted_in(t: &Traffic, window: Duration) -> usize {
    let (before, _) = t.counts();
    tokio::time::sleep(window).await;
    t.counts().0 - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_file_reloads_itself_under_traffic() {
    let (port, admin) = (free_port(), free_port());
    let gw = start(&conf(port, admin, "10/s", ""), port, admin).await;
    // The unchanged limit spends 3 of its 5 before the change.
    for _ in 0..3 {
        assert_eq!(get(port, "/steady", &[]).await.expect("steady").status, 200);
    }
    let traffic = Traffic::start(port, "/api");
    // Past the burst, 10/s admits about 10 a second.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let before = admitted_in(&traffic, Duration::from_secs(2)).await;
    // The file changes (no signal): a faster rate and a new route.
    std::fs::write(
        &gw.config,
        conf(
            port,
            admin,
            "20/s",
            "[[routes]]\nname = \"new\"\npath_prefix = \"/new\"\nrespond = { status = 200, body = \"new\" }\n",
        ),
    )
    .expect("write");
    let reloaded = eventually(Duration::from_secs(5), || async {
        get(port, "/new", &[]).await.is_ok_and(|r| r.body == "new")
    })
    .await;
    assert!(reloaded, "the new route serves:\n{}", gw.log_text());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let after = admitted_in(&traffic, Duration::from_secs(2)).await;
    let (ok, refused, failures) = traffic.finish().await;
    assert!(failures.is_empty(), "no failed request: {failures:?}");
    assert!(refused > 0 && ok > 0);
    eprintln!("admitted in 2 s: {before} at 10/s, {after} at 20/s");
    assert!((14..=26).contains(&before), "10/s: {before} in 2 s");
    assert!((32..=48).contains(&after), "20/s: {after} in 2 s");
    // The unchanged limit kept its state: 2 of 5 left.
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(get(port, "/steady", &[]).await.expect("steady").status);
        }
        v
    };
    assert_eq!(codes, [200, 200, 429]);
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_config_reloads_total", &["result=\"ok\""]),
        1.0,
        "one reload per change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_is_rejected_and_the_old_config_serves() {
    let (port, admin) = (free_port(), free_port());
    let gw = start(&conf(port, admin, "1/h", ""), port, admin).await;
    std::fs::write(
        &gw.config,
        conf(port, admin, "10/fortnight", "").replace("[[routes]]", "[[routez]]"),
    )
    .expect("write");
    let counted = eventually(Duration::from_secs(5), || async {
        metric(
            &metrics(admin).await,
            "tollgate_config_reloads_total",
            &["result=\"error\""],
        ) == 1.0
    })
    .await;
    assert!(counted, "{}", gw.log_text());
    let log = gw.log_text();
    assert!(log.contains("reload_failed"), "{log}");
    assert!(
        log.contains("limits.rate.rate") && log.contains("routez"),
        "every problem named: {log}"
    );
    // The old config serves (its route, its limit).
    let r = get(port, "/api", &[]).await.expect("request");
    assert_eq!(r.status, 200);
    assert_eq!(get(port, "/api", &[]).await.expect("request").status, 429);
    // Not retried until the file changes again; a fixed file is picked up.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        metric(
            &metrics(admin).await,
            "tollgate_config_reloads_total",
            &["result=\"error\""]
        ),
        1.0
    );
    std::fs::write(&gw.config, conf(port, admin, "1/h", "")).expect("write");
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(
                &metrics(admin).await,
                "tollgate_config_reloads_total",
                &["result=\"ok\""],
            ) == 1.0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_list_file_reloads_the_config() {
    let (port, admin) = (free_port(), free_port());
    let dir = temp_dir("lists");
    let list = dir.join("deny.txt");
    std::fs::write(&list, "192.0.2.0/24\n").expect("write");
    let toml = format!(
        "{}\n[access]\ndeny_files = [\"{}\"]\n",
        conf(port, admin, "1000/s", ""),
        list.display()
    );
    let _gw = start(&toml, port, admin).await;
    assert_eq!(get(port, "/api", &[]).await.expect("req").status, 200);
    std::fs::write(&list, "192.0.2.0/24\n127.0.0.0/8\n").expect("write");
    let denied = eventually(Duration::from_secs(5), || async {
        get(port, "/api", &[]).await.is_ok_and(|r| r.status == 403)
    })
    .await;
    assert!(denied, "the list file is watched with the config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_hands_the_listeners_over_without_refusing_a_connection() {
    let (port, admin) = (free_port(), free_port());
    let sock = temp_dir("upgrade").join("upgrade.sock");
    let toml = format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2
grace_period = "3s"
upgrade_sock = "{}"
[[routes]]
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
"#,
        sock.display()
    );
    let mut old = start(&toml, port, admin).await;
    // Clients open a new connection for every request, so any refused connect shows.
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let mut loops = Vec::new();
    for _ in 0..2 {
        let (stop, refused, served) = (stop.clone(), refused.clone(), served.clone());
        loops.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                // A short pause: the loop must not starve the other tests of CPU.
                tokio::time::sleep(Duration::from_millis(1)).await;
                match get(port, "/", &[]).await {
                    Ok(r) if r.status == 200 => {
                        served.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(r) => errors.push(format!("status {}", r.status)),
                    Err(e) => {
                        refused.fetch_add(1, Ordering::SeqCst);
                        errors.push(e.to_string());
                    }
                }
            }
            errors
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new = GatewayProc::spawn(Path::new(BIN), &old.config, &["--upgrade"]).expect("spawn");
    // The new process waits on the upgrade socket; the old one sends its listeners on SIGQUIT.
    assert!(
        eventually(Duration::from_secs(5), || async { sock.exists() }).await,
        "the new process listens for the hand-over:\n{}",
        new.log_text()
    );
    old.signal(libc::SIGQUIT);
    assert!(
        new.wait_log("signals_ready", Duration::from_secs(10)).await,
        "the new process serves:\n{}",
        new.log_text()
    );
    let exited = old.wait_exit(Duration::from_secs(8)).await;
    assert!(
        exited.is_some(),
        "the old process drains and exits:\n{}",
        old.log_text()
    );
    let at_exit = served.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let mut errors = Vec::new();
    for l in loops {
        errors.extend(l.await.expect("loop"));
    }
    let total = served.load(Ordering::SeqCst);
    eprintln!(
        "upgrade: {total} requests served, {} after the old process exited",
        total - at_exit
    );
    assert!(
        errors.is_empty(),
        "no connection refused, no failed request: {errors:?}"
    );
    assert!(
        total > at_exit,
        "the new process serves after the old one left"
    );
    assert_eq!(refused.load(Ordering::SeqCst), 0);
    // The admin listener moved too.
    assert_eq!(
        get(admin, "/healthz", &[]).await.expect("healthz").status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_access_log_has_one_line_per_request_and_no_identity_in_clear() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
trusted_proxies = ["127.0.0.1/32"]
access_log = true
[access]
deny = ["198.51.100.0/24"]
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "api"
path_prefix = "/api"
upstream = "app"
limits = ["per_key"]
[limits.per_key]
key = "header:x-api-key"
rate = "1/h"
burst = 1
"#,
        be.addr
    );
    let gw = match GatewayProc::start_with(
        Path::new(BIN),
        &toml,
        port,
        Some(admin),
        &["--log-format", "json"],
    )
    .await
    {
        Ok(gw) => gw,
        Err(e) => panic!("{e}"),
    };
    let key = [
        ("x-api-key", "sk_live_secret_value"),
        ("x-forwarded-for", "203.0.113.77"),
    ];
    let ids: Vec<String> = {
        let mut v = Vec::new();
        for h in [
            &key[..],
            &key[..],
            &[("x-forwarded-for", "198.51.100.1")][..],
        ] {
            let r = get(port, "/api/items?token=abc", h).await.expect("request");
            v.push(r.header("x-request-id").expect("id").to_string());
        }
        v
    };
    let lines = || {
        gw.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|j| j["event"] == "request")
            .collect::<Vec<_>>()
    };
    assert!(eventually(Duration::from_secs(3), || async { lines().len() == 3 }).await);
    let l = lines();
    let by_id = |id: &str| {
        l.iter()
            .find(|j| j["request_id"] == id)
            .cloned()
            .expect("a line per request")
    };
    let (a, b, c) = (by_id(&ids[0]), by_id(&ids[1]), by_id(&ids[2]));
    assert_eq!(
        (
            a["status"].as_u64(),
            a["decision"].as_str(),
            a["limit"].as_str()
        ),
        (Some(200), Some("allowed"), Some("per_key"))
    );
    assert_eq!(
        (
            b["status"].as_u64(),
            b["decision"].as_str(),
            b["limit"].as_str()
        ),
        (Some(429), Some("refused"), Some("per_key"))
    );
    assert_eq!(
        (c["status"].as_u64(), c["decision"].as_str()),
        (Some(403), Some("access_denied"))
    );
    for j in [&a, &b, &c] {
        assert_eq!(j["route"], "api");
        assert!(j.get("path").is_none(), "no path: it can hold identities");
        assert!(j["duration_ms"].as_f64().is_some());
        assert_eq!(j["client"].as_str().map(str::len), Some(16));
    }
    assert_eq!(a["client"], b["client"], "one client, one pseudonym");
    let text = gw.log_text();
    for secret in [
        "203.0.113.77",
        "198.51.100.1",
        "sk_live_secret_value",
        "token=abc",
    ] {
        assert!(!text.contains(secret), "{secret} in the log:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_ingress_serves_like_ingress_nginx() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let yaml = root.join("tests/fixtures/ingress/ratelimited.yaml");
    let out = std::process::Command::new(BIN)
        .arg("import-ingress")
        .arg(&yaml)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8(out.stdout).expect("utf-8");
    // proxy-body-size: 8m is the routes' body cap.
    assert!(toml.contains("max_body_bytes = 8388608"), "{toml}");
    // What it printed, `tollgate check` accepts.
    let dir = temp_dir("ingress");
    std::fs::write(dir.join("imported.toml"), &toml).expect("write");
    let check = std::process::Command::new(BIN)
        .arg("check")
        .arg(dir.join("imported.toml"))
        .output()
        .expect("check");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    // Served here: loopback addresses, this test's backend for both Services, and the test's
    // own address as the trusted load balancer.
    let toml = toml
        .replace("0.0.0.0:8080", &format!("127.0.0.1:{port}"))
        .replace("0.0.0.0:9901", &format!("127.0.0.1:{admin}"))
        .replace("api.prod.svc.cluster.local:8080", &be.addr.to_string())
        .replace("web.prod.svc.cluster.local:80", &be.addr.to_string())
        .replace(
            "trusted_proxies = [",
            "trusted_proxies = [\"127.0.0.1/32\", ",
        );
    let _gw = start(&toml, port, admin).await;
    let req = |host: &'static str, path: &'static str, client: &'static str| async move {
        get(port, path, &[("host", host), ("x-forwarded-for", client)])
            .await
            .expect("request")
            .status
    };
    // Kubernetes path semantics: /v1 and below it, not /v1x; the host decides.
    assert_eq!(req("api.example.com", "/v1", "203.0.113.1").await, 200);
    assert_eq!(
        req("api.example.com", "/v1/items", "203.0.113.2").await,
        200
    );
    assert_eq!(req("api.example.com", "/v1x", "203.0.113.3").await, 404);
    assert_eq!(
        req("www.example.com", "/anything", "203.0.113.4").await,
        200
    );
    // limit-rps 5 x multiplier 3: nginx lets 1 + 15 through at once, then refuses. Sent at
    // once (a slow machine may let one more refill in: 5/s).
    let burst: Vec<_> = (0..18)
        .map(|_| tokio::spawn(req("api.example.com", "/v1/x", "203.0.113.9")))
        .collect();
    let mut codes = Vec::new();
    for b in burst {
        codes.push(b.await.expect("task"));
    }
    let admitted = codes.iter().filter(|c| **c == 200).count();
    assert!((16..=17).contains(&admitted), "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 429).count(), 18 - admitted);
    // limit-whitelist: exempt; denylist-source-range: refused.
    for _ in 0..20 {
        assert_eq!(req("api.example.com", "/v1/x", "10.1.2.3").await, 200);
    }
    assert_eq!(req("api.example.com", "/v1/x", "198.51.100.7").await, 403);
}
