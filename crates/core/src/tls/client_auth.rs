//! The client-certificate verifier (`client_ca`, `client_auth`), swapped in place when the
//! CA file or the settings change.

use super::certs::read_chain;
use super::provider;
use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tollgate_config::model::{ClientAuth, TlsConfig};

/// The client-certificate verifier in force, swapped when `client_ca` changes. Sends no list
/// of acceptable CAs (the hint is optional; clients send the certificate they were given).
#[derive(Debug)]
pub(super) struct ClientVerifier(pub(super) Arc<ArcSwap<Verifier>>);

#[derive(Debug)]
pub(super) struct Verifier {
    pub(super) inner: Option<Arc<dyn ClientCertVerifier>>,
    pub(super) mandatory: bool,
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

/// A verifier for `client_ca`.
pub(super) fn client_verifier(cfg: &TlsConfig) -> Result<Verifier, String> {
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
