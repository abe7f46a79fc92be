//! The timeout cases of the Gateway API conformance suite (kubernetes-sigs/gateway-api
//! v1.6.1, `conformance/tests/`): HTTPRouteRequestTimeout (httproute-timeout-request) and
//! HTTPRouteBackendTimeout (httproute-timeout-backend-request), on one Gateway, with the
//! echo backend's `?delay=1s` as upstream's. Beyond upstream's: the 504 comes when the
//! timeout passes, not when the backend answers, and a request timeout counts every retry.

use super::*;

const NS: &str = "gateway-conformance-infra";
const GW: &str = "same-namespace";
const V1: &str = "infra-backend-v1";
const HOST: &str = "timeouts.example";

/// A rule of PathPrefix `prefix` to [`V1`] with `timeouts` (a YAML flow map).
fn timed_rule(prefix: &str, timeouts: &str) -> String {
    format!(
        "  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n    backendRefs: [{{name: {V1}, port: 8080}}]\n    timeouts: {timeouts}\n"
    )
}

/// Until `path` is answered `status` (at most 5 s); how long that answer took.
async fn answered(infra: &Infra, port: u16, path: &str, status: u16) -> Duration {
    let t = Instant::now();
    loop {
        let asked = Instant::now();
        let (got, _, _) = ask(infra, port, "GET", HOST, path, &[]).await;
        if got == status {
            return asked.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{path}: {got}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_request_and_backend_timeouts_answer_504_when_they_pass() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[V1]).await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = apply_same_namespace(
        &c,
        NS,
        GW,
        &[
            httproute(
                NS,
                GW,
                "request-timeout",
                &[
                    timed_rule("/request-timeout", "{request: 500ms}"),
                    timed_rule("/disable-request-timeout", "{request: \"0s\"}"),
                ],
            ),
            httproute(
                NS,
                GW,
                "backend-request-timeout",
                &[
                    timed_rule("/backend-timeout", "{backendRequest: 500ms}"),
                    timed_rule("/disable-backend-timeout", "{backendRequest: \"0s\"}"),
                    // Both, in GEP-2257's compound form: the backend's 1 s is within both.
                    timed_rule("/both", "{request: 1m30s, backendRequest: 1m}"),
                ],
            ),
        ],
    );
    for prefix in ["/request-timeout", "/backend-timeout"] {
        answered(&infra, port, prefix, 200).await;
        let took = answered(&infra, port, &format!("{prefix}?delay=1s"), 504).await;
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_millis(950),
            "{prefix}: the 504 came after {took:?}, not at the 500 ms timeout\n{}",
            gw.log_text()
        );
    }
    for path in [
        "/disable-request-timeout?delay=1s",
        "/disable-backend-timeout?delay=1s",
        "/both?delay=1s",
    ] {
        let took = answered(&infra, port, path, 200).await;
        assert!(took >= Duration::from_secs(1), "{path}: {took:?}");
    }
    for route in ["request-timeout", "backend-request-timeout"] {
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
