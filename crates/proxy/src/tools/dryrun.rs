//! The request stages before authentication and limits, run on a request head alone (no
//! session, no socket): what `tollgate explain` and `tollgate simulate` share with the live
//! pipeline ([`crate::stages`]). Each step calls the same functions the stages call
//! (canonical target, route table, rewrite, input checks, body cap, access lists), so the
//! answers cannot drift apart; what a stage does with a live session (writing the answer,
//! counting metrics) is left out.

use crate::inbound::canonical_target;
use crate::runtime::Runtime;
use pingora::http::RequestHeader;
use std::net::IpAddr;
use tollgate_core::client_ip::client_ip;
use tollgate_core::filters::access::Access;
use tollgate_core::respond::Problem;
use tollgate_route::routing::Rewritten;

/// Where the front stages leave a request.
#[derive(Debug)]
pub struct Front {
    /// The canonical host (lower case, no port) and path; `None` when they could not be made
    /// canonical (then `answer` says why).
    pub host: Option<String>,
    pub path: Option<String>,
    /// The client spelled the target otherwise (the upstream gets the canonical one).
    pub respelled: bool,
    pub route: Option<usize>,
    /// The request was answered before authentication and limits: status, problem or kind,
    /// detail.
    pub answer: Option<Answer>,
    /// What the upstream reads when the route rewrites.
    pub rewritten: Option<Rewritten>,
    /// The client address through trusted proxies.
    pub client: IpAddr,
    /// Over TLS, or from a trusted proxy that says the client used it.
    pub secure: bool,
    /// What the access lists say (`Unlisted` on a route without lists).
    pub access: Access,
}

#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub kind: &'static str,
    pub detail: String,
}

impl Answer {
    fn problem(p: Problem, detail: impl Into<String>) -> Self {
        Answer {
            status: p.status(),
            kind: p.code(),
            detail: detail.into(),
        }
    }
}

/// Runs stages 2 and 3 ([`crate::stages::route`], [`crate::stages::body`],
/// [`crate::stages::access`]) on `req` from `peer`.
pub fn front(rt: &Runtime, req: &RequestHeader, peer: IpAddr, tls: bool) -> Front {
    let client = client_ip(peer, req, &rt.trusted_proxies);
    // As `inbound::is_secure`: over TLS, or from a trusted proxy that says the client used it.
    let secure = tls
        || (tollgate_core::client_ip::trusted(peer, &rt.trusted_proxies)
            && crate::inbound::forwarded_https(
                req.headers
                    .get(tollgate_core::respond::names::X_FORWARDED_PROTO.name()),
            ));
    let mut f = Front {
        host: None,
        path: None,
        respelled: false,
        route: None,
        answer: None,
        rewritten: None,
        client,
        secure,
        access: Access::Unlisted,
    };
    let t = match canonical_target(req, rt.path_rules) {
        Ok(t) => t,
        Err((p, detail)) => {
            f.answer = Some(Answer::problem(p, detail));
            return f;
        }
    };
    let entry = rt.route_entry(
        t.host.as_deref(),
        &t.path,
        req.method.as_str(),
        crate::runtime::Asked::of(req, None),
    );
    f.host = t.host.as_deref().map(str::to_string);
    f.path = Some(t.path.to_string());
    f.respelled = t.rewrite;
    f.route = entry.map(|e| e.route);
    let Some(entry) = entry else {
        f.answer = Some(Answer::problem(
            Problem::NoRoute,
            "No route matches this request.",
        ));
        return f;
    };
    let r = &rt.routes[entry.route];
    if !secure && r.redirects(&rt.config.server) {
        let location = crate::inbound::https_location(
            t.host.as_deref(),
            &t.path,
            req.uri.query(),
            rt.https_port,
            r.cfg.edge.https_redirect_drop_slash,
        );
        f.answer = Some(https_answer(location));
        return f;
    }
    if entry.www {
        f.answer = Some(Answer {
            status: 308,
            kind: "www_redirect",
            detail: "The route's other spelling is redirected to its host.".into(),
        });
        return f;
    }
    if let Some(rw) = &r.rewrite {
        match rw.apply(&t.path, req.uri.query(), rt.path_rules) {
            Ok(target) => f.rewritten = target,
            Err(why) => {
                let (p, detail) = crate::stages::route::rewrite_refusal(why);
                f.answer = Some(Answer::problem(p, detail));
                return f;
            }
        }
    }
    let query = match &f.rewritten {
        Some(t) => t.query(),
        None => req.uri.query(),
    };
    if let Some(name) = r.inputs.ambiguous(&req.headers, query) {
        f.answer = Some(Answer::problem(
            Problem::AmbiguousRequest,
            format!("\"{name}\": this route reads it to identify the caller, and it is given more than once or named as hop-by-hop; give it once."),
        ));
        return f;
    }
    if let Some(a) = body_cap(req, r.max_body) {
        f.answer = Some(a);
        return f;
    }
    if let Some(access) = &r.access {
        f.access = access.check(client, &req.headers);
        if let Access::Denied(_) = f.access {
            f.answer = Some(Answer::problem(
                Problem::AccessDenied,
                "Requests from this address or client software are not accepted.",
            ));
        }
    }
    f
}

