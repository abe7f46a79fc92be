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
//!
//! One file per part: [`certs`] (reading and checking a chain and its key, the set chosen by
//! SNI), [`client_auth`] (the client-certificate verifier), [`resumption`] (tickets and the
//! session cache), [`listener`] (what the TLS listeners serve, renewed in place) and
//! [`upstream`] (an upstream's CA bundle and client certificate).

pub mod certs;
mod client_auth;
pub mod client_cert;
pub mod listener;
mod resumption;
pub mod upstream;

use rustls::crypto::CryptoProvider;
use std::sync::Arc;

/// ring: the provider Pingora's rustls build uses (no second crypto stack).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
