//! HTTPRouteCORS of the Gateway API conformance suite (kubernetes-sigs/gateway-api v1.6.1,
//! `conformance/tests/httproute-cors`): its four routes and sixteen cases, one Gateway.
//! Beyond upstream's: origins that only look allowed, two `Origin` fields, a malformed
//! `Access-Control-Request-Headers` under an echoed `*`, `Vary` on every answer, and no
//! preflight ever reaching the backend.

use super::*;

const NS: &str = "gateway-conformance-infra";
const GW: &str = "same-namespace";
const V1: &str = "infra-backend-v1";
const HOST: &str = "cors.example";

/// One rule of PathPrefix `prefix` to [`V1`] with the CORS filter `cors` (a YAML flow map).
fn cors_rule(prefix: &str, cors: &str) -> String {
    format!(
        "  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n    filters: [{{type: CORS, cors: {cors}}}]\n    backendRefs: [{{name: {V1}, port: 8080}}]\n"
    )
}

/// The four routes of upstream's manifest.
fn routes() -> String {
    [
        httproute(NS, GW,
            "cors-multiple-origins-methods-headers",
            &[cors_rule(
                "/cors-1",
                "{allowOrigins: [\"https://www.foo.com\", \"https://*.bar.com\"], allowMethods: [GET, OPTIONS], allowHeaders: [x-header-1, x-header-2], exposeHeaders: [x-header-3, x-header-4], allowCredentials: true, maxAge: 3600}",
            )],
        ),
        httproute(NS, GW,
            "cors-wildcard-methods",
            &[cors_rule(
                "/cors-2",
                "{allowOrigins: [\"https://www.foo.com\"], allowMethods: [\"*\"]}",
            )],
        ),
        httproute(NS, GW,
            "cors-wildcard-origin",
            &[cors_rule(
                "/cors-wildcard-origin",
                "{allowOrigins: [\"*\"], allowMethods: [PUT], allowCredentials: false}",
            )],
        ),
        httproute(NS, GW,
            "cors-wildcard-methods-headers",
            &[
                cors_rule(
                    "/cors-wildcard-methods-headers",
                    "{allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"], allowCredentials: true}",
                ),
                cors_rule(
                    "/cors-wildcard-methods-headers-unauth",
                    "{allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"], allowCredentials: false}",
                ),
            ],
        ),
    ]
    .join("---\n")
}

/// A field's value with its whitespace removed, as upstream's `IgnoreWhitespace`.
fn squeezed(r: &Reply, name: &str) -> Option<String> {
    r.header(name)
        .map(|v| v.chars().filter(|c| !c.is_whitespace()).collect())
}

/// Asserts `name` is one of `valid` (whitespace ignored), or absent when `valid` is empty.
fn expect(case: &str, r: &Reply, name: &str, valid: &[&str]) {
    let got = squeezed(r, name);
    if valid.is_empty() {
        assert_eq!(got, None, "{case}: {name} should be absent: {r:?}");
        return;
    }
    let ok = got
        .as_deref()
        .is_some_and(|g| valid.iter().any(|v| v.replace(' ', "") == g));
    assert!(ok, "{case}: {name} = {got:?}, not one of {valid:?}: {r:?}");
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    /// Statuses that pass.
    statuses: &'static [u16],
    /// (field, valid values; empty: must be absent).
    fields: &'static [(&'static str, &'static [&'static str])],
}

const PRE: &[u16] = &[200, 204];
const ACAO: &str = "access-control-allow-origin";
const ACAM: &str = "access-control-allow-methods";
const ACAH: &str = "access-control-allow-headers";
const ACEH: &str = "access-control-expose-headers";
const ACMA: &str = "access-control-max-age";
const ACAC: &str = "access-control-allow-credentials";
const ASK_GET: (&str, &str) = ("access-control-request-method", "GET");
const ASK_PUT: (&str, &str) = ("access-control-request-method", "PUT");
const ASK_POST: (&str, &str) = ("access-control-request-method", "POST");
const ASK_HEADERS: (&str, &str) = ("access-control-request-headers", "x-header-1, x-header-2");
const CORS1_FIELDS: [(&str, &[&str]); 5] = [
    (ACAM, &["GET, OPTIONS", "OPTIONS, GET"]),
    (ACAH, &["x-header-1, x-header-2", "x-header-2, x-header-1"]),
    (ACEH, &["x-header-3, x-header-4", "x-header-4, x-header-3"]),
    (ACMA, &["3600"]),
    (ACAC, &["true"]),
];

