//! Who is asking: the client address, and the limit keys derived from a request.
//!
//! Keys are 64-bit hashes under a per-process random seed: raw identities (addresses, API keys,
//! user agents) are never stored by the limiters, and no allocation is needed per request.

use pingora::http::RequestHeader;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use tollgate_config::model::KeySource;

/// The address as a limiter sees it: IPv6 cut to its prefix (a /64 is one subscriber).
pub fn key_ip(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match ipnet::Ipv6Net::new(v6, ipv6_prefix) {
            Ok(n) => IpAddr::V6(n.network()),
            Err(_) => ip,
        },
        v4 => v4,
    }
}

/// What a key is computed from. Borrowed from the request: nothing is copied.
pub struct KeyInput<'a> {
    pub req: &'a RequestHeader,
    /// SHA-256 of the client's TLS certificate, when it sent one.
    pub client_cert: Option<&'a [u8]>,
    pub client_ip: IpAddr,
    /// The canonical path ([`tollgate_route::normalize`]), not the one the client spelled.
    pub path: &'a str,
    /// The query the upstream will read (a rewrite's, or the client's).
    pub query: Option<&'a str>,
    pub route: u32,
    /// The verified bearer token's claims, when the route reads any.
    pub claims: Option<&'a tollgate_auth::jwt::Claims>,
    /// The request body's fields, when the route reads any.
    pub body: Option<&'a ParsedBody>,
    /// The consumer the route's authentication named.
    pub consumer: Option<&'a str>,
    /// `[rls]`: the descriptor entries the rule matched, `(key, value)`.
    pub descriptor: Option<&'a [(&'a str, &'a str)]>,
}

/// A request body read for `body:FIELD` keys.
#[derive(Debug)]
pub enum ParsedBody {
    Json(serde_json::Value),
    /// `application/x-www-form-urlencoded` pairs, percent-decoded.
    Form(Vec<(String, String)>),
}

impl ParsedBody {
    /// Parses `body` by its content type; `Err` for a body that claims JSON but is not, `Ok(None)`
    /// for a type without fields (the body: limits do not count that request).
    pub fn parse(content_type: &str, body: &[u8]) -> Result<Option<Self>, &'static str> {
        let ct = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if ct == "application/json" || ct.ends_with("+json") {
            return serde_json::from_slice(body)
                .map(|v| Some(ParsedBody::Json(v)))
                .map_err(|_| "the request body is not valid JSON");
        }
        if ct == "application/x-www-form-urlencoded" {
            std::str::from_utf8(body).map_err(|_| "the form body is not UTF-8")?;
            let pairs = form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            return Ok(Some(ParsedBody::Form(pairs)));
        }
        Ok(None)
    }

    /// A form field given more than once (a JSON object's last member wins, as in most
    /// parsers, so JSON has no such ambiguity to report).
    pub fn repeated(&self, field: &str) -> bool {
        match self {
            ParsedBody::Json(_) => false,
            ParsedBody::Form(pairs) => pairs.iter().filter(|(k, _)| k == field).count() > 1,
        }
    }

    /// A field's value: a top-level JSON member (strings by their text, others by their JSON)
    /// or the first form pair of that name.
    fn get(&self, field: &str) -> Option<std::borrow::Cow<'_, [u8]>> {
        use std::borrow::Cow;
        match self {
            ParsedBody::Json(v) => match v.get(field)? {
                serde_json::Value::String(s) => Some(Cow::Borrowed(s.as_bytes())),
                serde_json::Value::Null => None,
                other => Some(Cow::Owned(other.to_string().into_bytes())),
            },
            ParsedBody::Form(pairs) => pairs
                .iter()
                .find(|(k, _)| k == field)
                .map(|(_, v)| Cow::Borrowed(v.as_bytes())),
        }
    }
}

/// The process-wide keyed hasher for limit keys.
#[derive(Clone)]
pub struct KeyHasher {
    state: foldhash::quality::FixedState,
}

impl Default for KeyHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyHasher {
    /// A hasher with a random seed (from the standard library's OS-seeded RandomState).
    pub fn new() -> Self {
        let seed =
            std::collections::hash_map::RandomState::new().hash_one(0x746f_6c6c_6761_7465u64);
        Self {
            state: foldhash::quality::FixedState::with_seed(seed),
        }
    }

    /// The key of a request under `sources`, or `None` when a source has no value (then the
    /// limit does not count this request).
    pub fn key(&self, sources: &[KeySource], input: &KeyInput, ipv6_prefix: u8) -> Option<u64> {
        let mut h = self.state.build_hasher();
        write_key(&mut h, sources, input, ipv6_prefix)?;
        Some(h.finish())
    }

    /// A hasher under this process's seed, for keys made elsewhere (the rate limit service's
    /// memory of counts past a number).
    pub fn hasher(&self) -> impl std::hash::Hasher {
        self.state.build_hasher()
    }

    /// A client address as logs show it: hashed under this process's random seed, so the
    /// address cannot be recovered by hashing every address (the stable keys are public).
    pub fn pseudonym(&self, ip: IpAddr) -> u64 {
        let mut h = self.state.build_hasher();
        h.write_u8(0xff);
        write_ip(&mut h, ip);
        h.finish()
    }

