//! The filter cases of the Gateway API conformance suite (kubernetes-sigs/gateway-api v1.6.1,
//! `conformance/tests/`), Core and Extended, ported to the stand-in with real traffic:
//! RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect (hostname, status, path,
//! port, scheme, port with scheme on HTTP listeners, 303 / 307 / 308), URLRewrite (hostname
//! and path), RequestMirror, and a backend of `appProtocol: kubernetes.io/h2c`.
//!
//! The manifests say what upstream's do (the same paths, hosts, filters and expectations),
//! written here again. Each group shares one cluster and one gateway process; its objects are
//! applied at once, and each case is retried until it holds (at most [`SETTLE`]), as
//! upstream's `MakeRequestAndExpectEventuallyConsistentResponse` does. Listener ports are free
//! ports, never 80: a redirect that names neither port nor scheme keeps the listener's port
//! in its Location, one with a scheme takes that scheme's well-known port (left out).
//! The HTTPS listener cases (port and scheme on a 443 listener) are not ported.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_testkit::{eventually, free_port, get, get_h2, Recorder};

/// Conformance's infrastructure namespace, Gateway and backends.
const NS: &str = "gateway-conformance-infra";
const GW: &str = "same-namespace";
const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
/// The Host the requests name where upstream's name the Gateway's address.
const HOST: &str = "filters.example";
/// How long a case may take to hold (the objects are served within a batch or two).
const SETTLE: Duration = Duration::from_secs(5);

/// Header fields as (name, value); a value may be a comma-separated list.
type Fields = &'static [(&'static str, &'static str)];
/// A response head: its status and every header field (names lower-cased), in order.
type Head = (u16, Vec<(String, String)>);

// ---------------------------------------------------------------------------------------
// Manifests
// ---------------------------------------------------------------------------------------

/// One rule of an HTTPRoute: the PathPrefix it matches ("": no matches, every path), its
/// filters (each a YAML flow map) and the Service it sends to on port 8080 ("": none).
struct Rule {
    prefix: &'static str,
    filters: Vec<String>,
    backend: &'static str,
}

fn rule(prefix: &'static str, filters: Vec<String>, backend: &'static str) -> Rule {
    Rule {
        prefix,
        filters,
        backend,
    }
}

/// An HTTPRoute in [`NS`] attached to the Gateway `parent`.
fn route(name: &str, parent: &str, hostnames: &[&str], rules: &[Rule]) -> String {
    let mut y = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  parentRefs:\n  - name: {parent}\n"
    );
    if !hostnames.is_empty() {
        y.push_str(&format!("  hostnames: [{}]\n", hostnames.join(", ")));
    }
    y.push_str("  rules:\n");
    for r in rules {
        let mut keys = Vec::new();
        if !r.prefix.is_empty() {
            keys.push(format!(
                "matches: [{{path: {{type: PathPrefix, value: \"{}\"}}}}]",
                r.prefix
            ));
        }
        if !r.filters.is_empty() {
            keys.push(format!("filters: [{}]", r.filters.join(", ")));
        }
        if !r.backend.is_empty() {
            keys.push(format!(
                "backendRefs: [{{name: {}, port: 8080}}]",
                r.backend
            ));
        }
        for (i, k) in keys.iter().enumerate() {
            y.push_str(if i == 0 { "  - " } else { "    " });
            y.push_str(k);
            y.push('\n');
        }
    }
    y
}

