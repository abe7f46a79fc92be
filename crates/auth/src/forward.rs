//! `auth = { forward = { url, ... } }` (ingress-nginx `auth-url`, Traefik ForwardAuth): each
//! request (or its cache entry) is put to an auth service, without its body.
//!
//! The auth request: the client's method (or `method`) to `url`, with the client's end-to-end
//! headers (or only `request_headers`), and what ingress-nginx and Traefik tell an auth
//! service: `X-Original-URL`, `X-Original-Method`, `X-Original-URI`, `X-Forwarded-For`,
//! `-Proto`, `-Host`, `-Uri`, `-Method`, `X-Real-IP`, `X-Auth-Request-Redirect`,
//! `X-Request-ID`, `X-Sent-From` (a client's own copies of these are never passed).
//!
//! Its answer: 2xx passes, `response_headers` copied onto the upstream request (the client's
//! copies removed even when the answer lacks them) and `Set-Cookie` onto the client's response;
//! 401 and 403 go to the client (a 401 as a 302 to `signin` when set, `rd=` the original URL on
//! the host the route matched); anything else (and a body over 64 KiB) is 500; no answer
//! within `timeout`, or none at all, is 503. Nothing passes because the service failed.
//! 2xx, 401 and 403 answers are kept for `cache` (bounded), keyed by what the service is told
//! the request is (route, method, host, path and query) and `cache_key`'s values; only for
//! requests that carry a `cache_key` header or parameter (an anonymous answer is never reused).

use super::cache::TtlCache;
use super::{Outcome, Passed, Refusal, Request};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http_body_util::Empty;
use std::sync::Arc;
use std::time::Instant;
use tollgate_config::model::{ForwardAuth, KeySource};
use tollgate_core::net::client::{self, Failure, HttpClient};
use tollgate_core::respond::Problem;

/// The largest auth answer body read (it is thrown away; a larger one is a failure).
const MAX_ANSWER_BODY: usize = 64 << 10;
const CACHED_ANSWERS: usize = 10_000;

/// Headers never copied from the client to the auth request: hop-by-hop and framing (the
/// first [`FRAMING`]), then those the gateway states itself.
const FRAMING: usize = 11;
const NOT_PASSED: [&str; 38] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "proxy-authorization",
    "expect",
    "x-original-url",
    "x-original-method",
    "x-original-uri",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-uri",
    "x-forwarded-method",
    "x-real-ip",
    "x-auth-request-redirect",
    "x-request-id",
    "x-sent-from",
    // Where a request came from and what it asked for, as other proxies spell it: a service
    // that reads any of them must read the gateway's word, never the client's.
    "forwarded",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-server",
    "x-original-host",
    "x-host",
    "x-scheme",
    "true-client-ip",
    "x-client-ip",
    "cf-connecting-ip",
    "x-cluster-client-ip",
    // The client certificate as ingress-nginx states it (client_cert_headers): a client's
    // copy would be its own word on who it is.
    "ssl-client-verify",
    "ssl-client-subject-dn",
    "ssl-client-issuer-dn",
    "ssl-client-cert",
];

/// A kept answer.
#[derive(Clone)]
enum Kept {
    Pass(Arc<Vec<(HeaderName, HeaderValue)>>),
    /// 401 (with the service's challenge) or 403.
    Deny(u16, Option<HeaderValue>),
}

/// What `response_headers = ["*"]` never copies onto the upstream request: the answer's
/// framing, hop-by-hop and host fields, and those of its own representation and caching
/// (its `Content-Type` is not the client's body's).
const NOT_COPIED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "content-type",
    "content-encoding",
    "content-language",
    "content-range",
    "content-location",
    "date",
    "server",
    "set-cookie",
    "www-authenticate",
    "location",
    "cache-control",
    "expires",
    "etag",
    "last-modified",
    "vary",
    "age",
    "pragma",
    // What the gateway states to the upstream: the client, the scheme, the request's id,
    // its trace, the client certificate. An auth answer never replaces them.
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-real-ip",
    "x-request-id",
    "traceparent",
    "tracestate",
    "ssl-client-verify",
    "ssl-client-subject-dn",
    "ssl-client-issuer-dn",
    "ssl-client-cert",
];

