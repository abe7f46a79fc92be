//! Certificates made in the test: a CA of the test's own, and leaf certificates it signs
//! (ECDSA P-256 by default, RSA 2048 through `openssl genpkey`, since ring signs with RSA but
//! cannot make RSA keys), written as PEM files the gateway and redis-server read.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// The key type of a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    EcdsaP256,
    Rsa2048,
}

/// A certificate authority of the test's own.
pub struct Ca {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate and its key, as PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate's DER (what a TLS client is shown).
    pub der: Vec<u8>,
}

/// What to put in a leaf certificate.
#[derive(Debug, Clone)]
pub struct LeafSpec {
    /// DNS names and IP addresses (as text) for the SANs.
    pub names: Vec<String>,
    pub key: KeyKind,
    /// Validity relative to now: `not_before = now - before`, `not_after = now + after`.
    pub before: Duration,
    pub after: Duration,
    /// Negative `after`: a certificate that has already expired.
    pub expired: bool,
    /// A certificate that becomes valid this long from now (`before` is then ignored).
    pub starts_in: Option<Duration>,
    pub client: bool,
    pub common_name: String,
}

impl LeafSpec {
    pub fn server(names: &[&str]) -> Self {
        LeafSpec {
            names: names.iter().map(|s| s.to_string()).collect(),
            key: KeyKind::EcdsaP256,
            before: Duration::from_secs(3600),
            after: Duration::from_secs(90 * 86_400),
            expired: false,
            starts_in: None,
            client: false,
            common_name: names.first().map_or("test", |n| n).to_string(),
        }
    }

    pub fn client(common_name: &str) -> Self {
        LeafSpec {
            names: Vec::new(),
            client: true,
            common_name: common_name.to_string(),
            ..LeafSpec::server(&[])
        }
    }
}

fn key_pair(kind: KeyKind) -> io::Result<KeyPair> {
    match kind {
        KeyKind::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| err("an ECDSA P-256 key", e)),
        KeyKind::Rsa2048 => {
            let out = Command::new("openssl")
                .args([
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                ])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()?;
            let pem = String::from_utf8(out.stdout).map_err(|e| err("openssl genpkey", e))?;
            KeyPair::from_pem_and_sign_algo(&pem, &rcgen::PKCS_RSA_SHA256)
                .map_err(|e| err("an RSA key", e))
        }
    }
}

fn at(now: SystemTime, forward: bool, d: Duration) -> time::OffsetDateTime {
    let t = if forward { now + d } else { now - d };
    time::OffsetDateTime::from(t)
}

impl Ca {
    pub fn new(name: &str) -> io::Result<Self> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = at(now, false, Duration::from_secs(86_400));
        params.not_after = at(now, true, Duration::from_secs(3650 * 86_400));
        let key = key_pair(KeyKind::EcdsaP256)?;
        let cert = params
            .self_signed(&key)
            .map_err(|e| err("a self-signed CA", e))?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A leaf signed by this CA.
    pub fn issue(&self, spec: &LeafSpec) -> io::Result<Leaf> {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, spec.common_name.as_str());
        params.subject_alt_names = spec
            .names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n
                    .clone()
                    .try_into()
                    .map(SanType::DnsName)
                    .map_err(|e| err(n, e)),
            })
            .collect::<io::Result<_>>()?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if spec.key == KeyKind::Rsa2048 {
            params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        }
        params.extended_key_usages = vec![if spec.client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let now = SystemTime::now();
        params.not_before = match spec.starts_in {
            Some(d) => at(now, true, d),
            None => at(now, false, spec.before),
        };
        params.not_after = at(now, !spec.expired, spec.after);
        let key = key_pair(spec.key)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| err("a certificate signed by the CA", e))?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        })
    }

    /// Writes the CA certificate to `dir/name` and returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> io::Result<PathBuf> {
        let p = dir.join(name);
        std::fs::write(&p, &self.cert_pem)?;
        Ok(p)
    }
}

impl Leaf {
    /// Writes `dir/NAME.crt` and `dir/NAME.key`.
    pub fn write(&self, dir: &Path, name: &str) -> io::Result<(PathBuf, PathBuf)> {
        let c = dir.join(format!("{name}.crt"));
        let k = dir.join(format!("{name}.key"));
        std::fs::write(&c, &self.cert_pem)?;
        std::fs::write(&k, &self.key_pem)?;
        Ok((c, k))
    }
}
