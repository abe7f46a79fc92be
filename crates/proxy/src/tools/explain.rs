//! `tollgate explain` and the admin `GET /explain`: what the gateway does with one request,
//! and why, without serving it.
//!
//! The front stages run as the pipeline runs them ([`crate::tools::dryrun`]); the routes not taken
//! are each given their reason; authentication is checked by the route's own method (an auth
//! service is named, never called); each limit's key is computed by the gateway's hasher, its
//! state read without spending it (a local limiter's `peek`, a global limit's verdict cache and
//! lease here; Redis is asked nothing: a global limit that would ask says so, and `tollgate
//! explain --redis` adds the key's state there). Nothing is counted, taken or logged.

use crate::limits::compiled::LimitState;
use crate::limits::identity::{describe_key, KeyHasher};
use crate::limits::policy::limit_key;
use crate::runtime::Runtime;
use crate::tools::dryrun::{front, request, Front};
use serde_json::{json, Value};
use std::net::IpAddr;
use tollgate_config::model::{Action, PathMatch, Scope};
use tollgate_core::filters::access::Access;
use tollgate_limit::{Decision, Nanos};

/// One request to explain.
#[derive(Debug, Clone)]
pub struct Question {
    pub method: String,
    /// `http(s)://host/path?query` or `/path?query`.
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The TCP peer (a trusted proxy's address makes `X-Forwarded-For` count).
    pub from: IpAddr,
}

impl Question {
    /// From the admin API's query: `method`, `url`, `header` (repeated, `Name: value`),
    /// `from`.
    pub fn from_query(query: &str) -> Result<Self, String> {
        let mut q = Question {
            method: "GET".into(),
            url: String::new(),
            headers: Vec::new(),
            from: IpAddr::from([127, 0, 0, 1]),
        };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "method" => q.method = v.into_owned(),
                "url" => q.url = v.into_owned(),
                "header" | "h" => q.headers.push(split_header(&v)?),
                "from" => {
                    q.from = v
                        .parse()
                        .map_err(|_| format!("from={v:?} is not an IP address"))?
                }
                other => return Err(format!("unknown parameter {other:?}")),
            }
        }
        if q.url.is_empty() {
            return Err("url= is required (http://host/path or /path)".into());
        }
        Ok(q)
    }
}

/// `Name: value` as curl's `-H` takes it.
pub fn split_header(h: &str) -> Result<(String, String), String> {
    let (n, v) = h
        .split_once(':')
        .ok_or_else(|| format!("{h:?}: a header is 'Name: value'"))?;
    Ok((n.trim().to_string(), v.trim().to_string()))
}

