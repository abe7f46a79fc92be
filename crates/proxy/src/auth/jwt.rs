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
    /// `[jwt] jwks_url`'s keys, when set (kept across reloads while the URL stays).
    pub remote: Option<std::sync::Arc<super::jwks::Jwks>>,
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
    pub fn new(s: &JwtSettings, remote: Option<std::sync::Arc<super::jwks::Jwks>>) -> Self {
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
            remote,
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

    /// Verifies `token`; the claims, or why it was refused (for the 401's detail). A kid the
    /// remote set lacks has it fetched again (at most once per `jwks_refetch`), then the token
    /// is tried once more.
    pub async fn check(
        &self,
        token: &str,
        metrics: &crate::metrics::Metrics,
    ) -> Result<Claims, &'static str> {
        match self.verify_with(token, false) {
            Err(Miss::UnknownKid) => {
                if let Some(remote) = &self.remote {
                    remote.unknown_kid(metrics).await;
                }
                // The set as it is now, else the configured keys of the token's family.
                self.verify_with(token, true).map_err(Miss::why)
            }
            r => r.map_err(Miss::why),
        }
    }

    /// Which remote key set verifies tokens now (0 without one): a token verified under
    /// another is verified again.
    pub fn generation(&self) -> u64 {
        self.remote.as_ref().map_or(0, |r| r.generation())
    }

    /// Verifies `token` with the keys at hand.
    pub fn verify(&self, token: &str) -> Result<Claims, &'static str> {
        self.verify_with(token, true).map_err(Miss::why)
    }

    /// `settled`: the remote set will not be asked again for this token, so a kid it lacks
    /// falls back to the configured keys (and is refused when none verifies).
    fn verify_with(&self, token: &str, settled: bool) -> Result<Claims, Miss> {
        let header = decode_header(token).map_err(|_| Miss::Why("the token is malformed"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Miss::Why("the token's algorithm is not accepted"));
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
        let remote = self.remote.as_ref().map(|r| r.keys());
        let from_remote = match (&remote, &header.kid) {
            (Some(keys), Some(kid)) => keys.get(kid),
            _ => None,
        };
        if let Some(k) = from_remote {
            // A key that names its algorithm verifies only tokens that name it too.
            if k.alg.is_some_and(|a| a != header.alg) {
                return Err(Miss::Why("the token's algorithm does not match the key"));
            }
            return decode::<Claims>(token, &k.key, &v)
                .map(|d| d.claims)
                .map_err(|e| Miss::Why(refusal(&e)));
        }
        let local = header.kid.as_ref().and_then(|k| self.by_kid.get(k));
        let candidates: Vec<&DecodingKey> = match local {
            Some(k) => vec![k],
            None => match family(header.alg) {
                0 => self.hmac.iter().collect(),
                1 => self.rsa.iter().collect(),
                _ => self.ec.iter().collect(),
            },
        };
        // A kid neither set knows, with a remote set: it may be the provider's new key (even
        // when keys of its family are configured too: rotation must not wait a day).
        if !settled && local.is_none() && header.kid.is_some() && remote.is_some() {
            return Err(Miss::UnknownKid);
        }
        if local.is_none() && header.kid.is_some() && remote.is_some() && candidates.is_empty() {
            return Err(Miss::Why(UNKNOWN_KID));
        }
        let mut why = "no configured key verifies the token's signature";
        for key in candidates {
            match decode::<Claims>(token, key, &v) {
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    why = refusal(&e);
                    // Only a signature mismatch is worth trying another key for.
                    if !matches!(e.kind(), K::InvalidSignature | K::InvalidAlgorithm) {
                        return Err(Miss::Why(why));
                    }
                }
            }
        }
        Err(Miss::Why(why))
    }
}

const UNKNOWN_KID: &str = "the token's key (kid) is not in the identity provider's key set";

/// Why a token did not verify with the keys at hand.
enum Miss {
    Why(&'static str),
    /// Its kid is in neither key set, and a remote set may have gained it.
    UnknownKid,
}

impl Miss {
    fn why(self) -> &'static str {
        match self {
            Miss::Why(w) => w,
            Miss::UnknownKid => UNKNOWN_KID,
        }
    }
}

/// The 401's detail for a verification error.
fn refusal(e: &jsonwebtoken::errors::Error) -> &'static str {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::InvalidSignature => "no configured key verifies the token's signature",
        K::ExpiredSignature => "the token has expired",
        K::ImmatureSignature => "the token is not valid yet",
        K::InvalidIssuer => "the token's issuer is not accepted",
        K::InvalidAudience => "the token's audience is not accepted",
        K::MissingRequiredClaim(_) => "the token has no exp claim",
        K::InvalidAlgorithm => "the token's algorithm does not match the key",
        _ => "the token is malformed",
    }
}
