//! The Core conformance cases of kubernetes-sigs/gateway-api v1.6.1 about routing
//! (`conformance/tests/`), ported to the API server stand-in with real traffic: path,
//! header, query and method matching and their precedence (HTTPRouteMatching,
//! HTTPRouteMatchingAcrossRoutes, HTTPRouteHeaderMatching, HTTPRouteExactPathMatching,
//! HTTPRoutePathMatchOrder, HTTPRouteQueryParamMatching, HTTPRouteMethodMatching), hostnames
//! (HTTPRouteHostnameIntersection, HTTPRouteListenerHostnameMatching), listeners
//! (GatewayHTTPListenerIsolation, HTTPRouteListenerPortMatching), weights (HTTPRouteWeight),
//! namespaces and ReferenceGrants (HTTPRouteSimpleSameNamespace, HTTPRouteCrossNamespace,
//! HTTPRouteReferenceGrant, HTTPRouteInvalidReferenceGrant,
//! HTTPRouteInvalidCrossNamespaceBackendRef, HTTPRouteInvalidCrossNamespaceParentRef), and
//! what cannot be served (HTTPRouteInvalidNonExistentBackendRef,
//! HTTPRouteInvalidBackendRefUnknownKind, HTTPRouteInvalidParentRefNotMatchingSectionName,
//! HTTPRouteInvalidParentRefNotMatchingListenerPort, HTTPRouteDisallowedKind).
//!
//! Upstream runs every case alone against the shared Gateways of
//! `conformance/base/manifests.yaml` (`same-namespace`, `backend-namespaces`, port 80). Here
//! each case gets a Gateway of its own with the same listeners, on a port of its own, so
//! the cases of one test share a cluster and a gateway process and run one after the other
//! without seeing each other. A test collects every difference from upstream it finds and
//! fails with all of them at once.

use super::*;
use serde_json::Value;
use std::collections::BTreeMap;

const INFRA: &str = "gateway-conformance-infra";
const WEB: &str = "gateway-conformance-web-backend";
const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";
const WEB_BACKEND: &str = "web-backend";
/// The Host of a request whose case names none (upstream sends the Gateway's address).
const ANY: &str = "gateway.conformance.example";
/// How long the first case of a group may take: its listener bound, its routes served.
const FIRST: Duration = Duration::from_secs(5);
/// How long a later case may take to get what it wants.
const SETTLE: Duration = Duration::from_secs(1);
/// Requests sent to judge the weights (upstream: 500, within 5 points).
const WEIGHED: usize = 300;

/// What a request should get: a backend's answer (200), or this status from no backend.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Backend(&'static str),
    Status(u16),
}

/// One request of an upstream case and what it should get.
struct Case {
    port: u16,
    method: &'static str,
    host: String,
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    want: Want,
}

/// A GET that `backend` should answer.
fn reaches(port: u16, host: &str, path: &'static str, backend: &'static str) -> Case {
    Case {
        port,
        method: "GET",
        host: host.to_string(),
        path,
        headers: Vec::new(),
        want: Want::Backend(backend),
    }
}

/// A GET that should be answered `status` without reaching any backend.
fn answers(port: u16, host: &str, path: &'static str, status: u16) -> Case {
    Case {
        want: Want::Status(status),
        ..reaches(port, host, path, "")
    }
}

