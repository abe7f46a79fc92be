//! The client's certificate, kept with its connection for the routes that tell the upstream
//! about it (`client_cert_headers`): ingress-nginx's `ssl-client-verify`,
//! `ssl-client-subject-dn`, `ssl-client-issuer-dn` and `ssl-client-cert`, as nginx writes
//! `$ssl_client_verify`, `$ssl_client_s_dn`, `$ssl_client_i_dn` (RFC 2253) and
//! `$ssl_client_escaped_cert` (the PEM, URI-component escaped).
//!
//! Kept by a handshake callback (vendor/patches/0016) in the connection's
//! `SslDigest::extension`; a handshake without a client certificate keeps nothing.

use pingora::listeners::TlsAccept;
use pingora::protocols::tls::TlsRef;
use std::any::Any;
use std::sync::Arc;

/// A verified client certificate (the handshake refuses any other), as the upstream is told.
#[derive(Debug)]
pub struct ClientCert {
    pub subject_dn: String,
    pub issuer_dn: String,
    /// The PEM, escaped as a URI component.
    pub escaped_pem: String,
}

/// The handshake callback of every TLS listener.
pub struct KeepClientCert;

#[async_trait::async_trait]
impl TlsAccept for KeepClientCert {
    async fn handshake_complete_callback(
        &self,
        ssl: &TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let der = ssl.peer_certificate_der()?;
        Some(Arc::new(ClientCert::of(der)?))
    }
}

impl ClientCert {
    /// `None` for bytes that are not a certificate (the verifier accepted it: not expected).
    pub fn of(der: &[u8]) -> Option<ClientCert> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        Some(ClientCert {
            subject_dn: rfc2253(cert.subject()),
            issuer_dn: rfc2253(cert.issuer()),
            escaped_pem: escape_component(&pem(der)),
        })
    }
}

/// OpenSSL's short names for the attributes nginx prints; others as their dotted OID.
fn short_name(oid: &x509_parser::der_parser::oid::Oid) -> String {
    let name = match oid.to_id_string().as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.5" => "serialNumber",
        "2.5.4.12" => "title",
        "2.5.4.4" => "SN",
        "2.5.4.42" => "GN",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        other => return other.to_string(),
    };
    name.to_string()
}

/// A name as RFC 2253 writes it (OpenSSL's `XN_FLAG_RFC2253`, nginx's `$ssl_client_s_dn`):
/// the last RDN first, `,` between RDNs, `+` within one, specials escaped.
fn rfc2253(name: &x509_parser::x509::X509Name) -> String {
    let mut rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let value = match atv.as_str() {
                        Ok(s) => escape_value(s),
                        // Not a string type: its DER as `#hex`, as RFC 2253 writes it.
                        Err(_) => {
                            let mut h = String::from("#");
                            for b in atv.attr_value().data.iter() {
                                h.push_str(&format!("{b:02x}"));
                            }
                            h
                        }
                    };
                    format!("{}={value}", short_name(atv.attr_type()))
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.reverse();
    rdns.join(",")
}

/// RFC 2253's escapes: `, + " \ < > ;` anywhere, `#` or a space first, a space last; a
/// control or non-ASCII character's bytes as `\XX`.
fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            // OpenSSL's ASN1_STRFLGS_ESC_MSB (in XN_FLAG_RFC2253): each byte of a
            // non-ASCII character as \XX, as nginx's variables carry it.
            c if c.is_control() || !c.is_ascii() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\{b:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The certificate as OpenSSL's PEM_write writes it: 64 base64 characters a line.
fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// nginx's `NGX_ESCAPE_URI_COMPONENT`: all but letters, digits and `-._~` as `%XX`.
const URI_COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn escape_component(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, URI_COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_written_as_rfc_2253_last_rdn_first_and_escaped() {
        let mut params =
            rcgen::CertificateParams::new(vec!["alice.example".into()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CountryName, "DE");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Shop, Inc.");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        let c = ClientCert::of(cert.der()).expect("parsed");
        assert_eq!(c.subject_dn, "CN=alice,O=Shop\\, Inc.,C=DE");
        assert_eq!(c.issuer_dn, c.subject_dn, "self-signed");
        let want = cert.pem().replace("\r\n", "\n");
        assert_eq!(pem(cert.der()), want);
        assert!(c
            .escaped_pem
            .starts_with("-----BEGIN%20CERTIFICATE-----%0A"));
        assert!(!c.escaped_pem.contains(['+', '/', '=', ' ', '\n']));
        assert_eq!(escape_value(" #a;b "), "\\ #a\\;b\\ ");
        assert_eq!(escape_value("#x"), "\\#x");
        assert_eq!(escape_value("Jörg"), "J\\C3\\B6rg");
        assert!(ClientCert::of(b"not a certificate").is_none());
    }
}
