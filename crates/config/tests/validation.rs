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
fn redis_settings_and_global_limits() {
    let c = ok(r#"
[redis]
cluster = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]
on_error = "local"
instances = 3
[limits.inherits]
key = "global"
rate = "100/s"
scope = "global"
[limits.own]
key = "client_ip"
rate = "10/s"
scope = "global"
on_error = "closed"
algorithm = "leaky_bucket"
delay = 4
[limits.here]
key = "client_ip"
rate = "10/s"
algorithm = "sliding_window"
"#);
    let r = c.redis.as_ref().expect("redis");
    assert_eq!(
        r.target,
        RedisTarget::Cluster(vec![
            "redis://10.0.0.1:7000".into(),
            "redis://10.0.0.2:7000".into()
        ])
    );
    assert_eq!(r.timeout, Duration::from_millis(20), "default budget");
    assert_eq!(
        (r.on_error, r.instances, r.verdict_cache),
        (OnError::Local, 3, 100_000)
    );
    assert_eq!(
        (c.limits[0].scope, c.limits[0].on_error),
        (Scope::Global, OnError::Local)
    );
    assert_eq!(
        (c.limits[1].on_error, c.limits[1].delay),
        (OnError::Closed, 4)
    );
    assert_eq!(c.limits[2].scope, Scope::Local);
    let single = ok("[redis]\nurl = \"redis://:secret@127.0.0.1:6379/2\"\ntimeout = \"50ms\"\n");
    let r = single.redis.expect("redis");
    assert_eq!(
        r.target,
        RedisTarget::Url("redis://:secret@127.0.0.1:6379/2".into())
    );
    assert_eq!(
        (r.timeout, r.on_error),
        (Duration::from_millis(50), OnError::Open)
    );
}