/// Explains `q` under `rt` at monotonic time `now` (calendar time `unix`): the JSON that
/// `--json` prints and [`text`] renders.
pub async fn explain(
    rt: &Runtime,
    hasher: &KeyHasher,
    metrics: &tollgate_core::observe::metrics::Metrics,
    q: &Question,
    now: Nanos,
    unix: Nanos,
) -> Result<Value, String> {
    let (req, secure) = request(&q.method, &q.url, &q.headers)?;
    let f = front(rt, &req, q.from, secure);
    let mut out = seen(rt, q, &req, &f, secure);
    if let Some(t) = &f.rewritten {
        out["upstream_target"] = json!(t.target);
    }
    if let Some(a) = &f.answer {
        out["decision"] = json!({"status": a.status, "answer": a.kind, "detail": a.detail});
        return Ok(out);
    }
    let Some(route) = f.route else {
        return Ok(out);
    };
    let r = &rt.routes[route];
    out["access"] = json!(access_text(&f.access));
    if r.stages.cors
        && tollgate_core::filters::cors::CorsRt::is_preflight(&req.method, &req.headers)
    {
        out["decision"] = json!({"status": 204, "answer": "cors_preflight",
            "detail": "A CORS preflight, answered at the edge: never limited or proxied."});
        return Ok(out);
    }
    // Authentication, by the route's own method.
    let auth = auth_step(rt, route, &req, &f, metrics).await;
    if let Some(v) = auth.shown {
        out["auth"] = v;
    }
    if let Some((status, detail, false)) = &auth.refusal {
        out["decision"] = json!({"status": status, "answer": "auth", "detail": detail});
        return Ok(out);
    }
    // A route's `jwt:` keys verify the bearer token in the limits stage when no auth did.
    let verified = match (r.needs_jwt, &auth.claims) {
        (true, None) => match bearer(rt, &req, metrics).await {
            Ok(c) => c,
            Err(why) => {
                out["decision"] = json!({"status": 401, "answer": "INVALID_TOKEN", "detail": why});
                return Ok(out);
            }
        },
        _ => None,
    };
    let (path, query) = f.key_path(rt, &req);
    let input = f.key_input(
        &req,
        (&path, query),
        route,
        auth.claims.as_deref().or(verified.as_ref()),
        auth.consumer.as_deref(),
    );
    let plans = rt.config.plans.as_ref().filter(|_| r.needs_plan);
    let plan = plans.map_or(0, |p| crate::limits::identity::plan_of(p, &input));
    if let Some(p) = plans {
        out["plan"] = json!(p.names.get(plan));
    }
    let allow_listed = matches!(f.access, Access::Allowed(_));
    let mut walk = Walk::default();
    let mut limits = Vec::new();
    for &li in &r.cfg.limits {
        let l = &rt.limits[li];
        if l.cfg.plan.is_some_and(|pl| pl != plan) {
            continue;
        }
        let mut item = describe_limit(rt, li);
        if allow_listed {
            item["decision"] = json!("skipped: the client is allow-listed");
            limits.push(item);
            continue;
        }
        let Some(key) = limit_key(rt, l, hasher, &input) else {
            item["key"] = Value::Null;
            item["decision"] = json!(unkeyed(r.needs_body, l));
            limits.push(item);
            continue;
        };
        item["key"] = json!(describe_key(&l.cfg.key, &input, rt.ipv6_prefix));
        item["key_hash"] = json!(format!("{key:016x}"));
        if let LimitState::Global(_) = &l.state {
            item["redis_key"] = json!(redis_key(l, key));
        }
        item["decision"] = json!(counted(&mut item, l, key, (now, unix), &mut walk));
        limits.push(item);
    }
    out["limits"] = Value::Array(limits);
    out["decision"] = decision(rt, route, walk, auth.refusal);
    Ok(out)
}

/// The request as the gateway sees it: as sent, canonical, the routes it meets and the one
/// it takes.
fn seen(
    rt: &Runtime,
    q: &Question,
    req: &pingora::http::RequestHeader,
    f: &Front,
    secure: bool,
) -> Value {
    json!({
        "request": {
            "method": q.method,
            "target": String::from_utf8_lossy(req.raw_path()),
            "from": q.from.to_string(),
            "client": f.client.to_string(),
            "tls": secure,
        },
        "canonical": {"host": f.host, "path": f.path, "respelled": f.respelled},
        "routes": routes(rt, f, req.method.as_str()),
        "route": f.route.map(|r| rt.routes[r].name.to_string()),
    })
}

/// Why a limit whose key has no value in this request is not counted.
fn unkeyed(needs_body: bool, l: &crate::limits::compiled::LimitRt) -> &'static str {
    if needs_body && reads_body(&l.cfg.key) {
        "not evaluated: its key reads the request body"
    } else {
        "not counted: a key source has no value in this request"
    }
}

/// A keyed limit's state (and block) put in `item`, and the walk's step on it: what the
/// limit would decide now, without counting.
fn counted(
    item: &mut Value,
    l: &crate::limits::compiled::LimitRt,
    key: u64,
    (now, unix): (Nanos, Nanos),
    walk: &mut Walk,
) -> Value {
    let blocked = l
        .ladder
        .as_ref()
        .and_then(|lad| lad.ladder.blocks.check(key, now));
    let (state, verdict) = peek(l, key, now, unix);
    item["state"] = state;
    if let Some(wait) = blocked {
        item["state"]["blocked_for_s"] = json!(secs(wait));
    }
    json!(walk.step(l, blocked, &verdict))
}