/// `url` with `path_and_query` (the request's canonical path, from `/`) after its path
/// (without a trailing `/`); `url`'s own query gives way to the request's.
fn appended(url: &http::Uri, path_and_query: &str) -> Option<http::Uri> {
    let prefix = url.path().trim_end_matches('/');
    let mut parts = url.clone().into_parts();
    parts.path_and_query = Some(format!("{prefix}{path_and_query}").parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

pub struct ForwardRt {
    cfg: ForwardAuth,
    url: http::Uri,
    method: Option<http::Method>,
    response_headers: Vec<HeaderName>,
    /// `response_headers = ["*"]`.
    all_headers: bool,
    client: HttpClient,
    cache: Option<TtlCache<Kept>>,
    /// The service is not answering (logged once when it starts, once when it ends).
    failing: std::sync::atomic::AtomicBool,
}

impl ForwardRt {
    pub fn new(cfg: &ForwardAuth) -> Result<Self, String> {
        let url: http::Uri = cfg.url.parse().map_err(|e| format!("url: {e}"))?;
        let method = cfg
            .method
            .as_deref()
            .map(|m| http::Method::from_bytes(m.as_bytes()).map_err(|e| format!("method: {e}")))
            .transpose()?;
        let all_headers = cfg.response_headers == ["*"];
        let response_headers = cfg
            .response_headers
            .iter()
            .filter(|_| !all_headers)
            .map(|h| HeaderName::from_bytes(h.as_bytes()).map_err(|e| format!("{h}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            url,
            method,
            response_headers,
            all_headers,
            client: client::build(None, !cfg.url.starts_with("http://"))?,
            cache: cfg.cache.map(|_| TtlCache::new(CACHED_ANSWERS)),
            failing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The headers copied from the auth answer.
    pub fn owned(&self) -> Vec<HeaderName> {
        self.response_headers.clone()
    }

    pub async fn check(&self, req: &Request<'_>) -> Result<(Passed, Outcome), Refusal> {
        let now = Instant::now();
        // Credentials given twice: the service and the upstream could read different ones.
        super::one_header(req.head, "authorization")?;
        // Kept only for requests that carry what the key names (a cookie, a token): an
        // anonymous answer is never reused for other anonymous requests.
        let key = match &self.cache {
            Some(c) => cache_key(c, &self.cfg.cache_key, req)?,
            None => None,
        };
        if let (Some(c), Some(k)) = (&self.cache, key) {
            if let Some(kept) = c.get(k, now) {
                return self
                    .kept(kept, req, Vec::new())
                    .map(|p| (p, Outcome::Cached));
            }
        }
        let started = Instant::now();
        let answer = client::exchange(
            &self.client,
            self.request(req)?,
            self.cfg.timeout,
            MAX_ANSWER_BODY,
        )
        .await;
        req.latency.observe(started.elapsed().as_secs_f64());
        self.note(&answer);
        let (parts, _) = match answer {
            Ok(a) => a,
            Err(Failure::TooLarge) => {
                return Err(Refusal::problem(
                    Problem::AuthFailed,
                    "The auth service's answer is over 64 KiB.",
                ))
            }
            Err(f) => {
                return Err(Refusal::problem(
                    Problem::AuthUnavailable,
                    format!("The auth service gave no answer ({f}); nothing passes without one."),
                ))
            }
        };
        let cookies: Vec<HeaderValue> = parts
            .headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .cloned()
            .collect();
        let status = parts.status.as_u16();
        let kept = match status {
            200..=299 if self.all_headers => Kept::Pass(Arc::new(
                parts
                    .headers
                    .iter()
                    .filter(|(h, _)| !NOT_COPIED.contains(&h.as_str()))
                    .map(|(h, v)| (h.clone(), v.clone()))
                    .collect(),
            )),
            200..=299 => Kept::Pass(Arc::new(
                self.response_headers
                    .iter()
                    .flat_map(|h| {
                        parts
                            .headers
                            .get_all(h)
                            .iter()
                            .map(move |v| (h.clone(), v.clone()))
                    })
                    .collect(),
            )),
            401 | 403 => Kept::Deny(
                status,
                parts.headers.get(http::header::WWW_AUTHENTICATE).cloned(),
            ),
            other => {
                return Err(Refusal::problem(
                    Problem::AuthFailed,
                    format!("The auth service answered {other}; only 2xx lets a request pass."),
                ))
            }
        };
        if let (Some(c), Some(k), Some(d)) = (&self.cache, key, self.cfg.cache) {
            c.insert(k, now + d, kept.clone(), now);
        }
        self.kept(kept, req, cookies).map(|p| (p, Outcome::Allowed))
    }

    /// One log line when the service stops answering, one when it answers again.
    fn note<T>(&self, answer: &Result<T, Failure>) {
        use std::sync::atomic::Ordering;
        match answer {
            Err(f @ (Failure::Timeout | Failure::Unreachable(_))) => {
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        event = "auth_service_unavailable",
                        url = %self.cfg.url,
                        error = %f,
                        "the auth service does not answer: its routes answer 503 until it does"
                    );
                }
            }
            _ => {
                if self.failing.swap(false, Ordering::AcqRel) {
                    tracing::warn!(event = "auth_service_recovered", url = %self.cfg.url, "the auth service answers again");
                }
            }
        }
    }

    /// A (fresh or kept) answer as the request's fate.
    fn kept(
        &self,
        kept: Kept,
        req: &Request<'_>,
        cookies: Vec<HeaderValue>,
    ) -> Result<Passed, Refusal> {
        match kept {
            Kept::Pass(headers) => Ok(Passed {
                headers: headers.as_ref().clone(),
                cookies,
                ..Passed::default()
            }),
            Kept::Deny(401, challenge) => match &self.cfg.signin {
                Some(signin) => Err(Refusal::SignIn {
                    location: sign_in(signin, req)?,
                    cookies,
                }),
                None => Err(Refusal::challenge(
                    Problem::Unauthenticated,
                    "The auth service did not accept the request's credentials.",
                    challenge.unwrap_or_else(|| HeaderValue::from_static("Bearer")),
                )),
            },
            Kept::Deny(_, _) => Err(Refusal::problem(
                Problem::Forbidden,
                "The auth service refused the request.",
            )),
        }
    }

    /// The auth request.
    fn request(&self, req: &Request<'_>) -> Result<http::Request<Empty<Bytes>>, Refusal> {
        let head = req.head;
        let uri = if self.cfg.append_path {
            appended(&self.url, req.path_and_query).ok_or_else(internal)?
        } else {
            self.url.clone()
        };
        let mut b = http::Request::builder()
            .method(self.method.clone().unwrap_or_else(|| head.method.clone()))
            .uri(uri);
        let headers = b.headers_mut().ok_or_else(internal)?;
        // A client's underscore spelling of a name the gateway states (`X_Original_URI`,
        // reaching here only with `underscores_in_headers = true`) is never passed either: a
        // service on CGI, WSGI, Rack or PHP reads it as the gateway's.
        let stated = |n: &str| {
            n.contains('_')
                && NOT_PASSED[FRAMING..]
                    .iter()
                    .any(|g| tollgate_core::filters::headers::underscore_spelling(n, g))
        };
        let passed = |name: &HeaderName| match &self.cfg.request_headers {
            Some(list) => {
                list.iter().any(|h| h == name.as_str())
                    && !NOT_PASSED[..FRAMING].contains(&name.as_str())
                    && !stated(name.as_str())
            }
            None => !NOT_PASSED.contains(&name.as_str()) && !stated(name.as_str()),
        };
        let mut crumbs: Vec<&[u8]> = Vec::new();
        for (name, value) in head.headers.iter() {
            if !passed(name) {
                continue;
            }
            if name == http::header::COOKIE {
                // HTTP/2 splits cookies into crumbs: one Cookie line for HTTP/1.1 (RFC 9113).
                crumbs.push(value.as_bytes());
            } else {
                headers.append(name.clone(), value.clone());
            }
        }
        if !crumbs.is_empty() {
            let joined = crumbs.join(&b"; "[..]);
            headers.insert(
                http::header::COOKIE,
                HeaderValue::from_bytes(&joined).map_err(|_| internal())?,
            );
        }
        let scheme = if req.secure { "https" } else { "http" };
        let host = req.host.unwrap_or_default();
        let url = format!("{scheme}://{host}{}", req.path_and_query);
        let client = req.client.to_string();
        let redirect = self
            .cfg
            .redirect
            .clone()
            .unwrap_or_else(|| req.path_and_query.to_string());
        let set = [
            ("x-original-url", url.as_str()),
            ("x-original-method", head.method.as_str()),
            ("x-original-uri", req.path_and_query),
            ("x-forwarded-for", client.as_str()),
            ("x-real-ip", client.as_str()),
            ("x-forwarded-proto", scheme),
            ("x-forwarded-host", host),
            ("x-forwarded-uri", req.path_and_query),
            ("x-forwarded-method", head.method.as_str()),
            ("x-auth-request-redirect", redirect.as_str()),
            ("x-request-id", req.request_id),
            ("x-sent-from", "tollgate"),
        ];
        for (name, value) in set {
            // What the service decides on is always stated: a value that cannot be a header
            // fails the request rather than leave the service to guess.
            let v = HeaderValue::from_str(value).map_err(|_| internal())?;
            headers.insert(HeaderName::from_static(name), v);
        }
        b.body(Empty::new()).map_err(|_| internal())
    }
}

fn internal() -> Refusal {
    Refusal::problem(Problem::Internal, "The auth request could not be made.")
}

/// `signin` with `rd=` the original URL (percent-encoded), unless it names `rd` itself. The
/// URL's host is the request's, made canonical as routing made it (the route's own host when
/// it names one): never a path or user part that would send the browser elsewhere.
fn sign_in(signin: &str, req: &Request<'_>) -> Result<HeaderValue, Refusal> {
    if signin.contains("?rd=") || signin.contains("&rd=") {
        return HeaderValue::from_str(signin).map_err(|_| internal());
    }
    let scheme = if req.secure { "https" } else { "http" };
    let host = req
        .host
        .ok_or_else(|| Refusal::problem(Problem::BadRequest, "The request names no host."))?;
    let original = format!("{scheme}://{host}{}", req.path_and_query);
    let rd: String = form_urlencoded::byte_serialize(original.as_bytes()).collect();
    let sep = if signin.contains('?') { '&' } else { '?' };
    HeaderValue::from_str(&format!("{signin}{sep}rd={rd}")).map_err(|_| internal())
}

/// A request's cache key: what the auth service is told the request is (route, method, host,
/// path and query) and each `cache_key` source's value. `None` when no `header:` or `query:`
/// source has a value: an anonymous answer is not kept. 400 when such a header is given twice
/// (cookies excepted: HTTP/2 splits them, and they are joined as the service gets them).
fn cache_key(
    c: &TtlCache<Kept>,
    sources: &[KeySource],
    req: &Request<'_>,
) -> Result<Option<u128>, Refusal> {
    let client = req.client.to_string();
    let mut parts: Vec<Vec<u8>> = vec![
        req.route_name.as_bytes().to_vec(),
        req.head.method.as_str().as_bytes().to_vec(),
        req.host.unwrap_or_default().as_bytes().to_vec(),
        req.path_and_query.as_bytes().to_vec(),
    ];
    let mut credentialed = false;
    for s in sources {
        let v: Vec<u8> = match s {
            KeySource::Header(h) if h == "cookie" => req
                .head
                .headers
                .get_all(h.as_str())
                .iter()
                .flat_map(|v| v.as_bytes().iter().copied().chain([0]))
                .collect(),
            KeySource::Header(h) => super::one_header(req.head, h)?
                .map(|v| v.as_bytes().to_vec())
                .unwrap_or_default(),
            KeySource::Query(q) => {
                form_urlencoded::parse(req.head.uri.query().unwrap_or("").as_bytes())
                    .filter(|(k, _)| k == q)
                    .flat_map(|(_, v)| v.as_bytes().to_vec().into_iter().chain([0]))
                    .collect()
            }
            KeySource::ClientIp => client.as_bytes().to_vec(),
            // Method, path, route, global: in every key already.
            _ => Vec::new(),
        };
        if matches!(s, KeySource::Header(_) | KeySource::Query(_)) && !v.is_empty() {
            credentialed = true;
        }
        parts.push(v);
    }
    Ok(credentialed.then(|| c.key(parts.iter().map(Vec::as_slice))))
}

#[cfg(test)]
mod tests {
    use super::appended;

    #[test]
    fn the_requests_path_goes_after_the_urls() {
        let at =
            |url: &str, pq: &str| appended(&url.parse().expect("url"), pq).map(|u| u.to_string());
        assert_eq!(
            at("http://authz:8080/check", "/api/x?id=7").as_deref(),
            Some("http://authz:8080/check/api/x?id=7")
        );
        assert_eq!(
            at("http://authz/check/", "/a").as_deref(),
            Some("http://authz/check/a")
        );
        assert_eq!(at("http://authz", "/a").as_deref(), Some("http://authz/a"));
        // The url's own query gives way to the request's path and query.
        assert_eq!(
            at("http://authz/c?x=1", "/a").as_deref(),
            Some("http://authz/c/a")
        );
    }
}
