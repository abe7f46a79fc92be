//! Hashing and affinity (docs/upstreams.md, "Balancing"): what a `hash_key` names in a
//! request, and the signed affinity cookie that pins a client to one target.
//!
//! The cookie names a target by its stable id and carries an HMAC-SHA256 of the upstream's
//! name and that id under the affinity secret, so a client can only present a target the
//! gateway gave it. A cookie that is forged, oversized, given twice, or names a target that is
//! gone or unhealthy is ignored, and the answer re-pins the client.

use ring::hmac;
use std::net::IpAddr;
use std::sync::OnceLock;
use tollgate_config::model::{Affinity, HashKey};

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

#[cfg(test)]
mod tests;
