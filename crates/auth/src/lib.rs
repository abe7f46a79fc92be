//! Authentication at the edge (docs/auth.md): each `[auth.NAME]` table (or a route's inline
//! `auth`) compiled once per runtime into an [`AuthRt`], its caches and clients carried over a
//! reload that leaves it unchanged. The request stage is `tollgate_proxy::stages::auth`.
//!
//! One method per auth: [`bearer`] (required or optional JWTs, their claims, claims sent
//! upstream), [`forward`] (an auth service asked per request), [`basic`] (htpasswd users) and
//! [`api_key`] (consumers' keys). Each answers [`Passed`] (with what goes upstream) or a
//! [`Refusal`]; no method ever lets a request pass because something failed.

pub mod api_key;
pub mod basic;
pub mod bearer;
pub mod cache;
pub mod family;
pub mod forward;
pub mod htpasswd;
pub mod jwks;
pub mod jwt;

use http::{HeaderName, HeaderValue};
use pingora::http::RequestHeader;
use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use tollgate_config::model::{AuthConfig, AuthMethod};
use tollgate_core::respond::Problem;

/// The results `tollgate_auth_total` counts, in the order of [`RouteAuth::counts`].
pub const RESULTS: [&str; 6] = [
    "allowed",
    "anonymous",
    "cached",
    "unauthenticated",
    "forbidden",
    "error",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Credentials checked now.
    Allowed = 0,
    /// No credentials, and the route lets such requests pass (`jwt = "optional"`).
    Anonymous = 1,
    /// Credentials checked before, the answer reused.
    Cached = 2,
    /// No credentials, or ones that do not verify (401, or the sign-in redirect).
    Unauthenticated = 3,
    /// Verified, but not allowed here (403).
    Forbidden = 4,
    /// The auth service failed (500, 503), or the request is ambiguous (400).
    Error = 5,
}

/// What a request that passed carries on.
#[derive(Debug, Default)]
pub struct Passed {
    /// The consumer limits keyed by `consumer` count (an API key's consumer, a basic user).
    pub consumer: Option<Arc<str>>,
    /// The verified token's claims (`jwt` auth): limits keyed by `jwt:` claims read them
    /// without verifying again.
    pub claims: Option<Arc<crate::jwt::Claims>>,
    /// Headers set on the upstream request (after the client's copies of every header the
    /// auth owns are removed).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `Set-Cookie` values of an auth service's answer, for the client's response.
    pub cookies: Vec<HeaderValue>,
}

/// Why a request does not pass, and the answer it gets.
#[derive(Debug)]
pub enum Refusal {
    Problem {
        problem: Problem,
        detail: Cow<'static, str>,
        /// `WWW-Authenticate` for a 401 (or a 403 with `insufficient_scope`).
        challenge: Option<HeaderValue>,
    },
    /// 302 to the sign-in page (forward auth's `signin` on a 401).
    SignIn {
        location: HeaderValue,
        cookies: Vec<HeaderValue>,
    },
}

impl Refusal {
    pub fn problem(problem: Problem, detail: impl Into<Cow<'static, str>>) -> Self {
        Refusal::Problem {
            problem,
            detail: detail.into(),
            challenge: None,
        }
    }

    pub fn challenge(
        problem: Problem,
        detail: impl Into<Cow<'static, str>>,
        challenge: HeaderValue,
    ) -> Self {
        Refusal::Problem {
            problem,
            detail: detail.into(),
            challenge: Some(challenge),
        }
    }

    /// The metric's result.
    pub fn outcome(&self) -> Outcome {
        match self {
            Refusal::SignIn { .. } => Outcome::Unauthenticated,
            Refusal::Problem { problem, .. } => match problem.status() {
                401 => Outcome::Unauthenticated,
                403 => Outcome::Forbidden,
                _ => Outcome::Error,
            },
        }
    }
}

/// What a method reads of the request.
pub struct Request<'a> {
    pub head: &'a RequestHeader,
    /// The client, through trusted proxies.
    pub client: IpAddr,
    pub secure: bool,
    /// The canonical path the route matched (the client's spelling made canonical), with
    /// the client's query, bytes outside visible ASCII percent-encoded: what the auth service
    /// is told the request is for (empty for the methods that ask no service).
    pub path_and_query: &'a str,
    /// The request's host as routing made it canonical (lower case, no trailing dot; an IPv6
    /// address in brackets), with the port the client named; `None` without one (and for the
    /// methods that ask no service).
    pub host: Option<&'a str>,
    pub request_id: &'a str,
    /// The route's name (stable across reloads, unlike its position).
    pub route_name: &'a str,
    pub metrics: &'a tollgate_core::observe::metrics::Metrics,
    /// `tollgate_auth_service_seconds` for this route.
    pub latency: &'a prometheus::Histogram,
}

/// The headers Kong's auth plugins name a consumer in (key-auth, basic-auth, jwt, oauth2,
/// OIDC, acl; `X-Credential-Username` is Kong 2's): a client's own copies are removed on every
/// route with auth (an upstream moved from Kong trusts them), and basic and api_key auth set
/// the first two.
pub const CONSUMER_HEADERS: [&str; 11] = [
    "x-consumer-username",
    "x-credential-identifier",
    "x-consumer-id",
    "x-consumer-custom-id",
    "x-anonymous-consumer",
    "x-consumer-groups",
    "x-authenticated-groups",
    "x-credential-username",
    "x-authenticated-userid",
    "x-authenticated-scope",
    "x-userinfo",
];

