//! Dev-only helpers for end-to-end tests: real sockets on loopback, ephemeral ports, processes
//! killed on drop. Nothing here is used by the gateway itself.
//!
//! - [`Backend`]: an HTTP/1.1 server answering a JSON echo of each request (method, path,
//!   headers, body), counting what it saw. `/slow?ms=N` waits N ms first;
//!   `/big?bytes=N` answers N bytes instead.
//! - [`GatewayProc`]: the built `tollgate` binary serving a TOML text, with readiness.
//! - [`Client`] helpers: HTTP/1.1 from a chosen source address, and HTTP/2 with prior knowledge.

pub mod pki;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket};

/// A free TCP port on 127.0.0.1, chosen at run time and checked free by binding it, never the
/// same twice in one test process.
///
/// Taken from just below the kernel's ephemeral range (`ip_local_port_range`), not from it:
/// the kernel hands ephemeral ports out as the source ports of outgoing connections, and a
/// test that opens thousands of them (an upgrade test looping new connections, their client
/// ends in TIME_WAIT) would sooner or later take the very port another test's gateway is about
/// to listen on ("address in use"). Below the range only listeners take ports. Each process
/// starts at its own offset, so test binaries running at once rarely meet.
pub fn free_port() -> u16 {
    static NEXT: std::sync::Mutex<Option<u32>> = std::sync::Mutex::new(None);
    let low = ephemeral_low();
    let (base, span) = if low > 12_000 {
        (10_000, low - 10_000)
    } else {
        // An unusual range: fall back to letting the kernel choose.
        return std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
    };
    let Ok(mut next) = NEXT.lock() else {
        return 0;
    };
    let mut n = next.unwrap_or_else(|| (std::process::id() * 7919) % span);
    let Ok(mut reserved) = RESERVED.lock() else {
        return 0;
    };
    for _ in 0..span {
        n = (n + 1) % span;
        let p = (base + n) as u16;
        if reserved.contains(&p) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            *next = Some(n);
            reserved.push(p);
            return p;
        }
    }
    0
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|p| p.parse::<u32>().ok())
        })
        .unwrap_or(32768)
}

/// Ports handed out by [`free_port`], or kept for another use (a cluster node's bus port).
static RESERVED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// A loopback HTTP/1.1 backend that echoes requests as JSON (status 200, or the one asked for
/// in `x-want-status`).
pub struct Backend {
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(0).await
    }

    /// On a given port (0: ephemeral), e.g. to bring a dead target back.
    pub async fn start_on(port: u16) -> std::io::Result<Self> {
        Self::start_at(SocketAddr::from(([127, 0, 0, 1], port))).await
    }

    /// On a given address (any of 127.0.0.0/8; port 0: ephemeral).
    pub async fn start_at(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let sim: Attempts = Default::default();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let h = h.clone();
                let sim = sim.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (h, sim) = (h.clone(), sim.clone());
                        async move {
                            if let Some(fail) = retry_simulation(&req, &sim).await {
                                return fail;
                            }
                            echo(req, h).await.map_err(std::io::Error::other)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { addr, hits, task })
    }

    /// Requests answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A request a [`Recorder`] was sent, whole.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// An upstream that keeps every request it is sent and answers `204` after `delay` (a mirror,
/// a slow one).
pub struct Recorder {
    pub addr: SocketAddr,
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    pub async fn start(delay: Duration) -> std::io::Result<Self> {
        Self::start_with(delay, false).await
    }

    /// An error-page server, as ingress-nginx's custom-error-pages example: it answers the
    /// status its request's `X-Code` names (200 without one), `page for CODE` as HTML.
    pub async fn pages() -> std::io::Result<Self> {
        Self::start_with(Duration::ZERO, true).await
    }