impl Case {
    fn method(mut self, method: &'static str) -> Case {
        self.method = method;
        self
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Case {
        self.headers.push((name, value));
        self
    }
}

/// Whether `case` gets what it wants within `limit` (asked again every 20 ms); what it got
/// when it does not.
async fn meets(infra: &Infra, case: &Case, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let (status, by, _) = ask(
            infra,
            case.port,
            case.method,
            &case.host,
            case.path,
            &case.headers,
        )
        .await;
        let ok = match case.want {
            Want::Backend(b) => status == 200 && by.as_deref() == Some(b),
            Want::Status(s) => status == s && by.is_none(),
        };
        if ok {
            return Ok(());
        }
        if t.elapsed() >= limit {
            return Err(format!(
                "{} {} (Host {}, headers {:?}): want {:?}, got {status} from {by:?}",
                case.method, case.path, case.host, case.headers, case.want
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The requests of one upstream case, in order: the first may wait for its listener and
/// routes (`FIRST`), the others settle within `SETTLE`. Each miss is a line in `bad`.
async fn run(infra: &Infra, test: &str, cases: &[Case], bad: &mut Vec<String>) {
    assert!(!cases.is_empty(), "{test}: no cases");
    for (i, case) in cases.iter().enumerate() {
        let limit = if i == 0 { FIRST } else { SETTLE };
        if let Err(why) = meets(infra, case, limit).await {
            bad.push(format!("{test} #{i}: {why}"));
        }
    }
}

/// A route condition wanted: (type, status, reason).
type Cond<'a> = (&'a str, &'a str, &'a str);

const ACCEPTED: Cond<'static> = ("Accepted", "True", "Accepted");
const RESOLVED: Cond<'static> = ("ResolvedRefs", "True", "ResolvedRefs");

/// The (status, reason) of the condition `kind` in a list of them.
fn cond(conds: &Value, kind: &str) -> Option<(String, String)> {
    let c = conds.as_array()?.iter().find(|c| c["type"] == kind)?;
    Some((
        c["status"].as_str().unwrap_or("").to_string(),
        c["reason"].as_str().unwrap_or("").to_string(),
    ))
}

/// Whether a route's status has parents, each with every condition of `want`.
fn says(s: &Value, want: &[Cond<'_>]) -> bool {
    let parents: Vec<&Value> = s["parents"].as_array().into_iter().flatten().collect();
    !parents.is_empty()
        && parents.iter().all(|p| {
            want.iter().all(|(kind, status, reason)| {
                cond(&p["conditions"], kind).is_some_and(|(st, re)| st == *status && re == *reason)
            })
        })
}

/// Until every parent of the HTTPRoute `ns`/`name` says `want` (at most 5 s); a line in
/// `bad` if it never does.
async fn route_says(c: &Cluster, bad: &mut Vec<String>, ns: &str, name: &str, want: &[Cond<'_>]) {
    let is = |s: &Value| says(s, want);
    let s = status_until(c, "httproute", Some(ns), name, &is).await;
    if !is(&s) {
        bad.push(format!(
            "HTTPRoute {ns}/{name}: want {want:?} of every parent, got parents {}",
            s["parents"]
        ));
    }
}

/// HTTPRouteMustHaveNoAcceptedParents: the route has no parent, or one that is not
/// Accepted.
fn none_accepted(c: &Cluster, bad: &mut Vec<String>, ns: &str, name: &str) {
    let s = status_of(c, "httproute", Some(ns), name);
    let parents: Vec<&Value> = s["parents"].as_array().into_iter().flatten().collect();
    let ok = parents.len() <= 1
        && parents
            .iter()
            .all(|p| cond(&p["conditions"], "Accepted").is_some_and(|(st, _)| st == "False"));
    if !ok {
        bad.push(format!(
            "HTTPRoute {ns}/{name}: want no Accepted parent, got parents {}",
            s["parents"]
        ));
    }
}

/// Until the listeners of the Gateway `INFRA`/`gw` have these attachedRoutes (at most
/// 5 s); a line in `bad` if they never do.
async fn attached(c: &Cluster, bad: &mut Vec<String>, gw: &str, want: &[(&str, i64)]) {
    let is = |s: &Value| {
        want.iter().all(|(name, n)| {
            s["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|l| l["name"] == *name && l["attachedRoutes"] == *n)
        })
    };
    let s = status_until(c, "gateway", Some(INFRA), gw, &is).await;
    if !is(&s) {
        let got: Vec<String> = s["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| format!("{}: {}", l["name"], l["attachedRoutes"]))
            .collect();
        bad.push(format!(
            "Gateway {gw}: want attachedRoutes {want:?}, got {got:?}"
        ));
    }
}

/// Fails with every difference from upstream that was found, and the end of the gateway's
/// log.
fn verdict(bad: &[String], gw: &GatewayProc) {
    if bad.is_empty() {
        return;
    }
    let log = gw.log_text();
    let mut from = log.len().saturating_sub(4000);
    while !log.is_char_boundary(from) {
        from += 1;
    }
    panic!(
        "{} difference(s) from upstream:\n{}\n--- the end of the gateway's log ---\n{}",
        bad.len(),
        bad.join("\n"),
        &log[from..]
    );
}

/// A Gateway as conformance's `same-namespace`: one HTTP listener `http`, routes of its own
/// namespace.
fn same_namespace(name: &str, port: u16) -> String {
    gateway(INFRA, name, &[("http", port, None)], "Same")
}

const MATCHING_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-matching}]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /}
    - headers: [{name: version, value: one}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /v2}
    - headers: [{name: version, value: two}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-across}]
  hostnames: [example.com, example.net]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /}
    - headers: [{name: version, value: one}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-across}]
  hostnames: [example.com]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /v2}
    - headers: [{name: version, value: two}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: header-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-headers}]
  rules:
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - headers: [{name: color, value: blue}]
    - headers: [{name: color, value: green}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - headers: [{name: color, value: red}]
    - headers: [{name: color, value: yellow}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-exact}]
  rules:
  - matches: [{path: {type: Exact, value: /one}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /two}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: path-matching-order, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-order}]
  rules:
  - matches: [{path: {type: Exact, value: /match}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact/one}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: query-param-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-query}]
  rules:
  - matches: [{queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: dolphin}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - queryParams: [{name: animal, value: dolphin}, {name: color, value: blue}]
    - queryParams: [{name: ANIMAL, value: Whale}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path1}
      queryParams: [{name: animal, value: whale}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - headers: [{name: version, value: one}]
      queryParams: [{name: animal, value: whale}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path2}
      headers: [{name: version, value: two}]
      queryParams: [{name: animal, value: whale}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path3}
      queryParams: [{name: animal, value: shark}]
    - path: {type: PathPrefix, value: /path4}
      headers: [{name: version, value: three}]
      queryParams: [{name: animal, value: kraken}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path5}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: hydra}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: four}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: method-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-method}]
  rules:
  - matches: [{method: POST}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: GET}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path1}
      method: GET
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - headers: [{name: version, value: one}]
      method: PUT
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path2}
      headers: [{name: version, value: two}]
      method: POST
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - path: {type: PathPrefix, value: /path3}
      method: PATCH
    - path: {type: PathPrefix, value: /path4}
      headers: [{name: version, value: three}]
      method: DELETE
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path5}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: PATCH}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: four}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
"#;

