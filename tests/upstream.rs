//! End-to-end tests of load balancing over an upstream's targets (issue 28, item 5), with real
//! processes: a hashed key spread over 3 targets that moves only the leaver's share, an
//! affinity cookie that pins, refuses forgeries and re-pins when its target dies, retries that
//! save a GET from a dead target or a 503 while a POST is never sent twice, a retry budget
//! that holds under a full outage, and passive outlier ejection that takes a failing target
//! out (5xx answers or refused connects) but never the last one.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// A raw upstream answering every request `status` (and closing), counting requests by method.
fn status_upstream(status: u16) -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let (gets, posts) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (g, p) = (gets.clone(), posts.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let (g, p) = (g.clone(), p.clone());
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if head.starts_with(b"POST") {
                    p.fetch_add(1, Ordering::SeqCst);
                } else {
                    g.fetch_add(1, Ordering::SeqCst);
                }
                let _ = c.write_all(
                    format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope"
                    )
                    .as_bytes(),
                );
            });
        }
    });
    (port, gets, posts)
}

/// A raw upstream that reads requests and never answers, counting them.
fn silent_upstream() -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            s.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
                let mut buf = [0u8; 4096];
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    (port, seen)
}

/// Which of `backends` answered a GET of `path` (by their hit counters).
async fn answered_by(
    backends: &[&Backend],
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (Reply, Option<usize>) {
    let before: Vec<usize> = backends.iter().map(|b| b.hits()).collect();
    let r = get(port, path, headers).await.expect("request");
    let who = backends
        .iter()
        .zip(&before)
        .position(|(b, n)| b.hits() > *n);
    (r, who)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_key_spreads_over_three_targets_and_only_the_leavers_share_moves() {
    let bes = [
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
    ];
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{}", "{}", "{}"]
balance = "hash"
hash_key = "header:x-user"
health_check = {{ interval = "100ms", timeout = "200ms" }}
[[routes]]
name = "app"
path_prefix = "/"
upstream = "app"
"#,
            bes[0].addr, bes[1].addr, bes[2].addr
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    let refs: Vec<&Backend> = bes.iter().collect();
    // The ring is built from the targets' addresses (random ports here): 300 keys and a wide
    // band keep the spread check about the balancer, not about which ports the run drew.
    let users: Vec<String> = (0..300).map(|i| format!("user-{i}")).collect();
    let mut before = Vec::new();
    for u in &users {
        let (r, who) = answered_by(&refs, port, "/x", &[("x-user", u)]).await;
        assert_eq!(r.status, 200);
        before.push(who.expect("one target answered"));
    }
    for t in 0..3 {
        let n = before.iter().filter(|w| **w == t).count();
        assert!(
            (30..=180).contains(&n),
            "target {t} took {n} of 300 keys: {before:?}"
        );
    }
    // The same key, again and again: the same target.
    for (u, w) in users.iter().zip(&before).take(20) {
        let (_, who) = answered_by(&refs, port, "/x", &[("x-user", u)]).await;
        assert_eq!(who, Some(*w), "{u} stays on its target");
    }
    // Target 2 leaves (its health check fails): only its keys move.
    let gone = bes[2].addr;
    let [b0, b1, b2] = bes;
    drop(b2);
    let alive = [&b0, &b1];
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(
                &metrics(admin).await,
                "tollgate_upstream_target_healthy",
                &[&format!("\"{gone}\"")],
            ) == 0.0
        })
        .await,
        "the leaver is out of rotation"
    );
    let mut moved = 0;
    for (u, w) in users.iter().zip(&before) {
        let (r, who) = answered_by(&alive, port, "/x", &[("x-user", u)]).await;
        assert_eq!(r.status, 200);
        let who = who.expect("a remaining target answered");
        if *w == 2 {
            moved += 1;
        } else {
            assert_eq!(who, *w, "{u} moved although its target stayed");
        }
    }
    let share = before.iter().filter(|w| **w == 2).count();
    assert_eq!(
        moved, share,
        "exactly the leaver's keys moved (about a third)"
    );
    // A request without the key is still served (round robin).
    assert_eq!(get(port, "/x", &[]).await.expect("req").status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_affinity_cookie_pins_refuses_forgeries_and_repins_when_its_target_dies() {
    let bes = [
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
    ];
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{}", "{}"]
affinity = {{ cookie = "route", max_age = "1h" }}
health_check = {{ interval = "100ms", timeout = "200ms" }}
[[routes]]
name = "app"
path_prefix = "/"
upstream = "app"
"#,
            bes[0].addr, bes[1].addr
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    let refs: Vec<&Backend> = bes.iter().collect();
    let (r, first) = answered_by(&refs, port, "/", &[]).await;
    let first = first.expect("answered");
    let set = r.header("set-cookie").expect("pinned").to_string();
    assert!(
        set.starts_with("route=")
            && set.contains("Path=/")
            && set.contains("HttpOnly")
            && set.contains("Max-Age=3600")
            && !set.contains("Secure"),
        "{set}"
    );
    let cookie = set.split(';').next().expect("pair").to_string();
    // Pinned: every request with the cookie goes to the same target, and is not re-pinned.
    for _ in 0..8 {
        let (r, who) = answered_by(&refs, port, "/", &[("cookie", &cookie)]).await;
        assert_eq!(who, Some(first));
        assert!(r.header("set-cookie").is_none());
    }
    // Forged: another id with the real tag, a flipped tag, an oversized value, the cookie
    // twice. None is honoured; each answer pins afresh (a valid cookie of its own).
    let value = cookie.trim_start_matches("route=");
    let other_id = format!(
        "{:016x}{}",
        u64::from_str_radix(&value[..16], 16).expect("hex") ^ 1,
        &value[16..]
    );
    let mut flipped = value.to_string();
    let last = flipped.pop().expect("digit");
    flipped.push(if last == '0' { '1' } else { '0' });
    let oversized = format!("{value}{}", "a".repeat(8000));
    for forged in [
        format!("route={other_id}"),
        format!("route={flipped}"),
        format!("route={oversized}"),
        format!("{cookie}; {cookie}"),
    ] {
        let r = get(port, "/", &[("cookie", &forged)]).await.expect("req");
        assert_eq!(r.status, 200, "{forged:.60}");
        let re = r.header("set-cookie").expect("re-pinned").to_string();
        assert!(re.starts_with("route=") && re.len() < 200, "{re}");
    }
    // The pinned target dies: the cookie (replayed for a dead target) is served by the other
    // one, which pins the client anew; that new cookie then holds.
    let gone = bes[first].addr;
    let [b0, b1] = bes;
    let survivor = if first == 0 {
        drop(b0);
        b1
    } else {
        drop(b1);
        b0
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(
                &metrics(admin).await,
                "tollgate_upstream_target_healthy",
                &[&format!("\"{gone}\"")],
            ) == 0.0
        })
        .await,
        "the pinned target is out of rotation"
    );
    let before = survivor.hits();
    let r = get(port, "/", &[("cookie", &cookie)]).await.expect("req");
    assert_eq!(r.status, 200);
    assert_eq!(survivor.hits(), before + 1);
    let re = r.header("set-cookie").expect("re-pinned").to_string();
    let new_cookie = re.split(';').next().expect("pair").to_string();
    assert_ne!(new_cookie, cookie);
    let r = get(port, "/", &[("cookie", &new_cookie)])
        .await
        .expect("req");
    assert!(r.header("set-cookie").is_none(), "the new pin holds");
    assert_eq!(survivor.hits(), before + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_save_a_get_from_a_dead_target_or_a_503_and_never_send_a_post_twice() {
    let be = Backend::start().await.expect("backend");
    let dead = free_port();
    let (busy, busy_gets, busy_posts) = status_upstream(503);
    let (silent, silent_seen) = silent_upstream();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.dead_one]
targets = ["127.0.0.1:{dead}", "{be}"]
health_check = false
retry = {{ attempts = 1, on = ["connect"], budget = 1.0 }}
# What retries alone do (outlier ejection would take the bad target out).
outlier = false
[upstreams.busy_one]
targets = ["127.0.0.1:{busy}", "{be}"]
health_check = false
retry = {{ attempts = 1, on = ["503"], budget = 1.0 }}
# What retries alone do (outlier ejection would take the bad target out).
outlier = false
[upstreams.silent_one]
targets = ["127.0.0.1:{silent}", "{be}"]
health_check = false
read_timeout = "300ms"
retry = {{ attempts = 1, on = ["timeout"], budget = 1.0 }}
# What retries alone do (outlier ejection would take the bad target out).
outlier = false
[[routes]]
name = "silent"
path_prefix = "/silent"
upstream = "silent_one"
[[routes]]
name = "dead"
path_prefix = "/dead"
upstream = "dead_one"
[[routes]]
name = "busy"
path_prefix = "/busy"
upstream = "busy_one"
"#,
            be = be.addr
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    // Round robin alternates: every other GET meets the dead target first, and is saved.
    for _ in 0..10 {
        assert_eq!(get(port, "/dead/x", &[]).await.expect("req").status, 200);
    }
    for _ in 0..10 {
        assert_eq!(get(port, "/busy/x", &[]).await.expect("req").status, 200);
    }
    assert_eq!(
        busy_gets.load(Ordering::SeqCst),
        5,
        "every other GET met the 503 first"
    );
    // A target that never answers: the GET is tried on the other one after read_timeout.
    for _ in 0..4 {
        assert_eq!(get(port, "/silent/x", &[]).await.expect("req").status, 200);
    }
    assert_eq!(silent_seen.load(Ordering::SeqCst), 2);
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_retries_total",
            &["dead_one", "connect"]
        ),
        5.0
    );
    assert_eq!(
        metric(&m, "tollgate_upstream_retries_total", &["busy_one", "503"]),
        5.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_retries_total",
            &["silent_one", "timeout"]
        ),
        2.0
    );
    // A POST whose connect failed was never sent: it falls over too (and spends no budget).
    // One the upstream may have read is never sent again: the 503 is passed on.
    let post = |path: &'static str| async move {
        let mut c = Conn::open(port).await.expect("conn");
        c.send("POST", path, &[], "hi").await
    };
    for _ in 0..10 {
        let r = post("/dead/x").await.expect("post");
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let mut busy_answers = 0;
    for _ in 0..10 {
        let r = post("/busy/x").await.expect("post");
        assert!(matches!(r.status, 200 | 503), "{}", r.status);
        busy_answers += usize::from(r.status == 503);
    }
    assert_eq!(busy_answers, 5);
    assert_eq!(
        busy_posts.load(Ordering::SeqCst),
        5,
        "each POST reached one target only"
    );
    let mut timed_out = 0;
    for _ in 0..4 {
        let r = post("/silent/x").await.expect("post");
        assert!(matches!(r.status, 200 | 504), "{}", r.status);
        timed_out += usize::from(r.status == 504);
    }
    assert_eq!(timed_out, 2, "a POST that timed out is not sent again");
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_retries_total",
            &["dead_one", "connect"]
        ),
        10.0,
        "five GETs and five POSTs fell over"
    );
    assert_eq!(
        metric(&m, "tollgate_upstream_retries_total", &["busy_one", "503"]),
        5.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_budget_holds_under_a_full_outage() {
    let ups: Vec<_> = (0..3).map(|_| status_upstream(503)).collect();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["127.0.0.1:{}", "127.0.0.1:{}", "127.0.0.1:{}"]
health_check = false
retry = {{ attempts = 2, on = ["502", "503", "504"], budget = 0.2 }}
[[routes]]
name = "app"
path_prefix = "/"
upstream = "app"
"#,
            ups[0].0, ups[1].0, ups[2].0
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    let requests = 100;
    for _ in 0..requests {
        assert_eq!(get(port, "/", &[]).await.expect("req").status, 503);
    }
    let attempts: usize = ups.iter().map(|u| u.1.load(Ordering::SeqCst)).sum();
    assert!(
        attempts <= requests * 12 / 10,
        "upstream attempts {attempts} <= requests x (1 + budget) = 120"
    );
    assert!(attempts > requests, "the budget was used: {attempts}");
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_upstream_retries_total", &["app", "503"]),
        (attempts - requests) as f64
    );
    assert!(
        metric(
            &m,
            "tollgate_upstream_retry_budget_exhausted_total",
            &["app"]
        ) > 0.0
    );
}

