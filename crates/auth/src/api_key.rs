//! `auth = { api_key = { header | query, keys_file, hide_credentials } }` (Kong's key-auth):
//! each key names a consumer, the key source `consumer` of limits and plans, sent upstream in
//! `X-Consumer-Username` with the key's `X-Credential-Identifier` (which of the consumer's
//! keys, never the key). Missing or unknown key: 401. A key given twice (two headers, two
//! parameters, a header and a parameter, or another spelling of either): 400, whatever the
//! keys. Keys are held only as keyed hashes (a lookup compares hashes, never the key's bytes
//! one by one) and never logged; unless `hide_credentials = false`, the upstream never reads
//! one (the header and the parameter are removed: [`crate::AuthRt::owned`] and
//! [`strip_param`]).

use super::cache::TtlCache;
use super::{one_header, Outcome, Passed, Refusal, Request};
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_config::model::ApiKeyAuth;
use tollgate_core::respond::Problem;

/// A consumer's key, as the upstream hears of it.
struct Credential {
    consumer: Arc<str>,
    /// `X-Consumer-Username` (`None` when the name cannot be a header value).
    username: Option<HeaderValue>,
    /// `X-Credential-Identifier`: `CONSUMER#N`, the consumer's Nth key in `keys_file`.
    identifier: Option<HeaderValue>,
}

pub struct ApiKeyRt {
    header: Option<String>,
    query: Option<String>,
    /// Only [`TtlCache::key`] is used: the keyed hash of a key.
    hasher: TtlCache<()>,
    consumers: HashMap<u128, Credential>,
    challenge: HeaderValue,
}

impl ApiKeyRt {
    pub fn new(cfg: &ApiKeyAuth) -> Self {
        let hasher = TtlCache::new(1);
        let mut nth: HashMap<&str, usize> = HashMap::new();
        let consumers = cfg
            .keys
            .iter()
            .map(|(consumer, key)| {
                let n = nth.entry(consumer.as_str()).or_default();
                *n += 1;
                let credential = Credential {
                    consumer: Arc::from(consumer.as_str()),
                    username: HeaderValue::from_str(consumer).ok(),
                    identifier: HeaderValue::from_str(&format!("{consumer}#{n}")).ok(),
                };
                (hasher.key([key.as_bytes()]), credential)
            })
            .collect();
        let challenge = match (&cfg.header, &cfg.query) {
            (Some(h), _) => format!("ApiKey header=\"{h}\""),
            (None, Some(q)) => format!("ApiKey query=\"{q}\""),
            (None, None) => "ApiKey".into(),
        };
        Self {
            header: cfg.header.clone(),
            query: cfg.query.clone(),
            hasher,
            consumers,
            challenge: HeaderValue::from_str(&challenge)
                .unwrap_or_else(|_| HeaderValue::from_static("ApiKey")),
        }
    }

    pub fn check(&self, req: &Request<'_>) -> Result<(Passed, Outcome), Refusal> {
        let from_header = match &self.header {
            Some(h) => one_header(req.head, h)?.map(|v| v.as_bytes().to_vec()),
            None => None,
        };
        let (from_query, spelled) = match &self.query {
            Some(q) => query_once(req.head.uri.query(), q)?,
            None => (None, 0),
        };
        let key = match (from_header, from_query) {
            (Some(_), _) if spelled > 0 => {
                return Err(Refusal::problem(
                    Problem::AmbiguousRequest,
                    "An API key is given in both the header and the query; this route reads one to authenticate the caller, so give it once.",
                ))
            }
            (h, q) => h.or(q),
        };
        let Some(key) = key else {
            return Err(Refusal::challenge(
                Problem::Unauthenticated,
                "This route needs an API key.",
                self.challenge.clone(),
            ));
        };
        match self.consumers.get(&self.hasher.key([key.as_slice()])) {
            Some(c) => {
                let headers = [
                    (super::consumer_username(), &c.username),
                    (super::credential_identifier(), &c.identifier),
                ]
                .into_iter()
                .filter_map(|(n, v)| Some((n, v.clone()?)))
                .collect();
                Ok((
                    Passed {
                        consumer: Some(c.consumer.clone()),
                        headers,
                        ..Passed::default()
                    },
                    Outcome::Allowed,
                ))
            }
            None => Err(Refusal::challenge(
                Problem::Unauthenticated,
                "The API key is not known.",
                self.challenge.clone(),
            )),
        }
    }
}

