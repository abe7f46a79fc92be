//! What a route does to a request and its answer at the edge besides deciding it
//! (docs/edge.md): header rules both ways, the upstream's Host and X-Forwarded-Prefix, CORS
//! fields, compression and bandwidth. A route with none of them has no [`ShapingRt`], and
//! its requests no [`ShapingCtx`]: each check below is one `None`.
//!
//! The request body cap is not here: it is a plain number on every route (a server
//! default applies to all), checked by the body stage and in `request_body_filter`.

use crate::filters::cors::{Allowed, CorsRt};

use crate::filters::headers::{RulesRt, Vars};
use http::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::protocols::http::compression::ResponseCompressionCtx;
use std::time::{Duration, Instant};
use tollgate_config::model::{Config, Rewrite, RouteConfig, COMPRESS_MIN_BYTES};

/// A route's edge behaviour, compiled.
#[derive(Debug)]
pub struct ShapingRt {
    pub request_rules: Option<Box<RulesRt>>,
    pub response_rules: Option<Box<RulesRt>>,
    pub cors: Option<CorsRt>,
    pub upstream_host: Option<HeaderValue>,
    pub forwarded_prefix: Option<HeaderValue>,
    pub compress: bool,
    /// Bytes per second (0: none) after `rate_after` bytes.
    pub rate: u64,
    pub rate_after: u64,
    /// `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`.
    pub rewrite_back: Option<Box<crate::filters::rewrite_back::RewriteBack>>,
    /// The `ssl-client-*` fields toward the upstream.
    pub client_cert: tollgate_config::model::ClientCertHeaders,
    /// `mirror`: where a copy of each request passed upstream goes.
    pub mirror: Option<Box<crate::net::mirror::MirrorRt>>,
}

/// One request's edge state (on routes with a [`ShapingRt`]).
#[derive(Default)]
pub struct ShapingCtx {
    /// The CORS origin this request's answer names (`None`: no CORS field).
    pub allowed: Allowed,
    compress: Option<ResponseCompressionCtx>,
    coding: Option<&'static str>,
    /// Response body bytes sent, and when the throttled part began.
    sent: u64,
    throttled_since: Option<Instant>,
}

impl ShapingRt {
    /// `None` when the route (with the server's header rules) uses none of it.
    pub fn build(cfg: &RouteConfig, config: &Config) -> Option<Box<ShapingRt>> {
        let e = &cfg.edge;
        let s = &config.server;
        let forwarded_prefix = match (e.x_forwarded_prefix.as_deref(), cfg.rewrite.as_deref()) {
            (Some(""), Some(Rewrite::StripPrefix(p))) => Some(p.trim_end_matches('/')),
            (Some(""), _) => None,
            (Some(p), _) => Some(p),
            (None, _) => None,
        }
        .map(|p| if p.is_empty() { "/" } else { p })
        .and_then(|p| HeaderValue::from_str(p).ok());
        let rt = ShapingRt {
            request_rules: RulesRt::build(&s.request_headers, &e.request_headers),
            response_rules: RulesRt::build(&s.response_headers, &e.response_headers),
            cors: e.cors.as_ref().and_then(CorsRt::new),
            upstream_host: e
                .upstream_host
                .as_deref()
                .and_then(|h| HeaderValue::from_str(h).ok()),
            forwarded_prefix,
            compress: e.compress,
            rate: e.limit_rate,
            rate_after: e.limit_rate_after,
            rewrite_back: crate::filters::rewrite_back::RewriteBack::build(e),
            client_cert: e.client_cert_headers,
            mirror: e
                .mirror
                .as_ref()
                .and_then(crate::net::mirror::MirrorRt::build),
        };
        let used = rt.request_rules.is_some()
            || rt.response_rules.is_some()
            || rt.cors.is_some()
            || rt.upstream_host.is_some()
            || rt.forwarded_prefix.is_some()
            || rt.compress
            || rt.rate > 0
            || rt.rewrite_back.is_some()
            || rt.client_cert != tollgate_config::model::ClientCertHeaders::Off
            || rt.mirror.is_some();
        used.then(|| Box::new(rt))
    }