/// A route of redirects only: (PathPrefix, the RequestRedirect's fields) per rule.
fn redirects(name: &str, parent: &str, rules: &[(&'static str, &str)]) -> String {
    let rules: Vec<Rule> = rules
        .iter()
        .map(|&(prefix, fields)| rule(prefix, vec![redirect_to(fields)], ""))
        .collect();
    route(name, parent, &[], &rules)
}

/// `[{name: N, value: V}, ...]` without its brackets.
fn pairs(list: &[(&str, &str)]) -> String {
    list.iter()
        .map(|(n, v)| format!("{{name: {n}, value: {v}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A header modifier's `set`, `add` and `remove` (the empty ones left out).
fn modifier(set: &[(&str, &str)], add: &[(&str, &str)], remove: &[&str]) -> String {
    let mut parts = Vec::new();
    if !set.is_empty() {
        parts.push(format!("set: [{}]", pairs(set)));
    }
    if !add.is_empty() {
        parts.push(format!("add: [{}]", pairs(add)));
    }
    if !remove.is_empty() {
        parts.push(format!("remove: [{}]", remove.join(", ")));
    }
    parts.join(", ")
}

fn request_modifier(body: String) -> String {
    format!("{{type: RequestHeaderModifier, requestHeaderModifier: {{{body}}}}}")
}

fn response_modifier(body: String) -> String {
    format!("{{type: ResponseHeaderModifier, responseHeaderModifier: {{{body}}}}}")
}

fn redirect_to(fields: &str) -> String {
    format!("{{type: RequestRedirect, requestRedirect: {{{fields}}}}}")
}

fn url_rewrite(fields: &str) -> String {
    format!("{{type: URLRewrite, urlRewrite: {{{fields}}}}}")
}

fn mirror_to(service: &str) -> String {
    format!(
        "{{type: RequestMirror, requestMirror: {{backendRef: {{name: {service}, namespace: {NS}, port: 8080}}}}}}"
    )
}

/// The request modifier upstream's rewrite, mirror and response cases share.
fn modify_headers() -> String {
    request_modifier(modifier(
        &[("X-Header-Set", "set-overwrites-values")],
        &[
            ("X-Header-Add", "header-val-1"),
            ("X-Header-Add-Append", "header-val-2"),
        ],
        &["X-Header-Remove"],
    ))
}

/// What a request sent through [`modify_headers`] carries upstream (it was sent
/// [`TO_MODIFY`]); `X-Header-Remove` it does not.
const MODIFIED: Fields = &[
    ("X-Header-Add", "header-val-1"),
    ("X-Header-Add-Append", "append-val-1,header-val-2"),
    ("X-Header-Set", "set-overwrites-values"),
];
const TO_MODIFY: Fields = &[
    ("X-Header-Remove", "remove-val"),
    ("X-Header-Add-Append", "append-val-1"),
];

/// The five header-modifier rules upstream's request and response routes share (`wrap`
/// makes the filter of one direction); `case_adds` is what `/case-insensitivity` adds.
fn modifier_rules(wrap: fn(String) -> String, case_adds: &[(&str, &str)]) -> Vec<Rule> {
    vec![
        rule(
            "/set",
            vec![wrap(modifier(
                &[("X-Header-Set", "set-overwrites-values")],
                &[],
                &[],
            ))],
            V1,
        ),
        rule(
            "/add",
            vec![wrap(modifier(
                &[],
                &[("X-Header-Add", "add-appends-values")],
                &[],
            ))],
            V1,
        ),
        rule(
            "/remove",
            vec![wrap(modifier(&[], &[], &["X-Header-Remove"]))],
            V1,
        ),
        rule(
            "/multiple",
            vec![wrap(modifier(
                &[
                    ("X-Header-Set-1", "header-set-1"),
                    ("X-Header-Set-2", "header-set-2"),
                ],
                &[
                    ("X-Header-Add-1", "header-add-1"),
                    ("X-Header-Add-2", "header-add-2"),
                    ("X-Header-Add-3", "header-add-3"),
                ],
                &["X-Header-Remove-1", "X-Header-Remove-2"],
            ))],
            V1,
        ),
        rule(
            "/case-insensitivity",
            vec![wrap(modifier(
                &[("X-Header-Set", "header-set")],
                case_adds,
                &["X-Header-Remove"],
            ))],
            V1,
        ),
    ]
}

/// One apply of every object of a group.
fn all(objects: &[String]) -> String {
    objects.join("---\n")
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

/// A field's values as one list: the comma-separated items of every field given.
fn list_of(values: &[&str]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Until `once` holds (at most [`SETTLE`]); else a panic with its last complaint.
async fn settles<F, Fut>(what: &str, mut once: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let t = Instant::now();
    loop {
        match once().await {
            Ok(()) => return,
            Err(e) if t.elapsed() >= SETTLE => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A request and what its upstream is to see (upstream's `ExpectedRequest`): the backend
/// that takes it, the path (with query) and Host it is sent with, the fields it carries and
/// those it lacks (a GET). Empty `want_path` is the path sent, empty `want_host` unchecked.
#[derive(Clone, Copy, Default)]
struct Upstream {
    host: &'static str,
    path: &'static str,
    send: Fields,
    backend: &'static str,
    want_path: &'static str,
    want_host: &'static str,
    present: Fields,
    absent: &'static [&'static str],
}

async fn upstream_once(infra: &Infra, port: u16, u: &Upstream) -> Result<(), String> {
    let (code, backend, reply) = ask(infra, port, "GET", u.host, u.path, u.send).await;
    let Some(reply) = reply else {
        return Err("no answer".into());
    };
    if code != 200 || backend.as_deref() != Some(u.backend) {
        return Err(format!(
            "{code} from {backend:?}, not 200 from {}: {}",
            u.backend, reply.body
        ));
    }
    let echo = reply.json();
    let want_path = if u.want_path.is_empty() {
        u.path
    } else {
        u.want_path
    };
    if echo["path"] != want_path {
        return Err(format!(
            "sent upstream as {}, not {want_path}",
            echo["path"]
        ));
    }
    let headers = &echo["headers"];
    let field = |name: &str| -> Vec<String> {
        list_of(
            headers[name.to_ascii_lowercase().as_str()]
                .as_str()
                .as_slice(),
        )
    };
    if !u.want_host.is_empty() && field("host") != list_of(&[u.want_host]) {
        return Err(format!(
            "Host upstream {:?}, not {}",
            field("host"),
            u.want_host
        ));
    }
    for &(name, want) in u.present {
        let got = field(name);
        if got != list_of(&[want]) {
            return Err(format!("{name} upstream {got:?}, not {want}: {headers}"));
        }
    }
    for &name in u.absent {
        if headers.get(name.to_ascii_lowercase().as_str()).is_some() {
            return Err(format!("{name} reached the upstream: {headers}"));
        }
    }
    Ok(())
}

async fn expect_upstream(infra: &Infra, port: u16, u: &Upstream) {
    settles(&format!("{} {} {}", u.host, u.path, u.backend), || {
        upstream_once(infra, port, u)
    })
    .await;
}

/// A request and the redirect it is answered (status and whole Location), reaching no
/// backend.
struct Redirect {
    method: &'static str,
    path: &'static str,
    status: u16,
    location: String,
}

fn get_to(path: &'static str, status: u16, location: String) -> Redirect {
    Redirect {
        method: "GET",
        path,
        status,
        location,
    }
}

async fn redirect_once(infra: &Infra, port: u16, r: &Redirect) -> Result<(), String> {
    let (code, backend, reply) = ask(infra, port, r.method, HOST, r.path, &[]).await;
    let location = reply.as_ref().and_then(|a| a.header("location"));
    if code == r.status && location == Some(r.location.as_str()) && backend.is_none() {
        Ok(())
    } else {
        Err(format!(
            "{code} to {location:?} (backend {backend:?}), not {} to {}",
            r.status, r.location
        ))
    }
}

async fn expect_redirects(infra: &Infra, port: u16, cases: &[Redirect]) {
    for r in cases {
        settles(&format!("{} {} on {port}", r.method, r.path), || {
            redirect_once(infra, port, r)
        })
        .await;
    }
}

/// Sends `request` and reads the answer up to the end of its head.
async fn read_head(port: u16, request: &str) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(request.as_bytes()).await?;
    let mut head: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(head);
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before the head ended",
            ));
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

/// A GET whose head is written by hand, and the answer's head read raw, so that repeated
/// response fields stay apart (a [`Reply`]'s map keeps one of them).
async fn raw_head(port: u16, path: &str, headers: &[(&str, &str)]) -> Result<Head, String> {
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let head = tokio::time::timeout(SETTLE, read_head(port, &req))
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let code = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("no status line: {text}"))?;
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((code, fields))
}

/// A request and the response fields it is to get (upstream's `Response` with
/// `BackendSetResponseHeaders`): the echo backend is asked to send `backend_sets` (its
/// `x-want-header`), the answer must come from [`V1`] with `present` and without `absent`.
#[derive(Clone, Copy, Default)]
struct Answer {
    path: &'static str,
    send: Fields,
    backend_sets: Fields,
    present: Fields,
    absent: &'static [&'static str],
}

async fn answer_once(infra: &Infra, port: u16, a: &Answer) -> Result<(), String> {
    let wanted: Vec<String> = a
        .backend_sets
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let mut send: Vec<(&str, &str)> = a.send.to_vec();
    send.extend(wanted.iter().map(|w| ("x-want-header", w.as_str())));
    let before = infra.hits();
    let (code, fields) = raw_head(port, a.path, &send).await?;
    let took = infra.took(&before);
    if code != 200 || took != Some(V1) {
        return Err(format!("{code} from {took:?}: {fields:?}"));
    }
    let values = |name: &str| -> Vec<String> {
        let vs: Vec<&str> = fields
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        list_of(&vs)
    };
    for &(name, want) in a.present {
        let got = values(name);
        if got != list_of(&[want]) {
            return Err(format!("{name} answered {got:?}, not {want}: {fields:?}"));
        }
    }
    for &name in a.absent {
        if fields.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
            return Err(format!("{name} answered: {fields:?}"));
        }
    }
    Ok(())
}

async fn expect_answer(infra: &Infra, port: u16, a: &Answer) {
    settles(&format!("answer to {}", a.path), || {
        answer_once(infra, port, a)
    })
    .await;
}

/// Accepted and ResolvedRefs both True on a route's first parent.
fn both_true(s: &serde_json::Value) -> bool {
    let conds = &s["parents"][0]["conditions"];
    ["Accepted", "ResolvedRefs"].iter().all(|k| {
        conds
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == *k && c["status"] == "True"))
    })
}

/// Upstream's `GatewayAndHTTPRoutesMustBeAccepted` and
/// `HTTPRouteMustHaveResolvedRefsConditionsTrue`: the route's parent is `gateway`, which
/// accepted it, its references resolved.
async fn route_accepted(c: &Cluster, name: &str, gateway: &str) {
    let s = status_until(c, "httproute", Some(NS), name, both_true).await;
    assert_eq!(s["parents"][0]["parentRef"]["name"], gateway, "{name}: {s}");
    assert_eq!(
        accepted_by_parent(&s, 0),
        ("True".into(), "Accepted".into()),
        "{name}"
    );
    assert_eq!(
        condition(&s["parents"][0]["conditions"], "ResolvedRefs"),
        ("True".into(), "ResolvedRefs".into()),
        "{name}"
    );
}

// ---------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------

// Ports HTTPRouteRequestHeaderModifier (httproute-request-header-modifier) and
// HTTPRouteResponseHeaderModifier (httproute-response-header-modifier), each route on a
// Gateway of its own (upstream runs them one after the other on one Gateway; their paths
// are the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_header_modifiers_set_add_and_remove_request_and_response_fields() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[V1]).await;
    let (_base, _admin, _gw) = start_gateway(&c).await;
    let (requests, responses) = (free_port(), free_port());
    let mut response_rules = modifier_rules(
        response_modifier,
        &[
            ("X-Header-Add", "header-add"),
            ("x-lowercase-add", "lowercase-add"),
            ("x-Mixedcase-ADD-1", "mixedcase-add-1"),
            ("X-mixeDcase-add-2", "mixedcase-add-2"),
            ("X-UPPERCASE-ADD", "uppercase-add"),
        ],
    );
    response_rules.push(rule(
        "/response-and-request-header-modifiers",
        vec![
            response_modifier(modifier(
                &[
                    ("X-Header-Set-1", "header-set-1"),
                    ("X-Header-Set-2", "header-set-2"),
                ],
                &[
                    ("X-Header-Add-1", "header-add-1"),
                    ("X-Header-Add-2", "header-add-2"),
                ],
                &["X-Header-Remove-1", "X-Header-Remove-2"],
            )),
            modify_headers(),
        ],
        V1,
    ));
    c.apply(&all(&[
        class(),
        gateway(NS, "request-headers", &[("http", requests, None)], "Same"),
        gateway(NS, "response-headers", &[("http", responses, None)], "Same"),
        route(
            "request-header-modifier",
            "request-headers",
            &[],
            &modifier_rules(request_modifier, &[("X-Header-Add", "header-add")]),
        ),
        route(
            "response-header-modifier",
            "response-headers",
            &[],
            &response_rules,
        ),
    ]));

    // The request's fields, as the upstream sees them.
    let base = Upstream {
        host: HOST,
        backend: V1,
        ..Upstream::default()
    };
    let request_cases = [
        Upstream {
            path: "/set",
            send: &[("Some-Other-Header", "val")],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ],
            ..base
        },
        Upstream {
            path: "/set",
            send: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "some-other-value"),
            ],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ],
            ..base
        },
        Upstream {
            path: "/add",
            send: &[("Some-Other-Header", "val")],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "add-appends-values"),
            ],
            ..base
        },
        Upstream {
            path: "/add",
            send: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value"),
            ],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value,add-appends-values"),
            ],
            ..base
        },
        Upstream {
            path: "/remove",
            send: &[("X-Header-Remove", "val")],
            absent: &["X-Header-Remove"],
            ..base
        },
        Upstream {
            path: "/multiple",
            send: &[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
            ],
            present: &[
                ("X-Header-Set-1", "header-set-1"),
                ("X-Header-Set-2", "header-set-2"),
                ("X-Header-Add-1", "header-add-1"),
                ("X-Header-Add-2", "add-val-2,header-add-2"),
                ("X-Header-Add-3", "header-add-3"),
                ("Another-Header", "another-header-val"),
            ],
            absent: &["X-Header-Remove-1", "X-Header-Remove-2"],
            ..base
        },
        // The filter names fields in their canonical case, the request in lower case.
        Upstream {
            path: "/case-insensitivity",
            send: &[
                ("x-header-set", "original-val-set"),
                ("x-header-add", "original-val-add"),
                ("x-header-remove", "original-val-remove"),
                ("Another-Header", "another-header-val"),
            ],
            present: &[
                ("X-Header-Set", "header-set"),
                ("X-Header-Add", "original-val-add,header-add"),
                ("Another-Header", "another-header-val"),
            ],
            absent: &["X-Header-Remove"],
            ..base
        },
    ];
    for u in &request_cases {
        expect_upstream(&infra, requests, u).await;
    }

    // The response's fields, as the client gets them.
    let answers = [
        Answer {
            path: "/set",
            backend_sets: &[("Some-Other-Header", "val")],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ],
            ..Answer::default()
        },
        Answer {
            path: "/set",
            backend_sets: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "some-other-value"),
            ],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Set", "set-overwrites-values"),
            ],
            ..Answer::default()
        },
        Answer {
            path: "/add",
            backend_sets: &[("Some-Other-Header", "val")],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "add-appends-values"),
            ],
            ..Answer::default()
        },
        Answer {
            path: "/add",
            backend_sets: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value"),
            ],
            present: &[
                ("Some-Other-Header", "val"),
                ("X-Header-Add", "some-other-value,add-appends-values"),
            ],
            ..Answer::default()
        },
        Answer {
            path: "/remove",
            backend_sets: &[("X-Header-Remove", "val")],
            absent: &["X-Header-Remove"],
            ..Answer::default()
        },
        Answer {
            path: "/multiple",
            backend_sets: &[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
                ("X-Header-Remove-1", "val"),
            ],
            present: &[
                ("X-Header-Set-1", "header-set-1"),
                ("X-Header-Set-2", "header-set-2"),
                ("X-Header-Add-1", "header-add-1"),
                ("X-Header-Add-2", "add-val-2,header-add-2"),
                ("X-Header-Add-3", "header-add-3"),
                ("Another-Header", "another-header-val"),
            ],
            absent: &["X-Header-Remove-1", "X-Header-Remove-2"],
            ..Answer::default()
        },
        Answer {
            path: "/case-insensitivity",
            backend_sets: &[
                ("x-header-set", "original-val-set"),
                ("x-header-add", "original-val-add"),
                ("x-header-remove", "original-val-remove"),
                ("Another-Header", "another-header-val"),
            ],
            present: &[
                ("X-Header-Set", "header-set"),
                ("X-Header-Add", "original-val-add,header-add"),
                ("X-Lowercase-Add", "lowercase-add"),
                ("X-Mixedcase-Add-1", "mixedcase-add-1"),
                ("X-Mixedcase-Add-2", "mixedcase-add-2"),
                ("X-Uppercase-Add", "uppercase-add"),
                ("Another-Header", "another-header-val"),
            ],
            absent: &["X-Header-Remove"],
            ..Answer::default()
        },
        Answer {
            path: "/response-and-request-header-modifiers",
            send: &[
                ("X-Header-Remove", "remove-val"),
                ("X-Header-Add-Append", "append-val-1"),
                ("X-Header-Echo", "echo"),
            ],
            backend_sets: &[
                ("X-Header-Set-2", "set-val-2"),
                ("X-Header-Add-2", "add-val-2"),
                ("X-Header-Remove-2", "remove-val-2"),
                ("Another-Header", "another-header-val"),
                ("X-Header-Remove-1", "remove-val-1"),
                ("X-Header-Echo", "echo"),
            ],
            present: &[
                ("X-Header-Set-1", "header-set-1"),
                ("X-Header-Set-2", "header-set-2"),
                ("X-Header-Add-1", "header-add-1"),
                ("X-Header-Add-2", "add-val-2,header-add-2"),
                ("Another-Header", "another-header-val"),
                ("X-Header-Echo", "echo"),
            ],
            absent: &["X-Header-Remove-1", "X-Header-Remove-2"],
        },
    ];
    for a in &answers {
        expect_answer(&infra, responses, a).await;
    }
    // The last rule modifies the request too.
    expect_upstream(
        &infra,
        responses,
        &Upstream {
            path: "/response-and-request-header-modifiers",
            send: &[
                ("X-Header-Remove", "remove-val"),
                ("X-Header-Add-Append", "append-val-1"),
                ("X-Header-Echo", "echo"),
            ],
            present: &[
                ("X-Header-Add", "header-val-1"),
                ("X-Header-Set", "set-overwrites-values"),
                ("X-Header-Add-Append", "append-val-1,header-val-2"),
                ("X-Header-Echo", "echo"),
            ],
            absent: &["X-Header-Remove"],
            ..base
        },
    )
    .await;

    route_accepted(&c, "request-header-modifier", "request-headers").await;
    route_accepted(&c, "response-header-modifier", "response-headers").await;
}

