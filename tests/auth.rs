//! End-to-end tests of authentication at the edge (docs/auth.md), with real peers: an auth
//! service on loopback (ingress-nginx's and oauth2-proxy's contract), a JWKS served over
//! HTTPS by a test CA's certificate, htpasswd files made by the `htpasswd` tool, and hostile
//! clients (alg confusion, `none`, odd kids, huge tokens, duplicate credentials, spoofed
//! claims headers, `rd=` elsewhere, a 10 MB auth answer).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tollgate_testkit::pki::{Ca, LeafSpec};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

async fn serve(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(Path::new(BIN), toml, port, admin).await
}

async fn call(port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
    get(port, path, headers).await.expect("request")
}

// ---------------------------------------------------------------- forward auth

/// What the auth service saw of each request.
#[derive(Default)]
struct Seen {
    calls: AtomicUsize,
    /// The service is gone: every connection it still has fails its next request.
    killed: AtomicBool,
    last: Mutex<Option<(String, http::HeaderMap, usize)>>,
}

/// A small auth service with oauth2-proxy's contract: `Bearer good` is 202 with
/// `X-Auth-Request-User: alice` (and a refreshed session cookie), `Bearer deny` 403,
/// `Bearer slow` answers after 3 s, `Bearer big` 200 with a 10 MB body, `Bearer teapot` 418,
/// anything else 401 with a challenge.
async fn auth_service(seen: Arc<Seen>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        if seen.killed.load(Ordering::SeqCst) {
                            return Err(std::io::Error::other("killed"));
                        }
                        seen.calls.fetch_add(1, Ordering::SeqCst);
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes().len())
                            .unwrap_or(0);
                        *seen.last.lock().expect("lock") =
                            Some((parts.method.to_string(), parts.headers.clone(), body));
                        let auth = parts
                            .headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("");
                        let mut resp = Response::new(Full::new(Bytes::new()));
                        match auth {
                            "Bearer good" => {
                                *resp.status_mut() = http::StatusCode::ACCEPTED;
                                let h = resp.headers_mut();
                                h.insert("x-auth-request-user", "alice".parse().expect("v"));
                                h.insert(
                                    "x-auth-request-email",
                                    "alice@example.com".parse().expect("v"),
                                );
                                h.insert(
                                    "set-cookie",
                                    "_oauth2_proxy=refreshed; Path=/".parse().expect("v"),
                                );
                            }
                            "Bearer deny" => *resp.status_mut() = http::StatusCode::FORBIDDEN,
                            "Bearer slow" => {
                                tokio::time::sleep(Duration::from_secs(3)).await;
                                *resp.status_mut() = http::StatusCode::ACCEPTED;
                            }
                            "Bearer big" => {
                                *resp.body_mut() = Full::new(Bytes::from(vec![b'x'; 10 << 20]));
                            }
                            "Bearer teapot" => *resp.status_mut() = http::StatusCode::IM_A_TEAPOT,
                            _ => {
                                *resp.status_mut() = http::StatusCode::UNAUTHORIZED;
                                resp.headers_mut().insert(
                                    "www-authenticate",
                                    "Bearer realm=\"sso\"".parse().expect("v"),
                                );
                            }
                        }
                        Ok::<_, std::io::Error>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