/// Upstream's sixteen cases, in its order.
const CASES: &[Case] = &[
    Case {
        name: "preflight from an exact matching origin",
        method: "OPTIONS",
        path: "/cors-1",
        headers: &[("origin", "https://www.foo.com"), ASK_GET, ASK_HEADERS],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://www.foo.com"]),
            CORS1_FIELDS[0],
            CORS1_FIELDS[1],
            CORS1_FIELDS[2],
            CORS1_FIELDS[3],
            CORS1_FIELDS[4],
        ],
    },
    Case {
        name: "preflight from a wildcard matching origin",
        method: "OPTIONS",
        path: "/cors-1",
        headers: &[("origin", "https://www.bar.com"), ASK_GET, ASK_HEADERS],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://www.bar.com"]),
            CORS1_FIELDS[0],
            CORS1_FIELDS[1],
            CORS1_FIELDS[2],
            CORS1_FIELDS[3],
            CORS1_FIELDS[4],
        ],
    },
    Case {
        name: "preflight from a wildcard match with periods left of '*'",
        method: "OPTIONS",
        path: "/cors-1",
        headers: &[("origin", "https://xpto.www.bar.com"), ASK_GET, ASK_HEADERS],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://xpto.www.bar.com"]),
            CORS1_FIELDS[0],
            CORS1_FIELDS[1],
            CORS1_FIELDS[2],
            CORS1_FIELDS[3],
            CORS1_FIELDS[4],
        ],
    },
    Case {
        name: "preflight from a non-matching origin",
        method: "OPTIONS",
        path: "/cors-1",
        headers: &[("origin", "https://foobar.com"), ASK_GET],
        statuses: &[200, 204, 403],
        fields: &[(ACAO, &[])],
    },
    Case {
        name: "simple request from an exact matching origin",
        method: "GET",
        path: "/cors-1",
        headers: &[("origin", "https://www.foo.com"), ASK_GET, ASK_HEADERS],
        statuses: &[200],
        fields: &[(ACAO, &["https://www.foo.com"])],
    },
    Case {
        name: "simple request from a wildcard matching origin",
        method: "GET",
        path: "/cors-1",
        headers: &[("origin", "https://www.bar.com"), ASK_GET, ASK_HEADERS],
        statuses: &[200],
        fields: &[(ACAO, &["https://www.bar.com"])],
    },
    Case {
        name: "simple request from a non-matching origin",
        method: "GET",
        path: "/cors-1",
        headers: &[("origin", "https://foobar.com"), ASK_GET],
        statuses: &[200],
        fields: &[(ACAO, &[])],
    },
    Case {
        name: "preflight with POST allowed by a wildcard allowMethods",
        method: "OPTIONS",
        path: "/cors-2",
        headers: &[("origin", "https://www.foo.com"), ASK_POST],
        statuses: PRE,
        fields: &[
            (ACAM, &["POST", "*"]),
            (ACAO, &["https://www.foo.com"]),
            (ACAC, &[]),
        ],
    },
    Case {
        name: "preflight without allowCredentials has no allow-credentials",
        method: "OPTIONS",
        path: "/cors-2",
        headers: &[("origin", "https://www.foo.com"), ASK_POST],
        statuses: PRE,
        fields: &[(ACAC, &[])],
    },
    Case {
        name: "preflight to a wildcard origin",
        method: "OPTIONS",
        path: "/cors-wildcard-origin",
        headers: &[("origin", "https://foobar.com"), ASK_PUT],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://foobar.com", "*"]),
            (ACAM, &["PUT"]),
            (ACAC, &[]),
        ],
    },
    Case {
        name: "preflight to a wildcard origin from an origin with a port",
        method: "OPTIONS",
        path: "/cors-wildcard-origin",
        headers: &[("origin", "https://foobar.com:12345"), ASK_PUT],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://foobar.com:12345", "*"]),
            (ACAM, &["PUT"]),
            (ACAC, &[]),
        ],
    },
    Case {
        name: "request to a wildcard origin from an origin with a port",
        method: "PUT",
        path: "/cors-wildcard-origin",
        headers: &[("origin", "https://foobar.com:12345")],
        statuses: &[200],
        fields: &[(ACAO, &["https://foobar.com:12345", "*"])],
    },
    Case {
        name: "simple request to a wildcard origin",
        method: "PUT",
        path: "/cors-wildcard-origin",
        headers: &[("origin", "https://foobar.com")],
        statuses: &[200],
        fields: &[(ACAO, &["https://foobar.com", "*"]), (ACAC, &[])],
    },
    Case {
        name: "preflight to wildcards with credentials echoes origin, method and headers",
        method: "OPTIONS",
        path: "/cors-wildcard-methods-headers",
        headers: &[("origin", "https://other.foo.com"), ASK_PUT, ASK_HEADERS],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://other.foo.com"]),
            (ACAM, &["PUT"]),
            (ACAH, &["x-header-1, x-header-2", "x-header-2, x-header-1"]),
            (ACAC, &["true"]),
        ],
    },
    Case {
        name: "preflight to wildcards without credentials has no allow-credentials",
        method: "OPTIONS",
        path: "/cors-wildcard-methods-headers-unauth",
        headers: &[("origin", "https://other.foo.com"), ASK_PUT, ASK_HEADERS],
        statuses: PRE,
        fields: &[
            (ACAO, &["https://other.foo.com", "*"]),
            (ACAM, &["PUT", "*"]),
            (
                ACAH,
                &["x-header-1, x-header-2", "x-header-2, x-header-1", "*"],
            ),
            (ACAC, &[]),
        ],
    },
    Case {
        name: "request to wildcards with credentials gets allow-credentials",
        method: "GET",
        path: "/cors-wildcard-methods-headers",
        headers: &[("origin", "https://other.foo.com")],
        statuses: &[200],
        fields: &[(ACAO, &["https://other.foo.com"]), (ACAC, &["true"])],
    },
    Case {
        name: "request to wildcards without credentials has no allow-credentials",
        method: "GET",
        path: "/cors-wildcard-methods-headers-unauth",
        headers: &[("origin", "https://other.foo.com")],
        statuses: &[200],
        fields: &[(ACAO, &["https://other.foo.com", "*"]), (ACAC, &[])],
    },
];

