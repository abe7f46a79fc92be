//! End-to-end: every shape of upstream response reaches the client whole and framed, and
//! each connection is kept or dropped as it must be, for requests without a body. Vendor
//! patch 0025 proxies such a request without Pingora's two task pipes (one loop writes the
//! request's end, reads the response and watches the client); a request with a body keeps
//! the pipes, and both are checked side by side on the same upstream.
//!
//! The upstream is a scripted raw HTTP/1.1 server: it writes exactly the bytes each path
//! names (odd framings, pauses between pieces, early closes), so nothing a library would
//! mend on its way is left to chance.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The binary under test: `TOLLGATE_BIN` when set (another build, side by side), else this
/// build's.
fn bin() -> std::path::PathBuf {
    std::env::var_os("TOLLGATE_BIN").map_or_else(|| BIN.into(), Into::into)
}

/// What the scripted upstream saw: connections accepted, request lines with their bodies,
/// and how many held requests it saw end by the gateway's closing their connection.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    requests: Mutex<Vec<String>>,
    holds_released: AtomicUsize,
}

/// The pieces the upstream writes for `path`, with a pause before each, and whether it
/// closes the connection after them.
fn script(path: &str) -> (Vec<&'static [u8]>, bool) {
    match path {
        "/chunks" => (
            vec![
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                b"3\r\nabc\r\n",
                b"3\r\ndef\r\n",
                b"0\r\n\r\n",
            ],
            false,
        ),
        "/truncated" => (
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"],
            true,
        ),
        "/until-close" => (vec![b"HTTP/1.1 200 OK\r\n\r\nuntil-", b"close"], true),
        "/continue" => (
            vec![
                b"HTTP/1.1 100 Continue\r\n\r\n",
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            ],
            false,
        ),
        "/switch" => (
            vec![b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"],
            false,
        ),
        "/empty" => (vec![b"HTTP/1.1 204 No Content\r\n\r\n"], false),
        _ => (
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
            false,
        ),
    }
}

/// The first whole request in `buf`: the bytes it took, its request line and its body
/// (Content-Length framing only: the tests send nothing else).
fn one_request(buf: &[u8]) -> Option<(usize, String, String)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let len: usize = head
        .split("\r\n")
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    let line = head.split("\r\n").next().unwrap_or_default().to_string();
    (buf.len() >= end + len).then(|| {
        let body = String::from_utf8_lossy(&buf[end..end + len]).into_owned();
        (end + len, line, body)
    })
}

/// The scripted upstream on a loopback port. `/hold` is never answered: the connection is
/// read until the gateway closes it, which `holds_released` counts.
fn scripted_upstream() -> (u16, Arc<Seen>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(Seen::default());
    let kept = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            kept.accepted.fetch_add(1, Ordering::SeqCst);
            let seen = kept.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
                loop {
                    let (used, line, body) = loop {
                        if let Some(r) = one_request(&buf) {
                            break r;
                        }
                        match c.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    buf.drain(..used);
                    let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                    seen.requests
                        .lock()
                        .expect("requests")
                        .push(format!("{line} {body}"));
                    if path == "/hold" {
                        while matches!(c.read(&mut chunk), Ok(n) if n > 0) {}
                        seen.holds_released.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    let head_only = line.starts_with("HEAD ");
                    let (pieces, close) = script(&path);
                    for (i, piece) in pieces.iter().enumerate() {
                        if i > 0 {
                            std::thread::sleep(Duration::from_millis(40));
                        }
                        let piece: &[u8] = if head_only {
                            // A HEAD answer is its head alone.
                            let end = piece.windows(4).position(|w| w == b"\r\n\r\n");
                            &piece[..end.map_or(piece.len(), |e| e + 4)]
                        } else {
                            piece
                        };
                        if c.write_all(piece).is_err() {
                            return;
                        }
                    }
                    if close {
                        return;
                    }
                }
            });
        }
    });
    (port, seen)
}

