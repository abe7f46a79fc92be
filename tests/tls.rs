//! TLS at the edge (issue 12), end to end: the built `tollgate` binary with certificates made
//! in the test, real clients (curl for HTTP/1.1 and h2, openssl s_client for what a handshake
//! shows, rustls for connections held across a renewal, Python's grpcio for gRPC) and real
//! servers behind (the loopback echo backend, a Python TLS server, a Python gRPC server).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_testkit::pki::{Ca, KeyKind, Leaf, LeafSpec};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// Debian's Python, which has python3-grpcio (the Makefile installs it).
const PYTHON: &str = "/usr/bin/python3";

struct Edge {
    gw: GatewayProc,
    port: u16,
    tls: u16,
    admin: u16,
}

/// A gateway with a plaintext and a TLS listener in front of `backend`; `tls_extra` goes into
/// `[tls]`, `extra` after everything else.
async fn edge(backend: u16, tls_table: &str, server_extra: &str, extra: &str) -> Edge {
    let (port, tls, admin) = (free_port(), free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
tls_listen = ["127.0.0.1:{tls}"]
admin = "127.0.0.1:{admin}"
threads = 2
{server_extra}

[tls]
{tls_table}

[upstreams.app]
targets = ["127.0.0.1:{backend}"]

{extra}

[[routes]]
path_prefix = "/"
upstream = "app"
"#
    );
    let gw = running(Path::new(BIN), &toml, tls, admin).await;
    Edge {
        gw,
        port,
        tls,
        admin,
    }
}