    /// The key of a global limit: the same on every gateway instance (SipHash-1-3 has a stable
    /// definition, unlike the per-process seeded hash), so all of them name one Redis key.
    /// Redis sees only this hash, never the identifying value.
    pub fn stable_key(
        &self,
        sources: &[KeySource],
        input: &KeyInput,
        ipv6_prefix: u8,
    ) -> Option<u64> {
        let mut h = siphasher::sip::SipHasher13::new_with_keys(STABLE_K0, STABLE_K1);
        write_key(&mut h, sources, input, ipv6_prefix)?;
        Some(h.finish())
    }
}

/// A request's key under `sources` as a person reads it (`client_ip=203.0.113.0/24,
/// header:x-user=alice`): what `tollgate explain` and `tollgate simulate` show for the hash
/// the limits count. `None` when a source has no value (the limit does not count the request).
/// Values are shown as the request gave them (a body field or certificate as its length).
pub fn describe_key(sources: &[KeySource], input: &KeyInput, ipv6_prefix: u8) -> Option<String> {
    use std::fmt::Write;
    let ip = |ip: IpAddr| {
        let k = key_ip(ip, ipv6_prefix);
        match k {
            IpAddr::V6(_) if ipv6_prefix < 128 && k != ip => format!("{k}/{ipv6_prefix}"),
            _ => k.to_string(),
        }
    };
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mut out = String::new();
    for (i, src) in sources.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let value = match src {
            KeySource::ClientIp => ip(input.client_ip),
            KeySource::Header(name) => text(input.req.headers.get(name.as_str())?),
            KeySource::Query(name) => query_param(input.query?, name)?.into_owned(),
            KeySource::UserAgent => text(input.req.headers.get(http::header::USER_AGENT)?),
            KeySource::IpUa => {
                let ua = input.req.headers.get(http::header::USER_AGENT);
                format!(
                    "{} {}",
                    ip(input.client_ip),
                    ua.map(text).unwrap_or_default()
                )
            }
            KeySource::Route => input.route.to_string(),
            KeySource::Path => input.path.to_string(),
            KeySource::Method => input.req.method.to_string(),
            KeySource::Global => String::new(),
            KeySource::ClientCert => format!("({} bytes)", input.client_cert?.len()),
            KeySource::Consumer => input.consumer?.to_string(),
            KeySource::Descriptor => {
                let mut d = String::new();
                for (k, v) in input.descriptor? {
                    let _ = write!(d, "{k}={v};");
                }
                d
            }
            KeySource::Body(field) => format!("({} bytes)", input.body?.get(field)?.len()),
            KeySource::Jwt(claim) => match input.claims?.get(claim.as_str())? {
                serde_json::Value::String(v) => v.clone(),
                serde_json::Value::Null => return None,
                other => other.to_string(),
            },
        };
        let _ = write!(out, "{}={value}", src.describe());
    }
    Some(out)
}

// Fixed keys: the stable hash must agree between processes. Identities in Redis are therefore
// pseudonymous (hashed), not secret from someone who can compute SipHash over every IPv4.
const STABLE_K0: u64 = 0x746f_6c6c_6761_7465;
const STABLE_K1: u64 = 0x676c_6f62_616c_6b79;

fn write_key(
    h: &mut impl Hasher,
    sources: &[KeySource],
    input: &KeyInput,
    ipv6_prefix: u8,
) -> Option<()> {
    for (i, src) in sources.iter().enumerate() {
        h.write_u8(i as u8);
        match src {
            KeySource::ClientIp => write_ip(h, key_ip(input.client_ip, ipv6_prefix)),
            KeySource::Header(name) => {
                h.write(input.req.headers.get(name.as_str())?.as_bytes());
            }
            KeySource::Query(name) => h.write(query_param(input.query?, name)?.as_bytes()),
            KeySource::UserAgent => {
                h.write(input.req.headers.get(http::header::USER_AGENT)?.as_bytes());
            }
            KeySource::IpUa => {
                write_ip(h, key_ip(input.client_ip, ipv6_prefix));
                let ua = input.req.headers.get(http::header::USER_AGENT);
                h.write(ua.map(|v| v.as_bytes()).unwrap_or(b""));
            }
            KeySource::Route => h.write_u32(input.route),
            KeySource::Path => h.write(input.path.as_bytes()),
            KeySource::Method => h.write(input.req.method.as_str().as_bytes()),
            KeySource::Global => {}
            KeySource::ClientCert => h.write(input.client_cert?),
            KeySource::Consumer => h.write(input.consumer?.as_bytes()),
            KeySource::Descriptor => {
                // Each entry's key and value: `user=X` never counts as `remote_address=X`.
                for (k, v) in input.descriptor? {
                    h.write(k.as_bytes());
                    h.write_u8(0xfd);
                    h.write(v.as_bytes());
                    h.write_u8(0xfe);
                }
            }
            KeySource::Body(field) => h.write(&input.body?.get(field)?),
            KeySource::Jwt(claim) => match input.claims?.get(claim.as_str())? {
                serde_json::Value::String(v) => h.write(v.as_bytes()),
                serde_json::Value::Null => return None,
                // Numbers and the rest by their JSON text: 42 and "42" stay different keys.
                other => {
                    h.write_u8(1);
                    h.write(other.to_string().as_bytes());
                }
            },
        }
        h.write_u8(0xff);
    }
    Some(())
}

