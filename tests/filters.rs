//! End-to-end tests of the edge features (issue 28), with real processes: body caps on
//! declared, chunked and lying bodies (the upstream counts what it was sent), CORS preflights
//! answered at the edge and never limited, header rules both ways and the spellings a client
//! tries around them, host aliases and www redirects, compression negotiated and skipped,
//! and bandwidth held to its rate.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// A raw upstream that counts every byte it is sent (head and body) and answers 200 only
/// once the request's peer stops sending (or after 2 s): what the gateway forwarded, exactly.
fn counting_upstream() -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 16384];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    s.fetch_add(n, Ordering::SeqCst);
                }
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
            });
        }
    });
    (port, seen)
}

/// Sends `head` then `body` on one connection; the whole answer the gateway wrote.
fn raw(port: u16, head: &str, body: &[u8]) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5))).ok();
    c.write_all(head.as_bytes()).expect("head");
    // The gateway may answer and close before the body is all in: that is the point.
    for piece in body.chunks(4096) {
        if c.write_all(piece).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn chunked(total: usize, piece: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut left = total;
    while left > 0 {
        let n = left.min(piece);
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend(std::iter::repeat_n(b'a', n));
        out.extend_from_slice(b"\r\n");
        left -= n;
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_caps_on_declared_chunked_and_lying_bodies() {
    let be = Arc::new(Backend::start().await.expect("backend"));
    let (count_port, seen) = counting_upstream();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"max_body_bytes = 1000

[upstreams.app]
targets = ["{be}"]
[upstreams.counting]
targets = ["127.0.0.1:{count_port}"]
read_timeout = "5s"

[limits.tight]
key = "client_ip"
rate = "2/m"
burst = 2

[[routes]]
name = "counting"
path_prefix = "/count"
upstream = "counting"

[[routes]]
name = "bigger"
path_prefix = "/bigger"
max_body_bytes = "2k"
upstream = "app"

[[routes]]
name = "uncapped"
path_prefix = "/uncapped"
max_body_bytes = 0
upstream = "app"

[[routes]]
name = "limited"
path_prefix = "/limited"
limits = ["tight"]
tarpit = {{ delay = "200ms", max_concurrent = 4 }}
upstream = "app"

[[routes]]
name = "app"
path_prefix = "/"
upstream = "app"
"#,
            be = be.addr
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let host = format!("127.0.0.1:{port}");
    let outer = (be.clone(), seen.clone());
    tokio::task::spawn_blocking(move || {
        // A declared length over the cap: 413 before a byte is read or an upstream chosen,
        // and the connection closed (its body is never read as a next request).
        let hits = be.hits();
        let a = raw(
            port,
            &format!("POST /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1001\r\n\r\n"),
            &[b'a'; 1001],
        );
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
        assert!(a.contains("BODY_TOO_LARGE"), "{a}");
        assert!(a.contains("application/problem+json"), "{a}");
        assert_eq!(a.matches("HTTP/1.1").count(), 1, "one answer only: {a}");
        assert_eq!(be.hits(), hits, "the upstream was never asked");
        // At the cap: served.
        let a = raw(
            port,
            &format!("POST /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n"),
            &[b'a'; 1000],
        );
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        // A route's own cap, larger or none.
        let a = raw(
            port,
            &format!("POST /bigger HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2048\r\nConnection: close\r\n\r\n"),
            &[b'a'; 2048],
        );
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        let a = raw(
            port,
            &format!("POST /bigger HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2049\r\n\r\n"),
            &[b'a'; 2049],
        );
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
        let a = raw(
            port,
            &format!("POST /uncapped HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n"),
            &[b'a'; 100_000],
        );
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");

        // A chunked body is counted as it streams: cut at the cap, 413, and the upstream
        // was sent no more than the cap (plus the head and the chunk framing).
        let body = chunked(50_000, 300);
        let a = raw(
            port,
            &format!("POST /count HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"),
            &body,
        );
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
        assert!(a.contains("BODY_TOO_LARGE"), "{a}");
        std::thread::sleep(Duration::from_millis(300));
        let upstream_got = seen.load(Ordering::SeqCst);
        assert!(upstream_got < 1000 + 1024, "the upstream was sent {upstream_got} bytes");

        // A body that lies about its length: the declared length is all that is read as
        // body; what follows is not a request (400 while the first still waits for its
        // upstream), and never reaches the upstream.
        let before = seen.load(Ordering::SeqCst);
        let a = raw(
            port,
            &format!("POST /count HTTP/1.1\r\nHost: {host}\r\nContent-Length: 10\r\n\r\n"),
            &[b'z'; 5000],
        );
        assert!(a.starts_with("HTTP/1.1 200") || a.starts_with("HTTP/1.1 400"), "{a}");
        std::thread::sleep(Duration::from_millis(300));
        let sent = seen.load(Ordering::SeqCst) - before;
        assert!(sent < 10 + 1024, "the upstream was sent {sent} bytes");
        // Content-Length and Transfer-Encoding together: the chunked framing is read (RFC
        // 9112 6.3), counted, and the connection closed; never the declared 5 bytes.
        let before = seen.load(Ordering::SeqCst);
        let a = raw(
            port,
            &format!("POST /count HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            &chunked(5000, 500),
        );
        assert!(a.starts_with("HTTP/1.1 400") || a.starts_with("HTTP/1.1 413"), "{a}");
        assert!(a.contains("connection: close"), "{a}");
        std::thread::sleep(Duration::from_millis(300));
        let sent = seen.load(Ordering::SeqCst) - before;
        assert!(sent < 1000 + 1024, "the upstream was sent {sent} bytes");

        // Raced with refusals and a tarpit: an oversized body is refused for its size first
        // (no token spent), whatever the limit says.
        for _ in 0..4 {
            let a = raw(
                port,
                &format!("POST /limited HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5000\r\n\r\n"),
                &[b'a'; 5000],
            );
            assert!(a.starts_with("HTTP/1.1 413"), "{a}");
        }
        let a = raw(
            port,
            &format!("POST /limited HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"),
            b"small",
        );
        assert!(a.starts_with("HTTP/1.1 200"), "the limit's tokens were not spent by 413s: {a}");
    })
    .await
    .expect("raw client");
    let (be, seen) = outer;
    // HTTP/2 (h2c): a declared length over the cap is 413; a body streamed without one is
    // counted as it arrives and cut at the cap, the upstream sent no more than the cap.
    let h2 = |len: Option<usize>, total: usize, path: &'static str| async move {
        use http_body_util::BodyExt;
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        let chunks: Vec<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>> = (0..total
            / 500)
            .map(|_| {
                Ok(hyper::body::Frame::data(bytes::Bytes::from(vec![
                    b'a';
                    500
                ])))
            })
            .collect();
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
        let mut req = hyper::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{port}{path}"));
        if let Some(n) = len {
            req = req.header("content-length", n);
        }
        let req = req.body(body).map_err(std::io::Error::other)?;
        match tokio::time::timeout(Duration::from_secs(5), send.send_request(req)).await {
            Ok(Ok(resp)) => {
                let status = resp.status().as_u16();
                let body = resp
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                Ok::<_, std::io::Error>((status, String::from_utf8_lossy(&body).into_owned()))
            }
            // The stream reset once the cap was crossed after the answer began: no status.
            Ok(Err(e)) => Ok((0, e.to_string())),
            Err(_) => Err(std::io::Error::other("no answer in 5 s")),
        }
    };
    let hits = be.hits();
    let (status, body) = h2(Some(5000), 5000, "/x").await.expect("h2 declared");
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("BODY_TOO_LARGE"), "{body}");
    assert_eq!(be.hits(), hits, "the upstream was never asked");
    let before = seen.load(Ordering::SeqCst);
    let (status, body) = h2(None, 50_000, "/count").await.expect("h2 streamed");
    assert!(status == 413 || status == 0, "{status} {body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = seen.load(Ordering::SeqCst) - before;
    assert!(
        sent < 1000 + 1024,
        "the upstream was sent {sent} bytes over h2"
    );
    let (status, _) = h2(None, 1000, "/x").await.expect("h2 at the cap");
    assert_eq!(status, 200, "a streamed body at the cap passes");
    let m = metrics(admin).await;
    assert!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"body_too_large\"", "route=\"app\""]
        ) >= 1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"body_too_large\"", "route=\"counting\""]
        ) >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_at_the_edge_and_fields_on_every_answer() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]

