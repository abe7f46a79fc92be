//! ExternalAuth (GEP-1494, experimental channel; no upstream conformance case in v1.6.1)
//! with real traffic: an HTTP auth service behind a Service (reached at its endpoints, as
//! backends are, without cluster DNS), the client's path after `http.path`, `Authorization`
//! and `allowedHeaders` sent, and what the upstream reads: the service's headers, never the
//! client's copies of them, never the service's framing or body fields.

use super::*;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex};
use tollgate_testkit::free_port;

const NS: &str = "authz";
const HOST: &str = "authz.example";

/// What the auth service was asked: (path and query, header names), one per request.
type Asked = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// `Bearer good` passes with `X-User: alice` (and the answer's own Content-Type, Vary and
/// Content-Length, none of which may go upstream); anything else is 403.
async fn auth_service(asked: Asked) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                continue;
            };
            let asked = asked.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let asked = asked.clone();
                        async move {
                            let names = req
                                .headers()
                                .keys()
                                .map(|k| k.as_str().to_string())
                                .collect();
                            let pq = req
                                .uri()
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default();
                            asked.lock().expect("lock").push((pq, names));
                            let good = req
                                .headers()
                                .get("authorization")
                                .is_some_and(|v| v == "Bearer good");
                            let mut r = http::Response::new(Full::new(bytes::Bytes::from_static(
                                b"{\"ok\":true}",
                            )));
                            if good {
                                r.headers_mut()
                                    .insert("x-user", "alice".parse().expect("v"));
                                r.headers_mut()
                                    .insert("content-type", "application/json".parse().expect("v"));
                                r.headers_mut()
                                    .insert("vary", "Authorization".parse().expect("v"));
                                // Fields the gateway states: never the auth answer's.
                                r.headers_mut()
                                    .insert("x-forwarded-for", "6.6.6.6".parse().expect("v"));
                                r.headers_mut()
                                    .insert("x-request-id", "forged".parse().expect("v"));
                            } else {
                                *r.status_mut() = http::StatusCode::FORBIDDEN;
                            }
                            Ok::<_, std::io::Error>(r)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

fn route(name: &str, prefix: &str, auth: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n    filters: [{{type: ExternalAuth, externalAuth: {auth}}}]\n    backendRefs: [{{name: app, port: 8080}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_auth_asks_the_service_and_the_upstream_reads_only_its_word() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &["app"]).await;
    let asked: Asked = Default::default();
    let auth_port = auth_service(asked.clone()).await;
    c.apply(&service_in(NS, "ext-authz", auth_port));
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = free_port();
    c.apply(
        &[
            class(),
            gateway(NS, "gw", &[("http", port, None)], "Same"),
            route(
                "guarded",
                "/api",
                "{protocol: HTTP, backendRef: {name: ext-authz, port: 8080}, http: {path: /check, allowedHeaders: [x-tenant]}}",
            ),
            route(
                "listed",
                "/listed",
                "{protocol: HTTP, backendRef: {name: ext-authz, port: 8080}, http: {allowedResponseHeaders: [x-user]}}",
            ),
            route("grpc", "/grpc", "{protocol: GRPC, backendRef: {name: ext-authz, port: 8080}}"),
            route("nowhere", "/nowhere", "{protocol: HTTP, backendRef: {name: missing, port: 8080}}"),
        ]
        .join("---\n"),
    );
    let good = [("authorization", "Bearer good")];
    // Served once the route is: refused without the word of the service.
    let t = Instant::now();
    loop {
        let (status, _, _) = ask(&infra, port, "GET", HOST, "/api/orders", &[]).await;
        if status == 403 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{status}\n{}",
            gw.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(infra.hits(), [0], "nothing refused reached the app");
    // Passed: the service was asked at its prefix with the client's path and query, with
    // Authorization and the allowed header, not the others.
    asked.lock().expect("lock").clear();
    let (status, took, r) = ask(
        &infra,
        port,
        "GET",
        HOST,
        "/api/orders?id=7",
        &[
            good[0],
            ("x-tenant", "t1"),
            ("x-secret", "s"),
            ("x-user", "mallory"),
            ("x_user", "mallory"),
        ],
    )
    .await;
    assert_eq!((status, took.as_deref()), (200, Some("app")), "{r:?}");
    let seen = asked.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, "/check/api/orders?id=7");
    assert!(
        seen[0].1.contains(&"x-tenant".to_string())
            && seen[0].1.contains(&"authorization".to_string())
    );
    assert!(!seen[0].1.contains(&"x-secret".to_string()), "{seen:?}");
    // What the app read: the service's X-User alone (the client's, in either spelling, gone),
    // and none of the service's own representation fields.
    let body = r.expect("reply").json();
    let h = &body["headers"];
    assert_eq!(h["x-user"], "alice", "{body}");
    assert!(h.get("x_user").is_none(), "{body}");
    assert!(
        h.get("vary").is_none() && h.get("content-type").is_none(),
        "{body}"
    );
    assert_ne!(h["x-request-id"], "forged", "{body}");
    assert!(
        !h["x-forwarded-for"]
            .as_str()
            .unwrap_or("")
            .contains("6.6.6.6"),
        "{body}"
    );
    // A path that walks out of the route is asked about as the path the app reads.
    asked.lock().expect("lock").clear();
    let (status, _, _) = ask(&infra, port, "GET", HOST, "/api/../api/x", &good).await;
    assert_eq!(status, 200);
    assert_eq!(asked.lock().expect("lock")[0].0, "/check/api/x");
    // Listed response headers: copied alone; the client's copy removed.
    let (status, _, r) = ask(
        &infra,
        port,
        "GET",
        HOST,
        "/listed",
        &[good[0], ("x-user", "mallory")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(r.expect("reply").json()["headers"]["x-user"], "alice");
    // What Tollgate cannot ask, or a Service that is not there: nothing passes.
    for path in ["/grpc", "/nowhere"] {
        let before = infra.hits();
        let (status, _, _) = ask(&infra, port, "GET", HOST, path, &good).await;
        assert_eq!(status, 500, "{path}");
        assert_eq!(infra.hits(), before, "{path}");
    }
    let s = status_until(&c, "httproute", Some(NS), "nowhere", |s| {
        accepted_by_parent(s, 0).0 == "True"
    })
    .await;
    assert_eq!(
        condition(&s["parents"][0]["conditions"], "ResolvedRefs").0,
        "False",
        "{s}"
    );
}
