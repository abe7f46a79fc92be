//! How a request's target is chosen among an upstream's healthy ones (docs/upstreams.md,
//! "Balancing"), the signed affinity cookie that pins a client to one, and the retry budget.
//!
//! - round robin (the default) stays in [`crate::pool::Pool::select_peer`]: no counter, no
//!   reference taken, no cost for a route that asks for nothing else.
//! - `least_request`: the healthy target with the fewest requests in flight (ties taken in
//!   turn); `ewma`: the lowest peak-EWMA latency times (requests in flight + 1), so a slow or
//!   failing target is avoided until its latency decays.
//! - `hash`: Ketama consistent hashing (pingora-ketama, as pingora-load-balancing) of the
//!   request's `hash_key` over every target; an unhealthy target's keys go to the next point of
//!   the ring, so one target leaving moves only its share. A request without the key is balanced
//!   round robin.
//! - `affinity`: the cookie names a target by its stable id and carries an HMAC-SHA256 of the
//!   upstream's name and that id under the affinity secret, so a client can only present a
//!   target the gateway gave it. A cookie that is forged, oversized, given twice, or names a
//!   target that is gone or unhealthy is ignored, and the answer re-pins the client.
//! - the retry budget: each request to the upstream deposits `budget` tokens, each retry takes
//!   one, so over any stretch of traffic retries <= budget x requests (upstream attempts <=
//!   requests x (1 + budget)): retries cannot multiply an outage.

use crate::pool::{Choice, Pool, Target};
use ring::hmac;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tollgate_config::{Affinity, HashKey};

/// The chosen target of one attempt; its in-flight count is given back when dropped.
pub struct Pick {
    pub target: Arc<Target>,
    pub started: Instant,
    counted: bool,
}

impl Pick {
    pub(crate) fn new(target: Arc<Target>, counted: bool) -> Self {
        if counted {
            target.active.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            target,
            started: Instant::now(),
            counted,
        }
    }

    /// Feeds this attempt's latency (or a failure's penalty) to the target's EWMA.
    pub fn observe(&self, sample_us: u64) {
        let now = now_us();
        let old = decayed(
            self.target.ewma_us.load(Ordering::Relaxed),
            self.target.ewma_at.load(Ordering::Relaxed),
            now,
        );
        self.target.ewma_us.store(old, Ordering::Relaxed);
        observe(&self.target.ewma_us, sample_us);
        self.target.ewma_at.store(now, Ordering::Relaxed);
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        if self.counted {
            self.target.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Peak EWMA: a sample above the average replaces it (a target that turned slow is avoided at
/// once); below, the average moves 30 % of the way down.
fn observe(ewma: &AtomicU64, sample: u64) {
    let _ = ewma.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some(if sample >= old {
            sample
        } else {
            old - ((old - sample) / 10).saturating_mul(3)
        })
    });
}

/// Microseconds since this process's first call: the EWMA's clock.
pub(crate) fn now_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// An EWMA of `value` fed at `at`, seen at `now`: halved for every second without a sample.
fn decayed(value: u64, at: u64, now: u64) -> u64 {
    let halvings = now.saturating_sub(at) / 1_000_000;
    if halvings >= 64 {
        0
    } else {
        value >> halvings
    }
}

/// The score `ewma` balances on: lower is better.
pub(crate) fn ewma_score(t: &Target) -> u128 {
    let ewma = decayed(
        t.ewma_us.load(Ordering::Relaxed),
        t.ewma_at.load(Ordering::Relaxed),
        now_us(),
    );
    (ewma as u128 + 1) * (t.active.load(Ordering::Relaxed) as u128 + 1)
}

/// A target's id: the same for its name and address on every instance and after reloads.
pub(crate) fn target_id(name: &str, addr: std::net::SocketAddr) -> u64 {
    use std::hash::Hasher;
    let mut h =
        siphasher::sip::SipHasher13::new_with_keys(0x6166_6669_6e69_7479, 0x7461_7267_6574_6964);
    h.write(name.as_bytes());
    h.write_u8(0xff);
    h.write(addr.to_string().as_bytes());
    h.finish()
}

/// What `hash_key` names in this request, as bytes to hash (`None`: the request lacks it).
pub(crate) fn hash_input(
    key: &HashKey,
    req: &pingora::http::RequestHeader,
    client: IpAddr,
    path: Option<&str>,
) -> Option<Vec<u8>> {
    let query = req.uri.query();
    match key {
        HashKey::ClientIp => Some(match client {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        }),
        HashKey::Header(name) => req
            .headers
            .get(name.as_str())
            .map(|v| v.as_bytes().to_vec()),
        HashKey::Cookie(name) => single_cookie(req, name).map(|v| v.as_bytes().to_vec()),
        HashKey::Query(name) => form_urlencoded::parse(query?.as_bytes())
            .find_map(|(k, v)| (k == name.as_str()).then(|| v.into_owned().into_bytes())),
        HashKey::Path => Some(path.unwrap_or(req.uri.path()).as_bytes().to_vec()),
        HashKey::Uri => {
            let mut v = path.unwrap_or(req.uri.path()).as_bytes().to_vec();
            if let Some(q) = query {
                v.push(b'?');
                v.extend_from_slice(q.as_bytes());
            }
            Some(v)
        }
    }
}

/// The value of cookie `name` when the request carries it exactly once (in any of its Cookie
/// fields); given twice it names nothing.
pub(crate) fn single_cookie<'r>(
    req: &'r pingora::http::RequestHeader,
    name: &str,
) -> Option<&'r str> {
    let mut found = None;
    for field in req.headers.get_all(http::header::COOKIE) {
        let Ok(field) = field.to_str() else { continue };
        for pair in field.split(';') {
            let Some((k, v)) = pair.trim().split_once('=') else {
                continue;
            };
            if k.trim() == name {
                if found.is_some() {
                    return None;
                }
                found = Some(v.trim().trim_matches('"'));
            }
        }
    }
    found
}