// Ports HTTPRouteRedirectHostAndStatus (httproute-redirect-host-and-status),
// HTTPRouteRedirectPath (httproute-redirect-path), HTTPRouteRedirectPort
// (httproute-redirect-port), HTTPRouteRedirectScheme (httproute-redirect-scheme),
// HTTPRoute303Redirect, HTTPRoute307Redirect, HTTPRoute308Redirect
// (httproute-303/307/308-redirect) and the HTTP listeners of HTTPRouteRedirectPortAndScheme
// (httproute-redirect-port-and-scheme: its listener "on 80" is a free port here, so a
// redirect naming neither port nor scheme keeps that port; the HTTPS listener's cases are
// not ported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_redirects_say_the_host_path_port_scheme_and_status_they_are_given() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[]).await;
    let (_base, _admin, _gw) = start_gateway(&c).await;
    const GW_8080: &str = "same-namespace-with-http-listener-on-8080";
    let (a, b) = (free_port(), free_port());
    c.apply(&all(&[
        class(),
        gateway(NS, GW, &[("http", a, None)], "Same"),
        gateway(NS, GW_8080, &[("http", b, None)], "Same"),
        redirects(
            "redirect-host-and-status",
            GW,
            &[
                ("/hostname-redirect", "hostname: example.org"),
                ("/host-and-status", "statusCode: 301, hostname: example.org"),
            ],
        ),
        redirects(
            "redirect-path",
            GW,
            &[
                (
                    "/original-prefix",
                    "path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}",
                ),
                (
                    "/full",
                    "path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}",
                ),
                (
                    "/path-and-host",
                    "hostname: example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}",
                ),
                (
                    "/path-and-status",
                    "path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}, statusCode: 301",
                ),
                (
                    "/full-path-and-host",
                    "hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}",
                ),
                (
                    "/full-path-and-status",
                    "path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}, statusCode: 301",
                ),
            ],
        ),
        redirects(
            "redirect-port",
            GW,
            &[
                ("/port", "port: 8083"),
                ("/port-and-host", "hostname: example.org, port: 8083"),
                ("/port-and-status", "port: 8083, statusCode: 301"),
                (
                    "/port-and-host-and-status",
                    "port: 8083, hostname: example.org, statusCode: 302",
                ),
            ],
        ),
        redirects(
            "redirect-scheme",
            GW,
            &[
                ("/scheme", "scheme: https"),
                ("/scheme-and-host", "hostname: example.org, scheme: https"),
                ("/scheme-and-status", "scheme: https, statusCode: 301"),
                (
                    "/scheme-and-host-and-status",
                    "scheme: https, statusCode: 302, hostname: example.org",
                ),
            ],
        ),
        redirects("303-redirect", GW, &[("/see-other", "statusCode: 303")]),
        redirects("307-redirect", GW, &[("/temporary", "statusCode: 307")]),
        redirects("308-redirect", GW, &[("/permanent", "statusCode: 308")]),
        redirects(
            "http-route-for-listener-on-port-80",
            GW,
            &[
                ("/scheme-nil-and-port-nil", "hostname: example.org"),
                ("/scheme-nil-and-port-80", "port: 80, hostname: example.org"),
                ("/scheme-nil-and-port-8080", "port: 8080, hostname: example.org"),
                ("/scheme-https-and-port-nil", "scheme: https, hostname: example.org"),
                (
                    "/scheme-https-and-port-443",
                    "scheme: https, port: 443, hostname: example.org",
                ),
                (
                    "/scheme-https-and-port-8443",
                    "scheme: https, port: 8443, hostname: example.org",
                ),
            ],
        ),
        redirects(
            "http-route-for-listener-on-port-8080",
            GW_8080,
            &[
                ("/scheme-nil-and-port-nil", "hostname: example.org"),
                ("/scheme-nil-and-port-80", "port: 80, hostname: example.org"),
                ("/scheme-https-and-port-nil", "scheme: https, hostname: example.org"),
            ],
        ),
    ]));

    let on_a = [
        // HTTPRouteRedirectHostAndStatus
        get_to(
            "/hostname-redirect",
            302,
            format!("http://example.org:{a}/hostname-redirect"),
        ),
        get_to(
            "/host-and-status",
            301,
            format!("http://example.org:{a}/host-and-status"),
        ),
        // HTTPRouteRedirectPath
        get_to(
            "/original-prefix/lemon",
            302,
            format!("http://{HOST}:{a}/replacement-prefix/lemon"),
        ),
        get_to(
            "/full/path/original",
            302,
            format!("http://{HOST}:{a}/full-path-replacement"),
        ),
        get_to(
            "/path-and-host",
            302,
            format!("http://example.org:{a}/replacement-prefix"),
        ),
        get_to(
            "/path-and-status",
            301,
            format!("http://{HOST}:{a}/replacement-prefix"),
        ),
        get_to(
            "/full-path-and-host",
            302,
            format!("http://example.org:{a}/replacement-full"),
        ),
        get_to(
            "/full-path-and-status",
            301,
            format!("http://{HOST}:{a}/replacement-full"),
        ),
        // HTTPRouteRedirectPort
        get_to("/port", 302, format!("http://{HOST}:8083/port")),
        get_to(
            "/port-and-host",
            302,
            "http://example.org:8083/port-and-host".to_string(),
        ),
        get_to(
            "/port-and-status",
            301,
            format!("http://{HOST}:8083/port-and-status"),
        ),
        get_to(
            "/port-and-host-and-status",
            302,
            "http://example.org:8083/port-and-host-and-status".to_string(),
        ),
        // HTTPRouteRedirectScheme: https's own port, left out.
        get_to("/scheme", 302, format!("https://{HOST}/scheme")),
        get_to(
            "/scheme-and-host",
            302,
            "https://example.org/scheme-and-host".to_string(),
        ),
        get_to(
            "/scheme-and-status",
            301,
            format!("https://{HOST}/scheme-and-status"),
        ),
        get_to(
            "/scheme-and-host-and-status",
            302,
            "https://example.org/scheme-and-host-and-status".to_string(),
        ),
        // HTTPRoute303Redirect (a POST), HTTPRoute307Redirect, HTTPRoute308Redirect
        Redirect {
            method: "POST",
            ..get_to("/see-other", 303, format!("http://{HOST}:{a}/see-other"))
        },
        get_to("/temporary", 307, format!("http://{HOST}:{a}/temporary")),
        get_to("/permanent", 308, format!("http://{HOST}:{a}/permanent")),
        // HTTPRouteRedirectPortAndScheme, the listener upstream has on 80
        get_to(
            "/scheme-nil-and-port-nil",
            302,
            format!("http://example.org:{a}/scheme-nil-and-port-nil"),
        ),
        get_to(
            "/scheme-nil-and-port-80",
            302,
            "http://example.org/scheme-nil-and-port-80".to_string(),
        ),
        get_to(
            "/scheme-nil-and-port-8080",
            302,
            "http://example.org:8080/scheme-nil-and-port-8080".to_string(),
        ),
        get_to(
            "/scheme-https-and-port-nil",
            302,
            "https://example.org/scheme-https-and-port-nil".to_string(),
        ),
        get_to(
            "/scheme-https-and-port-443",
            302,
            "https://example.org/scheme-https-and-port-443".to_string(),
        ),
        get_to(
            "/scheme-https-and-port-8443",
            302,
            "https://example.org:8443/scheme-https-and-port-8443".to_string(),
        ),
    ];
    expect_redirects(&infra, a, &on_a).await;
    // HTTPRouteRedirectPortAndScheme, the listener upstream has on 8080.
    let on_b = [
        get_to(
            "/scheme-nil-and-port-nil",
            302,
            format!("http://example.org:{b}/scheme-nil-and-port-nil"),
        ),
        get_to(
            "/scheme-nil-and-port-80",
            302,
            "http://example.org/scheme-nil-and-port-80".to_string(),
        ),
        get_to(
            "/scheme-https-and-port-nil",
            302,
            "https://example.org/scheme-https-and-port-nil".to_string(),
        ),
    ];
    expect_redirects(&infra, b, &on_b).await;
    // Each listener keeps its own routes: B has no /port.
    assert_eq!(
        ask(&infra, b, "GET", HOST, "/port", &[]).await.0,
        404,
        "a route of {GW} answered on {GW_8080}'s listener"
    );

    for name in [
        "redirect-host-and-status",
        "redirect-path",
        "redirect-port",
        "redirect-scheme",
        "303-redirect",
        "307-redirect",
        "308-redirect",
        "http-route-for-listener-on-port-80",
    ] {
        route_accepted(&c, name, GW).await;
    }
    route_accepted(&c, "http-route-for-listener-on-port-8080", GW_8080).await;
}