    async fn start_with(delay: Duration, pages: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Arc::default();
        let s = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let s = s.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await?.to_bytes();
                            let code = parts
                                .headers
                                .get("x-code")
                                .and_then(|v| v.to_str().ok()?.parse::<u16>().ok())
                                .and_then(|c| http::StatusCode::from_u16(c).ok());
                            s.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
                                method: parts.method.to_string(),
                                target: parts.uri.to_string(),
                                headers: parts.headers,
                                body,
                            });
                            tokio::time::sleep(delay).await;
                            if !pages {
                                let mut r = Response::new(Full::new(Bytes::new()));
                                *r.status_mut() = http::StatusCode::NO_CONTENT;
                                return Ok::<_, hyper::Error>(r);
                            }
                            let code = code.unwrap_or(http::StatusCode::OK);
                            let mut r = Response::new(Full::new(Bytes::from(format!(
                                "page for {}",
                                code.as_u16()
                            ))));
                            *r.status_mut() = code;
                            r.headers_mut().insert(
                                "content-type",
                                http::HeaderValue::from_static("text/html"),
                            );
                            Ok::<_, hyper::Error>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { addr, seen, task })
    }

    /// The requests kept so far, in the order they came.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Each `uuid`'s attempts so far (the retry simulation's).
type Attempts = Arc<std::sync::Mutex<HashMap<String, u32>>>;