/// The bearer token's claims, verified as the limits stage verifies them (None without a
/// token or without `[jwt]`), or why the token does not verify.
async fn bearer(
    rt: &Runtime,
    req: &pingora::http::RequestHeader,
    metrics: &tollgate_core::observe::metrics::Metrics,
) -> Result<Option<tollgate_auth::jwt::Claims>, &'static str> {
    let Some(v) = &rt.jwt else {
        return Ok(None);
    };
    let Some(token) = req
        .headers
        .get(&v.header)
        .and_then(|h| tollgate_auth::jwt::Verifier::token(h.as_bytes()))
    else {
        return Ok(None);
    };
    v.check(token, metrics).await.map(Some)
}

/// The request's decision: the refusing limit's, else the auth's refusal, else the route's
/// action (unless Redis refuses a global limit).
fn decision(
    rt: &Runtime,
    route: usize,
    walk: Walk,
    auth_refusal: Option<(u16, String, bool)>,
) -> Value {
    if let Some((_, d)) = walk.refused {
        d
    } else if let Some((status, detail, _)) = auth_refusal {
        json!({"status": status, "answer": "auth", "detail": detail})
    } else {
        let mut d = action(rt, route);
        if walk.asks_redis {
            d["detail"] = json!(format!(
                "{}, unless Redis refuses a global limit",
                d["detail"].as_str().unwrap_or_default()
            ));
        }
        d
    }
}

/// The Redis key a global limit counts `key` under.
fn redis_key(l: &crate::limits::compiled::LimitRt, key: u64) -> String {
    tollgate_store::GlobalKey {
        limit: &l.cfg.name,
        key,
        known: false,
        patient: false,
    }
    .redis_key(l.cfg.algorithm)
}

/// What the access lists say of the client.
fn access_text(a: &Access) -> String {
    match a {
        Access::Unlisted => "unlisted".to_string(),
        Access::Allowed(why) => format!("allowed ({}): the limits do not apply", why.label()),
        Access::Denied(_) => "denied".to_string(),
    }
}

/// What the route's authentication says, by its own method (an auth service is named, never
/// called): what explain shows, who the caller is, and a refusal (status, detail, held for
/// the limits as the auth stage holds it on a route whose limits count failures).
struct AuthStep {
    shown: Option<Value>,
    consumer: Option<std::sync::Arc<str>>,
    claims: Option<std::sync::Arc<tollgate_auth::jwt::Claims>>,
    refusal: Option<(u16, String, bool)>,
}

async fn auth_step(
    rt: &Runtime,
    route: usize,
    req: &pingora::http::RequestHeader,
    f: &Front,
    metrics: &tollgate_core::observe::metrics::Metrics,
) -> AuthStep {
    let r = &rt.routes[route];
    let mut step = AuthStep {
        shown: None,
        consumer: None,
        claims: None,
        refusal: None,
    };
    let Some(ra) = &r.auth else {
        return step;
    };
    let areq = tollgate_auth::Request {
        head: req,
        client: f.client,
        secure: f.secure,
        path_and_query: "",
        host: None,
        request_id: "explain",
        route_name: &r.name,
        metrics,
        latency: &ra.latency,
    };
    let (outcome, detail) = match ra.auth.check_dry(&areq, rt.jwt.as_ref()).await {
        None => (
            "asked of the auth service".to_string(),
            "An auth service decides each request: explain does not call it.".to_string(),
        ),
        Some(Ok((passed, o))) => {
            let detail = passed
                .consumer
                .as_deref()
                .map(|c| format!("consumer {c}"))
                .unwrap_or_default();
            step.consumer = passed.consumer;
            step.claims = passed.claims;
            (tollgate_auth::RESULTS[o as usize].to_string(), detail)
        }
        Some(Err(refusal)) => {
            let (status, detail) = match &refusal {
                tollgate_auth::Refusal::Problem {
                    problem, detail, ..
                } => (problem.status(), detail.to_string()),
                tollgate_auth::Refusal::SignIn { .. } => (302, "redirected to sign in".to_string()),
            };
            // As the auth stage: a failed credential on a route whose limits count
            // failures is answered after the limits; anything else at once.
            let counted = matches!(
                refusal.outcome(),
                tollgate_auth::Outcome::Unauthenticated | tollgate_auth::Outcome::Forbidden
            );
            let held = counted && r.counts_failures && r.stages.limits;
            step.refusal = Some((status, detail.clone(), held));
            (
                tollgate_auth::RESULTS[refusal.outcome() as usize].to_string(),
                detail,
            )
        }
    };
    step.shown =
        Some(json!({"method": method_name(&ra.auth.method), "outcome": outcome, "detail": detail}));
    step
}

