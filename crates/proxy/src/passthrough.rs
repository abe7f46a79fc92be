//! `[[tls_passthrough]]` (docs/tls.md): on the TLS listeners, a connection whose ClientHello
//! names a passed-through host is relayed as it is, unread, to a target of its upstream, as
//! ingress-nginx's `ssl-passthrough` does in its TCP front; every other connection gets its
//! handshake as before.
//!
//! The ClientHello is read by rustls's own parser (`rustls::server::Acceptor`), never by hand,
//! within the handshake's deadline (`header_timeout`) and at most [`HELLO_MAX`] bytes; the
//! bytes read are put back for the handshake, or sent first to the upstream. A config without
//! passed-through hosts reads nothing. What is relayed is the client's TLS: nothing of the
//! gateway's routes, limits, access lists or auth applies to it (the host's other routes are
//! still served over plain HTTP).

use crate::shared::Shared;
use async_trait::async_trait;
use pingora::listeners::{PreTlsProcess, TakenBy};
use pingora::protocols::l4::stream::Stream as L4Stream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most read of a ClientHello before giving up on its name (a record is at most 16 KiB).
const HELLO_MAX: usize = 18 << 10;

/// The pre-TLS front of the TLS listeners.
pub struct Front {
    shared: Arc<Shared>,
}

impl Front {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// The upstream (index) `name` is passed through to, if any: an exact host, else a wildcard
/// of one label.
pub fn passed_to(passthrough: &[tollgate_config::model::Passthrough], name: &str) -> Option<usize> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let wild = name.split_once('.').map(|(_, rest)| format!("*.{rest}"));
    passthrough
        .iter()
        .find(|p| p.hosts.contains(&name))
        .or_else(|| {
            let w = wild.as_ref()?;
            passthrough.iter().find(|p| p.hosts.contains(w))
        })
        .map(|p| p.upstream)
}

/// Reads the ClientHello: the bytes read and the name it asks for, if it is one.
async fn read_hello(s: &mut L4Stream) -> std::io::Result<(Vec<u8>, Option<String>)> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    while buf.len() < HELLO_MAX {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut rd = &chunk[..n];
        while !rd.is_empty() {
            match acceptor.read_tls(&mut rd) {
                Ok(0) | Err(_) => return Ok((buf, None)),
                Ok(_) => {}
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted.client_hello().server_name().map(str::to_string);
                return Ok((buf, name));
            }
            Ok(None) => continue,
            Err(_) => return Ok((buf, None)),
        }
    }
    Ok((buf, None))
}

#[async_trait]
impl PreTlsProcess for Front {
    async fn process(&self, _stream: &mut L4Stream) -> pingora::Result<()> {
        Ok(())
    }

    async fn take(&self, stream: &mut L4Stream) -> pingora::Result<Option<TakenBy>> {
        let rt = self.shared.runtime.load();
        if rt.config.tls_passthrough.is_empty() {
            return Ok(None);
        }
        let (hello, name) = match read_hello(stream).await {
            Ok(h) => h,
            Err(e) => {
                return Err(pingora::Error::because(
                    pingora::ErrorType::ReadError,
                    "reading the ClientHello",
                    e,
                ))
            }
        };
        let up = name
            .as_deref()
            .and_then(|n| passed_to(&rt.config.tls_passthrough, n));
        let Some(u) = up else {
            stream.rewind(&hello);
            return Ok(None);
        };
        let upstream = &rt.upstreams[u];
        let target = upstream
            .pool
            .select_peer()
            .and_then(|p| p._address.as_inet().copied());
        let connect_timeout = upstream.pool.config().connect_timeout;
        let metrics = self.shared.metrics.passthrough.clone();
        let name: Arc<str> = upstream.pool.name().into();
        Ok(Some(Box::new(move |client| {
            Box::pin(relay(client, hello, target, connect_timeout, name, metrics))
        })))
    }
}

/// The connection relayed both ways until either side ends it.
async fn relay(
    mut client: L4Stream,
    hello: Vec<u8>,
    target: Option<SocketAddr>,
    connect_timeout: Duration,
    upstream: Arc<str>,
    metrics: prometheus::IntCounterVec,
) {
    let count = |result: &str| metrics.with_label_values(&[&upstream, result]).inc();
    let Some(addr) = target else {
        count("unreachable");
        return;
    };
    let connected =
        tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr)).await;
    let mut server = match connected {
        Ok(Ok(s)) => s,
        _ => {
            count("unreachable");
            return;
        }
    };
    let _ = server.set_nodelay(true);
    if server.write_all(&hello).await.is_err() {
        count("unreachable");
        return;
    }
    count("relayed");
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_config::model::Passthrough;

    #[test]
    fn names_are_matched_as_routes_match_hosts() {
        let p = [
            Passthrough {
                hosts: vec!["secure.example.com".into()],
                upstream: 0,
            },
            Passthrough {
                hosts: vec!["*.vault.example".into()],
                upstream: 1,
            },
        ];
        assert_eq!(passed_to(&p, "secure.example.com"), Some(0));
        assert_eq!(passed_to(&p, "SECURE.example.com."), Some(0));
        assert_eq!(passed_to(&p, "a.vault.example"), Some(1));
        assert_eq!(
            passed_to(&p, "vault.example"),
            None,
            "a wildcard is one label"
        );
        assert_eq!(passed_to(&p, "a.b.vault.example"), None);
        assert_eq!(passed_to(&p, "example.com"), None);
    }
}
