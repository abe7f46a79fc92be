//! `[jwt]`: how bearer tokens are verified for `jwt:CLAIM` key sources.

use std::time::Duration;

/// Bearer-token verification. Keys are read and checked at load time.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtSettings {
    /// Accepted `alg` values (never `none`).
    pub algorithms: Vec<jsonwebtoken::Algorithm>,
    /// The HMAC secret for HS256/384/512.
    pub secret: Option<String>,
    /// PEM public keys (RSA or EC), each with the file it came from.
    pub public_keys: Vec<PublicKey>,
    /// A JWKS document (JSON), selected by the token's `kid`.
    pub jwks: Option<String>,
    /// `jwks_url`: the identity provider's keys, fetched in the background.
    pub remote: Option<RemoteJwks>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// The header carrying `Bearer <token>`, lower case.
    pub header: String,
}

/// `[jwt] jwks_url`, `jwks_ca`, `jwks_refetch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteJwks {
    pub url: String,
    /// PEM certificates the URL's server is verified with (system roots without).
    pub ca: Option<Vec<u8>>,
    /// The least time between two fetches for tokens naming a kid the set lacks.
    pub refetch: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub file: String,
    pub pem: Vec<u8>,
    /// RSA (RS*, PS*) or EC (ES*).
    pub rsa: bool,
}
