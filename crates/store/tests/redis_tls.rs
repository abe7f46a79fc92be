//! The store over TLS (`rediss://`) against a real redis-server speaking TLS only, with
//! certificates of a CA made by the test: verified by `ca`, refused when the CA is another
//! (or only the system's roots), mutual TLS, ACL users with the password in the URL or from
//! `password_env`, and a cluster speaking TLS between its nodes too.

use std::sync::Arc;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Decision, LimitSpec, ManualClock, Rate};
use tollgate_store::*;
use tollgate_testkit::{pki, RedisCluster, RedisServer};

const HOUR: Duration = Duration::from_secs(3600);

fn metrics() -> StoreMetrics {
    StoreMetrics::register(&prometheus::Registry::new()).expect("metrics")
}

fn pem(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).expect("read a PEM file")
}

/// The server's CA, and its client certificate when `client` (the one redis-cli uses).
fn tls_of(r: &RedisServer, client: bool) -> Tls {
    let t = r.tls.as_ref().expect("a TLS server");
    Tls {
        ca: Some(pem(&t.ca_file)),
        client_cert: client.then(|| (pem(&t.client.0), pem(&t.client.1))),
    }
}

fn store(target: Target, tls: Option<Tls>, password: Option<&str>) -> (RedisStore, StoreMetrics) {
    let mut cfg = RedisConfig::new(target, Duration::from_secs(2), 2);
    cfg.tls = tls;
    cfg.password = password.map(str::to_string);
    let m = metrics();
    let s = RedisStore::new(&cfg, Arc::new(ManualClock::new(1)), m.clone()).expect("store");
    (s, m)
}

fn spec() -> LimitSpec {
    LimitSpec {
        algorithm: AlgorithmKind::TokenBucket,
        rate: Rate::new(1, HOUR).expect("rate"),
        burst: 5,
        delay: 0,
        calendar: None,
    }
}

/// Five admitted with exactly 4, 3, 2, 1, 0 left, then a refusal: the state is in Redis.
async fn counts_exactly(s: &RedisStore, limit: &str) {
    let sp = spec();
    let k = GlobalKey {
        limit,
        key: 7,
        known: false,
        patient: false,
    };
    for want in (0..5).rev() {
        match s.acquire(&sp, k, 1).await {
            Ok(Decision::Allow { remaining, .. }) => assert_eq!(remaining, want),
            other => panic!("{limit}: {other:?}"),
        }
    }
    match s.acquire(&sp, k, 1).await {
        Ok(Decision::Deny { .. }) => {}
        other => panic!("{limit}: the sixth must be refused: {other:?}"),
    }
}

/// A decision that must fail, and how: the error's text, with the error counted by kind.
async fn fails(s: &RedisStore, m: &StoreMetrics) -> String {
    let sp = spec();
    let e = match s
        .acquire(
            &sp,
            GlobalKey {
                limit: "x",
                key: 1,
                known: false,
                patient: false,
            },
            1,
        )
        .await
    {
        Err(e) => e,
        Ok(d) => panic!("decided without a verified connection: {d:?}"),
    };
    assert!(
        !matches!(e, StoreError::Timeout(_)),
        "the reason, not a timeout: {e}"
    );
    assert_eq!(m.errors.with_label_values(&[e.kind()]).get(), 1, "{e}");
    e.to_string()
}

#[tokio::test]
async fn a_global_limit_over_rediss_verified_by_its_ca_counts_exactly() {
    let r = RedisServer::start_tls(false).expect("redis-server with TLS");
    assert!(r.url().starts_with("rediss://"));
    let (s, _) = store(Target::Single(r.url()), Some(tls_of(&r, false)), None);
    counts_exactly(&s, "tls").await;
    assert!(
        !r.cli(&["KEYS", "*"]).is_empty(),
        "the state is on the TLS server"
    );
}

#[tokio::test]
async fn a_server_certificate_the_ca_did_not_sign_fails_the_connection() {
    let r = RedisServer::start_tls(false).expect("redis-server with TLS");
    let other = pki::Ca::new("another ca").expect("a CA");
    let wrong = Tls {
        ca: Some(other.cert_pem.clone().into_bytes()),
        client_cert: None,
    };
    let (s, m) = store(Target::Single(r.url()), Some(wrong), None);
    let e = fails(&s, &m).await;
    assert!(e.contains("invalid peer certificate"), "{e}");
    assert_eq!(m.errors.with_label_values(&["connection"]).get(), 1);
    // Without `ca` the system's roots verify, and they do not know the test's CA either.
    let (s, m) = store(Target::Single(r.url()), None, None);
    let e = fails(&s, &m).await;
    assert!(e.contains("invalid peer certificate"), "{e}");
    // And nothing was written by either.
    assert_eq!(r.cli(&["DBSIZE"]), "0");
}

#[tokio::test]
async fn mutual_tls_needs_a_client_certificate_of_the_servers_ca() {
    let r = RedisServer::start_tls(true).expect("redis-server with TLS and client auth");
    let (s, _) = store(Target::Single(r.url()), Some(tls_of(&r, true)), None);
    counts_exactly(&s, "mtls").await;

    let (s, m) = store(Target::Single(r.url()), Some(tls_of(&r, false)), None);
    let e = fails(&s, &m).await;
    assert!(!e.is_empty());

    // A certificate of another CA is refused as well.
    let other = pki::Ca::new("another ca").expect("a CA");
    let leaf = other
        .issue(&pki::LeafSpec::client("intruder"))
        .expect("a certificate");
    let mut t = tls_of(&r, false);
    t.client_cert = Some((leaf.cert_pem.into_bytes(), leaf.key_pem.into_bytes()));
    let (s, m) = store(Target::Single(r.url()), Some(t), None);
    fails(&s, &m).await;
    assert_eq!(r.cli(&["DBSIZE"]), "1", "only the first store wrote");
}