/// `curl` against the TLS listener as `host` (SNI and Host), trusting `ca`; returns
/// (status, http version, response headers) or the curl exit code as status 0.
fn curl(tls: u16, host: &str, path: &str, ca: &Path, args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-D", "-", "-o", "/dev/null"])
        .args(["-w", "\\n%{http_code} %{http_version}"])
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{host}:{tls}:127.0.0.1"))
        .args(args)
        .arg(format!("https://{host}:{tls}{path}"))
        .stdin(Stdio::null())
        .output()
        .expect("curl (Debian package curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = text.lines().last().unwrap_or("").to_string();
    let mut parts = last.split(' ');
    let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let version = parts.next().unwrap_or("").to_string();
    (status, version, text.to_ascii_lowercase())
}

/// A gateway serving one certificate for a.test (signed by its own CA) in front of a backend.
struct Site {
    e: Edge,
    ca: Ca,
    dir: PathBuf,
    cert: (PathBuf, PathBuf),
    _backend: Backend,
}

async fn site(tag: &str, tls_extra: &str, server_extra: &str) -> Site {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir(tag);
    let ca = Ca::new("test ca").expect("a CA");
    let cert = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let e = edge(
        backend.addr.port(),
        &format!(
            "certificates = [{}]\n{tls_extra}",
            cert_entry(&cert.0, &cert.1)
        ),
        server_extra,
        "",
    )
    .await;
    Site {
        e,
        ca,
        dir,
        cert,
        _backend: backend,
    }
}

fn write(dir: &Path, name: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
    leaf.write(dir, name).expect("write the certificate")
}

/// A certificate `ca` issues to `spec`, written into `dir` as NAME.crt and NAME.key.
fn issued(dir: &Path, name: &str, ca: &Ca, spec: &LeafSpec) -> (PathBuf, PathBuf) {
    write(dir, name, &ca.issue(spec).expect("a certificate"))
}

fn cert_entry(c: &Path, k: &Path) -> String {
    format!(
        "{{ cert = \"{}\", key = \"{}\" }}",
        c.display(),
        k.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_by_sni_with_a_default_and_h2_by_alpn() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-sni");
    let ca = Ca::new("test ca").expect("a CA");
    let ca_file = ca.write(&dir, "ca.pem").expect("write the CA");
    let mut a_spec = LeafSpec::server(&["a.test", "*.w.test"]);
    a_spec.common_name = "a.test".into();
    let (ac, ak) = issued(&dir, "a", &ca, &a_spec);
    let mut b_spec = LeafSpec::server(&["b.test"]);
    b_spec.key = KeyKind::Rsa2048;
    let (bc, bk) = issued(&dir, "b", &ca, &b_spec);
    let e = edge(
        backend.addr.port(),
        &format!(
            "certificates = [{}, {}]",
            cert_entry(&ac, &ak),
            cert_entry(&bc, &bk)
        ),
        "",
        "",
    )
    .await;

    // Each name gets its certificate (ECDSA and RSA), a wildcard covers one label, the first
    // is the default for unknown names and for clients without SNI.
    for (sni, want) in [
        (Some("a.test"), "a.test"),
        (Some("b.test"), "b.test"),
        (Some("x.w.test"), "a.test"),
        (Some("B.TEST"), "b.test"),
        (Some("other.test"), "a.test"),
        (None, "a.test"),
    ] {
        assert_eq!(
            handshake_subject(e.tls, sni, &[]).as_deref(),
            Some(want),
            "{sni:?}"
        );
    }
    // TLS 1.2 and 1.3 both; nothing older.
    assert!(handshake_subject(e.tls, Some("a.test"), &["-tls1_2"]).is_some());
    assert!(handshake_subject(e.tls, Some("a.test"), &["-tls1_3"]).is_some());
    assert!(handshake_subject(e.tls, Some("a.test"), &["-tls1_1"]).is_none());

    // A real HTTP/2 client gets h2 by ALPN, an HTTP/1.1 client HTTP/1.1; both verify the
    // chain against the test's CA.
    let (status, version, _) = curl(e.tls, "a.test", "/h2", &ca_file, &["--http2"]);
    assert_eq!((status, version.as_str()), (200, "2"));
    let (status, version, _) = curl(e.tls, "b.test", "/h1", &ca_file, &["--http1.1"]);
    assert_eq!((status, version.as_str()), (200, "1.1"));
    let (status, version, _) = curl(e.tls, "x.w.test", "/w", &ca_file, &["--http2"]);
    assert_eq!((status, version.as_str()), (200, "2"));
    // The plaintext listener still serves (no redirect configured).
    assert_eq!(get(e.port, "/plain", &[]).await.expect("plain").status, 200);
    let m = metrics(e.admin).await;
    let not_after = metric(
        &m,
        "tollgate_tls_certificate_expiry_seconds",
        &["name=\"a.test\""],
    );
    let now = unix_now() as f64;
    assert!(
        not_after > now + 80.0 * 86_400.0 && not_after < now + 91.0 * 86_400.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "tollgate_tls_certificate_expiry_seconds",
            &["name=\"b.test\""]
        ) > now
    );
    drop(e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_can_be_refused_and_tls_1_3_required() {
    let Site {
        e,
        ca,
        dir,
        cert: (ac, ak),
        ..
    } = site(
        "tls-strict",
        "unknown_sni = \"reject\"\nmin_version = \"1.3\"",
        "",
    )
    .await;
    assert_eq!(
        handshake_subject(e.tls, Some("a.test"), &[]).as_deref(),
        Some("a.test")
    );
    assert!(handshake_subject(e.tls, Some("b.test"), &[]).is_none());
    assert!(handshake_subject(e.tls, None, &[]).is_none());
    assert!(handshake_subject(e.tls, Some("a.test"), &["-tls1_2"]).is_none());
    assert!(handshake_subject(e.tls, Some("a.test"), &["-tls1_3"]).is_some());

    // A config reload applies [tls]: a second certificate, unknown names served the default.
    let (bc, bk) = issued(&dir, "b", &ca, &LeafSpec::server(&["b.test"]));
    let text = std::fs::read_to_string(&e.gw.config).expect("config");
    let text = text
        .replace("unknown_sni = \"reject\"", "unknown_sni = \"default\"")
        .replace(
            &format!("certificates = [{}]", cert_entry(&ac, &ak)),
            &format!(
                "certificates = [{}, {}]",
                cert_entry(&ac, &ak),
                cert_entry(&bc, &bk)
            ),
        );
    std::fs::write(&e.gw.config, text).expect("rewrite config");
    let t0 = Instant::now();
    while handshake_subject(e.tls, Some("b.test"), &[]).as_deref() != Some("b.test") {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", e.gw.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        handshake_subject(e.tls, Some("c.test"), &[]).as_deref(),
        Some("a.test")
    );
    drop(e);
}

/// A Kubernetes TLS Secret as the kubelet mounts it: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..TIMESTAMP/`, and an update is a new timestamped folder and an atomic rename
/// of the `..data` link.
struct MountedSecret {
    dir: PathBuf,
    n: usize,
}

impl MountedSecret {
    fn new(dir: PathBuf, leaf: &Leaf) -> Self {
        std::fs::create_dir_all(&dir).expect("secret dir");
        let mut s = MountedSecret { dir, n: 0 };
        s.update(&leaf.cert_pem, &leaf.key_pem);
        for f in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{f}"), s.dir.join(f)).expect("symlink");
        }
        s
    }

    fn update(&mut self, cert: &str, key: &str) {
        self.n += 1;
        let ts = format!("..2026_11_30_{:04}", self.n);
        let d = self.dir.join(&ts);
        std::fs::create_dir_all(&d).expect("timestamped dir");
        std::fs::write(d.join("tls.crt"), cert).expect("tls.crt");
        std::fs::write(d.join("tls.key"), key).expect("tls.key");
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&ts, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap ..data");
    }
}

/// A kept-alive TLS connection (rustls) that sends GETs and reads the answers.
struct HeldConn {
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    serial: Vec<u8>,
}

fn client_config(ca: &Ca) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA cert");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

use rustls::pki_types::pem::PemObject;

impl HeldConn {
    async fn open(tls: u16, host: &str, cfg: Arc<rustls::ClientConfig>) -> std::io::Result<Self> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", tls)).await?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(std::io::Error::other)?;
        let stream = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await?;
        let serial = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        Ok(HeldConn { stream, serial })
    }

    /// One GET; the status.
    async fn get(&mut self, host: &str, path: &str) -> std::io::Result<u16> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        self.stream.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut chunk))
                .await
                .map_err(std::io::Error::other)??;
            if n == 0 {
                return Err(std::io::Error::other("closed"));
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .and_then(|v| v.trim().parse().ok())
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    return text[9..12].parse().map_err(std::io::Error::other);
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_secret_is_served_within_two_seconds_and_open_connections_keep_working() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-renew");
    let ca = Ca::new("test ca").expect("a CA");
    let old = ca
        .issue(&LeafSpec::server(&["a.test"]))
        .expect("a certificate");
    let mut secret = MountedSecret::new(dir.join("default").join("a-tls"), &old);
    let e = edge(
        backend.addr.port(),
        &format!("certificate_dirs = [\"{}\"]", dir.join("default").display()),
        "",
        "",
    )
    .await;
    let cfg = client_config(&ca);
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut c = HeldConn::open(e.tls, "a.test", cfg.clone())
            .await
            .expect("handshake");
        assert_eq!(c.get("a.test", "/before").await.expect("GET"), 200);
        assert_eq!(c.serial, old.der);
        held.push(c);
    }

    // cert-manager renews: the Secret's files change by a symlink swap.
    let new = ca
        .issue(&LeafSpec::server(&["a.test"]))
        .expect("a certificate");
    let t0 = Instant::now();
    secret.update(&new.cert_pem, &new.key_pem);
    let mut served_new = None;
    while t0.elapsed() < Duration::from_secs(5) {
        // Requests on the open connections go on throughout, none failing.
        for c in held.iter_mut() {
            assert_eq!(
                c.get("a.test", "/during")
                    .await
                    .expect("GET on a held connection"),
                200
            );
        }
        let fresh = HeldConn::open(e.tls, "a.test", cfg.clone())
            .await
            .expect("handshake");
        if fresh.serial == new.der {
            served_new = Some(t0.elapsed());
            break;
        }
        assert_eq!(fresh.serial, old.der);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = served_new.expect("the renewed certificate was never served");
    assert!(took < Duration::from_secs(2), "served after {took:?}");
    for c in held.iter_mut() {
        assert_eq!(
            c.serial, old.der,
            "an open connection keeps its certificate"
        );
        assert_eq!(c.get("a.test", "/after").await.expect("GET"), 200);
    }

    // A broken replacement (a key that is not the certificate's) is refused, logged and
    // counted; the certificate before it keeps serving.
    let other = ca
        .issue(&LeafSpec::server(&["a.test"]))
        .expect("a certificate");
    secret.update(&other.cert_pem, &new.key_pem);
    let admin = e.admin;
    assert!(
        eventually(Duration::from_secs(5), || async move {
            metric(
                &metrics(admin).await,
                "tollgate_tls_certificate_reloads_total",
                &["result=\"error\""],
            ) >= 1.0
        })
        .await
    );
    assert!(e.gw.log_text().contains("certificate_rejected"));
    let fresh = HeldConn::open(e.tls, "a.test", cfg.clone())
        .await
        .expect("handshake");
    assert_eq!(fresh.serial, new.der);
    // Not PEM at all: the same.
    secret.update("not a certificate", "nor a key");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fresh = HeldConn::open(e.tls, "a.test", cfg.clone())
        .await
        .expect("handshake");
    assert_eq!(fresh.serial, new.der);
    assert!(
        metric(
            &metrics(e.admin).await,
            "tollgate_tls_certificate_reloads_total",
            &["result=\"error\""],
        ) >= 2.0
    );

    // A new Secret mounted beside it is picked up by name.
    let b = ca
        .issue(&LeafSpec::server(&["b.test"]))
        .expect("a certificate");
    let _second = MountedSecret::new(dir.join("default").join("b-tls"), &b);
    let t0 = Instant::now();
    loop {
        let c = HeldConn::open(e.tls, "b.test", cfg.clone()).await;
        if c.as_ref().is_ok_and(|c| c.serial == b.der) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "b.test not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every Secret folder gone at once: nothing to serve is never published; what was served
    // stays, and that is an error in the log and the counter.
    std::fs::remove_dir_all(dir.join("default")).expect("remove the secrets");
    let mut e = e;
    assert!(
        e.gw.wait_log("certificates_gone", Duration::from_secs(5))
            .await,
        "{}",
        e.gw.log_text()
    );
    let fresh = HeldConn::open(e.tls, "a.test", cfg.clone())
        .await
        .expect("handshake");
    assert_eq!(fresh.serial, new.der);
    assert_eq!(
        metric(
            &metrics(e.admin).await,
            "tollgate_tls_certificates_served",
            &[]
        ),
        2.0
    );
    drop(e);
}

fn check(toml: &str, dir: &Path) -> (i32, String) {
    let f = dir.join("check.toml");
    std::fs::write(&f, toml).expect("write config");
    let out = Command::new(BIN)
        .arg("check")
        .arg(&f)
        .output()
        .expect("tollgate check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn check_names_the_file_of_a_bad_certificate() {
    let dir = temp_dir("tls-check");
    let ca = Ca::new("test ca").expect("a CA");
    let good = ca
        .issue(&LeafSpec::server(&["a.test"]))
        .expect("a certificate");
    let (gc, gk) = write(&dir, "good", &good);
    let mut spec = LeafSpec::server(&["old.test"]);
    spec.before = Duration::from_secs(90 * 86_400);
    spec.after = Duration::from_secs(86_400);
    spec.expired = true;
    let (ec, ek) = issued(&dir, "expired", &ca, &spec);
    let other = ca
        .issue(&LeafSpec::server(&["a.test"]))
        .expect("a certificate");
    let (_, ok) = write(&dir, "other", &other);
    std::fs::write(dir.join("junk.pem"), "hello").expect("junk");
    let junk = dir.join("junk.pem");
    let conf = |certs: &str| {
        format!("[server]\nlisten = [\"127.0.0.1:1\"]\ntls_listen = [\"127.0.0.1:2\"]\n[tls]\ncertificates = [{certs}]\n")
    };

    let (code, out) = check(&conf(&cert_entry(&gc, &gk)), &dir);
    assert_eq!(code, 0, "{out}");
    let (code, out) = check(&conf(&cert_entry(&ec, &ek)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("expired.crt: expired on"), "{out}");
    assert!(out.contains("tls.certificates[0]"), "{out}");
    let (code, out) = check(&conf(&cert_entry(&gc, &ok)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("the key does not match the certificate"),
        "{out}"
    );
    let (code, out) = check(&conf(&cert_entry(&junk, &gk)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("junk.pem: not a PEM certificate"), "{out}");
    let (code, out) = check(&conf(&cert_entry(&gc, &junk)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("junk.pem: not a PEM private key"), "{out}");
    let (code, out) = check(&conf(&cert_entry(&dir.join("missing.crt"), &gk)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("missing.crt: cannot read"), "{out}");
    // Not yet valid; a client certificate used as a server's; the CA's certificate first.
    let mut spec = LeafSpec::server(&["future.test"]);
    spec.starts_in = Some(Duration::from_secs(86_400));
    let (fc, fk) = issued(&dir, "future", &ca, &spec);
    let (code, out) = check(&conf(&cert_entry(&fc, &fk)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("future.crt: not valid before"), "{out}");
    let (cc, ck) = issued(&dir, "client", &ca, &LeafSpec::client("someone"));
    let (code, out) = check(&conf(&cert_entry(&cc, &ck)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("client.crt: not a server certificate"),
        "{out}"
    );
    let chain_wrong = dir.join("wrong-order.crt");
    std::fs::write(&chain_wrong, format!("{}{}", ca.cert_pem, good.cert_pem)).expect("write");
    let (code, out) = check(&conf(&cert_entry(&chain_wrong, &gk)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the first certificate is a CA's"), "{out}");
    let other_ca = Ca::new("another ca").expect("a CA");
    let chain_bad = dir.join("bad-chain.crt");
    std::fs::write(
        &chain_bad,
        format!("{}{}", good.cert_pem, other_ca.cert_pem),
    )
    .expect("write");
    let (code, out) = check(&conf(&cert_entry(&chain_bad, &gk)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("certificate 1 of the chain is not issued by certificate 2"),
        "{out}"
    );
    let chain_ok = dir.join("chain.crt");
    std::fs::write(&chain_ok, format!("{}{}", good.cert_pem, ca.cert_pem)).expect("write");
    let (code, out) = check(&conf(&cert_entry(&chain_ok, &gk)), &dir);
    assert_eq!(code, 0, "{out}");
    let encrypted = dir.join("encrypted.key");
    let st = Command::new("openssl")
        .args(["pkey", "-aes256", "-passout", "pass:secret", "-in"])
        .arg(&gk)
        .arg("-out")
        .arg(&encrypted)
        .stderr(Stdio::null())
        .status()
        .expect("openssl pkey");
    assert!(st.success());
    let (code, out) = check(&conf(&cert_entry(&gc, &encrypted)), &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("encrypted.key: the key is encrypted"), "{out}");
    // An upstream CA bundle that is not one is found by check, not at start.
    let (code, out) = check(
        &format!(
            "[upstreams.u]\ntargets = [\"127.0.0.1:9\"]\ntls = {{ ca = \"{}\" }}\n[[routes]]\npath_prefix = \"/\"\nupstream = \"u\"\n",
            junk.display()
        ),
        &dir,
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("upstreams.u.tls:") && out.contains("junk.pem: not a PEM certificate"),
        "{out}"
    );
    // An empty certificate folder, and TLS listeners without [tls].
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let (code, out) = check(
        &format!(
            "[server]\nlisten = [\"127.0.0.1:1\"]\ntls_listen = [\"127.0.0.1:2\"]\n[tls]\ncertificate_dirs = [\"{}\"]\n",
            empty.display()
        ),
        &dir,
    );
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no certificate found"), "{out}");
    let (code, out) = check("[server]\ntls_listen = [\"127.0.0.1:2\"]\n", &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("server.tls_listen"), "{out}");
    // And the gateway refuses to start on a bad certificate, naming it.
    let f = dir.join("run.toml");
    std::fs::write(&f, conf(&cert_entry(&ec, &ek))).expect("write");
    let out = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&f)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("expired.crt: expired on"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_is_redirected_and_tls_responses_carry_hsts_with_limits_alike() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-redirect");
    let ca = Ca::new("test ca").expect("a CA");
    let ca_file = ca.write(&dir, "ca.pem").expect("write the CA");
    let (ac, ak) = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let e = edge(
        backend.addr.port(),
        &format!(
            "certificates = [{}]\nhsts = \"max-age=31536000; includeSubDomains\"",
            cert_entry(&ac, &ak)
        ),
        "https_redirect = true",
        r#"[limits.per_client]
rate = "2/minute"
burst = 2
key = "client_ip"

[[routes]]
path_prefix = "/.well-known/acme-challenge/"
upstream = "app"
https_redirect = false

[[routes]]
path_prefix = "/limited"
upstream = "app"
limits = ["per_client"]

[[routes]]
path_prefix = "/nginx/"
upstream = "app"
https_redirect_drop_slash = true
"#,
    )
    .await;
    // ingress-nginx's way: one trailing slash of the path and query dropped.
    for (path, want) in [
        ("/nginx/dir/", "/nginx/dir"),
        ("/nginx/a?b=1", "/nginx/a?b=1"),
    ] {
        let r = get(e.port, path, &[("host", "a.test")]).await.expect("GET");
        assert_eq!(r.status, 308);
        assert_eq!(
            r.header("location"),
            Some(format!("https://a.test:{}{want}", e.tls).as_str()),
            "{path}"
        );
    }
    // 308 (method and body kept) to the same host, path and query on the TLS port.
    let r = get(e.port, "/x/../api/v1?q=1&r=%20", &[("host", "A.Test:8080")])
        .await
        .expect("GET");
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://a.test:{}/api/v1?q=1&r=%20", e.tls).as_str())
    );
    assert_eq!(backend.hits(), 0, "a redirect never reaches the upstream");
    let r = Conn::open(e.port)
        .await
        .expect("conn")
        .send("POST", "/form", &[("host", "a.test")], "a=1")
        .await
        .expect("POST");
    assert_eq!(r.status, 308);
    // No Host to redirect to: 400.
    let raw = {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", e.port))
            .await
            .expect("tcp");
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.expect("write");
        let mut b = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut b)).await;
        String::from_utf8_lossy(&b).into_owned()
    };
    assert!(
        raw.starts_with("HTTP/1.1 400") || raw.starts_with("HTTP/1.0 400"),
        "{raw}"
    );
    // The ACME HTTP-01 path is exempt (cert-manager must reach it over plaintext).
    let r = get(
        e.port,
        "/.well-known/acme-challenge/token",
        &[("host", "a.test")],
    )
    .await
    .expect("GET");
    assert_eq!(r.status, 200);
    assert!(
        r.header("strict-transport-security").is_none(),
        "no HSTS over plaintext"
    );
    // A trusted proxy that ended TLS says so: not redirected (no loop behind a balancer).
    // (127.0.0.1 is not trusted here, so the header is ignored.)
    let r = get(
        e.port,
        "/y",
        &[("host", "a.test"), ("x-forwarded-proto", "https")],
    )
    .await
    .expect("GET");
    assert_eq!(r.status, 308);

    // Over TLS: served, with HSTS, over HTTP/1.1 and h2; the limit counts both alike and its
    // 429 carries HSTS too.
    let (s1, _, h1) = curl(e.tls, "a.test", "/limited", &ca_file, &["--http1.1"]);
    let (s2, v2, h2) = curl(e.tls, "a.test", "/limited", &ca_file, &["--http2"]);
    let (s3, _, h3) = curl(e.tls, "a.test", "/limited", &ca_file, &["--http2"]);
    assert_eq!((s1, s2, v2.as_str(), s3), (200, 200, "2", 429), "{h3}");
    for h in [&h1, &h2, &h3] {
        assert!(
            h.contains("strict-transport-security: max-age=31536000; includesubdomains"),
            "{h}"
        );
    }
    // The plaintext listener shares the limit's state (one client address).
    let r = get(e.port, "/limited", &[("host", "a.test")])
        .await
        .expect("GET");
    assert_eq!(r.status, 308, "redirected before any limit is spent");
    drop(e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_and_key_limits() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-mtls");
    let ca = Ca::new("server ca").expect("a CA");
    let ca_file = ca.write(&dir, "ca.pem").expect("write the CA");
    let (ac, ak) = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let clients = Ca::new("client ca").expect("a CA");
    let clients_file = clients.write(&dir, "clients.pem").expect("write the CA");
    let (c1c, c1k) = issued(&dir, "c1", &clients, &LeafSpec::client("alice"));
    let (c2c, c2k) = issued(&dir, "c2", &clients, &LeafSpec::client("bob"));
    let stranger = Ca::new("someone else").expect("a CA");
    let (sc, sk) = issued(&dir, "s", &stranger, &LeafSpec::client("mallory"));
    let e = edge(
        backend.addr.port(),
        &format!(
            "certificates = [{}]\nclient_ca = \"{}\"\nclient_auth = \"require\"",
            cert_entry(&ac, &ak),
            clients_file.display()
        ),
        "",
        r#"[limits.per_cert]
rate = "1/minute"
burst = 1
key = "client_cert"

[[routes]]
path_prefix = "/api"
upstream = "app"
limits = ["per_cert"]
"#,
    )
    .await;
    let with = |c: &Path, k: &Path| {
        vec![
            "--cert".to_string(),
            c.display().to_string(),
            "--key".to_string(),
            k.display().to_string(),
        ]
    };
    let args = |v: &Vec<String>| {
        v.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\u{1}")
    };
    let a1 = with(&c1c, &c1k);
    let a2 = with(&c2c, &c2k);
    let run = |a: &str, path: &str| {
        let v: Vec<&str> = if a.is_empty() {
            Vec::new()
        } else {
            a.split('\u{1}').collect()
        };
        curl(e.tls, "a.test", path, &ca_file, &v).0
    };
    // Without a certificate, or with one from another CA: no handshake.
    assert_eq!(run("", "/api/x"), 0);
    assert_eq!(run(&args(&with(&sc, &sk)), "/api/x"), 0);
    // Each client certificate is its own key: alice's second request is refused, bob's first
    // is not.
    assert_eq!(run(&args(&a1), "/api/x"), 200);
    assert_eq!(run(&args(&a1), "/api/x"), 429);
    assert_eq!(run(&args(&a2), "/api/x"), 200);
    assert_eq!(run(&args(&a2), "/api/x"), 429);
    drop(e);
}

/// A Python HTTPS server on a free port serving `cert`/`key` (HTTP/1.1, "tls-ok" bodies).
struct PyTls {
    child: std::process::Child,
    port: u16,
}

impl Drop for PyTls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn py_tls(cert: &Path, key: &Path, client_ca: Option<&Path>) -> PyTls {
    let port = free_port();
    let script = r#"
import http.server, ssl, sys
port, cert, key, ca = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        peer = self.connection.getpeercert()
        who = dict(x[0] for x in peer["subject"]).get("commonName", "") if peer else ""
        body = ("tls-ok " + who).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
if ca:
    ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;
    let child = Command::new(PYTHON)
        .args(["-c", script, &port.to_string()])
        .arg(cert)
        .arg(key)
        .arg(
            client_ca
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        )
        .stdin(Stdio::null())
        .spawn()
        .expect("python3");
    assert!(
        wait_listening(port, Duration::from_secs(10)).await,
        "python TLS server did not start"
    );
    PyTls { child, port }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tls_is_verified_and_an_untrusted_upstream_is_502() {
    let dir = temp_dir("tls-upstream");
    let ca = Ca::new("upstream ca").expect("a CA");
    let ca_file = ca.write(&dir, "upstream-ca.pem").expect("write the CA");
    let (uc, uk) = issued(&dir, "u", &ca, &LeafSpec::server(&["api.internal"]));
    let clients = Ca::new("gateway client ca").expect("a CA");
    let clients_file = clients.write(&dir, "gw-clients.pem").expect("write the CA");
    let (gc, gk) = issued(&dir, "gwclient", &clients, &LeafSpec::client("tollgate"));
    let rogue = Ca::new("rogue ca").expect("a CA");
    let (rc, rk) = issued(&dir, "r", &rogue, &LeafSpec::server(&["api.internal"]));
    let good = py_tls(&uc, &uk, None).await;
    let untrusted = py_tls(&rc, &rk, None).await;
    let mutual = py_tls(&uc, &uk, Some(&clients_file)).await;
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2

[upstreams.good]
targets = ["127.0.0.1:{g}"]
tls = {{ ca = "{ca}", sni = "api.internal" }}

[upstreams.wrong_name]
targets = ["127.0.0.1:{g}"]
tls = {{ ca = "{ca}", sni = "other.internal" }}

[upstreams.untrusted]
targets = ["127.0.0.1:{u}"]
tls = {{ ca = "{ca}", sni = "api.internal" }}

[upstreams.system_roots]
targets = ["127.0.0.1:{g}"]
tls = true

[upstreams.mutual]
targets = ["127.0.0.1:{m}"]
tls = {{ ca = "{ca}", sni = "api.internal", client_cert = {{ cert = "{gc}", key = "{gk}" }} }}

[upstreams.mutual_without]
targets = ["127.0.0.1:{m}"]
tls = {{ ca = "{ca}", sni = "api.internal" }}

[[routes]]
path_prefix = "/good"
upstream = "good"
[[routes]]
path_prefix = "/wrong-name"
upstream = "wrong_name"
[[routes]]
path_prefix = "/untrusted"
upstream = "untrusted"
[[routes]]
path_prefix = "/system"
upstream = "system_roots"
[[routes]]
path_prefix = "/mutual"
upstream = "mutual"
[[routes]]
path_prefix = "/mutual-without"
upstream = "mutual_without"
"#,
        g = good.port,
        u = untrusted.port,
        m = mutual.port,
        ca = ca_file.display(),
        gc = gc.display(),
        gk = gk.display(),
    );
    let gw = running(Path::new(BIN), &toml, port, admin).await;
    let r = get(port, "/good", &[]).await.expect("GET");
    assert_eq!((r.status, r.body.as_str()), (200, "tls-ok "));
    let r = get(port, "/mutual", &[]).await.expect("GET");
    assert_eq!((r.status, r.body.as_str()), (200, "tls-ok tollgate"));
    // Never silently unverified: a wrong name, an unknown CA, a certificate the system roots
    // do not know, a server that wants a client certificate: 502 with the reason logged.
    for path in ["/wrong-name", "/untrusted", "/system", "/mutual-without"] {
        let r = get(port, path, &[]).await.expect("GET");
        assert_eq!(r.status, 502, "{path}: {}", r.body);
        assert_eq!(r.json()["error_code"], "UPSTREAM_UNAVAILABLE", "{path}");
    }
    let log = gw.log_text();
    assert!(
        log.contains("UnknownIssuer") || log.contains("invalid peer certificate"),
        "the reason is logged:\n{log}"
    );
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_passes_through_over_tls_and_h2() {
    let dir = temp_dir("tls-grpc");
    let ca = Ca::new("test ca").expect("a CA");
    let ca_file = ca.write(&dir, "ca.pem").expect("write the CA");
    let (ac, ak) = issued(&dir, "a", &ca, &LeafSpec::server(&["grpc.test"]));
    let grpc_port = free_port();
    // A generic gRPC service (bytes in, bytes out: no generated code), plaintext h2c behind.
    let server = r#"
import grpc, sys, time
from concurrent import futures
def echo(req, ctx):
    md = dict(ctx.invocation_metadata())
    return b"echo:" + req + b":" + md.get("x-who", "").encode()
def fail(req, ctx):
    ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
h = grpc.method_handlers_generic_handler("test.Echo", {
    "Say": grpc.unary_unary_rpc_method_handler(echo),
    "Fail": grpc.unary_unary_rpc_method_handler(fail),
})
s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
s.add_generic_rpc_handlers((h,))
s.add_insecure_port("127.0.0.1:" + sys.argv[1])
s.start()
s.wait_for_termination()
"#;
    let mut srv = Command::new(PYTHON)
        .args(["-c", server, &grpc_port.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .expect("python3 grpc server");
    assert!(
        wait_listening(grpc_port, Duration::from_secs(15)).await,
        "gRPC server did not start"
    );
    let (port, tls, admin) = (free_port(), free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
tls_listen = ["127.0.0.1:{tls}"]
admin = "127.0.0.1:{admin}"
threads = 2

[tls]
certificates = [{cert}]

[upstreams.grpc]
targets = ["127.0.0.1:{grpc_port}"]
h2 = true

[limits.calls]
rate = "3/minute"
burst = 3
key = "header:x-who"

[[routes]]
path_prefix = "/test.Echo/"
upstream = "grpc"
limits = ["calls"]
"#,
        cert = cert_entry(&ac, &ak),
    );
    let gw = running(Path::new(BIN), &toml, tls, admin).await;
    let client = r#"
import grpc, sys
port, ca = sys.argv[1], open(sys.argv[2], "rb").read()
creds = grpc.ssl_channel_credentials(root_certificates=ca)
ch = grpc.secure_channel("127.0.0.1:" + port, creds, options=[("grpc.ssl_target_name_override", "grpc.test")])
say = ch.unary_unary("/test.Echo/Say")
fail = ch.unary_unary("/test.Echo/Fail")
out = []
out.append(say(b"hello", metadata=[("x-who", "alice")], timeout=10).decode())
try:
    fail(b"x", metadata=[("x-who", "bob")], timeout=10)
except grpc.RpcError as e:
    out.append("fail:" + e.code().name)
for i in range(3):
    try:
        say(b"again", metadata=[("x-who", "alice")], timeout=10)
        out.append("ok")
    except grpc.RpcError as e:
        out.append("limited:" + e.code().name)
print("|".join(out))
"#;
    let out = Command::new(PYTHON)
        .args(["-c", client, &tls.to_string()])
        .arg(&ca_file)
        .stdin(Stdio::null())
        .output()
        .expect("python3 grpc client");
    let _ = srv.kill();
    let _ = srv.wait();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parts: Vec<&str> = text.split('|').collect();
    assert_eq!(
        parts.first(),
        Some(&"echo:hello:alice"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The upstream's gRPC status (in trailers) reaches the client.
    assert_eq!(parts.get(1), Some(&"fail:PERMISSION_DENIED"), "{text}");
    // alice's 4th call is over the limit: a gRPC client sees the 429 as UNAVAILABLE (the
    // gRPC mapping of HTTP 429).
    assert_eq!(&parts[2..], &["ok", "ok", "limited:UNAVAILABLE"], "{text}");
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_tls_client_is_closed_after_header_timeout() {
    let Site { e, .. } = site("tls-silent", "", "header_timeout = \"1s\"").await;
    let t0 = Instant::now();
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
        .await
        .expect("tcp");
    // Half a ClientHello's record header, then nothing.
    s.write_all(&[0x16, 0x03]).await.expect("write");
    let mut b = [0u8; 64];
    let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
    let took = t0.elapsed();
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "closed, not answered: {r:?}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "closed after {took:?}, not Pingora's 60 s"
    );
    drop(e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_over_rediss_with_mutual_tls() {
    let redis = RedisServer::start_tls(true).expect("redis-server with TLS");
    let tls = redis.tls.clone().expect("TLS files");
    let backend = Backend::start().await.expect("backend");
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        r#"[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 2

[redis]
url = "{url}"
ca = "{ca}"
client_cert = {{ cert = "{cc}", key = "{ck}" }}
timeout = "500ms"
on_error = "closed"

[upstreams.app]
targets = ["127.0.0.1:{be}"]

[limits.shared]
scope = "global"
rate = "3/minute"
burst = 3
key = "header:x-user"

[[routes]]
path_prefix = "/"
upstream = "app"
limits = ["shared"]
"#,
        url = redis.url(),
        ca = tls.ca_file.display(),
        cc = tls.client.0.display(),
        ck = tls.client.1.display(),
        be = backend.addr.port(),
    );
    let gw = running(Path::new(BIN), &toml, port, admin).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = get(port, "/x", &[("x-user", "alice")]).await.expect("GET");
        statuses.push(r.status);
    }
    // Exact: three admitted, then refused by Redis's count (not by a fallback: on_error
    // would answer 503).
    assert_eq!(statuses, vec![200, 200, 200, 429, 429], "{}", gw.log_text());
    assert!(redis.cli(&["DBSIZE"]).parse::<u64>().unwrap_or(0) >= 1);
    assert_eq!(metric(&metrics(admin).await, "tollgate_redis_up", &[]), 1.0);
    drop(gw);
}

/// A rustls client that shows a client certificate and keeps its sessions (tickets) between
/// connections, as browsers and HTTP libraries do.
fn client_config_with_cert(ca: &Ca, cert: &Path, key: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA cert");
    }
    let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(cert)
        .expect("cert file")
        .map(|c| c.expect("cert"))
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client cert");
    Arc::new(cfg)
}

/// One GET on a new connection with `cfg`: the status and whether the session resumed, or
/// the handshake's error.
async fn once(tls: u16, cfg: &Arc<rustls::ClientConfig>) -> Result<(u16, bool), String> {
    let mut c = HeldConn::open(tls, "a.test", cfg.clone())
        .await
        .map_err(|e| e.to_string())?;
    let resumed = c.stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    // TLS 1.3 reports a refused client certificate after the handshake, at the first read.
    let status = c.get("a.test", "/api").await.map_err(|e| e.to_string())?;
    Ok((status, resumed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_client_ca_ends_resumption_of_earlier_sessions() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-resume");
    let ca = Ca::new("server ca").expect("a CA");
    let (ac, ak) = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let old_clients = Ca::new("old client ca").expect("a CA");
    let new_clients = Ca::new("new client ca").expect("a CA");
    let client_ca = old_clients
        .write(&dir, "clients.pem")
        .expect("write the CA");
    let (c1c, c1k) = issued(&dir, "alice", &old_clients, &LeafSpec::client("alice"));
    let e = edge(
        backend.addr.port(),
        &format!(
            "certificates = [{}]\nclient_ca = \"{}\"\nclient_auth = \"require\"",
            cert_entry(&ac, &ak),
            client_ca.display()
        ),
        "",
        "",
    )
    .await;
    let alice = client_config_with_cert(&ca, &c1c, &c1k);
    assert_eq!(once(e.tls, &alice).await, Ok((200, false)));
    // The next connection resumes (a ticket): no certificate is shown again.
    assert_eq!(once(e.tls, &alice).await, Ok((200, true)));

    // The CA that signed alice's certificate is replaced (a revocation): her saved session
    // must not resume past the new CA, and a full handshake fails.
    std::fs::write(&client_ca, &new_clients.cert_pem).expect("replace client CA");
    let mut e = e;
    assert!(
        e.gw.wait_log("client_ca_loaded", Duration::from_secs(5))
            .await
    );
    let r = once(e.tls, &alice).await;
    assert!(
        r.is_err(),
        "alice got through after her CA was replaced: {r:?}"
    );
    drop(e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_certificates_that_check_refuses_changes_nothing() {
    let Site {
        e,
        dir,
        cert: (ac, ak),
        ..
    } = site("tls-badreload", "", "").await;
    let text = std::fs::read_to_string(&e.gw.config).expect("config");
    let broken = text.replace(
        &format!("certificates = [{}]", cert_entry(&ac, &ak)),
        &format!(
            "certificate_dirs = [\"{}\"]",
            dir.join("no-such-folder").display()
        ),
    );
    assert_ne!(text, broken);
    std::fs::write(&e.gw.config, broken).expect("rewrite config");
    let mut e = e;
    assert!(
        e.gw.wait_log("reload_failed", Duration::from_secs(5)).await,
        "{}",
        e.gw.log_text()
    );
    assert!(e.gw.log_text().contains("no certificate found"));
    assert_eq!(
        handshake_subject(e.tls, Some("a.test"), &[]).as_deref(),
        Some("a.test")
    );
    assert_eq!(
        metric(
            &metrics(e.admin).await,
            "tollgate_config_reloads_total",
            &["result=\"error\""]
        ),
        1.0
    );
    drop(e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_in_progress_count_against_the_connection_bounds() {
    let Site { e, .. } = site("tls-bounds", "", "max_connections_per_client = 5").await;
    let admin = e.admin;
    // The start-up probes' connections are gone first: one the gateway had not yet seen close
    // would hold a slot, refuse the fifth stalled client below, and then leave four open.
    assert!(
        eventually(Duration::from_secs(10), || async move {
            metric(&metrics(admin).await, "tollgate_connections_open", &[]) == 0.0
        })
        .await,
        "connections from start-up still open"
    );
    // Five clients that never finish their ClientHello hold five slots...
    let mut stalled = Vec::new();
    for _ in 0..5 {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
            .await
            .expect("tcp");
        s.write_all(&[0x16, 0x03, 0x01]).await.expect("write");
        stalled.push(s);
    }
    assert!(
        eventually(Duration::from_secs(10), || async move {
            metric(&metrics(admin).await, "tollgate_connections_open", &[]) == 5.0
        })
        .await,
        "{}",
        metrics(admin).await
    );
    // ...so a sixth is closed at once, before any handshake.
    let t0 = Instant::now();
    let mut sixth = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
        .await
        .expect("tcp");
    let _ = sixth.write_all(&[0x16, 0x03, 0x01]).await;
    let mut b = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), sixth.read(&mut b)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert!(handshake_subject(e.tls, Some("a.test"), &[]).is_none());
    let m = metrics(e.admin).await;
    assert!(
        metric(
            &m,
            "tollgate_connections_refused_total",
            &["reason=\"max_connections_per_client\""]
        ) >= 2.0,
        "{m}"
    );
    // Their slots come back when they go.
    drop(stalled);
    let t0 = Instant::now();
    while handshake_subject(e.tls, Some("a.test"), &[]).as_deref() != Some("a.test") {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "slots not given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(e);
}

/// A scanner's failed handshakes (issue 25): Pingora writes an ERROR line per failed TLS
/// handshake; they are limited to 20 a second per library and the rest counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_cannot_flood_the_log() {
    let Site { e, .. } = site("tls-storm", "", "").await;
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < 300 && t0.elapsed() < Duration::from_secs(5) {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
            .await
            .expect("tcp");
        // Not a ClientHello: the handshake fails at once.
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let mut b = [0u8; 64];
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await;
        sent += 1;
    }
    let secs = t0.elapsed().as_secs() + 1;
    let suppressed = metric(
        &metrics(e.admin).await,
        "tollgate_log_lines_suppressed_total",
        &["target=\"pingora_core\""],
    );
    let log = e.gw.log_text();
    let lines = log.lines().filter(|l| l.contains("handshake")).count();
    eprintln!("{sent} failed handshakes: {lines} lines written, {suppressed} suppressed");
    assert!(
        lines as u64 <= 20 * (secs + 1),
        "{lines} handshake lines in {secs} s for {sent} failed handshakes"
    );
    assert!(
        suppressed as usize + lines >= sent / 2,
        "the rest are counted: {suppressed} suppressed, {lines} written, {sent} sent"
    );
    drop(e);
}

/// The echo backend's view of a request over TLS: its JSON (`headers`, `path`).
fn curl_json(tls: u16, host: &str, path: &str, ca: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{host}:{tls}:127.0.0.1"))
        .args(args)
        .arg(format!("https://{host}:{tls}{path}"))
        .stdin(Stdio::null())
        .output()
        .expect("curl (Debian package curl)");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `client_cert_headers` (ingress-nginx's fields toward the upstream of an mTLS host): the
/// gateway writes `ssl-client-verify`, the subject and issuer as RFC 2253 and, with
/// `"with_certificate"`, the PEM URI-escaped; without a certificate (`optional`) `NONE` and
/// nothing else. A client's own copies, in any spelling, never reach the upstream; a route
/// without the key passes them as any header (as ingress-nginx on a host without auth-tls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_is_told_of_the_client_certificate_and_never_a_forgery() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-client-headers");
    let ca = Ca::new("server ca").expect("a CA");
    let ca_file = ca.write(&dir, "ca.pem").expect("write the CA");
    let (ac, ak) = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let clients = Ca::new("client ca").expect("a CA");
    let clients_file = clients.write(&dir, "clients.pem").expect("write the CA");
    let (cc, ck) = issued(&dir, "alice", &clients, &LeafSpec::client("alice"));
    let e = edge(
        backend.addr.port(),
        &format!(
            "certificates = [{}]\nclient_ca = \"{}\"\nclient_auth = \"optional\"",
            cert_entry(&ac, &ak),
            clients_file.display()
        ),
        "underscores_in_headers = true",
        r#"[[routes]]
path_prefix = "/told"
upstream = "app"
client_cert_headers = "with_certificate"

[[routes]]
path_prefix = "/dn"
upstream = "app"
client_cert_headers = true
"#,
    )
    .await;
    let cert = [
        "--cert",
        cc.to_str().expect("path"),
        "--key",
        ck.to_str().expect("path"),
    ];
    let forged = [
        "-H",
        "ssl-client-subject-dn: CN=admin",
        "-H",
        "ssl_client_verify: SUCCESS",
        "-H",
        "SSL-Client-Cert: forged",
    ];
    let with_cert: Vec<&str> = cert.iter().chain(&forged).copied().collect();
    let j = curl_json(e.tls, "a.test", "/told", &ca_file, &with_cert);
    let h = &j["headers"];
    assert_eq!(h["ssl-client-verify"], "SUCCESS", "{h}");
    let subject = h["ssl-client-subject-dn"].as_str().unwrap_or_default();
    assert!(subject.starts_with("CN=alice"), "{subject}");
    assert!(
        h["ssl-client-issuer-dn"]
            .as_str()
            .is_some_and(|i| i.contains("CN=client ca")),
        "{h}"
    );
    let pem = std::fs::read_to_string(&cc).expect("pem");
    let sent = h["ssl-client-cert"].as_str().unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(sent).decode_utf8_lossy();
    assert!(
        decoded.starts_with("-----BEGIN CERTIFICATE-----\n") && pem.contains(decoded.trim()),
        "the certificate, URI-escaped: {sent}"
    );
    assert!(h.get("ssl_client_verify").is_none(), "{h}");
    // No certificate (optional): NONE, and nothing the client wrote.
    let j = curl_json(e.tls, "a.test", "/told", &ca_file, &forged);
    let h = &j["headers"];
    assert_eq!(h["ssl-client-verify"], "NONE", "{h}");
    for forged in [
        "ssl-client-subject-dn",
        "ssl-client-cert",
        "ssl_client_verify",
    ] {
        assert!(h.get(forged).is_none(), "{forged}: {h}");
    }
    // true: the names, not the certificate.
    let j = curl_json(e.tls, "a.test", "/dn", &ca_file, &with_cert);
    let h = &j["headers"];
    assert!(h["ssl-client-subject-dn"]
        .as_str()
        .is_some_and(|s| s.starts_with("CN=alice")));
    assert!(h.get("ssl-client-cert").is_none(), "{h}");
    // A route without the key, where every host asks for certificates (client_ca): the
    // client's copies are removed all the same, never passed as the gateway's word.
    let j = curl_json(e.tls, "a.test", "/other", &ca_file, &with_cert);
    assert!(
        j["headers"].get("ssl-client-subject-dn").is_none(),
        "{}",
        j["headers"]
    );
    assert!(
        j["headers"].get("ssl_client_verify").is_none(),
        "{}",
        j["headers"]
    );
    drop(e);
}

/// Writes at most 16 bytes per write, flushed: a ClientHello arrives in many pieces.
struct Trickle(tokio::net::TcpStream);

impl tokio::io::AsyncRead for Trickle {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Trickle {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let n = buf.len().min(16);
        std::pin::Pin::new(&mut self.0).poll_write(cx, &buf[..n])
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// `[[tls_passthrough]]` (ingress-nginx's ssl-passthrough): a ClientHello naming a passed-
/// through host reaches its upstream's own TLS server unread (its certificate, its answer),
/// in any case and however it is cut; every other name gets the gateway's handshake as
/// before; a stalled or garbage first flight is closed; an unreachable upstream is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_for_a_passed_through_host_reaches_its_upstream_unread() {
    let backend = Backend::start().await.expect("backend");
    let dir = temp_dir("tls-passthrough");
    let ca = Ca::new("edge ca").expect("a CA");
    let vault_ca = Ca::new("vault ca").expect("a CA");
    let edge_cert = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let vault_cert = issued(
        &dir,
        "vault",
        &vault_ca,
        &LeafSpec::server(&["secure.test"]),
    );
    let vault = py_tls(&vault_cert.0, &vault_cert.1, None).await;
    let dead = free_port();
    let e = edge(
        backend.addr.port(),
        &format!("certificates = [{}]", cert_entry(&edge_cert.0, &edge_cert.1)),
        "header_timeout = \"1s\"",
        &format!(
            "[upstreams.vault]\ntargets = [\"127.0.0.1:{}\"]\nhealth_check = false\n[upstreams.gone]\ntargets = [\"127.0.0.1:{dead}\"]\nhealth_check = false\n\n[[tls_passthrough]]\nhosts = [\"secure.test\"]\nupstream = \"vault\"\n\n[[tls_passthrough]]\nhosts = [\"gone.test\"]\nupstream = \"gone\"\n",
            vault.port
        ),
    )
    .await;
    let vault_pem = dir.join("vault-ca.pem");
    std::fs::write(&vault_pem, &vault_ca.cert_pem).expect("write");
    let edge_pem = dir.join("edge-ca.pem");
    std::fs::write(&edge_pem, &ca.cert_pem).expect("write");
    // The backend's TLS, end to end: its CA verifies, its server answers.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&vault_pem)
        .arg("--resolve")
        .arg(format!("secure.test:{}:127.0.0.1", e.tls))
        .arg(format!("https://secure.test:{}/", e.tls))
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "tls-ok ",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another name: the gateway's certificate and route, as before.
    let (status, _, _) = curl(e.tls, "a.test", "/x", &edge_pem, &[]);
    assert_eq!(status, 200);
    // Another spelling of the name, and a ClientHello in 16-byte pieces: passed through.
    let cfg = client_config(&vault_ca);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
        .await
        .expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let name = rustls::pki_types::ServerName::try_from("SECURE.test".to_string()).expect("name");
    let mut s = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, Trickle(tcp))
        .await
        .expect("the backend's handshake, in pieces");
    s.write_all(b"GET / HTTP/1.1\r\nHost: secure.test\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer).await;
    assert!(
        String::from_utf8_lossy(&answer).ends_with("tls-ok "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A stalled first flight (a record header, then nothing): closed at header_timeout.
    let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
        .await
        .expect("connect");
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02])
        .await
        .expect("write");
    let t = Instant::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut buf)).await;
    assert!(
        matches!(n, Ok(Ok(0)) | Ok(Err(_))) && t.elapsed() < Duration::from_secs(3),
        "{n:?} after {:?}",
        t.elapsed()
    );
    // Not TLS at all: closed, the gateway still serving.
    let mut junk = tokio::net::TcpStream::connect(("127.0.0.1", e.tls))
        .await
        .expect("connect");
    junk.write_all(b"GET / HTTP/1.1\r\nHost: secure.test\r\n\r\n")
        .await
        .expect("write");
    let n = tokio::time::timeout(Duration::from_secs(5), junk.read(&mut buf)).await;
    // Closed (perhaps after a TLS alert), never answered as HTTP nor relayed.
    match n {
        Ok(Ok(k)) => assert!(!buf[..k].starts_with(b"HTTP/"), "{:?}", &buf[..k]),
        Ok(Err(_)) => {}
        Err(_) => panic!("not closed within 5 s"),
    }
    assert_eq!(curl(e.tls, "a.test", "/x", &edge_pem, &[]).0, 200);
    // An upstream that is not there: the connection closes, counted.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-k", "--resolve"])
        .arg(format!("gone.test:{}:127.0.0.1", e.tls))
        .arg(format!("https://gone.test:{}/", e.tls))
        .output()
        .expect("curl");
    assert!(!out.status.success());
    let m = metrics(e.admin).await;
    assert!(
        metric(
            &m,
            "tollgate_tls_passthrough_total",
            &["upstream=\"vault\"", "result=\"relayed\""]
        ) >= 2.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_tls_passthrough_total",
            &["upstream=\"gone\"", "result=\"unreachable\""]
        ),
        1.0,
        "{m}"
    );
    drop(e);
}

#[test]
fn check_names_what_is_wrong_with_a_passthrough() {
    let dir = temp_dir("tls-check-passthrough");
    let ca = Ca::new("test ca").expect("a CA");
    let (c, k) = issued(&dir, "a", &ca, &LeafSpec::server(&["a.test"]));
    let toml = format!(
        "[server]\nlisten = [\"127.0.0.1:1\"]\ntls_listen = [\"127.0.0.1:2\"]\n[tls]\ncertificates = [{}]\n[upstreams.u]\ntargets = [\"127.0.0.1:3\"]\n[[tls_passthrough]]\nhosts = [\"a.test\", \"A.test.\"]\nupstream = \"x\"\n[[tls_passthrough]]\nhosts = [\"*.*.b\"]\nupstream = \"u\"\n[[tls_passthrough]]\nhosts = [\"c.test\"]\nupstream = \"u\"\n[[tls_passthrough]]\nhosts = [\"C.test\"]\nupstream = \"u\"\n[[routes]]\npath_prefix = \"/\"\nrespond = {{ status = 200 }}\n",
        cert_entry(&c, &k)
    );
    let (code, out) = check(&toml, &dir);
    assert_eq!(code, 2, "{out}");
    for want in [
        "tls_passthrough[0].hosts[1]: \"A.test.\" is passed through twice (line 9)",
        "tls_passthrough[0].upstream: unknown upstream \"x\" (defined: u) (line 10)",
        "tls_passthrough[1].hosts[0]: \"*.*.b\" is not a host name",
        "tls_passthrough[3].hosts[0]: \"C.test\" is passed through twice (line 18)",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
}