fn config(port: u16, admin: u16, upstream: u16) -> String {
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

/// One response off `r`: status, fields (lower-case names) and body, de-chunked; `None` when
/// the connection ends before the response does (a truncated body included).
async fn read_response(
    r: &mut BufReader<TcpStream>,
    head_request: bool,
) -> Option<(u16, Vec<(String, String)>, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut fields = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).await.ok()? == 0 {
            return None;
        }
        let l = l.trim_end_matches("\r\n");
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':')?;
        fields.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
    let value = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if head_request || status == 204 || status == 304 || status < 200 {
        return Some((status, fields, body));
    }
    if value("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).await.ok()? == 0 {
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut data = vec![0; size + 2];
            r.read_exact(&mut data).await.ok()?;
            body.extend_from_slice(&data[..size]);
            if size == 0 {
                return Some((status, fields, body));
            }
        }
    }
    let len: usize = value("content-length").map_or(0, |v| v.parse().unwrap_or(0));
    body.resize(len, 0);
    r.read_exact(&mut body).await.ok()?;
    Some((status, fields, body))
}

/// A read that fails the test rather than hanging it.
async fn within_5s<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("within 5 s")
}

async fn connect(port: u16) -> BufReader<TcpStream> {
    BufReader::new(
        TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect"),
    )
}

async fn send(r: &mut BufReader<TcpStream>, bytes: &[u8]) {
    r.get_mut().write_all(bytes).await.expect("write");
}

