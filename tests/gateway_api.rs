//! The Gateway API end to end (issue 42): `tollgate run --kubernetes` against the API server
//! stand-in, objects applied with Debian's kubectl, traffic from real sockets to loopback
//! backends, statuses read back with kubectl.
//! - a Gateway's listener port is served once the Gateway is applied, an HTTPRoute within
//!   1 s, a RateLimitPolicy limits within 1 s, and the statuses read as the spec says;
//! - the Core conformance cases of kubernetes-sigs/gateway-api v1.6.1
//!   (`conformance/tests/`), ported: matching precedence, header matching, hostnames and
//!   their intersection, listener isolation, weights, header modifiers, redirects,
//!   rewrites, request and backend timeouts, CORS, retries, cross-namespace references with and without ReferenceGrant, unresolved
//!   backends, parentRefs that name no listener;
//! - an Ingress and what ingress2gateway writes from it, with `tollgate import-ingress-limits`'
//!   policies, admit and refuse alike.

#[path = "kube/mod.rs"]
mod kube;

#[path = "gateway_api/conformance_cors.rs"]
mod conformance_cors;
#[path = "gateway_api/conformance_filters.rs"]
mod conformance_filters;
#[path = "gateway_api/conformance_retry.rs"]
mod conformance_retry;
#[path = "gateway_api/conformance_routing.rs"]
mod conformance_routing;
#[path = "gateway_api/conformance_timeouts.rs"]
mod conformance_timeouts;
#[path = "gateway_api/external_auth.rs"]
mod external_auth;
#[path = "gateway_api/migration.rs"]
mod migration;
#[path = "gateway_api/session.rs"]
mod session;

use kube::*;
use std::time::{Duration, Instant};
use tollgate_testkit::*;

const CONTROLLER: &str = "tollgate.io/gateway-controller";

/// Backends by name, each its own Service in `ns` on port 8080 (named as conformance's
/// infra-backend-v1..v3), and which one answered a request.
struct Infra {
    backends: Vec<(String, Backend)>,
}

impl Infra {
    async fn start(c: &Cluster, ns: &str, names: &[&str]) -> Infra {
        let mut backends = Vec::new();
        for n in names {
            let b = Backend::start().await.expect("backend");
            c.apply(&service_in(ns, n, b.addr.port()));
            backends.push((n.to_string(), b));
        }
        Infra { backends }
    }

    fn hits(&self) -> Vec<usize> {
        self.backends.iter().map(|(_, b)| b.hits()).collect()
    }

    /// The backend that took one request since `before`, or `None`.
    fn took(&self, before: &[usize]) -> Option<&str> {
        let now = self.hits();
        let moved: Vec<usize> = (0..now.len()).filter(|&i| now[i] != before[i]).collect();
        match moved[..] {
            [i] => Some(self.backends[i].0.as_str()),
            _ => None,
        }
    }
}

fn service_in(ns: &str, name: &str, backend_port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {ns}
spec:
  ports:
  - name: http
    port: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels:
    kubernetes.io/service-name: {name}
addressType: IPv4
ports:
- name: http
  port: {backend_port}
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
"#
    )
}

fn class() -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: tollgate
spec:
  controllerName: {CONTROLLER}
"#
    )
}

/// The GatewayClass and a Gateway `name` in `ns` with one HTTP listener on a free port
/// (routes from its own namespace: the conformance suite's `same-namespace`), applied in one
/// go with `objects`. The listener's port.
fn apply_same_namespace(c: &Cluster, ns: &str, name: &str, objects: &[String]) -> u16 {
    let port = free_port();
    let mut all = vec![class(), gateway(ns, name, &[("http", port, None)], "Same")];
    all.extend_from_slice(objects);
    c.apply(&all.join("---\n"));
    port
}

/// Every one of `paths` on `host` served by `backend` within 5 s (the routes are in).
async fn assert_served(
    infra: &Infra,
    port: u16,
    host: &str,
    paths: &[&str],
    backend: &str,
    gw: &GatewayProc,
) {
    for p in paths {
        assert!(
            served_by(infra, port, host, p, backend, Duration::from_secs(5))
                .await
                .is_some(),
            "{p} not served\n{}",
            gw.log_text()
        );
    }
}

