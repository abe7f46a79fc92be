//! `upstream_request_filter`: the route's header rules, then what the gateway writes toward
//! the upstream (X-Request-Id, the trace context, the target line, X-Forwarded-For and
//! X-Forwarded-Proto, what the route's auth owns, the shadow marker a client cannot forge).

use super::Gateway;
use crate::ctx::Ctx;
use crate::inbound::push_ip;
use bytes::Bytes;
use http::HeaderValue;
use pingora::http::RequestHeader;
use pingora::prelude::*;
use tollgate_config::model::ClientCertHeaders;
use tollgate_core::client_ip::trusted;
use tollgate_core::respond::names;
use tollgate_core::tls::client_cert::ClientCert;

pub(super) fn upstream_request_filter(
    gw: &Gateway,
    session: &mut Session,
    upstream: &mut RequestHeader,
    ctx: &mut Ctx,
) -> Result<()> {
    // Kept underscores (`underscores_in_headers = true`): a client's `X_Forwarded_For`
    // would shadow the gateway's `X-Forwarded-For` in CGI, WSGI, Rack and PHP.
    if ctx
        .rt
        .as_ref()
        .is_some_and(|rt| rt.config.server.underscores_in_headers)
    {
        tollgate_core::filters::headers::remove_spellings(upstream, |k| {
            GATEWAY_WRITES
                .iter()
                .any(|n| tollgate_core::filters::headers::underscore_spelling(k, n))
        });
    }
    // The route's header rules first: what the gateway writes below always wins.
    let shaping = match (&ctx.rt, ctx.route) {
        (Some(rt), Some(r)) => rt.routes[r].shaping.as_deref(),
        _ => None,
    };
    let told = shaping.map_or(ClientCertHeaders::Off, |s| s.client_cert);
    if let Some(s) = shaping {
        s.request(upstream, &crate::inbound::vars(ctx, session))?;
    }
    if told != ClientCertHeaders::Off {
        client_cert(session, told, upstream)?;
    } else if ctx.rt.as_ref().is_some_and(|rt| {
        rt.config
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some())
    }) {
        // Every host asks for client certificates (client_ca is the listeners'): as on an
        // ingress-nginx host with auth-tls, the upstream never reads a client's own copy.
        remove_client_cert_fields(upstream);
    }
    upstream.insert_static_header(&names::X_REQUEST_ID, ctx.request_id.clone());
    if let Some(t) = ctx.trace.as_mut() {
        trace_context(t, upstream);
    }
    target_line(ctx, upstream)?;
    forwarded(session, ctx, upstream)?;
    if let Some(a) = &ctx.auth {
        auth_headers(a, upstream)?;
    }
    // A client cannot forge the shadow marker: removed unless the gateway sets it.
    if ctx.shadow_exceeded {
        upstream.insert_static_header(&names::SHADOW_EXCEEDED, HeaderValue::from_static("true"));
    } else {
        upstream.remove_header(names::SHADOW_EXCEEDED.name());
    }
    super::mirror::start(gw, session, upstream, ctx);
    Ok(())
}

/// The fields the gateway itself writes on every upstream request (with dashes: the ones a
/// client's underscore spelling could shadow).
const GATEWAY_WRITES: [&str; 5] = [
    "x-request-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-prefix",
    "x-ratelimit-shadow-exceeded",
];

/// The client's own `ssl-client-*` fields, in every spelling.
fn remove_client_cert_fields(upstream: &mut RequestHeader) {
    const ALL: [&str; 4] = [
        "ssl-client-verify",
        "ssl-client-subject-dn",
        "ssl-client-issuer-dn",
        "ssl-client-cert",
    ];
    for n in ALL {
        upstream.remove_header(n);
    }
    tollgate_core::filters::headers::remove_spellings(upstream, |k| {
        ALL.iter()
            .any(|n| tollgate_core::filters::headers::underscore_spelling(k, n))
    });
}

/// ingress-nginx's `ssl-client-*` fields, from the certificate the handshake verified
/// (`ssl-client-verify: NONE` and no others without one). A client's own copies, in any
/// spelling, never reach the upstream: it would read them as the gateway's word.
fn client_cert(
    session: &Session,
    which: ClientCertHeaders,
    upstream: &mut RequestHeader,
) -> Result<()> {
    remove_client_cert_fields(upstream);
    let cert = session
        .digest()
        .and_then(|d| d.ssl_digest.as_deref())
        .and_then(|t| t.extension.get::<ClientCert>());
    let Some(c) = cert else {
        upstream.insert_static_header(&names::SSL_CLIENT_VERIFY, HeaderValue::from_static("NONE"));
        return Ok(());
    };
    let value = |s: &str| {
        HeaderValue::from_str(s)
            .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "a client certificate field"))
    };
    upstream.insert_static_header(
        &names::SSL_CLIENT_VERIFY,
        HeaderValue::from_static("SUCCESS"),
    );
    upstream.insert_static_header(&names::SSL_CLIENT_SUBJECT_DN, value(&c.subject_dn)?);
    upstream.insert_static_header(&names::SSL_CLIENT_ISSUER_DN, value(&c.issuer_dn)?);
    if which == ClientCertHeaders::WithCertificate {
        upstream.insert_static_header(&names::SSL_CLIENT_CERT, value(&c.escaped_pem)?);
    }
    Ok(())
}