/// A limit's state for `key`, read and never spent: a local limiter's peek, a global limit's
/// verdict cache and lease here (Redis is asked nothing).
fn peek(
    l: &crate::limits::compiled::LimitRt,
    key: u64,
    now: Nanos,
    unix: Nanos,
) -> (Value, Verdict) {
    match &l.state {
        LimitState::Local(limiter) => match limiter.peek(key, l.time(now, unix), 1) {
            Decision::Allow {
                remaining, reset, ..
            } => (
                json!({"remaining": remaining, "reset_s": secs(reset)}),
                Verdict::Admit,
            ),
            Decision::Deny { retry_after } => (
                json!({"remaining": 0, "retry_after_s": secs(retry_after)}),
                refusal(l, retry_after),
            ),
        },
        LimitState::Global(g) => match g.cache.peek(key, now) {
            Some(wait) => (
                json!({"verdict_cache": "refused", "retry_after_s": secs(wait)}),
                refusal(l, wait),
            ),
            None => {
                let held = g.leases.as_ref().map(|ls| ls.held());
                (
                    json!({"verdict_cache": "none", "leased_units_here": held}),
                    Verdict::Redis,
                )
            }
        },
    }
}

/// The route's limits walked as the live step walks them (`policy::decide_local`): in order,
/// a block (403) or a refusal ends it; after a refusal the later enforced limits are only
/// asked whether they would refuse for longer (no block, no shadow limit is consulted then).
/// The refusal named is the one with the longest wait.
#[derive(Default)]
struct Walk {
    phase: Phase,
    /// The refusal answered, and its wait.
    refused: Option<(Nanos, Value)>,
    /// A global limit with no cached refusal: Redis decides when the request comes.
    asks_redis: bool,
}

impl Walk {
    /// One limit's part, as explain shows it.
    fn step(
        &mut self,
        l: &crate::limits::compiled::LimitRt,
        blocked: Option<Nanos>,
        v: &Verdict,
    ) -> String {
        let name = &l.cfg.name;
        match self.phase {
            Phase::Answered => "not reached: an earlier limit blocked the key".to_string(),
            Phase::Refused if l.shadow => "not reached: an earlier limit refused".to_string(),
            Phase::Refused => match v {
                Verdict::Refuse(status, code, wait) => {
                    if self.refused.as_ref().is_none_or(|(w, _)| wait > w) {
                        self.refused = Some((*wait, answered(*status, code, name, *wait)));
                    }
                    format!("would refuse too: {status} {code}")
                }
                _ => "admits (an earlier limit refused)".to_string(),
            },
            Phase::Deciding => match (blocked, v, l.shadow) {
                (Some(wait), _, false) => {
                    self.refused = Some((wait, answered(403, "TEMPORARILY_BLOCKED", name, wait)));
                    self.phase = Phase::Answered;
                    "refuses: 403 TEMPORARILY_BLOCKED (the key is blocked)".to_string()
                }
                (_, Verdict::Admit, _) => "admits".to_string(),
                (_, Verdict::Redis, _) => {
                    self.asks_redis = true;
                    "asks Redis (no refusal is cached here)".to_string()
                }
                (_, Verdict::Refuse(..), true) => "would refuse (shadow: admitted)".to_string(),
                (_, Verdict::Refuse(status, code, wait), false) => {
                    self.refused = Some((*wait, answered(*status, code, name, *wait)));
                    self.phase = Phase::Refused;
                    format!("refuses: {status} {code}")
                }
            },
        }
    }
}

/// The decision a refusing limit answers with.
fn answered(status: u16, code: &str, limit: &str, wait: Nanos) -> Value {
    json!({"status": status, "answer": code, "limit": limit, "retry_after_s": secs(wait)})
}