/// Whether the gateway closed `r` (EOF, not a stall) within 5 s.
async fn closed(r: &mut BufReader<TcpStream>) -> bool {
    let mut rest = Vec::new();
    matches!(
        tokio::time::timeout(Duration::from_secs(5), r.read_to_end(&mut rest)).await,
        Ok(Ok(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_shape_arrives_whole_on_a_kept_connection() {
    let (up, seen) = scripted_upstream();
    let (port, admin) = (free_port(), free_port());
    let _gw = running(&bin(), &config(port, admin, up), port, admin).await;
    let mut c = connect(port).await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: a\r\n\r\n").into_bytes();

    // A chunked body in three pieces, 40 ms apart, streamed through.
    send(&mut c, &get("/chunks")).await;
    let (status, _, body) = within_5s(read_response(&mut c, false))
        .await
        .expect("/chunks");
    assert_eq!((status, body.as_slice()), (200, &b"abcdef"[..]));

    // An interim 100 and then the answer: the client ends up with the 200 and its body.
    send(&mut c, &get("/continue")).await;
    let mut resp = within_5s(read_response(&mut c, false)).await;
    if resp.as_ref().is_some_and(|(s, _, _)| *s == 100) {
        resp = within_5s(read_response(&mut c, false)).await;
    }
    let (status, _, body) = resp.expect("/continue");
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));

    // A HEAD answer has no body; the connection goes on.
    send(&mut c, b"HEAD /head HTTP/1.1\r\nhost: a\r\n\r\n").await;
    let (status, fields, body) = within_5s(read_response(&mut c, true)).await.expect("HEAD");
    assert_eq!(status, 200);
    assert!(body.is_empty());
    assert!(
        fields
            .iter()
            .any(|(n, v)| n == "content-length" && v == "2"),
        "{fields:?}"
    );

    // A 204 has no body either.
    send(&mut c, &get("/empty")).await;
    let (status, _, body) = within_5s(read_response(&mut c, false))
        .await
        .expect("/empty");
    assert_eq!((status, body.len()), (204, 0));

    // A request with a body goes through the pipes on the same connection.
    send(
        &mut c,
        b"POST /with-body HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\nxyz",
    )
    .await;
    let (status, _, body) = within_5s(read_response(&mut c, false)).await.expect("POST");
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));

    // Every request above went over one upstream connection, each whole.
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    let requests = seen.requests.lock().expect("requests").clone();
    let lines: Vec<&str> = requests.iter().map(String::as_str).collect();
    assert_eq!(
        lines,
        [
            "GET /chunks HTTP/1.1 ",
            "GET /continue HTTP/1.1 ",
            "HEAD /head HTTP/1.1 ",
            "GET /empty HTTP/1.1 ",
            "POST /with-body HTTP/1.1 xyz",
        ]
    );

    // Over h2 (to the same HTTP/1.1 upstream) the pieces arrive whole too.
    let r = get_h2(port, "/chunks").await.expect("h2");
    assert_eq!((r.status, r.body.as_str()), (200, "abcdef"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_or_ended_response_drops_its_connections_and_a_leaving_client_its_upstream() {
    let (up, seen) = scripted_upstream();
    let (port, admin) = (free_port(), free_port());
    let _gw = running(&bin(), &config(port, admin, up), port, admin).await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: a\r\n\r\n").into_bytes();

    // A body cut short by the upstream's close: the client gets the head and a short body,
    // then the close; it never gets a whole response it could mistake for the answer.
    let mut c = connect(port).await;
    send(&mut c, &get("/truncated")).await;
    assert!(within_5s(read_response(&mut c, false)).await.is_none());
    assert!(closed(&mut c).await, "the client connection is closed");
    // The upstream connection is not reused: the next request opens another.
    let before = seen.accepted.load(Ordering::SeqCst);
    let mut c = connect(port).await;
    send(&mut c, &get("/after")).await;
    let (status, _, body) = within_5s(read_response(&mut c, false))
        .await
        .expect("/after");
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(seen.accepted.load(Ordering::SeqCst), before + 1);

    // A body that ends with the upstream's close reaches an HTTP/1.1 client framed
    // (chunked), on a connection that goes on.
    send(&mut c, &get("/until-close")).await;
    let (status, _, body) = within_5s(read_response(&mut c, false))
        .await
        .expect("/until-close");
    assert_eq!((status, body.as_slice()), (200, &b"until-close"[..]));
    send(&mut c, &get("/again")).await;
    let (status, _, _) = within_5s(read_response(&mut c, false))
        .await
        .expect("/again");
    assert_eq!(status, 200);

    // Two requests in one write: Tollgate does not pipeline. The first is answered whole,
    // then the connection closes; the second is never sent upstream nor answered.
    let mut c = connect(port).await;
    let mut two = get("/first");
    two.extend_from_slice(&get("/second"));
    send(&mut c, &two).await;
    let (status, _, body) = within_5s(read_response(&mut c, false))
        .await
        .expect("the first of two");
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    assert!(closed(&mut c).await, "closed after the first of two");
    let requests = seen.requests.lock().expect("requests").clone();
    assert!(requests.iter().any(|r| r.starts_with("GET /first ")));
    assert!(!requests.iter().any(|r| r.starts_with("GET /second ")));

    // A 101 to a request that asked for no upgrade is the upstream's error (vendor patch
    // 0026): before, the client that asked for no switch got the 101.
    let mut c = connect(port).await;
    send(&mut c, &get("/switch")).await;
    let (status, _, _) = within_5s(read_response(&mut c, false))
        .await
        .expect("/switch");
    assert_eq!(status, 502);

    // A client that leaves while its upstream thinks: the gateway lets go of the upstream
    // connection at once, not when the upstream answers or times out.
    for _ in 0..2 {
        let released = seen.holds_released.load(Ordering::SeqCst);
        let mut c = connect(port).await;
        send(&mut c, &get("/hold")).await;
        let asked = Instant::now();
        while seen
            .requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|r| r.starts_with("GET /hold"))
            .count()
            == 0
        {
            assert!(asked.elapsed() < Duration::from_secs(5), "/hold reached");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(c);
        let gone = Instant::now();
        while seen.holds_released.load(Ordering::SeqCst) == released {
            assert!(
                gone.elapsed() < Duration::from_secs(3),
                "the upstream connection outlived its client"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen.requests.lock().expect("requests").clear();
    }
}
