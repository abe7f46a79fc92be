//! Hostile tests of what the gateway verified against what the upstream reads (issue 37), with
//! real peers: htpasswd files written by `htpasswd`, an auth service and an echo backend on
//! loopback, and raw targets that refuse, reset or never answer.
//!
//! - a wrong password costs an unknown user what it costs a known one, whatever the file mixes;
//! - an API key or a Basic credential the gateway checked never reaches the upstream, in any
//!   spelling the gateway took it in, and a second credential of one kind is a 400;
//! - a JWT's `aud`, `scp`, and claims of every JSON type behave as docs/auth.md says;
//! - header names with `_` are dropped before anything reads them (nginx's default), and when
//!   kept, every header the gateway writes removes the client's underscore spellings;
//! - a retry policy never serves fewer requests than none.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

async fn call(port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
    get(port, path, headers).await.expect("request")
}

/// What the echo backend was sent: its headers (names in lower case).
fn upstream_headers(r: &Reply) -> serde_json::Map<String, Value> {
    r.json()["headers"].as_object().cloned().unwrap_or_default()
}

fn htpasswd(file: &Path, args: &[&str], user: &str, password: &str) {
    let mut cmd = std::process::Command::new("htpasswd");
    cmd.arg("-b");
    if !file.exists() {
        cmd.arg("-c");
    }
    let out = cmd
        .args(args)
        .arg(file)
        .arg(user)
        .arg(password)
        .output()
        .expect("htpasswd (apache2-utils) is installed");
    assert!(out.status.success(), "{out:?}");
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {b64}")
}

fn check(conf: &Path) -> (bool, String) {
    let out = std::process::Command::new(BIN)
        .arg("check")
        .arg(conf)
        .output()
        .expect("run");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

// ------------------------------------------------------------------ 1. basic auth's timing

/// A file grown over years: an apr1 line first (htpasswd's old default), then bcrypt at cost 10
/// and a `{SHA}` line. A wrong password costs the same whoever the user is, and `tollgate
/// check` names the weak lines by file and line, never by their hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_costs_an_unknown_user_what_it_costs_a_known_one() {
    let dir = temp_dir("cred-timing");
    let file = dir.join("users.htpasswd");
    htpasswd(&file, &["-m"], "ann", "apr1-pass");
    htpasswd(&file, &["-B", "-C", "10"], "bob", "bcrypt-pass");
    htpasswd(&file, &["-s"], "sam", "sha1-pass");
    htpasswd(&file, &["-B", "-C", "5"], "cat", "cheap-pass");
    let text = std::fs::read_to_string(&file).expect("read");
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"[upstreams.api]
targets = ["{}"]
[[routes]]
name = "staff"
path_prefix = "/staff"
upstream = "api"
auth = {{ basic = {{ htpasswd = "{}" }} }}
"#,
            backend.addr,
            file.display()
        ),
    );
    let conf = dir.join("t.toml");
    std::fs::write(&conf, &toml).expect("write");
    let (ok, out) = check(&conf);
    assert!(ok, "weak entries are warnings, not errors: {out}");
    assert!(
        out.contains("users.htpasswd line 1") && out.contains("MD5"),
        "the apr1 line is named: {out}"
    );
    assert!(
        out.contains("users.htpasswd line 3") && out.contains("SHA-1"),
        "the {{SHA}} line is named: {out}"
    );
    assert!(
        out.contains("users.htpasswd line 4") && out.contains("cost 5"),
        "a cheap bcrypt line is named: {out}"
    );
    for line in text.lines() {
        let hash = line.split_once(':').map(|(_, h)| h).unwrap_or_default();
        assert!(!out.contains(hash), "never the hash: {out}");
    }
    let gw = running(Path::new(BIN), &toml, port, admin).await;
    assert!(
        gw.log_text().contains("users.htpasswd line 1"),
        "start-up warns too: {}",
        gw.log_text()
    );
    assert_eq!(
        call(
            port,
            "/staff",
            &[("authorization", &basic("bob", "bcrypt-pass"))]
        )
        .await
        .status,
        200
    );
    // Warm up every path once, then interleave the samples so drift on this shared machine
    // weighs on each user alike.
    let users = ["zed", "bob", "ann", "sam", "cat"];
    let mut took: Vec<Vec<Duration>> = vec![Vec::new(); users.len()];
    for round in 0..21 {
        for (i, u) in users.iter().enumerate() {
            let auth = basic(u, &format!("wrong-{round}"));
            let t0 = Instant::now();
            let r = call(port, "/staff", &[("authorization", &auth)]).await;
            let t = t0.elapsed();
            assert_eq!(r.status, 401, "{u}: {}", r.body);
            if round > 0 {
                took[i].push(t);
            }
        }
    }
    let medians: Vec<Duration> = took.into_iter().map(median).collect();
    eprintln!(
        "median wrong-password 401s: {:?}",
        users.iter().zip(&medians).collect::<Vec<_>>()
    );
    let bob = medians[1].as_secs_f64();
    for (u, m) in users.iter().zip(&medians) {
        let ratio = m.as_secs_f64() / bob;
        assert!(
            (0.75..=1.25).contains(&ratio),
            "{u}'s wrong password costs {m:?}, bob's {:?} (x{ratio:.2}): {medians:?}",
            medians[1]
        );
    }
}

