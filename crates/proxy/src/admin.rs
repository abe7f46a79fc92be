//! The admin listener: `/healthz` (the process runs), `/readyz` (it serves a config and is not
//! draining), `/metrics` (Prometheus text), and `/blocks` (automatic blocks: list with GET,
//! lift with DELETE `/blocks/LIMIT/KEY` or `/blocks/LIMIT`), which needs
//! `Authorization: Bearer <server.admin_token>` and is off without a token.

use crate::shared::Shared;
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

fn json(status: u16, v: serde_json::Value) -> Response<Vec<u8>> {
    let mut body = serde_json::to_vec(&v).unwrap_or_default();
    body.push(b'\n');
    reply(status, "application/json", body)
}

/// Compares without an early exit, so the time taken says nothing about the token.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Admin {
    /// The admin token's check: `Some(answer)` (403 when no token is configured, 401 when the
    /// request's is not it) or `None` to go on.
    fn refuse_token(
        rt: &crate::runtime::Runtime,
        session: &ServerSession,
        api: &str,
    ) -> Option<Response<Vec<u8>>> {
        let Some(token) = &rt.config.server.admin_token else {
            return Some(json(
                403,
                serde_json::json!({"error": format!("the {api} API is off: set server.admin_token (or admin_token_env)")}),
            ));
        };
        let given = session
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same_secret(given.trim().as_bytes(), token.as_bytes()) {
            let mut r = json(
                401,
                serde_json::json!({"error": "a valid admin token is required"}),
            );
            r.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"tollgate-admin\""),
            );
            return Some(r);
        }
        None
    }

    /// `GET /explain?method=&url=&header=&from=`: what this gateway would do with that request
    /// now (crate::tools::explain), its limits' state read and never spent.
    async fn explain(&self, session: &ServerSession) -> Response<Vec<u8>> {
        let rt = self.shared.runtime.load_full();
        if let Some(r) = Self::refuse_token(&rt, session, "explain") {
            return r;
        }
        let req = session.req_header();
        if req.method != http::Method::GET {
            return json(
                405,
                serde_json::json!({"error": "GET /explain?method=GET&url=http://host/path&header=Name:%20value&from=ADDR"}),
            );
        }
        let q = match crate::tools::explain::Question::from_query(req.uri.query().unwrap_or("")) {
            Ok(q) => q,
            Err(e) => return json(400, serde_json::json!({ "error": e })),
        };
        let clock = &self.shared.clock;
        match crate::tools::explain::explain(
            &rt,
            &self.shared.hasher,
            &self.shared.metrics,
            &q,
            clock.now(),
            clock.unix_now(),
        )
        .await
        {
            Ok(v) => json(200, v),
            Err(e) => json(400, serde_json::json!({ "error": e })),
        }
    }

    async fn blocks(&self, session: &ServerSession, path: &str) -> Response<Vec<u8>> {
        let rt = self.shared.runtime.load_full();
        if let Some(r) = Self::refuse_token(&rt, session, "blocks") {
            return r;
        }
        let req = session.req_header();
        let now = self.shared.clock.now();
        // One entry per limit name (a plan limit's variants share their ladder).
        let mut ladders: Vec<(&str, &crate::limits::compiled::LadderRt)> = Vec::new();
        for l in &rt.limits {
            if let Some(lad) = &l.ladder {
                if !ladders.iter().any(|(n, _)| *n == l.cfg.name) {
                    ladders.push((&l.cfg.name, lad));
                }
            }
        }
        let rest = path.strip_prefix("/blocks").unwrap_or("");
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        match req.method {
            http::Method::GET if rest.is_empty() => {
                let mut out = Vec::new();
                for (name, lad) in &ladders {
                    for (key, b) in lad.ladder.blocks.list(now) {
                        let rung = lad.ladder.rungs().nth(b.rung as usize);
                        out.push(serde_json::json!({
                            "limit": name,
                            "key": format!("{key:016x}"),
                            "rung": b.rung,
                            "blocked_for_s": rung.map_or(0, |r| r.block_for.as_secs()),
                            "expires_in_s": tollgate_limit::ceil_secs(b.until.saturating_sub(now)),
                        }));
                    }
                }
                json(200, serde_json::json!({ "blocks": out }))
            }
            http::Method::DELETE if !rest.is_empty() => {
                let (limit, key) = match rest.split_once('/') {
                    Some((l, k)) => (l, Some(k)),
                    None => (rest, None),
                };
                let Some((name, lad)) = ladders.iter().find(|(n, _)| *n == limit) else {
                    let known: Vec<&str> = ladders.iter().map(|(n, _)| *n).collect();
                    return json(
                        404,
                        serde_json::json!({"error": format!("no limit \"{limit}\" with a block ladder"), "limits": known}),
                    );
                };
                let key = match key.map(|k| u64::from_str_radix(k, 16)) {
                    Some(Ok(k)) => Some(k),
                    Some(Err(_)) => {
                        return json(
                            400,
                            serde_json::json!({"error": "the key is the 16 hex digits GET /blocks (or a 403's block_id) shows"}),
                        )
                    }
                    None => None,
                };
                let mut lifted = match key {
                    Some(k) => lad.ladder.forgive(k, now) as u64,
                    None => lad.ladder.forgive_all(now) as u64,
                };
                let mut shared = serde_json::Value::Null;
                if let Some(store) = &self.shared.store {
                    match store.lift(name, key).await {
                        Ok(n) => {
                            lifted = lifted.max(n);
                            shared = serde_json::Value::Bool(true);
                        }
                        Err(e) => {
                            shared = serde_json::json!(format!("not lifted in Redis: {e}"));
                        }
                    }
                }
                tracing::warn!(event = "blocks_lifted", limit = %name, key = ?key.map(|k| format!("{k:016x}")), lifted, "blocks lifted through the admin API");
                json(
                    200,
                    serde_json::json!({ "lifted": lifted, "shared": shared }),
                )
            }
            _ => json(
                405,
                serde_json::json!({"error": "GET /blocks, DELETE /blocks/LIMIT/KEY or DELETE /blocks/LIMIT"}),
            ),
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        if path == "/blocks" || path.starts_with("/blocks/") {
            return self.blocks(session, &path).await;
        }
        match path.as_str() {
            "/explain" => self.explain(session).await,
            "/healthz" => reply(200, "text/plain", b"ok\n".to_vec()),
            "/readyz" => {
                // Redis being away does not make this instance unready: every instance shares
                // the same Redis, so taking them out of rotation would help nobody; each
                // limit's on_error says what happens meanwhile. The state is shown, though.
                // Until the first probe has connected, read the cluster's map and loaded the
                // scripts (or found Redis away), the instance is not ready: a new instance in
                // a rollout would otherwise fall back on its first requests.
                let redis: &[u8] = match &self.shared.store {
                    None => b"",
                    Some(s) if !s.ready() => b"redis: connecting\n",
                    Some(s) if s.is_up() => b"redis: up\n",
                    Some(_) => {
                        b"redis: down (global limits on the failed nodes follow their on_error)\n"
                    }
                };
                // An upstream whose name does not resolve answers 503 on its own routes only;
                // the instance stays ready (every instance would be unready alike). Until
                // every name has been looked up once, the instance is starting.
                let rt = self.shared.runtime.load();
                let mut upstreams = Vec::new();
                for u in &rt.upstreams {
                    for (target, why) in u.pool.unresolved() {
                        upstreams.extend_from_slice(
                            format!(
                                "upstream {}: {target} does not resolve ({why})\n",
                                u.cfg().name
                            )
                            .as_bytes(),
                        );
                    }
                }
                let settled = rt.upstreams.iter().all(|u| u.pool.settled());
                // Tokens cannot be verified before the identity provider's keys are in.
                let jwks: &[u8] = match &rt.jwks {
                    Some(j) if !j.ready() => b"jwks: fetching\n",
                    _ => b"",
                };
                // The rate limit service, when configured, must be taking calls.
                let rls: &[u8] = match &rt.config.rls {
                    Some(_) if !self.shared.rls_serving.load(Ordering::Relaxed) => {
                        b"rls: not serving\n"
                    }
                    _ => b"",
                };
                let kube: &[u8] = if self.shared.kube_syncing.load(Ordering::Relaxed) {
                    b"kubernetes: syncing\n"
                } else {
                    b""
                };
                let state: &[u8] = if self.draining.load(Ordering::Relaxed) {
                    b"draining\n"
                } else if !settled
                    || !jwks.is_empty()
                    || !rls.is_empty()
                    || !kube.is_empty()
                    || self.shared.store.as_ref().is_some_and(|s| !s.ready())
                {
                    b"starting\n"
                } else {
                    b"ready\n"
                };
                let status = if state == b"ready\n" { 200 } else { 503 };
                reply(
                    status,
                    "text/plain",
                    [state, redis, jwks, rls, kube, &upstreams].concat(),
                )
            }
            "/metrics" => reply(200, "text/plain; version=0.0.4", self.shared.scrape()),
            _ => reply(
                404,
                "text/plain",
                b"not found: try /healthz, /readyz, /metrics, /blocks or /explain\n".to_vec(),
            ),
        }
    }
}