// Ports HTTPRouteMatching, HTTPRouteMatchingAcrossRoutes, HTTPRouteHeaderMatching,
// HTTPRouteExactPathMatching, HTTPRoutePathMatchOrder, HTTPRouteQueryParamMatching and
// HTTPRouteMethodMatching (httproute-matching.go, httproute-matching-across-routes.go,
// httproute-header-matching.go, httproute-exact-path-matching.go,
// httproute-path-match-order.go, httproute-query-param-matching.go,
// httproute-method-matching.go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_matching_by_path_header_query_and_method() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    let infra = Infra::start(&c, INFRA, &[V1, V2, V3]).await;
    let (pm, pa, ph, pe, po, pq, pmeth) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    c.apply(
        &[
            same_namespace("same-namespace-matching", pm),
            same_namespace("same-namespace-across", pa),
            same_namespace("same-namespace-headers", ph),
            same_namespace("same-namespace-exact", pe),
            same_namespace("same-namespace-order", po),
            same_namespace("same-namespace-query", pq),
            same_namespace("same-namespace-method", pmeth),
            MATCHING_ROUTES.to_string(),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();

    let matching = [
        reaches(pm, ANY, "/", V1),
        reaches(pm, ANY, "/example", V1),
        reaches(pm, ANY, "/", V1).header("version", "one"),
        reaches(pm, ANY, "/v2", V2),
        reaches(pm, ANY, "/v2/example", V2),
        reaches(pm, ANY, "/", V2).header("version", "two"),
        reaches(pm, ANY, "/v2/", V2),
        // Not a segment of /v2.
        reaches(pm, ANY, "/v2example", V1),
        reaches(pm, ANY, "/foo/v2/example", V1),
    ];
    run(&infra, "HTTPRouteMatching", &matching, &mut bad).await;

    let across = [
        reaches(pa, "example.com", "/", V1),
        reaches(pa, "example.com", "/example", V1),
        reaches(pa, "example.net", "/example", V1),
        reaches(pa, "example.com", "/example", V1).header("version", "one"),
        reaches(pa, "example.com", "/v2", V2),
        // matching-part2 names example.com only.
        reaches(pa, "example.net", "/v2", V1),
        reaches(pa, "example.com", "/v2/example", V2),
        reaches(pa, "example.com", "/", V2).header("version", "two"),
    ];
    run(&infra, "HTTPRouteMatchingAcrossRoutes", &across, &mut bad).await;

    let headers = [
        reaches(ph, ANY, "/", V1).header("version", "one"),
        reaches(ph, ANY, "/", V2).header("version", "two"),
        reaches(ph, ANY, "/", V1)
            .header("version", "two")
            .header("color", "orange"),
        reaches(ph, ANY, "/", V2)
            .header("version", "two")
            .header("color", "blue"),
        answers(ph, ANY, "/", 404).header("color", "orange"),
        answers(ph, ANY, "/", 404).header("some-other-header", "one"),
        reaches(ph, ANY, "/", V1).header("color", "blue"),
        reaches(ph, ANY, "/", V1).header("color", "green"),
        reaches(ph, ANY, "/", V2).header("color", "red"),
        reaches(ph, ANY, "/", V2).header("color", "yellow"),
        answers(ph, ANY, "/", 404).header("color", "purple"),
    ];
    run(&infra, "HTTPRouteHeaderMatching", &headers, &mut bad).await;

    let exact = [
        reaches(pe, ANY, "/one", V1),
        reaches(pe, ANY, "/two", V2),
        answers(pe, ANY, "/", 404),
        answers(pe, ANY, "/one/example", 404),
        answers(pe, ANY, "/two/", 404),
        answers(pe, ANY, "/Two", 404),
    ];
    run(&infra, "HTTPRouteExactPathMatching", &exact, &mut bad).await;

    let order = [
        reaches(po, ANY, "/match/exact/one", V3),
        reaches(po, ANY, "/match/exact", V2),
        reaches(po, ANY, "/match", V1),
        reaches(po, ANY, "/match/prefix/one/any", V2),
        reaches(po, ANY, "/match/prefix/any", V1),
        reaches(po, ANY, "/match/any", V3),
    ];
    run(&infra, "HTTPRoutePathMatchOrder", &order, &mut bad).await;

    let query = [
        reaches(pq, ANY, "/?animal=whale", V1),
        reaches(pq, ANY, "/?animal=dolphin", V2),
        reaches(pq, ANY, "/?animal=dolphin&color=blue", V3),
        reaches(pq, ANY, "/?ANIMAL=Whale", V3),
        reaches(pq, ANY, "/?animal=whale&otherparam=irrelevant", V1),
        reaches(pq, ANY, "/?animal=dolphin&color=yellow", V2),
        answers(pq, ANY, "/?color=blue", 404),
        answers(pq, ANY, "/?animal=dog", 404),
        answers(pq, ANY, "/?animal=whaledolphin", 404),
        answers(pq, ANY, "/", 404),
        // With the other core matches.
        reaches(pq, ANY, "/path1?animal=whale", V1),
        reaches(pq, ANY, "/?animal=whale", V2).header("version", "one"),
        reaches(pq, ANY, "/path2?animal=whale", V3).header("version", "two"),
        // Matches ORed: either one is enough.
        reaches(pq, ANY, "/path3?animal=shark", V1),
        reaches(pq, ANY, "/path4?animal=kraken", V1).header("version", "three"),
        // Match types ANDed: a part is not enough.
        answers(pq, ANY, "/?animal=shark", 404),
        answers(pq, ANY, "/path4?animal=kraken", 404),
        // Precedence: the path first, then headers before query parameters.
        reaches(pq, ANY, "/path5?animal=hydra", V1),
        reaches(pq, ANY, "/?animal=hydra", V3).header("version", "four"),
    ];
    run(&infra, "HTTPRouteQueryParamMatching", &query, &mut bad).await;

    let method = [
        reaches(pmeth, ANY, "/", V1).method("POST"),
        reaches(pmeth, ANY, "/", V2).method("GET"),
        answers(pmeth, ANY, "/", 404).method("HEAD"),
        // With the other core matches.
        reaches(pmeth, ANY, "/path1", V1).method("GET"),
        reaches(pmeth, ANY, "/", V2)
            .method("PUT")
            .header("version", "one"),
        reaches(pmeth, ANY, "/path2", V3)
            .method("POST")
            .header("version", "two"),
        // Matches ORed: either one is enough.
        reaches(pmeth, ANY, "/path3", V1).method("PATCH"),
        reaches(pmeth, ANY, "/path4", V1)
            .method("DELETE")
            .header("version", "three"),
        // Match types ANDed: a part is not enough.
        answers(pmeth, ANY, "/", 404).method("PUT"),
        answers(pmeth, ANY, "/path4", 404).method("DELETE"),
        // Precedence: the path first, then the method before headers.
        reaches(pmeth, ANY, "/path5", V1).method("PATCH"),
        reaches(pmeth, ANY, "/", V2)
            .method("PATCH")
            .header("version", "four"),
    ];
    run(&infra, "HTTPRouteMethodMatching", &method, &mut bad).await;

    // GatewayAndHTTPRoutesMustBeAccepted, HTTPRouteMustHaveResolvedRefsConditionsTrue.
    for route in [
        "matching",
        "matching-part1",
        "matching-part2",
        "header-matching",
        "exact-matching",
        "path-matching-order",
        "query-param-matching",
        "method-matching",
    ] {
        route_says(&c, &mut bad, INFRA, route, &[ACCEPTED, RESOLVED]).await;
    }
    verdict(&bad, &gw);
}

const INTERSECTION_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: specific-host-matches-listener-specific-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  # very.specific.com is listener-1's.
  hostnames: [non.matching.com, "*.nonmatchingwildcard.io", very.specific.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s1}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: specific-host-matches-listener-wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  # The three below wildcard.io are listener-2's.
  hostnames: [non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s2}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host-matches-listener-specific-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  # *.specific.com covers listener-1's very.specific.com.
  hostnames: [non.matching.com, "*.specific.com"]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s3}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host-matches-listener-wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  # listener-3's own wildcard.
  hostnames: ["*.anotherwildcard.io"]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s4}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: no-intersecting-hosts, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  hostnames: [specific.but.wrong.com, wildcard.io]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s5}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-hostname-intersection-all, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection-all, namespace: gateway-conformance-infra}]
  hostnames: [first.com, sub.first.com, second.com, sub.second.com]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
