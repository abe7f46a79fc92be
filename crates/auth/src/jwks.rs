//! `[jwt] jwks_url`: the identity provider's keys, fetched in the background (housekeeping's
//! `jwks` job) and when a token names a `kid` the set lacks, at most once per `jwks_refetch`
//! whatever clients send (random kids never make Tollgate hammer the provider).
//!
//! The set is kept per its `Cache-Control: max-age` (between 30 s and a day; 5 minutes without
//! one). A failed fetch keeps the last good set (retried after 5 s, doubling to a minute); one
//! log line when the provider starts failing and one when it answers again, one per change of
//! the set. Only signing keys are used: symmetric (`oct`) keys and `use: enc` keys are dropped
//! (a key fetched over the network must not let anyone who can read it sign), and a key's
//! `alg`, when it names one, pins the algorithm its tokens may use. `/readyz` waits for the
//! first good set.

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_core::net::client::{self, HttpClient};
use tollgate_core::observe::metrics::Metrics;

/// The largest JWKS document read.
const MAX_DOCUMENT: usize = 1 << 20;
/// A fetch's deadline.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);
const MIN_MAX_AGE: Duration = Duration::from_secs(30);
const MAX_MAX_AGE: Duration = Duration::from_secs(86_400);
const FIRST_RETRY: Duration = Duration::from_secs(5);
const LAST_RETRY: Duration = Duration::from_secs(60);

/// A signing key of the set.
pub struct Key {
    pub key: DecodingKey,
    /// The JWK's `alg`: tokens verified with this key must name it.
    pub alg: Option<Algorithm>,
    /// The key's kind: a token of another family's algorithm never meets it.
    pub family: super::family::Family,
}

/// Why a fetch was made (the metric's `why`).
#[derive(Debug, Clone, Copy)]
pub enum Why {
    Schedule,
    UnknownKid,
}

struct Schedule {
    /// When the next scheduled fetch is due.
    next: Instant,
    /// When the set was last asked for (for the unknown-kid floor).
    last: Option<Instant>,
    /// The wait after the next failure.
    backoff: Duration,
}

pub struct Jwks {
    pub url: String,
    pub ca: Option<Vec<u8>>,
    /// The least time between two fetches for unknown kids.
    pub refetch: Duration,
    client: HttpClient,
    keys: ArcSwap<HashMap<String, Key>>,
    ready: AtomicBool,
    failing: AtomicBool,
    /// Bumped when the set's keys change: tokens verified before are verified again.
    generation: AtomicU64,
    /// The usable keys as fetched (their JWKs' text, sorted): what "changed" compares.
    material: Mutex<Vec<String>>,
    schedule: Mutex<Schedule>,
    /// One fetch at a time: requests that meet an unknown kid meanwhile wait for its result.
    flight: tokio::sync::Mutex<()>,
}

impl Jwks {
    pub fn new(url: &str, ca: Option<&[u8]>, refetch: Duration) -> Result<Self, String> {
        Ok(Self {
            url: url.to_string(),
            ca: ca.map(<[u8]>::to_vec),
            refetch,
            client: client::build(ca, true)?,
            keys: ArcSwap::from_pointee(HashMap::new()),
            ready: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            material: Mutex::new(Vec::new()),
            schedule: Mutex::new(Schedule {
                next: Instant::now(),
                last: None,
                backoff: FIRST_RETRY,
            }),
            flight: tokio::sync::Mutex::new(()),
        })
    }

    /// A good set has been fetched (`/readyz`).
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Which set is in use (changes when its keys do).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The set's keys by `kid`.
    pub fn keys(&self) -> arc_swap::Guard<Arc<HashMap<String, Key>>> {
        self.keys.load()
    }

    /// A scheduled fetch is due.
    pub fn due(&self, now: Instant) -> bool {
        self.schedule.lock().next <= now
    }