[limits.one]
key = "client_ip"
rate = "1/m"
burst = 1

[[routes]]
name = "api"
path_prefix = "/"
upstream = "app"
limits = ["one"]
cors = {{ allow_origins = ["https://app.example.com", "https://*.example.org"], allow_methods = ["GET", "POST"], allow_headers = ["X-Token"], expose_headers = ["X-Total"], allow_credentials = true, max_age = 600 }}
"#,
            be = be.addr
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let preflight = |origin: &'static str| async move {
        let mut c = Conn::open(port).await.expect("conn");
        c.send(
            "OPTIONS",
            "/orders",
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
            ],
            "",
        )
        .await
        .expect("preflight")
    };
    // Allowed origins (any case), many times: 204 every time, never a 429, never proxied.
    for origin in [
        "https://app.example.com",
        "https://APP.example.com",
        "https://a.b.example.org",
    ] {
        for _ in 0..3 {
            let r = preflight(origin).await;
            assert_eq!(r.status, 204, "{r:?}");
            assert_eq!(r.header("access-control-allow-origin"), Some(origin));
            assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
            assert_eq!(r.header("access-control-allow-methods"), Some("GET, POST"));
            assert_eq!(r.header("access-control-allow-headers"), Some("X-Token"));
            assert_eq!(r.header("access-control-max-age"), Some("600"));
            assert!(r.header("vary").is_some_and(|v| v.contains("Origin")));
        }
    }
    // Origins not allowed: answered, with no CORS field at all.
    for origin in [
        "null",
        "https://app.example.com.evil.net",
        "https://evilapp.example.com",
        "http://app.example.com",
        "https://example.org",
        "https://app.example.com:444",
    ] {
        let r = preflight(origin).await;
        assert_eq!(r.status, 204, "{origin}");
        assert_eq!(r.header("access-control-allow-origin"), None, "{origin}");
        assert_eq!(
            r.header("access-control-allow-credentials"),
            None,
            "{origin}"
        );
    }
    assert_eq!(be.hits(), 0, "no preflight reached the upstream");
    // An actual call: the origin echoed (never `*` with credentials), Vary, the exposed fields.
    let r = get(port, "/orders", &[("origin", "https://app.example.com")])
        .await
        .expect("get");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-expose-headers"), Some("X-Total"));
    assert!(r.header("vary").is_some_and(|v| v.contains("Origin")));
    // The limit's refusal carries them too: the page can read its 429.
    let r = get(port, "/orders", &[("origin", "https://app.example.com")])
        .await
        .expect("get");
    assert_eq!(r.status, 429);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    // A disallowed origin's refusal names no origin.
    let r = get(port, "/orders", &[("origin", "https://evil.net")])
        .await
        .expect("get");
    assert_eq!(r.header("access-control-allow-origin"), None);
    // Two Origin fields: neither is believed.
    let mut c = Conn::open(port).await.expect("conn");
    let r = c
        .send(
            "OPTIONS",
            "/",
            &[
                ("origin", "https://app.example.com"),
                ("origin", "https://evil.net"),
                ("access-control-request-method", "GET"),
            ],
            "",
        )
        .await
        .expect("two origins");
    assert_eq!(r.header("access-control-allow-origin"), None);
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_cors_preflights_total",
            &["route=\"api\"", "result=\"allowed\""]
        ),
        9.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_cors_preflights_total",
            &["route=\"api\"", "result=\"refused\""]
        ),
        7.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_rules_both_ways_upstream_host_prefix_aliases_and_www() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"request_headers = {{ set = {{ "X-Env" = "prod" }}, remove = ["X-Debug"] }}
