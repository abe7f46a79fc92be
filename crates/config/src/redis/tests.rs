use crate::model::{RedisTarget, RedisTls};
use std::path::{Path, PathBuf};

/// PEM the config accepts: it checks the armour and the base64, not the DER (the store
/// and rustls judge the certificate itself).
const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUZm9yIGEgdGVzdCBvbmx5\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";

fn dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tollgate-redis-tls-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::write(d.join("ca.pem"), CERT).expect("write");
    std::fs::write(d.join("client.pem"), CERT).expect("write");
    std::fs::write(d.join("client.key"), KEY).expect("write");
    std::fs::write(d.join("junk.pem"), "not pem at all\n").expect("write");
    d
}

fn parse(text: &str, base: &Path) -> Result<crate::model::Config, Vec<String>> {
    crate::parse::parse(text, base, false).map_err(|p| p.iter().map(|p| p.to_string()).collect())
}

fn problems(text: &str, base: &Path) -> Vec<String> {
    parse(text, base).err().unwrap_or_default()
}

#[test]
fn rediss_with_a_ca_a_client_cert_and_a_password_from_the_environment() {
    let d = dir();
    // Cargo sets CARGO_PKG_NAME for the test binary: an environment variable that is there.
    let c = parse(
            "[redis]\nurl = \"rediss://gateway@127.0.0.1:6380/1\"\nca = \"ca.pem\"\nclient_cert = { cert = \"client.pem\", key = \"client.key\" }\npassword_env = \"CARGO_PKG_NAME\"\n",
            &d,
        )
        .expect("valid");
    let r = c.redis.expect("redis");
    assert_eq!(
        r.target,
        RedisTarget::Url("rediss://gateway@127.0.0.1:6380/1".into())
    );
    let tls = r.tls.expect("tls");
    assert_eq!(tls.ca.as_deref(), Some(CERT.as_bytes()));
    let cc = tls.client_cert.expect("client cert");
    assert_eq!(
        (cc.cert.as_slice(), cc.key.as_slice()),
        (CERT.as_bytes(), KEY.as_bytes())
    );
    assert_eq!(r.password.as_deref(), Some("tollgate-config"));
    // The watcher sees the certificate files.
    assert_eq!(
        c.files,
        vec![d.join("ca.pem"), d.join("client.pem"), d.join("client.key")]
    );
}

#[test]
fn rediss_without_ca_verifies_with_the_system_roots_and_plain_urls_have_no_tls() {
    let d = dir();
    let r = parse("[redis]\nurl = \"rediss://:pw@redis.example:6380\"\n", &d)
        .expect("valid")
        .redis
        .expect("redis");
    assert_eq!(r.tls, Some(RedisTls::default()));
    assert_eq!(r.password, None, "the URL's password stays in the URL");
    let r = parse("[redis]\nurl = \"redis://u:pw@10.0.0.1:6379\"\n", &d)
        .expect("valid")
        .redis
        .expect("redis");
    assert_eq!(r.tls, None);
    let r = parse(
            "[redis]\ncluster = [\"rediss://10.0.0.1:7000\", \"rediss://10.0.0.2:7000\"]\nca = \"ca.pem\"\n",
            &d,
        )
        .expect("valid")
        .redis
        .expect("redis");
    assert_eq!(r.tls.and_then(|t| t.ca).as_deref(), Some(CERT.as_bytes()));
}

#[test]
fn each_tls_and_auth_error_names_its_key_and_line() {
    let d = dir();
    let cases: &[(&str, &str)] = &[
            ("[redis]\ncluster = [\"rediss://a:1\", \"redis://b:1\"]\n", "redis.cluster: mixes redis:// and rediss:// nodes: every node of a cluster is reached alike (all redis:// or all rediss://) (line 2)"),
            ("[redis]\nurl = \"redis://a:1\"\nca = \"ca.pem\"\n", "redis.ca: only with rediss:// (TLS): the URL is redis:// (line 3)"),
            ("[redis]\nurl = \"redis://a:1\"\nclient_cert = { cert = \"client.pem\", key = \"client.key\" }\n", "redis.client_cert: only with rediss:// (TLS): the URL is redis:// (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nca = \"junk.pem\"\n", "redis.ca: \"junk.pem\" holds no certificate in PEM (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nca = 5\n", "redis.ca: expected a string, found integer (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nclient_cert = { cert = \"client.pem\", key = \"ca.pem\" }\n", "redis.client_cert.key: \"ca.pem\" holds no private key in PEM: no items found (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nclient_cert = { cert = \"client.key\", key = \"client.key\" }\n", "redis.client_cert.cert: \"client.key\" holds no certificate in PEM (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nclient_cert = { cert = \"client.pem\" }\n", "redis.client_cert: missing key \"key\" (client_cert = { cert = \"FILE\", key = \"FILE\" }) (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nclient_cert = { cert = \"client.pem\", key = \"client.key\", pass = \"x\" }\n", "redis.client_cert.pass: unknown key (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\nclient_cert = \"client.pem\"\n", "redis.client_cert: expected a table, found string (line 3)"),
            ("[redis]\nurl = \"rediss://a:1\"\npassword_env = \"TOLLGATE_TEST_SURELY_UNSET_9f1c\"\n", "redis.password_env: the environment variable TOLLGATE_TEST_SURELY_UNSET_9f1c is not set (line 3)"),
            ("[redis]\nurl = \"rediss://u:pw@a:1\"\npassword_env = \"CARGO_PKG_NAME\"\n", "redis.url: the URL carries a password and password_env is set: keep one (line 2)"),
            ("[redis]\ncluster = [\"redis://a:1\", \"redis://:pw@b:1\"]\npassword_env = \"CARGO_PKG_NAME\"\n", "redis.cluster[1]: the URL carries a password and password_env is set: keep one (line 2)"),
            ("[redis]\nurl = \"rediss://gateway@a:1\"\n", "redis.url: a user in the URL needs a password: write USER:PASSWORD@ or set password_env (line 2)"),
            ("[redis]\nurl = \"rediss://\"\n", "redis.url: \"rediss://\" is not a Redis URL: write redis://HOST:PORT or rediss://HOST:PORT (TLS), optionally with USER:PASSWORD@ and /DB (line 2)"),
        ];
    for (text, want) in cases {
        assert_eq!(problems(text, &d), vec![want.to_string()], "for:\n{text}");
    }
    // A missing file names the file (the OS's words follow).
    let p = problems("[redis]\nurl = \"rediss://a:1\"\nca = \"nope.pem\"\n", &d);
    let want = format!(
        "redis.ca: cannot read \"{}\": ",
        d.join("nope.pem").display()
    );
    assert!(p.len() == 1 && p[0].starts_with(&want), "{p:?}");
}