/// Passive outlier ejection (docs/upstreams.md): five 5xx in a row, or five refused connects,
/// take a target out; requests then go to the others only, the ejection is counted and shown;
/// an upstream with `outlier = false` keeps sending the bad target its share; an upstream of
/// one failing target keeps it (passive ejection never empties a pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_targets_are_ejected_but_never_the_last_one() {
    let be = Backend::start().await.expect("backend");
    let (bad, bad_gets, _) = status_upstream(500);
    let (kept, kept_gets, _) = status_upstream(500);
    let (alone, alone_gets, _) = status_upstream(502);
    let dead = free_port();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["127.0.0.1:{bad}", "{be}"]
health_check = false
[upstreams.off]
targets = ["127.0.0.1:{kept}", "{be}"]
health_check = false
outlier = false
[upstreams.refusing]
targets = ["127.0.0.1:{dead}", "{be}"]
health_check = false
outlier = {{ consecutive_failures = 3, ejection = "1h" }}
[upstreams.alone]
targets = ["127.0.0.1:{alone}"]
health_check = false
[[routes]]
name = "app"
path_prefix = "/app"
upstream = "app"
[[routes]]
name = "off"
path_prefix = "/off"
upstream = "off"
[[routes]]
name = "refusing"
path_prefix = "/refusing"
upstream = "refusing"
[[routes]]
name = "alone"
path_prefix = "/alone"
upstream = "alone"
"#,
            be = be.addr
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    // Round robin: every other request meets the bad target, until its fifth 500 in a row.
    let mut fives = 0;
    for _ in 0..30 {
        let r = get(port, "/app/x", &[]).await.expect("req");
        fives += usize::from(r.status == 500);
    }
    assert_eq!(fives, 5, "five 500s, then none");
    assert_eq!(bad_gets.load(Ordering::SeqCst), 5);
    // Without outlier ejection, the bad target keeps half.
    for _ in 0..30 {
        get(port, "/off/x", &[]).await.expect("req");
    }
    assert_eq!(kept_gets.load(Ordering::SeqCst), 15);
    // Refused connects count too (three, as configured): each falls over to the backend, so
    // every request is answered, and the dead target is then out.
    for _ in 0..20 {
        assert_eq!(
            get(port, "/refusing/x", &[]).await.expect("req").status,
            200
        );
    }
    // The only target of a pool is never ejected: every request still reaches it.
    for _ in 0..20 {
        assert_eq!(get(port, "/alone/x", &[]).await.expect("req").status, 502);
    }
    assert_eq!(alone_gets.load(Ordering::SeqCst), 20);
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_ejections_total",
            &["upstream=\"app\""]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_ejections_total",
            &["upstream=\"refusing\""]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_ejections_total",
            &["upstream=\"off\""]
        ),
        0.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_ejections_total",
            &["upstream=\"alone\""]
        ),
        0.0
    );
    let bad_target = format!("target=\"127.0.0.1:{bad}\"");
    assert_eq!(
        metric(&m, "tollgate_upstream_target_ejected", &[&bad_target]),
        1.0
    );
    let alone_target = format!("target=\"127.0.0.1:{alone}\"");
    assert!(
        !m.lines().any(|l| l.starts_with("tollgate_upstream_target_ejected") && l.contains(&alone_target)),
        "{m}"
    );
    // Still healthy by its health check (there is none): ejection is apart from health.
    assert_eq!(
        metric(&m, "tollgate_upstream_target_healthy", &[&bad_target]),
        1.0
    );
}