    /// A token named a kid the set lacks: fetches again unless the set was asked for within
    /// `refetch` (then `false` at once). `true` when a fetch was made (by this call or one in
    /// flight) since the caller looked.
    pub async fn unknown_kid(&self, metrics: &Metrics) -> bool {
        let asked = Instant::now();
        let floor_passed = |s: &Schedule| s.last.is_none_or(|l| l + self.refetch <= Instant::now());
        if !floor_passed(&self.schedule.lock()) {
            return false;
        }
        let _one = self.flight.lock().await;
        {
            let s = self.schedule.lock();
            if s.last.is_some_and(|l| l >= asked) {
                // Another request's fetch ended while this one waited: its set stands.
                return true;
            }
            if !floor_passed(&s) {
                return false;
            }
        }
        self.fetch(Why::UnknownKid, metrics).await;
        true
    }

    /// The scheduled fetch (housekeeping), unless another is in flight.
    pub async fn scheduled(&self, metrics: &Metrics) {
        let Ok(_one) = self.flight.try_lock() else {
            return;
        };
        if self.due(Instant::now()) {
            self.fetch(Why::Schedule, metrics).await;
        }
    }

    async fn fetch(&self, why: Why, metrics: &Metrics) {
        let why_label = match why {
            Why::Schedule => "schedule",
            Why::UnknownKid => "unknown_kid",
        };
        self.schedule.lock().last = Some(Instant::now());
        let result = self.get().await;
        let now = Instant::now();
        match result {
            Ok((set, max_age)) => {
                let changed = self.install(set, metrics);
                let mut s = self.schedule.lock();
                s.next = now + max_age;
                s.backoff = FIRST_RETRY;
                drop(s);
                if self.failing.swap(false, Ordering::AcqRel) {
                    tracing::warn!(event = "jwks_recovered", url = %self.url, "the JWKS provider answers again");
                }
                let result = if changed { "ok" } else { "unchanged" };
                metrics
                    .jwks_fetches
                    .with_label_values(&[result, why_label])
                    .inc();
            }
            Err(e) => {
                let mut s = self.schedule.lock();
                s.next = now + s.backoff;
                s.backoff = (s.backoff * 2).min(LAST_RETRY);
                drop(s);
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        event = "jwks_unavailable",
                        url = %self.url,
                        error = %e,
                        keys_kept = self.keys.load().len(),
                        "the JWKS could not be fetched: tokens are verified with the last good set (retrying)"
                    );
                }
                metrics
                    .jwks_fetches
                    .with_label_values(&["error", why_label])
                    .inc();
            }
        }
    }

    /// Fetches and parses the set; its max-age.
    async fn get(&self) -> Result<(Indexed, Duration), String> {
        let req = http::Request::get(&self.url)
            .header(http::header::ACCEPT, "application/json")
            .body(http_body_util::Empty::new())
            .map_err(|e| e.to_string())?;
        let (parts, body) = client::exchange(&self.client, req, FETCH_TIMEOUT, MAX_DOCUMENT)
            .await
            .map_err(|e| e.to_string())?;
        if parts.status != http::StatusCode::OK {
            return Err(format!("answered {}", parts.status.as_u16()));
        }
        let set: JwkSet =
            serde_json::from_slice(&body).map_err(|e| format!("not a JWKS document: {e}"))?;
        let keys = index(&set);
        if keys.0.is_empty() {
            return Err("the document holds no usable signing key (RSA or EC, with a kid)".into());
        }
        Ok((keys, max_age(&parts.headers)))
    }

    /// Swaps the set in; whether its kids changed (logged once per change).
    fn install(&self, (keys, material): Indexed, metrics: &Metrics) -> bool {
        let old = self.keys.load();
        let mut added: Vec<&str> = keys
            .keys()
            .filter(|k| !old.contains_key(*k))
            .map(String::as_str)
            .collect();
        let mut removed: Vec<&str> = old
            .keys()
            .filter(|k| !keys.contains_key(*k))
            .map(String::as_str)
            .collect();
        added.sort_unstable();
        removed.sort_unstable();
        let changed = !added.is_empty() || !removed.is_empty();
        if changed {
            tracing::info!(
                event = "jwks_changed",
                url = %self.url,
                added = ?added,
                removed = ?removed,
                keys = keys.len(),
                "the JWKS set changed"
            );
        }
        metrics.jwks_keys.set(keys.len() as i64);
        drop(old);
        // A key replaced in place (same kid) is a change too: tokens verified with the old set
        // are verified again. The same set fetched again changes nothing.
        let mut known = self.material.lock();
        if *known != material || !self.ready() {
            self.keys.store(Arc::new(keys));
            self.generation.fetch_add(1, Ordering::AcqRel);
            *known = material;
        }
        drop(known);
        self.ready.store(true, Ordering::Release);
        changed
    }
}

