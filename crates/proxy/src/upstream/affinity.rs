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
use tollgate_config::{Affinity, HashKey};

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