response_headers = {{ set = {{ "X-Frame-Options" = "DENY" }} }}

[upstreams.app]
targets = ["{be}"]

[[routes]]
name = "api"
host = ["api.example.com", "api.example.net"]
path_prefix = "/app/"
strip_prefix = "/app"
x_forwarded_prefix = true
upstream_host = "internal.svc"
upstream = "app"
request_headers = {{ set = {{ "X-Who" = "$client_ip via $route ($scheme, $host) $$5" }}, add = {{ "X-Tag" = "a" }}, remove = ["Cookie"] }}
response_headers = {{ set = {{ "Cache-Control" = "no-store" }}, remove = ["X-Powered-By"] }}

[[routes]]
name = "site"
host = "example.com"
www_redirect = true
path_prefix = "/"
upstream = "app"

[[routes]]
name = "www-named"
host = "www.example.net"
www_redirect = true
path_prefix = "/"
respond = {{ status = 200, body = "www" }}
"#,
            be = be.addr
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    for host in ["api.example.com", "API.example.net."] {
        let r = get(
            port,
            "/app/v1/x?q=1",
            &[
                ("host", host),
                ("x-env", "client"),
                ("x-debug", "1"),
                ("cookie", "s=1"),
                ("x-tag", "client"),
                ("x-forwarded-prefix", "/forged"),
                ("x_forwarded_prefix", "/forged2"),
            ],
        )
        .await
        .expect("get");
        assert_eq!(r.status, 200, "{r:?}");
        let j = r.json();
        let h = &j["headers"];
        assert_eq!(j["path"], "/v1/x?q=1");
        assert_eq!(h["x-env"], "prod", "set replaces the client's");
        assert!(h.get("x-debug").is_none());
        assert!(h.get("cookie").is_none());
        assert_eq!(h["x-tag"], "client, a", "add appends");
        let want_host = host.to_ascii_lowercase();
        let want_host = want_host.trim_end_matches('.');
        assert_eq!(
            h["x-who"],
            format!("127.0.0.1 via api (http, {want_host}) $5")
        );
        assert_eq!(h["host"], "internal.svc");
        assert_eq!(
            h["x-forwarded-prefix"], "/app",
            "the gateway's, never the client's"
        );
        assert!(h["x-forwarded-for"]
            .as_str()
            .is_some_and(|v| v.ends_with("127.0.0.1")));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }
    // Another host: no route.
    let r = get(port, "/app/v1", &[("host", "api.example.org")])
        .await
        .expect("get");
    assert_eq!(r.status, 404);
    // www redirects: the other spelling answers 308 to the named host, port, path and
    // query kept; the named host is served.
    let r = get(
        port,
        "/p/a?x=1&y=%20",
        &[("host", &format!("www.example.com:{port}"))],
    )
    .await
    .expect("get");
    assert_eq!(r.status, 308, "{r:?}");
    assert_eq!(
        r.header("location"),
        Some(format!("http://example.com:{port}/p/a?x=1&y=%20").as_str())
    );
    let r = get(port, "/p", &[("host", "example.com")])
        .await
        .expect("get");
    assert_eq!(r.status, 200);
    let r = get(port, "/q?z", &[("host", "example.net")])
        .await
        .expect("get");
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("http://www.example.net/q?z"));
    let r = get(port, "/q", &[("host", "www.example.net")])
        .await
        .expect("get");
    assert_eq!((r.status, r.body.as_str()), (200, "www"));
    // Neither spelling of another name.
    let r = get(port, "/", &[("host", "www.www.example.com")])
        .await
        .expect("get");
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_negotiated_and_skipped_and_bandwidth_held() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]

