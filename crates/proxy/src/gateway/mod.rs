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

impl Gateway {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The runtime a new request is decided under.
    pub(crate) fn runtime(&self) -> Arc<Runtime> {
        self.shared.runtime.load_full()
    }
}
