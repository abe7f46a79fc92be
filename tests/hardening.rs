//! The edge against hostile clients (issue 11): every spelling of a protected path or host meets
//! its route's limits and lists or is refused; keys and lists read unambiguous input; every
//! connection has deadlines and bounds; churn cannot evict what protects; nothing secret is
//! logged; listen addresses are checked. Raw sockets where the spelling or the timing is the
//! point (a client library would tidy the request), the built `tollgate` binary, a loopback
//! backend that reports what it was sent.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

async fn start(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(Path::new(BIN), toml, port, admin).await
}

fn server(port: u16, admin: u16, extra: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\nthreads = 2\n{extra}\n"
    )
}

/// A response read off a raw socket: its status (0 when the connection closed without one),
/// the whole text, and how long until the connection closed.
struct Raw {
    status: u16,
    text: String,
    closed_after: Duration,
}

/// Reads until the peer closes (or 15 s), from `t0`.
async fn read_to_close(s: &mut TcpStream, t0: Instant) -> Raw {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let limit = Duration::from_secs(15);
    loop {
        match tokio::time::timeout(limit.saturating_sub(t0.elapsed()), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Raw {
        status,
        text,
        closed_after: t0.elapsed(),
    }
}

/// `bytes` written on a new connection, and what came back until it closed.
async fn exchange(port: u16, bytes: &[u8]) -> Raw {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(bytes).await.expect("write");
    read_to_close(&mut s, Instant::now()).await
}

/// One request written as given (with `Connection: close` added), its response read whole.
async fn raw(port: u16, request_line: &str, headers: &[(&str, &str)]) -> Raw {
    let mut head = format!("{request_line}\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str("Host: 127.0.0.1\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    exchange(port, head.as_bytes()).await
}

/// The server table and one route, `/` to the upstream `app` at `target`.
fn one_route(port: u16, admin: u16, target: std::net::SocketAddr) -> String {
    format!(
        "{}\n[upstreams.app]\ntargets = [\"{target}\"]\n[[routes]]\nname = \"up\"\npath_prefix = \"/\"\nupstream = \"app\"\n",
        server(port, admin, "")
    )
}

fn body_of(r: &Raw) -> serde_json::Value {
    let body = r.text.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_spelling_meets_the_route_limit_or_is_refused() {
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
limits = ["two"]
[[routes]]
name = "internal"
path_prefix = "/internal"
upstream = "app"
access = {{ deny = ["127.0.0.0/8"] }}
[[routes]]
name = "all"
path_prefix = "/"
upstream = "app"
[limits.two]
key = "global"
rate = "2/h"
"#,
        server(port, admin, ""),
        be.addr
    );
    let _gw = start(&toml, port, admin).await;

    // The two the limit allows, spelled oddly: the upstream is sent the canonical path.
    for spelling in ["//login", "/x/../login?a=%2F"] {
        let r = raw(port, &format!("GET {spelling} HTTP/1.1"), &[]).await;
        assert_eq!(r.status, 200, "{spelling}: {}", r.text);
        let path = body_of(&r)["path"].as_str().unwrap_or("").to_string();
        assert!(
            path == "/login" || path == "/login?a=%2F",
            "{spelling} sent as {path}"
        );
    }
    let hits = be.hits();
    for spelling in [
        "/login",
        "//login",
        "/./login",
        "/x/../login",
        "/%6cogin",
        "/%6Cogin",
        "/%2e/login",
        "/%2E%2E/login",
        "///login/",
        "/login/.",
        "/.%2flogin",
        "/%2flogin",
        "/%5clogin",
        "/\\login",
        "/login%00",
        "/../login",
        "/%2e%2e/login",
        "/lo%67in",
        "/login;x=1",
        // Targets that do not start with "/": a parser may repair them, the gateway refuses.
        "%2flogin",
        "login",
        "./login",
        "x/../login",
        "a:b/login",
        "*",
    ] {
        let r = raw(port, &format!("GET {spelling} HTTP/1.1"), &[]).await;
        assert!(
            r.status == 429 || r.status == 400,
            "{spelling} walked around the limit: {}",
            r.text
        );
        assert!(
            r.text.contains("application/problem+json"),
            "{spelling}: {}",
            r.text
        );
    }
    assert_eq!(be.hits(), hits, "no spelling reached the upstream");

    // A route's deny list, under other spellings.
    for spelling in [
        "/internal/secrets",
        "//internal/secrets",
        "/%69nternal/x",
        "/a/../internal",
    ] {
        let r = raw(port, &format!("GET {spelling} HTTP/1.1"), &[]).await;
        assert_eq!(r.status, 403, "{spelling}: {}", r.text);
    }
    assert_eq!(be.hits(), hits);

    // Elsewhere the canonical path is what the upstream reads; reserved escapes stay, bytes
    // outside ASCII are escaped, an absolute-form target goes in origin form.
    let r = raw(port, "GET /a/./b/../c//d%3b%7e?q=%2F&x HTTP/1.1", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(body_of(&r)["path"], "/a/c/d%3B~?q=%2F&x");
    let r = raw(port, "GET /x/../lo\u{e9} HTTP/1.1", &[]).await;
    assert_eq!(body_of(&r)["path"], "/lo%C3%A9", "{}", r.text);
    let r = raw(port, "GET http://127.0.0.1/a//b?c HTTP/1.1", &[]).await;
    assert_eq!(body_of(&r)["path"], "/a/b?c", "{}", r.text);
    assert_eq!(body_of(&r)["headers"]["host"], "127.0.0.1", "{}", r.text);
}

fn slashes(port: u16, admin: u16, extra: &str, backend: std::net::SocketAddr) -> String {
    format!(
        r#"{}
[upstreams.app]
targets = ["{backend}"]
[[routes]]
name = "admin"
path_prefix = "/Admin"
case_insensitive = true
respond = {{ status = 403, body = "admin" }}
[[routes]]
name = "all"
path_prefix = "/"
upstream = "app"
"#,
        server(port, admin, extra)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_slashes_keep_and_decode_and_case_insensitive_routes() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let gw = start(
        &slashes(port, admin, "escaped_slashes = \"decode\"", be.addr),
        port,
        admin,
    )
    .await;
    let r = raw(port, "GET /a%2fb/..%2Fc HTTP/1.1", &[]).await;
    assert_eq!(
        body_of(&r)["path"],
        "/a/c",
        "decoded, then resolved: {}",
        r.text
    );
    for spelling in ["/admin/x", "/ADMIN", "/%61dmin", "/x/..%2fadmin"] {
        let r = raw(port, &format!("GET {spelling} HTTP/1.1"), &[]).await;
        assert_eq!(r.status, 403, "{spelling}: {}", r.text);
    }
    drop(gw);

    let (port, admin) = (free_port(), free_port());
    let extra = "escaped_slashes = \"keep\"\nmerge_slashes = false";
    let _gw = start(&slashes(port, admin, extra, be.addr), port, admin).await;
    let r = raw(port, "GET /a%2fb//c HTTP/1.1", &[]).await;
    assert_eq!(body_of(&r)["path"], "/a%2Fb//c", "kept: {}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_spellings_meet_the_host_route_or_are_refused() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[[routes]]
name = "api"
host = "api.example.com"
path_prefix = "/"
respond = {{ status = 200, body = "api" }}
[[routes]]
name = "other"
path_prefix = "/"
respond = {{ status = 200, body = "other" }}
"#,
        server(port, admin, "")
    );
    let _gw = start(&toml, port, admin).await;
    for host in [
        "api.example.com",
        "API.Example.COM",
        "api.example.com.",
        "api.example.com:8080",
        "API.EXAMPLE.COM.:443",
    ] {
        let r = raw(port, "GET /x HTTP/1.1", &[("Host", host)]).await;
        assert!(r.text.ends_with("api"), "{host}: {}", r.text);
    }
    // The absolute form names the host too.
    let r = raw(
        port,
        "GET http://API.example.com./x HTTP/1.1",
        &[("Host", "API.example.com.")],
    )
    .await;
    assert!(r.text.ends_with("api"), "{}", r.text);
    for host in [
        "api..example.com",
        "a b",
        "x@api.example.com",
        "api.example.com:port",
        "[::1",
    ] {
        let r = raw(port, "GET /x HTTP/1.1", &[("Host", host)]).await;
        assert_eq!(r.status, 400, "{host}: {}", r.text);
    }
    let r = exchange(port, b"GET /x HTTP/1.1\r\nHost: other.example\r\nHost: api.example.com\r\nConnection: close\r\n\r\n").await;
    assert_eq!(r.status, 400, "{}", r.text);

    // An absolute-form target without a Host header names the host.
    for target in ["http://API.example.com./x", "HTTP://api.example.com:80"] {
        let r = exchange(
            port,
            format!("GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(r.text.ends_with("api"), "{target}: {}", r.text);
    }

    // h2's :authority, with a trailing dot and upper case.
    let body = h2_get(port, &format!("http://API.example.com.:{port}/x")).await;
    assert_eq!(body, "api");
}

/// An h2c (prior knowledge) connection to the gateway; the task driving it ends when the
/// connection does.
async fn h2_connect<B>(
    port: u16,
) -> (
    hyper::client::conn::http2::SendRequest<B>,
    tokio::task::JoinHandle<hyper::Result<()>>,
)
where
    B: hyper::body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2 handshake");
    (send, tokio::spawn(conn))
}

/// One h2 GET's body.
async fn h2_get(port: u16, uri: &str) -> String {
    use http_body_util::{BodyExt, Full};
    let (mut send, _conn) = h2_connect(port).await;
    let req = http::Request::builder()
        .uri(uri)
        .body(Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = send.send_request(req).await.expect("h2 request");
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_lists_read_unambiguous_input() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[access]
deny_user_agents = ["BadBot*"]
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "q"
path_prefix = "/q"
upstream = "app"
limits = ["by_query"]
[[routes]]
name = "h"
path_prefix = "/h"
upstream = "app"
limits = ["by_header"]
[[routes]]
name = "form"
path_prefix = "/form"
upstream = "app"
limits = ["by_user"]
[limits.by_query]
key = "query:api_key"
rate = "1/h"
[limits.by_header]
key = "header:x-api-key"
rate = "1/h"
[limits.by_user]
key = "body:username"
rate = "1/h"
"#,
        server(port, admin, ""),
        be.addr
    );
    let _gw = start(&toml, port, admin).await;

    // query:NAME matches decoded names: the re-encoded name is the same key.
    assert_eq!(
        raw(port, "GET /q?api_key=k1 HTTP/1.1", &[]).await.status,
        200
    );
    for q in [
        "%61pi_key=k1",
        "api%5Fkey=k1",
        "api_key=%6B1",
        "x=1&api_key=k1",
    ] {
        let r = raw(port, &format!("GET /q?{q} HTTP/1.1"), &[]).await;
        assert_eq!(r.status, 429, "{q}: {}", r.text);
    }
    let r = raw(port, "GET /q?api_key=k2&api_key=k3 HTTP/1.1", &[]).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(body_of(&r)["error_code"], "AMBIGUOUS_REQUEST");
    let r = raw(port, "GET /q?api_key=k4&%61pi_key=k5 HTTP/1.1", &[]).await;
    assert_eq!(body_of(&r)["error_code"], "AMBIGUOUS_REQUEST", "{}", r.text);

    // A key header given twice.
    let r = raw(
        port,
        "GET /h HTTP/1.1",
        &[("X-API-Key", "a"), ("x-api-key", "b")],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(body_of(&r)["error_code"], "AMBIGUOUS_REQUEST");
    // A key header the client names as hop-by-hop: the upstream would never see it.
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(
        b"GET /h HTTP/1.1\r\nHost: x\r\nX-API-Key: c\r\nConnection: close, X-API-Key\r\n\r\n",
    )
    .await
    .expect("write");
    let r = read_to_close(&mut s, Instant::now()).await;
    assert_eq!(body_of(&r)["error_code"], "AMBIGUOUS_REQUEST", "{}", r.text);
    // A denied User-Agent behind a benign one.
    let r = raw(
        port,
        "GET /q HTTP/1.1",
        &[("User-Agent", "curl/8"), ("User-Agent", "BadBot/2")],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(body_of(&r)["error_code"], "AMBIGUOUS_REQUEST");

    // A form field that feeds a key, given twice.
    let body = "username=alice&username=bob";
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let req = format!(
        "POST /form HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let r = read_to_close(&mut s, Instant::now()).await;
    assert_eq!(body_of(&r)["error_code"], "AMBIGUOUS_REQUEST", "{}", r.text);
}

/// Deadlines short enough to test: header 1 s, idle 2 s, body 1 s at 1000 B/s.
fn tight(port: u16, admin: u16) -> String {
    server(
        port,
        admin,
        "header_timeout = \"1s\"\nidle_timeout = \"2s\"\nbody_timeout = \"1s\"\nmin_body_rate = 1000",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_short_and_trickled_heads_are_closed_within_header_timeout() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}\n[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nrespond = {{ status = 200, body = \"ok\" }}\n",
        tight(port, admin)
    );
    let _gw = start(&toml, port, admin).await;
    let deadline = Duration::from_secs(2); // header_timeout + 1 s

    // Nothing sent at all; fewer bytes than the h2c preface.
    for first in [&b""[..], b"GET", b"PRI * HTTP/2.0\r\n"] {
        let t0 = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(first).await.expect("write");
        let r = read_to_close(&mut s, t0).await;
        assert!(
            r.closed_after < deadline,
            "{first:?}: open {:?}",
            r.closed_after
        );
        assert!(
            r.closed_after >= Duration::from_millis(900),
            "{first:?}: closed early"
        );
    }

    // A whole request shorter than the h2c preface is answered at once.
    for short in [&b"GET / HTTP/1.0\r\n\r\n"[..], b"GET /x HTTP/1.1\r\n\r\n"] {
        let t0 = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(short).await.expect("write");
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).await.expect("an answer");
        assert!(buf.starts_with(b"HTTP/1.1 "), "{buf:?}");
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
    }

    // A head trickled a byte at a time after its first line: 408, then closed.
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .expect("write");
    let trickle = async {
        for _ in 0..40 {
            if s.write_all(b"a").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    trickle.await;
    let r = read_to_close(&mut s, t0).await;
    assert_eq!(r.status, 408, "{}", r.text);
    assert!(r.text.contains("REQUEST_TIMEOUT"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_and_idle_h2_connections_are_closed_within_idle_timeout() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}\n[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nrespond = {{ status = 200, body = \"ok\" }}\n",
        tight(port, admin)
    );
    let _gw = start(&toml, port, admin).await;
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).await.expect("read");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let t0 = Instant::now();
    let r = read_to_close(&mut s, t0).await;
    assert!(
        r.closed_after >= Duration::from_millis(1900) && r.closed_after < Duration::from_secs(3),
        "kept-alive connection open {:?}",
        r.closed_after
    );

    // h2c: one request, then nothing: the connection goes after idle_timeout.
    use http_body_util::Full;
    let (mut send, conn) = h2_connect(port).await;
    let req = http::Request::builder()
        .uri(format!("http://127.0.0.1:{port}/"))
        .body(Full::new(bytes::Bytes::new()))
        .expect("request");
    assert_eq!(send.send_request(req).await.expect("h2").status(), 200);
    let t0 = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(4), conn).await;
    assert!(ended.is_ok(), "idle h2 connection still open after 4 s");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripped_body_is_cut_off_and_its_upstream_released() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}\n[upstreams.app]\ntargets = [\"{}\"]\n[[routes]]\nname = \"up\"\npath_prefix = \"/\"\nupstream = \"app\"\n",
        tight(port, admin),
        be.addr
    );
    let gw = start(&toml, port, admin).await;
    // A healthy body at full speed passes.
    let payload = "x".repeat(50_000);
    let r = request_from(
        IpAddr::from([127, 0, 0, 1]),
        port,
        "POST",
        "/up",
        &[],
        &payload,
    )
    .await
    .expect("post");
    assert_eq!(r.status, 200);

    // 10 bytes every 100 ms is 100 B/s, below min_body_rate: cut within body_timeout + 1 s.
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(b"POST /drip HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        .await
        .expect("write");
    let drip = async {
        for _ in 0..50 {
            if s.write_all(&[b'y'; 10]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), drip).await;
    let r = read_to_close(&mut s, t0).await;
    assert!(
        r.closed_after < Duration::from_secs(4),
        "{:?}",
        r.closed_after
    );
    assert!(r.status == 408 || r.status == 0, "{}", r.text);
    // The upstream connection was released: the gateway holds no request in flight.
    let released = eventually(Duration::from_secs(2), || async {
        metric(&metrics(admin).await, "tollgate_in_flight_requests", &[]) == 0.0
    })
    .await;
    assert!(released, "{}", gw.log_text());

    // A body that stalls outright: the same.
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(b"POST /stall HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .expect("write");
    let r = read_to_close(&mut s, t0).await;
    assert!(
        r.closed_after < Duration::from_secs(2),
        "{:?}",
        r.closed_after
    );

    // Over h2 (Pingora read h2 bodies without a timeout): a stream whose body stalls is
    // answered 408 within body_timeout + 1 s, and the connection's other streams go on.
    use http_body_util::{BodyExt, StreamBody};
    let (send, _conn) = h2_connect(port).await;
    let (tx, rx) =
        tokio::sync::mpsc::channel::<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>(4);
    tx.send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
        b"abc",
    ))))
    .await
    .expect("first chunk");
    let body = StreamBody::new(tokio_stream_from(rx));
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1:{port}/h2-stall"))
        .body(body.boxed())
        .expect("request");
    let t0 = Instant::now();
    let mut stalled = send.clone();
    let resp = tokio::time::timeout(Duration::from_secs(5), stalled.send_request(req))
        .await
        .expect("answered within 5 s")
        .expect("h2 response");
    assert_eq!(resp.status(), 408);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    drop(tx);
    let mut other = send;
    let req = http::Request::builder()
        .uri(format!("http://127.0.0.1:{port}/after"))
        .body(
            http_body_util::Empty::<bytes::Bytes>::new()
                .map_err(|e| match e {})
                .boxed(),
        )
        .expect("request");
    assert_eq!(other.send_request(req).await.expect("h2").status(), 200);
}

/// A body stream fed from a channel (the sender holds it open as long as it lives).
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_heads_get_431_and_nothing_is_forwarded() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = one_route(port, admin, be.addr);
    let _gw = start(&toml, port, admin).await;
    let big = "a".repeat(40_000);
    let r = raw(port, "GET / HTTP/1.1", &[("X-Big", &big)]).await;
    assert_eq!(r.status, 431, "{}", &r.text[..r.text.len().min(300)]);
    assert_eq!(body_of(&r)["error_code"], "HEADER_FIELDS_TOO_LARGE");
    let many: Vec<(String, String)> = (0..120).map(|i| (format!("X-H{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = raw(port, "GET / HTTP/1.1", &many).await;
    assert_eq!(r.status, 431, "{}", r.text);
    // A long URI counts too.
    let r = raw(port, &format!("GET /{} HTTP/1.1", "p".repeat(40_000)), &[]).await;
    assert_eq!(r.status, 431);
    assert_eq!(be.hits(), 0, "nothing reached the upstream");
    // Over h2 the field count is bounded too.
    let (mut send, _conn) = h2_connect(port).await;
    let mut req = http::Request::builder().uri(format!("http://127.0.0.1:{port}/"));
    for i in 0..120 {
        req = req.header(format!("x-h{i}"), "v");
    }
    let req = req
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    assert_eq!(send.send_request(req).await.expect("h2").status(), 431);
    // Just under the bounds passes.
    let fine = "a".repeat(30_000);
    assert_eq!(
        raw(port, "GET / HTTP/1.1", &[("X-Fine", &fine)])
            .await
            .status,
        200
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "http_requests_total", &["status=\"431\""]),
        4.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_client_connection_cap_holds_while_another_client_is_served() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}\n[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nrespond = {{ status = 200, body = \"ok\" }}\n",
        server(port, admin, "max_connections_per_client = 3\nmax_connections = 6")
    );
    let _gw = start(&toml, port, admin).await;
    let connect_from = |ip: [u8; 4]| async move {
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        sock.bind((IpAddr::from(ip), 0).into()).expect("bind");
        sock.connect(([127, 0, 0, 1], port).into())
            .await
            .expect("connect")
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from([127, 0, 0, 2]).await);
    }
    // Give the gateway the moment to count them.
    let counted = eventually(Duration::from_secs(2), || async {
        metric(&metrics(admin).await, "tollgate_connections_open", &[]) >= 3.0
    })
    .await;
    assert!(counted);
    let mut fourth = connect_from([127, 0, 0, 2]).await;
    let r = read_to_close(&mut fourth, Instant::now()).await;
    assert!(
        r.closed_after < Duration::from_secs(1) && r.status == 0,
        "not refused"
    );
    let other = request_from(IpAddr::from([127, 0, 0, 3]), port, "GET", "/", &[], "")
        .await
        .expect("another client is served");
    assert_eq!(other.status, 200);
    // That client's connection gives its slot back once the gateway sees it
    // close: until then it would take one of the slots counted below.
    let settled = eventually(Duration::from_secs(3), || async {
        metric(&metrics(admin).await, "tollgate_connections_open", &[]) <= 3.0
    })
    .await;
    assert!(settled, "the other client's slot is given back");
    // The process-wide bound: 3 + 2 more from a third address, then none.
    held.push(connect_from([127, 0, 0, 4]).await);
    held.push(connect_from([127, 0, 0, 4]).await);
    let full = eventually(Duration::from_secs(2), || async {
        metric(&metrics(admin).await, "tollgate_connections_open", &[]) >= 5.0
    })
    .await;
    assert!(full);
    held.push(connect_from([127, 0, 0, 5]).await);
    // The sixth must be counted before the seventh arrives, or the two
    // race for the last slot and the one held open may be the refused one.
    let at_cap = eventually(Duration::from_secs(2), || async {
        metric(&metrics(admin).await, "tollgate_connections_open", &[]) >= 6.0
    })
    .await;
    assert!(at_cap);
    let mut over = connect_from([127, 0, 0, 6]).await;
    let r = read_to_close(&mut over, Instant::now()).await;
    assert!(r.closed_after < Duration::from_secs(1), "not refused");
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_connections_refused_total",
            &["reason=\"max_connections_per_client\""]
        ),
        1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "tollgate_connections_refused_total",
            &["reason=\"max_connections\""]
        ) >= 1.0,
        "{m}"
    );
    drop(held);
    let drained = eventually(Duration::from_secs(3), || async {
        metric(&metrics(admin).await, "tollgate_connections_open", &[]) <= 1.0
    })
    .await;
    assert!(drained, "slots given back when connections close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_cannot_evict_an_exhausted_bucket_or_a_block() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[[routes]]
name = "bucket"
path_prefix = "/bucket"
respond = {{ status = 200, body = "ok" }}
limits = ["per_key"]
[[routes]]
name = "login"
path_prefix = "/login"
respond = {{ status = 200, body = "ok" }}
limits = ["guarded"]
[limits.per_key]
key = "header:x-key"
rate = "3/h"
max_keys = 64
[limits.guarded]
key = "header:x-key"
rate = "1/h"
max_keys = 64
block = [{{ after = 3, within = "1h", for = "1h" }}]
"#,
        server(port, admin, "")
    );
    let _gw = start(&toml, port, admin).await;
    let mut conn = Conn::open(port).await.expect("connect");
    async fn status(conn: &mut Conn, path: &str, key: &str) -> u16 {
        conn.send("GET", path, &[("x-key", key)], "")
            .await
            .expect("request")
            .status
    }
    // "victim" exhausts its bucket; "blocked" is refused 3 times and blocked.
    for _ in 0..3 {
        assert_eq!(status(&mut conn, "/bucket", "victim").await, 200);
    }
    assert_eq!(status(&mut conn, "/bucket", "victim").await, 429);
    assert_eq!(status(&mut conn, "/login", "blocked").await, 200);
    for _ in 0..3 {
        assert_eq!(status(&mut conn, "/login", "blocked").await, 429);
    }
    assert_eq!(status(&mut conn, "/login", "blocked").await, 403);
    // 3,000 fresh keys through each 64-key limit: one request each through the bucket, and
    // an allowed and a refused one through the guarded limit (its refusal counts churn).
    for i in 0..3000 {
        let key = format!("churn-{i}");
        assert_eq!(status(&mut conn, "/bucket", &key).await, 200);
        assert_eq!(status(&mut conn, "/login", &key).await, 200);
        assert_eq!(status(&mut conn, "/login", &key).await, 429);
    }
    assert_eq!(
        status(&mut conn, "/bucket", "victim").await,
        429,
        "the exhausted bucket survived"
    );
    assert_eq!(
        status(&mut conn, "/login", "blocked").await,
        403,
        "the block survived"
    );
    let m = metrics(admin).await;
    assert!(
        metric(
            &m,
            "tollgate_limiter_evicted_keys_total",
            &["limit=\"per_key\""]
        ) > 2000.0,
        "the churn did evict: {m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_secret_never_reaches_the_log() {
    let (port, admin) = (free_port(), free_port());
    let dead = free_port();
    let toml = format!(
        "{}\n[upstreams.gone]\ntargets = [\"127.0.0.1:{dead}\"]\n[[routes]]\nname = \"gone\"\npath_prefix = \"/\"\nupstream = \"gone\"\n",
        tight(port, admin).replace("threads = 2", "threads = 2\naccess_log = true")
    );
    let gw = start(&toml, port, admin).await;
    const CANARY: &str = "c4n4ry5ecret";
    let q = format!("api_key={CANARY}&user={CANARY}");
    // Upstream unreachable (502), a bad path (400), a bad request line, a bad header, a huge
    // head (431), a head that times out (408), a body that stalls, a bad host.
    raw(
        port,
        &format!("GET /x?{q} HTTP/1.1"),
        &[("X-Token", CANARY)],
    )
    .await;
    raw(port, &format!("GET /%zz?{q} HTTP/1.1"), &[]).await;
    raw(port, &format!("GET /{CANARY}?{q} HTTP/9.9"), &[]).await;
    raw(
        port,
        &format!("GET /x?{q} HTTP/1.1"),
        &[("Bad Header", CANARY)],
    )
    .await;
    raw(
        port,
        &format!("GET /x?{q} HTTP/1.1"),
        &[("X-Big", &format!("{CANARY}{}", "a".repeat(40_000)))],
    )
    .await;
    raw(
        port,
        &format!("GET /x?{q} HTTP/1.1"),
        &[("Host", &format!("{CANARY} x"))],
    )
    .await;
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(format!("GET /{CANARY}?{q} HTTP/1.1\r\nX-A: {CANARY}").as_bytes())
        .await
        .expect("write");
    read_to_close(&mut s, Instant::now()).await;
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(
        format!("POST /{CANARY}?{q} HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n{CANARY}")
            .as_bytes(),
    )
    .await
    .expect("write");
    read_to_close(&mut s, Instant::now()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = gw.log_text();
    assert!(log.contains("request"), "the access log ran: {log}");
    assert!(!log.contains(CANARY), "{log}");
    assert!(
        !log.contains("127.0.0.1:") || !log.contains(&format!(":{port} ")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_addresses_twice_or_busy_are_refused_cleanly() {
    let dir = temp_dir("listen");
    let file = dir.join("twice.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = [\"127.0.0.1:18081\", \"127.0.0.1:18081\"]\nadmin = \"127.0.0.1:18081\"\n[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\n",
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .arg("check")
        .arg(&file)
        .output()
        .expect("check");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("server.listen[1]: 127.0.0.1:18081 is listed twice"),
        "{text}"
    );
    assert!(text.contains("server.admin"), "{text}");

    // An address another process holds: a clear error and exit 1, at once.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port();
    let file = dir.join("busy.toml");
    std::fs::write(
        &file,
        format!("[server]\nlisten = [\"127.0.0.1:{port}\"]\n[[routes]]\npath_prefix = \"/\"\nrespond = {{ status = 200 }}\n"),
    )
    .expect("write");
    let t0 = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(BIN)
            .arg("run")
            .arg("--config")
            .arg(&file)
            .output(),
    )
    .await
    .expect("exits")
    .expect("run");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("server.listen: cannot listen on 127.0.0.1:{port}")),
        "{text}"
    );
    assert!(!text.contains("panicked"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_streams_per_connection_are_bounded() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}\n[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nrespond = {{ status = 200, body = \"ok\" }}\n",
        server(port, admin, "max_h2_streams = 7")
    );
    let _gw = start(&toml, port, admin).await;
    // h2c with prior knowledge: the preface and an empty SETTINGS frame, then the server's
    // SETTINGS frame must carry SETTINGS_MAX_CONCURRENT_STREAMS (0x3) = 7.
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("write");
    let mut head = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut head))
        .await
        .expect("a frame in time")
        .expect("read");
    assert_eq!(
        head[3], 0x4,
        "the server's first frame is SETTINGS: {head:?}"
    );
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.expect("payload");
    let settings: Vec<(u16, u32)> = payload
        .chunks_exact(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect();
    assert!(settings.contains(&(0x3, 7)), "{settings:?}");
    // And the head bound travels as SETTINGS_MAX_HEADER_LIST_SIZE (0x6) = max_header_bytes.
    assert!(settings.contains(&(0x6, 32768)), "{settings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_connection_is_not_cut_by_body_deadlines() {
    // A backend that upgrades and then echoes, as a WebSocket server would.
    let backend = format!(
        "127.0.0.1:{}",
        upgrading_echo_upstream(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        )
        .await
    );
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}\n[upstreams.ws]\ntargets = [\"{backend}\"]\nhealth_check = false\n[[routes]]\nname = \"ws\"\npath_prefix = \"/\"\nupstream = \"ws\"\n",
        tight(port, admin)
    );
    let _gw = start(&toml, port, admin).await;
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(
        b"GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
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
    // Quiet for longer than body_timeout (1 s) and below min_body_rate, twice: still open.
    for msg in [&b"ping"[..], b"pong"] {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        s.write_all(msg).await.expect("write after a quiet spell");
        let mut echo = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut echo))
            .await
            .expect("echoed in time")
            .expect("echo");
        assert_eq!(&echo, msg);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_held_in_a_tarpit_is_not_timed_from_the_hold() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"{}
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "held"
path_prefix = "/"
upstream = "app"
limits = ["one"]
tarpit = {{ delay = ["2s", "2s"], max_concurrent = 8, then = "pass" }}
[limits.one]
key = "global"
rate = "1/h"
"#,
        tight(port, admin),
        be.addr
    );
    let _gw = start(&toml, port, admin).await;
    assert_eq!(raw(port, "GET / HTTP/1.1", &[]).await.status, 200);
    // Refused, so held 2 s (twice body_timeout), then passed on: its small chunked body,
    // sent at once, must not count the hold against min_body_rate.
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    s.write_all(b"5\r\nworld\r\n0\r\n\r\n")
        .await
        .expect("write");
    let r = read_to_close(&mut s, Instant::now()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(body_of(&r)["body"], "helloworld");
}

/// An h2 GET of the backend's `/big?bytes=N` through the gateway: the response head, its body
/// not read.
async fn h2_big(port: u16, bytes: usize) -> http::Response<hyper::body::Incoming> {
    let (mut send, _conn) = h2_connect(port).await;
    let req = http::Request::builder()
        .uri(format!("http://127.0.0.1:{port}/big?bytes={bytes}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    send.send_request(req).await.expect("h2 head")
}

/// Waits (at most 5 s) until the gateway holds no request in flight, and checks it took at
/// least `not_before` from `t0`.
async fn released(admin: u16, t0: Instant, not_before: Duration, what: &str, gw: &GatewayProc) {
    let done = eventually(Duration::from_secs(5), || async {
        metric(&metrics(admin).await, "tollgate_in_flight_requests", &[]) == 0.0
    })
    .await;
    assert!(done, "{what} holds its request: {}", gw.log_text());
    assert!(
        t0.elapsed() >= not_before,
        "{what}: released after {:?}",
        t0.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answer_is_cut_off_within_send_timeout() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "{}send_timeout = \"1s\"\n[upstreams.app]\ntargets = [\"{}\"]\n[[routes]]\nname = \"up\"\npath_prefix = \"/\"\nupstream = \"app\"\n",
        tight(port, admin),
        be.addr
    );
    let gw = start(&toml, port, admin).await;
    // Far more than the socket buffers between gateway and client hold.
    let big: usize = 32 << 20;

    // HTTP/1.1: the request is sent, not a byte of the answer is read. The gateway's writes
    // stall once the buffers are full; each may stall at most send_timeout.
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(format!("GET /big?bytes={big} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let t0 = Instant::now();
    let started = eventually(Duration::from_secs(2), || async {
        metric(&metrics(admin).await, "tollgate_in_flight_requests", &[]) == 1.0
    })
    .await;
    assert!(started, "the request never started: {}", gw.log_text());
    released(
        admin,
        t0,
        Duration::from_millis(900),
        "a stalled reader",
        &gw,
    )
    .await;
    // What reached the client's buffers is a cut answer, then the connection is closed.
    let mut got = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("the connection stayed open after the cut ({got} bytes read)"),
        }
    }
    assert!(got > 0 && got < big, "{got} bytes");

    // HTTP/2: the client takes the head and never reads the body, so it never returns flow
    // control credit; the stream is reset within send_timeout and its upstream released.
    use http_body_util::BodyExt;
    let resp = h2_big(port, big).await;
    assert_eq!(resp.status(), 200);
    let t0 = Instant::now();
    released(
        admin,
        t0,
        Duration::from_millis(500),
        "a stalled h2 stream",
        &gw,
    )
    .await;
    let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("the stream ended");
    match body {
        Err(_) => {}
        Ok(b) => assert!(b.to_bytes().len() < big, "the whole body arrived"),
    }

    // A reader that keeps up gets the whole answer.
    let resp = h2_big(port, 4 << 20).await;
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(b.len(), 4 << 20);

    // Each cut is on its request's line, and no ERROR line is written: a client cannot fill
    // the log at will.
    let log = gw.log_text();
    assert_eq!(log.matches("WriteTimedout").count(), 2, "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_spellings_frame_one_body_or_are_refused() {
    // The framing read (vendor patch 0029 reads the usual plain-digits field without splitting
    // text): identical duplicate fields frame one body; a comma list, a conflict or anything
    // but digits is refused with 400 and nothing reaches the upstream (a list used to get a
    // misleading 413 from the body stage, which read it as no number).
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = one_route(port, admin, be.addr);
    let _gw = start(&toml, port, admin).await;
    let post = |fields: &[&str]| {
        let mut head = String::from("POST /up HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for f in fields {
            head.push_str(&format!("Content-Length: {f}\r\n"));
        }
        head.push_str("Connection: close\r\n\r\nhello");
        head
    };
    let framed: &[&[&str]] = &[&["5"], &["5", "5"], &["5", "5", "5"]];
    for fields in framed {
        let before = be.hits();
        let r = exchange(port, post(fields).as_bytes()).await;
        assert_eq!(r.status, 200, "{fields:?}: {}", r.text);
        assert_eq!(
            be.hits(),
            before + 1,
            "{fields:?} reached the upstream once"
        );
    }
    let refused: &[&[&str]] = &[
        &["5, 5"],
        &["5,5"],
        &["5, 6"],
        &["5", "6"],
        &["5,"],
        &[""],
        &["+5"],
        &["-5"],
        &["0x5"],
        &["5 5"],
        &["99999999999999999999999"],
        &["5", "abc"],
    ];
    let before = be.hits();
    for fields in refused {
        let r = exchange(port, post(fields).as_bytes()).await;
        assert_eq!(r.status, 400, "{fields:?}: {}", r.text);
        assert_eq!(
            be.hits(),
            before,
            "{fields:?} reached the upstream: {}",
            r.text
        );
    }
    assert_eq!(
        be.hits(),
        before,
        "no ambiguous framing reached the upstream"
    );
}