[[routes]]
name = "zip"
path_prefix = "/zip"
compress = true
upstream = "app"

[[routes]]
name = "slow"
path_prefix = "/big"
limit_rate = 200000
limit_rate_after = 100000
upstream = "app"
"#,
            be = be.addr
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let pad = "p".repeat(2000);
    let path = format!("/zip/{pad}");
    let url = format!("http://127.0.0.1:{port}{path}");
    // curl decodes what it asked for: the JSON answer comes back whole.
    for (accept, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("gzip, br;q=0.5", "gzip"),
    ] {
        let out = Command::new("curl")
            .args(["-s", "-D", "-", "--compressed", "-H"])
            .arg(format!("Accept-Encoding: {accept}"))
            .arg(&url)
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        assert!(
            text.contains(&format!("content-encoding: {coding}\r\n")),
            "{accept}: {text}"
        );
        assert!(text.contains("vary: accept-encoding"), "{text}");
        assert!(text.contains(&pad), "the body decodes whole");
    }
    // Skipped: nothing acceptable, q=0, HEAD, a 206, an answer already encoded.
    for accept in ["identity", "gzip;q=0", ""] {
        let r = get(port, &path, &[("accept-encoding", accept)])
            .await
            .expect("get");
        assert_eq!(r.header("content-encoding"), None, "{accept}");
        assert!(r.body.contains(&pad));
    }
    let r = get(
        port,
        &path,
        &[("accept-encoding", "gzip"), ("x-want-status", "206")],
    )
    .await
    .expect("get");
    assert_eq!((r.status, r.header("content-encoding")), (206, None));
    let mut c = Conn::open(port).await.expect("conn");
    let r = c
        .send("HEAD", &path, &[("accept-encoding", "gzip")], "")
        .await
        .expect("head");
    assert_eq!(r.header("content-encoding"), None);
    // A short answer is not worth it.
    let r = get(
        port,
        "/zip",
        &[("accept-encoding", "gzip"), ("x-want-status", "404")],
    )
    .await
    .expect("get");
    assert_eq!(r.header("content-encoding"), None);

    // Bandwidth: 100 kB fast, then 200 kB/s.
    let t0 = Instant::now();
    let r = get(port, "/big?bytes=700000", &[]).await.expect("big");
    let took = t0.elapsed().as_secs_f64();
    assert_eq!(r.body.len(), 700_000);
    let rate = 600_000.0 / took;
    assert!(
        (180_000.0..=220_000.0).contains(&rate),
        "{rate:.0} B/s over {took:.2} s"
    );
}