// Ports HTTPRouteHostRewrite (httproute-rewrite-host) and HTTPRoutePathRewrite
// (httproute-rewrite-path), both routes on one Gateway as upstream's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_url_rewrites_send_the_upstream_the_host_and_path_they_say() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[V1, V2]).await;
    let (_base, _admin, _gw) = start_gateway(&c).await;
    let prefix = |to: &str| format!("path: {{type: ReplacePrefixMatch, replacePrefixMatch: {to}}}");
    let full = |to: &str| format!("path: {{type: ReplaceFullPath, replaceFullPath: {to}}}");
    let port = apply_same_namespace(
        &c,
        NS,
        GW,
        &[
            route(
                "rewrite-host",
                GW,
                &["rewrite.example"],
                &[
                    rule("/one", vec![url_rewrite("hostname: one.example.org")], V1),
                    rule("", vec![url_rewrite("hostname: example.org")], V2),
                    rule(
                        "/rewrite-host-and-modify-headers",
                        vec![url_rewrite("hostname: test.example.org"), modify_headers()],
                        V2,
                    ),
                ],
            ),
            route(
                "rewrite-path",
                GW,
                &[],
                &[
                    rule("/prefix/one", vec![url_rewrite(&prefix("/one"))], V1),
                    rule("/strip-prefix", vec![url_rewrite(&prefix("/"))], V1),
                    rule("/full/one", vec![url_rewrite(&full("/one"))], V1),
                    rule(
                        "/full/rewrite-path-and-modify-headers",
                        vec![url_rewrite(&full("/test")), modify_headers()],
                        V1,
                    ),
                    rule(
                        "/prefix/rewrite-path-and-modify-headers",
                        vec![url_rewrite(&prefix("/prefix")), modify_headers()],
                        V1,
                    ),
                ],
            ),
        ],
    );

    // HTTPRouteHostRewrite
    let host = Upstream {
        host: "rewrite.example",
        ..Upstream::default()
    };
    let host_cases = [
        Upstream {
            path: "/one",
            backend: V1,
            want_host: "one.example.org",
            ..host
        },
        Upstream {
            path: "/two",
            backend: V2,
            want_host: "example.org",
            ..host
        },
        Upstream {
            path: "/rewrite-host-and-modify-headers",
            send: TO_MODIFY,
            backend: V2,
            want_host: "test.example.org",
            present: MODIFIED,
            absent: &["X-Header-Remove"],
            ..host
        },
    ];
    for u in &host_cases {
        expect_upstream(&infra, port, u).await;
    }

    // HTTPRoutePathRewrite
    let path = Upstream {
        host: HOST,
        backend: V1,
        ..Upstream::default()
    };
    let with_set: Fields = &[
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
        ("X-Header-Set", "set-val"),
    ];
    let path_cases = [
        Upstream {
            path: "/prefix/one/two",
            want_path: "/one/two",
            ..path
        },
        Upstream {
            path: "/strip-prefix/three",
            want_path: "/three",
            ..path
        },
        Upstream {
            path: "/strip-prefix",
            want_path: "/",
            ..path
        },
        Upstream {
            path: "/full/one/two",
            want_path: "/one",
            ..path
        },
        Upstream {
            path: "/full/rewrite-path-and-modify-headers/test",
            send: with_set,
            want_path: "/test",
            present: MODIFIED,
            absent: &["X-Header-Remove"],
            ..path
        },
        Upstream {
            path: "/prefix/rewrite-path-and-modify-headers/one",
            send: with_set,
            want_path: "/prefix/one",
            present: MODIFIED,
            absent: &["X-Header-Remove"],
            ..path
        },
    ];
    for u in &path_cases {
        expect_upstream(&infra, port, u).await;
    }

    route_accepted(&c, "rewrite-host", GW).await;
    route_accepted(&c, "rewrite-path", GW).await;
}