/// One request; its reply, and whether the backend saw it.
async fn call(
    infra: &Infra,
    port: u16,
    method: &str,
    path: &str,
    h: &[(&str, &str)],
) -> (Reply, bool) {
    let (status, took, reply) = ask(infra, port, method, HOST, path, h).await;
    let reply = reply.unwrap_or_else(|| panic!("{method} {path}: no answer ({status})"));
    (reply, took.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_cors_answers_preflights_and_names_allowed_origins() {
    let c = Cluster::start().await;
    c.kubectl(&["create", "namespace", NS]);
    let infra = Infra::start(&c, NS, &[V1]).await;
    let (_base, _admin, gw) = start_gateway(&c).await;
    let port = apply_same_namespace(&c, NS, GW, &[routes()]);
    // Every route served (the last applied is the unauth rule).
    assert_served(
        &infra,
        port,
        HOST,
        &[
            "/cors-1",
            "/cors-2",
            "/cors-wildcard-origin",
            "/cors-wildcard-methods-headers-unauth",
        ],
        V1,
        &gw,
    )
    .await;
    for (i, case) in CASES.iter().enumerate() {
        let (r, proxied) = call(&infra, port, case.method, case.path, case.headers).await;
        let what = format!("case {i} ({})", case.name);
        assert!(
            case.statuses.contains(&r.status),
            "{what}: {}\n{}",
            r.status,
            gw.log_text()
        );
        for (name, valid) in case.fields {
            expect(&what, &r, name, valid);
        }
        // A preflight is answered at the edge; an actual request reaches the backend. Both
        // tell caches the answer depends on the origin.
        assert_eq!(proxied, case.method != "OPTIONS", "{what}");
        assert!(
            r.header("vary").is_some_and(|v| v.contains("Origin")),
            "{what}: {r:?}"
        );
    }
    for route in [
        "cors-multiple-origins-methods-headers",
        "cors-wildcard-methods",
        "cors-wildcard-origin",
        "cors-wildcard-methods-headers",
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
    // Hostile: origins that only look allowed get no CORS field, preflight or not.
    for origin in [
        "https://bar.com",
        "https://evilbar.com",
        "https://www.bar.com.evil.net",
        "http://www.bar.com",
        "https://www.foo.com.evil.net",
        "https://www.foo.com/",
        "null",
        "",
    ] {
        for method in ["OPTIONS", "GET"] {
            let (r, _) = call(
                &infra,
                port,
                method,
                "/cors-1",
                &[("origin", origin), ASK_GET],
            )
            .await;
            expect(&format!("{method} from {origin:?}"), &r, ACAO, &[]);
            expect(&format!("{method} from {origin:?}"), &r, ACAC, &[]);
        }
    }
    // Two Origin fields: none is named, even under an echoed "*".
    let two = [
        ("origin", "https://www.foo.com"),
        ("origin", "https://evil.net"),
        ASK_GET,
    ];
    for path in ["/cors-1", "/cors-wildcard-methods-headers"] {
        let (r, _) = call(&infra, port, "OPTIONS", path, &two).await;
        expect(&format!("two origins to {path}"), &r, ACAO, &[]);
    }
    // An echoed "*" echoes only a list of header names, and nothing the request did not ask.
    let (r, _) = call(
        &infra,
        port,
        "OPTIONS",
        "/cors-wildcard-methods-headers",
        &[
            ("origin", "https://other.foo.com"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-a, \"x-b\""),
        ],
    )
    .await;
    expect("a malformed request-headers", &r, ACAH, &[]);
    expect("a malformed request-headers", &r, ACAM, &["PUT"]);
    let (r, _) = call(
        &infra,
        port,
        "OPTIONS",
        "/cors-wildcard-methods-headers",
        &[
            ("origin", "https://other.foo.com"),
            ("access-control-request-method", "PUT"),
        ],
    )
    .await;
    expect("no request-headers", &r, ACAH, &[]);
    expect("no request-headers", &r, ACAO, &["https://other.foo.com"]);
    // An echoed "*" echoes only an origin: not `null`, not an empty one.
    for origin in ["null", "", "https://x.example/path"] {
        let (r, _) = call(
            &infra,
            port,
            "GET",
            "/cors-wildcard-methods-headers",
            &[("origin", origin)],
        )
        .await;
        expect(&format!("echo of {origin:?}"), &r, ACAO, &[]);
        expect(&format!("echo of {origin:?}"), &r, ACAC, &[]);
    }
}