/// Where the route's limits are, in the live step's order.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// No limit refused yet.
    #[default]
    Deciding,
    /// One refused: later ones only say whether they would refuse for longer.
    Refused,
    /// A blocked key answered 403: no later limit is consulted.
    Answered,
}

enum Verdict {
    Admit,
    Redis,
    Refuse(u16, &'static str, Nanos),
}

/// A refusal's answer, as the refusal template writes it (`respond::refusal`): a quota's,
/// a challenge's (with its URL), the rate limit's otherwise. A tarpit holds the request first
/// (and may pass it on after the hold: see the limit's tarpit).
fn refusal(l: &crate::limits::compiled::LimitRt, wait: Nanos) -> Verdict {
    let code = match (l.quota, l.action, &l.cfg.challenge_url) {
        (true, _, _) => "QUOTA_EXCEEDED",
        (_, Action::Challenge, Some(_)) => "CHALLENGE_REQUIRED",
        _ => "RATE_LIMIT_EXCEEDED",
    };
    Verdict::Refuse(429, code, wait)
}

fn reads_body(sources: &[tollgate_config::model::KeySource]) -> bool {
    sources
        .iter()
        .any(|s| matches!(s, tollgate_config::model::KeySource::Body(_)))
}

fn action(rt: &Runtime, route: usize) -> Value {
    match rt.route_action(route) {
        tollgate_config::model::RouteAction::Upstream(u) => {
            json!({"status": null, "answer": "proxied",
            "detail": format!("proxied to upstream {}", rt.upstreams[*u].cfg().name)})
        }
        tollgate_config::model::RouteAction::Respond { status, .. } => {
            json!({"status": status, "answer": "respond", "detail": "the route's own answer"})
        }
    }
}

/// The limit's parameters as configured.
fn describe_limit(rt: &Runtime, li: usize) -> Value {
    let c = &rt.limits[li].cfg;
    json!({
        "limit": c.name,
        "algorithm": c.algorithm.name(),
        "rate": rate_text(c.rate.count(), c.rate.period_ns()),
        "burst": c.burst,
        "scope": match c.scope { Scope::Local => "local", Scope::Global => "global" },
        "sync": match (c.scope, c.lease_max) { (Scope::Global, Some(_)) => Some("lease"), (Scope::Global, None) => Some("exact"), _ => None },
        "key_sources": c.key.iter().map(|k| k.describe()).collect::<Vec<_>>(),
        "shadow": rt.limits[li].shadow,
        "action": match c.action { Action::Reject => "reject", Action::Tarpit => "tarpit", Action::Challenge => "challenge" },
        "plan": c.plan.and_then(|p| rt.config.plans.as_ref().and_then(|pl| pl.names.get(p).cloned())),
    })
}

/// `10/s`, `100/min`, `5/2s`.
pub fn rate_text(count: u64, period_ns: u64) -> String {
    let s = period_ns as f64 / 1e9;
    let unit = match period_ns {
        1_000_000_000 => "s".to_string(),
        60_000_000_000 => "min".to_string(),
        3_600_000_000_000 => "h".to_string(),
        86_400_000_000_000 => "day".to_string(),
        _ => format!("{s}s"),
    };
    format!("{count}/{unit}")
}

fn secs(n: Nanos) -> f64 {
    (n as f64 / 1e6).round() / 1e3
}

/// Every route in the order the table tries them, with whether it was taken and why not.
fn routes(rt: &Runtime, f: &Front, method: &str) -> Value {
    let (Some(path), host) = (f.path.as_deref(), f.host.as_deref()) else {
        return json!([]);
    };
    let tier = rt
        .hosts
        .tier(host, None, None, rt.config.server.host_fallthrough);
    let mut out = Vec::new();
    let mut taken = false;
    for e in &rt.order {
        let r = &rt.routes[e.route];
        let want = e.host.as_deref();
        let why = if taken {
            Some("an earlier route matched".to_string())
        } else if !tier.admits(want, host) {
            Some(match (want, host) {
                (Some(w), Some(h))
                    if !tollgate_route::routing::Tier::Any.admits(Some(w), Some(h)) =>
                {
                    format!("host {w} (the request's is {h})")
                }
                (Some(w), None) => format!("host {w} (the request names none)"),
                _ => "a route naming the request's host comes first".to_string(),
            })
        } else if !tollgate_route::routing::path_matches(&r.cfg, r.regex.as_deref(), path) {
            Some(match &r.cfg.path {
                PathMatch::Exact(p) => format!("path is exactly {p}"),
                PathMatch::Prefix(p) => format!("path prefix {p}"),
                PathMatch::Regex(p) => format!("path regex {p}"),
            })
        } else {
            r.cfg
                .methods
                .as_ref()
                .filter(|ms| !ms.iter().any(|m| m == method))
                .map(|ms| format!("methods {}", ms.join(", ")))
        };
        let mut item = json!({"route": &*r.name, "taken": why.is_none() && !taken});
        if let Some(w) = why {
            item["not_taken"] = json!(w);
        } else {
            taken = true;
            if e.www {
                item["via"] = json!("its host's other spelling (www_redirect)");
            }
        }
        out.push(item);
    }
    Value::Array(out)
}

/// The explanation as a person reads it.
pub fn text(v: &Value) -> String {
    use std::fmt::Write;
    let s = shown;
    let mut o = String::new();
    let r = &v["request"];
    let _ = writeln!(
        o,
        "request   {} {}  from {} (client {}){}",
        s(&r["method"]),
        s(&r["target"]),
        s(&r["from"]),
        s(&r["client"]),
        if r["tls"] == true { "  TLS" } else { "" }
    );
    let c = &v["canonical"];
    let _ = writeln!(
        o,
        "canonical host {}  path {}{}",
        s(&c["host"]),
        s(&c["path"]),
        if c["respelled"] == true {
            "  (respelled: the upstream gets this spelling)"
        } else {
            ""
        }
    );
    text_routes(&mut o, &v["routes"]);
    if let Some(t) = v.get("upstream_target") {
        let _ = writeln!(o, "upstream target {}", s(t));
    }
    if let Some(a) = v.get("access") {
        let _ = writeln!(o, "access    {}", s(a));
    }
    if let Some(a) = v.get("auth") {
        let _ = writeln!(
            o,
            "auth      {}: {}{}",
            s(&a["method"]),
            s(&a["outcome"]),
            a["detail"]
                .as_str()
                .filter(|d| !d.is_empty())
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        );
    }
    if let Some(p) = v.get("plan") {
        let _ = writeln!(o, "plan      {}", s(p));
    }
    text_limits(&mut o, &v["limits"]);
    let d = &v["decision"];
    let _ = writeln!(
        o,
        "decision  {} {}{}{}",
        s(&d["status"]),
        s(&d["answer"]),
        d.get("limit")
            .map(|l| format!(" by {}", s(l)))
            .unwrap_or_default(),
        d.get("detail")
            .map(|l| format!(": {}", s(l)))
            .unwrap_or_default(),
    );
    o
}

/// A JSON value as the text shows it: a string bare, null as `-`.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The routes a request met, the taken one starred.
fn text_routes(o: &mut String, routes: &Value) {
    use std::fmt::Write;
    let s = shown;
    if let Some(routes) = routes.as_array() {
        let _ = writeln!(o, "routes");
        for r in routes {
            if r["taken"] == true {
                let _ = writeln!(
                    o,
                    "  * {}  taken{}",
                    s(&r["route"]),
                    r.get("via")
                        .map(|v| format!(" via {}", s(v)))
                        .unwrap_or_default()
                );
            } else {
                let _ = writeln!(
                    o,
                    "    {}  not taken: {}",
                    s(&r["route"]),
                    s(&r["not_taken"])
                );
            }
        }
    }
}

/// Each limit: its definition, key, state and decision.
fn text_limits(o: &mut String, limits: &Value) {
    use std::fmt::Write;
    let s = shown;
    if let Some(ls) = limits.as_array() {
        let _ = writeln!(o, "limits");
        for l in ls {
            let _ = writeln!(
                o,
                "  {}  {} {} burst {} {}{}{}",
                s(&l["limit"]),
                s(&l["algorithm"]),
                s(&l["rate"]),
                s(&l["burst"]),
                s(&l["scope"]),
                l["sync"]
                    .as_str()
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default(),
                if l["shadow"] == true { " shadow" } else { "" }
            );
            if let Some(k) = l.get("key") {
                let _ = writeln!(
                    o,
                    "    key    {}{}",
                    s(k),
                    l.get("key_hash")
                        .map(|h| format!("  #{}", s(h)))
                        .unwrap_or_default()
                );
            }
            if let Some(k) = l.get("redis_key") {
                let _ = writeln!(o, "    redis  {}", s(k));
            }
            if let Some(st) = l.get("state") {
                let _ = writeln!(o, "    state  {}", st);
            }
            if let Some(st) = l.get("redis_state") {
                let _ = writeln!(o, "    in redis {}", s(st));
            }
            let _ = writeln!(o, "    => {}", s(&l["decision"]));
        }
    }
}

fn method_name(m: &tollgate_auth::Method) -> &'static str {
    match m {
        tollgate_auth::Method::Bearer(_) => "jwt",
        tollgate_auth::Method::Forward(_) => "forward",
        tollgate_auth::Method::Basic(_) => "basic",
        tollgate_auth::Method::ApiKey(_) => "api_key",
    }
}