/// What a client can do to outlier ejection: uploads it stalls make the targets wait and time
/// out, yet are never counted against them (the body was not all sent); the same timeouts
/// with the whole request sent do count, and eject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalling_its_uploads_ejects_no_target() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (a, _) = silent_upstream();
    let (b, _) = silent_upstream();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["127.0.0.1:{a}", "127.0.0.1:{b}"]
health_check = false
read_timeout = "200ms"
outlier = {{ consecutive_failures = 2, max_ejected_percent = 50 }}
[[routes]]
name = "app"
path_prefix = "/"
upstream = "app"
"#
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    // Eight uploads that announce 10 bytes, send one, and stall until the gateway gives up.
    for _ in 0..8 {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\na")
            .await
            .expect("write");
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    }
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_ejections_total",
            &["upstream=\"app\""]
        ),
        0.0,
        "{m}"
    );
    // The control: whole requests that time out do count (two in a row on one target).
    for _ in 0..4 {
        let r = get(port, "/x", &[]).await.expect("req");
        assert_eq!(r.status, 504);
    }
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_ejections_total",
            &["upstream=\"app\""]
        ),
        1.0,
        "{m}"
    );
}

/// A route's `timeouts`: `request` answers 504 once it has passed, however many attempts it
/// took (each gets what is left), and `upstream` stands in for the upstream's
/// `read_timeout`, up or down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_timeouts_cut_its_attempts_to_the_deadline_and_replace_read_timeout() {
    let (a, a_seen) = silent_upstream();
    let (b, b_seen) = silent_upstream();
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.silent]
targets = ["127.0.0.1:{a}", "127.0.0.1:{b}"]
health_check = false
read_timeout = "700ms"
retry = {{ attempts = 1, on = ["timeout"], budget = 1.0 }}
outlier = false
[upstreams.app]
targets = ["{be}"]
health_check = false
read_timeout = "300ms"
[[routes]]
name = "deadline"
path_prefix = "/deadline"
upstream = "silent"
timeouts = {{ request = "800ms" }}
[[routes]]
name = "retried"
path_prefix = "/retried"
upstream = "silent"
[[routes]]
name = "longer"
path_prefix = "/longer"
upstream = "app"
timeouts = {{ upstream = "3s" }}
[[routes]]
name = "shorter"
path_prefix = "/shorter"
upstream = "app"
timeouts = {{ upstream = "100ms" }}
[[routes]]
name = "plain"
path_prefix = "/"
upstream = "app"
"#,
            be = be.addr
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    let seen = || a_seen.load(Ordering::SeqCst) + b_seen.load(Ordering::SeqCst);
    let timed = |path: &'static str| async move {
        let t = std::time::Instant::now();
        let r = get(port, path, &[]).await.expect("request");
        (r.status, t.elapsed())
    };

    // The control: two attempts of 700 ms each.
    let before = seen();
    let (status, took) = timed("/retried").await;
    assert_eq!(status, 504);
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    assert_eq!(seen() - before, 2);
    // The deadline: the first attempt's 700 ms, then the 100 ms left to the second.
    let before = seen();
    let (status, took) = timed("/deadline").await;
    assert_eq!(status, 504);
    assert!(
        took >= Duration::from_millis(780) && took < Duration::from_millis(1300),
        "{took:?}"
    );
    assert_eq!(seen() - before, 2, "the retry was given what was left");

    assert_eq!(timed("/plain?delay=600ms").await.0, 504);
    assert_eq!(timed("/longer?delay=600ms").await.0, 200);
    assert_eq!(timed("/plain?delay=200ms").await.0, 200);
    assert_eq!(timed("/shorter?delay=200ms").await.0, 504);
}

