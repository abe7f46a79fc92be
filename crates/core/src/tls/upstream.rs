//! An upstream's TLS: the name sent and verified, its CA bundle and client certificate.

use super::certs::{load_pair, read_chain, read_key};
use std::sync::Arc;

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
    cfg: &tollgate_config::model::UpstreamTls,
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