/// Where `tollgate explain` reads the limits' state from.
pub struct Source {
    /// A running gateway's admin listener (`http://127.0.0.1:9000`): it explains with its own
    /// state; `token` is its admin token.
    pub admin: Option<String>,
    pub token: Option<String>,
    /// A Redis node: each global limit's key is read there.
    pub redis: Option<String>,
}

/// `tollgate explain`: the explanation of `q` under `config`, as JSON.
pub async fn cli(
    config: tollgate_config::model::Config,
    q: &Question,
    src: &Source,
) -> Result<Value, String> {
    if let Some(admin) = &src.admin {
        let token = src
            .token
            .clone()
            .or_else(|| config.server.admin_token.clone())
            .ok_or(
                "the admin API needs a token: --admin-token, or server.admin_token in the config",
            )?;
        return ask_admin(admin, &token, q).await;
    }
    let clock: std::sync::Arc<dyn tollgate_limit::Clock> =
        std::sync::Arc::new(tollgate_limit::MonotonicClock::new());
    let shared = crate::shared::Shared::new(config, clock.clone()).map_err(|e| e.to_string())?;
    let rt = shared.runtime.load_full();
    let mut v = explain(
        &rt,
        &shared.hasher,
        &shared.metrics,
        q,
        clock.now(),
        clock.unix_now(),
    )
    .await?;
    v["state_from"] = json!("this process (fresh: no request counted yet)");
    if let Some(url) = &src.redis {
        let keys: Vec<String> = v["limits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["redis_key"].as_str().map(str::to_string))
            .collect();
        let states = tollgate_store::inspect(url, &keys).await?;
        let mut it = states.into_iter();
        if let Some(ls) = v["limits"].as_array_mut() {
            for l in ls.iter_mut().filter(|l| l.get("redis_key").is_some()) {
                l["redis_state"] = json!(it.next());
            }
        }
    }
    Ok(v)
}

async fn ask_admin(admin: &str, token: &str, q: &Question) -> Result<Value, String> {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("method", &q.method)
        .append_pair("url", &q.url)
        .append_pair("from", &q.from.to_string());
    for (n, v) in &q.headers {
        query.append_pair("header", &format!("{n}: {v}"));
    }
    let url = format!("{}/explain?{}", admin.trim_end_matches('/'), query.finish());
    let req = http::Request::get(&url)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| format!("{url}: {e}"))?;
    let client = tollgate_core::net::client::build(None, false)?;
    let (parts, body) = tollgate_core::net::client::exchange(
        &client,
        req,
        std::time::Duration::from_secs(5),
        4 << 20,
    )
    .await
    .map_err(|e| format!("{admin}: {e}"))?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("{admin}: {e}"))?;
    if parts.status != 200 {
        return Err(format!(
            "{admin}: {} {}",
            parts.status,
            v["error"].as_str().unwrap_or_default()
        ));
    }
    let mut v = v;
    v["state_from"] = json!(format!("the gateway at {admin}"));
    Ok(v)
}
