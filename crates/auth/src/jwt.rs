//! Bearer tokens for `jwt:CLAIM` key sources: verified with the configured keys, or refused.
//!
//! Only routes whose limits read a claim look at the token. No token: those limits do not
//! count the request (as for any missing key value). A token that does not verify (bad
//! signature, unaccepted algorithm - `none` never is -, expired, not yet valid, wrong or
//! missing issuer or audience, malformed) gets 401: a client must not dodge its identity's
//! limits by sending garbage. Signatures are checked by `jsonwebtoken`'s `crypto::verify` on
//! ring, with a key of the algorithm's own family only; the registered claims are checked
//! here (`exp` and `nbf` against the system clock with the configured leeway; `iss` and `aud`
//! required when `[jwt]` names them), so the other claims may be of any JSON type: a `sub`
//! that is an object verifies, where `jsonwebtoken`'s own validation refuses the token.

use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Header};
use serde_json::{Map, Value};
use std::collections::HashMap;
use tollgate_config::model::JwtSettings;

use super::family::Family;

pub type Claims = Map<String, Value>;

pub struct Verifier {
    /// `[jwt] jwks_url`'s keys, when set (kept across reloads while the URL stays).
    pub remote: Option<std::sync::Arc<super::jwks::Jwks>>,
    algorithms: Vec<Algorithm>,
    /// Keys without a kid, by family (the secret, `public_keys`, `jwks_file` keys without a
    /// kid): a token naming no kid the sets know is tried against those of its family.
    hmac: Vec<Local>,
    rsa: Vec<Local>,
    ec: Vec<Local>,
    /// `jwks_file` keys by `kid`.
    by_kid: HashMap<String, Local>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway: u64,
    pub header: http::HeaderName,
}

/// A configured key: its kind, and the algorithm its JWK pinned.
struct Local {
    key: DecodingKey,
    family: Family,
    alg: Option<Algorithm>,
}