#[test]
fn quotas_on_calendar_periods() {
    let c = ok("[limits.q]\nkey = \"header:x-api-key\"\nquota = \"10_000/month\"\nutc_offset = \"+02:00\"\nupgrade_url = \"https://example.com/up\"\n");
    let l = &c.limits[0];
    assert_eq!(l.algorithm, tollgate_limit::AlgorithmKind::Quota);
    assert_eq!((l.burst, l.rate.count()), (10_000, 10_000));
    assert_eq!(
        l.calendar,
        Some(tollgate_limit::Calendar {
            unit: tollgate_limit::CalendarUnit::Month,
            offset_secs: 7200
        })
    );
    assert_eq!(l.upgrade_url.as_deref(), Some("https://example.com/up"));
    let west = ok("[limits.q]\nkey = \"global\"\nquota = \"5/week\"\nutc_offset = \"-05:30\"\n");
    assert_eq!(
        west.limits[0].calendar.map(|c| c.offset_secs),
        Some(-(5 * 3600 + 1800))
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
        ("[redis]\ntimeout = \"5ms\"\n", "f.toml: redis: missing key \"url\" (e.g. url = \"redis://127.0.0.1:6379\") or \"cluster\" (line 1)"),
        ("[redis]\nurl = \"redis://a:1\"\ncluster = [\"redis://b:1\"]\n", "f.toml: redis.url: set either url or cluster, not both (line 2)"),
        ("[redis]\nurl = \"rediss://a:1\"\n", "f.toml: redis.url: TLS to Redis (rediss://) is not supported: reach Redis over a private network or a local TLS tunnel (line 2)"),
        ("[redis]\ncluster = [\"redis://a:1\", \"http://b\"]\n", "f.toml: redis.cluster[1]: \"http://b\" is not a Redis URL: write redis://HOST:PORT (optionally redis://:PASSWORD@HOST:PORT/DB) (line 2)"),
        ("[redis]\nurl = \"redis://a:1\"\ntimeout = \"30s\"\n", "f.toml: redis.timeout: must be between 1ms and 10s (line 3)"),
        ("[redis]\nurl = \"redis://a:1\"\non_error = \"retry\"\n", "f.toml: redis.on_error: unknown on_error \"retry\" (open, closed or local) (line 3)"),
        ("[redis]\nurl = \"redis://a:1\"\ninstances = 0\n", "f.toml: redis.instances: must be between 1 and 10000, got 0 (line 3)"),
        ("[redis]\nurl = \"redis://a:1\"\npool = 3\n", "f.toml: redis.pool: unknown key (line 3)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\non_error = \"closed\"\n", "f.toml: limits.a.on_error: on_error applies only to scope = \"global\" (a local limit never fails) (line 4)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"client_ip\"\nrate = \"200000/d\"\nalgorithm = \"sliding_window\"\nscope = \"global\"\n", "f.toml: limits.a.rate: too large for a global sliding_window (burst x window must stay below 2^53 microseconds): use a shorter period, a smaller burst, or fixed_window (line 5)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"2000000/s\"\nalgorithm = \"gcra\"\nscope = \"global\"\n", "f.toml: limits.a.rate: a global gcra or leaky_bucket decides in whole microseconds: at most 1000000/s per key (use token_bucket for more) (line 5)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\ndelay = 2\n", "f.toml: limits.a.delay: delay applies only to algorithm = \"leaky_bucket\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nalgorithm = \"sliding_log\"\nburst = 200000\n", "f.toml: limits.a.burst: must be between 1 and 100000, got 200000 (line 5)"),
        ("[limits.a]\nkey = \"client_ip\"\n", "f.toml: limits.a: missing key \"rate\" (e.g. rate = \"10/s\") or \"quota\" (line 1)"),
        ("[limits.a]\nkey = \"client_ip\"\nplan = \"rate\"\n", "f.toml: limits.a.plan: plan reads the caller's plan: add a [plans] section (line 3)"),
        ("[plans]\ndefault = \"free\"\n[plans.free]\nrate = \"1/s\"\n[limits.a]\nkey = \"client_ip\"\nplan = \"rate\"\nrate = \"2/s\"\n", "f.toml: limits.a.rate: rate comes from the caller's plan here (plan = ...): remove it (line 8)"),
        ("[limits.a]\nkey = \"body:\"\nrate = \"1/s\"\n", "f.toml: limits.a.key: \"body:\": body:FIELD needs a field name, e.g. body:username (line 2)"),
        ("[server]\nkey_body_limit = 100000\n", "f.toml: server.key_body_limit: must be between 1 and 65536, got 100000 (line 2)"),
        ("[plans]\ndefault = \"gold\"\n[plans.free]\nrate = \"1/s\"\n", "f.toml: plans.default: unknown plan \"gold\" (defined: free) (line 2)"),
        ("[plans]\n[plans.free]\nrate = \"1/s\"\n", "f.toml: plans: missing key \"default\": the plan of callers no rule names (line 1)"),
        ("[plans]\ndefault = \"free\"\n[plans.free]\nburst = 3\n", "f.toml: plans.free: a plan needs a rate, a quota or both (line 3)"),
        ("[plans]\ndefault = \"free\"\ntenant = \"client_ip\"\n[plans.free]\nrate = \"1/s\"\n", "f.toml: plans.tenant: a plan or tenant is read from header:NAME, query:NAME or jwt:CLAIM (line 3)"),
        ("[plans]\ndefault = \"free\"\ntenant = \"header:x-tenant\"\n[plans.tenants]\nacme = \"gold\"\n[plans.free]\nrate = \"1/s\"\n", "f.toml: plans.tenants.acme: unknown plan \"gold\" (defined: free) (line 5)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10000/fortnight\"\n", "f.toml: limits.a.quota: \"10000/fortnight\" is not a quota: write N/day, N/week, N/month or N/year, e.g. \"10000/month\" (line 3)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10/day\"\nrate = \"1/s\"\n", "f.toml: limits.a.rate: set either rate or quota, not both (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10/day\"\nburst = 5\n", "f.toml: limits.a.burst: burst does not apply to a quota (N per calendar period) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10/day\"\nutc_offset = \"+25:00\"\n", "f.toml: limits.a.utc_offset: \"+25:00\" is not a UTC offset: write \"+HH:MM\" or \"-HH:MM\", e.g. \"+02:00\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nupgrade_url = \"https://x\"\n", "f.toml: limits.a.upgrade_url: upgrade_url applies only to a quota (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10/day\"\noverage = \"lenient\"\n", "f.toml: limits.a.overage: unknown overage \"lenient\" (hard, soft, overage or throttle) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10/day\"\noverage = \"throttle\"\n", "f.toml: limits.a.overage: overage \"throttle\" needs throttle_rate (e.g. throttle_rate = \"1/s\") (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nquota = \"10/day\"\nthrottle_rate = \"1/s\"\n", "f.toml: limits.a.throttle_rate: throttle_rate applies only to overage = \"throttle\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\noverage = \"soft\"\n", "f.toml: limits.a.overage: overage applies only to a quota (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nscope = \"global\"\n", "f.toml: limits.a.scope: scope \"global\" keeps state in Redis: add a [redis] section (url or cluster) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\naction = \"tarpit\"\n", "f.toml: limits.a.action: action \"tarpit\" is not built yet in this version: use \"reject\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nburst = 0\n", "f.toml: limits.a.burst: must be between 1 and 1000000000, got 0 (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nalgorithm = \"leaky\"\n", "f.toml: limits.a.algorithm: unknown algorithm \"leaky\" (one of: token_bucket, gcra, sliding_window, fixed_window, sliding_log, leaky_bucket) (line 4)"),
        ("[limits.a]\nkey = \"jwt:sub\"\nrate = \"1/s\"\n", "f.toml: limits.a.key: \"jwt:sub\" reads a verified bearer token: add a [jwt] section (keys to verify it with) (line 2)"),
        ("[jwt]\nleeway = \"5s\"\n", "f.toml: jwt: no key to verify tokens with: set secret (or secret_env), public_keys or jwks_file (line 1)"),
        ("[jwt]\nsecret = \"s\"\nalgorithms = [\"none\"]\n", "f.toml: jwt.algorithms[0]: \"none\" is never accepted: an unsigned token proves nothing (line 3)"),
        ("[jwt]\nsecret = \"s\"\nalgorithms = [\"HS256\", \"RS256\"]\n", "f.toml: jwt.algorithms[1]: RS256 is accepted but no key for it is configured (secret for HS*, public_keys or jwks_file for RS*/PS*/ES*) (line 3)"),
        ("[jwt]\npublic_keys = [\"/nonexistent/key.pem\"]\n", "f.toml: jwt.public_keys[0]: cannot read \"/nonexistent/key.pem\": No such file or directory (os error 2) (line 2)"),
        ("[jwt]\nsecret_env = \"TOLLGATE_TEST_UNSET_VARIABLE\"\n", "f.toml: jwt.secret_env: the environment variable TOLLGATE_TEST_UNSET_VARIABLE is not set (line 2)"),
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
        p[0].contains("routes[0].limits: at most 16 limits per route (a plan limit counts once per plan), got 17"),
        "{p:?}"
    );
}
