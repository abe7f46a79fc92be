//! One fixture per kind of config error, with its exact message, and the defaults.

use std::time::Duration;
use tollgate_config::*;

fn problems(toml: &str) -> Vec<String> {
    match parse_str(toml, "f.toml") {
        Ok(_) => Vec::new(),
        Err(e) => e.lines(),
    }
}

fn ok(toml: &str) -> Config {
    match parse_str(toml, "f.toml") {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn an_empty_file_gets_the_documented_defaults() {
    let c = ok("");
    assert_eq!(
        c.server.listen,
        vec!["127.0.0.1:8080".parse().expect("addr")]
    );
    assert_eq!(c.server.admin, None);
    assert_eq!(c.server.ipv6_prefix, 64);
    assert_eq!(c.server.grace_period, Duration::from_secs(5));
    assert!(c.server.h2c && !c.server.shadow && !c.server.access_log);
    assert!(c.routes.is_empty() && c.limits.is_empty() && c.upstreams.is_empty());
}

#[test]
fn limits_get_their_defaults_and_composite_keys() {
    let c = ok(r#"
[limits.a]
key = ["client_ip", "header:X-API-Key", "query:page", "route"]
rate = "5/m"
"#);
    let l = &c.limits[0];
    assert_eq!(l.burst, 5, "burst defaults to N");
    assert_eq!(l.algorithm, tollgate_limit::AlgorithmKind::TokenBucket);
    assert_eq!(l.scope, Scope::Local);
    assert_eq!(l.max_keys, 100_000);
    assert_eq!(
        l.key,
        vec![
            KeySource::ClientIp,
            KeySource::Header("x-api-key".into()),
            KeySource::Query("page".into()),
            KeySource::Route
        ]
    );
}

#[test]
fn each_error_names_its_key_and_line() {
    let cases: &[(&str, &str)] = &[
        ("[server]\nthreads = 0\n", "f.toml: server.threads: must be between 1 and 1024, got 0 (line 2)"),
        ("[server]\nlisten = [\"localhost\"]\n", "f.toml: server.listen[0]: \"localhost\" is not an address: write IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::1]:8080\" (line 2)"),
        ("[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", "f.toml: server.trusted_proxies[0]: \"10.0.0.0/33\" is not an IP address or CIDR, e.g. \"10.0.0.0/8\" or \"2001:db8::/32\" (line 2)"),
        ("[server]\nipv6_prefix = 129\n", "f.toml: server.ipv6_prefix: must be between 1 and 128, got 129 (line 2)"),
        ("[server]\ngrace_period = \"5 minutes\"\n", "f.toml: server.grace_period: \"5 minutes\": unknown unit \" minutes\" (use ns, us, ms, s, m, h or d) (line 2)"),
        ("[server]\nshadow = \"yes\"\n", "f.toml: server.shadow: expected true or false, found string (line 2)"),
        ("[redis]\nurl = \"redis://127.0.0.1\"\n", "f.toml: redis: Redis-backed global limits are not built yet in this version: remove [redis] and use scope = \"local\" (line 1)"),
        ("[limits.a]\nkey = \"client_ip\"\n", "f.toml: limits.a: missing key \"rate\" (e.g. rate = \"10/s\") (line 1)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10000/month\"\n", "f.toml: limits.a.quota: quotas are not built yet in this version: use rate (and burst) instead of quota (line 3)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nscope = \"global\"\n", "f.toml: limits.a.scope: scope \"global\" (Redis) is not built yet in this version: use \"local\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\naction = \"tarpit\"\n", "f.toml: limits.a.action: action \"tarpit\" is not built yet in this version: use \"reject\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nburst = 0\n", "f.toml: limits.a.burst: must be between 1 and 1000000000, got 0 (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nalgorithm = \"leaky\"\n", "f.toml: limits.a.algorithm: unknown algorithm \"leaky\" (one of: token_bucket, gcra, sliding_window, fixed_window, sliding_log, leaky_bucket) (line 4)"),
        ("[limits.a]\nkey = \"jwt:sub\"\nrate = \"1/s\"\n", "f.toml: limits.a.key: \"jwt:sub\": jwt: and body: key sources are not built yet in this version (line 2)"),
        ("[limits.a]\nkey = \"header:Bad Name\"\nrate = \"1/s\"\n", "f.toml: limits.a.key: \"header:Bad Name\": header:NAME needs a valid header name (line 2)"),
        ("[upstreams.a]\nconnect_timeout = \"1s\"\n", "f.toml: upstreams.a: missing key \"targets\" (line 1)"),
        ("[upstreams.a]\ntargets = []\n", "f.toml: upstreams.a.targets: needs at least one target (\"host:port\") (line 2)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\nhealth_check = { interval = \"1s\", path = \"/\" }\n", "f.toml: upstreams.a.health_check.path: unknown key (line 3)"),
        ("[[routes]]\nname = \"x\"\nrespond = { status = 200 }\n", "f.toml: routes[0]: missing key \"path_prefix\" (line 1)"),
        ("[[routes]]\npath_prefix = \"/\"\n", "f.toml: routes[0]: missing key \"upstream\" or \"respond\" (line 1)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nrespond = { status = 200 }\n", "f.toml: routes[0].respond: a route has either upstream or respond, not both (line 6)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 99 }\n", "f.toml: routes[0].respond.status: must be between 200 and 599, got 99 (line 3)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\ntarpit = { delay = [\"1s\", \"3s\"] }\n", "f.toml: routes[0].tarpit: tarpits are not built yet in this version: remove tarpit (line 4)"),
    ];
    for (toml, want) in cases {
        assert_eq!(problems(toml), vec![want.to_string()], "for:\n{toml}");
    }
}

#[test]
fn duplicate_route_names_and_repeated_limits_are_errors() {
    let p = problems(
        r#"
[limits.a]
key = "global"
rate = "1/s"
[[routes]]
name = "r"
path_prefix = "/"
respond = { status = 200 }
limits = ["a", "a"]
[[routes]]
name = "r"
path_prefix = "/x"
respond = { status = 200 }
"#,
    );
    assert_eq!(
        p,
        vec![
            "f.toml: routes[0].limits[1]: limit \"a\" is listed twice (line 9)".to_string(),
            "f.toml: routes[1].name: route name \"r\" is already used by routes[0] (line 11)"
                .to_string(),
        ]
    );
}

#[test]
fn invalid_toml_is_reported_with_its_line() {
    let p = problems("[server]\nlisten = [\"127.0.0.1:1\"\n");
    assert_eq!(p.len(), 1);
    assert!(
        p[0].starts_with("f.toml: (document): not valid TOML"),
        "{p:?}"
    );
    assert!(
        p[0].ends_with("(line 3)") || p[0].ends_with("(line 2)"),
        "{p:?}"
    );
}

#[test]
fn unchanged_limits_keep_their_state_across_reloads() {
    let a = ok("[limits.a]\nkey = \"global\"\nrate = \"1/s\"\nshadow = false\n");
    let b = ok("[limits.a]\nkey = \"global\"\nrate = \"1/s\"\nshadow = true\n");
    let c = ok("[limits.a]\nkey = \"global\"\nrate = \"2/s\"\n");
    assert!(
        a.limits[0].same_state_as(&b.limits[0]),
        "shadow does not change the state"
    );
    assert!(!a.limits[0].same_state_as(&c.limits[0]));
}

#[test]
fn at_most_sixteen_limits_per_route() {
    let mut toml = String::new();
    let mut names = Vec::new();
    for i in 0..17 {
        toml.push_str(&format!(
            "[limits.l{i}]\nkey = \"global\"\nrate = \"1/s\"\n"
        ));
        names.push(format!("\"l{i}\""));
    }
    toml.push_str(&format!(
        "[[routes]]\npath_prefix = \"/\"\nrespond = {{ status = 200 }}\nlimits = [{}]\n",
        names.join(", ")
    ));
    let p = problems(&toml);
    assert_eq!(p.len(), 1);
    assert!(
        p[0].contains("routes[0].limits: at most 16 limits per route, got 17"),
        "{p:?}"
    );
}