/// Signs and checks an upstream's affinity cookies.
pub struct Affinities {
    pub cfg: Affinity,
    key: hmac::Key,
    upstream: String,
}

/// Hex digits of the id, a dot, hex digits of the 16-byte tag.
const COOKIE_LEN: usize = 16 + 1 + 32;

impl Affinities {
    pub fn new(upstream: &str, cfg: &Affinity) -> Self {
        let key = match &cfg.secret {
            Some(s) => hmac::Key::new(hmac::HMAC_SHA256, s.as_bytes()),
            None => process_key().clone(),
        };
        Self {
            cfg: cfg.clone(),
            key,
            upstream: upstream.to_string(),
        }
    }

    fn tag(&self, id: u64) -> [u8; 16] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(self.upstream.as_bytes());
        ctx.update(&[0]);
        ctx.update(&id.to_be_bytes());
        let full = ctx.sign();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full.as_ref()[..16]);
        out
    }

    /// The cookie's value for target `id`.
    pub fn value(&self, id: u64) -> String {
        let mut s = format!("{id:016x}.");
        for b in self.tag(id) {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// The target id this request's cookie names, when it carries exactly one, well formed and
    /// signed by this upstream's key.
    pub fn pinned(&self, req: &pingora::http::RequestHeader) -> Option<u64> {
        let v = single_cookie(req, &self.cfg.cookie)?;
        if v.len() != COOKIE_LEN {
            return None;
        }
        let (id, tag) = v.split_once('.')?;
        let id = u64::from_str_radix(id, 16)
            .ok()
            .filter(|_| id.len() == 16)?;
        let mut got = [0u8; 16];
        for (i, b) in got.iter_mut().enumerate() {
            *b = u8::from_str_radix(tag.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        use subtle::ConstantTimeEq;
        bool::from(self.tag(id).ct_eq(&got)).then_some(id)
    }

    /// The Set-Cookie field that pins the client to target `id`.
    pub fn set_cookie(&self, id: u64, secure_request: bool) -> String {
        let mut c = format!(
            "{}={}; Path={}; HttpOnly; SameSite=Lax",
            self.cfg.cookie,
            self.value(id),
            self.cfg.path
        );
        if let Some(age) = self.cfg.max_age {
            c.push_str(&format!("; Max-Age={}", age.as_secs()));
        }
        if self.cfg.secure.unwrap_or(secure_request) {
            c.push_str("; Secure");
        }
        c
    }
}

/// The affinity key of a process whose config names no secret.
fn process_key() -> &'static hmac::Key {
    static KEY: OnceLock<hmac::Key> = OnceLock::new();
    KEY.get_or_init(|| {
        // 256 bits from the operating system's generator.
        hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .unwrap_or_else(|_| panic!("the operating system's random generator failed"))
    })
}

/// Retries per request over an upstream's traffic, in thousandths of a token.
pub struct RetryBudget {
    milli: AtomicU64,
    per_request: u64,
    cap: u64,
}

impl RetryBudget {
    /// `budget`: retries per request; the tokens saved in calm times are capped at 10 retries
    /// (or one second of a busy upstream's budget would fund a storm later).
    pub fn new(budget: f64) -> Self {
        Self {
            milli: AtomicU64::new(0),
            per_request: (budget * 1000.0).round() as u64,
            cap: 10_000,
        }
    }

    /// One request to the upstream (its first attempt).
    pub fn deposit(&self) {
        if self.per_request == 0 {
            return;
        }
        let _ = self
            .milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some((m + self.per_request).min(self.cap))
            });
    }

    /// Takes one retry's worth, when there is one.
    pub fn take(&self) -> bool {
        self.milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                m.checked_sub(1000)
            })
            .is_ok()
    }
}