#[tokio::test]
async fn a_client_key_that_is_not_its_certificates_is_refused_at_start() {
    let r = RedisServer::start_tls(true).expect("redis-server with TLS");
    let mut t = tls_of(&r, true);
    let other = pki::Ca::new("another ca")
        .expect("a CA")
        .issue(&pki::LeafSpec::client("x"))
        .expect("a certificate");
    t.client_cert = t.client_cert.map(|(c, _)| (c, other.key_pem.into_bytes()));
    let mut cfg = RedisConfig::new(Target::Single(r.url()), Duration::from_secs(1), 1);
    cfg.tls = Some(t);
    match RedisStore::new(&cfg, Arc::new(ManualClock::new(1)), metrics()) {
        Err(e) => assert!(e.to_string().contains("client certificate and key"), "{e}"),
        Ok(_) => panic!("a mismatched client key must be refused"),
    }
    // Certificates for a redis:// URL are a mistake too.
    let mut cfg = RedisConfig::new(
        Target::Single("redis://127.0.0.1:1".into()),
        Duration::from_secs(1),
        1,
    );
    cfg.tls = Some(Tls::default());
    assert!(RedisStore::new(&cfg, Arc::new(ManualClock::new(1)), metrics()).is_err());
}

/// An ACL user `gw` whose password is the value of CARGO_PKG_NAME (which Cargo sets for the
/// test: an environment variable that is there without the test setting one); the default
/// user needs a password, so nothing passes unauthenticated.
fn with_acl_user(r: &RedisServer) {
    let ok = r.cli(&[
        "ACL",
        "SETUSER",
        "gw",
        "on",
        ">tollgate-store",
        "~*",
        "&*",
        "+@all",
    ]);
    assert_eq!(ok, "OK");
    let ok = r.cli(&["ACL", "SETUSER", "default", "resetpass", ">admin-pw"]);
    assert_eq!(ok, "OK");
}

#[tokio::test]
async fn an_acl_user_with_its_password_in_the_url_or_from_password_env() {
    let r = RedisServer::start_tls(false).expect("redis-server with TLS");
    with_acl_user(&r);
    let admin = |args: &[&str]| {
        let mut a = vec!["--no-auth-warning", "-a", "admin-pw"];
        a.extend_from_slice(args);
        r.cli(&a)
    };
    let port = r.port;

    // The password in the URL.
    let url = format!("rediss://gw:tollgate-store@127.0.0.1:{port}");
    let (s, _) = store(Target::Single(url), Some(tls_of(&r, false)), None);
    counts_exactly(&s, "url").await;
    assert!(admin(&["CLIENT", "LIST"]).contains("user=gw"));

    // No password: refused.
    let (s, m) = store(Target::Single(r.url()), Some(tls_of(&r, false)), None);
    let e = fails(&s, &m).await;
    assert!(e.contains("NOAUTH") || e.contains("uthentication"), "{e}");
    // A wrong one: refused.
    let url = format!("rediss://gw:wrong@127.0.0.1:{port}");
    let (s, m) = store(Target::Single(url), Some(tls_of(&r, false)), None);
    let e = fails(&s, &m).await;
    assert!(
        e.contains("WRONGPASS") || e.contains("uthentication"),
        "{e}"
    );

    // From TOML to a decision: user in the URL, password_env, ca relative to the config.
    let dir = r
        .tls
        .as_ref()
        .expect("tls")
        .ca_file
        .parent()
        .map(|d| d.to_path_buf());
    let dir = dir.expect("the certificates' folder");
    let text = format!(
        "[redis]\nurl = \"rediss://gw@127.0.0.1:{port}\"\nca = \"redis-ca.pem\"\npassword_env = \"CARGO_PKG_NAME\"\n"
    );
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, text).expect("write the config");
    let c = tollgate_config::load_file(&path).expect("valid");
    let rs = c.redis.expect("[redis]");
    let target = match rs.target {
        tollgate_config::model::RedisTarget::Url(u) => Target::Single(u),
        tollgate_config::model::RedisTarget::Cluster(n) => Target::Cluster(n),
    };
    let tls = rs.tls.map(|t| Tls {
        ca: t.ca,
        client_cert: t.client_cert.map(|c| (c.cert, c.key)),
    });
    let (s, _) = store(target, tls, rs.password.as_deref());
    counts_exactly(&s, "password_env").await;
    assert_eq!(admin(&["DBSIZE"]), "2");
}

#[tokio::test]
async fn a_cluster_over_tls_with_client_certificates() {
    let c = RedisCluster::start_tls(3, true).expect("a TLS cluster");
    let r = &c.nodes[0];
    let urls = c.urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
    let (s, _) = store(Target::Cluster(urls.clone()), Some(tls_of(r, true)), None);
    let sp = spec();
    let mut admitted = 0;
    for k in 0..60u64 {
        for _ in 0..6 {
            let d = s
                .acquire(
                    &sp,
                    GlobalKey {
                        limit: "cluster",
                        key: k,
                        known: false,
                        patient: false,
                    },
                    1,
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            admitted += d.is_allowed() as u32;
        }
    }
    assert_eq!(admitted, 300, "60 keys x burst 5");
    let counts = c.key_counts();
    assert_eq!(counts.iter().sum::<u64>(), 60, "{counts:?}");
    assert!(counts.iter().all(|&n| n > 0), "spread: {counts:?}");

    // Without a client certificate the cluster refuses, with the reason.
    let (s, m) = store(Target::Cluster(urls), Some(tls_of(r, false)), None);
    fails(&s, &m).await;
}