"#;

// Ports HTTPRouteHostnameIntersection (httproute-hostname-intersection.go): routes attach
// to a listener only where their hostnames meet its, and serve only the hostnames that
// meet; a route that meets none is NoMatchingListenerHostname and not counted in
// attachedRoutes. The Gateway without hostnames (upstream on port 80 too) has its own port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_hostname_intersection() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    let infra = Infra::start(&c, INFRA, &[V1, V2, V3]).await;
    let (p, pall) = (free_port(), free_port());
    c.apply(
        &[
            gateway(
                INFRA,
                "httproute-hostname-intersection",
                &[
                    ("listener-1", p, Some("very.specific.com")),
                    ("listener-2", p, Some("*.wildcard.io")),
                    ("listener-3", p, Some("*.anotherwildcard.io")),
                ],
                "Same",
            ),
            gateway(
                INFRA,
                "httproute-hostname-intersection-all",
                &[("listener-1", pall, None)],
                "Same",
            ),
            INTERSECTION_ROUTES.to_string(),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();

    let s1 = [
        reaches(p, "very.specific.com", "/s1", V1),
        // The Host's port is not part of the match.
        reaches(p, "very.specific.com:1234", "/s1", V1),
        answers(p, "non.matching.com", "/s1", 404),
        answers(p, "foo.nonmatchingwildcard.io", "/s1", 404),
        answers(p, "foo.wildcard.io", "/s1", 404),
        answers(p, "very.specific.com", "/non-matching-prefix", 404),
    ];
    run(
        &infra,
        "specific-host-matches-listener-specific-host",
        &s1,
        &mut bad,
    )
    .await;
    let s2 = [
        reaches(p, "foo.wildcard.io", "/s2", V2),
        reaches(p, "bar.wildcard.io", "/s2", V2),
        reaches(p, "foo.bar.wildcard.io", "/s2", V2),
        answers(p, "non.matching.com", "/s2", 404),
        answers(p, "wildcard.io", "/s2", 404),
        answers(p, "very.specific.com", "/s2", 404),
        answers(p, "foo.wildcard.io", "/non-matching-prefix", 404),
    ];
    run(
        &infra,
        "specific-host-matches-listener-wildcard-host",
        &s2,
        &mut bad,
    )
    .await;
    let s3 = [
        reaches(p, "very.specific.com", "/s3", V3),
        answers(p, "non.matching.com", "/s3", 404),
        answers(p, "foo.specific.com", "/s3", 404),
        answers(p, "foo.wildcard.io", "/s3", 404),
        answers(p, "very.specific.com", "/non-matching-prefix", 404),
    ];
    run(
        &infra,
        "wildcard-host-matches-listener-specific-host",
        &s3,
        &mut bad,
    )
    .await;
    let s4 = [
        reaches(p, "foo.anotherwildcard.io", "/s4", V1),
        reaches(p, "bar.anotherwildcard.io", "/s4", V1),
        reaches(p, "foo.bar.anotherwildcard.io", "/s4", V1),
        answers(p, "anotherwildcard.io", "/s4", 404),
        answers(p, "foo.wildcard.io", "/s4", 404),
        answers(p, "very.specific.com", "/s4", 404),
        answers(p, "foo.anotherwildcard.io", "/non-matching-prefix", 404),
    ];
    run(
        &infra,
        "wildcard-host-matches-listener-wildcard-host",
        &s4,
        &mut bad,
    )
    .await;
    let s5 = [
        answers(p, "specific.but.wrong.com", "/s5", 404),
        answers(p, "wildcard.io", "/s5", 404),
    ];
    run(&infra, "no-intersecting-hosts", &s5, &mut bad).await;
    let all = [
        reaches(pall, "first.com", "/", V2),
        reaches(pall, "sub.first.com", "/", V2),
        reaches(pall, "second.com", "/", V2),
        reaches(pall, "sub.second.com", "/", V2),
        // Not the route's.
        answers(pall, "third.com", "/", 404),
        answers(pall, "sub.third.com", "/", 404),
    ];
    run(
        &infra,
        "httproute-hostname-intersection-all",
        &all,
        &mut bad,
    )
    .await;

    for route in [
        "specific-host-matches-listener-specific-host",
        "specific-host-matches-listener-wildcard-host",
        "wildcard-host-matches-listener-specific-host",
        "wildcard-host-matches-listener-wildcard-host",
        "httproute-hostname-intersection-all",
    ] {
        route_says(&c, &mut bad, INFRA, route, &[ACCEPTED, RESOLVED]).await;
    }
    // HTTPRouteMustHaveParents: exactly this parent, not accepted for its hostnames.
    route_says(
        &c,
        &mut bad,
        INFRA,
        "no-intersecting-hosts",
        &[("Accepted", "False", "NoMatchingListenerHostname")],
    )
    .await;
    let s = status_of(&c, "httproute", Some(INFRA), "no-intersecting-hosts");
    let want_ref = serde_json::json!({
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": INFRA,
        "name": "httproute-hostname-intersection",
    });
    let parents = s["parents"].as_array().cloned().unwrap_or_default();
    if parents.len() != 1
        || parents[0]["parentRef"] != want_ref
        || parents[0]["controllerName"] != CONTROLLER
    {
        bad.push(format!(
            "HTTPRoute no-intersecting-hosts: want one parent {want_ref} of {CONTROLLER}, got {}",
            s["parents"]
        ));
    }
    // Only the routes accepted on a listener count in its attachedRoutes: listener-1 has
    // the routes of /s1 and /s3, listener-2 that of /s2, listener-3 that of /s4.
    attached(
        &c,
        &mut bad,
        "httproute-hostname-intersection",
        &[("listener-1", 2), ("listener-2", 1), ("listener-3", 1)],
    )
    .await;
    let g = status_of(
        &c,
        "gateway",
        Some(INFRA),
        "httproute-hostname-intersection",
    );
    let listeners: Vec<&Value> = g["listeners"].as_array().into_iter().flatten().collect();
    if listeners.len() != 3 {
        bad.push(format!(
            "Gateway httproute-hostname-intersection: want 3 listeners, got {}",
            g["listeners"]
        ));
    }
    for l in listeners {
        let name = &l["name"];
        for kind in ["Accepted", "ResolvedRefs"] {
            let got = cond(&l["conditions"], kind);
            if got.as_ref().is_none_or(|(st, _)| st != "True") {
                bad.push(format!("listener {name}: want {kind} True, got {got:?}"));
            }
        }
        let kinds = &l["supportedKinds"];
        let http_route = kinds.as_array().is_some_and(|ks| {
            ks.iter()
                .any(|k| k["kind"] == "HTTPRoute" && k["group"] == "gateway.networking.k8s.io")
        });
        if !http_route {
            bad.push(format!(
                "listener {name}: want HTTPRoute in supportedKinds, got {kinds}"
            ));
        }
    }
    verdict(&bad, &gw);
}

const LISTENER_HOSTNAME_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostname-backend-v1, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-1}
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostname-backend-v2, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-2}
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostname-backend-v3, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-3}
  - {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-4}
  rules:
  - backendRefs: [{name: infra-backend-v3, port: 8080}]
