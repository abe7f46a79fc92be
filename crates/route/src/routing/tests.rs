use super::*;

fn h(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in pairs {
        m.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            v.parse().expect("value"),
        );
    }
    m
}

#[test]
fn tiers_keep_a_known_host_on_its_own_routes() {
    let mut hosts = Hosts::default();
    hosts.exact.insert("api.example.com".into(), Ports::All);
    hosts.wildcard.insert("example.com".into(), Ports::All);
    let t = |host| hosts.tier(Some(host), None, None, false);
    assert_eq!(t("api.example.com"), Tier::Exact);
    assert_eq!(t("www.example.com"), Tier::Wildcard);
    // One label only: neither the parent nor a deeper name.
    assert_eq!(t("example.com"), Tier::None);
    assert_eq!(t("a.b.example.com"), Tier::None);
    assert_eq!(t(".example.com"), Tier::None);
    assert_eq!(hosts.tier(None, None, None, false), Tier::None);
    assert_eq!(
        hosts.tier(Some("api.example.com"), None, None, true),
        Tier::Any
    );

    let wild = Some("*.example.com");
    assert!(Tier::Wildcard.admits(wild, Some("x.example.com")));
    assert!(!Tier::Wildcard.admits(wild, Some("x.y.example.com")));
    assert!(!Tier::Wildcard.admits(None, Some("x.example.com")));
    assert!(!Tier::Exact.admits(None, Some("api.example.com")));
    assert!(Tier::Any.admits(None, Some("api.example.com")));
    assert!(Tier::Any.admits(wild, Some("api.example.com")));
    assert!(!Tier::Any.admits(Some("other.example.com"), Some("api.example.com")));
}

#[test]
fn a_wildcard_of_any_depth_takes_every_name_below_and_ports_keep_listeners_apart() {
    let mut hosts = Hosts::default();
    hosts
        .deep
        .insert("example.com".into(), Ports::Some(vec![(8080, None)]));
    hosts
        .exact
        .insert("api.example.com".into(), Ports::Some(vec![(9090, None)]));
    let t = |host, port| hosts.tier(Some(host), Some(port), None, false);
    assert_eq!(t("a.example.com", 8080), Tier::Wildcard);
    assert_eq!(t("a.b.example.com", 8080), Tier::Wildcard);
    assert_eq!(t("example.com", 8080), Tier::None);
    // api.example.com has routes on 9090 only: on 8080 the wildcard's routes take it.
    assert_eq!(t("api.example.com", 8080), Tier::Wildcard);
    assert_eq!(t("api.example.com", 9090), Tier::Exact);
    assert_eq!(t("a.example.com", 9090), Tier::None);
    let deep = Some("**.example.com");
    assert!(Tier::Wildcard.admits(deep, Some("x.y.example.com")));
    assert!(Tier::Wildcard.admits(deep, Some("x.example.com")));
    assert!(!Tier::Wildcard.admits(deep, Some("example.com")));
    assert!(!Tier::Wildcard.admits(deep, Some("xexample.com")));
    assert!(!Tier::Wildcard.admits(deep, Some(".example.com")));
}

const RULES: PathRules = PathRules {
    merge_slashes: true,
    escaped_slashes: tollgate_config::model::EscapedSlashes::Reject,
};

fn regex(re: &str, replace: &str) -> RewriteRt {
    RewriteRt::new(Some(&Rewrite::Regex {
        regex: re.into(),
        replace: replace.into(),
    }))
    .expect("valid")
    .expect("some")
}

fn target(
    rw: &RewriteRt,
    path: &str,
    query: Option<&str>,
) -> Result<Option<String>, RewriteRefusal> {
    rw.apply(path, query, RULES).map(|r| r.map(|r| r.target))
}

fn ok(rw: &RewriteRt, path: &str, query: Option<&str>) -> String {
    target(rw, path, query)
        .expect("allowed")
        .expect("rewritten")
}