    /// Toward the upstream: the header rules, `upstream_host` (an absolute-form target is then
    /// sent in origin form) and `X-Forwarded-Prefix` (replacing the client's). Before the
    /// gateway writes its own fields, which therefore always win.
    pub fn request(
        &self,
        upstream: &mut pingora::http::RequestHeader,
        vars: &Vars,
    ) -> pingora::Result<()> {
        if let Some(rules) = &self.request_rules {
            rules.apply_request(upstream, vars);
        }
        if let Some(h) = &self.upstream_host {
            upstream.insert_header(http::header::HOST, h.clone())?;
            if upstream.uri.authority().is_some() {
                let pq = upstream
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str().to_string());
                if let Some(pq) = pq {
                    upstream.set_raw_path(pq.as_bytes())?;
                }
            }
        }
        // Others pass the client's header on, as any header (as nginx does).
        if let Some(p) = &self.forwarded_prefix {
            upstream.insert_static_header(&crate::respond::names::X_FORWARDED_PREFIX, p.clone());
        }
        Ok(())
    }

    /// Whether a response body is worked on (compression, bandwidth): its state must outlive
    /// the response head.
    pub fn shapes_body(&self) -> bool {
        self.compress || self.rate > 0
    }

    /// The compression an answer may get: the client's acceptable codings (q > 0) among
    /// zstd, br and gzip, best first, as one Accept-Encoding for Pingora's compressor (which
    /// reads no q-values: `gzip;q=0` must not become gzip).
    fn accepted(req: &pingora::http::RequestHeader) -> Option<&'static str> {
        let mut best: Option<(u16, usize, &'static str)> = None;
        let mut star: Option<u16> = None;
        let mut seen = [false; 3];
        const ORDER: [&str; 3] = ["zstd", "br", "gzip"];
        for v in req.headers.get_all(http::header::ACCEPT_ENCODING) {
            let Ok(v) = v.to_str() else { return None };
            for item in v.split(',') {
                let mut parts = item.split(';');
                let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
                let mut q = 1000u16;
                for p in parts {
                    if let Some(qv) = p
                        .trim()
                        .strip_prefix("q=")
                        .or_else(|| p.trim().strip_prefix("Q="))
                    {
                        q = parse_q(qv).unwrap_or(0);
                    }
                }
                if coding == "*" {
                    star = Some(q);
                    continue;
                }
                if let Some(i) = ORDER.iter().position(|c| *c == coding) {
                    seen[i] = true;
                    if q > 0
                        && best.is_none_or(|(bq, bi, _)| {
                            (q, std::cmp::Reverse(i)) > (bq, std::cmp::Reverse(bi))
                        })
                    {
                        best = Some((q, i, ORDER[i]));
                    }
                }
            }
        }
        if best.is_none() {
            // `*` covers the codings not named.
            if let Some(q) = star.filter(|&q| q > 0) {
                if let Some(i) = (0..3).find(|&i| !seen[i]) {
                    best = Some((q, i, ORDER[i]));
                }
            }
        }
        best.map(|(_, _, c)| c)
    }
}

/// An Accept-Encoding q-value in thousandths (`1`, `0.5`, `0.001`); `None` when malformed.
fn parse_q(s: &str) -> Option<u16> {
    let s = s.trim();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole = match int {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    let mut f = 0u16;
    for (i, b) in frac.bytes().enumerate() {
        f += (b - b'0') as u16 * [100, 10, 1][i];
    }
    (whole + f <= 1000).then_some(whole + f)
}

/// Whether an upstream's answer may be compressed at all (the coding is chosen by Pingora's
/// compressor among what the client accepts, for compressible types only).
fn compressible(resp: &ResponseHeader, head_request: bool) -> bool {
    let h = &resp.headers;
    let status = resp.status.as_u16();
    if head_request || !(200..300).contains(&status) || status == 204 || status == 206 {
        return false;
    }
    if h.contains_key(http::header::CONTENT_ENCODING) || h.contains_key(http::header::CONTENT_RANGE)
    {
        return false;
    }
    if h.get_all(http::header::CACHE_CONTROL).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.to_ascii_lowercase().contains("no-transform"))
    }) {
        return false;
    }
    match h
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        Some(n) => n >= COMPRESS_MIN_BYTES,
        None => true,
    }
}