"#;

/// HTTPRouteListenerPortMatching's routes: by the parentRef's port (`one`, `two`, `three`
/// for upstream's 80, 8080 and 8090).
fn port_matching_routes(one: u16, two: u16, three: u16) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: port-backend-v1
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: httproute-listener-port-matching
    namespace: gateway-conformance-infra
    port: {one}
  rules:
  - backendRefs:
    - name: infra-backend-v1
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: port-backend-v2
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: httproute-listener-port-matching
    namespace: gateway-conformance-infra
    port: {two}
  rules:
  - backendRefs:
    - name: infra-backend-v2
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: port-backend-v3
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: httproute-listener-port-matching
    namespace: gateway-conformance-infra
    port: {three}
    sectionName: listener-4
  rules:
  - backendRefs:
    - name: infra-backend-v3
      port: 8080
"#
    )
}

// Ports HTTPRouteListenerHostnameMatching (httproute-listener-hostname-matching.go: four
// listeners of one port, each hostname its own route by sectionName) and
// HTTPRouteListenerPortMatching (httproute-listener-port-matching.go: listeners of three
// ports, routes attached by the parentRef's port). Upstream's routes backend-v1..v3 of the
// two cases are named hostname-backend-v* and port-backend-v* here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_listener_hostname_and_port_matching() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    let infra = Infra::start(&c, INFRA, &[V1, V2, V3]).await;
    let (ph, p1, p2, p3) = (free_port(), free_port(), free_port(), free_port());
    c.apply(
        &[
            gateway(
                INFRA,
                "httproute-listener-hostname-matching",
                &[
                    ("listener-1", ph, Some("bar.com")),
                    ("listener-2", ph, Some("foo.bar.com")),
                    ("listener-3", ph, Some("*.bar.com")),
                    ("listener-4", ph, Some("*.foo.com")),
                ],
                "Same",
            ),
            gateway(
                INFRA,
                "httproute-listener-port-matching",
                &[
                    ("listener-1", p1, Some("foo.com")),
                    ("listener-2", p2, Some("foo.com")),
                    ("listener-3", p2, Some("bar.com")),
                    ("listener-4", p3, Some("foo.com")),
                    ("listener-5", p3, Some("bar.com")),
                ],
                "Same",
            ),
            LISTENER_HOSTNAME_ROUTES.to_string(),
            port_matching_routes(p1, p2, p3),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();

    let hostnames = [
        reaches(ph, "bar.com", "/", V1),
        reaches(ph, "foo.bar.com", "/", V2),
        reaches(ph, "baz.bar.com", "/", V3),
        reaches(ph, "boo.bar.com", "/", V3),
        reaches(ph, "multiple.prefixes.bar.com", "/", V3),
        reaches(ph, "multiple.prefixes.foo.com", "/", V3),
        answers(ph, "foo.com", "/", 404),
        answers(ph, "no.matching.host", "/", 404),
    ];
    run(
        &infra,
        "HTTPRouteListenerHostnameMatching",
        &hostnames,
        &mut bad,
    )
    .await;

    let ports = [
        reaches(p1, "foo.com", "/", V1),
        reaches(p2, &format!("foo.com:{p2}"), "/", V2),
        reaches(p2, &format!("bar.com:{p2}"), "/", V2),
        reaches(p3, &format!("foo.com:{p3}"), "/", V3),
        // port-backend-v3 takes listener-4 only.
        answers(p3, &format!("bar.com:{p3}"), "/", 404),
    ];
    run(&infra, "HTTPRouteListenerPortMatching", &ports, &mut bad).await;

    for route in [
        "hostname-backend-v1",
        "hostname-backend-v2",
        "hostname-backend-v3",
        "port-backend-v1",
        "port-backend-v2",
        "port-backend-v3",
    ] {
        route_says(&c, &mut bad, INFRA, route, &[ACCEPTED, RESOLVED]).await;
    }
    verdict(&bad, &gw);
}

const ISOLATION_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-empty-hostname, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation, namespace: gateway-conformance-infra, sectionName: empty-hostname}
  rules:
  - matches: [{path: {type: PathPrefix, value: /empty-hostname}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-wildcard-example-com, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation, namespace: gateway-conformance-infra, sectionName: wildcard-example-com}
  rules:
  - matches: [{path: {type: PathPrefix, value: /wildcard-example-com}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-wildcard-foo-example-com, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation, namespace: gateway-conformance-infra, sectionName: wildcard-foo-example-com}
  rules:
  - matches: [{path: {type: PathPrefix, value: /wildcard-foo-example-com}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-abc-foo-example-com, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation, namespace: gateway-conformance-infra, sectionName: abc-foo-example-com}
  rules:
  - matches: [{path: {type: PathPrefix, value: /abc-foo-example-com}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-empty-hostname-with-hostname-intersection, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation-with-hostname-intersection, namespace: gateway-conformance-infra, sectionName: empty-hostname}
  # All but bar.com belong to the more specific listeners.
  hostnames: [bar.com, "*.example.com", "*.foo.example.com", abc.foo.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /empty-hostname}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-wildcard-example-com-with-hostname-intersection, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation-with-hostname-intersection, namespace: gateway-conformance-infra, sectionName: wildcard-example-com}
  # bar.com is not the listener's; the names below foo.example.com belong to the more
  # specific listeners.
  hostnames: [bar.com, "*.example.com", "*.foo.example.com", abc.foo.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /wildcard-example-com}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-wildcard-foo-example-com-with-hostname-intersection, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation-with-hostname-intersection, namespace: gateway-conformance-infra, sectionName: wildcard-foo-example-com}
  # *.example.com narrows to the listener's *.foo.example.com; abc.foo.example.com belongs
  # to the more specific listener.
  hostnames: [bar.com, "*.example.com", "*.foo.example.com", abc.foo.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /wildcard-foo-example-com}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-abc-foo-example-com-with-hostname-intersection, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: http-listener-isolation-with-hostname-intersection, namespace: gateway-conformance-infra, sectionName: abc-foo-example-com}
  # Both wildcards narrow to the listener's abc.foo.example.com.
  hostnames: [bar.com, "*.example.com", "*.foo.example.com", abc.foo.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /abc-foo-example-com}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// GatewayHTTPListenerIsolation's requests on `port`: a request is served only by the
/// routes of the most specific listener its host matches.
fn isolation_cases(port: u16) -> Vec<Case> {
    let p = port;
    vec![
        // The empty-hostname listener's.
        reaches(p, "bar.com", "/empty-hostname", V1),
        answers(p, "bar.com", "/wildcard-example-com", 404),
        answers(p, "bar.com", "/wildcard-foo-example-com", 404),
        answers(p, "bar.com", "/abc-foo-example-com", 404),
        // The wildcard-example-com listener's.
        answers(p, "bar.example.com", "/empty-hostname", 404),
        reaches(p, "bar.example.com", "/wildcard-example-com", V1),
        answers(p, "bar.example.com", "/wildcard-foo-example-com", 404),
        answers(p, "bar.example.com", "/abc-foo-example-com", 404),
        // The wildcard-foo-example-com listener's.
        answers(p, "bar.foo.example.com", "/empty-hostname", 404),
        answers(p, "bar.foo.example.com", "/wildcard-example-com", 404),
        reaches(p, "bar.foo.example.com", "/wildcard-foo-example-com", V1),
        answers(p, "bar.foo.example.com", "/abc-foo-example-com", 404),
        // The abc-foo-example-com listener's.
        answers(p, "abc.foo.example.com", "/empty-hostname", 404),
        answers(p, "abc.foo.example.com", "/wildcard-example-com", 404),
        answers(p, "abc.foo.example.com", "/wildcard-foo-example-com", 404),
        reaches(p, "abc.foo.example.com", "/abc-foo-example-com", V1),
    ]
}

// Ports GatewayHTTPListenerIsolation (gateway-http-listener-isolation.go, with
// gateway-http-listener-isolation.yaml and
// gateway-http-listener-isolation-with-hostname-intersection.yaml): four listeners of one
// port (none, *.example.com, *.foo.example.com, abc.foo.example.com), a route on each by
// sectionName, hostnames only on the listeners, then on the routes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_http_listener_isolation() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    let infra = Infra::start(&c, INFRA, &[V1]).await;
    let (p, pi) = (free_port(), free_port());
    let listeners = |port: u16| {
        [
            ("empty-hostname", port, None),
            ("wildcard-example-com", port, Some("*.example.com")),
            ("wildcard-foo-example-com", port, Some("*.foo.example.com")),
            ("abc-foo-example-com", port, Some("abc.foo.example.com")),
        ]
    };
    // Beyond upstream's case: a listener with no route still takes its host from the
    // wildcard listener (bare.example.com is answered 404, never by *.example.com's route).
    let mut with_unrouted = listeners(p).to_vec();
    with_unrouted.push(("no-routes", p, Some("bare.example.com")));
    c.apply(
        &[
            gateway(INFRA, "http-listener-isolation", &with_unrouted, "All"),
            gateway(
                INFRA,
                "http-listener-isolation-with-hostname-intersection",
                &listeners(pi),
                "All",
            ),
            ISOLATION_ROUTES.to_string(),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();
    run(
        &infra,
        "hostnames are configured only in listeners",
        &isolation_cases(p),
        &mut bad,
    )
    .await;
    let unrouted = [
        answers(p, "bare.example.com", "/wildcard-example-com", 404),
        answers(p, "bare.example.com", "/empty-hostname", 404),
        reaches(p, "other.example.com", "/wildcard-example-com", V1),
    ];
    run(&infra, "a listener without routes", &unrouted, &mut bad).await;
    run(
        &infra,
        "intersecting hostnames are configured in listeners and HTTPRoutes",
        &isolation_cases(pi),
        &mut bad,
    )
    .await;
    for route in [
        "attaches-to-empty-hostname",
        "attaches-to-wildcard-example-com",
        "attaches-to-wildcard-foo-example-com",
        "attaches-to-abc-foo-example-com",
        "attaches-to-empty-hostname-with-hostname-intersection",
        "attaches-to-wildcard-example-com-with-hostname-intersection",
        "attaches-to-wildcard-foo-example-com-with-hostname-intersection",
        "attaches-to-abc-foo-example-com-with-hostname-intersection",
    ] {
        route_says(&c, &mut bad, INFRA, route, &[ACCEPTED, RESOLVED]).await;
    }
    verdict(&bad, &gw);
}

const WEIGHT_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: gateway-conformance-infra-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-weight}]
  rules:
  - backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
