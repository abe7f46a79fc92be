//! `[server]` and `[server.hardening]`: listeners, trusted proxies, timeouts and request hardening.

use super::edge::HeaderRules;
use ipnet::IpNet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: Vec<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub threads: usize,
    /// Peers whose X-Forwarded-For is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// IPv6 clients are keyed by this prefix length.
    pub ipv6_prefix: u8,
    /// Every limit in shadow mode.
    pub shadow: bool,
    pub grace_period: Duration,
    /// Bearer token the admin listener requires for `/blocks` (none: that API is off).
    pub admin_token: Option<String>,
    /// Unix socket Pingora hands listeners over on `--upgrade`.
    pub upgrade_sock: PathBuf,
    /// Accept HTTP/2 with prior knowledge (h2c) on plaintext listeners.
    pub h2c: bool,
    /// One structured log line per request.
    pub access_log: bool,
    /// The access log also names each request's host and canonical path (never its query):
    /// what `tollgate simulate` needs to replay this gateway's own log. Off by default: a
    /// path can carry an identity.
    pub access_log_paths: bool,
    /// Also send X-RateLimit-Limit / -Remaining / -Reset (for clients that expect them).
    pub legacy_headers: bool,
    /// Keep HTTP/1 request header names' case toward the upstream (a second header map per
    /// request); otherwise they go as HTTP/2 requests' do (standard names in their usual case,
    /// others lower-case), as Envoy and HAProxy send them.
    pub preserve_header_case: bool,
    /// Keep request headers whose names hold `_`. Off (nginx's `underscores_in_headers off`):
    /// they are dropped before anything reads them, as CGI, WSGI, Rack and PHP read
    /// `X_Real_IP` as `X-Real-IP`. On: every header the gateway writes upstream also removes
    /// the client's underscore spellings of its name.
    pub underscores_in_headers: bool,
    /// The largest request body read for `body:FIELD` keys (bytes; at most 64 KiB, which
    /// Pingora can replay to the upstream).
    pub key_body_limit: usize,
    /// Deadlines and bounds on connections, and path canonicalisation.
    pub hardening: Hardening,
    /// TLS listeners (HTTP/1.1 and h2 by ALPN); their certificates are `[tls]`.
    pub tls_listen: Vec<SocketAddr>,
    /// Plaintext requests get 308 to https:// (routes may say otherwise).
    pub https_redirect: bool,
    /// The port redirects name; default: the first `tls_listen` port (443 is left out).
    pub https_port: Option<u16>,
    /// A request whose host some route names is matched against that host's routes only
    /// (unmatched: 404); with `host_fallthrough = true`, routes without a host are tried next.
    pub host_fallthrough: bool,
    /// The request body cap of routes that set none (0: none; docs/edge.md).
    pub max_body_bytes: u64,
    /// Header rules every route applies before its own (docs/edge.md).
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
}

/// `[server]`'s edge-hardening keys (docs/hardening.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Hardening {
    /// The whole request head (and the h2c preface) must arrive within it.
    pub header_timeout: Duration,
    /// A kept-alive HTTP/1 connection without a next request, or an h2 connection without an
    /// open stream, is closed after it.
    pub idle_timeout: Duration,
    /// Between reads of a request body; `min_body_rate` applies once a body has been
    /// arriving for longer.
    pub body_timeout: Duration,
    /// The longest one write of an answer to the client may wait (a client that stops
    /// reading is cut off after it).
    pub send_timeout: Duration,
    /// Bytes per second.
    pub min_body_rate: u64,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    /// Per process.
    pub max_connections: usize,
    /// Per client address (IPv6 by `ipv6_prefix`); 0: no bound.
    pub max_connections_per_client: usize,
    pub max_h2_streams: usize,
    pub merge_slashes: bool,
    pub escaped_slashes: EscapedSlashes,
}

/// What an encoded `/` or `\` (`%2F`, `%5C`) in a request path becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// 400.
    Reject,
    /// Kept encoded, inside its segment.
    Keep,
    /// A `/` that separates segments.
    Decode,
}

impl ServerConfig {
    pub(super) fn restart_only_changes(&self, new: &Self, changed: &mut Vec<&'static str>) {
        let ServerConfig {
            // Read at start: listeners, the admin listener, worker threads, h2c, the case
            // maps, the drain and upgrade settings.
            listen,
            admin,
            threads,
            grace_period,
            upgrade_sock,
            h2c,
            preserve_header_case,
            tls_listen,
            hardening,
            // Read per request or per connection from the current runtime: a reload changes
            // them at once.
            trusted_proxies: _,
            ipv6_prefix: _,
            shadow: _,
            admin_token: _,
            access_log: _,
            access_log_paths: _,
            legacy_headers: _,
            key_body_limit: _,
            underscores_in_headers: _,
            https_redirect: _,
            https_port: _,
            host_fallthrough: _,
            max_body_bytes: _,
            request_headers: _,
            response_headers: _,
        } = self;
        let mut check = |key, same: bool| {
            if !same {
                changed.push(key);
            }
        };
        check("server.listen", *listen == new.listen);
        check("server.tls_listen", *tls_listen == new.tls_listen);
        check("server.admin", *admin == new.admin);
        check("server.threads", *threads == new.threads);
        check("server.h2c", *h2c == new.h2c);
        check(
            "server.preserve_header_case",
            *preserve_header_case == new.preserve_header_case,
        );
        check("server.grace_period", *grace_period == new.grace_period);
        check("server.upgrade_sock", *upgrade_sock == new.upgrade_sock);
        check(
            "server.header_timeout, idle_timeout, max_header_bytes, max_headers, max_h2_streams",
            hardening.listener_settings() == new.hardening.listener_settings(),
        );
    }
}

impl Hardening {
    /// What Pingora's listeners and h2 settings read at start; the rest applies at once.
    fn listener_settings(&self) -> (Duration, Duration, usize, usize, usize) {
        let Hardening {
            header_timeout,
            idle_timeout,
            max_header_bytes,
            max_headers,
            max_h2_streams,
            // Read per request or per connection: a reload changes them at once.
            body_timeout: _,
            send_timeout: _,
            min_body_rate: _,
            max_connections: _,
            max_connections_per_client: _,
            merge_slashes: _,
            escaped_slashes: _,
        } = self;
        (
            *header_timeout,
            *idle_timeout,
            *max_header_bytes,
            *max_headers,
            *max_h2_streams,
        )
    }
}
