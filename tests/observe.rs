//! Seeing and predicting (docs/tracing.md): OpenTelemetry traces received by a real OTLP/HTTP
//! receiver (the opentelemetry-proto types), with the client's context trusted or not, a
//! collector that is down or never answers; `tollgate explain` against the running gateway on
//! 1,000 generated requests; `tollgate simulate` against the same traffic replayed with the
//! same timing, and its HTML page opened in headless Chromium; the log under faults.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The tests that compare timings (latency with and without a collector; traffic replayed on
/// a schedule) run one at a time, not beside the others' load.
static TIMED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An OTLP/HTTP traces receiver on loopback: every span it was sent, decoded.
struct Receiver {
    port: u16,
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
    posts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receiver() -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let spans = Arc::new(Mutex::new(Vec::new()));
    let services = Arc::new(Mutex::new(Vec::new()));
    let posts = Arc::new(AtomicUsize::new(0));
    let (s, sv, p) = (spans.clone(), services.clone(), posts.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (s, sv, p) = (s.clone(), sv.clone(), p.clone());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (s, sv, p) = (s.clone(), sv.clone(), p.clone());
                        async move {
                            let ok_path = req.uri().path() == "/v1/traces";
                            let proto = req
                                .headers()
                                .get("content-type")
                                .is_some_and(|v| v == "application/x-protobuf");
                            let body = req.into_body().collect().await?.to_bytes();
                            let status = match ExportTraceServiceRequest::decode(body) {
                                Ok(export) if ok_path && proto => {
                                    p.fetch_add(1, Ordering::SeqCst);
                                    for rs in export.resource_spans {
                                        for a in
                                            rs.resource.map(|r| r.attributes).unwrap_or_default()
                                        {
                                            if a.key == "service.name" {
                                                if let Some(any_value::Value::StringValue(v)) =
                                                    a.value.and_then(|v| v.value)
                                                {
                                                    sv.lock().expect("lock").push(v);
                                                }
                                            }
                                        }
                                        for ss in rs.scope_spans {
                                            s.lock().expect("lock").extend(ss.spans);
                                        }
                                    }
                                    200
                                }
                                _ => 400,
                            };
                            let mut resp = http::Response::new(Full::new(Bytes::new()));
                            *resp.status_mut() =
                                http::StatusCode::from_u16(status).expect("status");
                            Ok::<_, hyper::Error>(resp)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Receiver {
        port,
        spans,
        services,
        posts,
        task,
    }
}

impl Receiver {
    /// The spans of trace `id` once at least `n` arrived (within 10 s).
    async fn trace(&self, id: &[u8], n: usize) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got: Vec<Span> = self
                .spans
                .lock()
                .expect("lock")
                .iter()
                .filter(|s| s.trace_id == id)
                .cloned()
                .collect();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(v) => Some(v.clone()),
            any_value::Value::IntValue(i) => Some(i.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The upstream's view of a proxied request (the echo backend's JSON).
fn upstream_header(r: &Reply, name: &str) -> Option<String> {
    r.json()["headers"][name].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn traces_carry_the_trusted_clients_parent_and_the_requests_path() {
    let rx = receiver().await;
    let backend = Backend::start().await.expect("backend");
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2
access_log = true
trusted_proxies = ["127.0.0.1/32"]

[redis]
url = "{redis}"

[tracing]
otlp = "http://127.0.0.1:{rx}"
sample = 0.0
sample_refusals = true
service_name = "edge-test"

[upstreams.app]
targets = ["{backend}"]

[limits.one]
key = "client_ip"
rate = "1/m"
burst = 1

[limits.shared]
key = "client_ip"
rate = "100/s"
scope = "global"

[[routes]]
name = "limited"
path_prefix = "/limited"
upstream = "app"
limits = ["one"]

[[routes]]
name = "global"
path_prefix = "/global"
upstream = "app"
limits = ["shared"]

[[routes]]
name = "app"
path_prefix = "/"
upstream = "app"
"#,
        redis = redis.url(),
        rx = rx.port,
        backend = backend.addr,
    );
    let gw = GatewayProc::start_with(
        Path::new(BIN),
        &toml,
        port,
        Some(admin),
        &["--log-format", "json"],
    )
    .await
    .expect("gateway");
    let trusted = IpAddr::from([127, 0, 0, 1]);
    let stranger = IpAddr::from([127, 0, 0, 2]);

    // A trusted proxy's sampled context: continued, and passed on under the upstream span.
    let (t1, p1) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let r = request_from(
        trusted,
        port,
        "GET",
        "/hello/./there",
        &[
            ("traceparent", &format!("00-{t1}-{p1}-01")),
            ("tracestate", "vendor=abc"),
        ],
        "",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 200, "{}", r.body);
    let up = upstream_header(&r, "traceparent").expect("the upstream gets traceparent");
    assert!(up.starts_with(&format!("00-{t1}-")), "{up}");
    assert!(up.ends_with("-01"), "{up}");
    let up_parent = &up[36..52];
    assert_ne!(up_parent, p1, "the upstream's parent is the gateway's span");
    assert_eq!(
        upstream_header(&r, "tracestate").as_deref(),
        Some("vendor=abc")
    );
    let spans = rx.trace(&unhex(t1), 2).await;
    let server = spans
        .iter()
        .find(|s| s.kind == 2)
        .unwrap_or_else(|| panic!("a server span: {spans:?}"));
    assert_eq!(
        hex(&server.parent_span_id),
        p1,
        "the client's span is the parent"
    );
    assert_eq!(server.name, "GET app");
    assert_eq!(server.trace_state, "vendor=abc");
    assert_eq!(attr(server, "url.path").as_deref(), Some("/hello/there"));
    assert_eq!(
        attr(server, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(attr(server, "tollgate.route").as_deref(), Some("app"));
    assert!(attr(server, "client.address").is_some_and(|c| c.len() == 16 && c != "127.0.0.1"));
    let upstream = spans
        .iter()
        .find(|s| s.name == "upstream")
        .unwrap_or_else(|| panic!("an upstream span: {spans:?}"));
    assert_eq!(upstream.parent_span_id, server.span_id);
    assert_eq!(
        hex(&upstream.span_id),
        up_parent,
        "the upstream's parent is this span"
    );
    assert!(upstream.start_time_unix_nano >= server.start_time_unix_nano);
    assert!(upstream.end_time_unix_nano <= server.end_time_unix_nano + 1_000_000);
    assert!(rx
        .services
        .lock()
        .expect("lock")
        .iter()
        .all(|s| s == "edge-test"));
    assert!(rx.posts.load(Ordering::SeqCst) >= 1);

    // A stranger's context is not taken: a new trace, not sampled (sample = 0), no tracestate.
    let (t2, p2) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let r = request_from(
        stranger,
        port,
        "GET",
        "/x",
        &[
            ("traceparent", &format!("00-{t2}-{p2}-01")),
            ("tracestate", "evil=1"),
        ],
        "",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 200);
    let up = upstream_header(&r, "traceparent").expect("traceparent");
    assert!(!up.contains(t2), "{up}");
    assert!(up.ends_with("-00"), "not sampled: {up}");
    assert_eq!(upstream_header(&r, "tracestate"), None);

    // Other spellings of the names are the same fields: a trusted proxy's context is taken,
    // its tracestate fields passed on joined, once, and one traceparent goes up.
    let t4 = "5bf92f3577b34da6a3ce929d0e0e4736";
    let r = request_from(
        trusted,
        port,
        "GET",
        "/x",
        &[
            ("TraceParent", &format!("00-{t4}-00f067aa0ba902b7-00")),
            ("TRACESTATE", "a=1"),
            ("tracestate", "b=2"),
        ],
        "",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 200);
    let up = upstream_header(&r, "traceparent").expect("traceparent");
    assert!(
        up.starts_with(&format!("00-{t4}-")) && !up.contains(','),
        "{up}"
    );
    assert_eq!(
        upstream_header(&r, "tracestate").as_deref(),
        Some("a=1,b=2")
    );

    // Two traceparent fields (in two spellings) are no context (W3C): a new trace, the
    // client's tracestate not passed on, and the upstream reads one traceparent, the gateway's.
    let r = request_from(
        trusted,
        port,
        "GET",
        "/x",
        &[
            ("traceparent", &format!("00-{t4}-00f067aa0ba902b7-01")),
            ("Traceparent", &format!("00-{t1}-00f067aa0ba902b7-01")),
            ("tracestate", "c=3"),
        ],
        "",
    )
    .await
    .expect("request");
    assert_eq!(r.status, 200);
    let up = upstream_header(&r, "traceparent").expect("traceparent");
    assert!(
        !up.contains(t4) && !up.contains(t1) && !up.contains(','),
        "{up}"
    );
    assert_eq!(up.len(), 55, "{up}");
    assert_eq!(upstream_header(&r, "tracestate"), None);

    // A refusal is traced whatever sample says: the refusing limit named.
    let first = request_from(stranger, port, "GET", "/limited", &[], "")
        .await
        .expect("1");
    assert_eq!(first.status, 200);
    let refused = request_from(stranger, port, "GET", "/limited", &[], "")
        .await
        .expect("2");
    assert_eq!(refused.status, 429);

    // A global limit's Redis decision is a child of the server span.
    let t3 = "11111111111111111111111111111111";
    let r = request_from(
        trusted,
        port,
        "GET",
        "/global",
        &[("traceparent", &format!("00-{t3}-2222222222222222-01"))],
        "",
    )
    .await
    .expect("global");
    assert_eq!(r.status, 200);
    let spans = rx.trace(&unhex(t3), 3).await;
    let server = spans.iter().find(|s| s.kind == 2).expect("server span");
    let redis_span = spans
        .iter()
        .find(|s| s.name == "rate limit decision")
        .unwrap_or_else(|| panic!("a Redis decision span: {spans:?}"));
    assert_eq!(redis_span.parent_span_id, server.span_id);
    assert_eq!(attr(redis_span, "db.system").as_deref(), Some("redis"));

    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        let found = rx
            .spans
            .lock()
            .expect("lock")
            .iter()
            .find(|s| attr(s, "tollgate.decision").as_deref() == Some("refused"))
            .cloned();
        if let Some(s) = found {
            break s;
        }
        assert!(Instant::now() < deadline, "the refusal was not traced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(attr(&refusal, "tollgate.limit").as_deref(), Some("one"));
    assert_eq!(
        attr(&refusal, "http.response.status_code").as_deref(),
        Some("429")
    );
    assert!(
        refusal.parent_span_id.is_empty(),
        "a stranger's refusal starts its own trace"
    );
    let all = rx.spans.lock().expect("lock").clone();
    assert!(
        !all.iter().any(|s| s.trace_id == unhex(t2)),
        "the stranger's claimed trace is never joined"
    );
    // Only the sampled and the refused: the stranger's admitted requests are not exported.
    let servers = all.iter().filter(|s| s.kind == 2).count();
    assert_eq!(servers, 3, "{all:?}");

    // Every access log line names its trace; the sampled one's is the client's.
    let log = gw.log_text();
    assert!(
        log.lines().any(|l| l.contains("\"event\":\"request\"")
            && l.contains(&format!("\"trace_id\":\"{t1}\""))),
        "{log}"
    );
    assert!(
        log.lines()
            .filter(|l| l.contains("\"event\":\"request\""))
            .all(|l| !l.contains("\"trace_id\":\"\"")),
        "{log}"
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_trace_spans_dropped_total", &[]),
        0.0,
        "{m}"
    );
    assert!(
        metric(&m, "tollgate_trace_spans_exported_total", &[]) >= 6.0,
        "{m}"
    );
}

/// 10,000 requests (10 connections x 1,000) and their latencies.
async fn load(port: u16) -> Vec<Duration> {
    let mut tasks = Vec::new();
    for _ in 0..10 {
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(port).await.expect("connect");
            let mut lat = Vec::with_capacity(1000);
            for _ in 0..1000 {
                let t0 = Instant::now();
                let r = conn.send("GET", "/load", &[], "").await.expect("request");
                assert_eq!(r.status, 200);
                lat.push(t0.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_collector_down_or_silent_costs_no_request_time_and_drops_are_counted() {
    let _one_at_a_time = TIMED.lock().await;
    let backend = Backend::start().await.expect("backend");
    // A collector that takes the connection and never answers: every export times out.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            conns.push(c);
        }
    });
    let config = |port: u16, admin: u16, tracing: &str| {
        format!(
            r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 1

{tracing}

[upstreams.app]
targets = ["{backend}"]

[[routes]]
path_prefix = "/"
upstream = "app"
"#,
            backend = backend.addr
        )
    };
    let (port, admin) = (free_port(), free_port());
    let plain = running(Path::new(BIN), &config(port, admin, ""), port, admin).await;
    let base = load(port).await;
    drop(plain);

    for (what, otlp) in [
        ("silent", format!("http://127.0.0.1:{silent_port}")),
        // Nothing listens there: every export is refused at once.
        ("down", format!("http://127.0.0.1:{}", free_port())),
    ] {
        let (port, admin) = (free_port(), free_port());
        let tracing = format!(
            "[tracing]\notlp = \"{otlp}\"\nsample = 1.0\ntimeout = \"300ms\"\nmax_queue = 200\n"
        );
        let gw = running(Path::new(BIN), &config(port, admin, &tracing), port, admin).await;
        let traced = load(port).await;
        let (b50, t50) = (base[base.len() / 2], traced[traced.len() / 2]);
        assert!(
            t50 <= b50 * 2 + Duration::from_millis(2),
            "{what}: median {t50:?} with the collector {what}, {b50:?} without tracing"
        );
        // Every span (a server and an upstream span per request) is accounted for: none
        // exported, each dropped (queue full, or its export failed).
        let deadline = Instant::now() + Duration::from_secs(20);
        let (dropped, m) = loop {
            let m = metrics(admin).await;
            let d = metric(&m, "tollgate_trace_spans_dropped_total", &[]);
            if d >= 20_000.0 || Instant::now() > deadline {
                break (d, m);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(dropped, 20_000.0, "{what}: {m}");
        assert_eq!(metric(&m, "tollgate_trace_spans_exported_total", &[]), 0.0);
        assert!(
            metric(&m, "tollgate_trace_spans_dropped_total", &["queue_full"]) > 0.0,
            "{m}"
        );
        assert!(
            metric(&m, "tollgate_trace_spans_dropped_total", &["export_failed"]) > 0.0,
            "{m}"
        );
        // One line for the failing collector, not one per batch.
        let lines = gw.log_text().matches("trace_export_failed").count();
        assert!(
            (1..=2).contains(&lines),
            "{what}: {lines} lines\n{}",
            gw.log_text()
        );
    }
    held.abort();
}

/// What the gateway answered: status, the route the upstream was told, and the RateLimit
/// field (`"limit";r=N;t=T`).
fn answered(r: &Reply) -> (u16, Option<String>, Option<(String, u64)>) {
    let route = upstream_header(r, "x-route");
    let rl = r.header("ratelimit").and_then(|v| {
        let name = v.split('"').nth(1)?.to_string();
        let remaining = v.split(";r=").nth(1)?.split(';').next()?.parse().ok()?;
        Some((name, remaining))
    });
    (r.status, route, rl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_agrees_with_the_running_gateway_on_1000_requests() {
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let token = "0123456789abcdef-explain";
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
admin_token = "{token}"
threads = 2
trusted_proxies = ["127.0.0.1/32"]

[access]
deny = ["127.0.0.5/32"]

[upstreams.app]
targets = ["{backend}"]

[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 6

[limits.per_user]
key = "header:x-user"
rate = "1/h"
burst = 4
block = [{{ after = 3, within = "1h", for = "1h" }}]

[limits.watch]
key = "client_ip"
rate = "1/h"
burst = 3
shadow = true

[limits.per_path]
key = ["client_ip", "path"]
rate = "1/h"
burst = 2

[[routes]]
name = "api"
host = "example.com"
path_prefix = "/api"
upstream = "app"
limits = ["watch", "per_ip", "per_user"]
request_headers = {{ set = {{ "X-Route" = "$route" }} }}

[[routes]]
name = "org"
host = "*.example.org"
path_prefix = "/"
upstream = "app"
limits = ["per_user"]
request_headers = {{ set = {{ "X-Route" = "$route" }} }}

[[routes]]
name = "health"
path_exact = "/health"
respond = {{ status = 204, body = "" }}

[[routes]]
name = "files"
path_regex = "^/files/[a-z]+$"
methods = ["GET"]
upstream = "app"
limits = ["per_path"]
request_headers = {{ set = {{ "X-Route" = "$route" }} }}

[[routes]]
name = "old"
path_prefix = "/old"
strip_prefix = "/old"
upstream = "app"
limits = ["per_path"]
request_headers = {{ set = {{ "X-Route" = "$route" }} }}

[[routes]]
name = "rest"
path_prefix = "/"
upstream = "app"
limits = ["per_ip"]
request_headers = {{ set = {{ "X-Route" = "$route" }} }}
"#,
        backend = backend.addr,
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    // The admin API's explain: behind the token, and strict about what it is asked.
    let auth = format!("Bearer {token}");
    for (query, headers, want) in [
        ("method=GET&url=/api/x", vec![], 401),
        (
            "method=GET&url=/api/x",
            vec![("authorization", "Bearer wrong-token-wrong-token")],
            401,
        ),
        ("method=GET", vec![("authorization", auth.as_str())], 400),
        (
            "url=/x&from=not-an-address",
            vec![("authorization", auth.as_str())],
            400,
        ),
        (
            "url=/x&limit=per_ip",
            vec![("authorization", auth.as_str())],
            400,
        ),
        (
            "url=/x&header=no-colon",
            vec![("authorization", auth.as_str())],
            400,
        ),
        (
            "url=relative/x",
            vec![("authorization", auth.as_str())],
            400,
        ),
    ] {
        let r = get(admin, &format!("/explain?{query}"), &headers)
            .await
            .expect("explain");
        assert_eq!(r.status, want, "{query}: {}", r.body);
    }
    let paths = [
        "/api/x",
        "/api//x",
        "/api/./x",
        "/api/a/../x",
        "/API/x",
        "/api/%2e%2e/x",
        "/api/%2Fx",
        "/api/x/",
        "/api/x?y=1",
        "/%61pi/x",
        "/files/abc",
        "/files/ABC",
        "/files//abc",
        "/files/abc/",
        "/health",
        "/health/",
        "/old/thing",
        "/old/../api/x",
        "/other",
        "//api/x",
        "/api/x%00",
        "/a/%2e/b",
        "/.",
        "/api/..%2f..%2fetc",
    ];
    let hosts = [
        "example.com",
        "EXAMPLE.com",
        "example.com.",
        "example.com:80",
        "a.example.org",
        "b.EXAMPLE.org",
        "localhost",
        "[::1]",
        "exa mple.com",
    ];
    let methods = ["GET", "GET", "POST", "DELETE"];
    let users = ["", "alice", "bob", "carol", "dave", "eve"];
    let mut rng = fastrand::Rng::with_seed(30);
    let mut compared = 0;
    let mut blocked = 0;
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..1000 {
        let path = paths[rng.usize(..paths.len())];
        let host = hosts[rng.usize(..hosts.len())];
        let method = methods[rng.usize(..methods.len())];
        let user = users[rng.usize(..users.len())];
        let source = IpAddr::from([127, 0, 0, rng.u8(1..=5)]);
        let xff = (source == IpAddr::from([127, 0, 0, 1]) && rng.bool())
            .then(|| format!("198.51.100.{}", rng.u8(1..4)));
        let mut headers: Vec<(&str, String)> = vec![("host", host.to_string())];
        if !user.is_empty() {
            headers.push(("x-user", user.to_string()));
        }
        if let Some(x) = &xff {
            headers.push(("x-forwarded-for", x.clone()));
        }
        // Ask the gateway first: explain spends nothing.
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("method", method)
            .append_pair("url", path)
            .append_pair("from", &source.to_string());
        for (n, v) in &headers {
            q.append_pair("header", &format!("{n}: {v}"));
        }
        let auth = format!("Bearer {token}");
        let e = get(
            admin,
            &format!("/explain?{}", q.finish()),
            &[("authorization", &auth)],
        )
        .await
        .expect("explain");
        assert_eq!(e.status, 200, "{}", e.body);
        let ex = e.json();
        let hs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let r = match Conn::open_from(source, port)
            .await
            .expect("connect")
            .send(method, path, &hs, "")
            .await
        {
            Ok(r) => r,
            Err(err) => panic!("request {i} {method} {path} {host}: {err}"),
        };
        let (status, route, rl) = answered(&r);
        let d = &ex["decision"];
        let want_status = match d["answer"].as_str() {
            Some("proxied") => 200,
            _ => d["status"].as_u64().expect("a status") as u16,
        };
        let ctx = format!("request {i}: {method} {path} Host: {host} from {source} user {user:?} xff {xff:?}\nexplain: {ex:#}\ngateway: {} {:?} {}", r.status, r.headers, r.body);
        assert_eq!(status, want_status, "{ctx}");
        *statuses.entry(status).or_insert(0) += 1;
        if status == 200 {
            assert_eq!(route.as_deref(), ex["route"].as_str(), "{ctx}");
            // The nearest limit's remaining, as explain's peek left it: the same key, the same
            // state.
            let peeked: Vec<(String, u64)> = ex["limits"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|l| l["shadow"] == false)
                .filter_map(|l| {
                    Some((
                        l["limit"].as_str()?.to_string(),
                        l["state"]["remaining"].as_u64()?,
                    ))
                })
                .collect();
            let min = peeked.iter().map(|(_, r)| *r).min();
            assert_eq!(rl.as_ref().map(|(_, r)| *r), min, "{ctx}");
            compared += 1;
        }
        if status == 429 || r.json()["error_code"] == "TEMPORARILY_BLOCKED" {
            assert_eq!(r.json()["limit"].as_str(), d["limit"].as_str(), "{ctx}");
            assert_eq!(
                r.json()["error_code"].as_str(),
                d["answer"].as_str(),
                "{ctx}"
            );
            blocked += (d["answer"] == "TEMPORARILY_BLOCKED") as usize;
        }
    }
    // The mix exercised every kind of answer.
    for s in [200, 204, 400, 403, 404, 429] {
        assert!(statuses.contains_key(&s), "{statuses:?}");
    }
    assert!(blocked > 0, "a key was blocked by its ladder: {statuses:?}");
    assert!(compared > 50, "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simulate_reports_what_the_gateway_did_with_the_same_traffic() {
    let _one_at_a_time = TIMED.lock().await;
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2
access_log = true
access_log_paths = true

[upstreams.app]
targets = ["{backend}"]

[limits.per_user]
key = "client_ip"
algorithm = "gcra"
rate = "150/m"
burst = 2

[[routes]]
name = "api"
path_prefix = "/"
upstream = "app"
limits = ["per_user"]
"#,
        backend = backend.addr,
    );
    let gw = GatewayProc::start_with(
        Path::new(BIN),
        &toml,
        port,
        Some(admin),
        &["--log-format", "json"],
    )
    .await
    .expect("gateway");
    // Each client from its own address: the limit is per client, and the gateway's own log
    // (which names clients by pseudonym, never by header) can be replayed too.
    let source = |who: &str| {
        IpAddr::from([
            127,
            0,
            0,
            match who {
                "steady" => 2,
                "double" => 3,
                _ => 4,
            },
        ])
    };
    // Known answers at 150/m (one every 400 ms), burst 2: "steady" exactly at the rate (all
    // admitted); "double" at twice it (every 200 ms, off the limit's grid by 100 ms, so no
    // decision is within 100 ms of an edge); "burst": 20 at once (2 admitted).
    let mut schedule: Vec<(Duration, &str)> = Vec::new();
    for k in 0..10u64 {
        schedule.push((Duration::from_millis(400 * k), "steady"));
    }
    schedule.push((Duration::from_millis(0), "double"));
    for k in 0..19u64 {
        schedule.push((Duration::from_millis(200 + 200 * k + 100), "double"));
    }
    for _ in 0..20 {
        schedule.push((Duration::from_millis(2_000), "burst"));
    }
    schedule.sort_by_key(|(t, _)| *t);
    let t0 = Instant::now() + Duration::from_millis(300);
    let mut conns = std::collections::HashMap::new();
    for who in ["steady", "double", "burst"] {
        conns.insert(
            who,
            Conn::open_from(source(who), port).await.expect("connect"),
        );
    }
    let mut got: std::collections::HashMap<&str, (u64, u64)> = Default::default();
    // The log holds the times the requests were sent (as a log would), a few hundred
    // microseconds before the gateway decided them; the schedule keeps every decision far
    // from a limit's edge, so that small gap cannot change one.
    let mut sent = Vec::new();
    for (at, who) in &schedule {
        tokio::time::sleep_until((t0 + *at).into()).await;
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        sent.push((unix, *who));
        let r = conns
            .get_mut(who)
            .expect("conn")
            .send("GET", "/x", &[], "")
            .await
            .expect("request");
        let e = got.entry(who).or_default();
        match r.status {
            200 => e.0 += 1,
            429 => e.1 += 1,
            s => panic!("{who}: {s}"),
        }
    }
    // The gateway's own access log, once every request is in it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while gw.log_text().matches("\"event\":\"request\"").count() < schedule.len() {
        assert!(Instant::now() < deadline, "{}", gw.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let own_log = gw.log_text();
    drop(gw);
    assert_eq!(got["steady"], (10, 0), "{got:?}");
    assert_eq!(got["burst"], (2, 18), "{got:?}");

    let dir = temp_dir("simulate");
    let log = dir.join("traffic.csv");
    let mut csv = String::from("time,method,host,path,client\n");
    for (unix, who) in &sent {
        csv.push_str(&format!("{unix:.6},GET,127.0.0.1,/x,{}\n", source(who)));
    }
    std::fs::write(&log, csv).expect("log");
    let config = dir.join("tollgate.toml");
    std::fs::write(&config, &toml).expect("config");
    let html = dir.join("report.html");
    let out = Command::new(BIN)
        .arg("simulate")
        .arg("--config")
        .arg(&config)
        .arg(&log)
        .arg("--json")
        .arg("--html")
        .arg(&html)
        .output()
        .expect("simulate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let l = &report["limits"][0];
    assert_eq!(l["limit"], "per_user");
    assert_eq!(l["route"], "api");
    let (admitted, refused) = got.values().fold((0, 0), |(a, r), (x, y)| (a + x, r + y));
    assert_eq!(l["requests"], 50, "{report:#}");
    assert_eq!(
        l["admitted"], admitted,
        "the gateway admitted {got:?}; {report:#}"
    );
    assert_eq!(l["refused"], refused, "{report:#}");
    assert_eq!(l["keys"], 3);
    for (who, (_, r)) in &got {
        let listed = l["top_refused"]
            .as_array()
            .expect("top_refused")
            .iter()
            .find(|k| k["key"] == format!("client_ip={}", source(who)))
            .map_or(0, |k| k["refused"].as_u64().expect("n"));
        assert_eq!(listed, *r, "{who}: {report:#}");
    }
    let first = l["first_refusal"]["key"].as_str().expect("first refusal");
    assert_eq!(first, "client_ip=127.0.0.3", "{report:#}");
    // Doubling the limit admits more, halving it fewer.
    let scaled = l["scaled"].as_array().expect("scaled");
    let at = |f: f64| {
        scaled
            .iter()
            .find(|s| s["factor"] == f)
            .map(|s| s["admitted"].as_u64().expect("n"))
            .expect("factor")
    };
    assert!(
        at(0.5) < admitted && admitted < at(2.0) && at(2.0) <= at(4.0),
        "{report:#}"
    );

    // The gateway's own JSON access log replays to the same answer (its clients by
    // pseudonym, each line's time its arrival).
    let own = dir.join("tollgate.log");
    std::fs::write(&own, &own_log).expect("own log");
    let out = Command::new(BIN)
        .arg("simulate")
        .arg("--config")
        .arg(&config)
        .arg(&own)
        .arg("--json")
        .output()
        .expect("simulate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let o = &replayed["limits"][0];
    assert_eq!(o["requests"], 50, "{replayed:#}");
    assert_eq!(
        o["admitted"], admitted,
        "the gateway admitted {got:?}; {replayed:#}"
    );
    assert_eq!(o["refused"], refused, "{replayed:#}");
    assert_eq!(o["keys"], 3, "{replayed:#}");

    // The page opens in a real browser, and its charts are there.
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("observe");
    std::fs::create_dir_all(&shots).expect("output folder");
    let png = shots.join("simulate.png");
    let _ = std::fs::remove_file(&png);
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium (the Makefile installs it)");
    let url = format!("file://{}", html.display());
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            &url,
        ])
        .output()
        .expect("chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.matches("<svg class=\"chart\"").count() >= 2, "{dom}");
    let shot = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,1600",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .expect("chromium --screenshot");
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "screenshot {size} bytes: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    println!("simulate report screenshot: {}", png.display());
}

/// 300 connections to `port` that each send `bytes` and close, then a moment for the log.
async fn flood(port: u16, bytes: &[u8]) {
    for _ in 0..300 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let _ = s.write_all(bytes).await;
            let _ = s.shutdown().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faults_leave_a_handful_of_log_lines_and_the_rest_in_counters() {
    let backend = Backend::start().await.expect("backend");
    let mut redis = RedisServer::start().expect("redis-server");
    let dir = temp_dir("faults-pki");
    let ca = tollgate_testkit::pki::Ca::new("faults").expect("ca");
    let leaf = ca
        .issue(&tollgate_testkit::pki::LeafSpec::server(&["localhost"]))
        .expect("leaf");
    let (cert, key) = leaf.write(&dir, "server").expect("write");
    let (port, tls, admin) = (free_port(), free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
tls_listen = ["127.0.0.1:{tls}"]
admin = "127.0.0.1:{admin}"
threads = 2

[tls]
certificates = [{{ cert = "{cert}", key = "{key}" }}]

[redis]
url = "{redis}"
timeout = "50ms"

[upstreams.app]
targets = ["{backend}"]

[limits.shared]
key = "client_ip"
rate = "1000/s"
scope = "global"
on_error = "open"

[[routes]]
path_prefix = "/"
upstream = "app"
limits = ["shared"]
"#,
        cert = cert.display(),
        key = key.display(),
        redis = redis.url(),
        backend = backend.addr,
    );
    let gw = running(Path::new(BIN), &toml, port, admin).await;
    let lines = || gw.log_text().lines().count();

    // A Redis outage under traffic: the outage is logged, each request is counted.
    let before = lines();
    redis.stop();
    let mut conn = Conn::open(port).await.expect("connect");
    for _ in 0..500 {
        let r = conn.send("GET", "/", &[], "").await.expect("request");
        assert_eq!(r.status, 200, "on_error = open");
    }
    let outage = lines() - before;
    let m = metrics(admin).await;
    assert!(
        metric(&m, "tollgate_redis_fallback_total", &[]) >= 400.0,
        "{m}"
    );
    assert!(
        outage <= 6,
        "{outage} lines for a Redis outage:\n{}",
        gw.log_text()
    );

    // A scanner's handshake flood: 300 connections that send no TLS at all.
    let before = lines();
    flood(tls, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let flood_lines = lines() - before;
    assert!(
        flood_lines <= 45,
        "{flood_lines} lines for 300 bad handshakes:\n{}",
        gw.log_text()
    );

    // A burst of malformed requests.
    let before = lines();
    flood(port, b"\x16\x03\x01 GARBAGE\r\n\r\n").await;
    let malformed = lines() - before;
    assert!(
        malformed <= 45,
        "{malformed} lines for 300 malformed requests:\n{}",
        gw.log_text()
    );
    let m = metrics(admin).await;
    let suppressed = metric(&m, "tollgate_log_lines_suppressed_total", &[]);
    println!("log lines: redis outage {outage}, 300 bad handshakes {flood_lines}, 300 malformed requests {malformed}; suppressed and counted: {suppressed}");
    assert!(suppressed + (flood_lines + malformed) as f64 >= 1.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_refused_at_will_cannot_make_the_gateway_trace_it() {
    let rx = receiver().await;
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2

[tracing]
otlp = "http://127.0.0.1:{rx}"
sample = 0.0
sample_refusals = true

[upstreams.app]
targets = ["{backend}"]

[limits.one]
key = "client_ip"
rate = "1/h"
burst = 1

[[routes]]
path_prefix = "/"
upstream = "app"
limits = ["one"]
"#,
        rx = rx.port,
        backend = backend.addr,
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let mut conn = Conn::open(port).await.expect("connect");
    let t0 = Instant::now();
    let mut refused = 0u64;
    for _ in 0..600 {
        if conn
            .send("GET", "/", &[], "")
            .await
            .expect("request")
            .status
            == 429
        {
            refused += 1;
        }
    }
    let windows = t0.elapsed().as_secs() + 2;
    assert_eq!(refused, 599);
    // Every refusal is accounted for: traced (at most 100 a second), or counted as capped.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (traced, capped) = loop {
        let m = metrics(admin).await;
        let capped = metric(&m, "tollgate_trace_spans_dropped_total", &["refusal_cap"]);
        let traced = metric(&m, "tollgate_trace_spans_exported_total", &[]);
        if traced + capped >= 599.0 || Instant::now() > deadline {
            break (traced, capped);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(traced + capped, 599.0);
    assert!(
        traced <= (100 * windows) as f64,
        "{traced} traced in {windows} s windows"
    );
    assert!(capped > 0.0, "the cap held back some");
    let received = rx.spans.lock().expect("lock").len() as f64;
    assert_eq!(received, traced);
}