#[test]
fn rewrites_keep_a_leading_slash_and_the_query() {
    let re = regex("^/something(/|$)(.*)", "/$2");
    assert_eq!(ok(&re, "/something", None), "/");
    assert_eq!(ok(&re, "/something/new", Some("a=1")), "/new?a=1");
    // No match: the request goes as it came.
    assert_eq!(target(&re, "/other", None), Ok(None));
    let strip = RewriteRt::Strip("/api".into());
    assert_eq!(ok(&strip, "/api/v1/x", None), "/v1/x");
    assert_eq!(ok(&strip, "/api", Some("q")), "/?q");
    // Only whole segments: /apix is not under /api.
    assert_eq!(ok(&strip, "/apix", None), "/apix");
    let q = regex("^/u/(\\w+)", "/user?id=$1");
    assert_eq!(ok(&q, "/u/ann", Some("x=2")), "/user?id=ann&x=2");
    let r = q
        .apply("/u/ann", Some("x=2"), RULES)
        .expect("ok")
        .expect("some");
    assert_eq!((r.path(), r.query()), ("/user", Some("id=ann&x=2")));
    let named = regex("^/v(?P<ver>[0-9]+)/(?P<rest>.*)", "/api/${rest}?v=$ver");
    assert_eq!(ok(&named, "/v2/items", None), "/api/items?v=2");
}

