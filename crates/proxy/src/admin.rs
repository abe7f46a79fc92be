//! The admin listener: `/healthz` (the process runs), `/readyz` (it serves a config and is not
//! draining), `/metrics` (Prometheus text).

use crate::runtime::Shared;
use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct Admin {
    shared: Arc<Shared>,
    draining: Arc<AtomicBool>,
}

impl Admin {
    /// `draining` turns /readyz to 503 (set on graceful shutdown).
    pub fn new(shared: Arc<Shared>, draining: Arc<AtomicBool>) -> Self {
        Self { shared, draining }
    }
}

fn reply(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut r = Response::new(body);
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    let len = r.body().len();
    r.headers_mut()
        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    r
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        match path.as_str() {
            "/healthz" => reply(200, "text/plain", b"ok\n".to_vec()),
            "/readyz" => {
                // Redis being away does not make this instance unready: every instance shares
                // the same Redis, so taking them out of rotation would help nobody; each
                // limit's on_error says what happens meanwhile. The state is shown, though.
                let redis: &[u8] = match &self.shared.store {
                    None => b"",
                    Some(s) if s.is_up() => b"redis: up\n",
                    Some(_) => b"redis: down (global limits follow their on_error)\n",
                };
                if self.draining.load(Ordering::Relaxed) {
                    reply(503, "text/plain", [b"draining\n", redis].concat())
                } else {
                    reply(200, "text/plain", [b"ready\n", redis].concat())
                }
            }
            "/metrics" => {
                self.shared.refresh_gauges();
                reply(
                    200,
                    "text/plain; version=0.0.4",
                    self.shared.metrics.encode(),
                )
            }
            _ => reply(
                404,
                "text/plain",
                b"not found: try /healthz, /readyz or /metrics\n".to_vec(),
            ),
        }
    }
}
