//! `bare-pingora LISTEN UPSTREAM`: Pingora's HTTP proxy with nothing of its own (no filters,
//! no headers, no metrics, no logging), one worker thread, keep-alive to one upstream. It is
//! the floor Tollgate's request path stands on: bench/ runs it beside Tollgate so every report
//! shows Tollgate's own cost over its framework. Built with the same vendored Pingora (the
//! patches in vendor/patches) and the same allocator as Tollgate.

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
    let mut proxy = http_proxy_service(&server.configuration, Bare { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.run_forever();
}
