//! A certificate chain and its key, read from PEM and checked; the set served, chosen by SNI.

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tollgate_config::model::{CertFiles, TlsConfig, UnknownSni};

/// One certificate chain with its key, ready to serve.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// DNS names from the SANs, lower case; `*.example.com` for wildcards.
    pub names: Vec<String>,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// No extended key usage, or one that includes serverAuth.
    pub server_auth: bool,
}

pub(super) fn read_chain(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = tollgate_config::read_bounded(file)
        .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a PEM certificate: {e}", file.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{}: not a PEM certificate (no \"BEGIN CERTIFICATE\" block)",
            file.display()
        ));
    }
    Ok(chain)
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub(super) fn date(unix: i64) -> String {
    x509_parser::time::ASN1Time::from_timestamp(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| unix.to_string())
}

pub(super) fn read_key(file: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = tollgate_config::read_bounded(file)
        .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    if bytes.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(format!(
            "{}: the key is encrypted (a passphrase): store it decrypted, readable only by the gateway (openssl pkey -in KEY -out KEY.plain)",
            file.display()
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|_| format!("{}: not a PEM private key", file.display()))
}

/// Reads a server certificate chain and its key, and checks them: PEM, the key matches the
/// leaf, the chain is in order, the leaf is valid now, may serve (its extended key usage, if
/// any, includes serverAuth) and names at least one host.
pub fn load(files: &CertFiles) -> Result<Loaded, String> {
    let l = load_pair(files)?;
    if !l.server_auth {
        return Err(format!(
            "{}: not a server certificate (its extended key usage lacks serverAuth)",
            files.cert.display()
        ));
    }
    if l.names.is_empty() {
        return Err(format!(
            "{}: names no host (no DNS name or IP address in subjectAltName)",
            files.cert.display()
        ));
    }
    Ok(l)
}

/// As [`load`], for a client certificate (which need not name a host).
pub(super) fn load_pair(files: &CertFiles) -> Result<Loaded, String> {
    let chain = read_chain(&files.cert)?;
    let key = read_key(&files.key)?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|_| {
        format!(
            "{}: a key of a kind that is not served: use ECDSA P-256 or P-384, Ed25519, or RSA (PKCS#1 v1.5 / PSS signatures from an rsaEncryption key)",
            files.key.display()
        )
    })?;
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0])
        .map_err(|e| format!("{}: not an X.509 certificate: {e}", files.cert.display()))?;
    let certified = CertifiedKey::new(chain.clone(), signer);
    // A CA's certificate first in a chain is a chain out of order. (Alone, it is a
    // self-signed certificate, as `openssl req -x509` makes them: served, as nginx does.)
    if let Ok(Some(bc)) = leaf.basic_constraints() {
        if bc.value.ca && chain.len() > 1 {
            return Err(format!(
                "{}: the first certificate is a CA's: the file must start with the server's own certificate, then its chain",
                files.cert.display()
            ));
        }
    }
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        certified.keys_match()
    {
        return Err(format!(
            "{} and {}: the key does not match the certificate (the first in the file, which must be the server's own)",
            files.cert.display(),
            files.key.display()
        ));
    }
    // Each certificate of the chain must be issued by the next one.
    for (i, pair) in chain.windows(2).enumerate() {
        let parsed = (
            x509_parser::parse_x509_certificate(&pair[0]),
            x509_parser::parse_x509_certificate(&pair[1]),
        );
        if let (Ok((_, child)), Ok((_, parent))) = parsed {
            if child.issuer() != parent.subject() {
                return Err(format!(
                    "{}: certificate {} of the chain is not issued by certificate {} (the chain must go from the server's certificate up, in order)",
                    files.cert.display(),
                    i + 1,
                    i + 2
                ));
            }
        }
    }
    let now = now_unix();
    let not_after = leaf.validity().not_after.timestamp();
    if not_after < now {
        return Err(format!(
            "{}: expired on {}",
            files.cert.display(),
            date(not_after)
        ));
    }
    // A few minutes of clock skew between the issuer and this host are forgiven.
    let not_before = leaf.validity().not_before.timestamp();
    if not_before > now + 300 {
        return Err(format!(
            "{}: not valid before {}",
            files.cert.display(),
            date(not_before)
        ));
    }
    let mut names = Vec::new();
    if let Ok(Some(san)) = leaf.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => {
                    names.push(d.trim_end_matches('.').to_ascii_lowercase())
                }
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => <[u8; 4]>::try_from(*b).ok().map(std::net::IpAddr::from),
                        16 => <[u8; 16]>::try_from(*b).ok().map(std::net::IpAddr::from),
                        _ => None,
                    };
                    names.extend(ip.map(|ip| ip.to_string()));
                }
                _ => {}
            }
        }
    }
    let server_auth = match leaf.extended_key_usage() {
        Ok(Some(eku)) => eku.value.server_auth || eku.value.any,
        _ => true,
    };
    Ok(Loaded {
        key: Arc::new(certified),
        names,
        not_after,
        server_auth,
    })
}

