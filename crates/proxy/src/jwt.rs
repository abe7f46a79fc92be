//! Bearer tokens for `jwt:CLAIM` key sources: verified with the configured keys, or refused.
//!
//! Only routes whose limits read a claim look at the token. No token: those limits do not
//! count the request (as for any missing key value). A token that does not verify (bad
//! signature, unaccepted algorithm - `none` never is -, expired, not yet valid, wrong issuer
//! or audience, malformed) gets 401: a client must not dodge its identity's limits by sending
//! garbage. Signatures are checked by `jsonwebtoken` on ring; `exp` and `nbf` against the
//! system clock with the configured leeway.

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::collections::HashMap;
use tollgate_config::JwtSettings;

pub type Claims = Map<String, Value>;

pub struct Verifier {
    algorithms: Vec<Algorithm>,
    hmac: Option<DecodingKey>,
    rsa: Vec<DecodingKey>,
    ec: Vec<DecodingKey>,
    /// JWKS keys by `kid`.
    by_kid: HashMap<String, DecodingKey>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway: u64,
    pub header: http::HeaderName,
}

fn family(a: Algorithm) -> u8 {
    use Algorithm as A;
    match a {
        A::HS256 | A::HS384 | A::HS512 => 0,
        A::ES256 | A::ES384 => 2,
        _ => 1,
    }
}

impl Verifier {
    /// Builds the keys; the config was checked at load time, so a key that fails here is
    /// skipped (and could not verify anything).
    pub fn new(s: &JwtSettings) -> Self {
        let mut by_kid = HashMap::new();
        if let Some(set) = s
            .jwks
            .as_deref()
            .and_then(|t| serde_json::from_str::<JwkSet>(t).ok())
        {
            for k in &set.keys {
                if let (Some(kid), Ok(dk)) = (&k.common.key_id, DecodingKey::from_jwk(k)) {
                    by_kid.insert(kid.clone(), dk);
                }
            }
        }
        Self {
            algorithms: s.algorithms.clone(),
            hmac: s
                .secret
                .as_ref()
                .map(|x| DecodingKey::from_secret(x.as_bytes())),
            rsa: s
                .public_keys
                .iter()
                .filter(|k| k.rsa)
                .filter_map(|k| DecodingKey::from_rsa_pem(&k.pem).ok())
                .collect(),
            ec: s
                .public_keys
                .iter()
                .filter(|k| !k.rsa)
                .filter_map(|k| DecodingKey::from_ec_pem(&k.pem).ok())
                .collect(),
            by_kid,
            issuer: s.issuer.clone(),
            audience: s.audience.clone(),
            leeway: s.leeway.as_secs(),
            header: http::HeaderName::from_bytes(s.header.as_bytes())
                .unwrap_or(http::header::AUTHORIZATION),
        }
    }

    /// The token of a request's header value (`Bearer <token>`, scheme case-insensitive);
    /// `None` when the value is not a bearer credential.
    pub fn token(value: &[u8]) -> Option<&str> {
        let v = std::str::from_utf8(value).ok()?.trim();
        let (scheme, token) = v.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim())
            .filter(|t| !t.is_empty())
    }

    /// Verifies `token`; the claims, or why it was refused (for the 401's detail).
    pub fn verify(&self, token: &str) -> Result<Claims, &'static str> {
        let header = decode_header(token).map_err(|_| "the token is malformed")?;
        if !self.algorithms.contains(&header.alg) {
            return Err("the token's algorithm is not accepted");
        }
        let mut v = Validation::new(header.alg);
        v.leeway = self.leeway;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp"]);
        if let Some(i) = &self.issuer {
            v.set_issuer(&[i]);
        }
        match &self.audience {
            Some(a) => v.set_audience(&[a]),
            None => v.validate_aud = false,
        }
        let candidates: Vec<&DecodingKey> =
            match header.kid.as_ref().and_then(|k| self.by_kid.get(k)) {
                Some(k) => vec![k],
                None => match family(header.alg) {
                    0 => self.hmac.iter().collect(),
                    1 => self.rsa.iter().collect(),
                    _ => self.ec.iter().collect(),
                },
            };
        let mut why = "no configured key verifies the token's signature";
        for key in candidates {
            match decode::<Claims>(token, key, &v) {
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    why = match e.kind() {
                        K::InvalidSignature => "no configured key verifies the token's signature",
                        K::ExpiredSignature => "the token has expired",
                        K::ImmatureSignature => "the token is not valid yet",
                        K::InvalidIssuer => "the token's issuer is not accepted",
                        K::InvalidAudience => "the token's audience is not accepted",
                        K::MissingRequiredClaim(_) => "the token has no exp claim",
                        K::InvalidAlgorithm => "the token's algorithm does not match the key",
                        _ => "the token is malformed",
                    };
                    // Only a signature mismatch is worth trying another key for.
                    if !matches!(e.kind(), K::InvalidSignature | K::InvalidAlgorithm) {
                        return Err(why);
                    }
                }
            }
        }
        Err(why)
    }
}