/// The conformance echo server's retry simulation: with `uuid=U&succeedAfter=N` in the query,
/// the first N requests of U fail, after `delayRetry` (`300ms`, `1s`) when given: answered
/// `responseCode` when given, else with the connection dropped before any answer. `None`:
/// answer as usual (`hits` counts only those).
async fn retry_simulation(
    req: &Request<Incoming>,
    sim: &Attempts,
) -> Option<Result<Response<Full<Bytes>>, std::io::Error>> {
    let q = req.uri().query()?;
    let get = |k: &str| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
    };
    let uuid = get("uuid")?;
    let after: u32 = get("succeedAfter")?.parse().ok()?;
    let seen = {
        let mut m = sim.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(uuid.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    if seen > after {
        return None;
    }
    if let Some(d) = get("delayRetry").and_then(duration_param) {
        tokio::time::sleep(d).await;
    }
    Some(
        match get("responseCode").and_then(|c| c.parse::<u16>().ok()) {
            Some(code) => {
                let mut r = Response::new(Full::new(Bytes::from_static(b"simulated failure")));
                *r.status_mut() = http::StatusCode::from_u16(code)
                    .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                Ok(r)
            }
            None => Err(std::io::Error::other("simulated connection error")),
        },
    )
}

/// `500ms` or `1s`.
fn duration_param(v: &str) -> Option<Duration> {
    match v.strip_suffix("ms") {
        Some(ms) => ms.parse().ok().map(Duration::from_millis),
        None => v.strip_suffix('s')?.parse().ok().map(Duration::from_secs),
    }
}

async fn echo(
    req: Request<Incoming>,
    hits: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    hits.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    // `?NAME=N` as the whole query, else `default`.
    let number = |name: &str, default: usize| {
        parts
            .uri
            .query()
            .and_then(|q| q.strip_prefix(name)?.strip_prefix('='))
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    // `delay=1s` or `delay=500ms` in the query, as the conformance suite's echo server.
    let delay = parts
        .uri
        .query()
        .and_then(|q| duration_param(q.split('&').find_map(|kv| kv.strip_prefix("delay="))?));
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if parts.uri.path() == "/slow" {
        tokio::time::sleep(Duration::from_millis(number("ms", 1000) as u64)).await;
    }
    if parts.uri.path() == "/big" {
        // A large answer, for clients that do not read it.
        let n = number("bytes", 1 << 20);
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; n]))));
    }
    let mut headers = serde_json::Map::new();
    for (k, v) in &parts.headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        match headers.get_mut(k.as_str()) {
            // Repeated headers are joined as a list would be.
            Some(serde_json::Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                headers.insert(k.as_str().to_string(), v.into());
            }
        }
    }
    let out = serde_json::json!({
        "method": parts.method.as_str(),
        "path": parts.uri.to_string(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    // A test asks for an answer without a body (`x-want-empty`): an error page of length 0.
    let text = if parts.headers.contains_key("x-want-empty") {
        String::new()
    } else {
        out.to_string()
    };
    let mut resp = Response::new(Full::new(Bytes::from(text)));
    // A test asks for the status it wants answered (e.g. 401: a failed login).
    if let Some(code) = parts
        .headers
        .get("x-want-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u16>().ok())
        .and_then(|c| http::StatusCode::from_u16(c).ok())
    {
        *resp.status_mut() = code;
    }
    resp.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    // And the response fields it wants the upstream to send (`x-want-header: NAME: VALUE`,
    // one field each): a Location, a Set-Cookie.
    for want in parts.headers.get_all("x-want-header") {
        let Some((name, value)) = want.to_str().ok().and_then(|w| w.split_once(':')) else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.trim().as_bytes()),
            http::HeaderValue::from_str(value.trim()),
        ) {
            resp.headers_mut().append(n, v);
        }
    }
    Ok(resp)
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

async fn read_reply(resp: Response<Incoming>) -> std::io::Result<Reply> {
    let status = resp.status().as_u16();
    let mut headers = HashMap::new();
    for (k, v) in resp.headers() {
        headers.insert(
            k.as_str().to_string(),
            String::from_utf8_lossy(v.as_bytes()).into_owned(),
        );
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

const REQUEST_BUDGET: Duration = Duration::from_secs(10);

fn timed_out(_: tokio::time::error::Elapsed) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out")
}

/// One HTTP/1.1 keep-alive connection to the gateway on 127.0.0.1.
pub struct Conn {
    port: u16,
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Conn {
    /// Connects from 127.0.0.1.
    pub async fn open(port: u16) -> std::io::Result<Self> {
        Self::open_from(IpAddr::from([127, 0, 0, 1]), port).await
    }

    /// Connects from `source` (any 127.0.0.0/8 address works on Linux loopback).
    pub async fn open_from(source: IpAddr, port: u16) -> std::io::Result<Self> {
        let sock = TcpSocket::new_v4()?;
        sock.bind(SocketAddr::new(source, 0))?;
        let stream = tokio::time::timeout(
            REQUEST_BUDGET,
            sock.connect(SocketAddr::from(([127, 0, 0, 1], port))),
        )
        .await
        .map_err(timed_out)??;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        Ok(Self { port, send })
    }

    /// One request on this connection, read whole, with a 10 s budget. A `host` header is
    /// added unless given. Fails if the gateway closed the connection.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> std::io::Result<Reply> {
        let mut req = Request::builder().method(method).uri(path);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req = req.header("host", format!("127.0.0.1:{}", self.port));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(std::io::Error::other)?;
        let fut = async {
            self.send.ready().await.map_err(std::io::Error::other)?;
            let resp = self
                .send
                .send_request(req)
                .await
                .map_err(std::io::Error::other)?;
            read_reply(resp).await
        };
        tokio::time::timeout(REQUEST_BUDGET, fut)
            .await
            .map_err(timed_out)?
    }
}

/// One HTTP/1.1 request on a new connection from `source`.
pub async fn request_from(
    source: IpAddr,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Reply> {
    Conn::open_from(source, port)
        .await?
        .send(method, path, headers, body)
        .await
}

/// Several requests, one after the other, on one keep-alive connection: `(method, path, body)`
/// each. Fails if the gateway closes the connection between them.
pub async fn on_one_connection(
    port: u16,
    requests: &[(&str, &str, &str)],
) -> std::io::Result<Vec<Reply>> {
    let mut conn = Conn::open_from(IpAddr::from([127, 0, 0, 1]), port).await?;
    let mut out = Vec::with_capacity(requests.len());
    for (method, path, body) in requests {
        out.push(conn.send(method, path, &[], body).await?);
    }
    Ok(out)
}

/// A GET from 127.0.0.1.
pub async fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Reply> {
    request_from(IpAddr::from([127, 0, 0, 1]), port, "GET", path, headers, "").await
}

/// One HTTP/2 request with prior knowledge (h2c).
pub async fn get_h2(port: u16, path: &str) -> std::io::Result<Reply> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    let req = Request::builder()
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .body(Full::new(Bytes::new()))
        .map_err(std::io::Error::other)?;
    let resp = send
        .send_request(req)
        .await
        .map_err(std::io::Error::other)?;
    read_reply(resp).await
}

/// A running `tollgate run` on a config written to a temporary directory. Killed on drop.
pub struct GatewayProc {
    pub child: Child,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
}

/// A fresh temporary directory (removed by the OS, not by the tests: logs stay for failures).
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tollgate-test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::create_dir_all(&d);
    d
}

impl GatewayProc {
    /// Starts `bin run --config <toml>` and waits until `port` accepts connections and, when
    /// given, `admin` answers /healthz.
    pub async fn start(
        bin: &Path,
        toml: &str,
        port: u16,
        admin: Option<u16>,
    ) -> std::io::Result<Self> {
        Self::start_with(bin, toml, port, admin, &[]).await
    }

    /// As [`GatewayProc::start`], with more arguments to `run` (e.g. `--log-format json`).
    pub async fn start_with(
        bin: &Path,
        toml: &str,
        port: u16,
        admin: Option<u16>,
        extra: &[&str],
    ) -> std::io::Result<Self> {
        let dir = temp_dir("gw");
        let config = dir.join("tollgate.toml");
        std::fs::write(&config, toml)?;
        let log = dir.join("log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .args(extra)
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()?;
        let mut gw = Self {
            child,
            dir,
            config,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = gw.child.try_wait() {
                return Err(std::io::Error::other(format!(
                    "tollgate exited at start ({status}):\n{}",
                    gw.log_text()
                )));
            }
            let listening = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok();
            let healthy = match admin {
                Some(a) => get(a, "/healthz", &[]).await.is_ok_and(|r| r.status == 200),
                None => true,
            };
            // The signal handlers are installed just after the listeners: a test that signals
            // the process must not do it before.
            if listening && healthy && gw.log_text().contains("signals_ready") {
                return Ok(gw);
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "tollgate did not become ready:\n{}",
                    gw.log_text()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts `bin run --config <config> <extra...>` on an existing config file and returns at
    /// once (e.g. a `--upgrade` process, which waits for its listeners before it serves).
    pub fn spawn(bin: &Path, config: &Path, extra: &[&str]) -> std::io::Result<Self> {
        let dir = temp_dir("gw");
        let log = dir.join("log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(extra)
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()?;
        Ok(Self {
            child,
            dir,
            config: config.to_path_buf(),
            log,
        })
    }

    /// Waits until the log contains `needle` (or the process exits, or `limit` passes).
    pub async fn wait_log(&mut self, needle: &str, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.log_text().contains(needle) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.log_text().contains(needle);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a signal (SIGINT, SIGTERM, SIGHUP, ...).
    pub fn signal(&self, sig: i32) {
        // SAFETY-free: libc::kill is a plain syscall wrapper on a pid we own.
        let _ = unsafe_kill(self.pid(), sig);
    }

    /// Waits for the process to exit, up to `limit`; returns how long it took.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }
}

#[allow(unsafe_code)]
fn unsafe_kill(pid: i32, sig: i32) -> i32 {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `bin run` on `toml`, ready to serve (see [`GatewayProc::start`]); panics with the gateway's
/// log if it does not start.
pub async fn running(bin: &Path, toml: &str, port: u16, admin: u16) -> GatewayProc {
    match GatewayProc::start(bin, toml, port, Some(admin)).await {
        Ok(gw) => gw,
        Err(e) => panic!("{e}"),
    }
}

/// Waits until something accepts connections on 127.0.0.1:`port` (a server the test started
/// in another process); false after `limit`.
pub async fn wait_listening(port: u16, limit: Duration) -> bool {
    let t0 = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if t0.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    true
}

/// The admin listener's `/metrics` text.
pub async fn metrics(admin: u16) -> String {
    match get(admin, "/metrics", &[]).await {
        Ok(r) => r.body,
        Err(e) => panic!("GET /metrics on {admin}: {e}"),
    }
}

/// Polls `f` every 50 ms until it returns true or `limit` passes. For waiting on real
/// background work (health checks), never for limiter time.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The value of a Prometheus sample line `name{labels} value` whose labels include all of
/// `want` (e.g. `route="api"`); 0 when absent.
pub fn metric(text: &str, name: &str, want: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| want.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// A `redis-server` of the test's own on a free port, killed on drop. Needs the Debian package
/// `redis-server` (the Makefile installs it).
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// Set for a TLS server ([`RedisServer::start_tls`]): it listens on `port` with TLS only.
    pub tls: Option<RedisTls>,
}

/// The TLS side of a test redis-server: a CA of the test's own signed the server's certificate
/// (for 127.0.0.1 and localhost) and `client`, the certificate redis-cli shows (and a test may).
#[derive(Clone)]
pub struct RedisTls {
    pub ca: Arc<pki::Ca>,
    pub ca_file: PathBuf,
    /// Certificate and key files of a client the CA signed.
    pub client: (PathBuf, PathBuf),
    server: (PathBuf, PathBuf),
    /// `--tls-auth-clients yes`: a client without a certificate of this CA is refused.
    pub auth_clients: bool,
}

impl RedisTls {
    /// A new CA, a server certificate and a client certificate, written to `dir`.
    pub fn new(dir: &Path, auth_clients: bool) -> std::io::Result<Self> {
        let ca = pki::Ca::new("redis test ca")?;
        let ca_file = ca.write(dir, "redis-ca.pem")?;
        let server = ca
            .issue(&pki::LeafSpec::server(&["127.0.0.1", "localhost"]))?
            .write(dir, "redis-server")?;
        let client = ca
            .issue(&pki::LeafSpec::client("redis-cli"))?
            .write(dir, "redis-client")?;
        Ok(RedisTls {
            ca: Arc::new(ca),
            ca_file,
            client,
            server,
            auth_clients,
        })
    }

    /// redis-cli's options to reach a server of this CA.
    fn cli_args(&self) -> Vec<String> {
        let p = |p: &Path| p.display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            p(&self.ca_file),
            "--cert".into(),
            p(&self.client.0),
            "--key".into(),
            p(&self.client.1),
        ]
    }

    /// redis-server's options: TLS only, on `port`.
    fn server_args(&self, port: u16) -> Vec<String> {
        let p = |p: &Path| p.display().to_string();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            p(&self.server.0),
            "--tls-key-file".into(),
            p(&self.server.1),
            "--tls-ca-cert-file".into(),
            p(&self.ca_file),
            "--tls-auth-clients".into(),
            if self.auth_clients { "yes" } else { "no" }.into(),
        ]
    }
}

fn redis_cli(port: u16, tls: Option<&RedisTls>, args: &[&str]) -> String {
    Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(tls.map(RedisTls::cli_args).unwrap_or_default())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl RedisServer {
    pub fn start() -> std::io::Result<Self> {
        Self::start_with(free_port(), &[])
    }

    fn start_with(port: u16, extra: &[&str]) -> std::io::Result<Self> {
        Self::start_in(port, temp_dir("redis"), None, extra)
    }

    fn start_in(
        port: u16,
        dir: PathBuf,
        tls: Option<RedisTls>,
        extra: &[&str],
    ) -> std::io::Result<Self> {
        let mut s = Self {
            port,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls,
        };
        s.restart()?;
        Ok(s)
    }

    /// A redis-server speaking TLS only (`rediss://`), with certificates of a new CA of its
    /// own; with `auth_clients` it refuses clients without a certificate of that CA.
    pub fn start_tls(auth_clients: bool) -> std::io::Result<Self> {
        let dir = temp_dir("redis-tls");
        let tls = RedisTls::new(&dir, auth_clients)?;
        Self::start_in(free_port(), dir, Some(tls), &[])
    }

    /// Starts the server again on the same port (after [`RedisServer::stop`]): empty, as a
    /// restarted Redis without persistence is (no keys, no scripts).
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.stop();
        let log = std::fs::File::create(self.dir.join(format!("redis-{}.log", self.port)))?;
        let ports = match &self.tls {
            Some(t) => t.server_args(self.port),
            None => vec!["--port".into(), self.port.to_string()],
        };
        let child = Command::new("redis-server")
            .args(ports)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]) != "PONG" {
            if Instant::now() > deadline {
                return Err(std::io::Error::other("redis-server did not answer PING"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Kills the server at once (SIGKILL: no goodbye to clients).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli -p PORT args...` (over TLS with the test CA's client certificate for a
    /// TLS server) and returns its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, self.tls.as_ref(), args)
    }

    /// Calls of `command` (lower case, e.g. "evalsha") since start, from INFO commandstats.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port whose cluster bus port (+10000) is free too, both kept from other tests and
/// both below the ephemeral range (so the node's port lies in [10000, low - 10000)).
fn free_cluster_port() -> u16 {
    let low = ephemeral_low();
    if low <= 20_001 {
        return free_port();
    }
    let span = low - 20_000;
    let Ok(mut reserved) = RESERVED.lock() else {
        return 0;
    };
    let start = (std::process::id() * 104_729) % span;
    for i in 0..span {
        let p = (10_000 + (start + i) % span) as u16;
        let bus = p + 10_000;
        if reserved.contains(&p) || reserved.contains(&bus) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            reserved.push(p);
            reserved.push(bus);
            return p;
        }
    }
    0
}

/// A Redis Cluster of `masters` masters (and, with [`RedisCluster::with_replicas`], a replica
/// of each) made with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> std::io::Result<Self> {
        Self::start_inner(masters, 0, None)
    }

    /// `masters` masters with one replica each, which the cluster promotes when its master
    /// fails (after `cluster-node-timeout`, 2 s here).
    pub fn with_replicas(masters: usize) -> std::io::Result<Self> {
        let c = Self::start_inner(masters, 1, None)?;
        // Replicas must have synced before a failover can promote them.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !c.nodes.iter().all(|n| {
            let info = n.cli(&["INFO", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        }) {
            if Instant::now() > deadline {
                return Err(std::io::Error::other("the replicas did not sync"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(c)
    }

    /// The masters as a live node sees them: (port, slot ranges), from CLUSTER NODES.
    pub fn masters(&self) -> Vec<(u16, Vec<(u16, u16)>)> {
        let mut out = Vec::new();
        for n in &self.nodes {
            let text = n.cli(&["CLUSTER", "NODES"]);
            if !text.contains("myself") {
                continue;
            }
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 || !f[2].contains("master") || f[2].contains("fail") {
                    continue;
                }
                let Some(port) = f[1]
                    .split('@')
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse().ok())
                else {
                    continue;
                };
                let ranges = f[8..]
                    .iter()
                    .filter_map(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect::<Vec<_>>();
                if !ranges.is_empty() {
                    out.push((port, ranges));
                }
            }
            break;
        }
        out
    }

    /// The node listening on `port`.
    pub fn node(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.nodes.iter_mut().find(|n| n.port == port)
    }

    /// A cluster speaking TLS only, between its nodes too (`--tls-cluster yes`), every node
    /// with a certificate of one new CA; with `auth_clients` clients must show one of its.
    pub fn start_tls(masters: usize, auth_clients: bool) -> std::io::Result<Self> {
        let dir = temp_dir("redis-cluster-tls");
        Self::start_inner(
            masters,
            0,
            Some((dir.clone(), RedisTls::new(&dir, auth_clients)?)),
        )
    }

    fn start_inner(
        masters: usize,
        replicas: usize,
        tls: Option<(PathBuf, RedisTls)>,
    ) -> std::io::Result<Self> {
        let mut nodes = Vec::new();
        let client = tls.as_ref().map(|(_, t)| {
            let p = |p: &Path| p.display().to_string();
            (p(&t.client.0), p(&t.client.1))
        });
        let (client_cert, client_key) = client
            .as_ref()
            .map_or(("", ""), |(c, k)| (c.as_str(), k.as_str()));
        for _ in 0..masters * (1 + replicas) {
            let port = free_cluster_port();
            let conf = format!("nodes-{port}.conf");
            let mut extra = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf,
                "--cluster-node-timeout",
                "2000",
                // A failed master's slots must not stop the others (Redis's default refuses
                // every key with CLUSTERDOWN until a replica is promoted).
                "--cluster-require-full-coverage",
                "no",
            ];
            nodes.push(match &tls {
                Some((dir, t)) => {
                    extra.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                    // The bus is mutual TLS: nodes show a client certificate to each other.
                    extra.extend([
                        "--tls-client-cert-file",
                        client_cert,
                        "--tls-client-key-file",
                        client_key,
                    ]);
                    RedisServer::start_in(port, dir.clone(), Some(t.clone()), &extra)?
                }
                None => RedisServer::start_with(port, &extra)?,
            });
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(tls.map(|(_, t)| t.cli_args()).unwrap_or_default())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        // redis-cli waits for the nodes to join for as long as it takes: bounded here.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = out;
        while out.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = out.kill();
                let _ = out.wait();
                return Err(std::io::Error::other(
                    "redis-cli --cluster create did not finish",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = out.wait_with_output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            )));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            if Instant::now() > deadline {
                return Err(std::io::Error::other("the cluster did not reach state ok"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Self { nodes })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// Keys held by each master.
    pub fn key_counts(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| n.cli(&["DBSIZE"]).parse().unwrap_or(0))
            .collect()
    }
}

/// A TCP relay to `target` that can silently stall the connections it carries: after
/// [`StallingProxy::stall_existing`] their bytes are read and dropped, nothing is closed, so
/// the client sees a peer that went silent (a host gone, a partition) while new connections
/// pass normally (as after a failover). Runs on the caller's tokio runtime.
pub struct StallingProxy {
    pub port: u16,
    epoch: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingProxy {
    pub async fn start(target: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let epoch = Arc::new(AtomicUsize::new(0));
        let ep = epoch.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let born = ep.load(Ordering::SeqCst);
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                for (mut r, mut w) in [
                    (
                        Box::new(cr) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                        Box::new(sw) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                    ),
                    (Box::new(sr), Box::new(cw)),
                ] {
                    let ep = ep.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match r.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if ep.load(Ordering::SeqCst) != born {
                                continue; // stalled: swallow, never answer, never close
                            }
                            if w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Ok(Self { port, epoch, task })
    }

    /// Every connection open now goes silent for good; later ones pass.
    pub fn stall_existing(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A signed JWT for tests: `alg` (e.g. "RS256"), a PEM private key (or the HMAC secret for
/// HS*), and the claims.
pub fn jwt(alg: &str, key: &[u8], claims: &serde_json::Value) -> String {
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
    let a: Algorithm = alg.parse().unwrap_or(Algorithm::HS256);
    let k = match alg {
        a if a.starts_with("HS") => Ok(EncodingKey::from_secret(key)),
        a if a.starts_with("ES") => EncodingKey::from_ec_pem(key),
        _ => EncodingKey::from_rsa_pem(key),
    };
    match k.and_then(|k| encode(&Header::new(a), claims, &k)) {
        Ok(t) => t,
        Err(e) => format!("unsignable:{e}"),
    }
}

/// Seconds since the Unix epoch, for `exp`/`nbf` claims.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A config serving on `port` with its admin on `admin`, one worker thread; `rest` goes on
/// inside `[server]` (and may open the tables after it).
pub fn serving_one_thread(port: u16, admin: u16, rest: &str) -> String {
    format!("[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\nthreads = 1\n{rest}")
}

/// The path (with query) the echo [`Backend`] was sent.
pub fn upstream_path(r: &Reply) -> String {
    r.json()["path"].as_str().unwrap_or_default().to_string()
}

/// A fresh P-256 key for ES256 tokens: its private key (PKCS#8 PEM, for [`jwt_with_kid`]) and
/// its public half as a JWK with `kid`.
pub fn es256_jwk(kid: &str) -> (Vec<u8>, serde_json::Value) {
    use base64::Engine;
    let Ok(key) = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256) else {
        return (Vec::new(), serde_json::Value::Null);
    };
    // The uncompressed point: 0x04, X, Y.
    let point = key.public_key_raw();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwk = serde_json::json!({
        "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
        "x": b64(&point[1..33]), "y": b64(&point[33..65]),
    });
    (key.serialize_pem().into_bytes(), jwk)
}

/// A signed JWT naming `kid` in its header (`alg` as in [`jwt`]).
pub fn jwt_with_kid(alg: &str, key: &[u8], kid: &str, claims: &serde_json::Value) -> String {
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
    let a: Algorithm = alg.parse().unwrap_or(Algorithm::HS256);
    let k = match alg {
        a if a.starts_with("HS") => Ok(EncodingKey::from_secret(key)),
        a if a.starts_with("ES") => EncodingKey::from_ec_pem(key),
        _ => EncodingKey::from_rsa_pem(key),
    };
    let mut h = Header::new(a);
    h.kid = Some(kid.to_string());
    match k.and_then(|k| encode(&h, claims, &k)) {
        Ok(t) => t,
        Err(e) => format!("unsignable:{e}"),
    }
}

/// The subject CN of the certificate a handshake shows (`openssl s_client`, with `sni` or
/// none, and `args`), or
/// `None` when the handshake failed.
pub fn handshake_subject(tls: u16, sni: Option<&str>, args: &[&str]) -> Option<String> {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-connect", &format!("127.0.0.1:{tls}")]);
    match sni {
        Some(n) => cmd.args(["-servername", n]),
        None => cmd.arg("-noservername"),
    };
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("openssl (Debian package openssl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // "subject=CN = a.test" (OpenSSL 3.0) or "subject=CN=a.test" (3.2+).
    let line = text.lines().find(|l| l.starts_with("subject="))?;
    Some(line.rsplit('=').next()?.trim().to_string())
}

/// A loopback upstream that upgrades as a WebSocket server would: a request asking for
/// `Upgrade: websocket` (any case) is answered with `upgrade_head` (a whole 101 head) and its
/// bytes are then echoed until either side closes; any other request gets `200 ok` and the
/// connection closes. Its port.
pub async fn upgrading_echo_upstream(upgrade_head: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read_exact(&mut b).await.is_err() {
                        return;
                    }
                    head.push(b[0]);
                }
                let upgrade = String::from_utf8_lossy(&head)
                    .to_ascii_lowercase()
                    .contains("\r\nupgrade: websocket");
                let resp: &[u8] = if upgrade {
                    upgrade_head
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                };
                if s.write_all(resp).await.is_err() || !upgrade {
                    return;
                }
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}