/// The body stage on a declared length: 413 past the route's cap (0: none).
fn body_cap(req: &RequestHeader, max_body: u64) -> Option<Answer> {
    if max_body == 0 {
        return None;
    }
    match crate::inbound::declared_length(req) {
        Some(Some(n)) if n <= max_body => None,
        None => None,
        Some(_) => Some(Answer::problem(
            Problem::BodyTooLarge,
            format!("The request body is larger than this route accepts ({max_body} bytes)."),
        )),
    }
}

/// The answer to plaintext on a route that redirects to HTTPS: the redirect, or 400 when
/// the request names no host to redirect to.
fn https_answer(location: Option<http::HeaderValue>) -> Answer {
    match location {
        Some(l) => Answer {
            status: 308,
            kind: "https_redirect",
            detail: format!(
                "Plaintext is redirected to {}.",
                l.to_str().unwrap_or("HTTPS")
            ),
        },
        None => Answer::problem(
            Problem::BadRequest,
            "This address is served over HTTPS only, and the request names no host to redirect to.",
        ),
    }
}

impl Front {
    /// What the limits' keys read of this request: `path` and `query` from
    /// [`Front::key_path`], the client through trusted proxies, what authentication named.
    pub fn key_input<'a>(
        &self,
        req: &'a RequestHeader,
        (path, query): (&'a str, Option<&'a str>),
        route: usize,
        claims: Option<&'a tollgate_auth::jwt::Claims>,
        consumer: Option<&'a str>,
    ) -> crate::limits::identity::KeyInput<'a> {
        crate::limits::identity::KeyInput {
            req,
            client_cert: None,
            client_ip: self.client,
            path,
            query,
            route: route as u32,
            claims,
            body: None,
            consumer,
            descriptor: None,
        }
    }

    /// The path (and query) the limits key on: the rewritten target's, else the canonical
    /// path with the client's query; lower case on a case-insensitive route.
    pub fn key_path<'a>(
        &'a self,
        rt: &Runtime,
        req: &'a RequestHeader,
    ) -> (String, Option<&'a str>) {
        let (path, query) = match &self.rewritten {
            Some(t) => (t.path(), t.query()),
            None => (
                self.path.as_deref().unwrap_or(req.uri.path()),
                req.uri.query(),
            ),
        };
        let ci = self
            .route
            .is_some_and(|r| rt.routes[r].cfg.case_insensitive);
        let path = if ci {
            path.to_ascii_lowercase()
        } else {
            path.to_string()
        };
        (path, query)
    }
}

/// A request head as a client would send it: `url` absolute (`http://host/path?q`: the
/// authority becomes `Host` unless a `Host` is given, an `https` URL counts as TLS) or a
/// target starting with `/`; the target's bytes as given (no dot segment removed: curl's
/// `--path-as-is`).
pub fn request(
    method: &str,
    url: &str,
    headers: &[(String, String)],
) -> Result<(RequestHeader, bool), String> {
    let (secure, authority, target) = if let Some(rest) = url
        .strip_prefix("http://")
        .map(|r| (false, r))
        .or_else(|| url.strip_prefix("https://").map(|r| (true, r)))
    {
        let (secure, rest) = rest;
        let cut = rest.find(['/', '?']).unwrap_or(rest.len());
        let (auth, target) = rest.split_at(cut);
        let target = if target.starts_with('/') {
            target.to_string()
        } else {
            format!("/{target}")
        };
        (secure, Some(auth), target)
    } else if url.starts_with('/') {
        (false, None, url.to_string())
    } else {
        return Err(format!(
            "{url:?}: give an absolute URL (http://host/path) or a target starting with '/'"
        ));
    };
    let mut req = RequestHeader::build(method, target.as_bytes(), None)
        .map_err(|e| format!("{method} {target}: {e}"))?;
    let has_host = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host"));
    if let (Some(a), false) = (authority, has_host) {
        req.append_header(http::header::HOST, a)
            .map_err(|e| format!("Host {a:?}: {e}"))?;
    }
    for (n, v) in headers {
        let name = http::HeaderName::from_bytes(n.trim().as_bytes())
            .map_err(|_| format!("{n:?} is not a header name"))?;
        let value = http::HeaderValue::from_str(v.trim())
            .map_err(|_| format!("the value of {n:?} is not a header value"))?;
        req.append_header(name, value)
            .map_err(|e| format!("{n}: {e}"))?;
    }
    Ok((req, secure))
}
