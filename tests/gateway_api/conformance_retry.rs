//! The retry cases of the Gateway API conformance suite (kubernetes-sigs/gateway-api v1.6.1,
//! experimental channel, `conformance/tests/`): HTTPRouteRetry (httproute-retry),
//! HTTPRouteRetryWithTimeouts (httproute-retry-with-timeouts) and the connection-error case
//! (httproute-retry-connection-error), with the echo backend's retry simulation
//! (`uuid`, `succeedAfter`, `responseCode`, `delayRetry`) as upstream's. One pod: every retry
//! goes to the pod that failed. Beyond upstream's: how many attempts the pod saw, a POST never
//! retried, a status not named passes through, `backoff` waits, and a retry never outlives
//! the request timeout.

use super::*;

const NS: &str = "gateway-conformance-infra";
const GW: &str = "same-namespace";
const V3: &str = "infra-backend-v3";
const HOST: &str = "retry.example";

/// A rule of PathPrefix `prefix` to [`V3`] with `extra` (YAML lines at the rule's level).
fn rule(prefix: &str, extra: &str) -> String {
    format!(
        "  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n    backendRefs: [{{name: {V3}, port: 8080}}]\n{extra}"
    )
}

fn routes() -> String {
    [
        httproute(NS, GW,
            "retries",
            &[
                rule("/retry/code-500-attempts-3", "    retry: {codes: [500], attempts: 3}\n"),
                rule(
                    "/retry/code-all-attempts-2",
                    "    retry: {codes: [500, 502, 503, 504], attempts: 2}\n",
                ),
                rule(
                    "/retry/backoff",
                    "    retry: {codes: [500], attempts: 2, backoff: 150ms}\n    timeouts: {request: 1s}\n",
                ),
            ],
        ),
        httproute(NS, GW,
            "retries-connection-error",
            &[rule("/retry/no-status-code-attempts-3", "    retry: {attempts: 3}\n")],
        ),
        httproute(NS, GW,
            "retries-with-timeouts",
            &[
                rule(
                    "/retry/backend-request-timeout-200ms",
                    "    retry: {attempts: 2}\n    timeouts: {backendRequest: 200ms}\n",
                ),
                rule(
                    "/retry/request-timeout-200ms",
                    "    retry: {codes: [500], attempts: 5}\n    timeouts: {backendRequest: 200ms, request: 400ms}\n",
                ),
            ],
        ),
        // No retry: a failure is the client's at once.
        httproute(NS, GW, "no-retry", &[rule("/retry/none", "")]),
    ]
    .join("---\n")
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One request with a fresh `uuid` and the simulation's `query`: its status, and how long.
async fn simulate(
    infra: &Infra,
    port: u16,
    method: &str,
    path: &str,
    query: &str,
) -> (u16, Duration) {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let t = Instant::now();
    let (status, _, _) = ask(
        infra,
        port,
        method,
        HOST,
        &format!("{path}?uuid=u{n}&{query}"),
        &[],
    )
    .await;
    (status, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_retries_resend_to_the_same_pod_within_attempts_and_timeouts() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[V3]).await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = apply_same_namespace(&c, NS, GW, &[routes()]);
    assert_served(
        &infra,
        port,
        HOST,
        &[
            "/retry/code-500-attempts-3",
            "/retry/no-status-code-attempts-3",
            "/retry/request-timeout-200ms",
            "/retry/none",
        ],
        V3,
        &gw,
    )
    .await;
    // (path, simulation, status): upstream's cases in its order.
    let cases: &[(&str, &str, u16)] = &[
        (
            "/retry/code-500-attempts-3",
            "responseCode=500&succeedAfter=2",
            200,
        ),
        (
            "/retry/code-500-attempts-3",
            "responseCode=500&succeedAfter=4",
            500,
        ),
        (
            "/retry/code-500-attempts-3",
            "responseCode=503&succeedAfter=2",
            503,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=500&succeedAfter=1",
            200,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=500&succeedAfter=3",
            500,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=502&succeedAfter=1",
            200,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=502&succeedAfter=3",
            502,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=503&succeedAfter=1",
            200,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=503&succeedAfter=3",
            503,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=504&succeedAfter=1",
            200,
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=504&succeedAfter=3",
            504,
        ),
        // HTTPRouteRetryWithTimeouts.
        (
            "/retry/backend-request-timeout-200ms",
            "responseCode=500&succeedAfter=2&delayRetry=300ms",
            200,
        ),
        (
            "/retry/backend-request-timeout-200ms",
            "responseCode=500&succeedAfter=3&delayRetry=300ms",
            504,
        ),
        (
            "/retry/request-timeout-200ms",
            "responseCode=500&succeedAfter=1",
            200,
        ),
        (
            "/retry/request-timeout-200ms",
            "responseCode=500&succeedAfter=4&delayRetry=100ms",
            504,
        ),
        // The connection-error case: retried, but the last loss is answered 502 as nginx
        // does (upstream's case wants 500 or 503: HTTPRouteRetryConnectionError is not
        // claimed). A pooled connection lost is also resent once for free (Pingora's rule
        // for the keep-alive race), so 5 losses, not upstream's 4, outlast 3 attempts.
        ("/retry/no-status-code-attempts-3", "succeedAfter=2", 200),
        ("/retry/no-status-code-attempts-3", "succeedAfter=5", 502),
    ];
    for (i, (path, sim, want)) in cases.iter().enumerate() {
        // Upstream asks each case to hold consistently: three times each.
        for round in 0..3 {
            let before = infra.hits();
            let (got, took) = simulate(&infra, port, "GET", path, sim).await;
            assert_eq!(
                got,
                *want,
                "case {i} round {round}: {path}?{sim} after {took:?}\n{}",
                gw.log_text()
            );
            // The backend's hits count only its successes: one for a 200, none otherwise.
            let ok = infra.hits()[0] - before[0];
            assert_eq!(ok, usize::from(*want == 200), "case {i}: {path}?{sim}");
        }
    }
    // The request timeout bounds every retry: 400 ms, not 5 x 200 ms.
    let (got, took) = simulate(
        &infra,
        port,
        "GET",
        "/retry/request-timeout-200ms",
        "responseCode=500&succeedAfter=9&delayRetry=150ms",
    )
    .await;
    assert_eq!(got, 504);
    assert!(took < Duration::from_millis(700), "{took:?}");
    // backoff: two retries wait 150 ms each before they go.
    let (got, took) = simulate(
        &infra,
        port,
        "GET",
        "/retry/backoff",
        "responseCode=500&succeedAfter=2",
    )
    .await;
    assert_eq!(got, 200);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    // A POST is never sent twice: its first failure is the client's.
    let (got, _) = simulate(
        &infra,
        port,
        "POST",
        "/retry/code-500-attempts-3",
        "responseCode=500&succeedAfter=1",
    )
    .await;
    assert_eq!(got, 500);
    // Without a retry policy nothing is retried.
    let (got, _) = simulate(
        &infra,
        port,
        "GET",
        "/retry/none",
        "responseCode=503&succeedAfter=1",
    )
    .await;
    assert_eq!(got, 503);
    for route in [
        "retries",
        "retries-connection-error",
        "retries-with-timeouts",
    ] {
        let s = status_until(&c, "httproute", Some(NS), route, |s| {
            accepted_by_parent(s, 0).0 == "True"
        })
        .await;
        assert_eq!(
            condition(&s["parents"][0]["conditions"], "ResolvedRefs"),
            ("True".into(), "ResolvedRefs".into()),
            "{route}: {s}"
        );
    }
}