"#;

// Ports HTTPRouteSimpleSameNamespace (httproute-simple-same-namespace.go) and
// HTTPRouteWeight (httproute-weight.go: 70/30/0 across three backends; upstream sends 500
// requests and allows 5 points, here 300 requests and 15 points).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_a_route_in_the_gateway_s_namespace_and_weights() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    let infra = Infra::start(&c, INFRA, &[V1, V2, V3]).await;
    let (ps, pw) = (free_port(), free_port());
    c.apply(
        &[
            same_namespace("same-namespace", ps),
            same_namespace("same-namespace-weight", pw),
            WEIGHT_ROUTES.to_string(),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();
    run(
        &infra,
        "HTTPRouteSimpleSameNamespace",
        &[reaches(ps, ANY, "/", V1)],
        &mut bad,
    )
    .await;

    // A request succeeds before the distribution is judged.
    let up = eventually(FIRST, || async {
        ask(&infra, pw, "GET", ANY, "/", &[]).await.0 == 200
    })
    .await;
    if up {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut others = 0usize;
        for _ in 0..WEIGHED {
            match ask(&infra, pw, "GET", ANY, "/", &[]).await {
                (200, Some(b), _) => *counts.entry(b).or_default() += 1,
                _ => others += 1,
            }
        }
        let share = |b: &str| counts.get(b).copied().unwrap_or(0) as f64 / WEIGHED as f64;
        for (b, low, high) in [(V1, 0.55, 0.85), (V2, 0.15, 0.45)] {
            let got = share(b);
            if !(low..=high).contains(&got) {
                bad.push(format!(
                    "HTTPRouteWeight: {b} took {got:.3} of {WEIGHED} requests, want {low}..{high}: {counts:?}"
                ));
            }
        }
        if counts.contains_key(V3) {
            bad.push(format!(
                "HTTPRouteWeight: {V3} (weight 0) took requests: {counts:?}"
            ));
        }
        if others != 0 {
            bad.push(format!(
                "HTTPRouteWeight: {others} of {WEIGHED} requests were not answered 200 by a backend"
            ));
        }
    } else {
        bad.push("HTTPRouteWeight: GET / never answered 200".to_string());
    }

    for route in ["gateway-conformance-infra-test", "weighted-backends"] {
        route_says(&c, &mut bad, INFRA, route, &[ACCEPTED, RESOLVED]).await;
    }
    verdict(&bad, &gw);
}

/// conformance's `backend-namespaces`: routes of the namespaces labelled
/// `gateway-conformance: backend`.
fn backend_namespaces(port: u16) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: backend-namespaces
  namespace: gateway-conformance-infra
spec:
  gatewayClassName: tollgate
  listeners:
  - name: http
    protocol: HTTP
    port: {port}
    allowedRoutes:
      namespaces:
        from: Selector
        selector:
          matchLabels:
            gateway-conformance: backend
"#
    )
}

