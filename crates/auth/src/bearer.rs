//! `auth = { jwt = "required" | "optional", claims, forward_claims }`: a bearer token verified
//! with `[jwt]`'s keys (and `jwks_url`'s), its claims checked, chosen claims sent upstream.
//!
//! No token: 401 when required (`WWW-Authenticate: Bearer`), anonymous when optional. A token
//! that does not verify: 401 `INVALID_TOKEN` either way. Verified but lacking a claim: 403
//! `INSUFFICIENT_SCOPE`. Verified tokens are kept (bounded, keyed by a keyed hash of the
//! token, never past their `exp`), so a hot client does not pay a signature check per request.

use super::cache::TtlCache;
use super::{one_header, Outcome, Passed, Refusal, Request};
use crate::jwt::{Claims, Verifier};
use http::{HeaderName, HeaderValue};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate_config::model::{ClaimRule, JwtAuth};
use tollgate_core::respond::Problem;

/// Verified tokens kept per auth.
const CACHED_TOKENS: usize = 10_000;
/// The longest a verified token is kept (its `exp` cuts it shorter).
const CACHE_FOR: Duration = Duration::from_secs(300);

pub struct BearerRt {
    required: bool,
    /// `forward_token = false`: the token's header is kept from the upstream.
    hidden: Option<HeaderName>,
    claims: Vec<ClaimRule>,
    forward: Vec<(String, HeaderName)>,
    /// Verified tokens' claims, with the remote key set they were verified under.
    verified: TtlCache<(Arc<Claims>, u64)>,
    /// `WWW-Authenticate` for a 403 (the scopes wanted).
    scope_challenge: HeaderValue,
}

