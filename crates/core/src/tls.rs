//! The TLS listeners' certificates: read from PEM files and Kubernetes TLS Secret folders,
//! chosen by SNI, renewed without a restart; and the client-certificate verifier.
//!
//! One loader decides everywhere: `tollgate check`, start, a config reload and a renewal.
//! A certificate is refused when its file is not PEM, its key does not match it, or it has
//! expired; at check and start that is an error naming the file, later the certificate it
//! would have replaced keeps serving (logged, counted). Certificates are looked at twice a
//! second (the config watcher's clock): a change that then stays the same for one look is
//! loaded, so new handshakes see a renewed certificate within a second or so, and open
//! connections keep theirs.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tollgate_config::{CertFiles, ClientAuth, TlsConfig, TlsVersion, UnknownSni};

/// ring: the provider Pingora's rustls build uses (no second crypto stack).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

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

fn read_chain(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
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

fn date(unix: i64) -> String {
    x509_parser::time::ASN1Time::from_timestamp(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| unix.to_string())
}

fn read_key(file: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
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
fn load_pair(files: &CertFiles) -> Result<Loaded, String> {
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
struct Resolver(Arc<ArcSwap<CertSet>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .load()
            .pick(hello.server_name(), hello.signature_schemes())
    }
}

/// The client-certificate verifier in force, swapped when `client_ca` changes. Sends no list
/// of acceptable CAs (the hint is optional; clients send the certificate they were given).
#[derive(Debug)]
struct ClientVerifier(Arc<ArcSwap<Verifier>>);

#[derive(Debug)]
struct Verifier {
    inner: Option<Arc<dyn ClientCertVerifier>>,
    mandatory: bool,
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.0.load().inner.is_some()
    }

    fn client_auth_mandatory(&self) -> bool {
        let v = self.0.load();
        v.inner.is_some() && v.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match &self.0.load().inner {
            Some(v) => v.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::General(
                "client certificates are not asked for".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Session resumption (TLS 1.3 tickets, TLS 1.2 session IDs) whose keys and cache are made
/// anew whenever the client verifier changes: a session resumes the client certificate it was
/// made with, so after `client_ca` or `client_auth` changes no earlier session may resume.
#[derive(Debug)]
struct Resumption {
    tickets: ArcSwap<Arc<dyn rustls::server::ProducesTickets>>,
    sessions: ArcSwap<Arc<rustls::server::ServerSessionMemoryCache>>,
}

/// Sessions kept per process for TLS 1.2 resumption by ID.
const SESSION_CACHE: usize = 4096;

impl Resumption {
    fn new() -> Result<Self, String> {
        Ok(Resumption {
            tickets: ArcSwap::from_pointee(Self::ticketer()?),
            sessions: ArcSwap::from_pointee(rustls::server::ServerSessionMemoryCache::new(
                SESSION_CACHE,
            )),
        })
    }

    fn ticketer() -> Result<Arc<dyn rustls::server::ProducesTickets>, String> {
        rustls::crypto::ring::Ticketer::new().map_err(|e| e.to_string())
    }

    /// Every session and ticket issued so far stops resuming.
    fn renew(&self) {
        match Self::ticketer() {
            Ok(t) => self.tickets.store(Arc::new(t)),
            // Without new keys, no tickets at all rather than old ones.
            Err(_) => self.tickets.store(Arc::new(Arc::new(NoTickets))),
        }
        self.sessions
            .store(Arc::new(rustls::server::ServerSessionMemoryCache::new(
                SESSION_CACHE,
            )));
    }
}

#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

#[derive(Debug)]
struct Tickets(Arc<Resumption>);

impl rustls::server::ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        self.0.tickets.load().enabled()
    }
    fn lifetime(&self) -> u32 {
        self.0.tickets.load().lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.0.tickets.load().encrypt(plain)
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.0.tickets.load().decrypt(cipher)
    }
}

#[derive(Debug)]
struct Sessions(Arc<Resumption>);

impl rustls::server::StoresServerSessions for Sessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.0.sessions.load().put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.sessions.load().get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.sessions.load().take(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}

/// A verifier for `client_ca`.
fn client_verifier(cfg: &TlsConfig) -> Result<Verifier, String> {
    let Some(ca) = &cfg.client_ca else {
        return Ok(Verifier {
            inner: None,
            mandatory: false,
        });
    };
    let mut roots = RootCertStore::empty();
    for c in read_chain(ca)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", ca.display()))?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = match cfg.client_auth {
        ClientAuth::Require => builder,
        ClientAuth::Optional => builder.allow_unauthenticated(),
    };
    let inner = builder
        .build()
        .map_err(|e| format!("{}: {e}", ca.display()))?;
    Ok(Verifier {
        inner: Some(inner),
        mandatory: cfg.client_auth == ClientAuth::Require,
    })
}

/// Loads every certificate `cfg` names as start would, and says what is wrong (check, and a
/// config reload before it changes anything).
pub fn check(cfg: &TlsConfig) -> Result<(), Vec<String>> {
    let metrics =
        TlsMetrics::register(&Registry::new()).map_err(|e| vec![format!("metrics: {e}")])?;
    Certificates::load(cfg, metrics).map(|_| ())
}

/// `tollgate_tls_*` metrics.
#[derive(Clone)]
pub struct TlsMetrics {
    /// notAfter of each certificate served, Unix seconds, by its first name.
    pub expiry: IntGaugeVec,
    /// Certificate loads after start: `ok`, or `error` (the old one kept serving).
    pub reloads: IntCounterVec,
    /// Certificates being served.
    pub served: prometheus::IntGauge,
}

impl TlsMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let expiry = IntGaugeVec::new(
            Opts::new(
                "tollgate_tls_certificate_expiry_seconds",
                "When each certificate served expires (notAfter), Unix seconds, by its first name",
            ),
            &["name"],
        )?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "tollgate_tls_certificate_reloads_total",
                "Certificates loaded after start (renewals), by result; on error the old certificate keeps serving",
            ),
            &["result"],
        )?;
        let served = prometheus::IntGauge::new(
            "tollgate_tls_certificates_served",
            "Certificates the TLS listeners are serving",
        )?;
        registry.register(Box::new(expiry.clone()))?;
        registry.register(Box::new(reloads.clone()))?;
        registry.register(Box::new(served.clone()))?;
        // Exported at 0 from the start, so increase() sees the first refusal.
        for r in ["ok", "error"] {
            reloads.with_label_values(&[r]);
        }
        Ok(TlsMetrics {
            expiry,
            reloads,
            served,
        })
    }
}