/// A Gateway in `ns` with HTTP listeners (name, port, hostname) taking routes of `from`.
fn gateway(ns: &str, name: &str, listeners: &[(&str, u16, Option<&str>)], from: &str) -> String {
    let mut ls = String::new();
    for (n, port, host) in listeners {
        ls.push_str(&format!(
            "  - name: {n}\n    protocol: HTTP\n    port: {port}\n"
        ));
        if let Some(h) = host {
            ls.push_str(&format!("    hostname: \"{h}\"\n"));
        }
        ls.push_str(&format!(
            "    allowedRoutes:\n      namespaces:\n        from: {from}\n"
        ));
    }
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  gatewayClassName: tollgate\n  listeners:\n{ls}"
    )
}

/// An HTTPRoute `name` in `ns` on the Gateway `gw`, with `rules` (YAML list items, each
/// starting `  - `) as the ported conformance cases write them.
fn httproute(ns: &str, gw: &str, name: &str, rules: &[String]) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  parentRefs:\n  - name: {gw}\n  rules:\n{}",
        rules.concat()
    )
}

/// What one request got: its status, the backend that took it, and the reply.
async fn ask(
    infra: &Infra,
    port: u16,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Option<Reply>) {
    let before = infra.hits();
    let mut hs = vec![("host", host)];
    hs.extend_from_slice(headers);
    match request_from(
        std::net::IpAddr::from([127, 0, 0, 1]),
        port,
        method,
        path,
        &hs,
        "",
    )
    .await
    {
        Ok(r) => (r.status, infra.took(&before).map(str::to_string), Some(r)),
        Err(_) => (0, None, None),
    }
}

