//! The gateway: [`Gateway`], Pingora's `ProxyHttp` type, and its phases, one file each
//! ([`proxy_http`] lists them). The request phase's work is the stages ([`crate::stages`]);
//! the answers the stages and the phases write are [`crate::edge`].

mod error_pages;
mod errors;
mod logging;
mod mirror;
mod peer;
pub mod proxy_http;
mod request_body;
mod response;
mod retry;
mod upstream_request;

use crate::runtime::Runtime;
use crate::shared::Shared;
use std::sync::Arc;

pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
}

/// The client's path and query as sent, less an API key the route's auth reads from the
/// query (`hide_credentials`): what a mirror or an error page may be told of it.
pub(crate) fn shown_target<'a>(
    ctx: &crate::ctx::Ctx,
    req: &'a pingora::http::RequestHeader,
) -> std::borrow::Cow<'a, str> {
    let raw = req.uri.path_and_query().map_or("/", |p| p.as_str());
    let stripped = ctx
        .auth
        .as_ref()
        .and_then(|a| a.rt.strip_query.as_deref())
        .and_then(|q| tollgate_auth::api_key::strip_param(raw.as_bytes(), q))
        .and_then(|t| String::from_utf8(t).ok());
    match stripped {
        Some(s) => std::borrow::Cow::Owned(s),
        None => std::borrow::Cow::Borrowed(raw),
    }
}

impl Gateway {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The runtime a new request is decided under.
    pub(crate) fn runtime(&self) -> Arc<Runtime> {
        self.shared.runtime.load_full()
    }
}