/// A certificate source as last looked at.
struct Entry {
    files: CertFiles,
    stamp: u64,
    loaded: Option<Loaded>,
}

struct Watch {
    cfg: TlsConfig,
    entries: Vec<Entry>,
    /// The client CA file as last loaded.
    ca_stamp: u64,
    /// What all sources looked like at the last load, and a change seen once (loaded when the
    /// next look sees it unchanged).
    seen: u64,
    pending: Option<u64>,
}

/// The certificates and client verification of the TLS listeners, renewed in place.
pub struct Certificates {
    set: Arc<ArcSwap<CertSet>>,
    verifier: Arc<ArcSwap<Verifier>>,
    resumption: Arc<Resumption>,
    min_version: TlsVersion,
    metrics: TlsMetrics,
    watch: Mutex<Watch>,
}

/// What files look like (device, inode, size, modification and status-change times, symlinks
/// followed), or their absence, as one number. A Kubernetes ConfigMap or Secret update swaps a
/// symlink (a new inode) and an editor's write or rename changes the status-change time (which
/// no tool can set back), so no update goes unseen; a stat of a few files twice a second costs
/// nothing, whatever their size. (A watcher crate such as notify misses the ConfigMap swap when
/// it watches the file rather than its directory.) The config watcher uses it too.
pub fn stamp(paths: &[&Path]) -> u64 {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in paths {
        p.hash(&mut h);
        match std::fs::metadata(p) {
            Ok(m) => (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
                .hash(&mut h),
            Err(e) => e.kind().hash(&mut h),
        }
    }
    h.finish()
}

fn entry_stamp(f: &CertFiles) -> u64 {
    stamp(&[&f.cert, &f.key])
}

fn look(cfg: &TlsConfig) -> (Vec<CertFiles>, u64) {
    use std::hash::{Hash, Hasher};
    let sources = sources(cfg);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for s in &sources {
        entry_stamp(s).hash(&mut h);
    }
    cfg.client_ca.as_deref().map(|ca| stamp(&[ca])).hash(&mut h);
    (sources, h.finish())
}

impl Certificates {
    /// Loads every certificate `cfg` names: all of them must be good (check and start).
    pub fn load(cfg: &TlsConfig, metrics: TlsMetrics) -> Result<Self, Vec<String>> {
        let (sources, seen) = look(cfg);
        let mut errors = Vec::new();
        let mut entries = Vec::new();
        for files in sources {
            let stamp = entry_stamp(&files);
            match load(&files) {
                Ok(l) => entries.push(Entry {
                    files,
                    stamp,
                    loaded: Some(l),
                }),
                Err(e) => errors.push(format!("{}: {e}", files.key_path)),
            }
        }
        if entries.is_empty() && errors.is_empty() {
            let dirs: Vec<String> = cfg
                .certificate_dirs
                .iter()
                .map(|(d, _)| d.display().to_string())
                .collect();
            errors.push(format!(
                "tls: no certificate found (certificate_dirs: no subfolder of {} holds tls.crt and tls.key)",
                dirs.join(", ")
            ));
        }
        let verifier = match client_verifier(cfg) {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(format!("tls.client_ca: {e}"));
                None
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        let verifier = verifier.unwrap_or(Verifier {
            inner: None,
            mandatory: false,
        });
        let resumption =
            Resumption::new().map_err(|e| vec![format!("tls: session tickets: {e}")])?;
        let certs = Certificates {
            set: Arc::new(ArcSwap::from_pointee(CertSet::default())),
            verifier: Arc::new(ArcSwap::from_pointee(verifier)),
            resumption: Arc::new(resumption),
            min_version: cfg.min_version,
            metrics,
            watch: Mutex::new(Watch {
                cfg: cfg.clone(),
                entries,
                ca_stamp: cfg.client_ca.as_deref().map_or(0, |ca| stamp(&[ca])),
                seen,
                pending: None,
            }),
        };
        certs.publish(&certs.watch.lock());
        Ok(certs)
    }

    /// The rustls configuration of every TLS listener: the versions allowed, the resolver and
    /// verifier above, ALPN h2 then http/1.1, and resumption (tickets for TLS 1.3, a session
    /// cache for TLS 1.2), both made anew when the client verifier changes.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, String> {
        let versions: &[&'static rustls::SupportedProtocolVersion] = match self.min_version {
            TlsVersion::V12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::V13 => &[&rustls::version::TLS13],
        };
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(Arc::new(ClientVerifier(self.verifier.clone())))
            .with_cert_resolver(Arc::new(Resolver(self.set.clone())));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.ticketer = Arc::new(Tickets(self.resumption.clone()));
        config.session_storage = Arc::new(Sessions(self.resumption.clone()));
        Ok(Arc::new(config))
    }

    /// Serves the entries' certificates and sets the expiry gauges. Never nothing: when every
    /// source is gone or broken, the certificates being served stay (an error, counted).
    fn publish(&self, w: &Watch) {
        let loaded: Vec<Loaded> = w.entries.iter().filter_map(|e| e.loaded.clone()).collect();
        if loaded.is_empty() && !self.set.load().is_empty() {
            self.metrics.reloads.with_label_values(&["error"]).inc();
            tracing::error!(
                event = "certificates_gone",
                "no certificate left to serve (folders empty or every file broken): the ones served so far stay"
            );
            return;
        }
        self.metrics.served.set(loaded.len() as i64);
        self.metrics.expiry.reset();
        for l in &loaded {
            let g = self
                .metrics
                .expiry
                .with_label_values(&[l.names[0].as_str()]);
            // Two certificates for one name (ECDSA and RSA): the one that expires first.
            if g.get() == 0 || l.not_after < g.get() {
                g.set(l.not_after);
            }
        }
        self.set
            .store(Arc::new(CertSet::new(loaded, w.cfg.unknown_sni)));
    }

    /// A config reload: the new `[tls]` (certificates, folders, client CA, unknown_sni) is
    /// looked at now. `min_version` changes only on restart.
    pub fn reconfigure(&self, cfg: &TlsConfig) {
        let mut w = self.watch.lock();
        if w.cfg == *cfg {
            return;
        }
        w.cfg = cfg.clone();
        w.ca_stamp = u64::MAX;
        self.refresh(&mut w, true);
    }

    /// One look (twice a second): loads what changed and then stayed the same for a look.
    pub fn watch(&self) {
        let mut w = self.watch.lock();
        let (_, now) = look(&w.cfg);
        if now == w.seen {
            w.pending = None;
            return;
        }
        if w.pending != Some(now) {
            w.pending = Some(now);
            return;
        }
        self.refresh(&mut w, false);
    }

    fn refresh(&self, w: &mut Watch, reconfigured: bool) {
        let (sources, seen) = look(&w.cfg);
        w.seen = seen;
        w.pending = None;
        let mut old: Vec<Entry> = std::mem::take(&mut w.entries);
        for files in sources {
            let stamp = entry_stamp(&files);
            let before = old
                .iter()
                .position(|e| e.files.cert == files.cert && e.files.key == files.key)
                .map(|i| old.swap_remove(i));
            match before {
                Some(e) if e.stamp == stamp && e.loaded.is_some() => w.entries.push(e),
                before => match load(&files) {
                    Ok(l) => {
                        self.metrics.reloads.with_label_values(&["ok"]).inc();
                        tracing::info!(
                            event = "certificate_loaded",
                            cert = %files.cert.display(),
                            names = ?l.names,
                            not_after = %date(l.not_after),
                            "certificate loaded: new handshakes use it"
                        );
                        w.entries.push(Entry {
                            files,
                            stamp,
                            loaded: Some(l),
                        });
                    }
                    Err(why) => {
                        self.metrics.reloads.with_label_values(&["error"]).inc();
                        let kept = before.as_ref().is_some_and(|e| e.loaded.is_some());
                        tracing::error!(
                            event = "certificate_rejected",
                            key = %files.key_path,
                            error = %why,
                            kept_old = kept,
                            "certificate refused; {}",
                            if kept { "the old one keeps serving" } else { "not served" }
                        );
                        // Tried once per change: the old certificate (if any) stays, marked
                        // with the new stamp so the broken files are not read again.
                        w.entries.push(Entry {
                            files,
                            stamp,
                            loaded: before.and_then(|e| e.loaded),
                        });
                    }
                },
            }
        }
        for gone in old {
            tracing::warn!(
                event = "certificate_removed",
                cert = %gone.files.cert.display(),
                "certificate no longer configured or its files are gone: not served"
            );
        }
        let ca_now = w.cfg.client_ca.as_deref().map_or(0, |ca| stamp(&[ca]));
        if ca_now != w.ca_stamp || reconfigured {
            match client_verifier(&w.cfg) {
                Ok(v) => {
                    self.verifier.store(Arc::new(v));
                    // A session made under the old verifier must not skip the new one.
                    self.resumption.renew();
                    w.ca_stamp = ca_now;
                    tracing::info!(event = "client_ca_loaded", "client certificate settings in force; earlier TLS sessions no longer resume");
                }
                Err(e) => {
                    self.metrics.reloads.with_label_values(&["error"]).inc();
                    w.ca_stamp = ca_now;
                    // Whatever was meant (a revocation, most likely), sessions made so far stop
                    // resuming: a full handshake meets the verifier in force.
                    self.resumption.renew();
                    tracing::error!(event = "client_ca_rejected", error = %e, "client CA refused; the old one stays in force");
                }
            }
        }
        self.publish(w);
    }
}

/// An upstream's TLS as Pingora's connector takes it: the name sent and verified, the CA
/// bundle (if not the system's roots) and the client certificate.
#[derive(Clone)]
pub struct UpstreamTlsRt {
    /// Never empty: Pingora skips verification for a peer without SNI.
    pub sni: String,
    pub verify: bool,
    pub ca: Option<Arc<pingora::protocols::tls::CaType>>,
    pub client_cert: Option<Arc<pingora::utils::tls::CertKey>>,
}

/// Reads an upstream's CA bundle and client certificate. `host` is the target's host (a DNS
/// name or an IP address), the name verified when `sni` is not set.
pub fn upstream_tls(
    cfg: &tollgate_config::UpstreamTls,
    host: &str,
) -> Result<UpstreamTlsRt, String> {
    use pingora::utils::tls::{parse_x509, CertKey, WrappedX509};
    let ca = match &cfg.ca {
        Some(file) => {
            let certs: Vec<WrappedX509> = read_chain(file)?
                .into_iter()
                .map(|c| WrappedX509::new(c.to_vec(), parse_x509))
                .collect();
            Some(Arc::from(certs.into_boxed_slice()))
        }
        None => None,
    };
    let client_cert = match &cfg.client_cert {
        Some(files) => {
            let loaded = load_pair(files)?;
            let chain: Vec<Vec<u8>> = loaded.key.cert.iter().map(|c| c.to_vec()).collect();
            let key = read_key(&files.key)?;
            Some(Arc::new(CertKey::new(chain, key.secret_der().to_vec())))
        }
        None => None,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(UpstreamTlsRt {
        sni: cfg.sni.clone().unwrap_or_else(|| host.to_string()),
        verify: cfg.verify,
        ca,
        client_cert,
    })
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