impl BearerRt {
    /// `header`: `[jwt] header`, the one the token comes in.
    pub fn new(cfg: &JwtAuth, header: &str) -> Result<Self, String> {
        let forward = cfg
            .forward_claims
            .iter()
            .map(|(c, h)| {
                HeaderName::from_bytes(h.as_bytes())
                    .map(|h| (c.clone(), h))
                    .map_err(|e| format!("forward_claims: {h}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let scopes: Vec<&str> = cfg
            .claims
            .iter()
            .filter_map(|r| match r {
                ClaimRule::Scopes { all, .. } => Some(all.iter().map(String::as_str)),
                _ => None,
            })
            .flatten()
            .collect();
        let mut challenge = String::from("Bearer error=\"insufficient_scope\"");
        if !scopes.is_empty() {
            challenge.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
        }
        let hidden = match cfg.forward_token {
            true => None,
            false => Some(
                HeaderName::from_bytes(header.as_bytes())
                    .map_err(|e| format!("[jwt] header: {header}: {e}"))?,
            ),
        };
        Ok(Self {
            required: cfg.required,
            hidden,
            claims: cfg.claims.clone(),
            forward,
            verified: TtlCache::new(CACHED_TOKENS),
            scope_challenge: HeaderValue::from_str(&challenge).unwrap_or_else(|_| {
                HeaderValue::from_static("Bearer error=\"insufficient_scope\"")
            }),
        })
    }

    /// The headers claims are sent in, and the token's own with `forward_token = false`.
    pub fn owned(&self) -> Vec<HeaderName> {
        self.forward
            .iter()
            .map(|(_, h)| h.clone())
            .chain(self.hidden.clone())
            .collect()
    }

    pub async fn check(
        &self,
        req: &Request<'_>,
        jwt: Option<&Verifier>,
    ) -> Result<(Passed, Outcome), Refusal> {
        let Some(v) = jwt else {
            // (The config refuses jwt auth without [jwt]: never reached.)
            return Err(Refusal::problem(Problem::Internal, "no [jwt] keys"));
        };
        let value = one_header(req.head, v.header.as_str())?;
        let token = match value {
            None if !self.required => return Ok((Passed::default(), Outcome::Anonymous)),
            None => {
                return Err(Refusal::challenge(
                    Problem::Unauthenticated,
                    "This route needs a bearer token (Authorization: Bearer <token>).",
                    HeaderValue::from_static("Bearer"),
                ))
            }
            Some(h) => Verifier::token(h.as_bytes()).ok_or_else(|| {
                Refusal::challenge(
                    Problem::InvalidToken,
                    "The credentials are not a bearer token.",
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                )
            })?,
        };
        let now = Instant::now();
        let key = self.verified.key([token.as_bytes()]);
        let generation = v.generation();
        let kept = self
            .verified
            .get(key, now)
            .filter(|(_, g)| *g == generation);
        let (claims, outcome) = match kept {
            Some((c, _)) => (c, Outcome::Cached),
            None => {
                let claims = v.check(token, req.metrics).await.map_err(|why| {
                    Refusal::challenge(
                        Problem::InvalidToken,
                        why,
                        HeaderValue::from_static("Bearer error=\"invalid_token\""),
                    )
                })?;
                let claims = Arc::new(claims);
                if let Some(until) = keep_until(&claims, now) {
                    self.verified
                        .insert(key, until, (claims.clone(), v.generation()), now);
                }
                (claims, Outcome::Allowed)
            }
        };
        if let Some(missing) = self.claims.iter().find(|r| !satisfied(r, &claims)) {
            let name = match missing {
                ClaimRule::Scopes { claim, .. } | ClaimRule::OneOf { claim, .. } => claim,
            };
            return Err(Refusal::challenge(
                Problem::InsufficientScope,
                format!("The token's {name} claim does not allow this route."),
                self.scope_challenge.clone(),
            ));
        }
        let headers = self
            .forward
            .iter()
            .filter_map(|(claim, h)| Some((h.clone(), claim_header(claims.get(claim)?)?)))
            .collect();
        Ok((
            Passed {
                claims: Some(claims),
                headers,
                ..Passed::default()
            },
            outcome,
        ))
    }
}

/// How long a verified token may be reused: until its `exp` (never past it), at most
/// [`CACHE_FOR`]. `None`: not at all (no usable `exp`, or one already past).
fn keep_until(claims: &Claims, now: Instant) -> Option<Instant> {
    let exp = claims.get("exp")?.as_f64()?;
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let left = exp - unix;
    if !left.is_finite() || left <= 0.0 {
        return None;
    }
    Some(now + Duration::from_secs_f64(left.min(CACHE_FOR.as_secs_f64())))
}

/// Whether the claims meet the rule.
fn satisfied(rule: &ClaimRule, claims: &Claims) -> bool {
    match rule {
        ClaimRule::Scopes { all, .. } => {
            // The token's scopes: OAuth's `scope` (RFC 8693 4.2: a space-separated string) and
            // the `scp` many identity providers write (an array, or a string), together,
            // whichever of the two the rule was written with.
            let mut have: Vec<&str> = Vec::new();
            for name in ["scope", "scp"] {
                match claims.get(name) {
                    Some(Value::String(s)) => have.extend(s.split_ascii_whitespace()),
                    Some(Value::Array(a)) => have.extend(a.iter().filter_map(Value::as_str)),
                    _ => {}
                }
            }
            all.iter().all(|want| have.contains(&want.as_str()))
        }
        ClaimRule::OneOf { claim, any } => {
            let matches = |v: &Value| match v {
                Value::String(s) => any.iter().any(|a| a == s),
                Value::Number(_) | Value::Bool(_) => {
                    let text = v.to_string();
                    any.contains(&text)
                }
                _ => false,
            };
            match claims.get(claim) {
                Some(Value::Array(items)) => items.iter().any(matches),
                Some(v) => matches(v),
                None => false,
            }
        }
    }
}

/// A claim as a header value: strings as they are, arrays of strings joined with commas,
/// anything else as its JSON; `None` when it cannot be a header (a control character).
fn claim_header(v: &Value) -> Option<HeaderValue> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => return None,
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    };
    HeaderValue::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(v: Value) -> Claims {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn scopes_and_claims() {
        let c = claims(
            json!({"scope": "orders:read orders:write", "groups": ["a", "b"], "tier": 2, "admin": false}),
        );
        let scopes = |all: &[&str]| ClaimRule::Scopes {
            claim: "scope".into(),
            all: all.iter().map(|s| s.to_string()).collect(),
        };
        let one_of = |claim: &str, any: &[&str]| ClaimRule::OneOf {
            claim: claim.into(),
            any: any.iter().map(|s| s.to_string()).collect(),
        };
        assert!(satisfied(&scopes(&["orders:read"]), &c));
        assert!(satisfied(&scopes(&["orders:read", "orders:write"]), &c));
        assert!(!satisfied(&scopes(&["orders:admin"]), &c));
        // A scope is a whole word: a prefix of one is not it.
        assert!(!satisfied(&scopes(&["orders"]), &c));
        assert!(satisfied(&one_of("groups", &["b", "z"]), &c));
        assert!(!satisfied(&one_of("groups", &["z"]), &c));
        assert!(satisfied(&one_of("tier", &["2"]), &c));
        assert!(!satisfied(&one_of("tier", &["3"]), &c));
        assert!(satisfied(&one_of("admin", &["false"]), &c));
        assert!(!satisfied(&one_of("missing", &["x"]), &c));
        // An object is never equal to a string spelling it.
        let o = claims(json!({"org": {"id": "x"}}));
        assert!(!satisfied(&one_of("org", &["{\"id\":\"x\"}"]), &o));
    }

    #[test]
    fn claim_headers_are_clean() {
        assert_eq!(claim_header(&json!("u-1")).expect("h"), "u-1");
        assert_eq!(claim_header(&json!(["a", "b"])).expect("h"), "a,b");
        assert_eq!(claim_header(&json!(42)).expect("h"), "42");
        assert!(claim_header(&json!("evil\r\nX-Admin: 1")).is_none());
        assert!(claim_header(&Value::Null).is_none());
    }
}
