//! `import-ingress`, checked on the TOML it writes: every output must pass `check_str`, every
//! protection that has no Tollgate equivalent must become a route answering 403 (and be listed
//! in `denied`, which makes the command exit 3), and what has an equivalent must mean what
//! ingress-nginx meant. Fixtures are ingress-nginx's documented examples
//! (`tests/fixtures/ingress/`), plus hostile inputs.

use std::collections::BTreeSet;
use std::time::Duration;
use tollgate_config::model::{AuthMethod, Config, PathMatch, Replace, RouteAction, RouteConfig};
use tollgate_ingress::{import, ImportError, Imported, Options, Treatment};

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ingress")
        .join(name);
    std::fs::read_to_string(p).expect("fixture")
}

fn run(yaml: &str) -> Imported {
    run_with(yaml, &Options::default())
}

fn run_with(yaml: &str, opts: &Options) -> Imported {
    match import(yaml, opts) {
        Ok(i) => i,
        Err(e) => panic!("import failed: {e}"),
    }
}

fn config(i: &Imported) -> Config {
    let toml = with_auth_secrets(&i.toml);
    match tollgate_config::check_str(&toml, "import") {
        Ok(c) => c,
        Err(e) => panic!("{e}\n{}", i.toml),
    }
}

/// The output with its basic-auth Secrets where it expects them mounted (a temporary folder
/// standing for /etc/tollgate/tls): an `auth` file, or a folder of users (`auth-map`).
fn with_auth_secrets(toml: &str) -> String {
    if !toml.contains("htpasswd = ") {
        return toml.to_string();
    }
    let dir = std::env::temp_dir().join(format!(
        "tollgate-import-secrets-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let toml = toml.replace("/etc/tollgate/tls", &dir.display().to_string());
    for line in toml.lines() {
        let Some(rest) = line.split("htpasswd = \"").nth(1) else {
            continue;
        };
        let path = std::path::Path::new(rest.split('"').next().unwrap_or(""));
        let hash = "$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00";
        if path.file_name().is_some_and(|f| f == "auth") {
            std::fs::create_dir_all(path.parent().expect("folder")).expect("mkdir");
            std::fs::write(path, format!("foo:{hash}\n")).expect("write");
        } else {
            std::fs::create_dir_all(path).expect("mkdir");
            std::fs::write(path.join("foo"), hash).expect("write");
        }
    }
    toml
}

fn route<'c>(c: &'c Config, name: &str) -> &'c RouteConfig {
    c.routes.iter().find(|r| r.name == name).unwrap_or_else(|| {
        let names: Vec<&str> = c.routes.iter().map(|r| r.name.as_str()).collect();
        panic!("no route {name} in {names:?}")
    })
}

fn upstream<'c>(c: &'c Config, name: &str) -> &'c tollgate_config::model::UpstreamConfig {
    c.upstreams
        .iter()
        .find(|u| u.name == name)
        .unwrap_or_else(|| panic!("no upstream {name}"))
}

/// Where a route sends requests: the first target as written, or "403" / "302 /app" for a
/// built-in answer.
fn target(c: &Config, r: &RouteConfig) -> String {
    match &r.action {
        RouteAction::Upstream(u) => c.upstreams[*u].targets[0].written.clone(),
        RouteAction::Respond {
            status, location, ..
        } => match location {
            Some(l) => format!("{status} {l}"),
            None => status.to_string(),
        },
    }
}

/// The routes of one host (None: without host), as (matcher, target), in file order.
fn routes_of(c: &Config, host: Option<&str>) -> Vec<(PathMatch, String)> {
    c.routes
        .iter()
        .filter(|r| r.host.as_deref() == host)
        .map(|r| (r.path.clone(), target(c, r)))
        .collect()
}

fn svc(name: &str, ns: &str, port: u16) -> String {
    format!("{name}.{ns}.svc.cluster.local:{port}")
}

