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
use super::htpasswd::{self, Work};
use super::{one_header, Outcome, Passed, Refusal, Request};
use base64::Engine;
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tollgate_config::model::BasicAuth;
use tollgate_core::respond::Problem;

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

/// A user of the file.
struct User {
    name: Arc<str>,
    hash: Arc<str>,
    /// `X-Consumer-Username` and `X-Credential-Identifier` (`None` when the name cannot be a
    /// header value).
    header: Option<HeaderValue>,
}

pub struct BasicRt {
    users: HashMap<String, Arc<User>>,
    /// The costliest check of each kind the file holds, strongest first: one of each is what
    /// every wrong password costs, whoever the user, so answer times tell neither which names
    /// exist nor which kind of hash a name has.
    kinds: Arc<[Work]>,
    /// Checked for unknown users: a hash of the strongest kind and cost that verifies nothing.
    decoy: Arc<str>,
    challenge: HeaderValue,
    verified: TtlCache<Arc<User>>,
}

impl BasicRt {
    pub fn new(cfg: &BasicAuth) -> Self {
        let users = cfg
            .users
            .iter()
            .map(|(u, h)| {
                let user = User {
                    name: Arc::from(u.as_str()),
                    hash: Arc::from(h.as_str()),
                    header: HeaderValue::from_str(u).ok(),
                };
                (u.clone(), Arc::new(user))
            })
            .collect();
        let kinds = Work::kinds(cfg.users.iter().map(|(_, h)| h.as_str()));
        let strongest = kinds.first().copied().unwrap_or(Work::Md5);
        Self {
            users,
            kinds: kinds.into(),
            decoy: Arc::from(strongest.decoy()),
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
        if let Some(user) = self.verified.get(key, now) {
            return Ok((passed(&user), Outcome::Cached));
        }
        // Every wrong password costs one check of each kind the file holds, at its costliest:
        // an unknown user's own is the strongest kind's decoy, and each is padded with decoys
        // of the rest. So a 401's time tells neither which names exist nor how each is hashed.
        let (known, hash) = match self.users.get(&user) {
            Some(u) => (Some(u), u.hash.clone()),
            None => (None, self.decoy.clone()),
        };
        let kinds = self.kinds.clone();
        let check = move || {
            let ok = htpasswd::verify(&hash, &password);
            if !ok {
                for decoy in Work::of(&hash).padding(&kinds) {
                    let _ = htpasswd::verify(&decoy, &password);
                }
            }
            ok
        };
        let ok = if dry {
            tokio::task::spawn_blocking(check).await.unwrap_or(false)
        } else if htpasswd::is_slow(&self.decoy) {
            // Any check of a file holding bcrypt may cost a bcrypt: each takes its turn off
            // the event loop (one path for every user, so none answers sooner for skipping
            // the queue). A flood of wrong passwords waits its turn, not forever: 503 past
            // the wait.
            let turn = tokio::time::timeout(SLOW_WAIT, slow_checks().acquire()).await;
            let Ok(Ok(_turn)) = turn else {
                return Err(Refusal::problem(
                    Problem::AuthUnavailable,
                    "Too many password checks are waiting; try again shortly.",
                ));
            };
            tokio::task::spawn_blocking(check).await.unwrap_or(false)
        } else {
            check()
        };
        let Some(known) = known.filter(|_| ok) else {
            return Err(self.refuse("The user name or password is wrong."));
        };
        if !dry {
            self.verified
                .insert(key, now + CACHE_FOR, known.clone(), now);
        }
        Ok((passed(known), Outcome::Allowed))
    }
}

/// The user as the consumer, named upstream as Kong's basic-auth names it.
fn passed(user: &User) -> Passed {
    let headers = match &user.header {
        Some(v) => vec![
            (super::consumer_username(), v.clone()),
            (super::credential_identifier(), v.clone()),
        ],
        None => Vec::new(),
    };
    Passed {
        consumer: Some(user.name.clone()),
        headers,
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
