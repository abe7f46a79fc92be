//! TLS to Redis (`rediss://`) on rustls with ring, the provider the rest of the process uses.
//! The server is always verified; what is checked here is what can be known before the first
//! connection (a client key that is not its certificate's), and what a failed handshake says.

use crate::StoreError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::error::Error;
use std::sync::Arc;

/// TLS for `rediss://` URLs. The server's certificate is always verified (against `ca`, else
/// the system's roots) and must name the URL's host; nothing here can turn that off.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// PEM CA bundle; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// PEM certificate (chain) and private key shown to the server (mutual TLS).
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field(
                "ca",
                &self.ca.as_ref().map(|c| format!("{} bytes", c.len())),
            )
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<set>"))
            .finish()
    }
}

fn invalid(what: &'static str, detail: String) -> StoreError {
    StoreError::Redis(redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        what,
        detail,
    )))
}

/// Makes ring the process's rustls provider unless one is already installed (Pingora installs
/// ring too; the store may be the first TLS user in a process, e.g. in tests), and checks that
/// a client certificate and its key belong together.
pub(crate) fn check(t: &Tls) -> Result<(), StoreError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some((cert, key)) = &t.client_cert else {
        return Ok(());
    };
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("client certificate", e.to_string()))?;
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid("client key", e.to_string()))?;
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", e.to_string()))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map_err(|e| invalid("client certificate and key", e.to_string()))?;
    Ok(())
}

fn rustls_error<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(t) = e.downcast_ref::<rustls::Error>() {
        return Some(t);
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    }
    if let Some(a) = e.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
        return rustls_error(&**a);
    }
    None
}

/// The TLS reason of a failed call (a certificate refused by either side, a handshake alert),
/// or `None` for any other failure.
pub(crate) fn failure(e: &StoreError) -> Option<String> {
    let StoreError::Redis(r) = e else {
        return None;
    };
    let mut cur: Option<&(dyn Error + 'static)> = Some(r);
    while let Some(err) = cur {
        if let Some(t) = rustls_error(err) {
            return Some(t.to_string());
        }
        cur = err.source();
    }
    None
}