/// `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`: what the upstream says of
/// itself (a Location, a Refresh, a cookie's Domain and Path) reaches the client in the
/// route's terms; another route, and what matches nothing, is left as the upstream said it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstreams_urls_and_cookies_are_said_back_in_the_clients_terms() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]

[[routes]]
name = "shop"
path_prefix = "/shop/"
upstream = "app"
proxy_redirect = [{{ from = "http://app.internal:8080/", to = "https://shop.example/" }}]
proxy_cookie_domain = {{ from = ".app.internal", to = "shop.example" }}
proxy_cookie_path = [{{ from = "/internal/", to = "/shop/" }}]

[[routes]]
name = "plain"
path_prefix = "/"
upstream = "app"
"#,
            be = be.addr
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let ask = |path: &'static str, field: &'static str| async move {
        get(port, path, &[("x-want-header", field)])
            .await
            .expect("get")
    };
    let r = ask("/shop/a", "Location: http://app.internal:8080/cart?x=1").await;
    assert_eq!(r.header("location"), Some("https://shop.example/cart?x=1"));
    let r = ask("/shop/a", "Refresh: 3; url=http://app.internal:8080/done").await;
    assert_eq!(
        r.header("refresh"),
        Some("3; url=https://shop.example/done")
    );
    let r = ask(
        "/shop/a",
        "Set-Cookie: sid=1; Domain=APP.internal; Path=/internal/x; HttpOnly",
    )
    .await;
    assert_eq!(
        r.header("set-cookie"),
        Some("sid=1; Domain=shop.example; Path=/shop/x; HttpOnly")
    );
    // Not a prefix, another host, another route: as the upstream said it.
    for (path, field, name, want) in [
        (
            "/shop/a",
            "Location: /login?next=http://app.internal:8080/",
            "location",
            "/login?next=http://app.internal:8080/",
        ),
        (
            "/shop/a",
            "Set-Cookie: k=v; Domain=app.internal.evil",
            "set-cookie",
            "k=v; Domain=app.internal.evil",
        ),
        (
            "/other",
            "Location: http://app.internal:8080/cart",
            "location",
            "http://app.internal:8080/cart",
        ),
    ] {
        let r = ask(path, field).await;
        assert_eq!(r.header(name), Some(want), "{path} {field}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_gets_the_upstreams_copy_and_never_holds_the_client() {
    let be = Backend::start().await.expect("backend");
    let mirror = Recorder::start(Duration::ZERO).await.expect("mirror");
    let slow = Recorder::start(Duration::from_secs(5))
        .await
        .expect("slow mirror");
    let dead = free_port();
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]

[limits.one]
key = "client_ip"
rate = "1/m"
burst = 1

[[routes]]
name = "copied"
path_prefix = "/copied"
upstream = "app"
request_headers = {{ set = {{ "X-Route" = "copied" }}, remove = ["X-Secret"] }}
mirror = {{ url = "http://{m}$request_uri", host = "mirror.example" }}

[[routes]]
name = "headonly"
path_prefix = "/head"
upstream = "app"
mirror = {{ url = "http://{m}/copy$is_args$args", body = false }}

[[routes]]
name = "slow"
path_prefix = "/slow"
upstream = "app"
mirror = "http://{slow}"

[[routes]]
name = "down"
path_prefix = "/down"
upstream = "app"
mirror = {{ url = "http://127.0.0.1:{dead}", timeout = "2s" }}

[[routes]]
name = "limited"
path_prefix = "/limited"
upstream = "app"
limits = ["one"]
mirror = "http://{m}"
"#,
            be = be.addr,
            m = mirror.addr,
            slow = slow.addr,
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let local = IpAddr::from([127, 0, 0, 1]);
    let r = request_from(
        local,
        port,
        "POST",
        "/copied/a?x=1",
        &[("x-secret", "s3cret"), ("content-type", "text/plain")],
        "hello",
    )
    .await
    .expect("copied");
    assert_eq!(r.status, 200);
    let up = r.json();
    let copied = eventually(Duration::from_secs(3), || async {
        !mirror.seen().is_empty()
    })
    .await;
    assert!(copied, "the mirror got its copy");
    let c = &mirror.seen()[0];
    assert_eq!(
        (c.method.as_str(), c.target.as_str()),
        ("POST", "/copied/a?x=1")
    );
    assert_eq!(&c.body[..], b"hello");
    let h = |n: &str| {
        c.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(h("host").as_deref(), Some("mirror.example"));
    assert_eq!(h("content-length").as_deref(), Some("5"));
    // What the upstream was sent, the mirror was: the route's rules, the gateway's fields.
    assert_eq!(h("x-route").as_deref(), Some("copied"));
    assert_eq!(
        h("x-secret"),
        None,
        "removed for the upstream, so for the mirror"
    );
    assert_eq!(
        h("x-request-id").as_deref(),
        up["headers"]["x-request-id"].as_str()
    );
    assert_eq!(h("x-forwarded-for").as_deref(), Some("127.0.0.1"));

    // body = false: the head alone, and the URL's own path with the query.
    let r = request_from(local, port, "POST", "/head/b?y=2", &[], "not copied")
        .await
        .expect("head only");
    assert_eq!(r.status, 200);
    assert!(
        eventually(Duration::from_secs(3), || async {
            mirror.seen().len() == 2
        })
        .await
    );
    let c = &mirror.seen()[1];
    assert_eq!(c.target, "/copy?y=2");
    assert!(c.body.is_empty() && c.headers.get("content-length").is_none_or(|v| v == "0"));
    assert_eq!(
        c.headers.get("host").map(|v| v.as_bytes()),
        Some(mirror.addr.to_string().as_bytes())
    );

    // A slow mirror and a dead one: the client's answer neither waits nor fails.
    for path in ["/slow/x", "/down/x"] {
        let t = Instant::now();
        let r = get(port, path, &[]).await.expect(path);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{path} took {:?}",
            t.elapsed()
        );
    }
    assert!(eventually(Duration::from_secs(3), || async { slow.seen().len() == 1 }).await);
    let failed = eventually(Duration::from_secs(5), || async {
        metric(
            &metrics(admin).await,
            "tollgate_mirror_requests_total",
            &["route=\"down\"", "result=\"failed\""],
        ) == 1.0
    })
    .await;
    assert!(failed, "{}", metrics(admin).await);

    // Refused requests never reach the upstream, so never the mirror.
    let before = mirror.seen().len();
    let first = get(port, "/limited/1", &[]).await.expect("limited");
    let second = get(port, "/limited/2", &[]).await.expect("limited");
    assert_eq!((first.status, second.status), (200, 429));
    assert!(
        eventually(Duration::from_secs(3), || async {
            mirror.seen().len() == before + 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = mirror.seen();
    assert_eq!(seen.len(), before + 1, "the refused one was not copied");
    assert_eq!(seen[before].target, "/limited/1");
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_mirror_requests_total",
            &["route=\"copied\"", "result=\"answered\""]
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_pages_answer_listed_statuses_as_ingress_nginx_asks_its_default_backend() {
    let be = Backend::start().await.expect("backend");
    let pages = Recorder::pages().await.expect("pages");
    let (dead, dead_pages) = (free_port(), free_port());
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]
[upstreams.pages]
targets = ["{pages}"]
[upstreams.dead]
targets = ["127.0.0.1:{dead}"]
health_check = false
[upstreams.deadpages]
targets = ["127.0.0.1:{dead_pages}"]
health_check = false

[[routes]]
name = "paged"
path_prefix = "/paged"
upstream = "app"
error_pages = {{ codes = [404, 503], upstream = "pages", headers = {{ "X-Namespace" = "shop", "X-Ingress-Name" = "web" }} }}

[[routes]]
name = "down"
path_prefix = "/down"
upstream = "dead"
error_pages = {{ codes = [502], upstream = "pages" }}

[[routes]]
name = "nopage"
path_prefix = "/nopage"
upstream = "app"
error_pages = {{ codes = [500], upstream = "deadpages" }}
"#,
            be = be.addr,
            pages = pages.addr,
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let r = get(
        port,
        "/paged/item?q=1",
        &[
            ("x-want-status", "404"),
            ("accept", "text/html"),
            ("cookie", "session=s3cret"),
            ("authorization", "Bearer t0ken"),
            ("host", "shop.example"),
        ],
    )
    .await
    .expect("paged");
    assert_eq!((r.status, r.body.as_str()), (404, "page for 404"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    let seen = pages.seen();
    assert_eq!(seen.len(), 1);
    let p = &seen[0];
    let h = |n: &str| {
        p.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!((p.method.as_str(), p.target.as_str()), ("GET", "/?q=1"));
    assert_eq!(h("x-code").as_deref(), Some("404"));
    assert_eq!(h("x-format").as_deref(), Some("text/html"));
    assert_eq!(h("x-original-uri").as_deref(), Some("/paged/item?q=1"));
    assert_eq!(h("x-request-id").as_deref(), r.header("x-request-id"));
    assert_eq!(h("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(h("host").as_deref(), Some("shop.example"));
    assert_eq!(h("x-namespace").as_deref(), Some("shop"));
    assert_eq!(h("x-ingress-name").as_deref(), Some("web"));
    assert_eq!(
        (h("cookie"), h("authorization")),
        (None, None),
        "the client's credentials stay the application's"
    );

    // An upstream error without a body (its framing carries none: the page is written in
    // its place and the connection closed after it), a POST.
    let r = request_from(
        IpAddr::from([127, 0, 0, 1]),
        port,
        "POST",
        "/paged/form",
        &[("x-want-status", "503"), ("x-want-empty", "1")],
        "a=1",
    )
    .await
    .expect("empty 503");
    assert_eq!((r.status, r.body.as_str()), (503, "page for 503"));
    // With a body: the page's length frames the answer, nothing of the upstream's leaks, and
    // the connection carries the next request.
    let mut conn = Conn::open(port).await.expect("conn");
    for _ in 0..2 {
        let r = conn
            .send("GET", "/paged/ok", &[("x-want-status", "503")], "")
            .await
            .expect("same connection");
        assert_eq!((r.status, r.body.as_str()), (503, "page for 503"));
    }
    assert_eq!(pages.seen()[1].method, "POST");
    // HEAD: the page's head alone (its length, no body), and the connection goes on.
    let r = conn
        .send("HEAD", "/paged/h", &[("x-want-status", "404")], "")
        .await
        .expect("head");
    assert_eq!((r.status, r.body.as_str()), (404, ""));
    assert_eq!(r.header("content-length"), Some("12"), "{:?}", r.headers);
    assert_eq!(
        pages.seen().last().map(|p| p.method.clone()).as_deref(),
        Some("HEAD")
    );
    let r = conn
        .send("GET", "/paged/after", &[("x-want-status", "404")], "")
        .await
        .expect("after the head");
    assert_eq!((r.status, r.body.as_str()), (404, "page for 404"));
    // A status not listed passes as the upstream said it.
    let r = get(port, "/paged/x", &[("x-want-status", "500")])
        .await
        .expect("500");
    assert_eq!(r.status, 500);
    assert!(r.body.contains("\"path\""), "{}", r.body);
    // The gateway's own failure to proxy, listed: the page instead of the problem.
    let r = get(port, "/down/x", &[]).await.expect("down");
    assert_eq!((r.status, r.body.as_str()), (502, "page for 502"));
    // A page that cannot be had: the upstream's answer, whole; counted.
    let r = get(port, "/nopage/x", &[("x-want-status", "500")])
        .await
        .expect("nopage");
    assert_eq!(r.status, 500);
    assert!(r.body.contains("\"path\""), "{}", r.body);
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_error_pages_total",
            &["route=\"paged\"", "result=\"served\""]
        ),
        6.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_error_pages_total",
            &["route=\"nopage\"", "result=\"failed\""]
        ),
        1.0,
        "{m}"
    );
}

/// An API key the route's auth reads from the query (hidden from the upstream) is never
/// shown to the route's mirror or its error page either: not in the copy's target, not in
/// the page's query nor its X-Original-URI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_api_key_reaches_neither_the_mirror_nor_the_error_page() {
    let be = Backend::start().await.expect("backend");
    let mirror = Recorder::start(Duration::ZERO).await.expect("mirror");
    let pages = Recorder::pages().await.expect("pages");
    let dir = temp_dir("mirror-keys");
    let keys = dir.join("keys");
    std::fs::write(&keys, "acme  acme-key-0123456789abcdef\n").expect("keys");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[upstreams.app]
targets = ["{be}"]
[upstreams.pages]
targets = ["{pages}"]

[[routes]]
name = "keyed"
path_prefix = "/v1"
upstream = "app"
auth = {{ api_key = {{ query = "api_key", keys_file = "{keys}" }} }}
mirror = "http://{m}$request_uri"
error_pages = {{ codes = [404], upstream = "pages" }}
"#,
            be = be.addr,
            pages = pages.addr,
            m = mirror.addr,
            keys = keys.display(),
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let r = get(
        port,
        "/v1/a?x=1&api_key=acme-key-0123456789abcdef&y=2",
        &[("x-want-status", "404")],
    )
    .await
    .expect("keyed");
    assert_eq!((r.status, r.body.as_str()), (404, "page for 404"));
    assert!(
        eventually(Duration::from_secs(3), || async {
            !mirror.seen().is_empty()
        })
        .await
    );
    let copy = &mirror.seen()[0];
    assert_eq!(copy.target, "/v1/a?x=1&y=2");
    let page = &pages.seen()[0];
    assert_eq!(page.target, "/?x=1&y=2");
    assert_eq!(
        page.headers
            .get("x-original-uri")
            .and_then(|v| v.to_str().ok()),
        Some("/v1/a?x=1&y=2")
    );
}