// ------------------------------------------------------------------ 2. credentials stay here

const ACME: &str = "acme-key-0123456789abcdef";
const GLOBEX: &str = "globex-key-0123456789abcdef";
const SECRET: &str = "a-test-secret-of-32-bytes-at-least!!";

fn token(claims: Value) -> String {
    jwt("HS256", SECRET.as_bytes(), &claims)
}

fn exp() -> u64 {
    unix_now() + 600
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_the_gateway_verified_never_reach_the_upstream() {
    let dir = temp_dir("cred-hide");
    let keys = dir.join("keys.txt");
    std::fs::write(
        &keys,
        format!("acme {ACME}\nglobex {GLOBEX}\nacme acme-second-key-0123456789\n"),
    )
    .expect("write");
    let users = dir.join("users.htpasswd");
    htpasswd(&users, &["-B", "-C", "4"], "bea", "bea-pass");
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let k = keys.display();
    let u = users.display();
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"[upstreams.api]
targets = ["{be}"]
[jwt]
secret = "{SECRET}"
algorithms = ["HS256"]
[[routes]]
name = "keyed"
path_prefix = "/v1"
upstream = "api"
auth = {{ api_key = {{ header = "X-API-Key", query = "api_key", keys_file = "{k}" }} }}
[[routes]]
name = "keyed_kept"
path_prefix = "/kept"
upstream = "api"
auth = {{ api_key = {{ header = "X-API-Key", query = "api_key", keys_file = "{k}" }}, hide_credentials = false }}
[auth.keys]
api_key = {{ header = "X-API-Key", keys_file = "{k}" }}
[[routes]]
name = "named"
path_prefix = "/named"
upstream = "api"
auth = "keys"
[[routes]]
name = "named_kept"
path_prefix = "/shown"
upstream = "api"
auth = "keys"
hide_credentials = false
[[routes]]
name = "rewritten"
path_prefix = "/rw/"
strip_prefix = "/rw"
upstream = "api"
auth = {{ api_key = {{ query = "api_key", keys_file = "{k}" }} }}
[[routes]]
name = "staff"
path_prefix = "/staff"
upstream = "api"
auth = {{ basic = {{ htpasswd = "{u}" }} }}
[[routes]]
name = "staff_kept"
path_prefix = "/together"
upstream = "api"
auth = {{ basic = {{ htpasswd = "{u}", hide_credentials = false }} }}
[[routes]]
name = "bearer"
path_prefix = "/bearer"
upstream = "api"
auth = {{ jwt = "required" }}
[[routes]]
name = "bearer_hidden"
path_prefix = "/sealed"
upstream = "api"
auth = {{ jwt = "required", forward_token = false }}
"#,
            be = backend.addr
        ),
    );
    let gw = running(Path::new(BIN), &toml, port, admin).await;

    // The header: verified, removed; the consumer goes up in Kong's headers, a client's own
    // copies of them removed.
    let r = call(
        port,
        "/v1/a",
        &[
            ("x-api-key", ACME),
            ("x-consumer-username", "admin"),
            ("x-credential-identifier", "forged"),
            ("x-consumer-id", "forged"),
            ("x-credential-username", "forged"),
            ("x-authenticated-userid", "forged"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let h = upstream_headers(&r);
    assert!(!h.contains_key("x-api-key"), "{h:?}");
    assert_eq!(h["x-consumer-username"], "acme", "{h:?}");
    let id = h["x-credential-identifier"].as_str().unwrap_or_default();
    assert!(
        !id.is_empty() && id != "forged" && !id.contains("0123456789"),
        "{h:?}"
    );
    for gone in [
        "x-consumer-id",
        "x-credential-username",
        "x-authenticated-userid",
    ] {
        assert!(!h.contains_key(gone), "{gone}: {h:?}");
    }
    assert!(!r.body.contains(ACME), "{}", r.body);
    // The consumer's second key has an identifier of its own (which key, never the key).
    let r2 = call(
        port,
        "/v1/a",
        &[("x-api-key", "acme-second-key-0123456789")],
    )
    .await;
    let id2 = upstream_headers(&r2)["x-credential-identifier"].clone();
    assert_ne!(id2.as_str(), Some(id), "{id2:?}");

    // The query parameter: removed from the target line, the rest kept byte for byte.
    for (sent, upstream) in [
        (
            format!("/v1/a?x=1&api_key={ACME}&z=%20y"),
            "/v1/a?x=1&z=%20y",
        ),
        (format!("/v1/a?api_key={ACME}"), "/v1/a"),
        (format!("/v1/a?api%5Fkey={ACME}&b=2"), "/v1/a?b=2"),
        (format!("/v1/a?q=a%26b&api_key={ACME}"), "/v1/a?q=a%26b"),
        (format!("/rw/inner?api_key={ACME}&keep=1"), "/inner?keep=1"),
    ] {
        let r = call(port, &sent, &[]).await;
        assert_eq!(r.status, 200, "{sent}: {}", r.body);
        assert_eq!(upstream_path(&r), upstream, "{sent}");
        assert!(!r.body.contains(ACME), "{sent}: {}", r.body);
    }

    // Two credentials of one kind: 400, whatever their validity.
    for (path, headers) in [
        (format!("/v1/a?api_key={GLOBEX}"), vec![("x-api-key", ACME)]),
        (format!("/v1/a?api_key={ACME}"), vec![("x-api-key", ACME)]),
        (format!("/v1/a?api_key={ACME}&api_key={ACME}"), vec![]),
        (
            format!("/v1/a?api_key={ACME}&API_KEY=other-0123456789abcdef"),
            vec![],
        ),
        // PHP reads `api.key` and `api key` as `api_key`.
        (
            format!("/v1/a?api_key={ACME}&api.key=other-0123456789abcdef"),
            vec![],
        ),
        (
            format!("/v1/a?api_key={ACME}&api+key=other-0123456789abcdef"),
            vec![],
        ),
        (
            "/v1/a".to_string(),
            vec![("x-api-key", ACME), ("x-api-key", GLOBEX)],
        ),
        // A valid header key beside another spelling of the parameter (ASP.NET reads
        // API_KEY as api_key).
        (format!("/v1/a?API_KEY={GLOBEX}"), vec![("x-api-key", ACME)]),
        (
            format!("/v1/a?x=1;api_key={GLOBEX}"),
            vec![("x-api-key", ACME)],
        ),
        // What Rack (`;`) and PHP (leading spaces, NUL, arrays) read as api_key.
        (format!("/v1/a?api_key={ACME}&x=1;api_key=EVIL"), vec![]),
        (format!("/v1/a?api_key={ACME}&%20api_key=EVIL"), vec![]),
        (format!("/v1/a?api_key={ACME}&api_key%00x=EVIL"), vec![]),
        (format!("/v1/a?api_key={ACME}&api_key[]=EVIL"), vec![]),
        (format!("/v1/a?api_key={ACME}&ap%C4%B1_key=EVIL"), vec![]),
    ] {
        let r = call(port, &path, &headers).await;
        assert_eq!(r.status, 400, "{path} {headers:?}: {}", r.body);
        assert_eq!(r.json()["error_code"], "AMBIGUOUS_REQUEST", "{}", r.body);
    }

    // hide_credentials = false: the route passes them on.
    let r = call(port, "/kept/a", &[("x-api-key", ACME)]).await;
    assert_eq!(upstream_headers(&r)["x-api-key"], ACME);
    let r = call(port, &format!("/kept/a?api_key={ACME}"), &[]).await;
    assert_eq!(upstream_path(&r), format!("/kept/a?api_key={ACME}"));
    // A route naming a shared [auth.NAME] may say it for itself; the others keep the default.
    let r = call(port, "/shown", &[("x-api-key", ACME)]).await;
    assert_eq!(upstream_headers(&r)["x-api-key"], ACME);
    let r = call(port, "/named", &[("x-api-key", ACME)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!upstream_headers(&r).contains_key("x-api-key"));

    // Basic: no password upstream by default; the user in X-Consumer-Username.
    let r = call(
        port,
        "/staff",
        &[
            ("authorization", &basic("bea", "bea-pass")),
            ("x-consumer-username", "root"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let h = upstream_headers(&r);
    assert!(!h.contains_key("authorization"), "{h:?}");
    assert_eq!(h["x-consumer-username"], "bea");
    assert_eq!(h["x-credential-identifier"], "bea");
    let r = call(
        port,
        "/together",
        &[("authorization", &basic("bea", "bea-pass"))],
    )
    .await;
    assert_eq!(
        upstream_headers(&r)["authorization"].as_str(),
        Some(basic("bea", "bea-pass").as_str())
    );

    // A bearer token goes on unless the route says forward_token = false.
    let t = format!("Bearer {}", token(json!({"sub": "u1", "exp": exp()})));
    let r = call(port, "/bearer", &[("authorization", &t)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        upstream_headers(&r)["authorization"].as_str(),
        Some(t.as_str())
    );
    let r = call(port, "/sealed", &[("authorization", &t)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!upstream_headers(&r).contains_key("authorization"));

    assert!(!gw.log_text().contains(ACME), "keys are never logged");
}

// ------------------------------------------------------------------ 3. JWT claims as documented

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_claims_behave_as_the_docs_say() {
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            r#"[upstreams.api]
targets = ["{}"]
[jwt]
secret = "{SECRET}"
algorithms = ["HS256"]
audience = "orders-api"
issuer = "https://idp.example.com"
[[routes]]
name = "any"
path_prefix = "/any"
upstream = "api"
auth = {{ jwt = "required" }}
[[routes]]
name = "scoped"
path_prefix = "/scoped"
upstream = "api"
auth = {{ jwt = "required", claims = {{ scope = "orders:read orders:write" }} }}
[[routes]]
name = "grouped"
path_prefix = "/grouped"
upstream = "api"
auth = {{ jwt = "required", claims = {{ group = ["admins", "ops"] }} }}
[[routes]]
name = "tiered"
path_prefix = "/tiered"
upstream = "api"
auth = {{ jwt = "required", claims = {{ tier = 2, admin = true }} }}
[[routes]]
name = "forwarded"
path_prefix = "/fwd"
upstream = "api"
auth = {{ jwt = "required", forward_claims = {{ sub = "X-User-Id", roles = "X-Roles", org = "X-Org", n = "X-N", bad = "X-Bad", mixed = "X-Mixed" }} }}
"#,
            backend.addr
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let status = |path: &'static str, claims: Value| async move {
        let t = format!("Bearer {}", token(claims));
        call(port, path, &[("authorization", &t)]).await
    };
    const ISS: &str = "https://idp.example.com";
    let with = |mut extra: Value| {
        extra["exp"] = json!(exp());
        if extra.get("aud").is_none() {
            extra["aud"] = json!("orders-api");
        }
        if extra.get("iss").is_none() {
            extra["iss"] = json!(ISS);
        }
        extra
    };

    // aud: required where [jwt] audience is set (RFC 7519 4.1.3); iss where issuer is.
    let r = status("/any", json!({"sub": "u", "exp": exp(), "iss": ISS})).await;
    assert_eq!(r.status, 401, "a token for no audience: {}", r.body);
    assert!(
        r.json()["detail"].as_str().unwrap_or("").contains("aud"),
        "{}",
        r.body
    );
    let r = status(
        "/any",
        json!({"sub": "u", "exp": exp(), "aud": "orders-api"}),
    )
    .await;
    assert_eq!(r.status, 401, "a token from no issuer: {}", r.body);
    assert!(
        r.json()["detail"].as_str().unwrap_or("").contains("iss"),
        "{}",
        r.body
    );
    for (aud, want) in [
        (json!("orders-api"), 200),
        (json!(["billing", "orders-api"]), 200),
        (json!("billing"), 401),
        (json!([]), 401),
        (json!({"v": "orders-api"}), 401),
        (json!(7), 401),
    ] {
        let r = status(
            "/any",
            json!({"sub": "u", "exp": exp(), "aud": aud, "iss": ISS}),
        )
        .await;
        assert_eq!(r.status, want, "aud {aud}: {}", r.body);
    }

    // scope: a space-separated `scope` string or a `scp` array, every listed scope.
    for (claims, want) in [
        (json!({"scope": "orders:read orders:write"}), 200),
        (json!({"scp": ["orders:read", "orders:write"]}), 200),
        (json!({"scp": "orders:read orders:write"}), 200),
        (json!({"scp": ["orders:read"]}), 403),
        (json!({"scope": "orders:read"}), 403),
        (json!({"scope": ["orders:read", "orders:write"]}), 200),
        (
            json!({"scope": "orders:read", "scp": ["orders:write"]}),
            200,
        ),
        (json!({"scope": "orders"}), 403),
        (json!({}), 403),
    ] {
        let r = status("/scoped", with(claims.clone())).await;
        assert_eq!(r.status, want, "{claims}: {}", r.body);
        if want == 403 {
            assert_eq!(r.json()["error_code"], "INSUFFICIENT_SCOPE");
            assert!(r
                .header("www-authenticate")
                .unwrap_or("")
                .contains("scope=\"orders:read orders:write\""));
        }
    }

    // Any other claim: its value is one of those given; an array item counts.
    for (claims, want) in [
        (json!({"group": "ops"}), 200),
        (json!({"group": ["x", "admins"]}), 200),
        (json!({"group": "x"}), 403),
        (json!({"group": ["x"]}), 403),
        (json!({"group": {"name": "ops"}}), 403),
        (json!({}), 403),
    ] {
        let r = status("/grouped", with(claims.clone())).await;
        assert_eq!(r.status, want, "{claims}: {}", r.body);
    }
    // Numbers and booleans compare by their text.
    for (claims, want) in [
        (json!({"tier": 2, "admin": true}), 200),
        (json!({"tier": "2", "admin": "true"}), 200),
        (json!({"tier": 3, "admin": true}), 403),
        (json!({"tier": 2, "admin": false}), 403),
        (json!({"tier": 2}), 403),
    ] {
        let r = status("/tiered", with(claims.clone())).await;
        assert_eq!(r.status, want, "{claims}: {}", r.body);
    }

    // forward_claims: a string as it is, an array of strings joined with commas, anything
    // else (an object `sub` too) as JSON; a control character leaves the header out.
    let t = format!(
        "Bearer {}",
        token(with(json!({
            "sub": {"id": "u1", "tenant": "acme"},
            "roles": ["a", "b"],
            "org": "acme",
            "n": 42,
            "bad": "a\nb",
            "mixed": [1, "a", null]
        })))
    );
    let r = call(
        port,
        "/fwd",
        &[
            ("authorization", &t),
            ("x-user-id", "forged"),
            ("x-bad", "forged"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "an object sub verifies: {}", r.body);
    let h = upstream_headers(&r);
    assert_eq!(h["x-user-id"], r#"{"id":"u1","tenant":"acme"}"#, "{h:?}");
    assert_eq!(h["x-roles"], "a,b");
    assert_eq!(h["x-org"], "acme");
    assert_eq!(h["x-n"], "42");
    assert_eq!(h["x-mixed"], r#"[1,"a",null]"#);
    assert!(
        !h.contains_key("x-bad"),
        "the client's copy is removed too: {h:?}"
    );
    // A number sub, and a token without the forwarded claims: the client's copies still go.
    let t = format!("Bearer {}", token(with(json!({"sub": 7}))));
    let r = call(port, "/fwd", &[("authorization", &t), ("x-org", "forged")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let h = upstream_headers(&r);
    assert_eq!(h["x-user-id"], "7");
    assert!(!h.contains_key("x-org"), "{h:?}");
    // Another type of iss is not the issuer; exp must be a number, in the future; nbf past.
    let r = status("/any", with(json!({"iss": {"x": ISS}}))).await;
    assert_eq!(r.status, 401, "{}", r.body);
    let r = status(
        "/any",
        with(json!({"jti": {"nested": [1, 2]}, "act": null})),
    )
    .await;
    assert_eq!(r.status, 200, "claims of any type verify: {}", r.body);
    let mut t = with(json!({}));
    t["exp"] = json!(exp().to_string());
    let r = status("/any", t).await;
    assert_eq!(r.status, 401, "a string exp: {}", r.body);
    let mut t = with(json!({}));
    t["exp"] = json!(unix_now() - 120);
    let r = status("/any", t).await;
    assert_eq!(r.status, 401, "expired: {}", r.body);
    let r = status("/any", with(json!({"nbf": unix_now() + 600}))).await;
    assert_eq!(r.status, 401, "not yet valid: {}", r.body);
    let r = status("/any", with(json!({"nbf": unix_now() - 5}))).await;
    assert_eq!(r.status, 200, "valid since: {}", r.body);
    let r = status("/any", with(json!({"iss": [ISS, "https://evil.example"]}))).await;
    assert_eq!(
        r.status, 401,
        "one issuer, not a list to choose from: {}",
        r.body
    );

    // Tokens written by hand: what a library would not mint.
    let good_claims = with(json!({"sub": "u"})).to_string();
    let forged = |header: &str, claims: &str| {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let message = format!("{}.{}", b64(header), b64(claims));
        let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
        let sig =
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
                .expect("sign");
        format!("Bearer {message}.{sig}")
    };
    let ok = forged(r#"{"alg":"HS256","typ":"JWT"}"#, &good_claims);
    assert_eq!(
        call(port, "/any", &[("authorization", &ok)]).await.status,
        200
    );
    for (why, header, claims) in [
        (
            "crit",
            r#"{"alg":"HS256","crit":["exp"],"exp":1}"#.to_string(),
            good_claims.clone(),
        ),
        (
            "b64",
            r#"{"alg":"HS256","b64":false,"crit":["b64"]}"#.to_string(),
            good_claims.clone(),
        ),
        (
            "alg twice",
            r#"{"alg":"none","alg":"HS256"}"#.to_string(),
            good_claims.clone(),
        ),
        (
            "exp twice",
            r#"{"alg":"HS256"}"#.to_string(),
            good_claims.replacen('{', &format!("{{\"exp\":{},", unix_now() - 1000), 1),
        ),
        (
            "aud twice",
            r#"{"alg":"HS256"}"#.to_string(),
            good_claims.replacen('{', "{\"aud\":\"billing\",", 1),
        ),
        (
            "an array",
            r#"{"alg":"HS256"}"#.to_string(),
            "[1]".to_string(),
        ),
    ] {
        let t = forged(&header, &claims);
        let r = call(port, "/any", &[("authorization", &t)]).await;
        assert_eq!(r.status, 401, "{why}: {}", r.body);
    }
    // Padding on a segment is not base64url as JWS writes it.
    let padded = ok.replacen('.', "=.", 1);
    assert_eq!(
        call(port, "/any", &[("authorization", &padded)])
            .await
            .status,
        401
    );
}

/// A `jwks_file` key is held to its JWK as a provider's is: its `alg` pins the tokens it
/// verifies, `use: enc` keys verify nothing (a token naming one falls back to the kid-less keys
/// of its family, here pinned to another algorithm), and a key without a kid serves tokens
/// naming none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_file_keys_are_held_to_their_jwk() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/jwt");
    let private = std::fs::read(fixtures.join("rs256-private.pem")).expect("key");
    let out = std::process::Command::new("openssl")
        .args(["rsa", "-pubin", "-noout", "-modulus", "-in"])
        .arg(fixtures.join("rs256-public.pem"))
        .output()
        .expect("openssl");
    let hex = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("Modulus=")
        .to_string();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect();
    use base64::Engine;
    let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let jwk = |extra: Value| {
        let mut k = json!({"kty": "RSA", "n": n, "e": "AQAB"});
        for (a, b) in extra.as_object().expect("object") {
            k[a] = b.clone();
        }
        k
    };
    let set = json!({"keys": [
        jwk(json!({"kid": "pinned", "alg": "RS256"})),
        jwk(json!({"kid": "sealed", "use": "enc"})),
        jwk(json!({"alg": "PS256"})),
    ]});
    let dir = temp_dir("cred-jwks-file");
    std::fs::write(dir.join("keys.json"), set.to_string()).expect("write");
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = serving_one_thread(
        port,
        admin,
        &format!(
            "[upstreams.api]\ntargets = [\"{}\"]\n[jwt]\njwks_file = \"{}\"\nalgorithms = [\"RS256\", \"PS256\"]\n[[routes]]\npath_prefix = \"/\"\nupstream = \"api\"\nauth = {{ jwt = \"required\" }}\n",
            backend.addr,
            dir.join("keys.json").display()
        ),
    );
    let _gw = running(Path::new(BIN), &toml, port, admin).await;
    let claims = json!({"sub": "u", "exp": exp()});
    let send = |t: String| async move {
        call(port, "/", &[("authorization", &format!("Bearer {t}"))])
            .await
            .status
    };
    assert_eq!(
        send(jwt_with_kid("RS256", &private, "pinned", &claims)).await,
        200
    );
    assert_eq!(
        send(jwt_with_kid("PS256", &private, "pinned", &claims)).await,
        401,
        "the key's alg pins RS256"
    );
    assert_eq!(
        send(jwt_with_kid("RS256", &private, "sealed", &claims)).await,
        401,
        "an encryption key verifies nothing"
    );
    assert_eq!(
        send(jwt("PS256", &private, &claims)).await,
        200,
        "no kid: the kid-less key"
    );
    assert_eq!(
        send(jwt("RS256", &private, &claims)).await,
        401,
        "the kid-less key is pinned too"
    );
}

// ------------------------------------------------------------------ 4. underscores

/// An auth service that records what it was sent and answers 200 with
/// `X-Auth-Request-User: alice`.
async fn recording_service(
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let _ = body.collect().await;
                        seen.lock().expect("lock").push(parts.headers);
                        let mut resp = Response::new(Full::new(Bytes::new()));
                        resp.headers_mut()
                            .insert("x-auth-request-user", "alice".parse().expect("v"));
                        Ok::<_, std::io::Error>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

fn underscore_config(
    port: u16,
    admin: u16,
    be: SocketAddr,
    auth: SocketAddr,
    extra: &str,
) -> String {
    serving_one_thread(
        port,
        admin,
        &format!(
            r#"{extra}
[upstreams.api]
targets = ["{be}"]
[jwt]
secret = "{SECRET}"
algorithms = ["HS256"]
[[routes]]
name = "ruled"
path_prefix = "/ruled"
upstream = "api"
request_headers = {{ set = {{ "X-Client" = "gateway" }}, add = {{ "X-Added" = "1" }}, remove = ["X-Debug"] }}
[[routes]]
name = "sso"
path_prefix = "/sso"
upstream = "api"
auth = {{ forward = {{ url = "http://{auth}/check", response_headers = ["X-Auth-Request-User"] }} }}
[[routes]]
name = "claims"
path_prefix = "/claims"
upstream = "api"
auth = {{ jwt = "required", forward_claims = {{ sub = "X-User-Id" }} }}
"#
        ),
    )
}

const SPELLED: [(&str, &str); 8] = [
    ("X_Client", "evil"),
    ("X_Added", "evil"),
    ("X_Debug", "1"),
    ("X_Real_IP", "203.0.113.9"),
    ("X_Forwarded_Host", "evil.example"),
    ("X_Original_URI", "/admin"),
    ("X_Auth_Request_User", "root"),
    ("X_User_Id", "root"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underscored_headers_are_dropped_before_anything_reads_them() {
    let backend = Backend::start().await.expect("backend");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (auth, _svc) = recording_service(seen.clone()).await;
    let (port, admin) = (free_port(), free_port());
    let _gw = running(
        Path::new(BIN),
        &underscore_config(port, admin, backend.addr, auth, ""),
        port,
        admin,
    )
    .await;
    let t = format!("Bearer {}", token(json!({"sub": "u1", "exp": exp()})));
    let mut headers: Vec<(&str, &str)> = SPELLED.to_vec();
    headers.push(("authorization", &t));
    headers.push(("x-plain", "kept"));
    for path in ["/ruled", "/sso", "/claims"] {
        let r = call(port, path, &headers).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let h = upstream_headers(&r);
        assert!(
            h.keys().all(|k| !k.contains('_')),
            "{path}: nothing with an underscore goes up: {h:?}"
        );
        assert_eq!(h["x-plain"], "kept");
        if path == "/ruled" {
            assert_eq!(h["x-client"], "gateway");
            assert_eq!(h["x-added"], "1");
        }
        if path == "/sso" {
            assert_eq!(h["x-auth-request-user"], "alice");
        }
        if path == "/claims" {
            assert_eq!(h["x-user-id"], "u1");
        }
    }
    let asked = seen.lock().expect("lock").pop().expect("asked");
    assert!(
        asked.keys().all(|k| !k.as_str().contains('_')),
        "the auth service never reads a client's underscore spelling: {asked:?}"
    );
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_request_headers_dropped_total",
            &["underscore"]
        ),
        (3 * SPELLED.len()) as f64,
        "{m}"
    );

    // A config that reads a header whose name holds `_` would never see it: refused, named.
    let dir = temp_dir("cred-underscore-check");
    let conf = dir.join("t.toml");
    std::fs::write(
        &conf,
        "[upstreams.a]\ntargets = [\"127.0.0.1:9\"]\n[limits.t]\nkey = \"header:X_Tenant\"\nrate = \"1/s\"\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\nlimits = [\"t\"]\n",
    )
    .expect("write");
    let (ok, out) = check(&conf);
    assert!(!ok, "{out}");
    assert!(
        out.contains("limits.t.key") && out.contains("underscores_in_headers"),
        "{out}"
    );
    std::fs::write(
        &conf,
        "[upstreams.a]\ntargets = [\"127.0.0.1:9\"]\nbalance = \"hash\"\nhash_key = \"header:X_User\"\n[[routes]]\npath_prefix = \"/\"\nupstream = \"a\"\n",
    )
    .expect("write");
    let (ok, out) = check(&conf);
    assert!(!ok && out.contains("upstreams.a.hash_key"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_underscores_never_shadow_what_the_gateway_writes() {
    let backend = Backend::start().await.expect("backend");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (auth, _svc) = recording_service(seen.clone()).await;
    let (port, admin) = (free_port(), free_port());
    let _gw = running(
        Path::new(BIN),
        &underscore_config(
            port,
            admin,
            backend.addr,
            auth,
            "underscores_in_headers = true",
        ),
        port,
        admin,
    )
    .await;
    let t = format!("Bearer {}", token(json!({"sub": "u1", "exp": exp()})));
    let mut headers: Vec<(&str, &str)> = SPELLED.to_vec();
    headers.push(("authorization", &t));
    headers.push(("X_Other", "kept"));
    headers.push(("X_Forwarded_For", "198.51.100.7"));
    headers.push(("X_Request_Id", "forged-id"));
    let r = call(port, "/ruled", &headers).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-client"], "gateway", "{h:?}");
    assert_eq!(h["x-added"], "1");
    for gone in [
        "x_client",
        "x_added",
        "x_debug",
        "x_forwarded_for",
        "x_request_id",
    ] {
        assert!(!h.contains_key(gone), "{gone}: {h:?}");
    }
    assert_eq!(h["x_other"], "kept", "underscores are kept: {h:?}");
    let r = call(port, "/sso", &headers).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let h = upstream_headers(&r);
    assert_eq!(h["x-auth-request-user"], "alice");
    assert!(!h.contains_key("x_auth_request_user"), "{h:?}");
    let asked = seen.lock().expect("lock").pop().expect("asked");
    for gone in ["x_original_uri", "x_real_ip", "x_forwarded_host"] {
        assert!(
            !asked.contains_key(gone),
            "{gone} never reaches the auth service beside the gateway's own: {asked:?}"
        );
    }
    let r = call(port, "/claims", &headers).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-user-id"], "u1");
    assert!(!h.contains_key("x_user_id"), "{h:?}");
}

#[test]
fn the_ingress_import_maps_enable_underscores_in_headers() {
    let dir = temp_dir("cred-underscore-import");
    let ingress = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
spec:
  ingressClassName: nginx
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
"#;
    let configmap = |v: &str| {
        format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ingress-nginx-controller\n  namespace: ingress-nginx\ndata:\n  enable-underscores-in-headers: \"{v}\"\n"
        )
    };
    let import = |yaml: &str, extra: &[&str]| {
        let f = dir.join("in.yaml");
        std::fs::write(&f, yaml).expect("write");
        let out = std::process::Command::new(BIN)
            .arg("import-ingress")
            .arg(&f)
            .args(extra)
            .output()
            .expect("run");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (toml, _) = import(ingress, &[]);
    assert!(
        !toml
            .lines()
            .any(|l| l.trim_start().starts_with("underscores_in_headers")),
        "without the ConfigMap, nginx's default is Tollgate's: {toml}"
    );
    let (toml, err) = import(&format!("{ingress}{}", configmap("true")), &[]);
    assert!(
        toml.lines()
            .any(|l| l.trim() == "underscores_in_headers = true"),
        "{toml}\n{err}"
    );
    let (toml, _) = import(&format!("{ingress}{}", configmap("false")), &[]);
    assert!(
        !toml
            .lines()
            .any(|l| l.trim() == "underscores_in_headers = true"),
        "{toml}"
    );
    // The output loads.
    let (toml, _) = import(&format!("{ingress}{}", configmap("true")), &[]);
    let conf = dir.join("out.toml");
    std::fs::write(&conf, toml).expect("write");
    let (ok, out) = check(&conf);
    assert!(ok, "{out}");
    // Another ConfigMap named on the command line.
    let other = configmap("true").replace("ingress-nginx-controller", "edge-config");
    let (toml, _) = import(
        &format!("{ingress}{other}"),
        &["--configmap", "ingress-nginx/edge-config"],
    );
    assert!(
        toml.lines()
            .any(|l| l.trim() == "underscores_in_headers = true"),
        "{toml}"
    );
}

// ------------------------------------------------------------------ 5. retries

/// A target that reads each request head, then resets the connection (RST) without a word.
fn resetting_target() -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                s.fetch_add(1, Ordering::SeqCst);
                let sock = socket2::SockRef::from(&c);
                let _ = sock.set_linger(Some(Duration::ZERO));
                let _ = c.flush();
            });
        }
    });
    (port, seen)
}

/// A target that reads requests and never answers.
fn silent_target() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
                let mut buf = [0u8; 4096];
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    port
}

/// How many of `n` requests to `path` are answered 200.
async fn served(port: u16, method: &str, path: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let mut c = Conn::open(port).await.expect("conn");
        let body = if method == "POST" { "hi" } else { "" };
        let r = c.send(method, path, &[], body).await.expect("request");
        ok += usize::from(r.status == 200);
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_policy_never_serves_fewer_requests_than_none() {
    let be = Backend::start().await.expect("backend");
    let refusing = free_port();
    let (resetting, _) = resetting_target();
    let silent = silent_target();
    let policies = [
        ("none", String::new()),
        ("connect", r#"retry = { attempts = 2, on = ["connect"] }"#.to_string()),
        ("timeout", r#"retry = { attempts = 1, on = ["timeout"] }"#.to_string()),
        (
            "broke",
            r#"retry = { attempts = 2, on = ["connect", "timeout", "502", "503", "504"], budget = 0.0 }"#
                .to_string(),
        ),
        ("off", "retry = { attempts = 0 }".to_string()),
    ];
    let bad = [
        ("refusing", refusing),
        ("resetting", resetting),
        ("silent", silent),
    ];
    let mut toml = String::new();
    for (kind, target) in bad {
        for (name, policy) in &policies {
            toml.push_str(&format!(
                "[upstreams.{kind}_{name}]\ntargets = [\"127.0.0.1:{target}\", \"{be}\"]\nhealth_check = false\nread_timeout = \"300ms\"\n{policy}\n[[routes]]\nname = \"{kind}_{name}\"\npath_prefix = \"/{kind}/{name}/\"\nupstream = \"{kind}_{name}\"\n",
                be = be.addr
            ));
        }
    }
    // Three refusing targets and one good: a failed connect falls over as far as it takes.
    toml.push_str(&format!(
        "[upstreams.mostly_dead]\ntargets = [\"127.0.0.1:{refusing}\", \"127.0.0.1:{}\", \"127.0.0.1:{}\", \"{}\"]\nhealth_check = false\nretry = {{ attempts = 1, on = [\"timeout\"] }}\n[[routes]]\nname = \"mostly_dead\"\npath_prefix = \"/mostly_dead/\"\nupstream = \"mostly_dead\"\n",
        free_port(),
        free_port(),
        be.addr
    ));
    let (port, admin) = (free_port(), free_port());
    let _gw = running(
        Path::new(BIN),
        &serving_one_thread(port, admin, &toml),
        port,
        admin,
    )
    .await;
    let n = 20;
    for (kind, _) in bad {
        let without = served(port, "GET", &format!("/{kind}/none/x"), n).await;
        for (name, _) in &policies[1..] {
            let with = served(port, "GET", &format!("/{kind}/{name}/x"), n).await;
            assert!(
                with >= without,
                "{kind} target: retry policy {name} serves {with} of {n}, none serves {without}"
            );
            if kind == "refusing" {
                assert_eq!(with, n, "{kind}/{name}: nothing was sent, so it falls over");
            }
        }
        if kind == "refusing" {
            assert_eq!(without, n);
            // Nothing was sent: a POST falls over too, in every configuration.
            for (name, _) in &policies {
                let posts = served(port, "POST", &format!("/{kind}/{name}/x"), n).await;
                assert_eq!(posts, n, "POST, policy {name}");
            }
        }
    }
    assert_eq!(served(port, "GET", "/mostly_dead/x", n).await, n);
    assert_eq!(served(port, "POST", "/mostly_dead/x", n).await, n);
    let m = metrics(admin).await;
    assert_eq!(
        metric(
            &m,
            "tollgate_upstream_retry_budget_exhausted_total",
            &["refusing_broke"]
        ),
        0.0,
        "falling over after a failed connect spends no budget: {m}"
    );
}