// Ports HTTPRouteRequestMirror (httproute-request-mirror): the request goes to
// infra-backend-v1 (its filters applied), and a copy to infra-backend-v2, here a recorder of
// what it is sent. Upstream tags each request with a query parameter to find its copy in
// the mirror's log; so do these.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_request_mirror_sends_a_copy_to_the_mirror_backend() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[V1]).await;
    let mirror = Recorder::start(Duration::ZERO)
        .await
        .expect("mirror backend");
    c.apply(&service_in(NS, V2, mirror.addr.port()));
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = apply_same_namespace(
        &c,
        NS,
        GW,
        &[route(
            "request-mirror",
            GW,
            &[],
            &[
                rule("/mirror", vec![mirror_to(V2)], V1),
                rule(
                    "/mirror-and-modify-headers",
                    vec![modify_headers(), mirror_to(V2)],
                    V1,
                ),
            ],
        )],
    );

    let base = Upstream {
        host: HOST,
        backend: V1,
        ..Upstream::default()
    };
    let cases = [
        Upstream {
            path: "/mirror?request=plain",
            ..base
        },
        Upstream {
            path: "/mirror-and-modify-headers?request=modified",
            send: TO_MODIFY,
            present: MODIFIED,
            absent: &["X-Header-Remove"],
            ..base
        },
    ];
    for u in &cases {
        expect_upstream(&infra, port, u).await;
        let copied = eventually(SETTLE, || async {
            mirror
                .seen()
                .iter()
                .any(|s| s.method == "GET" && s.target.ends_with(u.path))
        })
        .await;
        let seen: Vec<String> = mirror.seen().iter().map(|s| s.target.clone()).collect();
        assert!(
            copied,
            "no copy of {} reached {V2}; it was sent {seen:?}\n{}",
            u.path,
            gw.log_text()
        );
    }

    route_accepted(&c, "request-mirror", GW).await;
}