/// `X-Consumer-Username`.
pub fn consumer_username() -> HeaderName {
    HeaderName::from_static(CONSUMER_HEADERS[0])
}

/// `X-Credential-Identifier`.
pub fn credential_identifier() -> HeaderName {
    HeaderName::from_static(CONSUMER_HEADERS[1])
}

fn consumer_headers() -> impl Iterator<Item = HeaderName> {
    CONSUMER_HEADERS.iter().map(|h| HeaderName::from_static(h))
}

/// One compiled auth.
pub struct AuthRt {
    pub cfg: AuthConfig,
    pub method: Method,
    /// Headers this auth writes upstream, or keeps from it (a credential the gateway checked):
    /// the client's copies, in every spelling, are always removed first.
    pub owned: Vec<HeaderName>,
    /// A query parameter a credential was read from: removed from the upstream's target, in
    /// every spelling the gateway counts as it (`hide_credentials`).
    pub strip_query: Option<String>,
}

pub enum Method {
    Bearer(bearer::BearerRt),
    Forward(Box<forward::ForwardRt>),
    Basic(basic::BasicRt),
    ApiKey(api_key::ApiKeyRt),
}

impl AuthRt {
    /// `jwt_header`: `[jwt] header`, where bearer tokens come from.
    pub fn build(cfg: &AuthConfig, jwt_header: &str) -> Result<Self, String> {
        let mut strip_query = None;
        let (method, owned) = match &cfg.method {
            AuthMethod::Jwt(j) => {
                let b = bearer::BearerRt::new(j, jwt_header)?;
                let owned = consumer_headers().chain(b.owned()).collect();
                (Method::Bearer(b), owned)
            }
            AuthMethod::Forward(f) => {
                let fr = forward::ForwardRt::new(f)?;
                let owned = consumer_headers().chain(fr.owned()).collect();
                (Method::Forward(Box::new(fr)), owned)
            }
            AuthMethod::Basic(b) => {
                let mut owned: Vec<HeaderName> = consumer_headers().collect();
                // The credentials stop here by default: the upstream never sees a password.
                if b.hide_credentials {
                    owned.push(http::header::AUTHORIZATION);
                }
                (Method::Basic(basic::BasicRt::new(b)), owned)
            }
            AuthMethod::ApiKey(k) => {
                let mut owned: Vec<HeaderName> = consumer_headers().collect();
                if k.hide_credentials {
                    if let Some(h) = &k.header {
                        owned.push(
                            HeaderName::from_bytes(h.as_bytes())
                                .map_err(|e| format!("api_key.header: {h}: {e}"))?,
                        );
                    }
                    strip_query = k.query.clone();
                }
                (Method::ApiKey(api_key::ApiKeyRt::new(k)), owned)
            }
        };
        Ok(Self {
            cfg: cfg.clone(),
            method,
            owned,
            strip_query,
        })
    }

    /// [`AuthRt::check`] for `tollgate explain`: nothing cached or counted (basic auth's
    /// password is verified apart from the live checks); an auth service is never asked
    /// (`None`).
    pub async fn check_dry(
        &self,
        req: &Request<'_>,
        jwt: Option<&crate::jwt::Verifier>,
    ) -> Option<Result<(Passed, Outcome), Refusal>> {
        match &self.method {
            Method::Bearer(b) => Some(b.check(req, jwt).await),
            Method::Forward(_) => None,
            Method::Basic(b) => Some(b.check_dry(req).await),
            Method::ApiKey(k) => Some(k.check(req)),
        }
    }

    /// Checks the request.
    pub async fn check(
        &self,
        req: &Request<'_>,
        jwt: Option<&crate::jwt::Verifier>,
    ) -> Result<(Passed, Outcome), Refusal> {
        match &self.method {
            Method::Bearer(b) => b.check(req, jwt).await,
            Method::Forward(f) => f.check(req).await,
            Method::Basic(b) => b.check(req).await,
            Method::ApiKey(k) => k.check(req),
        }
    }
}

/// The one value of header `name`: `Ok(None)` when absent, a 400 when given twice (the gateway
/// and the upstream could read different ones), its underscore spelling counting as a second
/// copy (CGI, WSGI, Rack and PHP read `X_API_Key` as `X-API-Key`; such names reach here only
/// with `[server] underscores_in_headers = true`).
pub fn one_header<'a>(
    head: &'a RequestHeader,
    name: &str,
) -> Result<Option<&'a HeaderValue>, Refusal> {
    let mut all = head.headers.get_all(name).iter();
    let first = all.next();
    let twice = all.next().is_some()
        || (name.contains('-')
            && head
                .headers
                .keys()
                .any(|k| tollgate_core::filters::headers::underscore_spelling(k.as_str(), name)));
    if twice {
        return Err(Refusal::problem(
            Problem::AmbiguousRequest,
            format!("The header {name} is given more than once (or in another spelling); this route reads it to authenticate the caller, so it must be given once."),
        ));
    }
    Ok(first)
}
