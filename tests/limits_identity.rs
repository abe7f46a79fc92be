//! End-to-end tests of identities: `jwt:CLAIM` keys from verified bearer tokens (HS256, RS256,
//! ES256 from the test keys in tests/fixtures/jwt), and every way a token is refused.

use serde_json::json;
use std::path::{Path, PathBuf};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/jwt")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("fixture")
}

const SECRET: &str = "test-secret-of-32-bytes-or-more!!";

async fn start_jwt(extra: &str) -> (GatewayProc, u16) {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
[jwt]
secret = "{SECRET}"
public_keys = ["{}", "{}"]
algorithms = ["HS256", "RS256", "ES256"]
issuer = "https://auth.example.com"
{extra}
[[routes]]
name = "api"
path_prefix = "/api"
respond = {{ status = 200, body = "ok" }}
limits = ["per_user"]
[[routes]]
name = "open"
path_prefix = "/open"
respond = {{ status = 200, body = "ok" }}
[limits.per_user]
key = "jwt:sub"
rate = "1/h"
burst = 2
"#,
        fixture("rs256-public.pem").display(),
        fixture("es256-public.pem").display(),
    );
    (serve(&toml, port, admin).await, port)
}

/// The gateway serving `toml` on `port` (admin on `admin`), ready; the test fails with its log
/// if it does not start.
async fn serve(toml: &str, port: u16, admin: u16) -> GatewayProc {
    running(Path::new(BIN), toml, port, admin).await
}

fn claims(sub: &str) -> serde_json::Value {
    json!({"sub": sub, "iss": "https://auth.example.com", "exp": unix_now() + 600})
}