/// Where certificates come from, in order of preference: `certificates`, then each folder of
/// `certificate_dirs` (itself if it holds `tls.crt` + `tls.key`, else its subfolders, by name).
pub fn sources(cfg: &TlsConfig) -> Vec<CertFiles> {
    let mut out = cfg.certificates.clone();
    for (dir, key_path) in &cfg.certificate_dirs {
        let secret = |d: &Path| CertFiles {
            cert: d.join("tls.crt"),
            key: d.join("tls.key"),
            key_path: key_path.clone(),
        };
        if dir.join("tls.crt").exists() {
            out.push(secret(dir));
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut subs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            // A mounted Secret's own `..data` and `..2026_...` folders are not certificates.
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            // One file present is a Secret being written or broken: a source that fails to
            // load (its last good certificate keeps serving), not one that went away.
            .filter(|p| p.join("tls.crt").exists() || p.join("tls.key").exists())
            .collect();
        subs.sort();
        out.extend(subs.iter().map(|p| secret(p)));
    }
    out
}

/// The certificates being served, by name.
#[derive(Debug, Default)]
pub struct CertSet {
    certs: Vec<Loaded>,
    exact: HashMap<String, Vec<usize>>,
    /// `*.example.com` under `example.com`.
    wildcard: HashMap<String, Vec<usize>>,
    reject_unknown: bool,
}

impl CertSet {
    pub fn new(certs: Vec<Loaded>, unknown: UnknownSni) -> Self {
        let mut set = CertSet {
            certs,
            reject_unknown: unknown == UnknownSni::Reject,
            ..CertSet::default()
        };
        for (i, c) in set.certs.iter().enumerate() {
            for n in &c.names {
                let (map, name) = match n.strip_prefix("*.") {
                    Some(rest) => (&mut set.wildcard, rest),
                    None => (&mut set.exact, n.as_str()),
                };
                let slot = map.entry(name.to_string()).or_default();
                if !slot.contains(&i) {
                    slot.push(i);
                }
            }
        }
        set
    }

    /// The certificate for `sni` that the client can verify (ECDSA or RSA, by the schemes it
    /// offers): an exact name, then a one-label wildcard, then the first certificate unless
    /// unknown names are refused.
    pub fn pick(
        &self,
        sni: Option<&str>,
        schemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let usable = |ids: &[usize]| {
            ids.iter()
                .map(|&i| &self.certs[i].key)
                .find(|k| k.key.choose_scheme(schemes).is_some())
                .or_else(|| ids.first().map(|&i| &self.certs[i].key))
                .cloned()
        };
        if let Some(name) = sni {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if let Some(ids) = self.exact.get(&name) {
                return usable(ids);
            }
            if let Some(ids) = name
                .split_once('.')
                .and_then(|(_, rest)| self.wildcard.get(rest))
            {
                return usable(ids);
            }
        }
        if self.reject_unknown {
            return None;
        }
        self.certs.first().map(|c| c.key.clone())
    }

    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }
}

/// The resolver rustls asks at each handshake.
#[derive(Debug)]
pub(super) struct Resolver(pub(super) Arc<ArcSwap<CertSet>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .load()
            .pick(hello.server_name(), hello.signature_schemes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set whose certificates each have a key of their own (Ed25519 from ring, with an
    /// empty chain: `pick` looks at names and schemes only), so a pick tells which matched.
    fn set_of(names: &[&[&str]], unknown: UnknownSni) -> CertSet {
        let certs = names
            .iter()
            .map(|n| Loaded {
                key: ed25519_key(),
                names: n.iter().map(|s| s.to_string()).collect(),
                not_after: 0,
                server_auth: true,
            })
            .collect();
        CertSet::new(certs, unknown)
    }

    fn ed25519_key() -> Arc<CertifiedKey> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).expect("a key");
        let der = PrivateKeyDer::Pkcs8(pkcs8.as_ref().to_vec().into());
        let signer = rustls::crypto::ring::sign::any_supported_type(&der).expect("a signer");
        Arc::new(CertifiedKey::new(Vec::new(), signer))
    }

    fn index(set: &CertSet, sni: Option<&str>) -> Option<usize> {
        let k = set.pick(sni, &[SignatureScheme::ED25519])?;
        set.certs.iter().position(|c| Arc::ptr_eq(&c.key, &k))
    }

    #[test]
    fn names_pick_certificates() {
        let set = set_of(
            &[
                &["a.example"],
                &["*.b.example", "b.example"],
                &["c.example"],
            ],
            UnknownSni::Default,
        );
        assert_eq!(index(&set, Some("a.example")), Some(0));
        assert_eq!(index(&set, Some("b.example")), Some(1));
        assert_eq!(index(&set, Some("x.b.example")), Some(1));
        assert_eq!(index(&set, Some("C.EXAMPLE.")), Some(2));
        // Unknown names, names a wildcard does not cover, and no SNI: the first certificate.
        assert_eq!(index(&set, Some("d.example")), Some(0));
        assert_eq!(index(&set, Some("y.x.b.example")), Some(0));
        assert_eq!(index(&set, None), Some(0));
        let strict = set_of(&[&["a.example"], &["*.b.example"]], UnknownSni::Reject);
        assert_eq!(index(&strict, Some("a.example")), Some(0));
        assert_eq!(index(&strict, Some("X.B.Example.")), Some(1));
        // A wildcard covers one label: not two, nor the bare name.
        for sni in [
            Some("c.example"),
            None,
            Some("y.x.b.example"),
            Some("b.example"),
            Some(""),
        ] {
            assert_eq!(index(&strict, sni), None, "{sni:?}");
        }
    }

    #[test]
    fn the_first_certificate_that_names_a_host_wins_among_equals() {
        let set = set_of(&[&["a.example"], &["a.example"]], UnknownSni::Reject);
        assert_eq!(index(&set, Some("a.example")), Some(0));
    }
}
