//! `bare-pingora LISTEN UPSTREAM`: Pingora's HTTP proxy with nothing of its own (no filters,
//! no headers, no metrics, no logging), one worker thread, keep-alive to one upstream. It is
//! the floor Tollgate's request path stands on: bench/ runs it beside Tollgate so every report
//! shows Tollgate's own cost over its framework. Built with the same vendored Pingora (the
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
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) -> Self::CTX {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: bare-pingora LISTEN UPSTREAM   (e.g. 127.0.0.1:8081 127.0.0.1:9000)");
        std::process::exit(2);
    };
    let conf = ServerConf {
        threads: 1,
        work_stealing: false,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut app = pingora::proxy::http_proxy(&server.configuration, Bare { upstream });
    // Tollgate's default (server.preserve_header_case = false); BARE_PRESERVE_HEADER_CASE=1
    // gives Pingora's own (a second header map per request).
    let mut opts = pingora::apps::HttpServerOptions::default();
    opts.preserve_header_case = Some(std::env::var_os("BARE_PRESERVE_HEADER_CASE").is_some());
    app.server_options = Some(opts);
    let mut proxy = pingora::services::listening::Service::new("bare".to_string(), app);
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.run_forever();
}
