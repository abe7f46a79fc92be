//! End-to-end tests of the abuse defences: access lists, tarpits, the credential-stuffing
//! guard, automatic blocks with their admin API, the challenge action and shadow mode. The
//! built `tollgate` binary, a loopback backend, real sockets; Redis where blocks or limits are
//! shared. Limits refill slowly (per hour) so that no refill happens during a test.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
const TOKEN: &str = "test-admin-token-0123456789";

async fn start(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(Path::new(BIN), toml, port, admin).await
}

/// `[server]` behind a trusted proxy on 127.0.0.1 (X-Forwarded-For names the client).
fn server(port: u16, admin: u16) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\nthreads = 2\ntrusted_proxies = [\"127.0.0.1/32\"]\nadmin_token = \"{TOKEN}\"\n"
    )
}

async fn from(port: u16, path: &str, xff: &str, headers: &[(&str, &str)]) -> Reply {
    let mut h = vec![("x-forwarded-for", xff)];
    h.extend_from_slice(headers);
    get(port, path, &h).await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lists_deny_and_allow_by_address_user_agent_and_api_key() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let lists = temp_dir("lists");
    let deny_file = lists.join("deny.txt");
    std::fs::write(&deny_file, "# scrapers\n192.0.2.0/24\n").expect("write");
    let toml = format!(
        r#"{}
[access]
deny = ["198.51.100.0/24", "2001:db8::/32"]
deny_files = ["{}"]
allow = ["198.51.100.7"]
deny_user_agents = ["BadBot/1.0", "Scraper*"]
allow_api_keys = ["sk_partner_*"]
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "api"
path_prefix = "/api"
upstream = "app"
limits = ["per_ip"]
[[routes]]
name = "internal"
path_prefix = "/internal"
upstream = "app"
access = {{ deny = ["203.0.113.0/24"] }}
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 2
"#,
        server(port, admin),
        deny_file.display(),
        be.addr
    );
    let gw = start(&toml, port, admin).await;

    // Denied addresses: IPv4, IPv6, IPv4-mapped IPv6, and from the list file.
    for ip in [
        "198.51.100.9",
        "2001:db8::1",
        "::ffff:198.51.100.9",
        "192.0.2.77",
    ] {
        let r = from(port, "/api/x", ip, &[]).await;
        assert_eq!(r.status, 403, "{ip}: {}", r.body);
        assert_eq!(r.json()["error_code"], "ACCESS_DENIED", "{ip}");
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{ip}"
        );
    }
    assert_eq!(be.hits(), 0, "nothing denied reaches the upstream");
    // An allowed address inside a denied range skips the deny and every limit.
    for _ in 0..5 {
        assert_eq!(from(port, "/api/x", "198.51.100.7", &[]).await.status, 200);
    }
    // User-Agent globs: whole value, any case.
    for (i, (ua, want)) in [
        ("BadBot/1.0", 403),
        ("ScraperBot/2.1", 403),
        ("scraper", 403),
        ("BadBot/1.01", 200),
        ("Mozilla/5.0", 200),
    ]
    .into_iter()
    .enumerate()
    {
        let ip = format!("203.0.113.{}", 30 + i);
        let r = from(port, "/api/ua", &ip, &[("user-agent", ua)]).await;
        assert_eq!(r.status, want, "{ua}");
    }
    // A partner key skips the limit its address would meet; a leaked key never skips a deny.
    let partner = [("x-api-key", "sk_partner_acme")];
    for i in 0..6 {
        let r = from(port, "/api/x", "203.0.113.20", &partner).await;
        assert_eq!(r.status, 200, "partner request {i}");
    }
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(from(port, "/api/x", "203.0.113.20", &[]).await.status);
        }
        v
    };
    assert_eq!(codes, [200, 200, 429], "without the key the limit applies");
    let r = from(port, "/api/x", "198.51.100.9", &partner).await;
    assert_eq!(r.status, 403);
    // A route's own list adds to the server's.
    assert_eq!(
        from(port, "/internal", "203.0.113.5", &[]).await.status,
        403
    );
    assert_eq!(from(port, "/api/y", "203.0.113.5", &[]).await.status, 200);

    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"access_denied\"", "route=\"api\""]
        ),
        8.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_access_allowed_total",
            &["route=\"api\"", "reason=\"ip\""]
        ),
        5.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_access_allowed_total",
            &["route=\"api\"", "reason=\"api_key\""]
        ),
        6.0
    );

    // The list file reloads with the config.
    std::fs::write(&deny_file, "192.0.2.0/24\n203.0.113.99\n").expect("write");
    assert_eq!(from(port, "/api/z", "203.0.113.99", &[]).await.status, 200);
    gw.signal(libc::SIGHUP);
    let denied = eventually(Duration::from_secs(5), || async {
        from(port, "/api/z", "203.0.113.99", &[]).await.status == 403
    })
    .await;
    assert!(denied, "the new entry applies after a reload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tarpit_holds_at_most_max_concurrent_and_refuses_the_rest_at_once() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "login"
path_prefix = "/login"
upstream = "app"
limits = ["login"]
tarpit = {{ delay = ["1s", "1500ms"], max_concurrent = 4 }}
[[routes]]
name = "slow_down"
path_prefix = "/search"
upstream = "app"
limits = ["search"]
[[routes]]
name = "normal"
path_prefix = "/"
upstream = "app"
[limits.login]
key = "global"
rate = "1/h"
burst = 1
[limits.search]
key = "global"
rate = "1/h"
burst = 1
action = "tarpit"
tarpit = {{ delay = "300ms", then = "pass" }}
"#,
        server(port, admin),
        be.addr
    );
    let _gw = start(&toml, port, admin).await;
    assert_eq!(get(port, "/login", &[]).await.expect("first").status, 200);
    // The normal route's latency before anything is held.
    let mut calm = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        assert_eq!(get(port, "/", &[]).await.expect("normal").status, 200);
        calm.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calm.sort();

    // 20 abusive requests at once, while a normal client keeps using another route.
    let abusive: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async move {
                let t = Instant::now();
                let r = get(port, "/login", &[]).await.expect("request");
                (r, t.elapsed())
            })
        })
        .collect();
    let normal = tokio::spawn(async move {
        let mut lat = Vec::new();
        for _ in 0..30 {
            let t = Instant::now();
            let r = get(port, "/", &[]).await.expect("normal");
            assert_eq!(r.status, 200);
            lat.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lat
    });
    // While they are held, the occupancy shows.
    let held_seen = eventually(Duration::from_millis(900), || async {
        metric(
            &metrics(admin).await,
            "tollgate_tarpit_held",
            &["route=\"login\""],
        ) == 4.0
    })
    .await;
    let mut results = Vec::new();
    for a in abusive {
        results.push(a.await.expect("task"));
    }
    let mut lat = normal.await.expect("normal task");
    assert!(held_seen, "4 held at once");
    let (held, quick): (Vec<_>, Vec<_>) = results
        .iter()
        .partition(|(_, t)| *t >= Duration::from_millis(950));
    assert_eq!(held.len(), 4, "exactly max_concurrent held: {results:?}");
    assert_eq!(quick.len(), 16);
    for (r, t) in &results {
        assert_eq!(r.status, 429, "held or not, the answer is a refusal");
        assert_eq!(r.json()["error_code"], "RATE_LIMIT_EXCEEDED");
        assert!(*t < Duration::from_millis(2500), "within the range: {t:?}");
    }
    for (r, t) in &quick {
        assert!(*t < Duration::from_millis(500), "refused at once: {t:?}");
        assert_ne!(r.header("connection"), Some("close"));
    }
    for (r, _) in &held {
        assert_eq!(
            r.header("connection"),
            Some("close"),
            "a held client reconnects"
        );
    }
    lat.sort();
    let (p50, max) = (lat[lat.len() / 2], lat[lat.len() - 1]);
    eprintln!(
        "normal route: p50 {:?}, max {:?} before; p50 {p50:?}, max {max:?} while 4 are held",
        calm[calm.len() / 2],
        calm[calm.len() - 1]
    );
    assert!(
        max < Duration::from_millis(500),
        "normal latency stays flat: {lat:?}"
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"tarpit_overflow\"", "route=\"login\""]
        ),
        16.0
    );
    assert_eq!(
        metric(&m, "tollgate_tarpit_held_total", &["route=\"login\""]),
        4.0
    );
    assert_eq!(
        metric(&m, "tollgate_tarpit_held", &["route=\"login\""]),
        0.0
    );

    // A client that leaves while held frees its slot at once.
    let leaver = tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_millis(200), get(port, "/login", &[])).await;
    });
    leaver.await.expect("leaver");
    let freed = eventually(Duration::from_millis(600), || async {
        metric(
            &metrics(admin).await,
            "tollgate_tarpit_held",
            &["route=\"login\""],
        ) == 0.0
    })
    .await;
    assert!(freed, "the slot is released when the client leaves");

    // then = "pass": slowed down, not refused.
    assert_eq!(get(port, "/search", &[]).await.expect("first").status, 200);
    let hits = be.hits();
    let t = Instant::now();
    let r = get(port, "/search", &[]).await.expect("second");
    assert_eq!(r.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(be.hits(), hits + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_stuffing_guard_stops_botnets_and_spares_successful_logins() {
    let be = Backend::start().await.expect("backend");
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[redis]
url = "{}"
timeout = "500ms"
[upstreams.auth]
targets = ["{}"]
[[routes]]
name = "login"
path_prefix = "/login"
methods = ["POST"]
upstream = "auth"
limits = ["login_ip", "login_account"]
[limits.login_ip]
key = "ip_ua"
rate = "5/h"
burst = 5
[limits.login_account]
key = "body:username"
rate = "3/h"
burst = 3
scope = "global"
count = "failures"
"#,
        server(port, admin),
        redis.url(),
        be.addr
    );
    let _gw = start(&toml, port, admin).await;
    let post = |ip: String, user: &str, status: &str| {
        let body = format!("{{\"username\":\"{user}\",\"password\":\"x\"}}");
        let status = status.to_string();
        async move {
            let h = [
                ("x-forwarded-for", ip.as_str()),
                ("content-type", "application/json"),
                ("user-agent", "stuffer/1"),
                ("x-want-status", status.as_str()),
            ];
            request_from(
                IpAddr::from([127, 0, 0, 1]),
                port,
                "POST",
                "/login",
                &h,
                &body,
            )
            .await
            .expect("request")
        }
    };
    // A botnet: every attempt from a new address, all against one account, all failing.
    let mut codes = Vec::new();
    for i in 0..8 {
        let r = post(format!("10.9.0.{i}"), "alice", "401").await;
        if r.status == 429 {
            assert_eq!(r.json()["limit"], "login_account");
        }
        codes.push(r.status);
    }
    assert_eq!(
        codes,
        [401, 401, 401, 429, 429, 429, 429, 429],
        "the account key stops them"
    );
    // One address against many accounts: the ip_ua key stops it.
    let mut codes = Vec::new();
    for i in 0..7 {
        let r = post("10.8.0.1".into(), &format!("user{i}"), "401").await;
        if r.status == 429 {
            assert_eq!(r.json()["limit"], "login_ip");
        }
        codes.push(r.status);
    }
    assert_eq!(codes, [401, 401, 401, 401, 401, 429, 429]);
    // Successful logins cost the account nothing: bob logs in ten times, then fails three.
    let mut codes = Vec::new();
    for i in 0..10 {
        codes.push(post(format!("10.7.0.{i}"), "bob", "200").await.status);
    }
    assert_eq!(codes, [200; 10]);
    let mut codes = Vec::new();
    for i in 10..14 {
        codes.push(post(format!("10.7.0.{i}"), "bob", "403").await.status);
    }
    assert_eq!(
        codes,
        [403, 403, 403, 429],
        "failures count, 403 among them"
    );
    let calls = redis.command_calls("evalsha");
    assert!(calls > 0, "the account limit is global");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_escalation_ladder_blocks_and_the_admin_api_lists_and_lifts() {
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let (port2, admin2) = (free_port(), free_port());
    let conf = |port: u16, admin: u16| {
        format!(
            r#"{}
[redis]
url = "{}"
timeout = "500ms"
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["per_ip"]
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 1
block = [{{ after = 3, within = "1m", for = "10m" }}, {{ after = 6, within = "1m", for = "1h" }}]
"#,
            server(port, admin),
            redis.url()
        )
    };
    let _a = start(&conf(port, admin), port, admin).await;
    let _b = start(&conf(port2, admin2), port2, admin2).await;
    let ip = "203.0.113.66";
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(from(port, "/", ip, &[]).await.status);
    }
    assert_eq!(codes, [200, 429, 429, 429, 403], "the third refusal blocks");
    let r = from(port, "/", ip, &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error_code"], "TEMPORARILY_BLOCKED");
    let retry: u64 = r
        .header("retry-after")
        .expect("retry-after")
        .parse()
        .expect("n");
    assert!((590..=600).contains(&retry), "{retry}");
    let id = r.json()["block_id"].as_str().expect("block_id").to_string();
    // Other clients pass.
    assert_eq!(from(port, "/", "203.0.113.67", &[]).await.status, 200);
    // The block reaches the other instance through Redis: listed there, and the first request
    // it ever sees from the key is refused, though its own limit is fresh.
    let auth = format!("Bearer {TOKEN}");
    let listed = |admin: u16| {
        let auth = auth.clone();
        async move {
            let r = get(admin, "/blocks", &[("authorization", &auth)])
                .await
                .expect("blocks");
            r.json()["blocks"].as_array().map_or(0, Vec::len)
        }
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            listed(admin2).await == 1
        })
        .await,
        "the block reaches the other instance"
    );
    let r = from(port2, "/", ip, &[]).await;
    assert_eq!(r.status, 403, "blocked on every instance");
    assert_eq!(r.json()["block_id"], id.as_str());

    // Hammering while blocked climbs to the next step: blocked for an hour.
    for _ in 0..3 {
        from(port, "/", ip, &[]).await;
    }
    let r = from(port, "/", ip, &[]).await;
    let retry: u64 = r
        .header("retry-after")
        .expect("retry-after")
        .parse()
        .expect("n");
    assert!(retry > 3000, "escalated: {retry}");

    // The admin API: a token is required; the block is listed and lifted everywhere.
    let r = get(admin, "/blocks", &[]).await.expect("blocks");
    assert_eq!(r.status, 401);
    let r = get(
        admin,
        "/blocks",
        &[("authorization", "Bearer wrong-token-0123456789")],
    )
    .await
    .expect("blocks");
    assert_eq!(r.status, 401);
    let r = get(admin, "/blocks", &[("authorization", &auth)])
        .await
        .expect("blocks");
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json()["blocks"].as_array().cloned().expect("list");
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["limit"], "per_ip");
    assert_eq!(list[0]["key"], id.as_str());
    assert_eq!(list[0]["rung"], 1);
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_blocks_active", &["limit=\"per_ip\""]),
        1.0
    );
    assert!(metric(&m, "http_requests_rejected_total", &["reason=\"blocked\""]) >= 4.0);
    let r = request_from(
        IpAddr::from([127, 0, 0, 1]),
        admin,
        "DELETE",
        &format!("/blocks/per_ip/{id}"),
        &[("authorization", &auth)],
        "",
    )
    .await
    .expect("delete");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["lifted"], 1);
    assert_eq!(r.json()["shared"], true, "{}", r.body);
    // Lifted here at once (the limit itself still refuses: 429, not 403) and on the other
    // instance after its next poll.
    assert_eq!(from(port, "/", ip, &[]).await.status, 429);
    let lifted = eventually(Duration::from_secs(5), || async {
        listed(admin2).await == 0
    })
    .await;
    assert!(
        lifted,
        "lifted on every instance: {}",
        redis.cli(&["HGETALL", "{tollgate:blocks}"])
    );
    // The other instance's own limit decides again (it never counted this key: blocked
    // requests take nothing).
    let r = from(port2, "/", ip, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = get(admin, "/blocks", &[("authorization", &auth)])
        .await
        .expect("blocks");
    assert_eq!(r.json()["blocks"].as_array().map(Vec::len), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn challenge_and_shadow_actions() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "signup"
path_prefix = "/signup"
upstream = "app"
limits = ["signup"]
[[routes]]
name = "trial"
path_prefix = "/trial"
upstream = "app"
limits = ["trial"]
[limits.signup]
key = "client_ip"
rate = "1/h"
burst = 1
action = "challenge"
challenge_url = "https://captcha.example.com/solve"
[limits.trial]
key = "client_ip"
rate = "1/h"
burst = 1
shadow = true
"#,
        server(port, admin),
        be.addr
    );
    let gw = start(&toml, port, admin).await;
    assert_eq!(from(port, "/signup", "203.0.113.1", &[]).await.status, 200);
    let r = from(port, "/signup", "203.0.113.1", &[]).await;
    assert_eq!(r.status, 429);
    let j = r.json();
    assert_eq!(j["error_code"], "CHALLENGE_REQUIRED");
    assert_eq!(j["challenge_url"], "https://captcha.example.com/solve");
    assert!(r.header("retry-after").is_some());
    assert!(r.header("ratelimit").is_some_and(|v| v.contains("r=0")));

    // Shadow: the client sees 200 without the marker; the upstream sees the marker.
    let first = from(port, "/trial", "203.0.113.2", &[]).await;
    let second = from(port, "/trial", "203.0.113.2", &[]).await;
    assert_eq!((first.status, second.status), (200, 200));
    assert!(second.header("x-ratelimit-shadow-exceeded").is_none());
    assert!(first.json()["headers"]["x-ratelimit-shadow-exceeded"].is_null());
    assert_eq!(
        second.json()["headers"]["x-ratelimit-shadow-exceeded"],
        "true"
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"challenge\""]
        ),
        1.0
    );
    assert_eq!(
        metric(&m, "tollgate_shadow_exceeded_total", &["limit=\"trial\""]),
        1.0
    );
    let logged = eventually(Duration::from_secs(2), || async {
        gw.log_text().lines().any(|l| {
            l.contains("shadow_limit_exceeded")
                && l.contains("trial")
                && l.contains("would_be_status")
                && l.contains("key")
                && !l.contains("203.0.113.2")
        })
    })
    .await;
    assert!(
        logged,
        "one structured event, no address in clear:\n{}",
        gw.log_text()
    );
}
