//! `[auth.NAME]` and a route's `auth`: JWT, forward auth, basic auth and API keys.

use super::limits::KeySource;
use std::path::PathBuf;
use std::time::Duration;

/// One authentication (`[auth.NAME]` or a route's `auth = { ... }`): exactly one method.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthConfig {
    /// The table's name, or the route's for an inline table (metrics' `route` label is the
    /// route's either way).
    pub name: String,
    pub method: AuthMethod,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AuthMethod {
    Jwt(JwtAuth),
    Forward(ForwardAuth),
    Basic(BasicAuth),
    ApiKey(ApiKeyAuth),
}

impl AuthMethod {
    /// The `method` label of `tollgate_auth_total`.
    pub fn label(&self) -> &'static str {
        match self {
            AuthMethod::Jwt(_) => "jwt",
            AuthMethod::Forward(_) => "forward",
            AuthMethod::Basic(_) => "basic",
            AuthMethod::ApiKey(_) => "api_key",
        }
    }
}

/// `jwt = "required" | "optional"` with its `claims` and `forward_claims`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtAuth {
    /// `required`: no token is 401. `optional`: no token passes (without claims); a token
    /// that does not verify, or lacks the claims, is refused either way.
    pub required: bool,
    pub claims: Vec<ClaimRule>,
    /// (claim, header): the claim's value sent upstream in the header (lower case); a
    /// client's own copies of the header are removed first.
    pub forward_claims: Vec<(String, String)>,
    /// The bearer token goes on to the upstream (default; Envoy jwt_authn's `forward`).
    pub forward_token: bool,
}

/// A claim the token must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRule {
    /// `scope` / `scp`: every listed scope among the token's (a space-separated string or an
    /// array of strings).
    Scopes { claim: String, all: Vec<String> },
    /// Any other claim: its value (a string, number or boolean, or an array holding one) is
    /// one of these.
    OneOf { claim: String, any: Vec<String> },
}

/// `forward = { url, ... }`: an auth service asked per request (or its cache entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// `http://` or `https://` URL, as written.
    pub url: String,
    /// The auth request's method; `None`: the client's.
    pub method: Option<String>,
    /// Client headers sent to the auth service (lower case); `None`: every end-to-end header
    /// of the request (ingress-nginx and Traefik's default). The body never is.
    pub request_headers: Option<Vec<String>>,
    /// Headers of the auth service's 2xx answer copied onto the upstream request (lower case);
    /// `["*"]`: every one but its framing, host and representation fields.
    pub response_headers: Vec<String>,
    /// The auth request's path is `url`'s followed by the request's path and query (Envoy
    /// ext_authz's `path_prefix`, the Gateway API's ExternalAuth).
    pub append_path: bool,
    /// Where a 401 sends the client instead (302 with `rd=` the original URL).
    pub signin: Option<String>,
    /// `X-Auth-Request-Redirect` sent to the auth service; `None`: the request's URI.
    pub redirect: Option<String>,
    pub timeout: Duration,
    /// How long an answer is reused; `None`: never.
    pub cache: Option<Duration>,
    /// What identifies a cache entry: key sources (`header:NAME`, `query:NAME`, `client_ip`,
    /// `path`, `method`, `route`).
    pub cache_key: Vec<KeySource>,
}

/// `basic = { htpasswd, realm }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    pub file: PathBuf,
    /// (user, hash) as the file holds them, every hash in a format that can be verified.
    pub users: Vec<(String, String)>,
    pub realm: String,
    /// The `Authorization` header is removed before the upstream (default).
    pub hide_credentials: bool,
    /// Hashes that verify but are weak (warned about at load, by file and line).
    pub weak: Vec<WeakHash>,
}

/// A weak password hash: where it is (`FILE line N`, or `DIR/USER`) and why it is weak, never
/// the hash itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeakHash {
    pub at: String,
    pub why: String,
}

/// `api_key = { header | query, keys_file }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyAuth {
    /// Lower case.
    pub header: Option<String>,
    pub query: Option<String>,
    pub file: PathBuf,
    /// (consumer, key).
    pub keys: Vec<(String, String)>,
    /// The key (header and query parameter, every spelling taken) is removed before the
    /// upstream (default).
    pub hide_credentials: bool,
}
