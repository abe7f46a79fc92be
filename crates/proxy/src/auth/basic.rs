//! `auth = { basic = { htpasswd = "FILE", realm } }`: users and password hashes as `htpasswd`
//! writes them (the file is read at load; a change to it reloads the config).
//!
//! Missing, malformed or wrong credentials: 401 with `WWW-Authenticate: Basic realm="..."`. The
//! `Authorization` header is removed before the upstream: it never sees a password. bcrypt is
//! slow on purpose: it runs off the event loop, at most a few at once, and a credential that
//! verified is kept (bounded, keyed by a keyed hash of user and password, for five minutes), so
//! a client pays it once per credential, not per request. Failures reach `count = "failures"`
//! limits (the stage runs them before answering).

use super::cache::TtlCache;
use super::{htpasswd, one_header, Outcome, Passed, Refusal, Request};
use crate::respond::Problem;
use base64::Engine;
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tollgate_config::BasicAuth;

const CACHED_CREDENTIALS: usize = 10_000;
/// The longest a bcrypt check waits for its turn.
const SLOW_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
const CACHE_FOR: Duration = Duration::from_secs(300);

/// bcrypt checks running at once, process-wide: the CPUs, so a flood of wrong passwords waits
/// its turn instead of taking every thread.
fn slow_checks() -> &'static Semaphore {
    static S: OnceLock<Semaphore> = OnceLock::new();
    S.get_or_init(|| {
        Semaphore::new(
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
        )
    })
}

pub struct BasicRt {
    users: HashMap<String, (Arc<str>, Arc<str>)>,
    /// Checked for unknown users: the file's first hash (of the kind the file uses).
    decoy: Arc<str>,
    challenge: HeaderValue,
    verified: TtlCache<Arc<str>>,
}

impl BasicRt {
    pub fn new(cfg: &BasicAuth) -> Self {
        let users = cfg
            .users
            .iter()
            .map(|(u, h)| (u.clone(), (Arc::from(u.as_str()), Arc::from(h.as_str()))))
            .collect();
        let decoy = cfg
            .users
            .first()
            .map_or_else(|| Arc::from(""), |(_, h)| Arc::from(h.as_str()));
        Self {
            users,
            decoy,
            // The realm was checked at load (no quote, backslash or control character).
            challenge: HeaderValue::from_str(&format!(
                "Basic realm=\"{}\", charset=\"UTF-8\"",
                cfg.realm
            ))
            .unwrap_or_else(|_| HeaderValue::from_static("Basic")),
            verified: TtlCache::new(CACHED_CREDENTIALS),
        }
    }

    fn refuse(&self, detail: &'static str) -> Refusal {
        Refusal::challenge(Problem::Unauthenticated, detail, self.challenge.clone())
    }

    pub async fn check(&self, req: &Request<'_>) -> Result<(Passed, Outcome), Refusal> {
        self.verify(req, false).await
    }

    /// [`BasicRt::check`] for `tollgate explain`: the same answer, leaving nothing behind (no
    /// credential cached, no turn taken from the live requests' password checks).
    pub async fn check_dry(&self, req: &Request<'_>) -> Result<(Passed, Outcome), Refusal> {
        self.verify(req, true).await
    }

    async fn verify(&self, req: &Request<'_>, dry: bool) -> Result<(Passed, Outcome), Refusal> {
        let Some(value) = one_header(req.head, "authorization")? else {
            return Err(self.refuse("This route needs a user name and password."));
        };
        let Some((user, password)) = credentials(value.as_bytes()) else {
            return Err(
                self.refuse("The credentials are not basic credentials (user:password in base64).")
            );
        };
        let now = Instant::now();
        let key = self.verified.key([user.as_bytes(), password.as_slice()]);
        if let Some(consumer) = self.verified.get(key, now) {
            return Ok((passed(consumer), Outcome::Cached));
        }
        // An unknown user costs what a known one does (a check against a hash of the file's
        // own kind), so answer times do not tell which names exist.
        let (name, hash) = match self.users.get(&user) {
            Some((n, h)) => (Some(n), h.clone()),
            None => (None, self.decoy.clone()),
        };
        let ok = if dry {
            tokio::task::spawn_blocking(move || htpasswd::verify(&hash, &password))
                .await
                .unwrap_or(false)
        } else if htpasswd::is_slow(&hash) {
            // A flood of wrong passwords waits its turn, not forever: 503 past the wait.
            let turn = tokio::time::timeout(SLOW_WAIT, slow_checks().acquire()).await;
            let Ok(Ok(_turn)) = turn else {
                return Err(Refusal::problem(
                    Problem::AuthUnavailable,
                    "Too many password checks are waiting; try again shortly.",
                ));
            };
            tokio::task::spawn_blocking(move || htpasswd::verify(&hash, &password))
                .await
                .unwrap_or(false)
        } else {
            htpasswd::verify(&hash, &password)
        };
        let Some(name) = name.filter(|_| ok) else {
            return Err(self.refuse("The user name or password is wrong."));
        };
        if !dry {
            self.verified
                .insert(key, now + CACHE_FOR, name.clone(), now);
        }
        Ok((passed(name.clone()), Outcome::Allowed))
    }
}

fn passed(consumer: Arc<str>) -> Passed {
    Passed {
        consumer: Some(consumer),
        ..Passed::default()
    }
}

/// `Basic base64(user:password)` (scheme case-insensitive): the user (UTF-8) and password.
fn credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let v = std::str::from_utf8(value).ok()?.trim();
    let (scheme, b64) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_parsed_strictly() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(
            credentials(format!("Basic {}", b64("ann:pa:ss")).as_bytes()),
            Some(("ann".into(), b"pa:ss".to_vec()))
        );
        assert_eq!(
            credentials(format!("basic {}", b64("ann:")).as_bytes()),
            Some(("ann".into(), Vec::new()))
        );
        assert_eq!(
            credentials(format!("Bearer {}", b64("ann:x")).as_bytes()),
            None
        );
        assert_eq!(
            credentials(format!("Basic {}", b64("no-colon")).as_bytes()),
            None
        );
        assert_eq!(credentials(b"Basic !!!"), None);
        assert_eq!(credentials(b"Basic"), None);
    }
}