#[test]
fn path_text_never_becomes_query_parameters() {
    // The case: /q/x&api_key=K must not give the upstream an api_key.
    let q = regex("^/q/([^/]*)", "/search?term=$1");
    let r = q
        .apply("/q/x&api_key=K", None, RULES)
        .expect("ok")
        .expect("some");
    assert_eq!(r.target, "/search?term=x%26api_key%3DK");
    let names: Vec<_> = form_urlencoded::parse(r.query().unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    assert_eq!(names, vec![("term".to_string(), "x&api_key=K".to_string())]);
    // What the match left goes to the query escaped too.
    assert_eq!(ok(&q, "/q/a/b=c&d", None), "/search?term=a/b%3Dc%26d");
    // A plus stays a plus, an escape stays one escape.
    assert_eq!(ok(&q, "/q/a+b%20c", None), "/search?term=a%2Bb%20c");
    // A parameter the template writes and the client gives too: refused.
    assert_eq!(
        target(&q, "/q/x", Some("term=y")),
        Err(RewriteRefusal::Duplicate("term".into()))
    );
    assert_eq!(
        target(&q, "/q/x", Some("a=1&%74erm=y")),
        Err(RewriteRefusal::Duplicate("term".into())),
        "names are compared decoded"
    );
    // Other parameters are added after the template's.
    assert_eq!(
        ok(&q, "/q/x", Some("api_key=K")),
        "/search?term=x&api_key=K"
    );
}

#[test]
fn a_rewrite_cannot_climb_or_write_what_a_client_could_not() {
    let app = regex("^/app-([^/]*)/(.*)", "/apps/$1/$2");
    assert_eq!(ok(&app, "/app-x/y", None), "/apps/x/y");
    assert_eq!(
        target(&app, "/app-../admin/secret", None),
        Err(RewriteRefusal::DotSegment)
    );
    assert_eq!(
        target(&app, "/app-./admin", None),
        Err(RewriteRefusal::DotSegment)
    );
    assert_eq!(
        target(&app, "/app-%2e%2E/admin", None),
        Err(RewriteRefusal::DotSegment),
        "escaped dots climb too"
    );
    assert_eq!(
        ok(&app, "/app-.../x", None),
        "/apps/.../x",
        "three dots is a name"
    );
    // Dot segments an upstream resolves although the gateway's rules do not: `..;params`
    // (Tomcat, Jetty, Spring) and `..` between escaped slashes.
    assert_eq!(
        target(&app, "/app-..;/admin/secret", None),
        Err(RewriteRefusal::DotSegment)
    );
    assert_eq!(
        target(&app, "/app-..;x=1/admin", None),
        Err(RewriteRefusal::DotSegment)
    );
    assert_eq!(ok(&app, "/app-a;b/c", None), "/apps/a;b/c");
    let keep = PathRules {
        merge_slashes: true,
        escaped_slashes: tollgate_config::model::EscapedSlashes::Keep,
    };
    let svc = RewriteRt::Strip("/svc".into());
    assert_eq!(
        svc.apply("/svc/%2E%2E%2Fadmin", None, keep),
        Err(RewriteRefusal::DotSegment)
    );
    assert_eq!(
        svc.apply("/svc/a%5C..%5Cadmin", None, keep),
        Err(RewriteRefusal::DotSegment)
    );
    // Slashes the template doubles are merged: never a network-path reference.
    let api = regex("^/api(.*)", "/$1");
    assert_eq!(ok(&api, "/api/evil.com", None), "/evil.com");
    // An escape the client's path would be refused for is refused here too.
    let lit = regex("^/x", "/a%2Fb");
    assert_eq!(
        target(&lit, "/x", None),
        Err(RewriteRefusal::Path(Refusal::EncodedSlash))
    );
}

#[test]
fn templates_split_as_the_regex_crate_reads_them() {
    // `$1_` is the group named "1_", which does not exist: refused at load.
    assert!(RewriteRt::new(Some(&Rewrite::Regex {
        regex: "^/(a)".into(),
        replace: "/$1_".into(),
    }))
    .is_err());
    let re2 = regex("^/(a)(b)", "/$1$$-${2}x-$");
    assert_eq!(ok(&re2, "/ab", None), "/a$-bx-$");
}

#[test]
fn a_canary_is_chosen_by_header_then_cookie_then_weight() {
    let c = CanaryRt::new(&Canary {
        upstream: 1,
        weight: 20,
        weight_total: 100,
        header: Some("x-canary".into()),
        header_value: None,
        header_pattern: None,
        cookie: Some("canary".into()),
    });
    let never_roll = |_| 99;
    let always_roll = |_| 0;
    assert!(c.chooses(&h(&[("x-canary", "always")]), never_roll));
    assert!(!c.chooses(&h(&[("x-canary", "never")]), always_roll));
    // Another value is left to the cookie, then the weight.
    assert!(c.chooses(
        &h(&[("x-canary", "maybe"), ("cookie", "a=1; canary=always")]),
        never_roll
    ));
    assert!(!c.chooses(&h(&[("cookie", "canary=never")]), always_roll));
    assert!(c.chooses(
        &h(&[("cookie", "x=1"), ("cookie", "canary=always")]),
        never_roll
    ));
    assert!(c.chooses(&h(&[]), |_| 19));
    assert!(!c.chooses(&h(&[]), |_| 20));
    // A cookie whose name only ends like it does not count.
    assert!(!c.chooses(&h(&[("cookie", "notcanary=always")]), never_roll));

    let by_value = CanaryRt::new(&Canary {
        upstream: 1,
        weight: 0,
        weight_total: 100,
        header: Some("x-region".into()),
        header_value: Some("eu-west".into()),
        header_pattern: None,
        cookie: None,
    });
    assert!(by_value.chooses(&h(&[("x-region", "eu-west")]), never_roll));
    assert!(!by_value.chooses(&h(&[("x-region", "always")]), always_roll));
    assert!(!by_value.chooses(&h(&[]), always_roll));
    // Two fields are one value, as nginx's $http_x_region: neither alone chooses.
    assert!(!by_value.chooses(
        &h(&[("x-region", "eu-west"), ("x-region", "us-east")]),
        never_roll
    ));
    assert!(!c.chooses(
        &h(&[("x-canary", "always"), ("x-canary", "never")]),
        never_roll
    ));
}

/// `header_pattern` (ingress-nginx's canary-by-header-pattern): unanchored, case-sensitive;
/// "always" and "never" are plain values; a value it does not match is left to the cookie
/// and the weight.
#[test]
fn a_canary_header_pattern_matches_anywhere_in_the_value() {
    let c = CanaryRt::new(&Canary {
        upstream: 1,
        weight: 0,
        weight_total: 100,
        header: Some("x-user".into()),
        header_value: None,
        header_pattern: Some("^(alice|bob)$|beta".into()),
        cookie: Some("canary".into()),
    });
    let never_roll = |_| 99;
    assert!(c.chooses(&h(&[("x-user", "alice")]), never_roll));
    assert!(c.chooses(&h(&[("x-user", "team-beta-7")]), never_roll));
    assert!(!c.chooses(&h(&[("x-user", "alice2")]), never_roll));
    assert!(!c.chooses(&h(&[("x-user", "ALICE")]), never_roll));
    assert!(!c.chooses(&h(&[("x-user", "always")]), never_roll));
    assert!(!c.chooses(&h(&[("x-user", "")]), never_roll));
    // Unmatched: the cookie still decides; "never" in the header keeps nothing off.
    assert!(c.chooses(
        &h(&[("x-user", "never"), ("cookie", "canary=always")]),
        never_roll
    ));
    // A duplicate is joined: "alice, mallory" is not "alice".
    assert!(!c.chooses(
        &h(&[("x-user", "alice"), ("x-user", "mallory")]),
        never_roll
    ));
    assert!(c.chooses(&h(&[("x-user", "mallory"), ("x-user", "beta")]), never_roll));
}
