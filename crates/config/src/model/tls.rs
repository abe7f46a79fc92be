//! `[tls]`: the TLS listeners' certificates, client certificates, and an upstream's TLS.

use std::path::PathBuf;

/// `[tls]` (docs/tls.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// In order: the first is served to clients without SNI or with an unknown name.
    pub certificates: Vec<CertFiles>,
    /// Folders whose subfolders hold `tls.crt` + `tls.key` (mounted Kubernetes TLS Secrets),
    /// with the config key that named each.
    pub certificate_dirs: Vec<(PathBuf, String)>,
    pub min_version: TlsVersion,
    pub unknown_sni: UnknownSni,
    /// The Strict-Transport-Security value added to responses over TLS.
    pub hsts: Option<String>,
    /// Client certificates are asked for and verified against this CA bundle.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// A certificate chain and its private key (PEM files), and the config key that named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub key_path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    V12,
    V13,
}

/// A client hello whose SNI names no certificate (or that has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownSni {
    /// Served the first certificate.
    Default,
    /// The handshake fails.
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A handshake without a valid client certificate fails.
    Require,
    /// A client certificate is asked for; one that is sent must be valid.
    Optional,
}

/// An upstream's `tls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// CA bundle that verifies the upstream; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// The name sent and verified; `None`: the target's host name.
    pub sni: Option<String>,
    pub verify: bool,
    pub client_cert: Option<CertFiles>,
}

/// `[[tls_passthrough]]`: TLS connections naming one of `hosts` in their ClientHello are
/// relayed, unread, to a target of `upstream` (ingress-nginx's `ssl-passthrough`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passthrough {
    /// Lower-case names, `*.example.com` for one label in place of the `*`.
    pub hosts: Vec<String>,
    /// Index into [`crate::model::Config::upstreams`].
    pub upstream: usize,
}