impl ShapingCtx {
    /// The coding this answer is compressed with, if it is.
    pub fn encoding(&self) -> Option<&'static str> {
        self.compress.as_ref()?;
        self.coding
    }

    /// The upstream's response head: header rules, CORS fields, the compression decision.
    pub fn response(
        &mut self,
        rt: &ShapingRt,
        req: &pingora::http::RequestHeader,
        resp: &mut ResponseHeader,
        vars: &Vars,
    ) {
        // The upstream's own URLs and cookies first: a header rule's value is the route's.
        if let Some(b) = &rt.rewrite_back {
            b.apply(resp);
        }
        if let Some(r) = &rt.response_rules {
            r.apply_response(resp, vars);
        }
        if let Some(c) = &rt.cors {
            // The upstream's own CORS fields give way to the route's.
            for n in [
                &crate::respond::names::ACAO,
                &crate::respond::names::ACAC,
                &crate::respond::names::ACEH,
            ] {
                resp.remove_header(n.name());
            }
            let vary_origin = resp.headers.get_all(http::header::VARY).iter().any(|v| {
                v.to_str()
                    .is_ok_and(|s| s.to_ascii_lowercase().contains("origin"))
            });
            if !vary_origin {
                let _ = resp.append_header(http::header::VARY, HeaderValue::from_static("Origin"));
            }
            if let Some(origin) = &self.allowed {
                let _ =
                    resp.insert_header(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
                if c.credentials() {
                    let _ = resp.insert_header(
                        http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                        HeaderValue::from_static("true"),
                    );
                }
                if let Some(e) = c.expose() {
                    let _ =
                        resp.insert_header(http::header::ACCESS_CONTROL_EXPOSE_HEADERS, e.clone());
                }
            }
        }
        if rt.compress && resp.status != http::StatusCode::SWITCHING_PROTOCOLS {
            let head_request = req.method == http::Method::HEAD;
            if compressible(resp, head_request) {
                if let Some(coding) = ShapingRt::accepted(req) {
                    let mut c = ResponseCompressionCtx::new(COMPRESSION_LEVEL, false, false);
                    if let Ok(mut one) = pingora::http::RequestHeader::build("GET", b"/", None) {
                        let _ = one.insert_header(http::header::ACCEPT_ENCODING, coding);
                        c.request_filter(&one);
                        c.response_header_filter(resp, false);
                        if resp.headers.contains_key(http::header::CONTENT_ENCODING) {
                            self.coding = Some(coding);
                            self.compress = Some(c);
                        }
                    }
                }
            }
        }
    }

    /// A chunk of the upstream's body toward the client: compressed, then paced. Returns how
    /// long to wait before it is written (`limit_rate`).
    pub fn body(
        &mut self,
        rt: &ShapingRt,
        body: &mut Option<bytes::Bytes>,
        end: bool,
    ) -> Option<Duration> {
        if let Some(c) = &mut self.compress {
            if let Some(out) = c.response_body_filter(body.as_ref(), end) {
                *body = Some(out);
            }
        }
        if rt.rate == 0 {
            return None;
        }
        let n = body.as_ref().map_or(0, |b| b.len() as u64);
        self.sent += n;
        if self.sent <= rt.rate_after {
            return None;
        }
        let since = *self.throttled_since.get_or_insert_with(Instant::now);
        // The bytes past `rate_after`, this chunk's included, may be out no sooner than
        // this: the chunk waits so that the answer so far keeps the rate.
        let owed = self.sent - rt.rate_after;
        let due = Duration::from_secs_f64(owed as f64 / rt.rate as f64);
        due.checked_sub(since.elapsed()).filter(|d| !d.is_zero())
    }
}

/// gzip, brotli and zstd at one level: fast enough per core for a gateway (ingress-nginx's
/// gzip level is 1; brotli's and zstd's 4 cost about gzip 6's).
const COMPRESSION_LEVEL: u32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(v: &str) -> Option<&'static str> {
        let mut r = pingora::http::RequestHeader::build("GET", b"/", None).expect("test input");
        r.insert_header("accept-encoding", v).expect("test input");
        ShapingRt::accepted(&r)
    }

    #[test]
    fn accept_encoding_reads_q_values() {
        assert_eq!(accepted("gzip"), Some("gzip"));
        assert_eq!(accepted("gzip, br"), Some("br"));
        assert_eq!(accepted("gzip, br, zstd"), Some("zstd"));
        assert_eq!(accepted("gzip;q=0"), None);
        assert_eq!(accepted("br;q=0, gzip;q=0.5"), Some("gzip"));
        assert_eq!(accepted("br;q=0.1, gzip;q=0.9"), Some("gzip"));
        assert_eq!(accepted("identity"), None);
        assert_eq!(accepted("*"), Some("zstd"));
        assert_eq!(accepted("zstd;q=0, *"), Some("br"));
        assert_eq!(accepted("*;q=0"), None);
        assert_eq!(accepted("gzip;q=2"), None);
        assert_eq!(accepted("gzip;q=abc"), None);
        assert_eq!(parse_q("0.5"), Some(500));
        assert_eq!(parse_q("1.000"), Some(1000));
        assert_eq!(parse_q("1.5"), None);
    }

    #[test]
    fn pacing_waits_for_the_bytes_owed() {
        let rt = ShapingRt {
            request_rules: None,
            response_rules: None,
            cors: None,
            upstream_host: None,
            forwarded_prefix: None,
            compress: false,
            rate: 1000,
            rate_after: 500,
            rewrite_back: None,
            client_cert: Default::default(),
            mirror: None,
        };
        let mut c = ShapingCtx::default();
        let mut chunk = Some(bytes::Bytes::from(vec![0u8; 500]));
        assert_eq!(c.body(&rt, &mut chunk, false), None);
        // 1000 bytes past rate_after at 1000 B/s: they go out after about a second.
        let mut chunk = Some(bytes::Bytes::from(vec![0u8; 1000]));
        let wait = c.body(&rt, &mut chunk, false).expect("a wait");
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
    }
}