/// Until `host` `path` on `port` is answered by `backend` (at most `limit`).
async fn served_by(
    infra: &Infra,
    port: u16,
    host: &str,
    path: &str,
    backend: &str,
    limit: Duration,
) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if ask(infra, port, "GET", host, path, &[]).await.1.as_deref() == Some(backend) {
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// An object's `.status`, read with kubectl.
fn status_of(c: &Cluster, kind: &str, ns: Option<&str>, name: &str) -> serde_json::Value {
    let mut args = vec!["get", kind, name, "-o", "json"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    let out = c.kubectl(&args);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    v["status"].clone()
}

/// A condition of a list of them, as (status, reason).
fn condition(conds: &serde_json::Value, kind: &str) -> (String, String) {
    let c = conds
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {conds}"));
    (
        c["status"].as_str().unwrap_or("").to_string(),
        c["reason"].as_str().unwrap_or("").to_string(),
    )
}

/// Until `f` holds of the object's status (at most 5 s).
async fn status_until(
    c: &Cluster,
    kind: &str,
    ns: Option<&str>,
    name: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let s = status_of(c, kind, ns, name);
        if f(&s) || t.elapsed() > Duration::from_secs(5) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn accepted_by_parent(s: &serde_json::Value, i: usize) -> (String, String) {
    condition(&s["parents"][i]["conditions"], "Accepted")
}

/// The RateLimitPolicy CRD, as deploy/ has it.
fn policy_crd(c: &Cluster) {
    c.kubectl(&[
        "apply",
        "--validate=false",
        "-f",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/k8s/crds/tollgate.io_ratelimitpolicies.yaml"
        ),
    ]);
}

async fn start_gateway(c: &Cluster) -> (u16, u16, GatewayProc) {
    let (port, admin) = (free_port(), free_port());
    let gw = c
        .gateway_with(
            BIN.as_ref(),
            port,
            admin,
            "",
            &["--publish-status-address", "192.0.2.10"],
        )
        .await;
    assert!(ready(admin).await, "ready");
    (port, admin, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_an_httproute_and_a_policy_applied_with_kubectl_serve_and_limit_within_a_second()
{
    let c = Cluster::start().await;
    policy_crd(&c);
    let infra = Infra::start(&c, "shop", &["web"]).await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    let listen = free_port();
    c.apply(&class());
    c.apply(&gateway("shop", "edge", &[("http", listen, None)], "Same"));
    // The listener's port is bound once the Gateway is served.
    assert!(
        eventually(Duration::from_secs(5), || async move {
            std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok()
        })
        .await,
        "listener bound"
    );
    let t0 = Instant::now();
    c.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: shop
  namespace: shop
spec:
  parentRefs:
  - name: edge
  hostnames: ["shop.example"]
  rules:
  - name: api
    matches:
    - path: {type: PathPrefix, value: /api}
    backendRefs:
    - name: web
      port: 8080
"#,
    );
    let took = served_by(
        &infra,
        listen,
        "shop.example",
        "/api/items",
        "web",
        Duration::from_secs(3),
    )
    .await;
    let took = took.unwrap_or_else(|| panic!("not served after {:?}", t0.elapsed()));
    assert!(took < Duration::from_secs(1), "served after {took:?}");
    // Whole segments: /apis is not /api.
    assert_eq!(
        ask(&infra, listen, "GET", "shop.example", "/apis", &[])
            .await
            .0,
        404
    );
    // Another host is not the route's.
    assert_eq!(
        ask(&infra, listen, "GET", "other.example", "/api", &[])
            .await
            .0,
        404
    );

    // The statuses, as the spec says them.
    let gc = status_until(&c, "gatewayclass", None, "tollgate", |s| {
        s["conditions"].is_array()
    })
    .await;
    assert_eq!(
        condition(&gc["conditions"], "Accepted"),
        ("True".into(), "Accepted".into())
    );
    assert!(gc["supportedFeatures"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x["name"] == "HTTPRoute")));
    let g = status_until(&c, "gateway", Some("shop"), "edge", |s| {
        s["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    assert_eq!(
        condition(&g["conditions"], "Accepted"),
        ("True".into(), "Accepted".into())
    );
    assert_eq!(
        condition(&g["conditions"], "Programmed"),
        ("True".into(), "Programmed".into())
    );
    assert_eq!(g["addresses"][0]["value"], "192.0.2.10");
    assert_eq!(g["listeners"][0]["attachedRoutes"], 1);
    for (kind, reason) in [
        ("Accepted", "Accepted"),
        ("Conflicted", "NoConflicts"),
        ("ResolvedRefs", "ResolvedRefs"),
        ("Programmed", "Programmed"),
    ] {
        let want = if kind == "Conflicted" {
            "False"
        } else {
            "True"
        };
        assert_eq!(
            condition(&g["listeners"][0]["conditions"], kind),
            (want.into(), reason.into()),
            "{kind}"
        );
    }
    assert!(g["conditions"][0]["lastTransitionTime"].is_string());
    let r = status_until(&c, "httproute", Some("shop"), "shop", |s| {
        s["parents"].is_array()
    })
    .await;
    assert_eq!(r["parents"][0]["controllerName"], CONTROLLER);
    assert_eq!(r["parents"][0]["parentRef"]["name"], "edge");
    assert_eq!(
        accepted_by_parent(&r, 0),
        ("True".into(), "Accepted".into())
    );
    assert_eq!(
        condition(&r["parents"][0]["conditions"], "ResolvedRefs"),
        ("True".into(), "ResolvedRefs".into())
    );

    // A limit on the Gateway (10 a minute) and a stricter one on the route's rule (3): both
    // apply, the strictest decides.
    let t1 = Instant::now();
    c.apply(
        r#"apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata:
  name: edge-wide
  namespace: shop
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: Gateway, name: edge}
  limits:
    per-client: {key: client_ip, rate: 10/m, burst: 10}
---
apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api-strict
  namespace: shop
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: shop, sectionName: api}
  limits:
    per-client: {key: client_ip, rate: 3/m, burst: 3}
"#,
    );
    let limited = eventually(Duration::from_secs(3), || async {
        ask(&infra, listen, "GET", "shop.example", "/api/x", &[])
            .await
            .0
            == 429
    })
    .await;
    assert!(limited, "no 429: {}", gw.log_text());
    assert!(
        t1.elapsed() < Duration::from_secs(2),
        "limited after {:?}",
        t1.elapsed()
    );
    let r = ask(&infra, listen, "GET", "shop.example", "/api/x", &[])
        .await
        .2
        .expect("reply");
    assert_eq!(r.status, 429);
    assert!(
        r.header("ratelimit").is_some() || r.header("retry-after").is_some(),
        "{:?}",
        r.headers
    );
    let p = status_until(&c, "ratelimitpolicy", Some("shop"), "api-strict", |s| {
        s["ancestors"].is_array()
    })
    .await;
    assert_eq!(p["ancestors"][0]["ancestorRef"]["name"], "edge");
    assert_eq!(p["ancestors"][0]["controllerName"], CONTROLLER);
    assert_eq!(
        condition(&p["ancestors"][0]["conditions"], "Accepted"),
        ("True".into(), "Accepted".into())
    );
    // A policy whose target is not served says so.
    c.apply(
        r#"apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata:
  name: nowhere
  namespace: shop
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: missing}
  limits:
    a: {key: client_ip, rate: 1/s}
"#,
    );
    let p = status_until(&c, "ratelimitpolicy", Some("shop"), "nowhere", |s| {
        s["ancestors"].is_array()
    })
    .await;
    assert_eq!(
        condition(&p["ancestors"][0]["conditions"], "Accepted"),
        ("False".into(), "TargetNotFound".into())
    );

    // Deleted: no longer served.
    c.kubectl(&["delete", "httproute", "shop", "-n", "shop"]);
    assert!(
        eventually(Duration::from_secs(2), || async {
            ask(&infra, listen, "GET", "shop.example", "/api/y", &[])
                .await
                .0
                == 404
        })
        .await
    );
    // The Gateway deleted: its port stops accepting.
    c.kubectl(&["delete", "gateway", "edge", "-n", "shop"]);
    assert!(
        eventually(Duration::from_secs(3), || async move {
            std::net::TcpStream::connect(("127.0.0.1", listen)).is_err()
        })
        .await,
        "listener still bound"
    );
}

/// A generic gRPC service in Python (bytes in, bytes out), plaintext h2c: `test.Echo/Say`
/// answers `echo:REQUEST`, `test.Other/Say` answers `other:REQUEST`.
const GRPC_SERVER: &str = r#"
import grpc, sys
from concurrent import futures
def handler(prefix):
    return grpc.unary_unary_rpc_method_handler(lambda req, ctx: prefix + req)
s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
s.add_generic_rpc_handlers((
    grpc.method_handlers_generic_handler("test.Echo", {"Say": handler(b"echo:")}),
    grpc.method_handlers_generic_handler("test.Other", {"Say": handler(b"other:")}),
))
s.add_insecure_port("127.0.0.1:" + sys.argv[1])
s.start()
s.wait_for_termination()
"#;

/// Calls over h2c to `port` with `:authority` `host`: each `METHOD` once, and the answers
/// (or the gRPC status code) joined by `|`.
fn grpc_calls(port: u16, host: &str, methods: &[&str]) -> String {
    let client = r#"
import grpc, sys
port, host, methods = sys.argv[1], sys.argv[2], sys.argv[3:]
ch = grpc.insecure_channel("127.0.0.1:" + port, options=[("grpc.default_authority", host)])
out = []
for m in methods:
    try:
        out.append(ch.unary_unary(m)(b"hi", timeout=10).decode())
    except grpc.RpcError as e:
        out.append(e.code().name)
print("|".join(out))
"#;
    let mut args = vec![
        "-c".to_string(),
        client.to_string(),
        port.to_string(),
        host.to_string(),
    ];
    args.extend(methods.iter().map(|m| m.to_string()));
    let out = std::process::Command::new("/usr/bin/python3")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python3 grpc client");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        if out.status.success() {
            String::new()
        } else {
            format!(" (stderr: {})", String::from_utf8_lossy(&out.stderr))
        }
    )
}