const REFERENCE_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross-namespace, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-parent-ref, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: same-namespace-refused, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
"#;

// Ports HTTPRouteCrossNamespace (httproute-cross-namespace.go: a route of the labelled
// namespace on backend-namespaces), HTTPRouteReferenceGrant (httproute-reference-grant.go:
// a backend in another namespace with a ReferenceGrant, then 500 once it is deleted) and
// HTTPRouteInvalidCrossNamespaceParentRef (httproute-invalid-cross-namespace-parent-ref.go:
// a route of another namespace on a Gateway that takes its own only: NotAllowedByListeners,
// here on a `same-namespace` Gateway of its own so that its zero routes are its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_cross_namespace_routes_and_reference_grants() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    c.kubectl(&["create", "namespace", WEB]);
    c.kubectl(&["label", "namespace", WEB, "gateway-conformance=backend"]);
    let infra = Infra::start(&c, WEB, &[WEB_BACKEND]).await;
    let (px, pg, pr) = (free_port(), free_port(), free_port());
    c.apply(
        &[
            backend_namespaces(px),
            same_namespace("same-namespace", pg),
            same_namespace("same-namespace-refused", pr),
            REFERENCE_ROUTES.to_string(),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();
    run(
        &infra,
        "HTTPRouteCrossNamespace",
        &[reaches(px, ANY, "/", WEB_BACKEND)],
        &mut bad,
    )
    .await;
    run(
        &infra,
        "HTTPRouteReferenceGrant",
        &[reaches(pg, ANY, "/", WEB_BACKEND)],
        &mut bad,
    )
    .await;
    route_says(&c, &mut bad, WEB, "cross-namespace", &[ACCEPTED, RESOLVED]).await;
    route_says(
        &c,
        &mut bad,
        INFRA,
        "reference-grant",
        &[ACCEPTED, RESOLVED],
    )
    .await;

    // HTTPRouteInvalidCrossNamespaceParentRef.
    route_says(
        &c,
        &mut bad,
        WEB,
        "invalid-cross-namespace-parent-ref",
        &[RESOLVED, ("Accepted", "False", "NotAllowedByListeners")],
    )
    .await;
    none_accepted(&c, &mut bad, WEB, "invalid-cross-namespace-parent-ref");
    attached(&c, &mut bad, "same-namespace-refused", &[("http", 0)]).await;

    // HTTPRouteReferenceGrant: the grant deleted, the backend may no longer be used.
    c.kubectl(&["delete", "referencegrant", "reference-grant", "-n", WEB]);
    run(
        &infra,
        "HTTPRouteReferenceGrant, the grant deleted",
        &[answers(pg, ANY, "/", 500)],
        &mut bad,
    )
    .await;
    verdict(&bad, &gw);
}

/// conformance's `tlsroutes-only`: a TLS listener that takes TLSRoutes only.
fn tls_routes_only(port: u16) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: tlsroutes-only
  namespace: gateway-conformance-infra
spec:
  gatewayClassName: tollgate
  listeners:
  - name: tls
    protocol: TLS
    port: {port}
    tls:
      mode: Passthrough
    allowedRoutes:
      namespaces:
        from: Same
      kinds:
      - kind: TLSRoute
"#
    )
}