/// The name a query parameter is read by, as the laxest common frameworks read names: PHP cuts
/// it at a NUL, skips leading spaces, takes `name` of `name[...]` (an array) and renames `.`,
/// ` ` (`+`) and a lone `[` to `_`; ASP.NET compares names ignoring case (invariant upper
/// case, so `ı` is `I`). Two parameters read by one name are one credential given twice.
fn read_as(decoded: &str) -> String {
    let cut = decoded.split('\0').next().unwrap_or_default();
    let name = cut.trim_start_matches(' ');
    let base = match name.find('[') {
        Some(i) if name[i..].contains(']') => &name[..i],
        _ => name,
    };
    base.chars()
        .map(|c| match c {
            '.' | ' ' | '[' => '_',
            c => c,
        })
        .flat_map(char::to_uppercase)
        .collect()
}

/// Whether a query parameter's name (percent-decoded) is `name` as some application reads it
/// ([`read_as`]).
pub fn same_param(decoded: &str, name: &str) -> bool {
    read_as(decoded) == read_as(name)
}

/// The query's parameters as the laxest parsers split them (on `&`, and on `;` as Rack 2 and
/// older Python and Go parsers do): each one's raw bytes and its percent-decoded name.
fn pairs(query: &[u8]) -> impl Iterator<Item = (&[u8], String)> {
    query.split(|&b| b == b'&' || b == b';').map(|pair| {
        let raw_name = pair.split(|&b| b == b'=').next().unwrap_or_default();
        let decoded = form_urlencoded::parse(raw_name)
            .next()
            .map(|(k, _)| k.into_owned())
            .unwrap_or_default();
        (pair, decoded)
    })
}

/// The query parameter `name`'s value (percent-decoded, read as spelled, from `&`-separated
/// pairs) and how many parameters an application may read as it ([`same_param`]): more than
/// one is a 400 (the gateway and the upstream could read different ones).
fn query_once(query: Option<&str>, name: &str) -> Result<(Option<Vec<u8>>, usize), Refusal> {
    let query = query.unwrap_or("").as_bytes();
    let spellings = pairs(query)
        .filter(|(raw, n)| !raw.is_empty() && same_param(n, name))
        .count();
    if spellings > 1 {
        return Err(Refusal::problem(
            Problem::AmbiguousRequest,
            format!("The query parameter {name} is given more than once (or in another spelling); this route reads it to authenticate the caller, so it must be given once."),
        ));
    }
    let found = form_urlencoded::parse(query)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_bytes().to_vec());
    Ok((found, spellings))
}

/// The request target `target` (origin form, with its query) without the parameters
/// [`same_param`] takes for `name` (split as [`pairs`] splits them), the others kept byte for
/// byte, in their order, with the separators that followed them; `None` when it holds none
/// (nothing to rewrite).
pub fn strip_param(target: &[u8], name: &str) -> Option<Vec<u8>> {
    let q = target.iter().position(|&b| b == b'?')?;
    let (path, query) = (&target[..q], &target[q + 1..]);
    let mut kept: Vec<u8> = Vec::with_capacity(query.len());
    let mut stripped = false;
    let mut rest = query;
    loop {
        let end = rest.iter().position(|&b| b == b'&' || b == b';');
        let (pair, sep) = match end {
            Some(e) => (&rest[..e], Some(rest[e])),
            None => (rest, None),
        };
        let decoded = pairs(pair).next().map(|(_, n)| n).unwrap_or_default();
        if !pair.is_empty() && same_param(&decoded, name) {
            stripped = true;
        } else if !pair.is_empty() {
            if !kept.is_empty() {
                kept.push(sep_before(query, pair));
            }
            kept.extend_from_slice(pair);
        }
        match (end, sep) {
            (Some(e), Some(_)) => rest = &rest[e + 1..],
            _ => break,
        }
    }
    if !stripped {
        return None;
    }
    let mut out = path.to_vec();
    if !kept.is_empty() {
        out.push(b'?');
        out.extend_from_slice(&kept);
    }
    Some(out)
}

