//! The request phases: Pingora's `ProxyHttp` for [`Gateway`], each phase one call into its
//! file (as river keeps them):
//! - `request_filter`: the stages ([`crate::stages`]): route, access, CORS, auth, limits,
//!   the route's answer or its upstream. Answers written there end the request.
//! - `upstream_peer`: [`super::peer`];
//! - `upstream_request_filter`: [`super::upstream_request`];
//! - `request_body_filter`: [`super::request_body`];
//! - `fail_to_connect`, `error_while_proxy`, `upstream_response_filter`: [`super::retry`];
//! - `response_filter`, `response_body_filter`: [`super::error_pages`], then
//!   [`super::response`];
//! - `invalid_request_response`, `fail_to_proxy`: [`super::errors`];
//! - `request_summary`, `logging`: [`super::logging`].

use super::Gateway;
use crate::ctx::Ctx;
use crate::inbound::client_gone;
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::FailToProxy;
use pingora::ErrorSource;

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    /// No downstream modules: Pingora's default adds a disabled compression module that every
    /// request still walks through. Tollgate does not compress; the upstream does. (Edge
    /// answers over HTTP/1 are written past the modules: add one here, and `answer` must take
    /// the header map path.)
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    fn new_ctx(&self) -> Ctx {
        Ctx::new()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        crate::stages::run(self, session, ctx).await
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        super::peer::upstream_peer(self, session, ctx).await
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut Ctx,
        e: Box<Error>,
    ) -> Box<Error> {
        super::retry::fail_to_connect(self, peer, ctx, e)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        super::retry::error_while_proxy(self, peer, session, e, ctx, client_reused)
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // A head that came after the route's request timeout (one dripped in reads that
        // each kept within it): 504, not the late answer.
        if super::errors::past_deadline(ctx) {
            return Err(super::errors::past_deadline_error());
        }
        super::retry::upstream_response_filter(self, session, resp, ctx)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        super::upstream_request::upstream_request_filter(self, session, upstream, ctx)
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // `error_pages`: a listed status is answered by the page instead (its body follows
        // in place of the upstream's).
        if super::error_pages::wanted_for_upstream(ctx, resp.status.as_u16()) {
            // Boxed: the page's exchange would otherwise be part of every answer's future.
            Box::pin(super::error_pages::replace(self, session, resp, ctx)).await?;
        }
        super::response::response_filter(self, session, resp, ctx)
    }

    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<std::time::Duration>> {
        if let Some(page) = ctx.page.as_deref_mut() {
            // The page goes once, in place of the upstream's first piece; the rest is dropped.
            *body = page.body.take();
        }
        super::response::response_body_filter(self, session, body, end_of_stream, ctx)
    }

    async fn request_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        super::request_body::request_body_filter(self, session, body, end_of_stream, ctx)
    }

    fn request_summary(&self, session: &Session, ctx: &Ctx) -> String {
        super::logging::request_summary(self, session, ctx)
    }

    fn invalid_request_response(
        &self,
        status: u16,
        _error: &Error,
    ) -> Option<(ResponseHeader, Bytes)> {
        super::errors::invalid_request_response(self, status)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        super::errors::fail_to_proxy(self, session, e, ctx).await
    }

    /// A client that left, stopped reading or dripped its body is the client's doing, not
    /// the gateway's: its request line carries the error, and Pingora's ERROR line is not
    /// written (a client could otherwise fill the log with them at will).
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, e: &Error) -> bool {
        (*e.esource() == ErrorSource::Downstream
            && (client_gone(e.etype()) || *e.etype() == ErrorType::ReadTimedout))
            || super::error_pages::is_page_instead(e)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        super::logging::logging(self, session, e, ctx)
    }
}