/// GRPCRoute (conformance's GRPCExactMethodMatching, in spirit): a method match reaches its
/// service over HTTP/2, another method is not routed, and a RateLimitPolicy on the
/// GRPCRoute limits its calls (a gRPC client sees the 429 as UNAVAILABLE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpcroute_reaches_its_method_over_h2_and_a_policy_limits_it() {
    let c = Cluster::start().await;
    let grpc_port = free_port();
    let mut srv = std::process::Command::new("/usr/bin/python3")
        .args(["-c", GRPC_SERVER, &grpc_port.to_string()])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("python3 grpc server");
    assert!(
        wait_listening(grpc_port, Duration::from_secs(15)).await,
        "gRPC server did not start"
    );
    c.apply(&service_in("shop", "echo", grpc_port));
    let (_base, _admin, _gw) = start_gateway(&c).await;
    let listen = free_port();
    c.apply(&class());
    c.apply(&gateway("shop", "grpc", &[("h2c", listen, None)], "Same"));
    c.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: shop}
spec:
  parentRefs: [{name: grpc}]
  hostnames: [grpc.example]
  rules:
  - name: say
    matches: [{method: {service: test.Echo, method: Say}}]
    backendRefs: [{name: echo, port: 8080}]
"#,
    );
    let first = eventually(Duration::from_secs(5), || async move {
        grpc_calls(listen, "grpc.example", &["/test.Echo/Say"]) == "echo:hi"
    })
    .await;
    assert!(
        first,
        "{}",
        grpc_calls(listen, "grpc.example", &["/test.Echo/Say"])
    );
    // Another service's method is not the route's (404 is UNIMPLEMENTED to gRPC).
    assert_eq!(
        grpc_calls(listen, "grpc.example", &["/test.Other/Say"]),
        "UNIMPLEMENTED"
    );
    let r = status_until(&c, "grpcroute", Some("shop"), "echo", |s| {
        s["parents"].is_array()
    })
    .await;
    assert_eq!(
        accepted_by_parent(&r, 0),
        ("True".into(), "Accepted".into())
    );
    c.apply(
        r#"apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: calls, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: GRPCRoute, name: echo, sectionName: say}]
  limits:
    per-client: {key: client_ip, rate: 2/m, burst: 2}
"#,
    );
    let limited = eventually(Duration::from_secs(5), || async move {
        grpc_calls(listen, "grpc.example", &["/test.Echo/Say"]) == "UNAVAILABLE"
    })
    .await;
    assert!(
        limited,
        "{}",
        grpc_calls(listen, "grpc.example", &["/test.Echo/Say"])
    );
    let _ = srv.kill();
    let _ = srv.wait();
}