/// The signing keys of a set by kid, and their JWKs' text (sorted).
type Indexed = (HashMap<String, Key>, Vec<String>);

/// The signing keys of a set by kid: RSA and EC keys (`[jwt] algorithms` names no EdDSA), never
/// a symmetric or an encryption key.
fn index(set: &JwkSet) -> Indexed {
    let mut out = HashMap::new();
    let mut material = Vec::new();
    for j in &set.keys {
        if !matches!(
            j.algorithm,
            AlgorithmParameters::RSA(_) | AlgorithmParameters::EllipticCurve(_)
        ) || j.common.public_key_use == Some(PublicKeyUse::Encryption)
        {
            continue;
        }
        let alg = match &j.common.key_algorithm {
            // An algorithm that is not a signature's (RSA-OAEP, ...): not a signing key.
            Some(a) => match Algorithm::from_str(&a.to_string()) {
                Ok(a) => Some(a),
                Err(_) => continue,
            },
            None => None,
        };
        let (Some(kid), Ok(key)) = (&j.common.key_id, DecodingKey::from_jwk(j)) else {
            continue;
        };
        let family = match j.algorithm {
            AlgorithmParameters::RSA(_) => super::family::Family::Rsa,
            _ => super::family::Family::Ec,
        };
        material.push(serde_json::to_string(j).unwrap_or_default());
        out.insert(kid.clone(), Key { key, alg, family });
    }
    material.sort();
    (out, material)
}

/// `Cache-Control: max-age`, within bounds; the default without one.
fn max_age(headers: &http::HeaderMap) -> Duration {
    let secs = headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|d| {
            d.trim()
                .strip_prefix("max-age=")?
                .trim()
                .parse::<u64>()
                .ok()
        });
    match secs {
        Some(s) => Duration::from_secs(s).clamp(MIN_MAX_AGE, MAX_MAX_AGE),
        None => DEFAULT_MAX_AGE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_is_bounded() {
        let mut h = http::HeaderMap::new();
        assert_eq!(max_age(&h), DEFAULT_MAX_AGE);
        h.insert(
            http::header::CACHE_CONTROL,
            "public, max-age=3".parse().expect("v"),
        );
        assert_eq!(max_age(&h), MIN_MAX_AGE);
        h.insert(
            http::header::CACHE_CONTROL,
            "max-age=600".parse().expect("v"),
        );
        assert_eq!(max_age(&h), Duration::from_secs(600));
        h.insert(
            http::header::CACHE_CONTROL,
            "max-age=99999999".parse().expect("v"),
        );
        assert_eq!(max_age(&h), MAX_MAX_AGE);
    }

    #[test]
    fn only_signing_keys_are_used() {
        let doc = r#"{"keys":[
            {"kty":"oct","kid":"h","k":"c2VjcmV0"},
            {"kty":"RSA","kid":"enc","use":"enc","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"},
            {"kty":"RSA","kid":"sig","alg":"RS256","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}
        ]}"#;
        let set: JwkSet = serde_json::from_str(doc).expect("jwks");
        let (keys, material) = index(&set);
        assert_eq!(keys.len(), 1);
        assert_eq!(material.len(), 1);
        assert_eq!(keys["sig"].alg, Some(Algorithm::RS256));
    }
}
