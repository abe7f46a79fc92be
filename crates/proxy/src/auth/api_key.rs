//! `auth = { api_key = { header | query, keys_file } }` (Kong's key-auth): each key names a
//! consumer, the key source `consumer` of limits and plans. Missing or unknown key: 401. A key
//! header or parameter given twice: 400. Keys are held only as keyed hashes (a lookup compares
//! hashes, never the key's bytes one by one) and never logged.

use super::cache::TtlCache;
use super::{one_header, Outcome, Passed, Refusal, Request};
use crate::respond::Problem;
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::Arc;
use tollgate_config::ApiKeyAuth;

pub struct ApiKeyRt {
    header: Option<String>,
    query: Option<String>,
    /// Only [`TtlCache::key`] is used: the keyed hash of a key.
    hasher: TtlCache<()>,
    consumers: HashMap<u128, Arc<str>>,
    challenge: HeaderValue,
}

impl ApiKeyRt {
    pub fn new(cfg: &ApiKeyAuth) -> Self {
        let hasher = TtlCache::new(1);
        let consumers = cfg
            .keys
            .iter()
            .map(|(consumer, key)| (hasher.key([key.as_bytes()]), Arc::from(consumer.as_str())))
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
        let mut key: Option<Vec<u8>> = None;
        if let Some(h) = &self.header {
            key = one_header(req.head, h)?.map(|v| v.as_bytes().to_vec());
        }
        if let (None, Some(q)) = (&key, &self.query) {
            key = query_once(req.head.uri.query(), q)?;
        }
        let Some(key) = key else {
            return Err(Refusal::challenge(
                Problem::Unauthenticated,
                "This route needs an API key.",
                self.challenge.clone(),
            ));
        };
        match self.consumers.get(&self.hasher.key([key.as_slice()])) {
            Some(consumer) => Ok((
                Passed {
                    consumer: Some(consumer.clone()),
                    ..Passed::default()
                },
                Outcome::Allowed,
            )),
            None => Err(Refusal::challenge(
                Problem::Unauthenticated,
                "The API key is not known.",
                self.challenge.clone(),
            )),
        }
    }
}

/// The one value of query parameter `name` (percent-decoded); 400 when given twice.
fn query_once(query: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, Refusal> {
    let mut found = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if k == name {
            if found.is_some() {
                return Err(Refusal::problem(
                    Problem::AmbiguousRequest,
                    format!("The query parameter {name} is given more than once; this route reads it to authenticate the caller, so it must be given once."),
                ));
            }
            found = Some(v.as_bytes().to_vec());
        }
    }
    Ok(found)
}