/// Which route a request takes, as Tollgate's router decides (docs/routes.md): the routes of
/// the request's host if any names it (a `*.` wildcard for one label), else those without a
/// host; among them an exact path, then the longest prefix, then the first regex that matches
/// from the path's start.
fn pick<'c>(c: &'c Config, host: &str, path: &str) -> Option<&'c RouteConfig> {
    let names_host = |h: &str| {
        h == host
            || h.strip_prefix("*.").is_some_and(|parent| {
                host.split_once('.')
                    .is_some_and(|(first, rest)| !first.is_empty() && rest == parent)
            })
    };
    let exact_host: Vec<&RouteConfig> = c
        .routes
        .iter()
        .filter(|r| r.host.as_deref() == Some(host))
        .collect();
    let candidates: Vec<&RouteConfig> = if !exact_host.is_empty() {
        exact_host
    } else {
        let wild: Vec<&RouteConfig> = c
            .routes
            .iter()
            .filter(|r| r.host.as_deref().is_some_and(names_host))
            .collect();
        if wild.is_empty() {
            c.routes.iter().filter(|r| r.host.is_none()).collect()
        } else {
            wild
        }
    };
    let fold = |r: &RouteConfig, s: &str| {
        if r.case_insensitive {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    if let Some(r) = candidates
        .iter()
        .find(|r| matches!(&r.path, PathMatch::Exact(p) if *p == fold(r, path)))
    {
        return Some(r);
    }
    let prefix = candidates
        .iter()
        .filter_map(|r| match &r.path {
            PathMatch::Prefix(p) if fold(r, path).starts_with(p.as_str()) => Some((p.len(), *r)),
            _ => None,
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, r)| r);
    if prefix.is_some() {
        return prefix;
    }
    candidates.into_iter().find(|r| match &r.path {
        PathMatch::Regex(p) => regex::RegexBuilder::new(&format!("^(?:{p})"))
            .case_insensitive(r.case_insensitive)
            .build()
            .expect("a valid regex")
            .is_match(path),
        _ => false,
    })
}

/// The path the upstream gets from this route.
fn rewritten(r: &RouteConfig, path: &str) -> String {
    match r.rewrite.as_deref() {
        None => path.to_string(),
        Some(tollgate_config::model::Rewrite::Regex { regex, replace }) => regex::Regex::new(regex)
            .expect("a valid rewrite regex")
            .replace(path, replace.as_str())
            .into_owned(),
        Some(tollgate_config::model::Rewrite::StripPrefix(p)) => {
            let rest = &path[p.len()..];
            if rest.starts_with('/') {
                rest.to_string()
            } else {
                format!("/{rest}")
            }
        }
    }
}

/// Where a request goes and with which path: "target path".
fn served(c: &Config, host: &str, path: &str) -> String {
    match pick(c, host, path) {
        None => "404".into(),
        Some(r) => match &r.action {
            RouteAction::Upstream(_) => format!("{} {}", target(c, r), rewritten(r, path)),
            _ => target(c, r),
        },
    }
}

fn denied_routes(i: &Imported) -> Vec<&str> {
    i.denied.iter().map(|d| d.route.as_str()).collect()
}

/// No warning is printed twice.
fn assert_once(i: &Imported) {
    let mut seen = BTreeSet::new();
    for w in &i.warnings {
        assert!(seen.insert(w), "printed twice: {w}\n{:#?}", i.warnings);
    }
}

fn warned(i: &Imported, needle: &str) -> usize {
    i.warnings.iter().filter(|w| w.contains(needle)).count()
}

// --- Protections without an equivalent: deny ----------------------------------------------

#[test]
fn snippets_and_waf_make_their_routes_answer_403_and_name_the_annotation() {
    let i = run(&fixture("auth.yaml"));
    let c = config(&i);
    assert_once(&i);
    let denied = denied_routes(&i);
    for name in [
        "default.nginx-configuration-snippet.1",
        "shop.shop-web.1",
        // The server-snippet is the host's: the other Ingress of shop.example.com too.
        "shop.shop-api.1",
        "shop.shop-api.2",
        "default.waf.1",
    ] {
        assert!(denied.contains(&name), "{name} not in {denied:?}");
        let r = route(&c, name);
        assert!(
            matches!(
                &r.action,
                RouteAction::Respond {
                    status: 403,
                    location: None,
                    ..
                }
            ),
            "{name}: {:?}",
            r.action
        );
    }
    // Public: the sign-in of the oauth2 example, and an Ingress without protection; the
    // documented auth examples are served, behind their auth.
    for name in [
        "kube-system.oauth2-proxy.1",
        "kube-system.oauth2-proxy.2",
        "default.public.1",
        "default.ingress-with-auth.1",
        "default.external-auth.1",
        "kube-system.external-auth-oauth2.1",
    ] {
        assert!(!denied.contains(&name), "{name}");
        assert!(matches!(route(&c, name).action, RouteAction::Upstream(_)));
    }
    assert_eq!(denied.len(), 5, "{denied:?}");
    let why = |route: &str| {
        i.denied
            .iter()
            .find(|d| d.route == route)
            .map(|d| d.annotations.clone())
            .unwrap_or_default()
    };
    assert_eq!(why("shop.shop-api.1"), ["server-snippet"]);
    assert_eq!(
        why("default.waf.1"),
        ["enable-modsecurity", "enable-owasp-core-rules"]
    );
    // The comment names the annotation, and the way back.
    let text = &i.toml;
    assert!(
        text.contains("# DENIED (configuration-snippet):")
            && text.contains("# upstream = \"default.http-svc.80\""),
        "{text}"
    );
    assert!(
        text.contains("server-snippet of Ingress shop/shop-web"),
        "{text}"
    );
    assert_eq!(
        warned(&i, "proxy-body-size"),
        0,
        "translated: {:#?}",
        i.warnings
    );
    // enable-modsecurity "false" protects nothing.
    assert!(matches!(
        route(&c, "default.public.1").action,
        RouteAction::Upstream(_)
    ));
}

/// The auth examples of ingress-nginx's documentation, translated exactly.
#[test]
fn documented_auth_examples_become_the_routes_auth() {
    let i = run(&fixture("auth.yaml"));
    let c = config(&i);
    let auth = |name: &str| {
        let r = route(&c, name);
        c.auth[r.auth.unwrap_or_else(|| panic!("{name} has no auth"))].clone()
    };
    match auth("default.ingress-with-auth.1").method {
        AuthMethod::Basic(b) => {
            assert!(b.file.ends_with("default/basic-auth/auth"), "{:?}", b.file);
            assert_eq!(b.realm, "Authentication Required - foo");
        }
        other => panic!("{other:?}"),
    }
    match auth("default.external-auth.1").method {
        AuthMethod::Forward(f) => {
            assert_eq!(f.url, "https://httpbin.org/basic-auth/user/passwd");
            assert_eq!(f.signin, None);
            assert_eq!(f.cache, None, "no auth-cache-key: nothing cached, as nginx");
        }
        other => panic!("{other:?}"),
    }
    match auth("kube-system.external-auth-oauth2.1").method {
        AuthMethod::Forward(f) => {
            assert_eq!(
                f.url, "https://dashboard.example.com/oauth2/auth",
                "$host is the rule's host"
            );
            assert_eq!(
                f.signin.as_deref(),
                Some("https://dashboard.example.com/oauth2/start"),
                "rd= is Tollgate's to add"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(route(&c, "kube-system.oauth2-proxy.1").auth.is_none());
    assert!(
        warned(&i, "verifies the auth service's certificate") >= 1,
        "{:#?}",
        i.warnings
    );
}

#[test]
fn auth_annotations_that_cannot_be_kept_are_refused() {
    let ing = |anns: &str, host: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: a\n  annotations:\n{anns}\nspec:\n  ingressClassName: nginx\n  rules:\n  - {host}http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service:\n            name: s\n            port:\n              number: 80\n"
        )
    };
    let ann = |k: &str, v: &str| format!("    nginx.ingress.kubernetes.io/{k}: \"{v}\"");
    let host = "host: a.example.com\n    ";
    for (anns, hostline, refused) in [
        (ann("auth-url", "https://$host/oauth2/auth"), "", "auth-url"),
        (
            ann("auth-url", "http://auth/$request_uri"),
            host,
            "auth-url",
        ),
        (
            ann("auth-type", "digest") + "\n" + &ann("auth-secret", "s"),
            host,
            "auth-type",
        ),
        (ann("auth-type", "basic"), host, "auth-secret"),
        (
            ann("auth-type", "basic") + "\n" + &ann("auth-secret", "other/s"),
            host,
            "auth-secret",
        ),
        (
            ann("auth-url", "http://auth/") + "\n" + &ann("auth-cache-key", "$request_uri"),
            host,
            "auth-cache-key",
        ),
        (
            ann("auth-url", "http://auth/")
                + "\n"
                + &ann("auth-signin", "https://x/?next=$request_uri"),
            host,
            "auth-signin",
        ),
        (
            ann("auth-url", "http://auth/") + "\n" + &ann("auth-signin-redirect-param", "next"),
            host,
            "auth-signin-redirect-param",
        ),
        (
            ann("auth-url", "http://auth/") + "\n" + &ann("auth-snippet", "return 200;"),
            host,
            "auth-snippet",
        ),
        (
            ann("auth-url", "http://auth/") + "\n" + &ann("auth-proxy-set-headers", "ns/cm"),
            host,
            "auth-proxy-set-headers",
        ),
    ] {
        let i = run(&ing(&anns, hostline));
        let c = config(&i);
        assert_eq!(i.denied.len(), 1, "{anns}: {:?}", i.denied);
        assert!(
            i.denied[0].annotations.iter().any(|a| a == refused),
            "{anns}: {:?}",
            i.denied
        );
        assert!(
            c.routes.iter().all(|r| r.auth.is_none()
                && matches!(r.action, RouteAction::Respond { status: 403, .. })),
            "{anns}"
        );
    }
    // Kept: a cache key and duration, auth-map, the response headers.
    let anns = [
        ann(
            "auth-url",
            "http://oauth2-proxy.auth.svc.cluster.local/oauth2/auth",
        ),
        ann(
            "auth-response-headers",
            "X-Auth-Request-User, X-Auth-Request-Email",
        ),
        ann("auth-cache-key", "$remote_user$http_authorization"),
        ann("auth-cache-duration", "200 202 10m, 401 5m"),
        ann("auth-method", "POST"),
        ann("auth-request-redirect", "https://a.example.com/after"),
    ]
    .join("\n");
    let i = run(&ing(&anns, host));
    let c = config(&i);
    assert!(i.denied.is_empty(), "{:?}", i.denied);
    let AuthMethod::Forward(f) = &c.auth[c.routes[0].auth.expect("auth")].method else {
        panic!("forward")
    };
    assert_eq!(
        f.response_headers,
        ["x-auth-request-user", "x-auth-request-email"]
    );
    assert_eq!(f.cache, Some(Duration::from_secs(300)), "the shorter entry");
    assert_eq!(
        f.cache_key,
        [tollgate_config::model::KeySource::Header(
            "authorization".into()
        )]
    );
    assert_eq!(f.method.as_deref(), Some("POST"));
    assert_eq!(f.redirect.as_deref(), Some("https://a.example.com/after"));
    let i = run(&ing(
        &[
            ann("auth-type", "basic"),
            ann("auth-secret", "users"),
            ann("auth-secret-type", "auth-map"),
        ]
        .join("\n"),
        host,
    ));
    let c = config(&i);
    let AuthMethod::Basic(b) = &c.auth[c.routes[0].auth.expect("auth")].method else {
        panic!("basic")
    };
    assert!(b.file.ends_with("default/users"), "{:?}", b.file);
    assert_eq!(b.users.len(), 1);
}

#[test]
fn allow_insecure_serves_the_routes_and_says_what_was_dropped() {
    let opts = Options {
        allow_insecure: true,
        ..Options::default()
    };
    let i = run_with(&fixture("auth.yaml"), &opts);
    let c = config(&i);
    assert!(i.denied.is_empty(), "{:?}", i.denied);
    assert!(c
        .routes
        .iter()
        .all(|r| matches!(r.action, RouteAction::Upstream(_))));
    assert_eq!(i.unprotected.len(), 5, "{:?}", i.unprotected);
    assert!(
        warned(&i, "configuration-snippet") >= 1 && warned(&i, "--allow-insecure") >= 1,
        "{:#?}",
        i.warnings
    );
    assert!(
        i.toml.contains("# INSECURE (configuration-snippet):"),
        "{}",
        i.toml
    );
    assert_once(&i);
}

#[test]
fn client_certificates_of_the_documented_example_are_kept_server_wide() {
    let i = run(&fixture("client-certs.yaml"));
    let c = config(&i);
    assert!(i.denied.is_empty(), "{:?}", i.denied);
    let t = c.tls.as_ref().expect("[tls]");
    assert_eq!(
        t.client_ca.as_deref(),
        Some(std::path::Path::new(
            "/etc/tollgate/tls/default/ca-secret/ca.crt"
        ))
    );
    assert_eq!(t.client_auth, tollgate_config::model::ClientAuth::Require);
    for a in ["auth-tls-verify-depth", "auth-tls-error-page"] {
        assert_eq!(warned(&i, a), 1, "{a}: {:#?}", i.warnings);
    }
    // The upstream is told of the certificate as ingress-nginx tells it, the certificate
    // itself too (auth-tls-pass-certificate-to-upstream: "true").
    for r in &c.routes {
        assert_eq!(
            r.edge.client_cert_headers,
            tollgate_config::model::ClientCertHeaders::WithCertificate,
            "{}",
            r.name
        );
    }
    // Another TLS host without client certificates: "require" cannot be server-wide.
    let other = fixture("client-certs.yaml")
        .replace("nginx-test", "other")
        .replace("mydomain.com", "other.example.com")
        .replace("default/ca-secret", "default/other-ca");
    let i = run(&format!("{}\n---\n{other}", fixture("client-certs.yaml")));
    config(&i);
    assert_eq!(
        denied_routes(&i),
        ["default.nginx-test.1", "default.other.1"]
    );
    assert_eq!(i.denied[0].annotations, ["auth-tls-secret"]);
}

#[test]
fn unmappable_source_ranges_and_redirects_with_variables_are_denied() {
    let y = [
        ing(
            "a",
            "bad-allow",
            &[("whitelist-source-range", "office, lab")],
            &host_rule("a.example.com", "/", "a"),
        ),
        ing(
            "a",
            "bad-deny",
            &[("denylist-source-range", "nope")],
            &host_rule("b.example.com", "/", "b"),
        ),
        ing(
            "a",
            "part",
            &[("whitelist-source-range", "10.0.0.0/8, lab")],
            &host_rule("c.example.com", "/", "c"),
        ),
        ing(
            "a",
            "moved",
            &[("permanent-redirect", "https://new.example.com$request_uri")],
            &host_rule("d.example.com", "/", "d"),
        ),
        ing(
            "a",
            "static",
            &[
                ("permanent-redirect", "https://new.example.com/"),
                ("permanent-redirect-code", "308"),
            ],
            &host_rule("e.example.com", "/", "e"),
        ),
        ing(
            "a",
            "temp",
            &[
                ("temporal-redirect", "https://status.example.com/"),
                ("permanent-redirect", "https://x.example.com/"),
            ],
            &host_rule("f.example.com", "/", "f"),
        ),
        ing(
            "a",
            "global",
            &[("enable-global-auth", "true")],
            &host_rule("g.example.com", "/", "g"),
        ),
        ing(
            "a",
            "no-global",
            &[("enable-global-auth", "false")],
            &host_rule("h.example.com", "/", "h"),
        ),
        // An empty snippet (a Helm template's unset value) configures nothing.
        ing(
            "a",
            "unset",
            &[("configuration-snippet", " "), ("server-snippet", "")],
            &host_rule("u.example.com", "/", "u"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    assert!(matches!(
        route(&c, "a.unset.1").action,
        RouteAction::Upstream(_)
    ));
    assert_eq!(
        warned(&i, "is empty: nothing to translate"),
        2,
        "{:#?}",
        i.warnings
    );
    assert_eq!(
        denied_routes(&i),
        ["a.bad-allow.1", "a.bad-deny.1", "a.global.1", "a.moved.1"],
        "in the order of the Ingresses' names"
    );
    // Some addresses valid: those are kept (ingress-nginx does the same), the rest named.
    let part = route(&c, "a.part.1").access.as_ref().expect("access");
    assert_eq!(part.only_from.len(), 1);
    assert_eq!(
        warned(&i, "\"lab\" is not an address"),
        1,
        "{:#?}",
        i.warnings
    );
    assert_eq!(
        target(&c, route(&c, "a.static.1")),
        "308 https://new.example.com/"
    );
    // temporal-redirect wins, with 302 by default.
    assert_eq!(
        target(&c, route(&c, "a.temp.1")),
        "302 https://status.example.com/"
    );
    assert!(matches!(
        route(&c, "a.no-global.1").action,
        RouteAction::Upstream(_)
    ));
    assert_eq!(warned(&i, "enable-global-auth"), 2, "{:#?}", i.warnings);
    assert_once(&i);
}

// --- Canary -------------------------------------------------------------------------------

#[test]
fn a_canary_joins_its_production_route_whatever_the_order_of_the_file() {
    let yaml = fixture("canary.yaml");
    let i = run(&yaml);
    let c = config(&i);
    assert!(
        i.denied.is_empty(),
        "the canary's auth-url is ignored, as by ingress-nginx"
    );
    assert!(
        !c.routes.iter().any(|r| r.name.contains("canary")),
        "a canary Ingress has no routes of its own: {:?}",
        c.routes.iter().map(|r| &r.name).collect::<Vec<_>>()
    );
    let prod = route(&c, "default.production.1");
    assert_eq!(target(&c, prod), svc("production", "default", 80));
    let canary = prod.canary.as_ref().expect("canary");
    assert_eq!(
        c.upstreams[canary.upstream].targets[0].written,
        svc("canary", "default", 80)
    );
    assert_eq!((canary.weight, canary.weight_total), (20, 100));
    assert_eq!(
        (&canary.header, &canary.header_value, &canary.cookie),
        (&None, &None, &None)
    );
    // The canary inherits the production Ingress's upstream settings.
    assert_eq!(
        c.upstreams[canary.upstream].read_timeout,
        Duration::from_secs(120)
    );

    // By header and cookie: on both routes of the Prefix path.
    for name in ["shop.beta.1", "shop.beta.2"] {
        let k = route(&c, name).canary.as_ref().expect("canary");
        assert_eq!(k.header.as_deref(), Some("x-canary"));
        assert_eq!(k.header_value, None);
        assert_eq!(k.cookie.as_deref(), Some("canary"));
        assert_eq!((k.weight, k.weight_total), (5, 1000));
    }
    let k = route(&c, "shop.api.1").canary.as_ref().expect("canary");
    assert_eq!(
        (k.header.as_deref(), k.header_value.as_deref()),
        (Some("x-canary"), Some("on"))
    );
    assert_eq!(k.weight, 0);

    // Without production: skipped, said once.
    assert!(!i.toml.contains("orphan.default.svc"), "{}", i.toml);
    assert_eq!(warned(&i, "orphan-canary"), 1, "{:#?}", i.warnings);
    assert_once(&i);

    // Reversed: the same routes, canaries and upstreams.
    let docs: Vec<&str> = yaml.split("\n---\n").collect();
    let reversed: Vec<&str> = docs.iter().rev().copied().collect();
    let j = run(&reversed.join("\n---\n"));
    let d = config(&j);
    let summary = |c: &Config| {
        let mut v: Vec<String> = c
            .routes
            .iter()
            .map(|r| {
                let canary = r.canary.as_ref().map(|k| {
                    format!(
                        "{} {} {} {:?} {:?} {:?}",
                        c.upstreams[k.upstream].name,
                        k.weight,
                        k.weight_total,
                        k.header,
                        k.header_value,
                        k.cookie
                    )
                });
                format!("{} {:?} {} {canary:?}", r.name, r.path, target(c, r))
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(summary(&c), summary(&d));
}

#[test]
fn canary_annotations_out_of_range_or_alone_are_named() {
    let y = [
        ing("w", "main", &[], &host_rule("w.example.com", "/", "main")),
        ing(
            "w",
            "heavy",
            &[("canary", "true"), ("canary-weight", "150")],
            &host_rule("w.example.com", "/", "next"),
        ),
        // A second canary for the same rule: ingress-nginx applies one.
        ing(
            "w",
            "second",
            &[("canary", "true"), ("canary-weight", "10")],
            &host_rule("w.example.com", "/", "other"),
        ),
        // canary-* without canary: "true": ignored by ingress-nginx.
        ing(
            "w",
            "not-canary",
            &[("canary-weight", "10")],
            &host_rule("n.example.com", "/", "n"),
        ),
        ing(
            "w",
            "pattern-main",
            &[],
            &host_rule("p.example.com", "/", "p"),
        ),
        ing(
            "w",
            "pattern",
            &[
                ("canary", "true"),
                ("canary-by-header", "X-Beta"),
                ("canary-by-header-pattern", "^(yes|on)$"),
            ],
            &host_rule("p.example.com", "/", "p2"),
        ),
        ing(
            "w",
            "lookahead-main",
            &[],
            &host_rule("l.example.com", "/", "l"),
        ),
        ing(
            "w",
            "lookahead",
            &[
                ("canary", "true"),
                ("canary-by-header", "X-Beta"),
                ("canary-by-header-pattern", "(?=x)yes"),
            ],
            &host_rule("l.example.com", "/", "l2"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let k = route(&c, "w.main.1").canary.as_ref().expect("canary");
    assert_eq!(
        (k.weight, k.weight_total),
        (100, 100),
        "clamped, all to the canary"
    );
    assert_eq!(c.upstreams[k.upstream].name, "w.next.80");
    assert_eq!(warned(&i, "canary-weight \"150\""), 1, "{:#?}", i.warnings);
    assert_eq!(warned(&i, "Ingress w/second"), 1, "{:#?}", i.warnings);
    assert!(route(&c, "w.not-canary.1").canary.is_none());
    assert_eq!(warned(&i, "without canary"), 1, "{:#?}", i.warnings);
    // canary-by-header-pattern: the route's header_pattern; one RE2 cannot read (a
    // lookahead) leaves the header out, never half-applied.
    let k = route(&c, "w.pattern-main.1")
        .canary
        .as_ref()
        .expect("canary");
    assert_eq!(
        (
            k.header.as_deref(),
            k.header_pattern.as_deref(),
            k.header_value.as_deref()
        ),
        (Some("x-beta"), Some("^(yes|on)$"), None)
    );
    assert!(
        route(&c, "w.lookahead-main.1").canary.is_none(),
        "nothing left to choose by"
    );
    assert_eq!(
        warned(&i, "canary-by-header-pattern \"(?=x)"),
        1,
        "{:#?}",
        i.warnings
    );
    assert_once(&i);

    // A canary's defaultBackend joins the routes without a host (ingress-nginx's default
    // server); without any, it is skipped and named.
    let lone = |name: &str, anns: &[(&str, &str)], svc: &str| {
        ing(
            "d",
            name,
            anns,
            &format!("defaultBackend:\n  service: {{name: {svc}, port: {{number: 80}}}}\n"),
        )
    };
    let canary = [("canary", "true"), ("canary-weight", "30")];
    let i = run(&[
        lone("main", &[], "landing"),
        lone("next", &canary, "landing-v2"),
    ]
    .concat());
    let c = config(&i);
    let k = route(&c, "d.main.default").canary.as_ref().expect("canary");
    assert_eq!(
        (c.upstreams[k.upstream].name.as_str(), k.weight),
        ("d.landing-v2.80", 30)
    );
    let hosted = ing("d", "hosted", &[], &host_rule("h.example.com", "/", "h"));
    let i = run(&[hosted, lone("next", &canary, "x")].concat());
    assert_eq!(
        warned(&i, "Ingress d/next: defaultBackend"),
        1,
        "{:#?}",
        i.warnings
    );
}

// --- Regex paths, rewrites, app-root -------------------------------------------------------

#[test]
fn the_documented_rewrite_reaches_the_upstream_path_it_promises() {
    let i = run(&fixture("rewrite.yaml"));
    let c = config(&i);
    assert_once(&i);
    let r = route(&c, "default.rewrite.1");
    assert_eq!(r.path, PathMatch::Regex("^/something(/|$)(.*)".into()));
    assert!(r.case_insensitive);
    let http = svc("http-svc", "default", 80);
    // The documentation's list.
    for (from, to) in [
        ("/something", "/"),
        ("/something/", "/"),
        ("/something/new", "/new"),
        ("/SomeThing/New", "/New"),
    ] {
        assert_eq!(
            served(&c, "rewrite.bar.com", from),
            format!("{http} {to}"),
            "{from}"
        );
    }
    assert_eq!(served(&c, "rewrite.bar.com", "/other"), "404");
}

#[test]
fn app_root_redirects_only_the_root() {
    let i = run(&fixture("rewrite.yaml"));
    let c = config(&i);
    let r = route(&c, "default.approot.app-root.approot.bar.com");
    assert_eq!(r.path, PathMatch::Exact("/".into()));
    assert_eq!(served(&c, "approot.bar.com", "/"), "302 /app1");
    assert_eq!(
        served(&c, "approot.bar.com", "/app1"),
        format!("{} /app1", svc("http-svc", "default", 80))
    );
}

#[test]
fn a_rewrite_on_a_host_makes_its_every_path_a_regex_tried_longest_first() {
    let i = run(&fixture("rewrite.yaml"));
    let c = config(&i);
    let s = |n: &str| svc(n, "default", 80);
    // docs/user-guide/ingress-path-matching.md, "Path Priority".
    assert_eq!(
        served(&c, "test.com", "/foo/bar/1"),
        format!("{} /1", s("service3"))
    );
    assert_eq!(
        served(&c, "test.com", "/foo/bar/"),
        format!("{} /foo/bar/", s("service2"))
    );
    assert_eq!(
        served(&c, "test.com", "/foo/bar"),
        format!("{} /foo/bar", s("service1"))
    );
    assert_eq!(
        served(&c, "test.com", "/FOO/BAR"),
        format!("{} /FOO/BAR", s("service1"))
    );
    assert!(c
        .routes
        .iter()
        .filter(|r| r.host.as_deref() == Some("test.com"))
        .all(|r| matches!(r.path, PathMatch::Regex(_)) && r.case_insensitive));
    // "Warning": the regex comes first, as nginx tries them.
    assert_eq!(
        served(&c, "test3.com", "/foo/bar/bar"),
        format!("{} /foo/bar/bar", s("pattern"))
    );
    // A group followed by text: `$1api` is group 1, then "api".
    assert_eq!(
        served(&c, "versions.example.com", "/api/v2/users/7"),
        format!("{} /v2api/users/7", s("api"))
    );
    assert_eq!(
        served(&c, "versions.example.com", "/home"),
        format!("{} /home", s("web"))
    );
    let text = &i.toml;
    assert!(text.contains("replace = \"/v${1}api/${2}\""), "{text}");
    assert_eq!(
        warned(&i, "host test.com: every path"),
        1,
        "one note per regex host: {:#?}",
        i.warnings
    );
}

#[test]
fn the_kubernetes_minimal_ingress_rewrites_everything_below_to_the_root() {
    let opts = Options {
        ingress_class: "nginx-example".into(),
        ..Options::default()
    };
    let i = run_with(&fixture("minimal.yaml"), &opts);
    let c = config(&i);
    // rewrite-target "/" without capture groups: nginx replaces the whole path.
    let t = svc("test", "default", 80);
    assert_eq!(served(&c, "any.example.com", "/testpath"), format!("{t} /"));
    assert_eq!(
        served(&c, "any.example.com", "/testpath/a/b"),
        format!("{t} /")
    );
}

#[test]
fn regexes_re2_cannot_read_and_targets_with_nginx_variables_are_named() {
    let y = [
        ing(
            "r",
            "lookahead",
            &[("use-regex", "true")],
            "rules:\n- host: r.example.com\n  http:\n    paths:\n    - {path: \"/(?!admin)(.*)\", pathType: ImplementationSpecific, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: /ok/(.*), pathType: ImplementationSpecific, backend: {service: {name: s, port: {number: 80}}}}\n",
        ),
        ing(
            "r",
            "variable",
            &[("rewrite-target", "/$host/$1")],
            "rules:\n- host: v.example.com\n  http:\n    paths:\n    - {path: /x/(.*), pathType: ImplementationSpecific, backend: {service: {name: s, port: {number: 80}}}}\n",
        ),
        // A literal path of a non-regex Ingress on a regex host that is no valid regex: literal.
        ing(
            "r",
            "literal",
            &[],
            "rules:\n- host: r.example.com\n  http:\n    paths:\n    - {path: /c++, pathType: Prefix, backend: {service: {name: c, port: {number: 80}}}}\n",
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    assert_eq!(warned(&i, "(?!admin)"), 1, "{:#?}", i.warnings);
    assert!(served(&c, "r.example.com", "/ok/x").ends_with(" /ok/x"));
    assert_eq!(warned(&i, "$host"), 1, "{:#?}", i.warnings);
    assert!(route(&c, "r.variable.1").rewrite.is_none());
    assert!(served(&c, "r.example.com", "/c++/x").starts_with(&svc("c", "r", 80)));
    assert_once(&i);
}

// --- Access, limits, timeouts -------------------------------------------------------------

#[test]
fn whitelist_connections_and_timeouts_have_their_equivalents() {
    let i = run(&fixture("access.yaml"));
    let c = config(&i);
    assert_once(&i);
    let internal = route(&c, "ops.internal.1");
    let acc = internal.access.as_ref().expect("access");
    let only: Vec<String> = acc.only_from.iter().map(|n| n.to_string()).collect();
    assert_eq!(only, ["127.0.0.2/32", "10.0.0.0/8", "172.10.0.1/32"]);
    assert!(
        acc.allow.is_empty(),
        "inside the whitelist, limits still apply"
    );
    assert_eq!(internal.limits.len(), 1);

    let conn = c
        .limits
        .iter()
        .find(|l| l.name == "ops.downloads.conn")
        .expect("a concurrency limit");
    assert_eq!(conn.algorithm, tollgate_limit::AlgorithmKind::Concurrency);
    assert_eq!(conn.burst, 2);
    assert_eq!(route(&c, "ops.downloads.1").limits.len(), 1);

    // One Service, two sets of timeouts: two upstreams.
    let up = |name: &str| match route(&c, name).action {
        RouteAction::Upstream(u) => &c.upstreams[u],
        _ => panic!("{name} is not proxied"),
    };
    let times = |u: &tollgate_config::model::UpstreamConfig| {
        (
            u.connect_timeout.as_secs(),
            u.read_timeout.as_secs(),
            u.write_timeout.as_secs(),
        )
    };
    assert_eq!(
        times(up("ops.internal.1")),
        (5, 60, 60),
        "ingress-nginx's defaults"
    );
    assert_eq!(times(up("ops.reports.1")), (2, 1, 3));
    assert_ne!(up("ops.internal.1").name, up("ops.reports.1").name);
    assert_eq!(up("ops.internal.1").name, "ops.tools.80");
    assert_eq!(
        times(up("docker-registry.docker-registry.1")),
        (5, 600, 600)
    );
    assert_eq!(
        warned(&i, "proxy-send-timeout \"3s\""),
        1,
        "{:#?}",
        i.warnings
    );
    // allowlist-source-range without an address: denied.
    assert_eq!(denied_routes(&i), ["ops.typo.1"]);
    assert_eq!(i.denied[0].annotations, ["allowlist-source-range"]);
    // Every upstream carries the timeouts.
    assert!(i.toml.matches("read_timeout = ").count() == c.upstreams.len());
}

#[test]
fn limit_whitelist_still_exempts_and_bad_numbers_are_named() {
    let i = run(&fixture("ratelimited.yaml"));
    let c = config(&i);
    let names: Vec<&str> = c.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["prod.api.rps", "prod.api.rpm", "prod.web.rpm"]);
    let rps = &c.limits[0];
    assert_eq!(
        (
            rps.rate.count(),
            rps.rate.period().as_secs(),
            rps.burst,
            rps.delay
        ),
        (5, 1, 16, 16)
    );
    let api = route(&c, "prod.api.1");
    let acc = api.access.as_ref().expect("lists");
    assert_eq!(acc.allow.len(), 2);
    assert_eq!(acc.deny[0].to_string(), "198.51.100.0/24");
    assert!(acc.only_from.is_empty());
    // A Service is read (a default-backend's first port), not skipped with a warning.
    assert_eq!(warned(&i, "Service api: not an Ingress"), 0);

    let y = [
        ing(
            "n",
            "a",
            &[("limit-connections", "0"), ("limit-rps", "lots")],
            &host_rule("a.example.com", "/", "a"),
        ),
        ing(
            "n",
            "b",
            &[("proxy-read-timeout", "soon"), ("limit-connections", "-3")],
            &host_rule("b.example.com", "/", "b"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    assert!(c.limits.is_empty());
    for w in [
        "limit-connections \"0\"",
        "limit-rps \"lots\"",
        "proxy-read-timeout \"soon\"",
        "limit-connections \"-3\"",
    ] {
        assert_eq!(warned(&i, w), 1, "{w}: {:#?}", i.warnings);
    }
}

// --- Tollgate's own annotations ---------------------------------------------------------

#[test]
fn tollgate_annotations_make_limits_global_and_attach_named_ones() {
    let y = [
        ing(
            "n",
            "a",
            &[
                ("limit-rps", "5"),
                ("limit-connections", "3"),
                ("tollgate.io/limit-scope", "global"),
                ("tollgate.io/limits", "api, edge.burst,api"),
            ],
            &host_rule("a.example.com", "/", "a"),
        ),
        ing(
            "n",
            "b",
            &[
                ("limit-rps", "5"),
                ("tollgate.io/limit-scope", "everywhere"),
            ],
            &host_rule("b.example.com", "/", "b"),
        ),
        ing(
            "n",
            "c",
            &[("tollgate.io/limits", "api,\"]\n[server]")],
            &host_rule("c.example.com", "/", "c"),
        ),
        ing(
            "n",
            "d",
            &[("limit-rps", "5"), ("tollgate.io/limit-scop", "global")],
            &host_rule("d.example.com", "/", "d"),
        ),
    ]
    .concat();
    let i = run(&y);
    let t: toml::Table = i.toml.parse().expect("toml");
    let limit = |n: &str| t["limits"][n].as_table().expect("limit").clone();
    assert_eq!(limit("n.a.rps")["scope"].as_str(), Some("global"));
    assert_eq!(limit("n.a.conn")["scope"].as_str(), Some("global"));
    assert!(
        limit("n.b.rps").get("scope").is_none(),
        "local, as ingress-nginx"
    );
    assert!(limit("n.d.rps").get("scope").is_none());
    let route = |n: &str| {
        t["routes"]
            .as_array()
            .expect("routes")
            .iter()
            .find(|r| r["name"].as_str() == Some(n))
            .cloned()
            .unwrap_or_else(|| panic!("no route {n}:\n{}", i.toml))
    };
    let names: Vec<String> = route("n.a.1")["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    assert_eq!(names, ["n.a.conn", "n.a.rps", "api", "edge.burst"]);
    // A scope that cannot be honoured, or a name that is none, answers 403: never a limit
    // looser than asked, nor TOML smuggled in.
    let denied = denied_routes(&i);
    assert!(
        denied.contains(&"n.b.1") && denied.contains(&"n.c.1"),
        "{denied:?}"
    );
    assert!(!denied.contains(&"n.a.1"));
    assert!(!i.toml.contains("\n[server]\n[server]"));
    assert_eq!(
        warned(&i, "tollgate.io/limit-scop is not"),
        1,
        "{:#?}",
        i.warnings
    );
    assert_once(&i);
}

#[test]
fn a_ca_secret_of_another_namespace_is_refused() {
    let y = [
        ing(
            "n",
            "a",
            &[("auth-tls-secret", "bank/ca")],
            "tls:\n- hosts: [a.example.com]\n  secretName: site\nrules:\n- host: a.example.com\n  http:\n    paths:\n    - {path: /, pathType: Prefix, backend: {service: {name: a, port: {number: 80}}}}\n",
        ),
    ]
    .concat();
    let i = run(&y);
    assert!(!i.toml.contains("tls/bank/ca"), "{}", i.toml);
    assert!(denied_routes(&i).contains(&"n.a.1"), "{:?}", i.denied);
    assert!(
        i.warnings.iter().any(|w| w.contains("another namespace")),
        "{:#?}",
        i.warnings
    );
}

// --- Classes ------------------------------------------------------------------------------

#[test]
fn only_the_chosen_ingress_class_is_imported() {
    let yaml = fixture("classes.yaml");
    let i = run(&yaml);
    let c = config(&i);
    let hosts: BTreeSet<&str> = c.routes.iter().filter_map(|r| r.host.as_deref()).collect();
    assert_eq!(
        hosts,
        BTreeSet::from([
            "nginx.example.com",
            "legacy.example.com",
            "classless.example.com"
        ])
    );
    // One note for everything skipped, one warning for everything without a class.
    assert_eq!(warned(&i, "traefik"), 1, "{:#?}", i.warnings);
    assert_eq!(warned(&i, "haproxy"), 1);
    assert_eq!(warned(&i, "default/classless"), 1);
    assert_once(&i);
    let skipped = i
        .warnings
        .iter()
        .find(|w| w.contains("traefik"))
        .expect("note");
    assert!(
        skipped.contains("haproxy") && skipped.contains("nginx-internal"),
        "{skipped}"
    );

    let i = run_with(
        &yaml,
        &Options {
            ingress_class: "traefik".into(),
            ..Options::default()
        },
    );
    let c = config(&i);
    let hosts: BTreeSet<&str> = c.routes.iter().filter_map(|r| r.host.as_deref()).collect();
    assert_eq!(
        hosts,
        BTreeSet::from(["traefik.example.com", "classless.example.com"])
    );

    // Nothing of the class: an error that says so.
    match import(&fixture("minimal.yaml"), &Options::default()) {
        Err(ImportError::NoIngress(why)) => assert!(why.contains("nginx-example"), "{why}"),
        other => panic!("{other:?}"),
    }
}

// --- Hosts, paths, defaults ---------------------------------------------------------------

#[test]
fn bad_hosts_skip_their_rule_wildcards_stay_and_trailing_slashes_make_one_set() {
    let i = run(&fixture("hosts.yaml"));
    let c = config(&i);
    assert_once(&i);
    let hosts: BTreeSet<&str> = c.routes.iter().filter_map(|r| r.host.as_deref()).collect();
    assert_eq!(
        hosts,
        BTreeSet::from(["registry.example.com", "*.foo.com", "slashes.example.com"])
    );
    for bad in ["registry.<your domain>", "__INGRESS_HOST__", "*.*.bar.com"] {
        assert!(warned(&i, bad) >= 1, "{bad}: {:#?}", i.warnings);
    }
    assert_eq!(
        served(&c, "a.foo.com", "/x"),
        format!("{} /x", svc("tenants", "default", 80))
    );
    assert_eq!(served(&c, "a.b.foo.com", "/x"), "404");
    let s = |n: &str| svc(n, "default", 80);
    assert_eq!(
        routes_of(&c, Some("slashes.example.com")),
        vec![
            (PathMatch::Exact("/foo/bar".into()), s("service1")),
            (PathMatch::Prefix("/foo/bar/".into()), s("service2")),
            (PathMatch::Exact("/same".into()), s("service1")),
            (PathMatch::Prefix("/same/".into()), s("service1")),
        ]
    );
    assert_eq!(warned(&i, "/foo/bar"), 1, "{:#?}", i.warnings);
    assert_eq!(warned(&i, "/same"), 0, "{:#?}", i.warnings);
}

#[test]
fn a_default_backend_is_its_hosts_default_and_a_lone_one_the_catch_all() {
    let i = run(&fixture("default-backend.yaml"));
    let c = config(&i);
    assert!(!c.server.host_fallthrough);
    let s = |n: &str, ns: &str| svc(n, ns, 80);
    assert_eq!(
        served(&c, "shop.example.com", "/api/x"),
        format!("{} /api/x", svc("api", "shop", 8080))
    );
    assert_eq!(
        served(&c, "shop.example.com", "/other"),
        format!("{} /other", s("shop-404", "shop"))
    );
    assert_eq!(
        served(&c, "unknown.example.com", "/"),
        format!("{} /", s("landing", "web"))
    );
    assert_eq!(
        served(&c, "blog.example.com", "/x"),
        format!("{} /x", s("blog", "web"))
    );
    // shop's defaultBackend is not the catch-all of other hosts (it has rules).
    assert_eq!(routes_of(&c, None).len(), 1);
}

#[test]
fn the_fanout_and_virtual_hosts_keep_kubernetes_semantics() {
    let i = run(&fixture("fanout.yaml"));
    let c = config(&i);
    let h = Some("foo.bar.com");
    assert_eq!(
        routes_of(&c, h),
        vec![
            (
                PathMatch::Exact("/foo".into()),
                svc("service1", "shop", 4200)
            ),
            (
                PathMatch::Prefix("/foo/".into()),
                svc("service1", "shop", 4200)
            ),
            (
                PathMatch::Exact("/bar".into()),
                svc("service2", "shop", 8080)
            ),
            (
                PathMatch::Prefix("/bar/".into()),
                svc("service2", "shop", 8080)
            ),
            (
                PathMatch::Exact("/bar/health".into()),
                svc("service2", "shop", 8081)
            ),
        ]
    );
    assert_eq!(
        i.warnings,
        ["Ingress shop/simple-fanout-example without a class (ingressClassName or kubernetes.io/ingress.class): imported as \"nginx\"; ingress-nginx serves such Ingresses only with --watch-ingress-without-class or a default IngressClass"]
    );

    let i = run(&fixture("virtual-hosts.yaml"));
    let c = config(&i);
    assert_once(&i);
    let s = |n: &str| svc(n, "default", 80);
    assert_eq!(
        served(&c, "first.bar.com", "/x"),
        format!("{} /x", s("service1"))
    );
    assert_eq!(
        served(&c, "second.bar.com", "/api"),
        format!("{} /api", s("service2"))
    );
    // The Ingress's defaultBackend is the default of its hosts.
    assert_eq!(
        served(&c, "second.bar.com", "/x"),
        format!("{} /x", s("fallback"))
    );
    assert_eq!(served(&c, "a.foo.com", "/"), format!("{} /", s("service4")));
    assert_eq!(
        served(&c, "other.com", "/x"),
        format!("{} /x", s("service3"))
    );
    assert_eq!(warned(&i, "port \"http\" is named"), 1);
    assert_eq!(
        c.routes
            .iter()
            .filter(|r| r.https_redirect == Some(true))
            .count(),
        1
    );
}

#[test]
fn hostile_input_never_aborts_the_file_and_never_writes_config() {
    let y = [
        ing(
            "h",
            "paths",
            &[("configuration-snippet", "x\"\n[access]\nallow = [\"0.0.0.0/0\"]")],
            "rules:\n- host: a.example.com\n  http:\n    paths:\n    - {path: /ok, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: \"/a//b\", pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: \"/a/../b\", pathType: Exact, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: \"/caf\u{e9}\", pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: \"/sp ace\", pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: \"/%2f\", pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: relative, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: /x, pathType: Weird, backend: {service: {name: s, port: {number: 80}}}}\n    - {path: /y, pathType: Prefix}\n    - {path: /z, pathType: Prefix, backend: {resource: {kind: Bucket, name: b}}}\n    - {path: /p, pathType: Prefix, backend: {service: {name: s, port: {number: 99999}}}}\n",
        ),
        ing(
            "h",
            "hosts",
            &[],
            "rules:\n- host: \"-bad-.example.com\"\n  http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}]}\n- host: \"a..b\"\n  http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}]}\n- host: \"10.1.2.3\"\n  http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}]}\n- host: \"evil.com\\\"\\n[server]\"\n  http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}]}\n- host: ok.example.com\n- host: ok2.example.com\n  http: null\n",
        ),
        // Names that would break out of a string, a namespace with odd characters.
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: \"x\\\"y\"\n  namespace: weird\n  annotations:\n    nginx.ingress.kubernetes.io/limit-rps: 5\n    nginx.ingress.kubernetes.io/canary-weight: 7\nspec:\n  ingressClassName: nginx\n  rules:\n  - host: w.example.com\n    http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: \"s\\\"]\", port: {number: 80}}}}\n".to_string(),
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: empty}\nspec: null\n".to_string(),
        "---\n42\n---\n- a list\n---\nkind: Ingress\n".to_string(),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    assert_once(&i);
    assert!(c.access.is_empty(), "nothing injected:\n{}", i.toml);
    assert!(!i.toml.contains("\n[access]"), "{}", i.toml);
    for r in &c.routes {
        assert_ne!(r.host.as_deref(), Some("10.1.2.3"));
    }
    for needle in [
        "/a//b",
        "/a/../b",
        "/sp ace",
        "relative",
        "Weird",
        "no backend",
        "resource backend",
        "99999",
        "-bad-.example.com",
        "a..b",
        "10.1.2.3",
        "evil.com",
    ] {
        assert!(warned(&i, needle) >= 1, "{needle}: {:#?}", i.warnings);
    }
    // Unquoted YAML numbers are annotation text all the same.
    assert!(
        c.limits.iter().any(|l| l.name == "weird.x_y.rps"),
        "{}",
        i.toml
    );
    // Every comment line stays a comment.
    for line in i.toml.lines() {
        assert!(!line.starts_with("allow"), "{line}");
    }
}

#[test]
fn warnings_are_printed_once_however_many_ingresses_share_them() {
    let i = run(&fixture("affinity.yaml"));
    let c = config(&i);
    assert_once(&i);
    assert_eq!(warned(&i, "proxy-buffering"), 1, "{:#?}", i.warnings);
    let buffering = i
        .warnings
        .iter()
        .find(|w| w.contains("proxy-buffering"))
        .expect("warning");
    assert!(
        buffering.contains("default/nginx-test,") || buffering.contains("default/nginx-test "),
        "{buffering}"
    );
    assert!(buffering.contains("default/nginx-test-2"), "{buffering}");
    assert!(i.denied.is_empty());
    // The documented affinity example: one upstream per way of balancing the Service, each
    // with its cookie; the body caps per route; CORS with ingress-nginx's defaults.
    assert_eq!(c.upstreams.len(), 2, "{}", i.toml);
    let sticky = c
        .upstreams
        .iter()
        .filter_map(|u| u.affinity.as_ref())
        .find(|a| a.cookie == "route")
        .expect("session-cookie-name route");
    assert_eq!(sticky.max_age, Some(std::time::Duration::from_secs(172800)));
    assert!(c
        .upstreams
        .iter()
        .filter_map(|u| u.affinity.as_ref())
        .any(|a| a.cookie == "INGRESSCOOKIE" && a.max_age.is_none()));
    let r1 = route(&c, "default.nginx-test.1");
    assert_eq!(r1.edge.max_body_bytes, Some(8 << 20));
    let cors = r1.edge.cors.as_ref().expect("enable-cors");
    assert!(!cors.allow_credentials, "never credentials with \"*\"");
    assert_eq!(cors.max_age, Some(1_728_000));
    assert_eq!(
        route(&c, "default.nginx-test-2.1").edge.max_body_bytes,
        Some(1 << 20)
    );
    assert_eq!(warned(&i, "headless"), 2, "{:#?}", i.warnings);
}

// --- TLS (as before the split) ------------------------------------------------------------

#[test]
fn tls_certificates_redirects_and_acme_paths() {
    let tls = "tls:\n- hosts: [a.example.com]\n  secretName: a-tls\n";
    let y = [
        ing("web", "on", &[], &format!(
            "{tls}rules:\n{}- host: a.example.com\n  http:\n    paths:\n    - {{path: /.well-known/acme-challenge/tok, pathType: ImplementationSpecific, backend: {{service: {{name: solver, port: {{number: 8089}}}}}}}}\n",
            host_rule("a.example.com", "/", "a").trim_start_matches("rules:\n")
        )),
        ing("web", "off", &[("ssl-redirect", "false")], &host_rule("a.example.com", "/plain", "a")),
        ing("web", "force", &[("force-ssl-redirect", "true")], &host_rule("c.example.com", "/", "c")),
        ing("web", "plain", &[], &host_rule("d.example.com", "/", "d")),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    assert_eq!(c.server.https_port, Some(443));
    for (name, red) in [
        ("web.on.1", Some(true)),
        ("web.on.2", Some(false)),
        ("web.off.1", None),
        ("web.force.1", Some(true)),
        ("web.plain.1", None),
    ] {
        assert_eq!(route(&c, name).https_redirect, red, "{name}:\n{}", i.toml);
    }
    let certs: Vec<String> = c
        .tls
        .as_ref()
        .expect("[tls]")
        .certificates
        .iter()
        .map(|f| f.cert.display().to_string())
        .collect();
    assert_eq!(certs, ["/etc/tollgate/tls/web/a-tls/tls.crt"]);
}

#[test]
fn backend_protocols_become_upstream_tls_and_h2() {
    let y = [
        ("plain", ""),
        ("https", "HTTPS"),
        ("grpc", "GRPC"),
        ("ajp", "AJP"),
    ]
    .iter()
    .map(|(name, proto)| {
        let anns: Vec<(&str, &str)> = if proto.is_empty() {
            Vec::new()
        } else {
            vec![("backend-protocol", *proto)]
        };
        ing(
            "apps",
            name,
            &anns,
            &host_rule(&format!("{name}.example.com"), "/", "svc"),
        )
    })
    .collect::<String>();
    let i = run(&y);
    let c = config(&i);
    assert!(upstream(&c, "apps.svc.80").tls.is_none());
    assert!(upstream(&c, "apps.svc.80.https")
        .tls
        .as_ref()
        .is_some_and(|t| t.verify));
    assert!(upstream(&c, "apps.svc.80.grpc").h2);
    assert_eq!(c.upstreams.len(), 3, "AJP falls back to HTTP");
    assert_eq!(warned(&i, "backend-protocol \"AJP\""), 1);
}

// --- The documented table is the code's --------------------------------------------------

#[test]
fn the_readme_lists_every_annotation_as_the_importer_treats_it() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ingress-nginx.md"),
    )
    .expect("docs/ingress-nginx.md");
    let section = readme
        .split("\n## Every annotation")
        .nth(1)
        .and_then(|s| s.split("\n#").next())
        .expect("the table of annotations");
    let mut listed = std::collections::BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let treatment = cells.get(1).copied().unwrap_or("");
        for name in cells[0].split('`').skip(1).step_by(2) {
            listed.insert(name.to_string(), treatment.to_string());
        }
    }
    let code = tollgate_ingress::annotations();
    for a in code {
        let Some(t) = listed.get(a.name) else {
            panic!("{} is not in the README's table", a.name)
        };
        let want = match a.treatment {
            Treatment::Exact => "translated exactly",
            Treatment::Approximate => "translated approximately",
            Treatment::Refused => "refused",
            Treatment::Ignored => "ignored",
        };
        assert!(
            t.starts_with(want),
            "{}: README says {t:?}, the code {want:?}",
            a.name
        );
    }
    for name in listed.keys() {
        assert!(
            code.iter().any(|a| a.name == name),
            "{name} is in the README's table but not in the code's"
        );
    }
}

// --- Helpers for inline Ingresses -----------------------------------------------------------

/// One Ingress (class nginx) per document; annotations under the ingress-nginx prefix.
fn ing(ns: &str, name: &str, annotations: &[(&str, &str)], spec: &str) -> String {
    let mut y = format!(
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
    );
    if !annotations.is_empty() {
        y.push_str("  annotations:\n");
        for (k, v) in annotations {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            if k.contains('/') {
                y.push_str(&format!("    {k}: \"{v}\"\n"));
            } else {
                y.push_str(&format!("    nginx.ingress.kubernetes.io/{k}: \"{v}\"\n"));
            }
        }
    }
    y.push_str("spec:\n  ingressClassName: nginx\n");
    for line in spec.trim_matches('\n').lines() {
        y.push_str("  ");
        y.push_str(line);
        y.push('\n');
    }
    y
}

fn host_rule(host: &str, path: &str, svc: &str) -> String {
    format!("rules:\n- host: {host}\n  http:\n    paths:\n    - {{path: {path}, pathType: Prefix, backend: {{service: {{name: {svc}, port: {{number: 80}}}}}}}}\n")
}

/// `proxy-ssl-*`: with a Secret of the Ingress's namespace, the upstream's tls names its
/// ca.crt, tls.crt and tls.key (verify as proxy-ssl-verify, default off); another namespace's
/// Secret, or a name that is none, answers 403; `proxy-ssl-verify: "off"` alone is the switch
/// to ingress-nginx's unverified TLS; the other keys without a Secret are ignored, as there.
#[test]
fn proxy_ssl_annotations_become_the_upstreams_tls() {
    let https = ("backend-protocol", "HTTPS");
    let y = [
        ing(
            "shop",
            "own",
            &[
                https,
                ("proxy-ssl-secret", "shop/upstream-ca"),
                ("proxy-ssl-verify", "on"),
                ("proxy-ssl-name", "API.internal"),
                ("proxy-ssl-verify-depth", "2"),
            ],
            &host_rule("own.example.com", "/", "own"),
        ),
        ing(
            "shop",
            "default-off",
            &[https, ("proxy-ssl-secret", "shop/upstream-ca")],
            &host_rule("off.example.com", "/", "off"),
        ),
        ing(
            "shop",
            "theirs",
            &[https, ("proxy-ssl-secret", "kube-system/ca")],
            &host_rule("theirs.example.com", "/", "theirs"),
        ),
        ing(
            "shop",
            "nonsense",
            &[https, ("proxy-ssl-secret", "no-slash")],
            &host_rule("nonsense.example.com", "/", "nonsense"),
        ),
        ing(
            "shop",
            "switch",
            &[
                https,
                ("proxy-ssl-verify", "off"),
                ("proxy-ssl-name", "x.internal"),
            ],
            &host_rule("switch.example.com", "/", "switch"),
        ),
        ing(
            "shop",
            "plain",
            &[("proxy-ssl-secret", "shop/upstream-ca")],
            &host_rule("plain.example.com", "/", "plain"),
        ),
        ing(
            "shop",
            "strict",
            &[https],
            &host_rule("strict.example.com", "/", "strict"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let tls = |svc: &str| {
        upstream(&c, &format!("shop.{svc}.80.https"))
            .tls
            .as_deref()
            .cloned()
            .unwrap_or_else(|| panic!("{svc}: tls\n{}", i.toml))
    };
    let own = tls("own");
    assert!(own.verify);
    assert_eq!(own.sni.as_deref(), Some("api.internal"));
    assert_eq!(
        own.ca.as_deref(),
        Some(std::path::Path::new(
            "/etc/tollgate/tls/shop/upstream-ca/ca.crt"
        ))
    );
    let client = own.client_cert.expect("client certificate");
    assert_eq!(
        (client.cert.to_str(), client.key.to_str()),
        (
            Some("/etc/tollgate/tls/shop/upstream-ca/tls.crt"),
            Some("/etc/tollgate/tls/shop/upstream-ca/tls.key")
        )
    );
    assert!(!tls("off").verify, "proxy-ssl-verify's default is off");
    let switch = tls("switch");
    assert!(!switch.verify && switch.ca.is_none() && switch.sni.is_none());
    assert!(
        tls("strict").verify,
        "Tollgate's default: the system's roots"
    );
    assert!(
        upstream(&c, "shop.plain.80").tls.is_none(),
        "HTTP: nothing speaks TLS"
    );
    let denied = denied_routes(&i);
    for r in ["shop.theirs.1", "shop.nonsense.1"] {
        assert!(denied.contains(&r), "{r}: {denied:?}");
        assert_eq!(target(&c, route(&c, r)), "403");
    }
    assert!(!denied.contains(&"shop.own.1"), "{denied:?}");
    for needle in [
        "proxy-ssl-verify-depth \"2\"",
        "proxy-ssl-name without proxy-ssl-secret",
        "proxy-ssl-secret without backend-protocol",
        "Ingress shop/strict: backend-protocol HTTPS/GRPCS: Tollgate verifies",
    ] {
        assert_eq!(warned(&i, needle), 1, "{needle}: {:#?}", i.warnings);
    }
    assert_once(&i);
}

/// `proxy-redirect-*`, `proxy-cookie-domain` and `proxy-cookie-path` become the route's
/// response rewrites; values ingress-nginx's validation drops to `off` (spaces removed before
/// it looks) are `off` here too, named.
#[test]
fn redirect_and_cookie_rewrites_are_the_routes_as_ingress_nginx_reads_them() {
    let y = [
        ing(
            "shop",
            "rw",
            &[
                ("proxy-redirect-from", "http://app.internal:8080/"),
                ("proxy-redirect-to", "https://shop.example/"),
                ("proxy-cookie-domain", ".app.internal shop.example"),
                ("proxy-cookie-path", "/internal/ /"),
            ],
            &host_rule("rw.example.com", "/", "rw"),
        ),
        ing(
            "shop",
            "off",
            &[
                ("proxy-redirect-from", "default"),
                ("proxy-redirect-to", "https://x.example/"),
                ("proxy-cookie-domain", "off"),
            ],
            &host_rule("off.example.com", "/", "off"),
        ),
        ing(
            "shop",
            "bad",
            &[
                ("proxy-redirect-from", "http://a/$host"),
                ("proxy-redirect-to", "/"),
                ("proxy-cookie-domain", "a.example"),
                ("proxy-cookie-path", "/only-one"),
            ],
            &host_rule("bad.example.com", "/", "bad"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let rw = &route(&c, "shop.rw.1").edge;
    assert_eq!(
        rw.proxy_redirect,
        [Replace {
            from: "http://app.internal:8080/".into(),
            to: "https://shop.example/".into()
        }]
    );
    assert_eq!(
        rw.proxy_cookie_domain,
        [Replace {
            from: "app.internal".into(),
            to: "shop.example".into()
        }]
    );
    assert_eq!(
        rw.proxy_cookie_path,
        [Replace {
            from: "/internal/".into(),
            to: "/".into()
        }]
    );
    for r in ["shop.off.1", "shop.bad.1"] {
        let e = &route(&c, r).edge;
        assert!(
            e.proxy_redirect.is_empty()
                && e.proxy_cookie_domain.is_empty()
                && e.proxy_cookie_path.is_empty(),
            "{r}: {e:?}"
        );
    }
    for needle in [
        "proxy-redirect-from \"http://a/$host\" has characters",
        "proxy-cookie-domain \"a.example\" is not off",
        "proxy-cookie-path \"/only-one\" is not off",
    ] {
        assert_eq!(warned(&i, needle), 1, "{needle}: {:#?}", i.warnings);
    }
    assert_once(&i);
}

fn configmap(ns: &str, name: &str, data: &[(&str, &str)]) -> String {
    let mut y = format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n");
    for (k, v) in data {
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\u{7f}', "\\x7f");
        y.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    y
}

/// `custom-headers`: the ConfigMap's fields set on the routes' answers when the controller's
/// `global-allowed-response-headers` lists each (as ingress-nginx, which denies the location
/// otherwise: 403 here); another namespace's ConfigMap, a missing one, a bad value and a
/// field Tollgate owns are refused, never dropped.
#[test]
fn custom_headers_come_from_their_configmap_under_the_controllers_allow_list() {
    let with = |name: &str, map: &str| {
        ing(
            "shop",
            name,
            &[("custom-headers", map)],
            &host_rule(&format!("{name}.example.com"), "/", name),
        )
    };
    let y = [
        configmap(
            "ingress-nginx",
            "ingress-nginx-controller",
            &[(
                "global-allowed-response-headers",
                "X-Frame-Options, Content-Security-Policy,Content-Length,X-Price",
            )],
        ),
        configmap(
            "shop",
            "security",
            &[
                ("X-Frame-Options", "DENY"),
                ("Content-Security-Policy", "default-src 'self'"),
                ("X-Price", "$5"),
            ],
        ),
        configmap("shop", "unlisted", &[("X-Debug", "1")]),
        configmap("shop", "owned", &[("Content-Length", "0")]),
        configmap("shop", "bad-value", &[("X-Frame-Options", "DENY\u{7f}")]),
        configmap("other", "security", &[("X-Frame-Options", "DENY")]),
        configmap("shop", "stray", &[("X-Frame-Options", "DENY")]),
        with("ok", "shop/security"),
        with("unlisted", "shop/unlisted"),
        with("owned", "shop/owned"),
        with("badvalue", "shop/bad-value"),
        with("theirs", "other/security"),
        with("missing", "shop/nope"),
        with("bare", "security"),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let set = &route(&c, "shop.ok.1").edge.response_headers;
    assert!(
        i.toml.contains(r#""X-Price" = "$$5""#),
        "a literal dollar: {}",
        i.toml
    );
    assert!(
        format!("{set:?}").contains("content-security-policy"),
        "{set:?}"
    );
    let denied = denied_routes(&i);
    for r in [
        "shop.unlisted.1",
        "shop.owned.1",
        "shop.badvalue.1",
        "shop.theirs.1",
        "shop.missing.1",
        "shop.bare.1",
    ] {
        assert!(denied.contains(&r), "{r}: {denied:?}");
        assert_eq!(target(&c, route(&c, r)), "403");
    }
    assert!(!denied.contains(&"shop.ok.1"));
    assert_eq!(
        warned(&i, "ConfigMap shop/security: not the controller's"),
        0,
        "{:#?}",
        i.warnings
    );
    assert_eq!(
        warned(&i, "ConfigMap shop/stray: not the controller's"),
        1,
        "{:#?}",
        i.warnings
    );
    assert_once(&i);
}

/// ingress-nginx's HTTPS redirect drops a trailing `/` unless `preserve-trailing-slash`;
/// a route that is not redirected is not told to.
#[test]
fn the_https_redirect_drops_a_trailing_slash_unless_preserved() {
    let y = [
        ing(
            "shop",
            "dropped",
            &[("force-ssl-redirect", "true")],
            &host_rule("d.example.com", "/", "d"),
        ),
        ing(
            "shop",
            "kept",
            &[
                ("force-ssl-redirect", "true"),
                ("preserve-trailing-slash", "true"),
            ],
            &host_rule("k.example.com", "/", "k"),
        ),
        ing("shop", "plain", &[], &host_rule("p.example.com", "/", "p")),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let drop = |r: &str| {
        let r = route(&c, r);
        (r.https_redirect, r.edge.https_redirect_drop_slash)
    };
    assert_eq!(drop("shop.dropped.1"), (Some(true), true));
    assert_eq!(drop("shop.kept.1"), (Some(true), false));
    assert!(!drop("shop.plain.1").1);
}

#[test]
fn mirrors_are_the_routes_as_ingress_nginx_reads_them() {
    let y = [
        ing(
            "shop",
            "m",
            &[
                ("mirror-target", "https://test.env.com/$request_uri"),
                ("mirror-request-body", "off"),
            ],
            &host_rule("m.example.com", "/", "m"),
        ),
        ing(
            "shop",
            "mh",
            &[
                ("mirror-target", "http://copy.shop.svc:8080$request_uri"),
                ("mirror-host", "copies.internal"),
                ("mirror-request-body", "maybe"),
            ],
            &host_rule("mh.example.com", "/", "mh"),
        ),
        ing(
            "shop",
            "bad",
            &[("mirror-target", "http://a b/")],
            &host_rule("bad.example.com", "/", "bad"),
        ),
        ing(
            "shop",
            "var",
            &[("mirror-target", "http://$host/x")],
            &host_rule("var.example.com", "/", "var"),
        ),
        ing(
            "shop",
            "lone",
            &[("mirror-host", "copies.internal")],
            &host_rule("lone.example.com", "/", "lone"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let m = route(&c, "shop.m.1").edge.mirror.as_ref().expect("mirror");
    assert_eq!((m.host.as_str(), m.body), ("test.env.com", false));
    assert_eq!(
        m.url,
        tollgate_config::parse_mirror_url("https://test.env.com/$request_uri")
            .expect("in the test")
    );
    let mh = route(&c, "shop.mh.1").edge.mirror.as_ref().expect("mirror");
    assert_eq!((mh.host.as_str(), mh.body), ("copies.internal", true));
    assert_eq!(
        warned(&i, "mirror-request-body \"maybe\" is not on or off"),
        1
    );
    for r in ["shop.bad.1", "shop.var.1", "shop.lone.1"] {
        assert!(route(&c, r).edge.mirror.is_none(), "{r}");
        assert!(
            !denied_routes(&i).contains(&r),
            "{r}: a mirror never denies a route"
        );
    }
    assert_eq!(
        warned(&i, "mirror-target \"http://a b/\" has characters"),
        1
    );
    assert_eq!(
        warned(
            &i,
            "mirror-target \"http://$host/x\" cannot be sent by Tollgate"
        ),
        1
    );
    assert_eq!(warned(&i, "mirror-host without mirror-target"), 1);
}

/// `default-backend` (a Service of the input, spoken to on its first port) and
/// `custom-http-errors` as ingress-nginx reads them; `disable-proxy-intercept-errors` leaves
/// the upstream's answers alone; what cannot be kept is named, never a route denied.
#[test]
fn default_backends_and_error_pages_are_the_routes_as_ingress_nginx_reads_them() {
    let errors_svc = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: errors\n  namespace: shop\nspec:\n  ports:\n  - {name: http, port: 8080}\n  - {name: admin, port: 9090}\n";
    let y = [
        errors_svc.to_string(),
        ing(
            "shop",
            "paged",
            &[
                ("default-backend", "errors"),
                ("custom-http-errors", "503, 404,404"),
            ],
            &host_rule("paged.example.com", "/", "web"),
        ),
        ing(
            "shop",
            "own",
            &[
                ("default-backend", "errors"),
                ("custom-http-errors", "502"),
                ("disable-proxy-intercept-errors", "true"),
            ],
            &host_rule("own.example.com", "/", "web"),
        ),
        ing(
            "shop",
            "quiet",
            &[("default-backend", "errors")],
            &host_rule("quiet.example.com", "/", "web"),
        ),
        ing(
            "shop",
            "lost",
            &[
                ("default-backend", "nowhere"),
                ("custom-http-errors", "404"),
            ],
            &host_rule("lost.example.com", "/", "web"),
        ),
        ing(
            "shop",
            "bad",
            &[
                ("default-backend", "errors"),
                ("custom-http-errors", "404,302"),
            ],
            &host_rule("bad.example.com", "/", "web"),
        ),
    ]
    .concat();
    let i = run(&y);
    let c = config(&i);
    let fb = |r: &str| {
        route(&c, r)
            .fallback
            .as_deref()
            .cloned()
            .unwrap_or_default()
    };
    let up = |n: usize| c.upstreams[n].name.clone();
    let paged = fb("shop.paged.1");
    assert_eq!(
        paged.default_backend.map(up).as_deref(),
        Some("shop.errors.8080")
    );
    let ep = paged.error_pages.expect("error pages");
    assert_eq!(ep.codes, [404, 503]);
    assert_eq!(up(ep.upstream), "shop.errors.8080");
    assert!(ep.upstream_answers);
    assert_eq!(
        ep.headers,
        [
            ("x-namespace".to_string(), "shop".to_string()),
            ("x-ingress-name".into(), "paged".into()),
            ("x-service-name".into(), "web".into()),
            ("x-service-port".into(), "80".into()),
        ]
    );
    assert!(!fb("shop.own.1").error_pages.expect("own").upstream_answers);
    let quiet = fb("shop.quiet.1");
    assert!(quiet.default_backend.is_some() && quiet.error_pages.is_none());
    assert_eq!(route(&c, "shop.lost.1").fallback, None);
    assert_eq!(
        warned(
            &i,
            "default-backend Service shop/nowhere is not among the objects"
        ),
        1
    );
    assert_eq!(
        warned(&i, "custom-http-errors without a default-backend"),
        1
    );
    let bad = fb("shop.bad.1");
    assert!(bad.default_backend.is_some() && bad.error_pages.is_none());
    assert_eq!(
        warned(
            &i,
            "custom-http-errors \"404,302\" is not a list of statuses"
        ),
        1
    );
    assert!(denied_routes(&i).is_empty(), "{:?}", denied_routes(&i));
}

/// `ssl-passthrough` with `--enable-ssl-passthrough`: each host's TLS goes to its `/` path's
/// backend; a wildcard host or one without `/` is named and not passed through; without the
/// flag the annotation is ignored, as by ingress-nginx.
#[test]
fn ssl_passthrough_passes_each_hosts_tls_to_its_root_backend() {
    let tls = "tls:\n- hosts: [vault.example.com]\n  secretName: v-tls\n";
    let passthrough = [("ssl-passthrough", "true"), ("backend-protocol", "HTTPS")];
    let y = [
        ing(
            "sec",
            "vault",
            &passthrough,
            &format!(
                "{tls}rules:\n- host: vault.example.com\n  http:\n    paths:\n    - {{path: /, pathType: Prefix, backend: {{service: {{name: vault, port: {{number: 8200}}}}}}}}\n    - {{path: /ui, pathType: Prefix, backend: {{service: {{name: ui, port: {{number: 80}}}}}}}}\n"
            ),
        ),
        ing("sec", "wild", &passthrough, &host_rule("\"*.w.example.com\"", "/", "w")),
        ing("sec", "noroot", &passthrough, &host_rule("x.example.com", "/app", "x")),
    ]
    .concat();
    let on = Options {
        ssl_passthrough: true,
        ..Options::default()
    };
    let i = run_with(&y, &on);
    let c = config(&i);
    assert_eq!(c.tls_passthrough.len(), 1, "{}", i.toml);
    let p = &c.tls_passthrough[0];
    assert_eq!(p.hosts, ["vault.example.com"]);
    let up = &c.upstreams[p.upstream];
    assert_eq!(up.name, "sec.vault.8200");
    assert!(up.tls.is_none(), "the TCP relay speaks no TLS of its own");
    assert_eq!(warned(&i, "only the host's / path is passed through"), 1);
    assert_eq!(warned(&i, "a wildcard host is never passed through"), 1);
    assert_eq!(warned(&i, "the host has no / path"), 1);
    assert!(denied_routes(&i).is_empty());
    let off = run(&y);
    assert!(config(&off).tls_passthrough.is_empty());
    assert_eq!(
        warned(&off, "ssl-passthrough without --enable-ssl-passthrough"),
        3
    );
}