/// The trace context the upstream continues: under the gateway's upstream span; a context
/// the gateway did not take is not passed on.
fn trace_context(t: &mut tollgate_core::observe::traces::TraceCtx, upstream: &mut RequestHeader) {
    upstream.insert_static_header(&names::TRACEPARENT, t.upstream_traceparent());
    match &t.tracestate {
        Some(ts) => upstream.insert_static_header(&names::TRACESTATE, ts.clone()),
        None if t.client_tracestate => {
            upstream.remove_header(names::TRACESTATE.name());
        }
        None => {}
    }
    // Only a sampled request's upstream span is ever exported (a refusal never
    // reaches the upstream).
    if t.sampled {
        t.upstream.get_or_insert_with(std::time::Instant::now);
    }
}

/// The target line the upstream reads: the route's rewrite (its query in it already), else
/// the canonical path the gateway routed on with the query as it came; and the Host the
/// target names when the client sent none.
fn target_line(ctx: &Ctx, upstream: &mut RequestHeader) -> Result<()> {
    if let Some(target) = &ctx.upstream_target {
        // The route rewrote the path (the query is in it already).
        upstream.set_raw_path(target.target.as_bytes())?;
        if let Some(authority) = &ctx.target_authority {
            if !upstream.headers.contains_key(http::header::HOST) {
                upstream.insert_header(http::header::HOST, authority.as_str())?;
            }
        }
    } else if let Some(path) = &ctx.canonical_path {
        // The upstream reads what the gateway routed on, in origin form; the query goes
        // as it came.
        let raw = upstream.raw_path();
        let query = raw
            .iter()
            .position(|&b| b == b'?')
            .map(|q| raw[q..].to_vec());
        let mut target = path.clone().into_bytes();
        target.extend_from_slice(query.as_deref().unwrap_or_default());
        upstream.set_raw_path(&target)?;
        if let Some(authority) = &ctx.target_authority {
            if !upstream.headers.contains_key(http::header::HOST) {
                upstream.insert_header(http::header::HOST, authority.as_str())?;
            }
        }
    }
    Ok(())
}

/// X-Forwarded-For (every prior value in order, then the peer, in one buffer) and
/// X-Forwarded-Proto (kept only from a trusted proxy).
fn forwarded(session: &Session, ctx: &Ctx, upstream: &mut RequestHeader) -> Result<()> {
    let mut xff = Vec::with_capacity(64);
    for v in upstream.headers.get_all(names::X_FORWARDED_FOR.name()) {
        xff.extend_from_slice(v.as_bytes());
        xff.extend_from_slice(b", ");
    }
    push_ip(&mut xff, ctx.peer);
    upstream.insert_static_header(
        &names::X_FORWARDED_FOR,
        HeaderValue::from_maybe_shared(Bytes::from(xff))
            .map_err(|_| Error::explain(ErrorType::InvalidHTTPHeader, "X-Forwarded-For"))?,
    );
    let from_trusted = ctx
        .rt
        .as_ref()
        .is_some_and(|rt| trusted(ctx.peer, &rt.trusted_proxies));
    if !(from_trusted
        && upstream
            .headers
            .contains_key(names::X_FORWARDED_PROTO.name()))
    {
        let proto = if session
            .digest()
            .and_then(|d| d.ssl_digest.as_ref())
            .is_some()
        {
            "https"
        } else {
            "http"
        };
        upstream.insert_static_header(&names::X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    Ok(())
}

/// What the route's auth owns: the client's copies (in every spelling) never reach the
/// upstream, then the auth's own values (claims, the auth service's headers); a key read
/// from the query leaves the target line.
fn auth_headers(a: &crate::ctx::AuthCtx, upstream: &mut RequestHeader) -> Result<()> {
    // What the auth owns, and what its answer sets (`response_headers = ["*"]` names none
    // in advance): the client's copies never stand beside the auth's.
    let set = a.passed.headers.iter().map(|(n, _)| n);
    for name in a.rt.owned.iter().chain(set.clone()) {
        upstream.remove_header(name);
    }
    // Other spellings of them too: CGI, WSGI, Rack and PHP read `X_User_Id` as
    // `X-User-Id` (HTTP_X_USER_ID).
    if !a.rt.owned.is_empty() || !a.passed.headers.is_empty() {
        tollgate_core::filters::headers::remove_spellings(upstream, |k| {
            a.rt.owned
                .iter()
                .chain(set.clone())
                .any(|o| tollgate_core::filters::headers::underscore_spelling(k, o.as_str()))
        });
    }
    for (name, value) in &a.passed.headers {
        upstream.append_header(name.clone(), value.clone())?;
    }
    // A key read from the query leaves the target line (and so every upstream log).
    if let Some(q) = &a.rt.strip_query {
        if let Some(target) = tollgate_auth::api_key::strip_param(upstream.raw_path(), q) {
            upstream.set_raw_path(&target)?;
        }
    }
    Ok(())
}
