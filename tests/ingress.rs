//! `tollgate import-ingress` end to end: the binary translates ingress-nginx's documented
//! examples (`tests/fixtures/ingress/`), and the output is served against local backends (the
//! Services' cluster DNS names replaced by their addresses) and asked what an ingress-nginx
//! user relies on: protections deny, canaries split and can be forced, regex paths and
//! rewrites reach the right upstream path, timeouts, classes, source ranges and connection
//! limits hold.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::TcpListener;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/ingress")
        .join(name)
}

/// `import-ingress FIXTURE ARGS...`: (exit status, TOML, stderr).
fn import(name: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(BIN)
        .arg("import-ingress")
        .arg(fixture(name))
        .args(args)
        .output()
        .expect("run import-ingress");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running gateway on the imported TOML: loopback listeners, and each Service (`NAME.NS`)
/// at a test backend's address. Services not given point at a closed port.
struct Served {
    port: u16,
    _gw: GatewayProc,
}

async fn serve(toml: &str, services: &[(&str, &Backend)]) -> Served {
    let (port, admin) = (free_port(), free_port());
    let mut toml = toml
        .replace("0.0.0.0:8080", &format!("127.0.0.1:{port}"))
        .replace("0.0.0.0:9901", &format!("127.0.0.1:{admin}"));
    for (svc, be) in services {
        // `svc.ns.svc.cluster.local:PORT` -> the backend, whatever the port.
        let marker = format!("\"{svc}.svc.cluster.local:");
        while let Some(at) = toml.find(&marker) {
            let end = toml[at + 1..]
                .find('"')
                .map(|e| at + 1 + e)
                .expect("a quoted target");
            toml.replace_range(at..=end, &format!("\"{}\"", be.addr));
        }
    }
    // Whatever is left would be looked up in DNS: a closed local port instead.
    let dead = format!("127.0.0.1:{}", free_port());
    while let Some(at) = toml.find(".svc.cluster.local:") {
        let start = toml[..at].rfind('"').expect("a quoted target");
        let end = toml[at..]
            .find('"')
            .map(|e| at + e)
            .expect("a quoted target");
        toml.replace_range(start..=end, &format!("\"{dead}\""));
    }
    // Secrets of spec.tls: certificates of a test CA where the output expects them.
    if toml.contains("/etc/tollgate/tls/") {
        let dir = temp_dir("ingress-tls");
        toml = toml
            .replace("/etc/tollgate/tls", &dir.display().to_string())
            .replace("0.0.0.0:8443", &format!("127.0.0.1:{}", free_port()));
        let ca = pki::Ca::new("ingress test CA").expect("a CA");
        for line in toml.lines() {
            let Some(rest) = line.split("cert = \"").nth(1) else {
                continue;
            };
            let cert = Path::new(rest.split('"').next().unwrap_or(""));
            let folder = cert.parent().expect("a Secret folder");
            std::fs::create_dir_all(folder).expect("mkdir");
            ca.issue(&pki::LeafSpec::server(&["localhost"]))
                .and_then(|leaf| leaf.write(folder, "tls"))
                .expect("a certificate");
        }
        // Basic-auth Secrets (`auth-file`): user foo, password bar.
        for line in toml.lines() {
            let Some(rest) = line.split("htpasswd = \"").nth(1) else {
                continue;
            };
            let file = Path::new(rest.split('"').next().unwrap_or(""));
            std::fs::create_dir_all(file.parent().expect("a Secret folder")).expect("mkdir");
            std::fs::write(file, "foo:$apr1$Zx9q2LmN$7I4ckbkO2cr5jrJ.9d6.41\n").expect("write");
        }
    }
    let gw = running(Path::new(BIN), &toml, port, admin).await;
    Served { port, _gw: gw }
}

impl Served {
    async fn get(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.from("127.0.0.1", host, path, headers).await
    }

    async fn from(&self, source: &str, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut h: Vec<(&str, &str)> = vec![("host", host)];
        h.extend_from_slice(headers);
        let ip: IpAddr = source.parse().expect("an address");
        request_from(ip, self.port, "GET", path, &h, "")
            .await
            .unwrap_or_else(|e| panic!("{host}{path}: {e}"))
    }
}

async fn backends<const N: usize>() -> [Backend; N] {
    let mut v = Vec::with_capacity(N);
    for _ in 0..N {
        v.push(Backend::start().await.expect("backend"));
    }
    v.try_into().unwrap_or_else(|_| panic!("{N} backends"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protections_without_an_equivalent_deny_and_allow_insecure_serves() {
    let (code, toml, stderr) = import("auth.yaml", &[]);
    assert_eq!(code, 3, "{stderr}");
    for line in [
        "default.nginx-configuration-snippet.1 (configuration-snippet)",
        "shop.shop-api.1 (server-snippet)",
        "default.waf.1 (enable-modsecurity, enable-owasp-core-rules)",
    ] {
        assert!(stderr.contains(line), "{line} in {stderr}");
    }
    let [be] = backends().await;
    let all: Vec<(&str, &Backend)> = [
        "http-svc.default",
        "oauth2-proxy.kube-system",
        "kubernetes-dashboard.kube-system",
        "web.shop",
        "api.shop",
    ]
    .iter()
    .map(|s| (*s, &be))
    .collect();
    let gw = serve(&toml, &all).await;
    let basic = ("authorization", "Basic Zm9vOmJhcg==");
    for (host, path) in [
        ("custom.configuration.com", "/"),
        ("shop.example.com", "/"),
        ("shop.example.com", "/api/items"),
        ("waf.example.com", "/"),
    ] {
        for headers in [&[][..], &[basic][..]] {
            let r = gw.get(host, path, headers).await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (403, "forbidden\n"),
                "{host}{path}"
            );
        }
    }
    assert_eq!(be.hits(), 0, "nothing protected reached a backend");
    // The sign-in of the OAuth example and the public Ingress stay served.
    assert_eq!(
        gw.get("dashboard.example.com", "/oauth2/start", &[])
            .await
            .status,
        200
    );
    assert_eq!(gw.get("public.example.com", "/", &[]).await.status, 200);
    assert_eq!(be.hits(), 2);

    let (code, toml, stderr) = import("auth.yaml", &["--allow-insecure"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--allow-insecure: 5 route(s) served without"),
        "{stderr}"
    );
    let gw = serve(&toml, &all).await;
    assert_eq!(
        gw.get("custom.configuration.com", "/", &[]).await.status,
        200
    );
}

/// ingress-nginx's own auth examples: exit 0, and each route behind its auth as ingress-nginx
/// serves it (basic auth from the mounted Secret; the oauth2-proxy pair with the auth service
/// standing in for oauth2-proxy's `/oauth2/auth`; httpbin.org, out of reach here, fails closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_auth_examples_import_cleanly_and_serve_behind_their_auth() {
    let (code, toml, stderr) = import("auth-docs.yaml", &[]);
    assert_eq!(code, 0, "{stderr}\n{toml}");
    assert!(toml.contains("auth = { basic = { htpasswd = \"/etc/tollgate/tls/default/basic-auth/auth\", realm = \"Authentication Required - foo\" } }"), "{toml}");
    // oauth2-proxy's auth endpoint: 202 with the user for the session cookie, else 401.
    let oauth = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let oauth_addr = oauth.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = oauth.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let session = req
                            .headers()
                            .get("cookie")
                            .and_then(|v| v.to_str().ok())
                            .is_some_and(|c| c.contains("_oauth2_proxy=ok"));
                        let mut resp =
                            hyper::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
                        if session {
                            *resp.status_mut() = hyper::StatusCode::ACCEPTED;
                            resp.headers_mut()
                                .insert("x-auth-request-user", "alice".parse().expect("v"));
                        } else {
                            *resp.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                        }
                        Ok::<_, std::io::Error>(resp)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let toml = toml.replace(
        "https://dashboard.example.com/oauth2/auth",
        &format!("http://{oauth_addr}/oauth2/auth"),
    );
    let [be] = backends().await;
    let all: Vec<(&str, &Backend)> = [
        "http-svc.default",
        "oauth2-proxy.kube-system",
        "kubernetes-dashboard.kube-system",
    ]
    .iter()
    .map(|s| (*s, &be))
    .collect();
    let gw = serve(&toml, &all).await;
    // Basic: foo/bar from the Secret; the credentials never reach the Service.
    let r = gw.get("foo.bar.com", "/", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"Authentication Required - foo\", charset=\"UTF-8\"")
    );
    assert_eq!(
        gw.get(
            "foo.bar.com",
            "/",
            &[("authorization", "Basic Zm9vOmJheg==")]
        )
        .await
        .status,
        401
    );
    let r = gw
        .get(
            "foo.bar.com",
            "/",
            &[("authorization", "Basic Zm9vOmJhcg==")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["headers"]["authorization"].is_null());
    // The OAuth pair: no session -> the sign-in page with rd= the original URL; a session ->
    // the dashboard; the sign-in itself stays public.
    let r = gw
        .get("dashboard.example.com", "/ns/default?x=1", &[])
        .await;
    assert_eq!(r.status, 302, "{}", r.body);
    assert_eq!(
        r.header("location"),
        Some("https://dashboard.example.com/oauth2/start?rd=http%3A%2F%2Fdashboard.example.com%2Fns%2Fdefault%3Fx%3D1")
    );
    let r = gw
        .get(
            "dashboard.example.com",
            "/",
            &[("cookie", "_oauth2_proxy=ok")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        gw.get("dashboard.example.com", "/oauth2/start", &[])
            .await
            .status,
        200
    );
    // httpbin.org cannot be reached from here: nothing passes.
    let hits = be.hits();
    let r = gw
        .get(
            "external-auth-01.sample.com",
            "/",
            &[("authorization", "Basic dXNlcjpwYXNzd2Q=")],
        )
        .await;
    assert!(matches!(r.status, 503 | 500), "{} {}", r.status, r.body);
    assert_eq!(be.hits(), hits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_weights_hold_and_headers_and_cookies_force() {
    let (code, toml, stderr) = import("canary.yaml", &[]);
    assert_eq!(code, 0, "{stderr}");
    let [prod, canary, cart, cart2, api, api2] = backends().await;
    let gw = serve(
        &toml,
        &[
            ("production.default", &prod),
            ("canary.default", &canary),
            ("cart.shop", &cart),
            ("cart-v2.shop", &cart2),
            ("api.shop", &api),
            ("api-v2.shop", &api2),
        ],
    )
    .await;
    // canary-weight 20 over 2,000 requests: 400 expected, within 5 points (300..=500).
    let mut conn = Conn::open(gw.port).await.expect("connect");
    for _ in 0..2000 {
        let r = conn
            .send("GET", "/", &[("host", "echo.prod.mydomain.com")], "")
            .await
            .expect("request");
        assert_eq!(r.status, 200);
    }
    let share = canary.hits() as f64 / 2000.0;
    assert!((0.15..=0.25).contains(&share), "canary share {share}");
    assert_eq!(prod.hits() + canary.hits(), 2000);

    // By header and cookie (weight 5 of 1000 aside): header first, then cookie.
    let cases: [(&[(&str, &str)], &Backend); 5] = [
        (&[("x-canary", "always")], &cart2),
        (&[("x-canary", "never"), ("cookie", "canary=always")], &cart),
        (&[("cookie", "canary=always")], &cart2),
        (&[("cookie", "canary=never")], &cart),
        (&[("x-canary", "never")], &cart),
    ];
    for (headers, want) in cases {
        for path in ["/cart", "/cart/items"] {
            let before = want.hits();
            let r = gw.get("shop.example.com", path, headers).await;
            assert_eq!(r.status, 200);
            assert_eq!(want.hits(), before + 1, "{path} {headers:?}");
        }
    }
    // By header value: only "on" chooses the canary ("always" is just another value).
    let before = (api.hits(), api2.hits());
    gw.get("api.shop.example.com", "/v1", &[("x-canary", "on")])
        .await;
    gw.get("api.shop.example.com", "/v1", &[("x-canary", "always")])
        .await;
    gw.get("api.shop.example.com", "/v1", &[]).await;
    assert_eq!((api.hits(), api2.hits()), (before.0 + 2, before.1 + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_paths_and_rewrites_reach_the_right_upstream_path() {
    let (code, toml, stderr) = import("rewrite.yaml", &[]);
    assert_eq!(code, 0, "{stderr}");
    let [http, s1, s2, s3, pattern, literal, api, web] = backends().await;
    let gw = serve(
        &toml,
        &[
            ("http-svc.default", &http),
            ("service1.default", &s1),
            ("service2.default", &s2),
            ("service3.default", &s3),
            ("pattern.default", &pattern),
            ("literal.default", &literal),
            ("api.default", &api),
            ("web.default", &web),
        ],
    )
    .await;
    let cases: [(&str, &str, &Backend, &str); 13] = [
        // docs/examples/rewrite.
        ("rewrite.bar.com", "/something", &http, "/"),
        ("rewrite.bar.com", "/something/", &http, "/"),
        ("rewrite.bar.com", "/something/new", &http, "/new"),
        ("rewrite.bar.com", "/something/new?x=1", &http, "/new?x=1"),
        ("rewrite.bar.com", "/SOMETHING/new", &http, "/new"),
        // ingress-path-matching: longest first, case-insensitive.
        ("test.com", "/foo/bar/1", &s3, "/1"),
        ("test.com", "/foo/bar/", &s2, "/foo/bar/"),
        ("test.com", "/foo/bar", &s1, "/foo/bar"),
        ("test.com", "/Foo/Bar", &s1, "/Foo/Bar"),
        // The Warning example: the regex first.
        ("test3.com", "/foo/bar/bar", &pattern, "/foo/bar/bar"),
        ("test3.com", "/foo/bar/bar2", &pattern, "/foo/bar/bar2"),
        // $1 followed by text.
        (
            "versions.example.com",
            "/api/v2/users/7",
            &api,
            "/v2api/users/7",
        ),
        ("versions.example.com", "/home", &web, "/home"),
    ];
    for (host, path, want, upstream) in cases {
        let before = want.hits();
        let r = gw.get(host, path, &[]).await;
        assert_eq!(r.status, 200, "{host}{path}: {}", r.body);
        assert_eq!(want.hits(), before + 1, "{host}{path} went elsewhere");
        assert_eq!(upstream_path(&r), upstream, "{host}{path}");
    }
    assert_eq!(literal.hits(), 0);
    assert_eq!(gw.get("rewrite.bar.com", "/other", &[]).await.status, 404);
    // app-root.
    let r = gw.get("approot.bar.com", "/", &[]).await;
    assert_eq!((r.status, r.header("location")), (302, Some("/app1")));
    let r = gw.get("approot.bar.com", "/app1", &[]).await;
    assert_eq!((r.status, upstream_path(&r).as_str()), (200, "/app1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_source_ranges_and_connection_limits_hold() {
    let (code, toml, stderr) = import("access.yaml", &[]);
    assert_eq!(code, 3, "typo's allowlist has no address: {stderr}");
    let [tools, files, registry] = backends().await;
    let gw = serve(
        &toml,
        &[
            ("tools.ops", &tools),
            ("files.ops", &files),
            ("docker-registry.docker-registry", &registry),
        ],
    )
    .await;
    // proxy-read-timeout 1: a backend slower than that is 504, a quicker one 200.
    let r = gw.get("reports.example.com", "/slow?ms=2500", &[]).await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(
        gw.get("reports.example.com", "/slow?ms=200", &[])
            .await
            .status,
        200
    );
    // The same Service through an Ingress on the defaults (60 s), and one on 600 s.
    assert_eq!(
        gw.from("127.0.0.2", "internal.example.com", "/slow?ms=1500", &[])
            .await
            .status,
        200
    );
    assert_eq!(
        gw.get("registry.example.com", "/slow?ms=1500", &[])
            .await
            .status,
        200
    );

    // whitelist-source-range: 127.0.0.2 is in, 127.0.0.3 is not.
    let r = gw.from("127.0.0.3", "internal.example.com", "/", &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error_code"], "ACCESS_DENIED");
    // Inside, the limits still apply (limit-rps 2 x 1: 1 + 2 at once, then 429).
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(
            gw.from("127.0.0.2", "internal.example.com", "/", &[])
                .await
                .status,
        );
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 3, "{codes:?}");
    assert_eq!(codes.last(), Some(&429), "{codes:?}");
    // A whitelist without any address: denied.
    assert_eq!(gw.get("typo.example.com", "/", &[]).await.status, 403);

    // limit-connections 2: the third request in flight from one client is refused, another
    // client is not, and a freed slot serves again.
    let port = gw.port;
    let slow = |source: &'static str| async move {
        request_from(
            source.parse().expect("an address"),
            port,
            "GET",
            "/slow?ms=1500",
            &[("host", "downloads.example.com")],
            "",
        )
        .await
        .expect("request")
        .status
    };
    let a = tokio::spawn(slow("127.0.0.1"));
    let b = tokio::spawn(slow("127.0.0.1"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(gw.get("downloads.example.com", "/", &[]).await.status, 429);
    assert_eq!(
        gw.from("127.0.0.4", "downloads.example.com", "/", &[])
            .await
            .status,
        200
    );
    assert_eq!((a.await.expect("a"), b.await.expect("b")), (200, 200));
    assert_eq!(gw.get("downloads.example.com", "/", &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_hosts_duplicate_prefixes_and_defaults_route_as_ingress_nginx() {
    // Classes: only nginx (and the classless) are served.
    let (code, toml, stderr) = import("classes.yaml", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("skipped 3 Ingress(es) of other classes"),
        "{stderr}"
    );
    let [web, other] = backends().await;
    let gw = serve(&toml, &[("web.default", &web), ("other.default", &other)]).await;
    for host in [
        "nginx.example.com",
        "legacy.example.com",
        "classless.example.com",
    ] {
        assert_eq!(gw.get(host, "/", &[]).await.status, 200, "{host}");
    }
    for host in [
        "traefik.example.com",
        "haproxy.example.com",
        "internal.example.com",
    ] {
        assert_eq!(gw.get(host, "/", &[]).await.status, 404, "{host}");
    }
    assert_eq!(other.hits(), 0);
    let (code, toml, _) = import("classes.yaml", &["--ingress-class", "traefik"]);
    assert_eq!(code, 0);
    let gw = serve(&toml, &[("web.default", &web), ("other.default", &other)]).await;
    assert_eq!(gw.get("traefik.example.com", "/", &[]).await.status, 200);
    assert_eq!(gw.get("nginx.example.com", "/", &[]).await.status, 404);

    // Placeholder hosts skip their rule, a wildcard serves one label, and Prefix /foo/bar with
    // /foo/bar/ is one match set.
    let (code, toml, stderr) = import("hosts.yaml", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr.matches("/foo/bar and /foo/bar/").count(),
        1,
        "{stderr}"
    );
    let [registry, tenants, s1, s2] = backends().await;
    let gw = serve(
        &toml,
        &[
            ("docker-registry.docker-registry", &registry),
            ("tenants.default", &tenants),
            ("service1.default", &s1),
            ("service2.default", &s2),
        ],
    )
    .await;
    let cases: [(&str, &str, &Backend); 8] = [
        ("registry.example.com", "/v2/", &registry),
        ("a.foo.com", "/x", &tenants),
        ("slashes.example.com", "/foo/bar", &s1),
        ("slashes.example.com", "/foo/bar/", &s2),
        ("slashes.example.com", "/foo/bar/x", &s2),
        ("slashes.example.com", "/same", &s1),
        ("slashes.example.com", "/same/", &s1),
        ("slashes.example.com", "/same/x", &s1),
    ];
    for (host, path, want) in cases {
        let before = want.hits();
        assert_eq!(gw.get(host, path, &[]).await.status, 200, "{host}{path}");
        assert_eq!(want.hits(), before + 1, "{host}{path}");
    }
    assert_eq!(gw.get("a.b.foo.com", "/x", &[]).await.status, 404);
    assert_eq!(
        gw.get("slashes.example.com", "/foo/barx", &[]).await.status,
        404
    );

    // A host's defaultBackend answers its unmatched paths; a rule-less one is the catch-all.
    let (code, toml, stderr) = import("default-backend.yaml", &[]);
    assert_eq!(code, 0, "{stderr}");
    let [api, shop404, landing, blog] = backends().await;
    let gw = serve(
        &toml,
        &[
            ("api.shop", &api),
            ("shop-404.shop", &shop404),
            ("landing.web", &landing),
            ("blog.web", &blog),
        ],
    )
    .await;
    let cases: [(&str, &str, &Backend); 4] = [
        ("shop.example.com", "/api/x", &api),
        ("shop.example.com", "/other", &shop404),
        ("unknown.example.com", "/", &landing),
        ("blog.example.com", "/post", &blog),
    ];
    for (host, path, want) in cases {
        let before = want.hits();
        assert_eq!(gw.get(host, path, &[]).await.status, 200, "{host}{path}");
        assert_eq!(want.hits(), before + 1, "{host}{path}");
    }
}

/// The edge annotations of ingress-nginx's documentation import with exit 0 and behave as
/// documented: CORS preflights answered at the edge, the body cap, the www redirect, the
/// upstream's Host, aliases, X-Forwarded-Prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_edge_annotations_import_cleanly_and_behave() {
    let (code, toml, stderr) = import("edge-docs.yaml", &[]);
    assert_eq!(code, 0, "{stderr}\n{toml}");
    assert!(stderr.contains("headless"), "{stderr}");
    let [web, shop] = backends().await;
    let s = serve(
        &toml,
        &[("http-svc.default", &web), ("shop-svc.default", &shop)],
    )
    .await;
    // CORS: a preflight from an allowed origin is answered here; the upstream never sees it.
    let before = web.hits();
    let pre = request_from(
        "127.0.0.1".parse().expect("ip"),
        s.port,
        "OPTIONS",
        "/orders",
        &[
            ("host", "api.example.com"),
            ("origin", "https://origin-site.com:4443"),
            ("access-control-request-method", "PUT"),
        ],
        "",
    )
    .await
    .expect("preflight");
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.header("access-control-allow-origin"),
        Some("https://origin-site.com:4443")
    );
    assert_eq!(pre.header("access-control-max-age"), Some("600"));
    assert_eq!(web.hits(), before, "never proxied");
    let other = s
        .get(
            "api.example.com",
            "/",
            &[("origin", "https://origin-site.com.evil.net")],
        )
        .await;
    assert_eq!(other.status, 200);
    assert!(other.header("access-control-allow-origin").is_none());
    // proxy-body-size 8m: a declared 9 MB body is 413 before a byte goes upstream.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    use std::io::{Read, Write};
    c.write_all(b"POST /up HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 9000000\r\n\r\n")
        .expect("head");
    c.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut answer = vec![0u8; 512];
    let n = c.read(&mut answer).expect("answer");
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&answer[..n])
    );
    assert_eq!(web.hits(), before + 1, "only the allowed GET above");
    // from-to-www-redirect: the bare name answers 308 to www, path and query kept.
    let r = s.get("example.com", "/a/b?x=1", &[]).await;
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("http://www.example.com/a/b?x=1"));
    // upstream-vhost: the upstream is sent that Host.
    let r = s.get("www.example.com", "/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["headers"]["host"], "internal.example.com");
    // server-alias: both aliases reach the shop; x-forwarded-prefix is sent, a client's
    // own copy replaced.
    for host in ["shop.example.com", "shop.example.net", "store.example.com"] {
        let before = shop.hits();
        let r = s
            .get(
                host,
                "/cart",
                &[("x-forwarded-prefix", "/evil"), ("x-user", "u1")],
            )
            .await;
        assert_eq!(r.status, 200, "{host}");
        assert_eq!(shop.hits(), before + 1, "{host}");
        assert_eq!(r.json()["headers"]["x-forwarded-prefix"], "/shop");
    }
}