/// `retry.targets`: with one target, nginx's way (the default, `"untried"`) never retries it;
/// `"any"` (Envoy's, the Gateway API's) sends the request to it again, after `backoff`, for
/// any status `on` names (500 here), within `attempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_targets_any_resends_to_the_one_target_after_its_backoff() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.untried]
targets = ["{be}"]
health_check = false
outlier = false
retry = {{ attempts = 2, on = ["500"], budget = 2 }}
[upstreams.again]
targets = ["{be}"]
health_check = false
outlier = false
retry = {{ attempts = 2, on = ["500"], budget = 2, targets = "any", backoff = "200ms" }}
[[routes]]
name = "untried"
path_prefix = "/untried"
upstream = "untried"
[[routes]]
name = "again"
path_prefix = "/again"
upstream = "again"
"#,
            be = be.addr
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    // `uuid`/`succeedAfter`: the backend fails a request's first N attempts with a 500.
    let ask = |path: &'static str, uuid: &'static str, after: u32| async move {
        let t = std::time::Instant::now();
        let r = get(
            port,
            &format!("{path}?uuid={uuid}&succeedAfter={after}&responseCode=500"),
            &[],
        )
        .await
        .expect("request");
        (r.status, t.elapsed())
    };
    assert_eq!(
        ask("/untried", "a", 1).await.0,
        500,
        "no untried target: no retry"
    );
    let (status, took) = ask("/again", "b", 2).await;
    assert_eq!(status, 200, "two retries of the one target");
    assert!(took >= Duration::from_millis(400), "two backoffs: {took:?}");
    assert_eq!(
        ask("/again", "c", 3).await.0,
        500,
        "attempts spent: the last 500 is the client's"
    );
    let m = metrics(admin).await;
    assert!(
        m.contains(r#"tollgate_upstream_retries_total{on="500",upstream="again"} 4"#),
        "{m}"
    );
}