/// The separator written before `pair` (a slice of `query`) in the client's query: `&` when
/// it starts it.
fn sep_before(query: &[u8], pair: &[u8]) -> u8 {
    let at = pair.as_ptr() as usize - query.as_ptr() as usize;
    match at {
        0 => b'&',
        at => query[at - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_a_parameter() {
        for same in [
            "api_key",
            "API_KEY",
            "api.key",
            "api key",
            "api[key",
            "Api_Key",
            " api_key",
            "  api_key",
            "api_key\0x",
            "api_key[]",
            "api_key[x]",
            "ap\u{131}_key",
        ] {
            assert!(same_param(same, "api_key"), "{same:?}");
        }
        for other in [
            "api-key", "apikey", "api_keys", "xapi_key", "", "api_key_", "api_ke",
        ] {
            assert!(!same_param(other, "api_key"), "{other}");
        }
    }

    #[test]
    fn one_key_parameter_or_a_400() {
        let got = |q: &str| query_once(Some(q), "api_key").map_err(|r| r.outcome());
        assert_eq!(
            got("api_key=abc&x=1").ok(),
            Some((Some(b"abc".to_vec()), 1))
        );
        assert_eq!(
            got("api%5Fkey=a%20b").ok(),
            Some((Some(b"a b".to_vec()), 1))
        );
        assert_eq!(got("x=1").ok(), Some((None, 0)));
        // Another spelling alone: not the key (401 later, or 400 beside a header), not taken.
        assert_eq!(got("API_KEY=abc").ok(), Some((None, 1)));
        assert_eq!(got("x=1;api_key=abc").ok(), Some((None, 1)));
        for twice in [
            "api_key=a&api_key=b",
            "api_key=a&API_KEY=b",
            "api_key=a&api.key=b",
            "api_key=a&api+key=b",
            "api_key=a&api%5fkey=a",
            "api_key=a&x=1;api_key=b",
            "api_key=a&%20api_key=b",
            "api_key=a&+api_key=b",
            "api_key=a&api_key%00=b",
            "api_key=a&api_key%00x=b",
            "api_key=a&api_key[]=b",
            "api_key=a&api_key[x]=b",
            "api_key=a&ap%C4%B1_key=b",
        ] {
            assert!(got(twice).is_err(), "{twice}");
        }
    }

    #[test]
    fn the_key_leaves_the_target_and_nothing_else_does() {
        let s = |t: &str| {
            strip_param(t.as_bytes(), "api_key").map(|v| String::from_utf8(v).expect("utf8"))
        };
        assert_eq!(s("/a?api_key=k").as_deref(), Some("/a"));
        assert_eq!(
            s("/a?x=1&api_key=k&z=%20y").as_deref(),
            Some("/a?x=1&z=%20y")
        );
        assert_eq!(s("/a?api%5Fkey=k&b=2").as_deref(), Some("/a?b=2"));
        assert_eq!(s("/a?q=a%26b&api_key=k").as_deref(), Some("/a?q=a%26b"));
        assert_eq!(s("/a?api_key").as_deref(), Some("/a"));
        assert_eq!(s("/a?API.KEY=k&&x").as_deref(), Some("/a?x"));
        assert_eq!(s("/a?x=1;api_key=k;y=2").as_deref(), Some("/a?x=1;y=2"));
        assert_eq!(s("/a?api_key[]=k&x=1;y=2").as_deref(), Some("/a?x=1;y=2"));
        assert_eq!(s("/a?x=1"), None);
        assert_eq!(s("/a?q=a;b"), None);
        assert_eq!(s("/a"), None);
        assert_eq!(s("/a?api_keys=1"), None);
    }
}