/// A Gateway with an HTTP and an HTTPS listener (a TLS Secret by certificateRefs) and one
/// HTTPRoute, in `shop`; BASE.toml has a TLS listener of its own, so the TLS runtime runs.
fn tls_gateway_objects(http: u16, https: u16) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: shop}}
spec:
  gatewayClassName: tollgate
  listeners:
  - {{name: http, protocol: HTTP, port: {http}}}
  - name: https
    protocol: HTTPS
    port: {https}
    hostname: churn.example
    tls:
      certificateRefs: [{{name: site}}]
"#
    )
}

fn churn_route(extra_rule: &str) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: churn, namespace: shop}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [churn.example]
  rules:
  - name: app
    matches: [{{path: {{type: PathPrefix, value: /app}}}}]
    backendRefs: [{{name: web, port: 8080}}]
{extra_rule}"#
    )
}

/// HTTPS listeners: the certificate of certificateRefs served by SNI, the listener's status,
/// and a missing Secret said as the spec says (`InvalidCertificateRef`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_listener_serves_its_certificate_and_says_when_it_cannot() {
    let c = Cluster::start().await;
    let infra = Infra::start(&c, "shop", &["web"]).await;
    let ca = tollgate_testkit::pki::Ca::new("cluster ca").expect("ca");
    let (crt, key) = ca
        .issue(&tollgate_testkit::pki::LeafSpec {
            common_name: "gateway-site".into(),
            ..tollgate_testkit::pki::LeafSpec::server(&["churn.example"])
        })
        .expect("leaf")
        .write(&c.dir, "site")
        .expect("write");
    c.tls_secret("site", &crt, &key);
    let (port, admin, tls) = (free_port(), free_port(), free_port());
    let _gw = c
        .gateway_with(
            BIN.as_ref(),
            port,
            admin,
            &format!("tls_listen = [\"127.0.0.1:{tls}\"]\n"),
            &[],
        )
        .await;
    assert!(ready(admin).await);
    let (http, https) = (free_port(), free_port());
    c.apply(&class());
    c.apply(&tls_gateway_objects(http, https));
    c.apply(&churn_route(""));
    let served = eventually(Duration::from_secs(5), || async move {
        handshake_subject(https, Some("churn.example"), &[]).as_deref() == Some("gateway-site")
    })
    .await;
    assert!(served, "the listener's certificate is not served");
    assert!(served_by(
        &infra,
        http,
        "churn.example",
        "/app",
        "web",
        Duration::from_secs(5)
    )
    .await
    .is_some());
    let g = status_until(&c, "gateway", Some("shop"), "edge", |s| {
        s["listeners"][1]["attachedRoutes"] == 1
    })
    .await;
    assert_eq!(
        condition(&g["listeners"][1]["conditions"], "ResolvedRefs"),
        ("True".into(), "ResolvedRefs".into())
    );
    assert_eq!(
        condition(&g["listeners"][1]["conditions"], "Programmed"),
        ("True".into(), "Programmed".into())
    );
    // A listener naming a Secret that does not exist cannot be served, and says why.
    c.apply(&tls_gateway_objects(http, https).replace("name: site", "name: missing"));
    let g = status_until(&c, "gateway", Some("shop"), "edge", |s| {
        s["listeners"][1]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "InvalidCertificateRef"))
    })
    .await;
    assert_eq!(
        condition(&g["listeners"][1]["conditions"], "ResolvedRefs"),
        ("False".into(), "InvalidCertificateRef".into())
    );
    assert_eq!(
        condition(&g["listeners"][1]["conditions"], "Programmed"),
        ("False".into(), "Invalid".into())
    );
    assert_eq!(
        condition(&g["conditions"], "Accepted"),
        ("True".into(), "ListenersNotValid".into())
    );
    // The HTTP listener serves on.
    assert_eq!(
        ask(&infra, http, "GET", "churn.example", "/app", &[])
            .await
            .1
            .as_deref(),
        Some("web")
    );
}

