//! One fixture per kind of config error, with its exact message, and the defaults.

use std::time::Duration;
use tollgate_config::model::*;
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
    // Local by default (issue 25): a protection layer does not fail open unless told to.
    assert_eq!(
        (r.timeout, r.on_error, r.max_in_flight),
        (Duration::from_millis(50), OnError::Local, 128)
    );
    let bounded = ok("[redis]\nurl = \"redis://127.0.0.1\"\nmax_in_flight = 16\n");
    assert_eq!(bounded.redis.expect("redis").max_in_flight, 16);
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
        ("[redis]\nurl = \"rediss://a:1#insecure\"\n", "f.toml: redis.url: \"rediss://a:1#insecure\": a fragment (#...) is not supported: the server's certificate is always verified (use ca = \"FILE\" for a private CA) (line 2)"),
        ("[redis]\ncluster = [\"redis://a:1\", \"http://b\"]\n", "f.toml: redis.cluster[1]: \"http://b\" is not a Redis URL: write redis://HOST:PORT or rediss://HOST:PORT (TLS), optionally with USER:PASSWORD@ and /DB (line 2)"),
        ("[redis]\nurl = \"redis://a:1\"\ntimeout = \"30s\"\n", "f.toml: redis.timeout: must be between 1ms and 10s (line 3)"),
        ("[redis]\nurl = \"redis://a:1\"\non_error = \"retry\"\n", "f.toml: redis.on_error: unknown on_error \"retry\" (open, closed, local or fail) (line 3)"),
        ("[redis]\nurl = \"redis://a:1\"\ninstances = 0\n", "f.toml: redis.instances: must be between 1 and 10000, got 0 (line 3)"),
        ("[redis]\nurl = \"redis://a:1\"\npool = 3\n", "f.toml: redis.pool: unknown key (line 3)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\non_error = \"closed\"\n", "f.toml: limits.a.on_error: on_error applies only to scope = \"global\" (a local limit never fails) (line 4)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"client_ip\"\nrate = \"200000/d\"\nalgorithm = \"sliding_window\"\nscope = \"global\"\n", "f.toml: limits.a.rate: too large for a global sliding_window (burst x window must stay below 2^53 microseconds): use a shorter period, a smaller burst, or fixed_window (line 5)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"9007199254740992/s\"\nalgorithm = \"gcra\"\nscope = \"global\"\n", "f.toml: limits.a.rate: too large for a global limit: the count 9007199254740992 is above 2^53 - 1 (9007199254740991), the largest integer a Redis script holds exactly (line 5)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nquota = \"9007199254740992/month\"\nscope = \"global\"\n", "f.toml: limits.a.quota: too large for a global limit: the count 9007199254740992 is above 2^53 - 1 (9007199254740991), the largest integer a Redis script holds exactly (line 5)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"1/d\"\nburst = 1000000000\nalgorithm = \"fixed_window\"\nscope = \"global\"\n", "f.toml: limits.a.burst: too large for a global limit: burst / rate spans 2737850 years, over the ~142 years (2^52 microseconds) a Redis script counts exactly: use a shorter period or a smaller burst (line 6)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"10/s\"\nsync = \"lease\"\n", "f.toml: limits.a.sync: sync applies only to scope = \"global\" (a local limit decides in this process already) (line 6)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"10/s\"\nscope = \"global\"\nsync = \"eventual\"\n", "f.toml: limits.a.sync: unknown sync \"eventual\" (exact or lease) (line 7)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"10/s\"\nscope = \"global\"\nalgorithm = \"sliding_log\"\nsync = \"lease\"\n", "f.toml: limits.a.sync: sync = \"lease\" does not apply to sliding_log: it decides each request on its own (use token_bucket, gcra, fixed_window or sliding_window) (line 8)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"10/s\"\nscope = \"global\"\nlease_max = 5\n", "f.toml: limits.a.lease_max: lease_max applies only to sync = \"lease\" (line 7)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"10/s\"\nscope = \"global\"\nsync = \"lease\"\nlease_max = 11\n", "f.toml: limits.a.lease_max: at most the limit's burst (a lease takes units the burst holds) (line 8)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"10/s\"\nscope = \"global\"\nsync = \"lease\"\nlease_max = 0\n", "f.toml: limits.a.lease_max: must be between 1 and 1000000000, got 0 (line 8)"),
        ("[redis]\nurl = \"redis://a:1\"\n[limits.a]\nkey = \"global\"\nrate = \"1/d\"\nburst = 53000\nalgorithm = \"leaky_bucket\"\nscope = \"global\"\n", "f.toml: limits.a.burst: too large for a global limit: burst / rate spans 145 years, over the ~142 years (2^52 microseconds) a Redis script counts exactly: use a shorter period or a smaller burst (line 6)"),
        ("[plans]\ndefault = \"free\"\n[plans.free]\nquota = \"9007199254740992/year\"\n", "f.toml: plans.free.quota: too large: the count 9007199254740992 is above 2^53 - 1 (9007199254740991), the largest integer a Redis script holds exactly (line 4)"),
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
        ("[plans]\ndefault = \"free\"\ntenant = \"client_ip\"\n[plans.free]\nrate = \"1/s\"\n", "f.toml: plans.tenant: a plan or tenant is read from header:NAME, query:NAME, jwt:CLAIM or consumer (line 3)"),
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
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\naction = \"drop\"\n", "f.toml: limits.a.action: unknown action \"drop\" (reject, tarpit or challenge) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\naction = \"challenge\"\n", "f.toml: limits.a: action = \"challenge\" needs challenge_url (where the client solves it) (line 1)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nchallenge_url = \"https://x\"\n", "f.toml: limits.a.challenge_url: challenge_url needs action = \"challenge\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\naction = \"challenge\"\nchallenge_url = \"javascript:x\"\n", "f.toml: limits.a.challenge_url: \"javascript:x\" is not an http(s) URL or a path starting with / (line 5)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\ntarpit = { delay = \"1s\" }\n", "f.toml: limits.a.tarpit: tarpit settings need action = \"tarpit\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\naction = \"tarpit\"\ntarpit = { delay = [\"3s\", \"1s\"] }\n", "f.toml: limits.a.tarpit.delay: the shortest delay comes first (line 5)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nblock = [{ after = 10, within = \"1m\" }]\n", "f.toml: limits.a.block[0]: missing key \"for\" (how long a key stays blocked) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nblock = [{ after = 0, within = \"1m\", for = \"5m\" }]\n", "f.toml: limits.a.block[0].after: must be between 1 and 1000000000, got 0 (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nblock = [{ after = 10, within = \"1m\", for = \"5m\", ban = true }]\n", "f.toml: limits.a.block[0].ban: unknown key (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\ncount = \"errors\"\n", "f.toml: limits.a.count: unknown \"errors\" (all: every request counts; failures: only requests answered with a failure_statuses status, e.g. failed logins) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nfailure_statuses = [401]\n", "f.toml: limits.a.failure_statuses: failure_statuses needs count = \"failures\" (line 4)"),
        ("[access]\ndeny = [\"10.0.0.0/33\"]\n", "f.toml: access.deny[0]: \"10.0.0.0/33\" is not an IP address or CIDR, e.g. \"10.0.0.0/8\" or \"2001:db8::/32\" (line 2)"),
        ("[access]\ndeny_user_agents = [\"Bad[Bot\"]\n", "f.toml: access.deny_user_agents[0]: \"Bad[Bot\" is not a valid glob: unclosed character class; missing ']' (line 2)"),
        ("[access]\ndeny_files = [\"/nonexistent/deny.txt\"]\n", "f.toml: access.deny_files[0]: cannot read /nonexistent/deny.txt: No such file or directory (os error 2) (line 2)"),
        ("[access]\ndeny_files = [\"/dev/zero\"]\n", "f.toml: access.deny_files[0]: cannot read /dev/zero: not a regular file (a device, a FIFO or a directory is not read) (line 2)"),
        ("[access]\nblock = [\"1.2.3.4\"]\n", "f.toml: access.block: unknown key (line 2)"),
        ("[access]\nallow_api_keys = [\"sk*\"]\n", "f.toml: access.allow_api_keys[0]: \"sk*\": an API-key pattern needs at least 4 literal characters before its first wildcard (the gateway does not verify keys: a guessable pattern would exempt anyone) (line 2)"),
        ("[server]\nadmin_token = \"short\"\n", "f.toml: server.admin_token: at least 16 characters (it guards the blocks API) (line 2)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nburst = 0\n", "f.toml: limits.a.burst: must be between 1 and 1000000000, got 0 (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nalgorithm = \"leaky\"\n", "f.toml: limits.a.algorithm: unknown algorithm \"leaky\" (one of: token_bucket, gcra, sliding_window, fixed_window, sliding_log, leaky_bucket, concurrency, counting_window) (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nalgorithm = \"concurrency\"\nrate = \"1/s\"\nburst = 2\n", "f.toml: limits.a.rate: a concurrency limit has no rate: burst is the cap of requests in flight (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nalgorithm = \"concurrency\"\n", "f.toml: limits.a: missing key \"burst\": the cap of requests in flight per key (line 1)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nslot_ttl = \"5s\"\n", "f.toml: limits.a.slot_ttl: slot_ttl applies only to algorithm = \"concurrency\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nrate = \"1/s\"\nslot_timeout = \"5s\"\n", "f.toml: limits.a.slot_timeout: slot_timeout applies only to algorithm = \"concurrency\" (line 4)"),
        ("[limits.a]\nkey = \"client_ip\"\nalgorithm = \"concurrency\"\nburst = 2\nslot_timeout = \"0s\"\n", "f.toml: limits.a.slot_timeout: must be between 1s and 1d (line 5)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_regex = \"^/(a)\"\nrewrite = { regex = \"^/(a)\", replace = \"/$2\" }\nupstream = \"u\"\n", "f.toml: routes[0].rewrite.replace: $2: the regex has 1 group(s) (line 5)"),
        ("[redis]\nurl = \"redis://127.0.0.1\"\nmax_in_flight = 1\n", "f.toml: redis.max_in_flight: must be between 4 and 100000, got 1 (line 3)"),
        ("[limits.a]\nkey = \"client_ip\"\nalgorithm = \"concurrency\"\nburst = 2\ncount = \"failures\"\n", "f.toml: limits.a.count: count does not apply to a concurrency limit (a slot is held while its request runs) (line 5)"),
        ("[[routes]]\npath_regex = \"^/(a\"\nrespond = { status = 200 }\n", "f.toml: routes[0].path_regex: not a regular expression: regex parse error: ^/(a ^ error: unclosed group (line 2)"),
        ("[[routes]]\npath_prefix = \"/\"\npath_regex = \"/\"\nrespond = { status = 200 }\n", "f.toml: routes[0].path_regex: a route has one of path_prefix, path_exact and path_regex, not path_prefix and path_regex (line 3)"),
        ("[[routes]]\nhost = \"*.*.example.com\"\npath_prefix = \"/\"\nrespond = { status = 200 }\n", "f.toml: routes[0].host: \"*.*.example.com\" is not a host name (a wildcard is one leading label: \"*.example.com\", or \"**.example.com\" for names of any depth below it) (line 2)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\ncanary = { upstream = \"nope\" }\n", "f.toml: routes[0].canary.upstream: unknown upstream \"nope\" (defined: none) (line 4)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ncanary = { upstream = \"u\", header = \"x-b\", header_pattern = \"(a\" }\n", "f.toml: routes[0].canary.header_pattern: not a regular expression: regex parse error: (a ^ error: unclosed group (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ncanary = { upstream = \"u\", header = \"x-b\", header_value = \"on\", header_pattern = \"on\" }\n", "f.toml: routes[0].canary.header_pattern: header_pattern and header_value: set one of them (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ncanary = { upstream = \"u\", header_pattern = \"on\" }\n", "f.toml: routes[0].canary.header_pattern: header_pattern without header: name the header it matches (line 6)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nrewrite = { regex = \"x\" }\n", "f.toml: routes[0].rewrite: missing key \"replace\" (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nproxy_redirect = \"x\"\n", "f.toml: routes[0].proxy_redirect: a { from, to } table, or a list of them (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nproxy_cookie_path = [{ from = \"\", to = \"/\" }]\n", "f.toml: routes[0].proxy_cookie_path[0].from: an empty from would match everything: name what is replaced (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nproxy_cookie_domain = { from = \"a\", to = \"b;Domain=evil\" }\n", "f.toml: routes[0].proxy_cookie_domain.to: \"b;Domain=evil\" cannot be written in the field: visible ASCII, no spaces, ; or , (line 4)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ndefault_backend = \"nope\"\n", "f.toml: routes[0].default_backend: unknown upstream \"nope\" (defined: u, t) (line 9)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\ndefault_backend = \"u\"\n", "f.toml: routes[0].default_backend: default_backend needs a route with an upstream, not respond (line 4)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nerror_pages = { codes = [404] }\n", "f.toml: routes[0].error_pages: missing key \"upstream\" (the route has no default_backend to ask) (line 9)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nerror_pages = { codes = [302], upstream = \"u\" }\n", "f.toml: routes[0].error_pages.codes[0]: must be between 400 and 599, got 302 (line 9)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nerror_pages = { codes = [], upstream = \"u\" }\n", "f.toml: routes[0].error_pages.codes: a list of statuses, 400 to 599: none given (line 9)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nerror_pages = { codes = [503], upstream = \"t\" }\n", "f.toml: routes[0].error_pages: upstream \"t\" is spoken to over TLS or HTTP/2: error pages are asked over plain HTTP/1.1 (as ingress-nginx asks its default backend) (line 9)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nerror_pages = { codes = [503], upstream = \"u\", headers = { \"X-Code\" = \"1\" } }\n", "f.toml: routes[0].error_pages.headers.X-Code: \"X-Code\" is not a header name a page's request may carry (the gateway writes Host, X-Code, X-Format, X-Original-URI, X-Request-ID, X-Forwarded-For and the framing) (line 9)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[upstreams.t]\ntargets = [\"127.0.0.1:2\"]\ntls = { verify = false }\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nerror_pages = { codes = [503], upstream = \"u\", headers = { \"X-A\" = \"a\\r\\nX: 1\" } }\n", "f.toml: routes[0].error_pages.headers.X-A: \"a\\r\\nX: 1\" cannot be a header value: visible ASCII and spaces (line 9)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[tls_passthrough]]\nhosts = [\"a.test\"]\nupstream = \"u\"\n[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\n", "f.toml: tls_passthrough: TLS is passed through on the TLS listeners: set server.tls_listen (and [tls]) (line 3)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = \"ftp://m/\"\n", "f.toml: routes[0].mirror: mirror url \"ftp://m/\": not an http:// or https:// URL (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { url = \"http://$host/x\" }\n", "f.toml: routes[0].mirror: mirror url \"http://$host/x\": \"\" is not a host[:port] (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { url = \"http://m$host\" }\n", "f.toml: routes[0].mirror: mirror url \"http://m$host\": only $request_uri or $uri may follow the host (another variable would write into it) (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { url = \"http://m/$remote_addr\" }\n", "f.toml: routes[0].mirror: mirror url \"http://m/$remote_addr\": $remote_addr is not a variable a mirror URL takes ($request_uri, $uri, $args, $is_args, $host, $scheme) (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { host = \"m\" }\n", "f.toml: routes[0].mirror: missing key \"url\" (or \"upstream\") (line 4)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ntimeouts = { request = \"0s\" }\n", "f.toml: routes[0].timeouts.request: a timeout is from 1ms to 24h (leave it out for none) (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ntimeouts = { upstream = \"25h\" }\n", "f.toml: routes[0].timeouts.upstream: a timeout is from 1ms to 24h (leave it out for none) (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ntimeouts = { request = \"soon\" }\n", "f.toml: routes[0].timeouts.request: \"soon\" is not a duration: write e.g. \"20ms\", \"5s\", \"1h\" (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ntimeouts = { request = 5 }\n", "f.toml: routes[0].timeouts.request: expected a string, found integer (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ntimeouts = { backendRequest = \"1s\" }\n", "f.toml: routes[0].timeouts.backendRequest: unknown key (line 6)"),
        ("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\ntimeouts = \"1s\"\n", "f.toml: routes[0].timeouts: expected a table, found string (line 6)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\ntimeouts = { request = \"1s\" }\n", "f.toml: routes[0].timeouts: timeouts needs a route with an upstream (this one answers by itself) (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nlistener_host = \"a.test\"\n", "f.toml: routes[0].listener_host: listener_host needs ports: a listener is a port's (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nports = [8080]\nlistener_host = \"*.*.test\"\n", "f.toml: routes[0].listener_host: \"*.*.test\" is not a host name, a \"*.\" wildcard or \"\" (line 5)"),
        ("[upstreams.m]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { upstream = \"nope\" }\n", "f.toml: routes[0].mirror.upstream: unknown upstream \"nope\" (defined: m) (line 6)"),
        ("[upstreams.m]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { upstream = \"m\", url = \"http://evil.example/x\" }\n", "f.toml: routes[0].mirror: mirror url \"http://evil.example/x\": with an upstream, the url is a path (\"/...\", \"$request_uri\" or \"$uri\") (line 6)"),
        ("[upstreams.m]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { upstream = \"m\", url = \"$host/x\" }\n", "f.toml: routes[0].mirror: mirror url \"$host/x\": with an upstream, the url is a path (\"/...\", \"$request_uri\" or \"$uri\") (line 6)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { url = \"http://m\", host = \"a\\r\\nX: y\" }\n", "f.toml: routes[0].mirror.host: \"a\\r\\nX: y\" is not a host: visible ASCII, no spaces, / or @ (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { url = \"http://m\", timeout = \"0s\" }\n", "f.toml: routes[0].mirror.timeout: a duration above zero (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nmirror = { url = \"http://m\", bdy = false }\n", "f.toml: routes[0].mirror.bdy: unknown key (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nproxy_redirect = { from = \"http://a/\" }\n", "f.toml: routes[0].proxy_redirect: missing key \"to\" (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nproxy_cookie_domain = { from = \"..\", to = \"b\" }\n", "f.toml: routes[0].proxy_cookie_domain: from is a domain: not only dots (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nrewrite = { regex = \"x\", replace = \"/a\\r\\nX-Evil: 1\" }\n", "f.toml: routes[0].rewrite.replace: \"/a\\r\\nX-Evil: 1\" is not a path: visible ASCII only, no spaces or # (line 4)"),
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
        ("[[routes]]\nname = \"x\"\nrespond = { status = 200 }\n", "f.toml: routes[0]: missing key \"path_prefix\" (or \"path_exact\" or \"path_regex\") (line 1)"),
        ("[[routes]]\npath_prefix = \"/\"\n", "f.toml: routes[0]: missing key \"upstream\" or \"respond\" (line 1)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nrespond = { status = 200 }\n", "f.toml: routes[0].respond: a route has either upstream or respond, not both (line 6)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nmatch_headers = [{ name = \"x-a\", value = \"1\" }, { name = \"X-A\", regex = \"2\" }]\n", "f.toml: routes[0].match_headers[1]: \"x-a\" is matched twice: one entry per name (line 6)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nmatch_headers = [{ name = \"x_a\", value = \"1\" }]\n", "f.toml: routes[0].match_headers[0].name: \"x_a\": request headers whose names hold `_` are dropped before anything reads them ([server] underscores_in_headers = false, as nginx): write it with `-`, or set underscores_in_headers = true (line 6)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nmatch_query = [{ name = \"q\" }]\n", "f.toml: routes[0].match_query[0]: missing key \"value\" or \"regex\" (line 6)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nmatch_query = [{ name = \"q\", regex = \"(\" }]\n", "f.toml: routes[0].match_query[0].regex: not a regular expression: error: unclosed group (line 6)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nbackends = [{ upstream = \"a\", weight = 0 }]\n", "f.toml: routes[0].backends: the weights sum to 0: no request could be sent (write respond instead) (line 5)"),
        ("[[routes]]\npath_prefix = \"/\"\nbackends = [{ status = 500 }]\n", "f.toml: routes[0].backends: backends needs at least one upstream (line 3)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nbackends = [{ upstream = \"b\" }]\n", "f.toml: routes[0].backends[0].upstream: unknown upstream \"b\" (defined: a) (line 5)"),
        ("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nbackends = [{ upstream = \"a\" }]\n", "f.toml: routes[0].backends: a route has one of upstream, backends, respond and redirect, not upstream and backends (line 6)"),
        ("[[routes]]\npath_prefix = \"/\"\nredirect = { status = 304 }\n", "f.toml: routes[0].redirect.status: 304 is not a redirect (301, 302, 303, 307 or 308) (line 3)"),
        ("[[routes]]\npath_regex = \"/a.*\"\nredirect = { replace_prefix = \"/b\" }\n", "f.toml: routes[0].redirect.replace_prefix: replace_prefix needs a route with path_prefix or path_exact: it replaces what that matched (line 3)"),
        ("[[routes]]\npath_prefix = \"/\"\nredirect = { scheme = \"ftp\" }\n", "f.toml: routes[0].redirect.scheme: \"ftp\" is not http or https (line 3)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\nports = [80, 80]\n", "f.toml: routes[0].ports[1]: 80 is listed twice (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 99 }\n", "f.toml: routes[0].respond.status: must be between 200 and 599, got 99 (line 3)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\ntarpit = { delay = [\"1s\", \"10m\"] }\n", "f.toml: routes[0].tarpit.delay: at most 5m: held connections must end (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\ntarpit = { max_concurrent = 0 }\n", "f.toml: routes[0].tarpit.max_concurrent: must be between 1 and 1000000, got 0 (line 4)"),
        ("[[routes]]\npath_prefix = \"/\"\nrespond = { status = 200 }\naccess = { allow = [\"nope\"] }\n", "f.toml: routes[0].access.allow[0]: \"nope\" is not an IP address or CIDR, e.g. \"10.0.0.0/8\" or \"2001:db8::/32\" (line 4)"),
    ];
    // Every case is checked and every mismatch reported: one wrong case does not hide the
    // others behind its panic.
    let failed: Vec<String> = cases
        .iter()
        .filter_map(|(toml, want)| {
            let got = problems(toml);
            (got != vec![want.to_string()])
                .then(|| format!("for:\n{toml}\n  want: {want}\n  got:  {got:?}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases differ:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
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

#[test]
fn abuse_defence_settings() {
    let dir = std::env::temp_dir().join(format!("tollgate-lists-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("deny.txt"),
        "# botnet\n192.0.2.0/24\n\n2001:db8::/32  # v6\n198.51.100.7\n",
    )
    .expect("write");
    std::fs::write(dir.join("bad.txt"), "10.0.0.0/8\nnot-an-ip\n").expect("write");
    let text = r#"
[server]
admin_token = "0123456789abcdef0123"
[access]
deny = ["203.0.113.0/24"]
deny_files = ["deny.txt"]
allow = ["203.0.113.50"]
deny_user_agents = ["BadBot/1.0", "Scraper*"]
allow_api_keys = ["sk_partner_*"]
api_key_header = "X-Partner-Key"
[limits.login]
key = "ip_ua"
rate = "5/m"
action = "tarpit"
tarpit = { delay = ["1s", "3s"], max_concurrent = 4, then = "pass" }
block = [{ after = 10, within = "1m", for = "5m" }, { after = 100, within = "5m", for = "1h" }]
count = "failures"
[limits.scrape]
key = "client_ip"
rate = "10/s"
action = "challenge"
challenge_url = "https://captcha.example.com/"
[[routes]]
path_prefix = "/login"
respond = { status = 200 }
limits = ["login", "scrape"]
tarpit = { delay = "2s" }
access = { deny = ["10.0.0.0/8"] }
"#;
    let path = dir.join("t.toml");
    std::fs::write(&path, text).expect("write");
    let c = tollgate_config::load_file(&path).expect("valid");
    assert_eq!(c.access.deny.len(), 4);
    assert_eq!(c.access.allow[0].to_string(), "203.0.113.50/32");
    assert_eq!(c.access.api_key_header.as_deref(), Some("x-partner-key"));
    assert_eq!(c.files, vec![dir.join("deny.txt")]);
    assert_eq!(
        c.server.admin_token.as_deref(),
        Some("0123456789abcdef0123")
    );
    let l = &c.limits[0];
    assert_eq!(l.action, tollgate_config::model::Action::Tarpit);
    let t = l.tarpit.expect("tarpit");
    assert_eq!(
        (
            t.delay_min.as_secs(),
            t.delay_max.as_secs(),
            t.max_concurrent,
            t.then_pass
        ),
        (1, 3, 4, true)
    );
    assert_eq!(l.block.len(), 2);
    assert_eq!(
        (l.block[1].after, l.block[1].block_for.as_secs()),
        (100, 3600)
    );
    assert_eq!(l.count_failures, Some(vec![401, 403]));
    assert_eq!(
        c.limits[1].challenge_url.as_deref(),
        Some("https://captcha.example.com/")
    );
    let r = &c.routes[0];
    assert_eq!(
        r.tarpit.as_deref().map(|t| (
            t.delay_min.as_secs(),
            t.delay_max.as_secs(),
            t.max_concurrent
        )),
        Some((2, 2, 256))
    );
    assert_eq!(r.access.as_ref().map(|a| a.deny.len()), Some(1));

    // A bad list file names the file and its line.
    std::fs::write(&path, "[access]\ndeny_files = [\"bad.txt\"]\n").expect("write");
    let e = tollgate_config::load_file(&path).expect_err("invalid");
    assert_eq!(
        e.lines(),
        vec![format!("{}: access.deny_files[0]: bad.txt line 2: \"not-an-ip\" is not an IP address or CIDR (line 2)", path.display())]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hardening_defaults_are_safe_at_the_edge() {
    let h = ok("").server.hardening;
    assert_eq!(h.header_timeout, Duration::from_secs(10));
    assert_eq!(h.idle_timeout, Duration::from_secs(60));
    assert_eq!(h.body_timeout, Duration::from_secs(30));
    assert_eq!(h.send_timeout, Duration::from_secs(60));
    assert_eq!(h.min_body_rate, 1024);
    assert_eq!((h.max_header_bytes, h.max_headers), (32768, 100));
    assert_eq!(
        (h.max_connections, h.max_connections_per_client),
        (50_000, 0)
    );
    assert_eq!(h.max_h2_streams, 100);
    assert!(h.merge_slashes);
    assert_eq!(h.escaped_slashes, EscapedSlashes::Reject);
    let h = ok(r#"
[server]
header_timeout = "2s"
idle_timeout = "5s"
body_timeout = "3s"
send_timeout = "90s"
min_body_rate = 0
max_header_bytes = 8192
max_headers = 50
max_connections = 1000
max_connections_per_client = 64
max_h2_streams = 10
merge_slashes = false
escaped_slashes = "keep"
"#)
    .server
    .hardening;
    assert_eq!(h.header_timeout, Duration::from_secs(2));
    assert_eq!(h.send_timeout, Duration::from_secs(90));
    assert_eq!((h.min_body_rate, h.max_connections_per_client), (0, 64));
    assert!(!h.merge_slashes);
    assert_eq!(h.escaped_slashes, EscapedSlashes::Keep);
}

#[test]
fn hardening_mistakes_name_their_key() {
    let p = problems(
        r#"
[server]
listen = ["127.0.0.1:8080", "127.0.0.1:8080"]
admin = "127.0.0.1:8080"
header_timeout = "0s"
idle_timeout = "1500ms"
max_header_bytes = 10
max_headers = 1000
escaped_slashes = "allow"
max_connections = 0
send_timeout = "forever"
"#,
    );
    let want = [
        "f.toml: server.listen[1]: 127.0.0.1:8080 is listed twice (line 3)",
        "f.toml: server.admin: 127.0.0.1:8080 is also a proxy listener (server.listen) (line 4)",
        "f.toml: server.header_timeout: between 1ms and 1d (line 5)",
        "f.toml: server.idle_timeout: whole seconds, e.g. \"60s\" (line 6)",
        "f.toml: server.escaped_slashes: \"allow\": one of \"reject\", \"keep\", \"decode\" (line 9)",
    ];
    for w in want {
        assert!(p.iter().any(|l| l == w), "missing {w:?} in {p:#?}");
    }
    for key in [
        "max_header_bytes",
        "max_headers",
        "max_connections",
        "send_timeout",
    ] {
        assert!(
            p.iter().any(|l| l.contains(&format!("server.{key}:"))),
            "{key}: {p:#?}"
        );
    }
}

#[test]
fn route_paths_must_be_canonical_and_hosts_lose_their_trailing_dot() {
    let p = problems(
        r#"
[[routes]]
path_prefix = "/api//v1"
respond = { status = 200 }
[[routes]]
path_exact = "/a/../b"
respond = { status = 200 }
[[routes]]
path_prefix = "/%7euser"
respond = { status = 200 }
[[routes]]
path_prefix = "/caf\u00e9"
respond = { status = 200 }
[[routes]]
path_prefix = "/a?b"
respond = { status = 200 }
[[routes]]
path_prefix = "/a%3bb"
respond = { status = 200 }
[[routes]]
path_prefix = "/a%3Bb/%E2%82%AC"
respond = { status = 200 }
[[routes]]
path_prefix = "/a b"
respond = { status = 200 }
[[routes]]
path_prefix = "/x"
strip_prefix = "/a b"
respond = { status = 200 }
"#,
    );
    assert_eq!(p.len(), 8, "{p:#?}");
    assert!(
        p[6].starts_with("f.toml: routes[7].path_prefix: \"/a b\" is not a canonical path"),
        "{p:#?}"
    );
    assert!(
        p[7].starts_with("f.toml: routes[8].strip_prefix: \"/a b\""),
        "{p:#?}"
    );
    assert!(p[0].starts_with("f.toml: routes[0].path_prefix: \"/api//v1\" is not a canonical path"));
    assert!(p[1].starts_with("f.toml: routes[1].path_exact: \"/a/../b\" is not a canonical path"));
    let c = ok(r#"
[[routes]]
host = "API.Example.com."
path_prefix = "/Admin/"
case_insensitive = true
respond = { status = 200 }
"#);
    assert_eq!(c.routes[0].host.as_deref(), Some("api.example.com"));
    let v6 = ok("[[routes]]\nhost = \"[0::1]\"\npath_prefix = \"/\"\nrespond = { status = 200 }\n");
    assert_eq!(v6.routes[0].host.as_deref(), Some("::1"));
    assert_eq!(
        c.routes[0].path,
        tollgate_config::model::PathMatch::Prefix("/admin/".into())
    );
    assert!(c.routes[0].case_insensitive);
    assert!(problems(
        "[[routes]]\nhost = \"a.example:8080\"\npath_prefix = \"/\"\nrespond = { status = 200 }\n"
    )
    .iter()
    .any(|l| l.contains("routes[0].host")));
}

#[test]
fn tls_settings_and_their_mistakes() {
    let c = ok(r#"
[server]
listen = ["127.0.0.1:8080"]
tls_listen = ["127.0.0.1:8443", "[::1]:8443"]
https_redirect = true
[tls]
certificates = [{ cert = "a.pem", key = "a.key" }]
certificate_dirs = ["/etc/tollgate/tls"]
min_version = "1.3"
unknown_sni = "reject"
hsts = "max-age=31536000; includeSubDomains"
client_ca = "ca.pem"
client_auth = "optional"
[upstreams.api]
targets = ["127.0.0.1:9000"]
tls = { ca = "up.pem", sni = "API.internal", client_cert = { cert = "c.pem", key = "c.key" } }
h2 = true
[limits.per_cert]
rate = "10/s"
key = "client_cert"
[[routes]]
path_prefix = "/.well-known/acme-challenge/"
upstream = "api"
https_redirect = false
[[routes]]
path_prefix = "/"
upstream = "api"
limits = ["per_cert"]
"#);
    assert_eq!(c.server.tls_listen.len(), 2);
    assert!(c.server.https_redirect);
    let t = c.tls.as_ref().expect("[tls]");
    assert_eq!(t.certificates[0].key_path, "tls.certificates[0]");
    assert_eq!(t.certificate_dirs[0].1, "tls.certificate_dirs[0]");
    assert_eq!(t.min_version, TlsVersion::V13);
    assert_eq!(t.unknown_sni, UnknownSni::Reject);
    assert_eq!(t.client_auth, ClientAuth::Optional);
    let up = c.upstreams[0].tls.as_ref().expect("upstream tls");
    assert_eq!(up.sni.as_deref(), Some("api.internal"));
    assert!(up.verify && up.client_cert.is_some() && c.upstreams[0].h2);
    assert_eq!(c.routes[0].https_redirect, Some(false));
    assert_eq!(c.routes[1].https_redirect, None);
    assert_eq!(c.limits[0].key, vec![KeySource::ClientCert]);

    let p = problems(
        r#"
[server]
listen = ["127.0.0.1:8080"]
tls_listen = ["127.0.0.1:8080", "nope"]
[tls]
min_version = "1.1"
unknown_sni = "maybe"
hsts = "max-age=1\r\nx: y"
client_auth = "sometimes"
certificates = [{ cert = "a.pem" }]
[upstreams.api]
targets = ["127.0.0.1:9000"]
tls = "yes"
[upstreams.b]
targets = ["127.0.0.1:9001"]
tls = { sni = "not a name", bogus = 1 }
"#,
    );
    let want = [
        "server.tls_listen[0]: 127.0.0.1:8080 is also in server.listen",
        "server.tls_listen[1]: \"nope\" is not an address",
        "tls.min_version: \"1.1\": write \"1.2\" or \"1.3\"",
        "tls.unknown_sni: \"maybe\"",
        "tls.hsts: a Strict-Transport-Security value",
        "tls.client_auth: \"sometimes\"",
        "tls.client_auth: needs client_ca",
        "tls.certificates[0]: missing key \"key\"",
        "upstreams.api.tls: expected true, false or a table",
        "upstreams.b.tls.sni: \"not a name\" is not a DNS name",
        "upstreams.b.tls.bogus: unknown key",
    ];
    for w in want {
        assert!(p.iter().any(|l| l.contains(w)), "missing {w:?} in {p:#?}");
    }
    // TLS listeners need certificates, certificates need a listener, redirects need TLS.
    let p = problems("[server]\ntls_listen = [\"127.0.0.1:8443\"]\n");
    assert!(
        p.iter()
            .any(|l| l.contains("server.tls_listen: TLS listeners need certificates")),
        "{p:#?}"
    );
    let p = problems("[tls]\ncertificates = [{ cert = \"a\", key = \"b\" }]\n");
    assert!(
        p.iter()
            .any(|l| l.contains("no listener serves these certificates")),
        "{p:#?}"
    );
    let p = problems("[server]\nhttps_redirect = true\n");
    assert!(
        p.iter()
            .any(|l| l.contains("redirects to HTTPS need server.tls_listen")),
        "{p:#?}"
    );
    let p = problems("[server]\ntls_listen = [\"127.0.0.1:8443\"]\n[tls]\nhsts = \"max-age=1\"\n");
    assert!(
        p.iter().any(|l| l.contains("tls: no certificate")),
        "{p:#?}"
    );
}

#[test]
fn a_lease_defaults_to_half_the_burst_shared_by_the_instances() {
    let l = |extra: &str| {
        let text = format!("[redis]\nurl = \"redis://a:1\"\ninstances = 4\n[limits.a]\nkey = \"global\"\nrate = \"100/s\"\nburst = 400\nscope = \"global\"\n{extra}");
        tollgate_config::parse_str(&text, "f.toml")
            .expect("valid")
            .limits[0]
            .lease_max
    };
    assert_eq!(l(""), None, "exact by default");
    assert_eq!(l("sync = \"exact\"\n"), None);
    assert_eq!(l("sync = \"lease\"\n"), Some(50), "400 / (2 x 4)");
    assert_eq!(l("sync = \"lease\"\nlease_max = 7\n"), Some(7));
}

#[test]
fn the_keys_a_reload_cannot_change_are_named() {
    let old = ok("[server]\nthreads = 2\nbody_timeout = \"30s\"\nheader_timeout = \"10s\"\n");
    let new = ok("[server]\nthreads = 4\nbody_timeout = \"5s\"\nheader_timeout = \"3s\"\n");
    assert_eq!(
        tollgate_config::model::restart_only_changes(&old, &new),
        vec![
            "server.threads",
            "server.header_timeout, idle_timeout, max_header_bytes, max_headers, max_h2_streams"
        ],
        "body_timeout applies at once"
    );
    assert!(tollgate_config::model::restart_only_changes(&old, &old).is_empty());
    let r1 = ok("[redis]\nurl = \"redis://127.0.0.1\"\ninstances = 2\n");
    let r2 = ok("[redis]\nurl = \"redis://127.0.0.1\"\ninstances = 3\nmax_in_flight = 64\n");
    assert_eq!(
        tollgate_config::model::restart_only_changes(&r1, &r2),
        vec!["redis (url, cluster, timeout, ca, client_cert, password_env, max_in_flight)"]
    );
}

#[test]
fn auth_mistakes_name_their_key_and_line() {
    let up = "[upstreams.a]\ntargets = [\"127.0.0.1:9\"]\n";
    let route = |auth: &str| {
        format!("{up}[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nauth = {auth}\n")
    };
    let cases: Vec<(String, &str)> = vec![
        (route("\"sso\""), "f.toml: routes[0].auth: unknown auth \"sso\": define it as [auth.sso], or write the table here (line 6)"),
        (route("{ }"), "f.toml: routes[0].auth: an auth table names one method: jwt, forward, basic or api_key (line 6)"),
        (route("{ jwt = \"required\", basic = { htpasswd = \"x\" } }"), "f.toml: routes[0].auth.basic: an auth table names one method, not jwt and basic: put each on its own route (or [auth.NAME] table) (line 6)"),
        (route("{ jwt = \"required\" }"), "f.toml: routes[0].auth.jwt: tokens are verified with the keys of [jwt]: add a [jwt] section (jwks_url, public_keys, jwks_file or secret) (line 6)"),
        (format!("[jwt]\nsecret = \"s\"\n{}", route("{ jwt = \"always\" }")), "f.toml: routes[0].auth.jwt: \"always\": write jwt = \"required\" or \"optional\" (line 8)"),
        (format!("[jwt]\nsecret = \"s\"\n{}", route("{ jwt = \"required\", forward_claims = { sub = \"Host\" } }")), "f.toml: routes[0].auth.forward_claims.sub: Host frames the request or names its host: it cannot be set from an auth answer or a claim (line 8)"),
        (route("{ basic = { htpasswd = \"x\" }, claims = { scope = \"a\" } }"), "f.toml: routes[0].auth.claims: claims goes with jwt = \"required\" or \"optional\" (line 6)"),
        (route("{ forward = { url = \"auth:4180/verify\" } }"), "f.toml: routes[0].auth.forward.url: \"auth:4180/verify\" is not the auth service's URL: write an absolute http:// or https:// URL (line 6)"),
        (route("{ forward = { url = \"http://auth/\", timeout = \"2m\" } }"), "f.toml: routes[0].auth.forward.timeout: at most 60s (line 6)"),
        (route("{ forward = { url = \"http://auth/\", cache_key = [\"jwt:sub\"] } }"), "f.toml: routes[0].auth.forward.cache_key[0]: an auth answer is cached by header:NAME, query:NAME, client_ip, path, method, route or global (line 6)"),
        (route("{ forward = { url = \"http://auth/\", response_headers = [\"Content-Length\"] } }"), "f.toml: routes[0].auth.forward.response_headers[0]: Content-Length frames the request or names its host: it cannot be set from an auth answer or a claim (line 6)"),
        (route("{ forward = { url = \"http://auth/\", response_headers = [\"*\", \"X-User\"] } }"), "f.toml: routes[0].auth.forward.response_headers[0]: \"*\" (every header of the answer) stands alone in the list (line 6)"),
        (route("{ forward = { url = \"http://auth/\", append_path = \"yes\" } }"), "f.toml: routes[0].auth.forward.append_path: expected true or false, found string (line 6)"),
        (route("{ basic = { realm = \"x\" } }"), "f.toml: routes[0].auth.basic: missing key \"htpasswd\": the file of users and password hashes (made by htpasswd) (line 6)"),
        (route("{ basic = { htpasswd = \"/nonexistent/users\" } }"), "f.toml: routes[0].auth.basic.htpasswd: cannot read /nonexistent/users: No such file or directory (os error 2) (line 6)"),
        (route("{ api_key = { header = \"x-key\" } }"), "f.toml: routes[0].auth.api_key: missing key \"keys_file\": the file of consumers and their keys (lines: CONSUMER KEY) (line 6)"),
        ("[jwt]\njwks_url = \"http://idp/jwks.json\"\n".to_string(), "f.toml: jwt.jwks_url: \"http://idp/jwks.json\" is not an https:// URL: keys fetched in the clear could be replaced on the way (line 2)"),
        ("[jwt]\nsecret = \"s\"\njwks_ca = \"ca.pem\"\n".to_string(), "f.toml: jwt.jwks_ca: jwks_ca goes with jwks_url (line 3)"),
        ("[jwt]\njwks_url = \"https://idp/jwks.json\"\njwks_refetch = \"100ms\"\n".to_string(), "f.toml: jwt.jwks_refetch: at least 1s: tokens naming random kids must not keep the provider busy (line 3)"),
        (format!("[jwt]\nsecret = \"s\"\n{}", route("{ jwt = \"optional\", claims = { scope = \"a\" } }")), "f.toml: routes[0].auth.claims: claims with jwt = \"optional\": a request without a token would pass them by; write jwt = \"required\" (line 8)"),
        (format!("[jwt]\njwks_url = \"https://idp/jwks.json\"\nissuer = \"https://idp\"\n{}", route("{ jwt = \"required\" }")), "f.toml: jwt.jwks_url: tokens from an identity provider let requests through auth = { jwt = ... }: set [jwt] issuer and audience (the provider signs tokens for other applications too)"),
    ];
    for (toml, want) in &cases {
        assert_eq!(problems(toml), vec![want.to_string()], "{toml}");
    }
}

#[test]
fn auth_files_are_checked_line_by_line() {
    let dir = std::env::temp_dir().join(format!("tollgate-auth-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let users = dir.join("users");
    std::fs::write(
        &users,
        "# comment\nann:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\nbob:plaintext\nann:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\ncid:$6$salt$abc\n",
    )
    .expect("write");
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "acme short\nglobex globex-key-0123456789\ninitech globex-key-0123456789\nloner\n",
    )
    .expect("write");
    let toml = format!(
        "[upstreams.a]\ntargets = [\"127.0.0.1:9\"]\n[auth.staff]\nbasic = {{ htpasswd = \"{}\" }}\n[auth.keys]\napi_key = {{ keys_file = \"{}\" }}\n",
        users.display(),
        keys.display()
    );
    let got = problems(&toml);
    let u = users.display().to_string();
    let k = keys.display().to_string();
    assert_eq!(
        got,
        vec![
            format!("f.toml: auth.staff.basic.htpasswd: {u} line 3: not a hash Tollgate verifies (plain text, or unknown): write it with htpasswd -B (bcrypt), -m (apr1) or -s (SHA-1) (line 4)"),
            format!("f.toml: auth.staff.basic.htpasswd: {u} line 4: user \"ann\" is listed twice (line 4)"),
            format!("f.toml: auth.staff.basic.htpasswd: {u} line 5: a SHA-256/512 crypt hash (htpasswd -5/-2), which Tollgate does not verify: write it with htpasswd -B (bcrypt), -m (apr1) or -s (SHA-1) (line 4)"),
            format!("f.toml: auth.keys.api_key.keys_file: {k} line 1: the key of \"acme\" has fewer than 16 characters (line 6)"),
            format!("f.toml: auth.keys.api_key.keys_file: {k} line 3: this key is given twice (line 6)"),
            format!("f.toml: auth.keys.api_key.keys_file: {k} line 4: not CONSUMER KEY (line 6)"),
        ],
        "the keys themselves are never in an error"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Edge keys (docs/edge.md): what a rule may not write, CORS that would open every origin,
/// www redirects and prefixes without what they need; each with its key and line.
#[test]
fn edge_keys_refuse_what_walks_around_the_gateway() {
    let base = "[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\n";
    let with = |extra: &str| problems(&format!("{base}{extra}\n"));
    for (extra, want) in [
        (
            r#"request_headers = { set = { "Transfer-Encoding" = "chunked" } }"#,
            "f.toml: routes[0].request_headers.set.Transfer-Encoding: \"Transfer-Encoding\" is the connection's (framing or hop-by-hop): no rule may write it (line 6)",
        ),
        (
            r#"request_headers = { add = { "X-Forwarded-For" = "1.2.3.4" } }"#,
            "f.toml: routes[0].request_headers.add.X-Forwarded-For: \"X-Forwarded-For\" is written by the gateway: a rule cannot replace or remove it (line 6)",
        ),
        (
            r#"request_headers = { set = { "Host" = "x" } }"#,
            "f.toml: routes[0].request_headers.set.Host: \"Host\" is the upstream's Host: use upstream_host (line 6)",
        ),
        (
            r#"response_headers = { set = { "RateLimit" = "x" } }"#,
            "f.toml: routes[0].response_headers.set.RateLimit: \"RateLimit\" is written by the gateway: a rule cannot replace or remove it (line 6)",
        ),
        (
            r#"response_headers = { set = { "Access-Control-Allow-Origin" = "*" } }"#,
            "f.toml: routes[0].response_headers.set.Access-Control-Allow-Origin: \"Access-Control-Allow-Origin\" is CORS's: use the route's cors table (line 6)",
        ),
        (
            r#"response_headers = { remove = ["Connection"] }"#,
            "f.toml: routes[0].response_headers.remove[0]: \"Connection\" is the connection's (framing or hop-by-hop): no rule may write it (line 6)",
        ),
        (
            r#"request_headers = { set = { "X-A" = "$secret" } }"#,
            "f.toml: routes[0].request_headers.set.X-A: \"$secret\" is not a variable a header value may name ($client_ip, $request_id, $host, $route, $scheme; \"$$\" is a \"$\") (line 6)",
        ),
        (
            "request_headers = { set = { \"X-A\" = \"a\\r\\nX-B: b\" } }",
            "f.toml: routes[0].request_headers.set.X-A: a header value is visible ASCII, spaces and tabs (no line break, no control character) (line 6)",
        ),
        (
            r#"cors = { allow_origins = ["*"], allow_credentials = true }"#,
            "f.toml: routes[0].cors.allow_credentials: a wildcard (\"*\") cannot go with allow_credentials = true: browsers refuse it, and reflecting any origin with credentials would let every site read the caller's data; list the origins, or set echo_wildcards = true to answer each request with its own origin (the Gateway API's way) (line 6)",
        ),
        (
            r#"cors = { allow_origins = ["https://a.example"], allow_headers = ["*"], allow_credentials = true, echo_wildcards = false }"#,
            "f.toml: routes[0].cors.allow_credentials: a wildcard (\"*\") cannot go with allow_credentials = true: browsers refuse it, and reflecting any origin with credentials would let every site read the caller's data; list the origins, or set echo_wildcards = true to answer each request with its own origin (the Gateway API's way) (line 6)",
        ),
        (
            r#"cors = { allow_origins = ["*"], expose_headers = ["*"], allow_credentials = true, echo_wildcards = true }"#,
            "f.toml: routes[0].cors.allow_credentials: expose_headers = [\"*\"] cannot go with allow_credentials = true: browsers then read it as a header named \"*\"; list the headers (line 6)",
        ),
        (
            r#"cors = { allow_origins = ["*"], echo_wildcards = "yes" }"#,
            "f.toml: routes[0].cors.echo_wildcards: expected true or false, found string (line 6)",
        ),
        (
            r#"cors = { allow_origins = ["null"] }"#,
            "f.toml: routes[0].cors.allow_origins[0]: \"null\" is the origin of sandboxed frames and local files: any page can send it, so it cannot be allowed (line 6)",
        ),
        (
            r#"cors = { allow_origins = ["https://*.com"] }"#,
            "f.toml: routes[0].cors.allow_origins[0]: \"https://*.com\" names every subdomain of a top-level domain: name a domain of your own (line 6)",
        ),
        (
            "www_redirect = true",
            "f.toml: routes[0].www_redirect: www_redirect needs a route with one host name (not a wildcard, a list or an address): its other spelling, with or without \"www.\", answers 308 to it (line 3)",
        ),
        (
            "x_forwarded_prefix = true",
            "f.toml: routes[0].x_forwarded_prefix: x_forwarded_prefix = true sends the prefix strip_prefix takes off, and this route has no strip_prefix: write the prefix itself (\"/app\") (line 3)",
        ),
        (
            r#"max_body_bytes = "8q""#,
            "f.toml: routes[0].max_body_bytes: \"8q\" is not a size (bytes, or a number with k, m or g: \"8m\") (line 6)",
        ),
        (
            r#"host = ["a.example.com", "A.example.com"]"#,
            "f.toml: routes[0].host[1]: \"A.example.com\" is listed twice (line 6)",
        ),
    ] {
        assert_eq!(with(extra), vec![want.to_string()], "{extra}");
    }
    // A rule may not write what the route's auth forwards.
    let p = problems(&format!(
        "[jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"HOME\"\n{base}auth = {{ jwt = \"required\", forward_claims = {{ sub = \"X-User-Id\" }} }}\nrequest_headers = {{ set = {{ \"X-User-Id\" = \"admin\" }} }}\n"
    ));
    assert!(
        p.iter()
            .any(|l| l.contains("\"x-user-id\" is written by this route's auth")),
        "{p:?}"
    );
    // What is accepted, with nginx's units and the server default.
    let c = ok(&format!(
        "[server]\nmax_body_bytes = \"8m\"\n{base}host = [\"a.example.com\", \"*.b.example.com\"]\nmax_body_bytes = 0\n"
    ));
    assert_eq!(c.server.max_body_bytes, 8 << 20);
    assert_eq!(c.routes[0].edge.max_body_bytes, Some(0));
    assert_eq!(c.routes[0].host.as_deref(), Some("a.example.com"));
    assert_eq!(c.routes[0].aliases, vec!["*.b.example.com".to_string()]);
    assert_eq!(ok("").server.max_body_bytes, 1 << 20);
}

/// Balancing keys: each mistake named with its key and line; what cannot work is refused.
#[test]
fn balancing_keys_name_their_mistakes() {
    let with = |extra: &str| {
        problems(&format!(
            "[upstreams.a]\ntargets = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n{extra}\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\n"
        ))
    };
    for (extra, want) in [
        (
            r#"balance = "random""#,
            "f.toml: upstreams.a.balance: \"random\": expected \"round_robin\", \"least_request\", \"ewma\" or \"hash\" (line 3)",
        ),
        (
            r#"balance = "hash""#,
            "f.toml: upstreams.a.balance: balance = \"hash\" needs hash_key (what to hash, e.g. \"client_ip\" or \"cookie:session\") (line 3)",
        ),
        (
            r#"hash_key = "client_ip""#,
            "f.toml: upstreams.a.hash_key: hash_key is read only with balance = \"hash\" (line 3)",
        ),
        (
            "balance = \"hash\"\nhash_key = \"cookie:\"",
            "f.toml: upstreams.a.hash_key: \"cookie:\": expected \"client_ip\", \"path\", \"uri\", \"header:NAME\", \"cookie:NAME\" or \"query:NAME\" (line 4)",
        ),
        (
            r#"affinity = { cookie = "a b" }"#,
            "f.toml: upstreams.a.affinity.cookie: \"a b\" is not a cookie name (line 3)",
        ),
        (
            r#"affinity = { secret = "short" }"#,
            "f.toml: upstreams.a.affinity.secret: needs at least 16 characters (line 3)",
        ),
        (
            r#"affinity = { path = "/a;b" }"#,
            "f.toml: upstreams.a.affinity.path: \"/a;b\": a cookie path starts with '/' and holds no space, ';' or control (line 3)",
        ),
        (
            r#"retry = { on = ["600"] }"#,
            "f.toml: upstreams.a.retry.on[0]: \"600\": expected \"connect\", \"error\", \"reset\", \"timeout\", or a status from \"400\" to \"599\" (\"502\") (line 3)",
        ),
        (
            r#"retry = { on = ["0500"] }"#,
            "f.toml: upstreams.a.retry.on[0]: \"0500\": expected \"connect\", \"error\", \"reset\", \"timeout\", or a status from \"400\" to \"599\" (\"502\") (line 3)",
        ),
        (
            r#"retry = { on = ["2xx"] }"#,
            "f.toml: upstreams.a.retry.on[0]: \"2xx\": expected \"connect\", \"error\", \"reset\", \"timeout\", or a status from \"400\" to \"599\" (\"502\") (line 3)",
        ),
        (
            r#"retry = { targets = "same" }"#,
            "f.toml: upstreams.a.retry.targets: \"same\": expected \"untried\" (only targets not tried yet, as nginx) or \"any\" (then the same ones again, as Envoy) (line 3)",
        ),
        (
            r#"retry = { backoff = "2m" }"#,
            "f.toml: upstreams.a.retry.backoff: at most 60s between retries (line 3)",
        ),
        (
            r#"retry = { budget = 10.5 }"#,
            "f.toml: upstreams.a.retry.budget: a number from 0.0 to 10.0 (retries per request) (line 3)",
        ),
        (
            r#"retry = { attempts = 50 }"#,
            "f.toml: upstreams.a.retry.attempts: must be between 0 and 10, got 50 (line 3)",
        ),
        (
            r#"retry = { tries = 2 }"#,
            "f.toml: upstreams.a.retry.tries: unknown key (line 3)",
        ),
    ] {
        let got = with(extra);
        assert!(got.iter().any(|p| p == want), "{extra}: {got:#?}");
    }
    // What is written is what runs.
    assert!(
        !problems("[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\nbalance = \"hash\"\nhash_key = \"Header:X\"\n").is_empty(),
        "key sources are lower case"
    );
    let cfg = ok(
        "[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\nbalance = \"hash\"\nhash_key = \"header:X-User\"\naffinity = { max_age = \"1h\", secure = true }\nretry = { attempts = 2, on = [\"connect\", \"503\"], budget = 0.25 }\n",
    );
    let u = &cfg.upstreams[0];
    assert_eq!(u.balance, tollgate_config::model::Balance::Hash);
    assert_eq!(
        u.hash_key,
        Some(tollgate_config::model::HashKey::Header("x-user".into()))
    );
    let a = u.affinity.as_ref().expect("affinity");
    assert_eq!(
        (a.cookie.as_str(), a.path.as_str(), a.secure),
        ("route", "/", Some(true))
    );
    assert_eq!(a.max_age, Some(std::time::Duration::from_secs(3600)));
    let r = u.retry.expect("retry");
    assert_eq!((r.attempts, r.budget), (2, 0.25));
    assert!(r.on.connect && r.on.status(503) && !r.on.timeout && !r.on.status(502));
    assert_eq!(r.targets, tollgate_config::model::RetryTargets::Untried);
    assert_eq!(r.backoff, None);
    // The Gateway API's: any status, the same pod again, a wait, a budget of every attempt.
    let cfg = ok(
        "[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\nretry = { attempts = 3, on = [\"500\", \"429\"], targets = \"any\", backoff = \"50ms\", budget = 3 }\n",
    );
    let r = cfg.upstreams[0].retry.expect("retry");
    assert_eq!((r.attempts, r.budget), (3, 3.0));
    for (code, on) in [
        (500, true),
        (429, true),
        (400, false),
        (599, false),
        (502, false),
        (200, false),
        (0, false),
        (65535, false),
    ] {
        assert_eq!(r.on.status(code), on, "{code}");
    }
    assert!(!r.on.timeout && !r.on.reset);
    assert_eq!(r.targets, tollgate_config::model::RetryTargets::Any);
    assert_eq!(r.backoff, Some(std::time::Duration::from_millis(50)));
}

/// `[rls]`: each mistake named with its key and line.
#[test]
fn rls_rules_name_their_mistakes() {
    let base = "[limits.d]\nkey = \"descriptor\"\nrate = \"1/s\"\n[limits.ip]\nkey = \"client_ip\"\nrate = \"1/s\"\n[limits.c]\nkey = \"descriptor\"\nalgorithm = \"concurrency\"\nburst = 2\n";
    let with = |extra: &str| problems(&format!("{base}{extra}\n"));
    for (extra, want) in [
        (
            "[rls]\nlisten = \"nowhere\"",
            "f.toml: rls.listen: not an address:port (e.g. \"127.0.0.1:8081\") (line 12)",
        ),
        (
            "[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"a\" }]\nlimits = [\"nope\"]",
            "f.toml: rls.rules[0].limits[0]: unknown limit \"nope\" (line 16)",
        ),
        (
            "[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"a\" }]\nlimits = [\"ip\"]",
            "f.toml: rls.rules[0].limits[0]: limit \"ip\" is keyed by client_ip: a rule's limits are keyed by \"descriptor\" (the matched entries' values) or \"global\" (line 16)",
        ),
        (
            "[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"a\" }]\nlimits = [\"c\"]",
            "f.toml: rls.rules[0].limits[0]: limit \"c\" counts requests in flight: the rate limit service never learns when a request ends (line 16)",
        ),
        (
            "[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = []\nlimits = [\"d\"]",
            "f.toml: rls.rules[0].descriptor: from 1 to 16 entries ({ key, value }), got 0 (line 15)",
        ),
        (
            "[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"a\", value = \"\" }]\nlimits = [\"d\"]",
            "f.toml: rls.rules[0].descriptor[0].value: an empty value matches nothing: leave \"value\" out to match any (line 15)",
        ),
        (
            "[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"a\", val = \"x\" }]\nlimits = [\"d\"]",
            "f.toml: rls.rules[0].descriptor[0].val: unknown key (line 15)",
        ),
        (
            "[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\nlimits = [\"d\"]",
            "f.toml: routes[0].limits[0]: limit \"d\" is keyed by \"descriptor\", which only [[rls.rules]] give: a route has no descriptor (line 16)",
        ),
    ] {
        let got = with(extra);
        assert!(got.iter().any(|p| p == want), "{extra}: {got:#?}");
    }
    let cfg = ok(&format!(
        "{base}[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{{ key = \"remote_address\" }}, {{ key = \"path\", value = \"/login\" }}]\nlimits = [\"d\"]\n"
    ));
    let rls = cfg.rls.expect("rls");
    assert_eq!(rls.listen.port(), 8081);
    assert_eq!(
        rls.rules[0].descriptor,
        [
            ("remote_address".to_string(), None),
            ("path".to_string(), Some("/login".to_string()))
        ]
    );
    assert_eq!(rls.rules[0].limits, ["d"]);
}

#[test]
fn rls_rules_may_be_unlimited_or_deny_all() {
    let base =
        "[limits.d]\nkey = \"descriptor\"\nrate = \"1/s\"\n[rls]\nlisten = \"127.0.0.1:8081\"\n";
    let cfg = ok(&format!("{base}[[rls.rules]]\ndomain = \"e\"\ndescriptor = [{{ key = \"a\" }}]\nlimits = []\n[[rls.rules]]\ndomain = \"e\"\ndescriptor = [{{ key = \"b\" }}]\ndeny = true\n"));
    let rules = &cfg.rls.expect("rls").rules;
    assert!(rules[0].limits.is_empty() && !rules[0].deny);
    assert!(rules[1].deny);
    let got = problems(&format!("{base}[[rls.rules]]\ndomain = \"e\"\ndescriptor = [{{ key = \"a\" }}]\ndeny = true\nlimits = [\"d\"]\n"));
    assert!(
        got.iter().any(|p| p == "f.toml: rls.rules[0].limits: deny = true refuses every matching descriptor: its limits would never count (line 10)"),
        "{got:#?}"
    );
    let got = problems(&format!(
        "{base}[[rls.rules]]\ndomain = \"e\"\ndescriptor = [{{ key = \"a\" }}]\n"
    ));
    assert!(
        got.iter().any(|p| p.contains("missing key \"limits\"")),
        "{got:#?}"
    );
}

#[test]
fn rls_over_tls_needs_the_tls_section() {
    let got = problems("[rls]\nlisten = \"127.0.0.1:8081\"\ntls = true\n");
    assert!(
        got.iter().any(|p| p == "f.toml: rls.tls: the rate limit service's TLS uses [tls]'s certificates: add a [tls] section"),
        "{got:#?}"
    );
}

#[test]
fn tracing_keys_name_their_mistakes() {
    let with = |table: &str| {
        problems(&format!(
            "[tracing]\n{table}\n[upstreams.a]\ntargets = [\"127.0.0.1:1\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\n"
        ))
    };
    for (table, want) in [
        (
            "sample = 0.1",
            "f.toml: tracing: missing key \"otlp\" (the collector's OTLP/HTTP URL, e.g. \"http://127.0.0.1:4318\") (line 1)",
        ),
        (
            "otlp = \"collector:4318\"",
            "f.toml: tracing.otlp: an http:// or https:// URL with a host (line 2)",
        ),
        (
            "otlp = \"ftp://127.0.0.1:4318\"",
            "f.toml: tracing.otlp: an http:// or https:// URL with a host (line 2)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nsample = 1.5",
            "f.toml: tracing.sample: a ratio from 0.0 to 1.0 (the share of requests traced) (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nsample = -0.1",
            "f.toml: tracing.sample: a ratio from 0.0 to 1.0 (the share of requests traced) (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\ntimeout = \"0s\"",
            "f.toml: tracing.timeout: from 1ms to 60s (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\ntrust_context = \"everyone\"",
            "f.toml: tracing.trust_context: unknown trust_context \"everyone\" (trusted_proxies, all or none) (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nclient_address = \"clear\"",
            "f.toml: tracing.client_address: unknown client_address \"clear\" (hashed, plain or none) (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nheaders = { \"x-key\" = \"a\\nb\" }",
            "f.toml: tracing.headers.x-key: not a header value (visible ASCII) (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nservice_name = \"\"",
            "f.toml: tracing.service_name: must not be empty (line 3)",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nsampel = 0.1",
            "f.toml: tracing.sampel: unknown key (line 3)",
        ),
    ] {
        let got = with(table);
        assert!(got.iter().any(|p| p == want), "{table}: {got:#?}");
    }
    // The endpoint gets OTLP's path when it names none, and keeps the one it names.
    let c = ok("[tracing]\notlp = \"http://127.0.0.1:4318\"\n");
    let t = c.tracing.expect("[tracing]");
    assert_eq!(t.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(
        (t.sample, t.sample_refusals, t.service_name.as_str()),
        (0.01, false, "tollgate")
    );
    let c = ok("[tracing]\notlp = \"https://otel.example.com/custom/traces\"\nsample = 1\n");
    assert_eq!(
        c.tracing.expect("[tracing]").endpoint,
        "https://otel.example.com/custom/traces"
    );
}

/// `outlier`: on by default with Envoy's figures, off with `false`, each wrong value named by
/// its key and line, and unknown keys refused.
#[test]
fn outlier_ejection_defaults_switches_and_errors() {
    let up = |extra: &str| format!("[upstreams.u]\ntargets = [\"127.0.0.1:1\"]\n{extra}\n");
    let c = ok(&up(""));
    let o = c.upstreams[0].outlier.expect("on by default");
    assert_eq!(
        (
            o.consecutive_failures,
            o.ejection.as_secs(),
            o.max_ejection.as_secs(),
            o.max_ejected_percent
        ),
        (5, 30, 300, 10)
    );
    assert_eq!(ok(&up("outlier = false")).upstreams[0].outlier, None);
    assert!(ok(&up("outlier = true")).upstreams[0].outlier.is_some());
    let o = ok(&up(
        "outlier = { consecutive_failures = 2, ejection = \"10s\", max_ejection = \"40s\", max_ejected_percent = 50 }",
    ))
    .upstreams[0]
        .outlier
        .expect("on");
    assert_eq!(
        (
            o.consecutive_failures,
            o.ejection.as_secs(),
            o.max_ejection.as_secs(),
            o.max_ejected_percent
        ),
        (2, 10, 40, 50)
    );
    // A long first ejection without its own cap is its own cap.
    let o = ok(&up("outlier = { ejection = \"1h\" }")).upstreams[0]
        .outlier
        .expect("on");
    assert_eq!(o.max_ejection.as_secs(), 3600);
    for (bad, key) in [
        ("outlier = \"yes\"", "upstreams.u.outlier"),
        (
            "outlier = { consecutive_failures = 0 }",
            "upstreams.u.outlier.consecutive_failures",
        ),
        (
            "outlier = { consecutive_failures = -5 }",
            "upstreams.u.outlier.consecutive_failures",
        ),
        (
            "outlier = { max_ejected_percent = 101 }",
            "upstreams.u.outlier.max_ejected_percent",
        ),
        (
            "outlier = { ejection = \"0s\" }",
            "upstreams.u.outlier.ejection",
        ),
        (
            "outlier = { ejection = \"soon\" }",
            "upstreams.u.outlier.ejection",
        ),
        (
            "outlier = { ejection = \"60s\", max_ejection = \"30s\" }",
            "upstreams.u.outlier.max_ejection",
        ),
        (
            "outlier = { consecutive = 3 }",
            "upstreams.u.outlier.consecutive",
        ),
    ] {
        let p = problems(&up(bad));
        assert!(
            p.iter().any(|e| e.contains(key) && e.contains("line 3")),
            "{bad}: {p:?}"
        );
    }
}