impl Verifier {
    /// Builds the keys; the config was checked at load time, so a key that fails here is
    /// skipped (and could not verify anything).
    pub fn new(s: &JwtSettings, remote: Option<std::sync::Arc<super::jwks::Jwks>>) -> Self {
        let local = |key, family| Local {
            key,
            family,
            alg: None,
        };
        let mut hmac: Vec<Local> = s
            .secret
            .iter()
            .map(|x| local(DecodingKey::from_secret(x.as_bytes()), Family::Hmac))
            .collect();
        let mut rsa: Vec<Local> = s
            .public_keys
            .iter()
            .filter(|k| k.rsa)
            .filter_map(|k| DecodingKey::from_rsa_pem(&k.pem).ok())
            .map(|k| local(k, Family::Rsa))
            .collect();
        let mut ec: Vec<Local> = s
            .public_keys
            .iter()
            .filter(|k| !k.rsa)
            .filter_map(|k| DecodingKey::from_ec_pem(&k.pem).ok())
            .map(|k| local(k, Family::Ec))
            .collect();
        let mut by_kid = HashMap::new();
        if let Some(set) = s
            .jwks
            .as_deref()
            .and_then(|t| serde_json::from_str::<JwkSet>(t).ok())
        {
            for k in &set.keys {
                // As for the provider's set: only signing keys, a key's `alg` pinning the
                // algorithm of the tokens it verifies.
                if k.common.public_key_use == Some(jsonwebtoken::jwk::PublicKeyUse::Encryption) {
                    continue;
                }
                let alg = match &k.common.key_algorithm {
                    Some(a) => match a.to_string().parse::<Algorithm>() {
                        Ok(a) => Some(a),
                        Err(_) => continue,
                    },
                    None => None,
                };
                let family = match k.algorithm {
                    AlgorithmParameters::RSA(_) => Family::Rsa,
                    AlgorithmParameters::EllipticCurve(_) => Family::Ec,
                    AlgorithmParameters::OctetKey(_) => Family::Hmac,
                    AlgorithmParameters::OctetKeyPair(_) => Family::Ed,
                };
                let Ok(key) = DecodingKey::from_jwk(k) else {
                    continue;
                };
                let l = Local { key, family, alg };
                match (&k.common.key_id, family) {
                    (Some(kid), _) => {
                        by_kid.insert(kid.clone(), l);
                    }
                    (None, Family::Hmac) => hmac.push(l),
                    (None, Family::Rsa) => rsa.push(l),
                    (None, Family::Ec) => ec.push(l),
                    (None, Family::Ed) => {}
                }
            }
        }
        Self {
            remote,
            algorithms: s.algorithms.clone(),
            hmac,
            rsa,
            ec,
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
        metrics: &tollgate_core::observe::metrics::Metrics,
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
        if token.bytes().filter(|&b| b == b'.').count() != 2 {
            return Err(Miss::Why("the token is malformed"));
        }
        let header = header(token).map_err(Miss::Why)?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Miss::Why("the token's algorithm is not accepted"));
        }
        let alg = header.alg;
        let remote = self.remote.as_ref().map(|r| r.keys());
        let from_remote = match (&remote, &header.kid) {
            (Some(keys), Some(kid)) => keys.get(kid),
            _ => None,
        };
        if let Some(k) = from_remote {
            // A key that names its algorithm verifies only tokens that name it too.
            if k.alg.is_some_and(|a| a != alg) {
                return Err(Miss::Why("the token's algorithm does not match the key"));
            }
            return self.decode(token, &k.key, k.family, alg);
        }
        let local = header.kid.as_ref().and_then(|k| self.by_kid.get(k));
        let candidates: Vec<&Local> = match local {
            Some(l) => vec![l],
            None => match Family::of(alg) {
                Family::Hmac => self.hmac.iter().collect(),
                Family::Rsa => self.rsa.iter().collect(),
                Family::Ec => self.ec.iter().collect(),
                Family::Ed => Vec::new(),
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
        for l in candidates {
            if l.alg.is_some_and(|a| a != alg) {
                why = WRONG_FAMILY;
                continue;
            }
            match self.decode(token, &l.key, l.family, alg) {
                Ok(claims) => return Ok(claims),
                // Only a signature mismatch is worth trying another key for.
                Err(Miss::Why(w)) if w == BAD_SIGNATURE || w == WRONG_FAMILY => why = w,
                Err(other) => return Err(other),
            }
        }
        Err(Miss::Why(why))
    }

    /// The token's claims when `key` (of `family`) signed it with `alg` and its registered
    /// claims hold.
    fn decode(
        &self,
        token: &str,
        key: &DecodingKey,
        family: Family,
        alg: Algorithm,
    ) -> Result<Claims, Miss> {
        if family != Family::of(alg) {
            return Err(Miss::Why(WRONG_FAMILY));
        }
        let Some((message, signature)) = token.rsplit_once('.') else {
            return Err(Miss::Why("the token is malformed"));
        };
        match jsonwebtoken::crypto::verify(signature, message.as_bytes(), key, alg) {
            Ok(true) => {}
            Ok(false) => return Err(Miss::Why(BAD_SIGNATURE)),
            Err(_) => return Err(Miss::Why(BAD_SIGNATURE)),
        }
        let payload = message.split_once('.').map_or("", |(_, p)| p);
        let Some(claims) = object(payload) else {
            return Err(Miss::Why("the token is malformed"));
        };
        self.registered(&claims).map_err(Miss::Why)?;
        Ok(claims)
    }

    /// RFC 7519's registered claims: `exp` required (a number), `nbf` when present, and `iss`
    /// and `aud` required when `[jwt]` names an issuer or audience (4.1.3: a principal must
    /// find itself in `aud`; a token minted for no audience is refused where one is set).
    fn registered(&self, claims: &Claims) -> Result<(), &'static str> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let leeway = self.leeway as f64;
        let date = |name: &str| -> Result<Option<f64>, &'static str> {
            match claims.get(name) {
                None => Ok(None),
                Some(Value::Number(n)) => n.as_f64().map(Some).ok_or("the token is malformed"),
                Some(_) => Err(match name {
                    "exp" => "the token's exp claim is not a number",
                    _ => "the token's nbf claim is not a number",
                }),
            }
        };
        match date("exp")? {
            None => return Err("the token has no exp claim"),
            Some(exp) if exp + leeway < now => return Err("the token has expired"),
            Some(_) => {}
        }
        if date("nbf")?.is_some_and(|nbf| nbf > now + leeway) {
            return Err("the token is not valid yet");
        }
        if let Some(iss) = &self.issuer {
            // One issuer (RFC 7519 4.1.1: a StringOrURI), never a list to choose from.
            match claims.get("iss") {
                None => return Err("the token has no iss claim"),
                Some(Value::String(s)) if s == iss => {}
                Some(_) => return Err("the token's issuer is not accepted"),
            }
        }
        if let Some(aud) = &self.audience {
            // One audience, or a list naming it (4.1.3).
            let names = |v: &Value| match v {
                Value::String(s) => s == aud,
                Value::Array(items) => items.iter().any(|i| i.as_str() == Some(aud)),
                _ => false,
            };
            match claims.get("aud") {
                None => {
                    return Err("the token has no aud claim, and this gateway's audience is set")
                }
                Some(v) if !names(v) => return Err("the token's audience is not accepted"),
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// A token's header: base64url without padding, a JSON object with no member twice, and no
/// `crit` (RFC 7515 4.1.11: extensions a recipient does not understand make the token
/// invalid; Tollgate implements none, so `b64: false` and the like are refused).
fn header(token: &str) -> Result<Header, &'static str> {
    let seg = token.split('.').next().unwrap_or_default();
    let h = object(seg).ok_or("the token is malformed")?;
    if h.contains_key("crit") || h.contains_key("b64") {
        return Err(
            "the token's header names extensions (crit, b64) this gateway does not implement",
        );
    }
    serde_json::from_value(Value::Object(h)).map_err(|_| "the token is malformed")
}

/// A base64url (no padding) JSON object whose members are each named once: a claim or header
/// parameter given twice could be read one way here and another by the upstream's parser
/// (RFC 7519 4: either refuse, or take the last; Tollgate refuses).
fn object(segment: &str) -> Option<Claims> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment)
        .ok()?;
    serde_json::from_slice::<Unique>(&raw).ok().map(|u| u.0)
}

/// A JSON object read with each member name once at the top level.
struct Unique(Claims);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Unique;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Unique, A::Error> {
                let mut out = Map::new();
                while let Some((k, v)) = m.next_entry::<String, Value>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom("a member given twice"));
                    }
                    out.insert(k, v);
                }
                Ok(Unique(out))
            }
        }
        d.deserialize_map(V)
    }
}

const BAD_SIGNATURE: &str = "no configured key verifies the token's signature";
const WRONG_FAMILY: &str = "the token's algorithm does not match the key";
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
