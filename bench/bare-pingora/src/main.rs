//! `bare-pingora LISTEN UPSTREAM [REFUSE_PREFIX]`: Pingora's HTTP proxy with nothing of its own
//! (no headers, no metrics, no logging), one worker thread, keep-alive to one upstream. It is
//! the floor Tollgate's request path stands on: bench/ runs it beside Tollgate so every report
//! shows Tollgate's own cost over its framework. With REFUSE_PREFIX, a request whose path
//! starts with it is answered 429 in `request_filter`, a head with no body written by
//! Pingora's `write_response_header` on the kept-alive connection (no limiter): the floor
//! for a refusal. Built with the same vendored Pingora (the
//! patches in vendor/patches), the same allocator and the same header-case setting as
//! Tollgate (`BARE_PRESERVE_HEADER_CASE=1` for Pingora's default).

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

#[path = "../../../gateway/src/alloc.rs"]
mod alloc;

#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;

struct Bare {
    upstream: String,
    refuse_prefix: Option<String>,
    preserve_case: bool,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) -> Self::CTX {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let Some(prefix) = &self.refuse_prefix else {
            return Ok(false);
        };
        if !session.req_header().uri.path().starts_with(prefix.as_str()) {
            return Ok(false);
        }
        // respond_error would close the connection; a refusal keeps it, as Tollgate's does.
        // No case map and a static name: the cheapest head Pingora can write.
        let mut resp = ResponseHeader::build_no_case(429, Some(1))?;
        resp.insert_header(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from_static("0"),
        )?;
        session.write_response_header(Box::new(resp), true).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream.as_str(), false, String::new());
        peer.options.preserve_response_header_case = self.preserve_case;
        Ok(Box::new(peer))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!(
            "usage: bare-pingora LISTEN UPSTREAM [REFUSE_PREFIX]   (e.g. 127.0.0.1:8081 127.0.0.1:9000 /d)"
        );
        std::process::exit(2);
    };
    let conf = ServerConf {
        threads: 1,
        work_stealing: false,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let refuse_prefix = args.next();
    // Tollgate's default (server.preserve_header_case = false), for requests and responses;
    // BARE_PRESERVE_HEADER_CASE=1 gives Pingora's own (a second header map per head).
    let preserve_case = std::env::var_os("BARE_PRESERVE_HEADER_CASE").is_some();
    let bare = Bare {
        upstream,
        refuse_prefix,
        preserve_case,
    };
    let mut app = pingora::proxy::http_proxy(&server.configuration, bare);
    let mut opts = pingora::apps::HttpServerOptions::default();
    opts.preserve_header_case = Some(preserve_case);
    app.server_options = Some(opts);
    let mut proxy = pingora::services::listening::Service::new("bare".to_string(), app);
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.run_forever();
}