async fn call(port: u16, token: Option<&str>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    get(port, "/api/x", &headers).await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_follow_the_verified_subject_whatever_the_algorithm() {
    let (_gw, port) = start_jwt("").await;
    let alice_hs = jwt("HS256", SECRET.as_bytes(), &claims("alice"));
    let alice_rs = jwt("RS256", &read("rs256-private.pem"), &claims("alice"));
    let bob_es = jwt("ES256", &read("es256-private.pem"), &claims("bob"));
    assert_eq!(call(port, Some(&alice_hs)).await.status, 200);
    let r = call(port, Some(&alice_rs)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("ratelimit").is_some_and(|v| v.contains("r=0")),
        "{:?}",
        r.header("ratelimit")
    );
    // Alice's two are spent, by whichever key signed her tokens.
    let r = call(port, Some(&alice_hs)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["limit"], "per_user");
    // Bob is someone else.
    assert_eq!(call(port, Some(&bob_es)).await.status, 200);
    // No token: the jwt limit does not count the request (pair it with an IP limit).
    for _ in 0..5 {
        assert_eq!(call(port, None).await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_is_refused_with_401() {
    let (_gw, port) = start_jwt("").await;
    let b64 = |v: &serde_json::Value| {
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let bytes = v.to_string().into_bytes();
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..(c.len() + 1) {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    };
    let unsigned = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims("mallory"))
    );
    let expired = jwt(
        "HS256",
        SECRET.as_bytes(),
        &json!({"sub": "a", "iss": "https://auth.example.com", "exp": unix_now() - 3600}),
    );
    let early = jwt(
        "HS256",
        SECRET.as_bytes(),
        &json!({"sub": "a", "iss": "https://auth.example.com", "exp": unix_now() + 7200, "nbf": unix_now() + 3600}),
    );
    let cases = [
        ("alg none", unsigned, "the token is malformed"),
        ("expired", expired, "the token has expired"),
        ("not yet valid", early, "the token is not valid yet"),
        (
            "wrong signer",
            jwt("RS256", &read("other-private.pem"), &claims("a")),
            "no configured key verifies the token's signature",
        ),
        (
            "wrong secret",
            jwt("HS256", b"another-secret-entirely-32-bytes!", &claims("a")),
            "no configured key verifies the token's signature",
        ),
        (
            "algorithm not accepted",
            jwt("HS384", SECRET.as_bytes(), &claims("a")),
            "the token's algorithm is not accepted",
        ),
        (
            "RSA public key used as an HMAC secret",
            jwt("HS256", &read("rs256-public.pem"), &claims("a")),
            "no configured key verifies the token's signature",
        ),
        (
            "wrong issuer",
            jwt(
                "HS256",
                SECRET.as_bytes(),
                &json!({"sub": "a", "iss": "https://evil.example", "exp": unix_now() + 600}),
            ),
            "the token's issuer is not accepted",
        ),
        (
            "no exp",
            jwt(
                "HS256",
                SECRET.as_bytes(),
                &json!({"sub": "a", "iss": "https://auth.example.com"}),
            ),
            "the token has no exp claim",
        ),
        (
            "garbage",
            "not.a.token".to_string(),
            "the token is malformed",
        ),
    ];
    for (what, token, detail) in cases {
        let r = call(port, Some(&token)).await;
        assert_eq!(r.status, 401, "{what}: {}", r.body);
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{what}"
        );
        assert_eq!(r.json()["error_code"], "INVALID_TOKEN", "{what}");
        assert_eq!(r.json()["detail"], detail, "{what}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer error=\"invalid_token\""),
            "{what}"
        );
    }
    // Routes that read no claim never look at the token.
    let r = get(port, "/open", &[("authorization", "Bearer garbage")])
        .await
        .expect("request");
    assert_eq!(r.status, 200);
}

fn quota_conf(port: u16, admin: u16, extra_limit: &str, redis: &str) -> String {
    format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
{redis}
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["monthly"]
[limits.monthly]
key = "header:x-api-key"
quota = "3/month"
upgrade_url = "https://example.com/pricing"
{extra_limit}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monthly_quota_refuses_with_quota_exceeded_until_the_month_ends() {
    let (port, admin) = (free_port(), free_port());
    let _gw = serve(&quota_conf(port, admin, "", ""), port, admin).await;
    let key = [("x-api-key", "k1")];
    for left in [2, 1, 0] {
        let r = get(port, "/", &key).await.expect("request");
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("ratelimit-policy"),
            Some("\"monthly\";q=3;w=2592000")
        );
        assert!(r
            .header("ratelimit")
            .is_some_and(|v| v.contains(&format!("r={left}"))));
    }
    let r = get(port, "/", &key).await.expect("request");
    assert_eq!(r.status, 429);
    let j = r.json();
    assert_eq!(j["error_code"], "QUOTA_EXCEEDED");
    assert_eq!(j["upgrade_url"], "https://example.com/pricing");
    assert_eq!(j["limit"], "monthly");
    // Retry-After runs to the first of next month, 00:00 UTC.
    let now = unix_now();
    let (y, m, _) = tollgate_limit::civil_from_days((now / 86_400) as i64);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let first = tollgate_limit::days_from_civil(ny, nm, 1) as u64 * 86_400;
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("retry-after");
    assert!(
        retry.abs_diff(first - now) <= 2,
        "retry-after {retry}, month ends in {}",
        first - now
    );
    // Another key has its own quota.
    assert_eq!(
        get(port, "/", &[("x-api-key", "k2")])
            .await
            .expect("request")
            .status,
        200
    );
    let m = get(admin, "/metrics", &[]).await.expect("metrics").body;
    assert_eq!(
        metric(
            &m,
            "http_requests_rejected_total",
            &["reason=\"quota\"", "limit=\"monthly\""]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_quota_survives_a_gateway_restart() {
    let redis = RedisServer::start().expect("redis-server");
    let (port, admin) = (free_port(), free_port());
    let conf = quota_conf(
        port,
        admin,
        "scope = \"global\"",
        &format!("[redis]\nurl = \"{}\"\ntimeout = \"500ms\"", redis.url()),
    );
    let key = [("x-api-key", "k1")];
    {
        let _gw = serve(&conf, port, admin).await;
        for _ in 0..2 {
            assert_eq!(get(port, "/", &key).await.expect("request").status, 200);
        }
    }
    // A new process: the count lives in Redis.
    let _gw = serve(&conf, port, admin).await;
    assert_eq!(get(port, "/", &key).await.expect("request").status, 200);
    let r = get(port, "/", &key).await.expect("request");
    assert_eq!(
        (r.status, r.json()["error_code"].as_str()),
        (429, Some("QUOTA_EXCEEDED"))
    );
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(keys.starts_with("{tollgate:monthly:quota:"), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_headers_on_request_and_retry_after_jitter_spreads_returns() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
legacy_headers = true
[[routes]]
name = "api"
path_prefix = "/"
respond = {{ status = 200, body = "ok" }}
limits = ["hourly"]
[limits.hourly]
key = "client_ip"
rate = "1/h"
burst = 1
retry_after_jitter = "10s"
"#
    );
    let _gw = serve(&toml, port, admin).await;
    let r = get(port, "/", &[]).await.expect("request");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit"), Some("1"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(r.header("x-ratelimit-reset"), Some("3600"));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let r = get(port, "/", &[]).await.expect("request");
        assert_eq!(r.status, 429);
        let secs: u64 = r
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .expect("retry-after");
        // Never earlier than the limit allows, at most the jitter later.
        assert!((3599..=3610).contains(&secs), "{secs}");
        assert_eq!(r.json()["retry_after"], secs);
        assert_eq!(
            r.header("x-ratelimit-reset"),
            Some(secs.to_string().as_str())
        );
        seen.insert(secs);
    }
    assert!(seen.len() > 3, "spread over the jitter window: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_overage_strategy_answers_as_configured() {
    let (port, admin) = (free_port(), free_port());
    let mut toml =
        format!("[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\n");
    for (name, quota, extra) in [
        ("soft", 10, "overage = \"soft\"\nsoft_limit_percent = 10"),
        ("overage", 3, "overage = \"overage\""),
        (
            "throttle",
            2,
            "overage = \"throttle\"\nthrottle_rate = \"1/h\"",
        ),
        ("hard", 20, ""),
    ] {
        toml += &format!(
            r#"
[[routes]]
name = "{name}"
path_prefix = "/{name}"
respond = {{ status = 200, body = "ok" }}
limits = ["{name}"]
[limits.{name}]
key = "header:x-api-key"
quota = "{quota}/day"
{extra}
"#
        );
    }
    let _gw = serve(&toml, port, admin).await;
    let key = [("x-api-key", "k")];
    let run = |path: &'static str, n: usize| async move {
        let mut out = Vec::new();
        let mut c = Conn::open(port).await.expect("connect");
        for _ in 0..n {
            let r = c.send("GET", path, &key, "").await.expect("request");
            out.push((r.status, r.header("x-quota-warning").map(str::to_string), r));
        }
        out
    };
    // soft: 10 + 10 % = 11 admitted, the 11th with a warning, then QUOTA_EXCEEDED.
    let soft = run("/soft", 13).await;
    let codes: Vec<u16> = soft.iter().map(|r| r.0).collect();
    assert_eq!(codes, [vec![200; 11], vec![429; 2]].concat());
    assert!(soft[..10].iter().all(|r| r.1.is_none()));
    assert_eq!(
        soft[10].1.as_deref(),
        Some("quota \"soft\" exceeded: 11 of 10 used this period")
    );
    assert_eq!(soft[11].2.json()["error_code"], "QUOTA_EXCEEDED");
    // overage: never refused, every unit past 3 counted.
    let over = run("/overage", 6).await;
    assert!(over.iter().all(|r| r.0 == 200));
    assert_eq!(over.iter().filter(|r| r.1.is_some()).count(), 3);
    assert!(over[5]
        .2
        .header("ratelimit")
        .is_some_and(|v| v.contains("r=0")));
    // throttle: 2 in the quota, then the reduced rate's one, then refused until it refills.
    let thr = run("/throttle", 5).await;
    let codes: Vec<u16> = thr.iter().map(|r| r.0).collect();
    assert_eq!(codes, vec![200, 200, 200, 429, 429]);
    assert!(thr[2].1.is_some());
    let retry: u64 = thr[3]
        .2
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("retry");
    assert!(
        (3500..=3600).contains(&retry),
        "the throttle's wait: {retry}"
    );
    // hard, with the usage thresholds crossed once each.
    let hard = run("/hard", 21).await;
    assert_eq!(hard.iter().filter(|r| r.0 == 200).count(), 20);
    let m = get(admin, "/metrics", &[]).await.expect("metrics").body;
    let crossed = |limit: &str, t: &str| {
        metric(
            &m,
            "tollgate_quota_usage_crossed_total",
            &[&format!("limit=\"{limit}\""), &format!("threshold=\"{t}\"")],
        )
    };
    assert_eq!(
        (
            crossed("hard", "80"),
            crossed("hard", "95"),
            crossed("hard", "100")
        ),
        (1.0, 1.0, 1.0)
    );
    assert_eq!(crossed("soft", "100"), 1.0);
    assert_eq!(
        metric(&m, "tollgate_quota_overage_total", &["limit=\"overage\""]),
        3.0
    );
    assert_eq!(
        metric(&m, "tollgate_quota_overage_total", &["limit=\"soft\""]),
        1.0
    );
    assert_eq!(
        metric(&m, "tollgate_quota_overage_total", &["limit=\"throttle\""]),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_get_their_plans_limits_and_users_their_own_inside_them() {
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
[jwt]
secret = "{SECRET}"
algorithms = ["HS256"]
[plans]
default = "free"
tenant = "jwt:tenant"
from = "header:x-plan-hint"
[plans.tenants]
acme = "pro"
globex = "globex_enterprise"
[plans.free]
rate = "1/h"
burst = 2
quota = "3/month"
[plans.pro]
rate = "1/h"
burst = 5
quota = "100/month"
[plans.globex_enterprise]
rate = "1/h"
burst = 8
[[routes]]
name = "api"
path_prefix = "/api"
respond = {{ status = 200, body = "ok" }}
limits = ["tenant", "tenant_quota", "user"]
[[routes]]
name = "export"
path_prefix = "/export"
respond = {{ status = 200, body = "ok" }}
limits = ["tenant", "user", "export"]
[[routes]]
name = "quota"
path_prefix = "/quota"
respond = {{ status = 200, body = "ok" }}
limits = ["tenant_quota"]
[limits.tenant]
key = "jwt:tenant"
plan = "rate"
[limits.tenant_quota]
key = "jwt:tenant"
plan = "quota"
upgrade_url = "https://example.com/upgrade"
[limits.user]
key = ["jwt:tenant", "jwt:sub"]
rate = "1/h"
burst = 4
[limits.export]
key = "jwt:tenant"
rate = "1/h"
burst = 1
"#
    );
    let _gw = serve(&toml, port, admin).await;
    let token = |tenant: &str, sub: &str| {
        jwt(
            "HS256",
            SECRET.as_bytes(),
            &json!({"tenant": tenant, "sub": sub, "exp": unix_now() + 600}),
        )
    };
    let send = |path: &'static str, t: String| async move {
        let auth = format!("Bearer {t}");
        get(port, path, &[("authorization", auth.as_str())])
            .await
            .expect("request")
    };
    let admitted = |path: &'static str, t: String, n: usize| async move {
        let mut ok = 0;
        let mut last = None;
        for _ in 0..n {
            let r = send(path, t.clone()).await;
            ok += (r.status == 200) as usize;
            last = Some(r);
        }
        (ok, last.expect("one request"))
    };
    // Free (an unknown tenant gets the default plan): burst 2 for the whole tenant.
    let (ok, r) = admitted("/api", token("initech", "u1"), 4).await;
    assert_eq!(ok, 2);
    assert_eq!(r.json()["limit"], "tenant");
    // Pro (acme): 5 for the tenant, but one user of it is held to the user limit (4) first.
    let (ok, r) = admitted("/api", token("acme", "alice"), 6).await;
    assert_eq!(ok, 4);
    assert_eq!(r.json()["limit"], "user");
    let (ok, r) = admitted("/api", token("acme", "bob"), 3).await;
    assert_eq!(ok, 1, "acme's 5th unit is bob's, then the tenant is spent");
    assert_eq!(r.json()["limit"], "tenant");
    // Enterprise with custom terms (globex): 8.
    let (ok, _) = admitted("/api", token("globex", "u1"), 4).await;
    assert_eq!(ok, 4);
    let (ok, _) = admitted("/api", token("globex", "u2"), 6).await;
    assert_eq!(ok, 4);
    // The headers list each applied policy of the caller's plan: a bucket's capacity and the
    // time it takes to refill (free: 2 at 1/h; enterprise: 8), a quota's count and period.
    let r = send("/api", token("umbrella", "u9")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"tenant\";q=2;w=7200, \"tenant_quota\";q=3;w=2592000, \"user\";q=4;w=14400")
    );
    let r = send("/api", token("globex", "u3")).await;
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"tenant\";q=8;w=28800, \"user\";q=4;w=14400"),
        "globex's plan has no quota"
    );
    // The plan's monthly quota alone: free tenants have 3 a month, pro ones 100.
    let (ok, r) = admitted("/quota", token("hooli", "u1"), 5).await;
    assert_eq!(ok, 3);
    assert_eq!(r.json()["error_code"], "QUOTA_EXCEEDED");
    assert_eq!(r.json()["upgrade_url"], "https://example.com/upgrade");
    let (ok, _) = admitted("/quota", token("acme", "u1"), 5).await;
    assert_eq!(ok, 5);
    // An expensive endpoint has its own limit on top.
    let (ok, r) = admitted("/export", token("stark", "u1"), 2).await;
    assert_eq!(ok, 1);
    assert_eq!(r.json()["limit"], "export");
    // A plan hint header names a plan for a tenant not in the map.
    let auth = format!("Bearer {}", token("wayne", "u1"));
    let r = get(
        port,
        "/api",
        &[("authorization", auth.as_str()), ("x-plan-hint", "pro")],
    )
    .await
    .expect("request");
    assert!(r
        .header("ratelimit-policy")
        .is_some_and(|v| v.contains("\"tenant_quota\";q=100")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_route_limits_by_the_account_in_the_body_and_forwards_it_intact() {
    let be = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
key_body_limit = 1024
[upstreams.app]
targets = ["{}"]
[[routes]]
name = "login"
path_prefix = "/login"
methods = ["POST"]
upstream = "app"
limits = ["account"]
[limits.account]
key = "body:username"
rate = "1/h"
burst = 2
"#,
        be.addr
    );
    let _gw = serve(&toml, port, admin).await;
    static JSON: [(&str, &str); 1] = [("content-type", "application/json")];
    static FORM: [(&str, &str); 1] = [("content-type", "application/x-www-form-urlencoded")];
    let (json, form) = (&JSON, &FORM);
    let alice = r#"{"username":"alice@example.com","password":"hunter2"}"#;
    let post = |headers: &'static [(&'static str, &'static str)], body: String, n: u8| async move {
        request_from(
            std::net::IpAddr::from([127, 0, 0, n]),
            port,
            "POST",
            "/login",
            headers,
            &body,
        )
        .await
        .expect("request")
    };
    // From three addresses, one account: the account's limit holds.
    let r = post(json, alice.to_string(), 1).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body"], alice, "the upstream got the exact body");
    // The same account in a form body is the same key.
    let r = post(form, "username=alice%40example.com&password=x".into(), 2).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body"], "username=alice%40example.com&password=x");
    let r = post(json, alice.to_string(), 3).await;
    assert_eq!(
        (r.status, r.json()["limit"].as_str()),
        (429, Some("account"))
    );
    // Another account is not affected; a body without the field is not counted.
    assert_eq!(
        post(json, r#"{"username":"bob"}"#.into(), 1).await.status,
        200
    );
    for _ in 0..3 {
        assert_eq!(post(json, r#"{"email":"x"}"#.into(), 1).await.status, 200);
    }
    let hits = be.hits();
    // Malformed JSON: 400, nothing reaches the upstream.
    let r = post(json, "{not json".into(), 1).await;
    assert_eq!(
        (r.status, r.json()["error_code"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    // Too large for the route: 413, nothing reaches the upstream.
    let big = format!(r#"{{"username":"carol","pad":"{}"}}"#, "x".repeat(2000));
    let r = post(json, big, 1).await;
    assert_eq!(
        (r.status, r.json()["error_code"].as_str()),
        (413, Some("PAYLOAD_TOO_LARGE"))
    );
    assert_eq!(be.hits(), hits, "refused bodies never reach the upstream");
}