/// An h2c upstream (HTTP/2 with prior knowledge, as conformance's backend behind
/// `appProtocol: kubernetes.io/h2c`): it answers each request with the version and path it
/// was sent, and counts them.
struct H2cBackend {
    port: u16,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl H2cBackend {
    async fn start() -> H2cBackend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("h2c backend");
        let port = listener.local_addr().expect("h2c backend address").port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let counted = counted.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            counted.fetch_add(1, Ordering::SeqCst);
                            let body = format!("{:?} {}", req.version(), req.uri().path());
                            async move {
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from(body)),
                                ))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
                });
            }
        });
        H2cBackend { port, hits, task }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for H2cBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `name` in [`NS`] with one port, 8081, of `appProtocol: kubernetes.io/h2c`, its endpoint
/// the loopback `backend_port`.
fn h2c_service(name: &str, backend_port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {NS}
spec:
  ports:
  - name: h2c
    port: 8081
    appProtocol: kubernetes.io/h2c
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-h2c
  namespace: {NS}
  labels:
    kubernetes.io/service-name: {name}
addressType: IPv4
ports:
- name: h2c
  port: {backend_port}
  appProtocol: kubernetes.io/h2c
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
"#
    )
}

// Ports HTTPRouteBackendProtocolH2C (httproute-backend-protocol-h2c): a backendRef to a
// Service port of `appProtocol: kubernetes.io/h2c` is reached over h2c, by a client that
// speaks HTTP/2 with prior knowledge (and, beyond upstream's case, by one of HTTP/1.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_backend_protocol_h2c_reaches_an_h2c_backend() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let backend = H2cBackend::start().await;
    c.apply(&h2c_service(V1, backend.port));
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = apply_same_namespace(
        &c,
        NS,
        GW,
        &[
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: backend-protocol-h2c\n  namespace: {NS}\nspec:\n  parentRefs:\n  - name: {GW}\n  rules:\n  - backendRefs:\n    - name: {V1}\n      port: 8081\n"
            ),
        ],
    );

    let reached = eventually(SETTLE, || async {
        get_h2(port, "/")
            .await
            .is_ok_and(|r| r.status == 200 && r.body.starts_with("HTTP/2.0"))
    })
    .await;
    let r = get_h2(port, "/").await;
    assert!(
        reached,
        "h2c through the gateway to the h2c backend: {r:?}\n{}",
        gw.log_text()
    );
    let r = r.expect("h2c answer");
    assert_eq!((r.status, r.body.as_str()), (200, "HTTP/2.0 /"));
    assert!(
        backend.hits() >= 2,
        "{} requests reached it",
        backend.hits()
    );
    // An HTTP/1.1 client's request goes to it over h2c too.
    let r = get(port, "/", &[]).await.expect("HTTP/1.1 answer");
    assert_eq!((r.status, r.body.as_str()), (200, "HTTP/2.0 /"));

    route_accepted(&c, "backend-protocol-h2c", GW).await;
}