/// A request's balancing state across its attempts (only on upstreams that choose).
#[derive(Default)]
pub struct BalanceCtx {
    /// The current attempt's target.
    pub pick: Option<Pick>,
    /// Targets of the attempts before it.
    pub tried: Vec<u64>,
    /// The target a valid affinity cookie named.
    pub pinned: Option<u64>,
    hash: Option<Vec<u8>>,
    /// The next attempt leaves the current target (a retry of ours). Pingora's own retry of an
    /// idempotent request on a stale pooled connection may go to the same target again.
    pub leave_current: bool,
    /// Retries of this request after a failure an upstream may have seen (a timeout, a reset,
    /// a status): what `retry.attempts` bounds. Falling over after a failed connect is not one.
    pub resent: u32,
    /// The current attempt's upstream answered with a response head.
    pub answered: bool,
}

/// Why an attempt failed, for `retry.on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Timeout,
    /// The connection closed or was reset before a response head.
    Reset,
    Status(u16),
}

impl Failure {
    pub fn label(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Reset => "reset",
            Failure::Status(502) => "502",
            Failure::Status(503) => "503",
            Failure::Status(504) => "504",
            Failure::Status(_) => "status",
        }
    }
}

/// The peer of one attempt on an upstream that [`Pool::chooses`]: the first attempt reads the
/// affinity cookie and the hash key and pays into the retry budget; a retry leaves the targets
/// already tried.
pub fn attempt(
    pool: &Pool,
    req: &pingora::http::RequestHeader,
    client: IpAddr,
    path: Option<&str>,
    b: &mut BalanceCtx,
    first: bool,
) -> Option<Box<pingora::upstreams::peer::HttpPeer>> {
    if first {
        if let Some(budget) = &pool.budget {
            budget.deposit();
        }
        if let Some(a) = &pool.affinity {
            b.pinned = a.pinned(req);
        }
        if let Some(k) = &pool.config().hash_key {
            b.hash = hash_input(k, req, client, path);
        }
    } else if let Some(prev) = b.pick.take() {
        if std::mem::take(&mut b.leave_current) {
            b.tried.push(prev.target.id);
        }
    }
    b.answered = false;
    let pick = pool.choose(&Choice {
        hash: b.hash.as_deref(),
        pinned: b.pinned,
        tried: &b.tried,
    })?;
    let peer = pick.target.peer();
    b.pick = Some(pick);
    Some(peer)
}

