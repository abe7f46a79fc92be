use super::*;
use k8s_openapi::ByteString;

fn secret(ns: &str, name: &str, rv: &str, data: &[(&str, &[u8])]) -> Secret {
    let mut s = Secret::default();
    s.metadata.namespace = Some(ns.into());
    s.metadata.name = Some(name.into());
    s.metadata.uid = Some(format!("uid-{ns}-{name}"));
    s.metadata.resource_version = Some(rv.into());
    s.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect(),
    );
    s
}

fn table(text: &str) -> Table {
    text.parse().expect("toml")
}

const NAMES: &str = "[tls]\ncertificates = [{ cert = \"/etc/tollgate/tls/shop/site/tls.crt\", key = \"/etc/tollgate/tls/shop/site/tls.key\" }]\nclient_ca = \"/etc/tollgate/tls/pki/ca/ca.crt\"\n[auth.a]\nbasic = { htpasswd = \"/etc/tollgate/tls/shop/users/auth\" }\n[upstreams.x]\ntargets = [\"127.0.0.1:1\"]\n";

#[test]
fn only_the_secrets_a_translation_names_are_held() {
    let named = named(&table(NAMES));
    let want: BTreeSet<(String, String)> = [("shop", "site"), ("pki", "ca"), ("shop", "users")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(named, want);
    let site = secret("shop", "site", "1", &[("tls.crt", b"C"), ("tls.key", b"K")]);
    let users = secret("shop", "users", "1", &[("auth", b"u:h")]);
    let other = secret("shop", "unrelated", "1", &[("password", b"hunter2")]);
    let v = volume(&table(NAMES), &[&site, &users, &other], None);
    let mount = Path::new(TLS_MOUNT);
    assert_eq!(&*v[&mount.join("shop/site/tls.crt")].bytes, b"C");
    assert_eq!(&*v[&mount.join("shop/users/auth")].bytes, b"u:h");
    assert!(
        !v.keys()
            .any(|p| p.starts_with(mount.join("shop/unrelated"))),
        "a Secret no Ingress names is not held"
    );
    assert!(
        !v.keys().any(|p| p.starts_with(mount.join("pki"))),
        "absent"
    );
    let (crt, key) = default_paths();
    assert!(v.contains_key(&crt) && v.contains_key(&key), "the default");
}

#[test]
fn a_path_that_is_no_file_key_holds_nothing() {
    let t = table(
        "[[routes]]\nname = \"shop.a.1\"\npath_prefix = \"/etc/tollgate/tls/kube-system/token\"\n",
    );
    assert!(named(&t).is_empty());
}

#[test]
fn a_secrets_version_follows_its_resource_version() {
    let t = table(NAMES);
    let v1 = volume(
        &t,
        &[&secret("shop", "site", "1", &[("tls.crt", b"C")])],
        None,
    );
    let v2 = volume(
        &t,
        &[&secret("shop", "site", "2", &[("tls.crt", b"C2")])],
        None,
    );
    let p = Path::new(TLS_MOUNT).join("shop/site/tls.crt");
    assert_ne!(v1[&p].version, v2[&p].version);
    let again = volume(
        &t,
        &[&secret("shop", "site", "1", &[("tls.crt", b"C")])],
        None,
    );
    assert_eq!(v1[&p], again[&p]);
}

#[test]
fn hostile_secret_keys_and_names_stay_in_their_folder() {
    // The API server allows neither, but the controller does not count on it.
    let t = table(
        "[auth.a]\nbasic = { htpasswd = \"/etc/tollgate/tls/shop/users/auth\" }\n\
         [auth.b]\nbasic = { htpasswd = \"/etc/tollgate/tls/../../../etc/shadow\" }\n",
    );
    let s = secret(
        "shop",
        "users",
        "1",
        &[
            ("auth", b"u:h"),
            ("../../x", b"no"),
            (".hidden", b"no"),
            ("/etc/tollgate/tls/bank/vault/tls.crt", b"planted"),
        ],
    );
    let v = volume(&t, &[&s], None);
    let (crt, key) = default_paths();
    let mut held: Vec<PathBuf> = v
        .keys()
        .filter(|p| **p != crt && **p != key)
        .cloned()
        .collect();
    held.sort();
    assert_eq!(held, [Path::new(TLS_MOUNT).join("shop/users/auth")]);
    assert!(v.keys().all(|p| tollgate_config::mounted::may_hold(p)));
}

#[test]
fn the_default_certificate_is_the_named_secret_when_it_is_whole() {
    let t = Table::new();
    let d = secret(
        "ingress",
        "wild",
        "3",
        &[("tls.crt", b"WC"), ("tls.key", b"WK")],
    );
    let (crt, key) = default_paths();
    let v = volume(&t, &[&d], Some("ingress/wild"));
    assert_eq!(&*v[&crt].bytes, b"WC");
    assert_eq!(&*v[&key].bytes, b"WK");
    // Half a certificate, or none: the made one.
    let half = secret("ingress", "wild", "4", &[("tls.crt", b"WC")]);
    for v in [
        volume(&t, &[&half], Some("ingress/wild")),
        volume(&t, &[], Some("ingress/wild")),
        volume(&t, &[], None),
    ] {
        let pem = String::from_utf8(v[&crt].bytes.to_vec()).expect("pem");
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        assert!(String::from_utf8_lossy(&v[&key].bytes).contains("PRIVATE KEY"));
    }
}

#[test]
fn a_missing_tls_secret_leaves_its_hosts_on_the_default_certificate() {
    let mut t = table(NAMES);
    let site = secret("shop", "site", "1", &[("tls.crt", b"C")]); // no tls.key
    let v = volume(&t, &[&site], None);
    let problems = unheld_certificates(&mut t, &v);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("Secret shop/site (spec.tls)"),
        "{problems:?}"
    );
    assert!(t.get("tls").and_then(|t| t.get("certificates")).is_none());
    assert!(
        t["tls"].get("client_ca").is_some(),
        "a client CA is never dropped with a certificate: {t:?}"
    );

    let mut t = table(NAMES);
    let whole = secret("shop", "site", "1", &[("tls.crt", b"C"), ("tls.key", b"K")]);
    let v = volume(&t, &[&whole], None);
    assert!(unheld_certificates(&mut t, &v).is_empty());
    assert_eq!(t["tls"]["certificates"].as_array().map(Vec::len), Some(1));
}

#[test]
fn helm_releases_and_tokens_lose_their_data() {
    let mut s = secret("a", "sh.helm.release.v1.x.v1", "1", &[("release", b"big")]);
    s.type_ = Some("helm.sh/release.v1".into());
    trim(&mut s);
    assert!(s.data.is_none());
    let mut s = secret("a", "site", "1", &[("tls.crt", b"C")]);
    s.type_ = Some("kubernetes.io/tls".into());
    trim(&mut s);
    assert!(s.data.is_some());
}