/// A wait the route's `timeouts.request` cut is the route's deadline, not the target's
/// fault: it never ejects the target nor spends a retry. The control, the same silence
/// past the upstream's own `read_timeout`, ejects it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_cut_never_counts_against_the_target() {
    let (a, a_seen) = silent_upstream();
    let (a2, a2_seen) = silent_upstream();
    let (b, b_seen) = silent_upstream();
    let (b2, _) = silent_upstream();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.cut]
targets = ["127.0.0.1:{a}", "127.0.0.1:{a2}"]
health_check = false
read_timeout = "5s"
retry = {{ attempts = 2, on = ["timeout"], budget = 2, targets = "any" }}
outlier = {{ consecutive_failures = 2, max_ejected_percent = 100 }}
[upstreams.slow]
targets = ["127.0.0.1:{b}", "127.0.0.1:{b2}"]
health_check = false
read_timeout = "200ms"
outlier = {{ consecutive_failures = 2, max_ejected_percent = 100 }}
[[routes]]
name = "cut"
path_prefix = "/cut"
upstream = "cut"
timeouts = {{ request = "200ms" }}
[[routes]]
name = "slow"
path_prefix = "/slow"
upstream = "slow"
"#
        ),
    );
    let _gw = running(std::path::Path::new(BIN), &toml, port, admin).await;
    // Two targets each (ejection never empties a pool), two failures in a row eject.
    for _ in 0..4 {
        assert_eq!(get(port, "/cut", &[]).await.expect("request").status, 504);
        assert_eq!(get(port, "/slow", &[]).await.expect("request").status, 504);
    }
    let m = metrics(admin).await;
    assert!(
        m.contains(r#"tollgate_upstream_ejections_total{upstream="slow"} 1"#),
        "the control ejects: {m}"
    );
    assert!(
        !m.contains(r#"tollgate_upstream_ejections_total{upstream="cut"}"#),
        "a deadline cut ejects nothing: {m}"
    );
    assert!(
        !m.contains(r#"tollgate_upstream_retries_total{on="timeout",upstream="cut"}"#),
        "{m}"
    );
    // One attempt per request: the deadline left no time for another.
    assert_eq!(
        a_seen.load(Ordering::SeqCst) + a2_seen.load(Ordering::SeqCst),
        4
    );
    assert!(b_seen.load(Ordering::SeqCst) >= 2);
}