fn forward_config(port: u16, admin: u16, backend: SocketAddr, auth: SocketAddr) -> String {
    format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2

[upstreams.api]
targets = ["{backend}"]

[auth.sso]
forward = {{ url = "http://{auth}/oauth2/auth", response_headers = ["X-Auth-Request-User", "X-Auth-Request-Email"], timeout = "1s" }}

[[routes]]
name = "api"
path_prefix = "/api"
upstream = "api"
auth = "sso"

[[routes]]
name = "cached"
path_prefix = "/cached"
upstream = "api"
auth = {{ forward = {{ url = "http://{auth}/oauth2/auth", cache = "30s", response_headers = ["X-Auth-Request-User"] }} }}

[[routes]]
name = "app"
host = "app.example.com"
path_prefix = "/"
upstream = "api"
auth = {{ forward = {{ url = "http://{auth}/oauth2/auth", signin = "https://login.example.com/oauth2/start" }} }}

[[routes]]
name = "open"
path_prefix = "/open"
upstream = "api"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_allows_denies_redirects_and_never_fails_open() {
    let backend = Backend::start().await.expect("backend");
    let seen = Arc::new(Seen::default());
    let (auth, auth_task) = auth_service(seen.clone()).await;
    let (port, admin) = (free_port(), free_port());
    let gw = serve(
        &forward_config(port, admin, backend.addr, auth),
        port,
        admin,
    )
    .await;

    // Allowed (202, oauth2-proxy's answer): the auth service's headers go upstream, the
    // client's own copies never do, and its refreshed cookie reaches the client.
    let mut conn = Conn::open(port).await.expect("connect");
    let r = conn
        .send(
            "POST",
            "/api/orders/../orders/7?x=1",
            &[
                ("authorization", "Bearer good"),
                ("x-auth-request-user", "admin"),
                ("x-forwarded-host", "evil.example"),
                ("x-original-url", "http://evil.example/"),
            ],
            "a body the auth service never sees",
        )
        .await
        .expect("request");
    assert_eq!(r.status, 200, "{}", r.body);
    let up = r.json();
    assert_eq!(up["headers"]["x-auth-request-user"], "alice", "{up}");
    assert_eq!(up["headers"]["x-auth-request-email"], "alice@example.com");
    assert_eq!(upstream_path(&r), "/api/orders/7?x=1");
    assert_eq!(
        r.header("set-cookie"),
        Some("_oauth2_proxy=refreshed; Path=/")
    );
    let (method, headers, body) = seen.last.lock().expect("lock").clone().expect("a call");
    assert_eq!(
        method, "POST",
        "the client's method, as ingress-nginx sends it"
    );
    assert_eq!(body, 0, "no body goes to the auth service");
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        h("x-original-url"),
        format!("http://127.0.0.1:{port}/api/orders/7?x=1")
    );
    assert_eq!(h("x-original-method"), "POST");
    assert_eq!(h("x-forwarded-uri"), "/api/orders/7?x=1");
    assert_eq!(
        h("x-forwarded-host"),
        format!("127.0.0.1:{port}"),
        "never the client's copy"
    );
    assert_eq!(h("x-forwarded-for"), "127.0.0.1");
    assert_eq!(h("x-auth-request-redirect"), "/api/orders/7?x=1");
    assert_eq!(
        h("authorization"),
        "Bearer good",
        "the client's credentials are passed"
    );
    assert!(headers.get("content-length").is_none_or(|v| v == "0"));

    // Spoofed header with no credentials: refused, and the backend is never reached.
    let hits = backend.hits();
    let r = call(port, "/api/x", &[("x-auth-request-user", "admin")]).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"sso\""));
    assert_eq!(r.json()["error_code"], "UNAUTHENTICATED");
    let r = call(port, "/api/x", &[("authorization", "Bearer deny")]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error_code"], "FORBIDDEN");
    let r = call(port, "/api/x", &[("authorization", "Bearer teapot")]).await;
    assert_eq!(
        r.status, 500,
        "an answer other than 2xx/401/403 never lets a request pass"
    );
    let r = call(port, "/api/x", &[("authorization", "Bearer big")]).await;
    assert_eq!(r.status, 500, "a 10 MB auth answer is not read: {}", r.body);
    let started = Instant::now();
    let r = call(port, "/api/x", &[("authorization", "Bearer slow")]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error_code"], "AUTH_UNAVAILABLE");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the timeout holds"
    );
    assert_eq!(backend.hits(), hits, "nothing refused reached the backend");
    // It answers again (logged once: the outage's end).
    let r = call(port, "/api/x", &[("authorization", "Bearer good")]).await;
    assert_eq!(r.status, 200);

    // The sign-in redirect: rd= the original URL on the route's host, however the client
    // spells its own rd.
    let r = call(
        port,
        "/dashboard?rd=https://evil.example/",
        &[("host", "app.example.com")],
    )
    .await;
    assert_eq!(r.status, 302, "{}", r.body);
    let loc = r.header("location").expect("location");
    assert_eq!(
        loc,
        "https://login.example.com/oauth2/start?rd=http%3A%2F%2Fapp.example.com%2Fdashboard%3Frd%3Dhttps%3A%2F%2Fevil.example%2F"
    );
    let r = call(
        port,
        "/dashboard",
        &[
            ("host", "app.example.com"),
            ("authorization", "Bearer good"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);

    // Cached: one call to the auth service for many requests with the same credentials.
    let before = seen.calls.load(Ordering::SeqCst);
    for _ in 0..20 {
        let r = call(port, "/cached/x", &[("authorization", "Bearer good")]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["headers"]["x-auth-request-user"], "alice");
    }
    assert_eq!(
        seen.calls.load(Ordering::SeqCst) - before,
        1,
        "the cache answers 19 of 20"
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_auth_total",
            &["route=\"cached\"", "result=\"cached\""]
        ),
        19.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_auth_total",
            &["route=\"api\"", "result=\"error\""]
        ),
        3.0
    );
    assert!(m.contains("tollgate_auth_service_seconds_count{route=\"api\"}"));

    // Anonymous answers are never reused: each anonymous request asks again.
    let before = seen.calls.load(Ordering::SeqCst);
    for _ in 0..3 {
        assert_eq!(call(port, "/cached/x", &[]).await.status, 401);
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst) - before, 3);
    // The same credentials on another path: asked again (the service may decide per URL).
    let r = call(port, "/cached/other", &[("authorization", "Bearer good")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(seen.calls.load(Ordering::SeqCst) - before, 4);
    // Two Authorization headers: ambiguous, never asked about.
    let r = call(
        port,
        "/api/x",
        &[
            ("authorization", "Bearer good"),
            ("authorization", "Bearer deny"),
        ],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // A raw UTF-8 query: the service is still told the exact target (percent-encoded).
    let status = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        raw.write_all(b"GET /api/x?name=caf\xc3\xa9 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer good\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    if status.starts_with("HTTP/1.1 200") {
        let (_, headers, _) = seen.last.lock().expect("lock").clone().expect("a call");
        assert_eq!(
            headers.get("x-forwarded-uri").and_then(|v| v.to_str().ok()),
            Some("/api/x?name=caf%C3%A9")
        );
    }
    // Underscore spellings of the auth's headers never reach the upstream; nor do other
    // proxies' client-address headers reach the auth service.
    let r = call(
        port,
        "/api/x",
        &[
            ("authorization", "Bearer good"),
            ("x_auth_request_user", "admin"),
            ("true-client-ip", "10.0.0.5"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.json()["headers"]["x_auth_request_user"].is_null(),
        "{}",
        r.body
    );
    let (_, headers, _) = seen.last.lock().expect("lock").clone().expect("a call");
    assert!(headers.get("true-client-ip").is_none());

    // A route without auth pays nothing and is not asked about.
    let before = seen.calls.load(Ordering::SeqCst);
    assert_eq!(call(port, "/open/x", &[]).await.status, 200);
    assert_eq!(seen.calls.load(Ordering::SeqCst), before);

    // The auth service killed: 503, nothing passes (its cache aside, which holds only
    // answers it gave).
    let outages = gw.log_text().matches("auth_service_unavailable").count();
    seen.killed.store(true, Ordering::SeqCst);
    auth_task.abort();
    let _ = auth_task.await;
    let hits = backend.hits();
    for _ in 0..3 {
        let r = call(port, "/api/x", &[("authorization", "Bearer good")]).await;
        assert_eq!(r.status, 503, "{}", r.body);
    }
    assert_eq!(backend.hits(), hits);
    let log = gw.log_text();
    assert_eq!(
        log.matches("auth_service_unavailable").count(),
        outages + 1,
        "one line per outage, never per request: {log}"
    );
}

// ---------------------------------------------------------------- basic auth

fn htpasswd(file: &Path, flag: &str, user: &str, password: &str) -> bool {
    let mut cmd = std::process::Command::new("htpasswd");
    cmd.arg("-b");
    if !file.exists() {
        cmd.arg("-c");
    }
    cmd.arg(flag).arg(file).arg(user).arg(password);
    cmd.output().map(|o| o.status.success()).unwrap_or(false)
}

fn basic(user: &str, password: &str) -> String {
    let raw = format!("{user}:{password}");
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in raw.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(table[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_verifies_what_htpasswd_writes_and_counts_failures() {
    let dir = temp_dir("auth-basic");
    let file = dir.join("users.htpasswd");
    assert!(
        htpasswd(&file, "-B", "bea", "bcrypt-pass"),
        "htpasswd (apache2-utils) is installed"
    );
    assert!(htpasswd(&file, "-m", "amy", "apr1-pass"));
    assert!(htpasswd(&file, "-s", "sam", "sha1-pass"));
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2
[upstreams.api]
targets = ["{}"]
[[routes]]
name = "staff"
path_prefix = "/staff"
upstream = "api"
auth = {{ basic = {{ htpasswd = "{}", realm = "Staff" }} }}
limits = ["logins"]
[limits.logins]
key = "client_ip"
rate = "5/h"
count = "failures"
"#,
        backend.addr,
        file.display()
    );
    let gw = serve(&toml, port, admin).await;

    for (user, pass) in [
        ("bea", "bcrypt-pass"),
        ("amy", "apr1-pass"),
        ("sam", "sha1-pass"),
    ] {
        let r = call(port, "/staff/x", &[("authorization", &basic(user, pass))]).await;
        assert_eq!(r.status, 200, "{user}: {}", r.body);
        assert!(
            r.json()["headers"]["authorization"].is_null(),
            "the upstream never sees a password"
        );
    }
    // bcrypt once per credential: the next requests are answered from the cache.
    for _ in 0..5 {
        let r = call(
            port,
            "/staff/x",
            &[("authorization", &basic("bea", "bcrypt-pass"))],
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_auth_total",
            &["route=\"staff\"", "result=\"cached\""]
        ),
        5.0
    );

    // Wrong password, unknown user, no credentials: 401 with the realm; each counted.
    for (creds, why) in [
        (Some(basic("bea", "wrong")), "wrong password"),
        (Some(basic("nobody", "x")), "unknown user"),
        (None, "no credentials"),
    ] {
        let headers: Vec<(&str, &str)> = creds
            .iter()
            .map(|c| ("authorization", c.as_str()))
            .collect();
        let r = call(port, "/staff/x", &headers).await;
        assert_eq!(r.status, 401, "{why}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"Staff\", charset=\"UTF-8\""),
            "{why}"
        );
    }
    // Duplicate Authorization headers: ambiguous.
    let good = basic("bea", "bcrypt-pass");
    let r = call(
        port,
        "/staff/x",
        &[
            ("authorization", &good),
            ("authorization", &basic("x", "y")),
        ],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // Two more failures fill the failure limit (5/h): then even the right password waits.
    for _ in 0..2 {
        assert_eq!(
            call(port, "/staff/x", &[("authorization", &basic("bea", "no"))])
                .await
                .status,
            401
        );
    }
    let r = call(port, "/staff/x", &[("authorization", &basic("bea", "no"))]).await;
    assert_eq!(
        r.status, 429,
        "credential stuffing meets the failure limit: {}",
        r.body
    );

    // The file changed (a password changed, a user added) under load: picked up without a
    // restart, and every request meanwhile is answered 200 or 401, never an error.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let creds = basic("amy", "apr1-pass");
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut conn = Conn::open_from([127, 0, 0, 4].into(), port)
                .await
                .expect("connect");
            while !stop.load(Ordering::SeqCst) {
                let r = conn
                    .send("GET", "/staff/x", &[("authorization", &creds)], "")
                    .await;
                seen.push(r.map(|r| r.status).unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let file2 = dir.join("users2.htpasswd");
    assert!(htpasswd(&file2, "-B", "bea", "new-pass"));
    assert!(htpasswd(&file2, "-m", "zoe", "zoe-pass"));
    std::fs::rename(&file2, &file).expect("replace the file");
    let mut gw = gw;
    assert!(
        gw.wait_log("config reloaded", Duration::from_secs(10))
            .await,
        "a change to the htpasswd file reloads: {}",
        gw.log_text()
    );
    // From another address: 127.0.0.1 has used up its failures.
    let last = request_from(
        [127, 0, 0, 2].into(),
        port,
        "GET",
        "/staff/x",
        &[("authorization", &basic("zoe", "zoe-pass"))],
        "",
    )
    .await;
    let changed = last.as_ref().is_ok_and(|r| r.status == 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    let seen = load.await.expect("load");
    let count = |st: u16| seen.iter().filter(|s| **s == st).count();
    let summary = format!(
        "200: {}, 401: {}, 429: {}, of {}",
        count(200),
        count(401),
        count(429),
        seen.len()
    );
    assert!(seen.len() > 10, "{summary}");
    // 200 under the old file, 401 under the new one (amy is gone), then 429 once the failure
    // limit of her address is used up; never an error, never back to the old file.
    assert_eq!(
        count(200) + count(401) + count(429),
        seen.len(),
        "{summary}"
    );
    assert!(count(200) > 0 && count(401) > 0, "{summary}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "in order: {summary}");
    assert!(
        changed,
        "the new file is in force: {last:?} {}",
        gw.log_text()
    );
    let r = request_from(
        [127, 0, 0, 3].into(),
        port,
        "GET",
        "/staff/x",
        &[("authorization", &basic("bea", "bcrypt-pass"))],
        "",
    )
    .await
    .expect("request");
    assert_eq!(
        r.status, 401,
        "the old password no longer works (its cache went with the old file)"
    );
}

#[test]
fn hashes_tollgate_cannot_verify_are_refused_at_load() {
    let dir = temp_dir("auth-basic-crypt");
    let file = dir.join("crypt.htpasswd");
    assert!(htpasswd(&file, "-d", "old", "pw"));
    let conf = dir.join("t.toml");
    std::fs::write(
        &conf,
        format!(
            "[upstreams.a]\ntargets = [\"127.0.0.1:9\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nauth = {{ basic = {{ htpasswd = \"{}\" }} }}\n",
            file.display()
        ),
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .arg("check")
        .arg(&conf)
        .output()
        .expect("run");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("crypt.htpasswd line 1") && text.contains("DES crypt"),
        "{text}"
    );
}

// ---------------------------------------------------------------- API keys

/// A keys file (lines `CONSUMER KEY`) in a test folder of its own.
fn keys_file(tag: &str, text: &str) -> PathBuf {
    let keys = temp_dir(tag).join("keys.txt");
    std::fs::write(&keys, text).expect("write");
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_name_consumers_for_limits_and_are_never_logged() {
    let keys = keys_file(
        "auth-keys",
        "# consumer key\nacme  acme-key-0123456789abcdef\nglobex globex-key-0123456789abcdef\n",
    );
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"[upstreams.api]
targets = ["{}"]
[[routes]]
name = "keyed"
path_prefix = "/v1"
upstream = "api"
auth = {{ api_key = {{ header = "X-API-Key", query = "api_key", keys_file = "{}" }} }}
limits = ["per_consumer"]
[limits.per_consumer]
key = "consumer"
rate = "2/h"
"#,
            backend.addr,
            keys.display()
        ),
    );
    let gw = serve(&toml, port, admin).await;
    let acme = [("x-api-key", "acme-key-0123456789abcdef")];
    assert_eq!(call(port, "/v1/a", &acme).await.status, 200);
    assert_eq!(
        call(port, "/v1/a?api_key=acme-key-0123456789abcdef", &[])
            .await
            .status,
        200
    );
    assert_eq!(
        call(port, "/v1/a", &acme).await.status,
        429,
        "acme's own limit"
    );
    let globex = [("x-api-key", "globex-key-0123456789abcdef")];
    assert_eq!(
        call(port, "/v1/a", &globex).await.status,
        200,
        "globex is another consumer"
    );
    let r = call(port, "/v1/a", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("ApiKey header=\"x-api-key\"")
    );
    assert_eq!(
        call(port, "/v1/a", &[("x-api-key", "acme-key-0123456789abcdeX")])
            .await
            .status,
        401
    );
    let r = call(
        port,
        "/v1/a",
        &[("x-api-key", "a-key-0123456789abcdef0"), ("x-api-key", "b")],
    )
    .await;
    assert_eq!(r.status, 400, "two key headers: {}", r.body);
    let r = call(
        port,
        "/v1/a?api_key=zzzz-key-0123456789abcdef&api%5Fkey=globex-key-0123456789abcdef",
        &[],
    )
    .await;
    assert_eq!(
        r.status, 400,
        "the key parameter twice, in two spellings: {}",
        r.body
    );
    assert!(
        !gw.log_text().contains("key-0123456789abcdef"),
        "keys are never logged"
    );
}

// ---------------------------------------------------------------- JWT with a live JWKS

struct Jwks {
    doc: Mutex<String>,
    fetches: AtomicUsize,
    down: AtomicBool,
}

/// A JWKS served over HTTPS (a test CA's certificate for 127.0.0.1) at `/jwks.json`.
async fn jwks_server(state: Arc<Jwks>, dir: &Path) -> (u16, PathBuf, tokio::task::JoinHandle<()>) {
    let ca = Ca::new("idp ca").expect("ca");
    let ca_file = ca.write(dir, "idp-ca.pem").expect("write");
    let leaf = ca.issue(&LeafSpec::server(&["127.0.0.1"])).expect("leaf");
    let certs = vec![rustls::pki_types::CertificateDer::from(leaf.der.clone())];
    let key: rustls::pki_types::PrivateKeyDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(leaf.key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("cert");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, state) = (acceptor.clone(), state.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let state = state.clone();
                    async move {
                        state.fetches.fetch_add(1, Ordering::SeqCst);
                        let mut resp = Response::new(Full::new(Bytes::from(
                            state.doc.lock().expect("lock").clone(),
                        )));
                        if state.down.load(Ordering::SeqCst) {
                            *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                        } else {
                            resp.headers_mut()
                                .insert("cache-control", "max-age=600".parse().expect("v"));
                        }
                        Ok::<_, hyper::Error>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (port, ca_file, task)
}

fn claims(sub: &str, scope: &str) -> serde_json::Value {
    json!({"sub": sub, "scope": scope, "exp": unix_now() + 600, "iss": "https://idp.example.com", "aud": "orders-api"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_jwts_follow_a_live_jwks_and_refuse_every_forgery() {
    let dir = temp_dir("auth-jwks");
    let (k1_private, k1) = es256_jwk("k1");
    let (k2_private, k2) = es256_jwk("k2");
    let state = Arc::new(Jwks {
        doc: Mutex::new(json!({"keys": [k1]}).to_string()),
        fetches: AtomicUsize::new(0),
        down: AtomicBool::new(false),
    });
    let (idp, ca, _idp_task) = jwks_server(state.clone(), &dir).await;
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2
[jwt]
jwks_url = "https://127.0.0.1:{idp}/jwks.json"
jwks_ca = "{}"
jwks_refetch = "1s"
issuer = "https://idp.example.com"
audience = "orders-api"
algorithms = ["ES256", "RS256", "HS256"]
secret = "a-secret-that-is-not-the-rsa-key-0123"
[upstreams.api]
targets = ["{}"]
[[routes]]
name = "orders"
path_prefix = "/orders"
upstream = "api"
auth = {{ jwt = "required", claims = {{ scope = "orders:read" }}, forward_claims = {{ sub = "X-User-Id" }} }}
[[routes]]
name = "maybe"
path_prefix = "/maybe"
upstream = "api"
auth = {{ jwt = "optional", forward_claims = {{ sub = "X-User-Id" }} }}
"#,
        ca.display(),
        backend.addr
    );
    let gw = serve(&toml, port, admin).await;
    let ready = eventually(Duration::from_secs(10), || async {
        get(admin, "/readyz", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ready, "ready once the set is in: {}", gw.log_text());

    let bearer = |t: &str| format!("Bearer {t}");
    let t1 = jwt_with_kid(
        "ES256",
        &k1_private,
        "k1",
        &claims("alice", "orders:read orders:write"),
    );
    let r = call(
        port,
        "/orders/1",
        &[("authorization", &bearer(&t1)), ("x-user-id", "admin")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["headers"]["x-user-id"],
        "alice",
        "the claim, never the client's copy"
    );
    let r = call(port, "/orders/1", &[("x-user-id", "admin")]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let narrow = jwt_with_kid("ES256", &k1_private, "k1", &claims("bob", "orders:write"));
    let r = call(port, "/orders/1", &[("authorization", &bearer(&narrow))]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error_code"], "INSUFFICIENT_SCOPE");
    assert!(r
        .header("www-authenticate")
        .is_some_and(|w| w.contains("insufficient_scope")));
    // Optional: no token passes without the header; a spoofed header never passes.
    let r = call(port, "/maybe/1", &[("x-user-id", "admin")]).await;
    assert_eq!(r.status, 200);
    assert!(r.json()["headers"]["x-user-id"].is_null(), "{}", r.body);
    let r = call(port, "/maybe/1", &[("authorization", "Bearer garbage")]).await;
    assert_eq!(
        r.status, 401,
        "a bad token is refused even where one is optional"
    );

    // Forgeries: HS256 signed with the RSA public key's PEM (alg confusion), alg none, odd
    // kids, a huge token, two Authorization headers.
    let rsa_pub = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/jwt/rs256-public.pem"),
    )
    .expect("pem");
    let confused = jwt_with_kid("HS256", &rsa_pub, "k1", &claims("mallory", "orders:read"));
    let none = format!(
        "{}.{}.",
        base64_url(r#"{"alg":"none","typ":"JWT","kid":"k1"}"#),
        base64_url(&claims("mallory", "orders:read").to_string())
    );
    let odd_kids: Vec<String> = ["../../etc/passwd", "' OR 1=1 --", "k1\u{0}"]
        .iter()
        .map(|kid| jwt_with_kid("ES256", &k1_private, kid, &claims("mallory", "orders:read")))
        .collect();
    let huge = jwt_with_kid(
        "ES256",
        &k1_private,
        "k1",
        &json!({"sub": "x".repeat(60_000), "scope": "orders:read", "exp": unix_now() + 600}),
    );
    let hits = backend.hits();
    for t in [&confused, &none].into_iter().chain(odd_kids.iter()) {
        let r = call(port, "/orders/1", &[("authorization", &bearer(t))]).await;
        assert_eq!(r.status, 401, "{t}: {}", r.body);
    }
    let r = call(port, "/orders/1", &[("authorization", &bearer(&huge))]).await;
    assert!(matches!(r.status, 401 | 431), "{}", r.status);
    let r = call(
        port,
        "/orders/1",
        &[
            ("authorization", &bearer(&t1)),
            ("authorization", &bearer(&narrow)),
        ],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(backend.hits(), hits, "no forgery reached the backend");

    // Rotation: k2 published, k1 removed; picked up without a reload on k2's first token.
    *state.doc.lock().expect("lock") = json!({"keys": [k2]}).to_string();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t2 = jwt_with_kid("ES256", &k2_private, "k2", &claims("carol", "orders:read"));
    let r = call(port, "/orders/1", &[("authorization", &bearer(&t2))]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(port, "/orders/1", &[("authorization", &bearer(&t1))]).await;
    assert_eq!(r.status, 401, "k1 is gone, and its cached token with it");

    // The provider down: the last good set keeps serving.
    state.down.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t2b = jwt_with_kid("ES256", &k2_private, "k2", &claims("dave", "orders:read"));
    let r = call(port, "/orders/1", &[("authorization", &bearer(&t2b))]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let unknown = jwt_with_kid("ES256", &k2_private, "k9", &claims("dave", "orders:read"));
    let r = call(port, "/orders/1", &[("authorization", &bearer(&unknown))]).await;
    assert_eq!(r.status, 401);
    state.down.store(false, Ordering::SeqCst);

    // 10,000 requests with random kids: a handful of fetches at most.
    let before = state.fetches.load(Ordering::SeqCst);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..4u64 {
        let key = k2_private.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(port).await.expect("connect");
            let mut refused = 0;
            for i in 0..2500u64 {
                let t = jwt_with_kid(
                    "ES256",
                    &key,
                    &format!("kid-{c}-{i}-{}", fastrand_like(i)),
                    &claims("eve", "orders:read"),
                );
                let r = conn
                    .send(
                        "GET",
                        "/orders/1",
                        &[("authorization", &format!("Bearer {t}"))],
                        "",
                    )
                    .await
                    .expect("request");
                refused += usize::from(r.status == 401);
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.expect("task");
    }
    let fetches = state.fetches.load(Ordering::SeqCst) - before;
    let secs = started.elapsed().as_secs() + 1;
    assert_eq!(refused, 10_000);
    assert!(
        fetches as u64 <= secs + 1,
        "{fetches} fetches in {secs} s for 10,000 random kids (at most one per jwks_refetch)"
    );
    let log = gw.log_text();
    assert!(
        log.contains("jwks_changed"),
        "one line per change of the set"
    );
    assert_eq!(
        log.matches("jwks_unavailable").count(),
        1,
        "one line per outage: {log}"
    );
}

fn fastrand_like(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40
}

fn base64_url(s: &str) -> String {
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(table[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_names_its_plan() {
    let keys = keys_file(
        "auth-plans",
        "acme acme-key-0123456789abcdef\nsolo solo-key-0123456789abcdef\n",
    );
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"[plans]
default = "free"
tenant = "consumer"
tenants = {{ acme = "pro" }}
[plans.free]
rate = "1/h"
[plans.pro]
rate = "3/h"
[upstreams.api]
targets = ["{}"]
[[routes]]
path_prefix = "/v1"
upstream = "api"
auth = {{ api_key = {{ keys_file = "{}" }} }}
limits = ["by_plan"]
[limits.by_plan]
key = "consumer"
plan = "rate"
"#,
            backend.addr,
            keys.display()
        ),
    );
    let _gw = serve(&toml, port, admin).await;
    let statuses = |key: &'static str| async move {
        let mut out = Vec::new();
        for _ in 0..4 {
            out.push(call(port, "/v1/x", &[("x-api-key", key)]).await.status);
        }
        out
    };
    assert_eq!(
        statuses("acme-key-0123456789abcdef").await,
        [200, 200, 200, 429],
        "acme is on pro"
    );
    assert_eq!(
        statuses("solo-key-0123456789abcdef").await,
        [200, 429, 429, 429],
        "solo on the default"
    );
}