/// The routes whose parentRef names no listener: by sectionName (on `port`, the listener's
/// own), and by a port no listener has (`unused`).
fn parent_mismatch_routes(port: u16, unused: u16) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: httproute-listener-not-matching-section-name
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
    namespace: gateway-conformance-infra
    port: {port}
    sectionName: http1
  rules:
  - backendRefs:
    - name: infra-backend-v1
      kind: Service
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: httproute-listener-not-matching-route-port
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
    namespace: gateway-conformance-infra
    port: {unused}
  rules:
  - backendRefs:
    - name: infra-backend-v1
      kind: Service
      port: 8080
"#
    )
}

const UNRESOLVED_ROUTES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-nonexistent-backend-ref, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-nonexistent}]
  rules:
  - backendRefs: [{name: nonexistent, namespace: gateway-conformance-infra, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-backend-ref-unknown-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-unknown-kind}]
  rules:
  - backendRefs:
    - {group: unknownkind.example.com, kind: NonExistent, name: infra-backend-v1, port: 8080}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-bad-grants}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-backend-ref, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-no-grant}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: disallowed-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: tlsroutes-only, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// HTTPRouteInvalidReferenceGrant's grants: each wrong in one field (its namespace, the
/// from group, kind or namespace, the to group, kind or name).
const BAD_GRANTS: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-namespace, namespace: gateway-conformance-infra}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-from-group, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: not-the-group-youre-looking-for, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-from-kind, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-from-namespace, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: not-the-namespace-youre-looking-for}]
  to: [{group: "", kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-to-group, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: not-the-group-youre-looking-for, kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-to-kind, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Secret, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-to-name, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Secret, name: not-the-service-youre-looking-for}]
"#;

// Ports HTTPRouteInvalidNonExistentBackendRef (httproute-invalid-nonexistent-backendref.go),
// HTTPRouteInvalidBackendRefUnknownKind (httproute-invalid-backendref-unknown-kind.go),
// HTTPRouteInvalidReferenceGrant (httproute-invalid-reference-grant.go),
// HTTPRouteInvalidCrossNamespaceBackendRef
// (httproute-invalid-cross-namespace-backend-ref.go: here beside the wrong grants, none of
// which allows it), HTTPRouteInvalidParentRefNotMatchingSectionName
// (httproute-invalid-parentref-not-matching-section-name.go),
// HTTPRouteInvalidParentRefNotMatchingListenerPort
// (httproute-invalid-parentref-not-matching-listener-port.go) and HTTPRouteDisallowedKind
// (httproute-disallowed-kind.go: its TLS listener is not served by Tollgate, the case is
// about the HTTPRoute it refuses). No grant here allows a route of INFRA to web-backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_unresolved_backends_and_parents() {
    let c = Cluster::start().await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    c.apply(&class());
    c.kubectl(&["create", "namespace", INFRA]);
    c.kubectl(&["create", "namespace", WEB]);
    let mut infra = Infra::start(&c, INFRA, &[V1]).await;
    let web = Infra::start(&c, WEB, &[WEB_BACKEND]).await;
    infra.backends.extend(web.backends);
    let (p_missing, p_kind, p_grants, p_none) =
        (free_port(), free_port(), free_port(), free_port());
    let (p_parent, p_tls, p_unused) = (free_port(), free_port(), free_port());
    c.apply(
        &[
            same_namespace("same-namespace-nonexistent", p_missing),
            same_namespace("same-namespace-unknown-kind", p_kind),
            same_namespace("same-namespace-bad-grants", p_grants),
            same_namespace("same-namespace-no-grant", p_none),
            same_namespace("same-namespace", p_parent),
            tls_routes_only(p_tls),
            UNRESOLVED_ROUTES.to_string(),
            BAD_GRANTS.to_string(),
            parent_mismatch_routes(p_parent, p_unused),
        ]
        .join("---\n"),
    );
    let mut bad = Vec::new();

    // A backend that cannot be used is a 500, the route Accepted and its refs not resolved.
    run(
        &infra,
        "HTTPRouteInvalidNonExistentBackendRef",
        &[answers(p_missing, ANY, "/", 500)],
        &mut bad,
    )
    .await;
    run(
        &infra,
        "HTTPRouteInvalidBackendRefUnknownKind",
        &[answers(p_kind, ANY, "/v2", 500)],
        &mut bad,
    )
    .await;
    run(
        &infra,
        "HTTPRouteInvalidReferenceGrant",
        &[answers(p_grants, ANY, "/", 500)],
        &mut bad,
    )
    .await;
    run(
        &infra,
        "HTTPRouteInvalidCrossNamespaceBackendRef",
        &[answers(p_none, ANY, "/", 500)],
        &mut bad,
    )
    .await;
    for (route, reason) in [
        ("invalid-nonexistent-backend-ref", "BackendNotFound"),
        ("invalid-backend-ref-unknown-kind", "InvalidKind"),
        ("reference-grant", "RefNotPermitted"),
        ("invalid-cross-namespace-backend-ref", "RefNotPermitted"),
    ] {
        route_says(
            &c,
            &mut bad,
            INFRA,
            route,
            &[ACCEPTED, ("ResolvedRefs", "False", reason)],
        )
        .await;
    }

    // parentRefs that name no listener: not Accepted, nothing attached.
    route_says(
        &c,
        &mut bad,
        INFRA,
        "httproute-listener-not-matching-section-name",
        &[("Accepted", "False", "NoMatchingParent")],
    )
    .await;
    none_accepted(
        &c,
        &mut bad,
        INFRA,
        "httproute-listener-not-matching-section-name",
    );
    route_says(
        &c,
        &mut bad,
        INFRA,
        "httproute-listener-not-matching-route-port",
        &[RESOLVED, ("Accepted", "False", "NoMatchingParent")],
    )
    .await;
    none_accepted(
        &c,
        &mut bad,
        INFRA,
        "httproute-listener-not-matching-route-port",
    );
    attached(&c, &mut bad, "same-namespace", &[("http", 0)]).await;

    // HTTPRouteDisallowedKind.
    route_says(
        &c,
        &mut bad,
        INFRA,
        "disallowed-kind",
        &[RESOLVED, ("Accepted", "False", "NotAllowedByListeners")],
    )
    .await;
    none_accepted(&c, &mut bad, INFRA, "disallowed-kind");
    attached(&c, &mut bad, "tlsroutes-only", &[("tls", 0)]).await;
    verdict(&bad, &gw);
}