fn write_ip(h: &mut impl Hasher, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => h.write(&v4.octets()),
        IpAddr::V6(v6) => h.write(&v6.octets()),
    }
}

/// The decoded value of the `name` parameter, compared by decoded names (`%61pi_key` is
/// `api_key`; '+' is a space). A parameter given twice never gets here: the request was
/// refused as ambiguous when the route reads it.
fn query_param<'q>(query: &'q str, name: &str) -> Option<std::borrow::Cow<'q, str>> {
    form_urlencoded::parse(query.as_bytes()).find_map(|(k, v)| (k == name).then_some(v))
}

/// The text of a key source that names something (a plan, a tenant): header, query or claim.
fn source_text<'a>(src: &KeySource, input: &'a KeyInput) -> Option<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    match src {
        KeySource::Header(name) => input
            .req
            .headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(Cow::Borrowed),
        KeySource::Query(name) => query_param(input.query?, name),
        KeySource::Jwt(claim) => match input.claims?.get(claim.as_str())? {
            serde_json::Value::String(s) => Some(Cow::Borrowed(s.as_str())),
            serde_json::Value::Null => None,
            other => Some(Cow::Owned(other.to_string())),
        },
        KeySource::Consumer => input.consumer.map(Cow::Borrowed),
        _ => None,
    }
}

/// The caller's plan: its tenant's entry in `tenants`, else the plan its `from` value names,
/// else the default.
pub fn plan_of(plans: &tollgate_config::model::Plans, input: &KeyInput) -> usize {
    if let Some(t) = plans.tenant.as_ref().and_then(|s| source_text(s, input)) {
        if let Some((_, p)) = plans.tenants.iter().find(|(name, _)| *name == t) {
            return *p;
        }
    }
    if let Some(f) = plans.from.as_ref().and_then(|s| source_text(s, input)) {
        if let Some(p) = plans.names.iter().position(|n| *n == f) {
            return p;
        }
    }
    plans.default
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::client_ip::fold;

    fn req(xff: &[&str]) -> RequestHeader {
        let mut r = RequestHeader::build("GET", b"/x?a=%41b&k=v", None).expect("request");
        for v in xff {
            r.append_header("x-forwarded-for", *v).expect("header");
        }
        r
    }

    #[test]
    fn mapped_addresses_fold_and_ipv6_is_cut_to_the_prefix() {
        assert_eq!(
            fold("::ffff:192.0.2.1".parse().expect("ip")),
            "192.0.2.1".parse::<IpAddr>().expect("ip")
        );
        assert_eq!(
            key_ip("2001:db8:1:2:3:4:5:6".parse().expect("ip"), 64),
            "2001:db8:1:2::".parse::<IpAddr>().expect("ip")
        );
    }

    #[test]
    fn keys_decode_and_miss() {
        let h = KeyHasher::new();
        let r = req(&[]);
        let input = KeyInput {
            req: &r,
            client_cert: None,
            client_ip: "192.0.2.1".parse().expect("ip"),
            path: "/x",
            query: r.uri.query(),
            route: 0,
            claims: None,
            body: None,
            consumer: None,
            descriptor: None,
        };
        let a = h.key(&[KeySource::Query("a".into())], &input, 64);
        let mut r2 = RequestHeader::build("GET", b"/x?a=Ab", None).expect("request");
        r2.insert_header("x-api-key", "k").expect("header");
        let input2 = KeyInput {
            req: &r2,
            client_cert: None,
            client_ip: "192.0.2.1".parse().expect("ip"),
            path: "/x",
            query: r2.uri.query(),
            route: 0,
            claims: None,
            body: None,
            consumer: None,
            descriptor: None,
        };
        assert!(a.is_some());
        assert_eq!(
            a,
            h.key(&[KeySource::Query("a".into())], &input2, 64),
            "%41 == A"
        );
        assert_eq!(
            h.key(&[KeySource::Header("x-api-key".into())], &input, 64),
            None
        );
        assert!(h
            .key(&[KeySource::Header("x-api-key".into())], &input2, 64)
            .is_some());
        assert_ne!(
            h.key(&[KeySource::ClientIp, KeySource::Route], &input, 64),
            h.key(&[KeySource::ClientIp], &input, 64)
        );
        // The name is decoded too: `%61` is `a`.
        let r3 = RequestHeader::build("GET", b"/x?%61=%41b", None).expect("request");
        let input3 = KeyInput {
            req: &r3,
            client_cert: None,
            client_ip: "192.0.2.1".parse().expect("ip"),
            path: "/x",
            query: r3.uri.query(),
            route: 0,
            claims: None,
            body: None,
            consumer: None,
            descriptor: None,
        };
        assert_eq!(a, h.key(&[KeySource::Query("a".into())], &input3, 64));
    }
}
