//! sessionPersistence (GEP-1619, experimental channel; no upstream conformance case in
//! v1.6.1) with real traffic: a Service of two pods, a cookie that pins a client to the pod
//! that answered it, and what a client cannot do with it: forge, swap or reuse it elsewhere.

use super::*;
use tollgate_testkit::free_port;

const NS: &str = "session";
const HOST: &str = "session.example";

/// Service `sticky` on port 8080 with one EndpointSlice per pod.
fn two_pods(a: u16, b: u16) -> String {
    let slice = |i: u8, port: u16| {
        format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: sticky-{i}\n  namespace: {NS}\n  labels: {{kubernetes.io/service-name: sticky}}\naddressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]\n")
    };
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: sticky, namespace: {NS}}}\nspec:\n  ports: [{{name: http, port: 8080}}]\n---\n{}---\n{}",
        slice(1, a),
        slice(2, b)
    )
}

fn route(rule_extra: &str, prefix: &str, name: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n    backendRefs: [{{name: sticky, port: 8080}}]\n{rule_extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cookie_pins_a_client_to_its_pod_and_cannot_be_forged() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra {
        backends: vec![
            ("pod-a".into(), Backend::start().await.expect("backend")),
            ("pod-b".into(), Backend::start().await.expect("backend")),
        ],
    };
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = free_port();
    c.apply(&two_pods(
        infra.backends[0].1.addr.port(),
        infra.backends[1].1.addr.port(),
    ));
    c.apply(
        &[
            class(),
            gateway(NS, "gw", &[("http", port, None)], "Same"),
            route(
                "    sessionPersistence: {sessionName: pin, absoluteTimeout: 1h, cookieConfig: {lifetimeType: Permanent}}\n",
                "/app",
                "sticky",
            ),
            route("", "/other", "plain"),
        ]
        .join("---\n"),
    );
    // Served, and without a cookie balanced over both pods.
    let t = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{seen:?}\n{}",
            gw.log_text()
        );
        if let (200, Some(b), _) = ask(&infra, port, "GET", HOST, "/app", &[]).await {
            seen.insert(b);
        }
    }
    // The first answer pins: Set-Cookie pin=ID.TAG with the hour as Max-Age.
    let (_, pod, r) = ask(&infra, port, "GET", HOST, "/app", &[]).await;
    let (pod, r) = (pod.expect("a pod"), r.expect("reply"));
    let set = r.header("set-cookie").expect("set-cookie").to_string();
    assert!(
        set.starts_with("pin=") && set.contains("Max-Age=3600"),
        "{set}"
    );
    let cookie = set.split(';').next().expect("pair").to_string();
    for _ in 0..10 {
        let (status, got, r) =
            ask(&infra, port, "GET", HOST, "/app/x", &[("cookie", &cookie)]).await;
        assert_eq!((status, got.as_deref()), (200, Some(pod.as_str())));
        assert!(
            r.expect("reply").header("set-cookie").is_none(),
            "a held pin is not sent again"
        );
    }
    // Hostile: a forged tag, another id with the same tag, a cookie given twice. Each is
    // ignored (balanced as usual) and the answer pins anew.
    let (id, tag) = cookie["pin=".len()..].split_once('.').expect("ID.TAG");
    // The same length, one character changed.
    let (head, last) = id.split_at(id.len() - 1);
    let other_id = format!("{head}{}", if last == "0" { "1" } else { "0" });
    for bad in [
        format!("pin={id}.{}", "0".repeat(tag.len())),
        format!("pin={other_id}.{tag}"),
        format!("{cookie}; {cookie}"),
        "pin=".to_string(),
    ] {
        let (status, _, r) = ask(&infra, port, "GET", HOST, "/app", &[("cookie", &bad)]).await;
        assert_eq!(status, 200);
        assert!(
            r.expect("reply")
                .header("set-cookie")
                .is_some_and(|s| s.starts_with("pin=")),
            "{bad}"
        );
    }
    // The route without a session neither pins nor reads the cookie.
    let (_, _, r) = ask(&infra, port, "GET", HOST, "/other", &[("cookie", &cookie)]).await;
    assert!(r.expect("reply").header("set-cookie").is_none());
    let s = status_until(&c, "httproute", Some(NS), "sticky", |s| {
        accepted_by_parent(s, 0).0 == "True"
    })
    .await;
    assert_eq!(
        condition(&s["parents"][0]["conditions"], "ResolvedRefs").0,
        "True",
        "{s}"
    );
}