/// Whether a request whose connect just failed (nothing was sent) tries another target: in
/// every configuration, whatever its method or body, spending no retry budget and no
/// `retry.attempts`, while a healthy target it has not tried remains (without a choosing
/// pool, while it has made fewer attempts than the upstream has targets; Pingora's own bound,
/// 16 attempts, caps both). A retry policy can only add to this, never take from it.
pub fn may_fall_over(
    pool: &Pool,
    b: Option<&mut BalanceCtx>,
    tries: usize,
    metrics: &crate::metrics::Metrics,
) -> bool {
    let more = match b {
        Some(b) => {
            let mut tried = b.tried.clone();
            tried.extend(b.pick.as_ref().map(|p| p.target.id));
            let more = pool.untried(&tried) > 0;
            b.leave_current |= more;
            more
        }
        None => tries < pool.len(),
    };
    if more {
        metrics
            .upstream_retries
            .with_label_values(&[pool.config().name.as_str(), "connect"])
            .inc();
    }
    more
}

/// Whether the attempt that just failed with `why`, after the upstream may have read the
/// request, is tried again on another target: `retry.on` names it, fewer than
/// `retry.attempts` such retries were made, the method is idempotent, the request has no
/// body, another healthy target is untried, and the budget has a retry. Counted either way
/// once the budget is asked; on yes the current target is left and the retry counted in `b`.
pub fn may_retry(
    pool: &Pool,
    b: Option<&mut BalanceCtx>,
    idempotent_without_body: bool,
    why: Failure,
    metrics: &crate::metrics::Metrics,
) -> bool {
    let Some(r) = pool.config().retry else {
        return false;
    };
    let on = match why {
        Failure::Timeout => r.on.timeout,
        Failure::Reset => r.on.reset,
        Failure::Status(code) => r.on.status(code),
    };
    let Some(b) = b else { return false };
    if !on || b.resent >= r.attempts || !idempotent_without_body {
        return false;
    }
    let mut tried = b.tried.clone();
    tried.extend(b.pick.as_ref().map(|p| p.target.id));
    if pool.untried(&tried) == 0 {
        return false;
    }
    let upstream = pool.config().name.as_str();
    if pool.budget.as_ref().is_some_and(|bud| !bud.take()) {
        metrics
            .upstream_retry_budget_exhausted
            .with_label_values(&[upstream])
            .inc();
        return false;
    }
    metrics
        .upstream_retries
        .with_label_values(&[upstream, why.label()])
        .inc();
    b.resent += 1;
    b.leave_current = true;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(cookies: &[&str]) -> pingora::http::RequestHeader {
        let mut r = pingora::http::RequestHeader::build("GET", b"/a?x=1", None).expect("req");
        for c in cookies {
            r.append_header("cookie", *c).expect("cookie");
        }
        r
    }

    fn aff(secret: Option<&str>) -> Affinities {
        Affinities::new(
            "app",
            &Affinity {
                cookie: "route".into(),
                max_age: Some(Duration::from_secs(3600)),
                path: "/".into(),
                secure: None,
                secret: secret.map(str::to_string),
            },
        )
    }

    #[test]
    fn a_cookie_names_only_a_target_the_gateway_signed() {
        let a = aff(Some("0123456789abcdef0123"));
        let v = a.value(42);
        assert_eq!(v.len(), COOKIE_LEN);
        assert_eq!(a.pinned(&req(&[&format!("route={v}")])), Some(42));
        assert_eq!(a.pinned(&req(&[&format!("x=1; route={v}; y=2")])), Some(42));
        // Another id with the same tag, a flipped tag digit, an oversized or short value.
        let forged = format!("{:016x}{}", 43, &v[16..]);
        assert_eq!(a.pinned(&req(&[&format!("route={forged}")])), None);
        let mut flipped = v.clone().into_bytes();
        flipped[COOKIE_LEN - 1] = if flipped[COOKIE_LEN - 1] == b'0' {
            b'1'
        } else {
            b'0'
        };
        let flipped = String::from_utf8(flipped).expect("ascii");
        assert_eq!(a.pinned(&req(&[&format!("route={flipped}")])), None);
        assert_eq!(
            a.pinned(&req(&[&format!("route={v}{}", "0".repeat(4000))])),
            None
        );
        assert_eq!(a.pinned(&req(&["route=0000000000000001.00"])), None);
        // Given twice (in one field or two): names nothing.
        assert_eq!(a.pinned(&req(&[&format!("route={v}; route={v}")])), None);
        assert_eq!(
            a.pinned(&req(&[&format!("route={v}"), &format!("route={v}")])),
            None
        );
        // Another upstream's or another secret's cookie is not this one's.
        assert_eq!(
            aff(Some("another secret, long")).pinned(&req(&[&format!("route={v}")])),
            None
        );
        let other = Affinities::new("other", &a.cfg);
        assert_eq!(other.pinned(&req(&[&format!("route={v}")])), None);
    }

    #[test]
    fn the_set_cookie_field_carries_the_configured_attributes() {
        let a = aff(None);
        let c = a.set_cookie(7, true);
        assert!(
            c.starts_with(&format!(
                "route={}; Path=/; HttpOnly; SameSite=Lax",
                a.value(7)
            )),
            "{c}"
        );
        assert!(
            c.contains("; Max-Age=3600") && c.ends_with("; Secure"),
            "{c}"
        );
        assert!(!a.set_cookie(7, false).contains("Secure"));
    }

    #[test]
    fn the_budget_allows_retries_as_a_ratio_of_requests() {
        let b = RetryBudget::new(0.2);
        let mut retries = 0;
        for _ in 0..100 {
            b.deposit();
            // A full outage: every request wants every retry it can get.
            while b.take() {
                retries += 1;
            }
        }
        assert_eq!(retries, 20);
        // Calm traffic saves at most 10 retries.
        let b = RetryBudget::new(1.0);
        (0..1000).for_each(|_| b.deposit());
        assert_eq!((0..50).filter(|_| b.take()).count(), 10);
        assert!(!RetryBudget::new(0.0).take());
    }

    #[test]
    fn peak_ewma_jumps_up_and_decays_down() {
        let e = AtomicU64::new(0);
        observe(&e, 1000);
        assert_eq!(e.load(Ordering::Relaxed), 1000);
        observe(&e, 0);
        assert_eq!(e.load(Ordering::Relaxed), 700);
        observe(&e, 5000);
        assert_eq!(e.load(Ordering::Relaxed), 5000);
        // Without samples it halves every second: a penalised target is tried again.
        assert_eq!(decayed(5_000_000, 0, 500_000), 5_000_000);
        assert_eq!(decayed(5_000_000, 0, 3_000_000), 625_000);
        assert_eq!(decayed(5_000_000, 0, 100_000_000), 0);
    }

    #[test]
    fn hash_inputs_read_what_the_key_names() {
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let mut r = req(&["session=abc"]);
        r.append_header("x-user", "u1").expect("h");
        assert_eq!(
            hash_input(&HashKey::Header("x-user".into()), &r, ip, None),
            Some(b"u1".to_vec())
        );
        assert_eq!(
            hash_input(&HashKey::Cookie("session".into()), &r, ip, None),
            Some(b"abc".to_vec())
        );
        assert_eq!(
            hash_input(&HashKey::Query("x".into()), &r, ip, None),
            Some(b"1".to_vec())
        );
        assert_eq!(
            hash_input(&HashKey::Uri, &r, ip, Some("/a")),
            Some(b"/a?x=1".to_vec())
        );
        assert_eq!(
            hash_input(&HashKey::Path, &r, ip, Some("/a")),
            Some(b"/a".to_vec())
        );
        assert_eq!(
            hash_input(&HashKey::ClientIp, &r, ip, None),
            Some(vec![10, 0, 0, 1])
        );
        assert_eq!(
            hash_input(&HashKey::Header("x-none".into()), &r, ip, None),
            None
        );
    }
}