/// oha through every change a Gateway API user makes, without one failed request (issue
/// 42's "Done when"): plain HTTP and HTTPS listeners under load while a rule is added, a
/// RateLimitPolicy (one no client reaches) attached, the endpoints moved and the TLS Secret
/// renewed; each change served within 1 s. A soak: `make bench-kube`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn oha_through_every_gateway_api_change_without_one_failed_request() {
    let bin = std::env::var("TOLLGATE_BIN").unwrap_or_else(|_| BIN.to_string());
    let oha = std::env::var("OHA").unwrap_or_else(|_| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/oha/bin/oha")
            .display()
            .to_string()
    });
    let seconds: u64 = std::env::var("SECONDS_OF_LOAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let c = Cluster::start().await;
    let (a, b) = (
        Backend::start().await.expect("a"),
        Backend::start().await.expect("b"),
    );
    c.apply(&service_in("shop", "web", a.addr.port()));
    let ca = tollgate_testkit::pki::Ca::new("cluster ca").expect("ca");
    let (crt, key) = ca
        .issue(&tollgate_testkit::pki::LeafSpec::server(&["churn.example"]))
        .expect("leaf")
        .write(&c.dir, "churn")
        .expect("write");
    c.tls_secret("site", &crt, &key);
    let (port, admin, tls) = (free_port(), free_port(), free_port());
    let _gw = c
        .gateway_with(
            std::path::Path::new(&bin),
            port,
            admin,
            &format!("tls_listen = [\"127.0.0.1:{tls}\"]\n"),
            &[],
        )
        .await;
    assert!(ready(admin).await);
    let (http, https) = (free_port(), free_port());
    c.apply(&class());
    c.apply(&tls_gateway_objects(http, https));
    c.apply(&churn_route(""));
    assert!(
        until(http, "churn.example", "/app", 200, Duration::from_secs(10))
            .await
            .is_some()
    );
    let load = |args: Vec<String>| {
        std::process::Command::new(&oha)
            .args([
                "-z",
                &format!("{seconds}s"),
                "-c",
                "8",
                "--no-tui",
                "--output-format",
                "json",
            ])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("oha (make oha, or OHA=path)")
    };
    let plain = load(vec![
        "-H".into(),
        "Host: churn.example".into(),
        format!("http://127.0.0.1:{http}/app/"),
    ]);
    let secure = load(vec![
        "--insecure".into(),
        "--connect-to".into(),
        format!("churn.example:{https}:127.0.0.1:{https}"),
        format!("https://churn.example:{https}/app/"),
    ]);
    let mut took: Vec<(&str, Option<Duration>)> = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A rule added.
    c.apply(&churn_route("  - matches: [{path: {type: PathPrefix, value: /v2}}]\n    backendRefs: [{name: web, port: 8080}]\n"));
    let t = Instant::now();
    took.push((
        "rule added",
        until(http, "churn.example", "/v2/x", 200, Duration::from_secs(5))
            .await
            .map(|_| t.elapsed()),
    ));
    // A policy whose limit no client reaches.
    c.apply(
        r#"apiVersion: tollgate.io/v1alpha1
kind: RateLimitPolicy
metadata: {name: roomy, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: churn, sectionName: app}]
  limits: {per-client: {key: client_ip, rate: 1000000/s}}
"#,
    );
    let t = Instant::now();
    let mut seen = None;
    while t.elapsed() < Duration::from_secs(5) {
        if metrics(admin)
            .await
            .contains("policy:shop/roomy/per-client")
        {
            seen = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.push(("policy attached", seen));
    // The endpoints moved to another backend.
    let before = b.hits();
    c.apply(&service_in("shop", "web", b.addr.port()));
    let t = Instant::now();
    while b.hits() == before && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took.push(("endpoints moved", (b.hits() > before).then(|| t.elapsed())));
    // The TLS Secret renewed.
    let (crt2, key2) = ca
        .issue(&tollgate_testkit::pki::LeafSpec {
            common_name: "renewed".into(),
            ..tollgate_testkit::pki::LeafSpec::server(&["churn.example"])
        })
        .expect("renewed")
        .write(&c.dir, "churn2")
        .expect("write");
    c.tls_secret("site", &crt2, &key2);
    let t = Instant::now();
    let mut renewed = None;
    while t.elapsed() < Duration::from_secs(5) {
        if handshake_subject(https, Some("churn.example"), &[]).as_deref() == Some("renewed") {
            renewed = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.push(("secret renewed", renewed));
    let mut failed = Vec::new();
    for (what, child) in [("http", plain), ("https", secure)] {
        let out = child.wait_with_output().expect("oha");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("oha {what}: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        let codes = &j["statusCodeDistribution"];
        let ok = codes["200"].as_u64().unwrap_or(0);
        let total: u64 = codes
            .as_object()
            .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        // Requests in flight when oha's -z ends are its own cut, not failures.
        let mut errors = j["errorDistribution"].clone();
        if let Some(e) = errors.as_object_mut() {
            e.remove("aborted due to deadline");
        }
        println!(
            "oha {what}: {ok} of {total} answered 200, errors {errors}, {:.0} requests/s",
            j["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0)
        );
        if ok == 0 || ok != total || errors.as_object().is_some_and(|e| !e.is_empty()) {
            failed.push(format!("{what}: {codes} {errors}"));
        }
    }
    for (what, t) in &took {
        println!("{what}: served after {t:?}");
    }
    assert!(failed.is_empty(), "{failed:?}");
    for (what, t) in took {
        assert!(
            t.is_some_and(|t| t < Duration::from_secs(1)),
            "{what}: {t:?}"
        );
    }
    assert!(a.hits() > 0 && b.hits() > 0);
}

/// A TLS backend in Python answering `tls-ok` (plain `http.server` over `ssl`).
fn py_tls_backend(cert: &std::path::Path, key: &std::path::Path, port: u16) -> std::process::Child {
    let script = r#"
import http.server, ssl, sys
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"tls-ok"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", script, &port.to_string()])
        .arg(cert)
        .arg(key)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("python3")
}

/// BackendTLSPolicy (conformance's BackendTLSPolicy, in spirit): the pods are spoken to over
/// TLS verified against the ConfigMap's CA under `validation.hostname`; a hostname the
/// certificate does not hold is a 502 (never unverified); the policy's status is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_tls_policy_verifies_the_pods_against_its_configmap_ca() {
    use tollgate_testkit::pki::{Ca, LeafSpec};
    let c = Cluster::start().await;
    let ca = Ca::new("backend ca").expect("ca");
    let (crt, key) = ca
        .issue(&LeafSpec::server(&["payments.internal"]))
        .expect("leaf")
        .write(&c.dir, "payments")
        .expect("write");
    let tls_port = free_port();
    let mut backend = py_tls_backend(&crt, &key, tls_port);
    assert!(
        wait_listening(tls_port, Duration::from_secs(10)).await,
        "TLS backend"
    );
    c.apply(&service_in("shop", "payments", tls_port));
    let ca_file = ca.write(&c.dir, "payments-ca.pem").expect("write the CA");
    let ca_pem = std::fs::read_to_string(&ca_file).expect("read the CA");
    let indented: String = ca_pem.lines().map(|l| format!("    {l}\n")).collect();
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: payments-ca, namespace: shop}}\ndata:\n  ca.crt: |\n{indented}"
    ));
    let (_base, _admin, gw) = start_gateway(&c).await;
    let listen = free_port();
    c.apply(&class());
    c.apply(&gateway("shop", "edge", &[("http", listen, None)], "Same"));
    let policy = |hostname: &str| {
        format!(
            r#"apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: payments-tls, namespace: shop}}
spec:
  targetRefs: [{{group: "", kind: Service, name: payments}}]
  validation:
    hostname: {hostname}
    caCertificateRefs: [{{group: "", kind: ConfigMap, name: payments-ca}}]
"#
        )
    };
    c.apply(&policy("payments.internal"));
    c.apply(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: pay, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  hostnames: [pay.example]
  rules:
  - backendRefs: [{name: payments, port: 8080}]
"#,
    );
    let ok = eventually(Duration::from_secs(5), || async move {
        get(listen, "/charge", &[("host", "pay.example")])
            .await
            .is_ok_and(|r| r.status == 200 && r.body == "tls-ok")
    })
    .await;
    assert!(ok, "not served over TLS: {}", gw.log_text());
    let st = status_until(&c, "backendtlspolicy", Some("shop"), "payments-tls", |s| {
        s["ancestors"].is_array()
    })
    .await;
    assert_eq!(st["ancestors"][0]["ancestorRef"]["name"], "edge");
    assert_eq!(
        condition(&st["ancestors"][0]["conditions"], "Accepted"),
        ("True".into(), "Accepted".into())
    );
    // A hostname the backend's certificate does not hold: refused, not spoken to unverified.
    c.apply(&policy("other.internal"));
    let refused = eventually(Duration::from_secs(5), || async move {
        get(listen, "/charge", &[("host", "pay.example")])
            .await
            .is_ok_and(|r| r.status == 502)
    })
    .await;
    assert!(refused, "an unverifiable backend was served");
    let _ = backend.kill();
    let _ = backend.wait();
}
