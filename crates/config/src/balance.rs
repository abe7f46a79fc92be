//! An upstream's balancing keys (docs/upstreams.md): `balance`, `hash_key`, `affinity` and
//! `retry`. One reader per key, called by the `[upstreams.NAME]` reader.

use crate::model::{
    Affinity, Balance, HashKey, Retry, RetryOn, RetryTargets, RETRY_BUDGET_DEFAULT,
    RETRY_ON_DEFAULT,
};
use crate::reader::{as_str, as_str_list, Cx, Tbl, Value};
use crate::scalars::{duration, http_token};

pub(crate) fn balance(cx: &mut Cx, path: &str, v: &Value) -> Option<Balance> {
    Some(match as_str(cx, path, v)? {
        "round_robin" => Balance::RoundRobin,
        "least_request" => Balance::LeastRequest,
        "ewma" => Balance::Ewma,
        "hash" => Balance::Hash,
        other => {
            cx.err(
                path,
                v.span(),
                format!("\"{other}\": expected \"round_robin\", \"least_request\", \"ewma\" or \"hash\""),
            );
            return None;
        }
    })
}

pub(crate) fn hash_key(cx: &mut Cx, path: &str, v: &Value) -> Option<HashKey> {
    let s = as_str(cx, path, v)?;
    let named = |prefix: &str| {
        s.strip_prefix(prefix)
            .map(str::trim)
            .filter(|n| !n.is_empty())
    };
    let k = match s {
        "client_ip" => Some(HashKey::ClientIp),
        "path" => Some(HashKey::Path),
        "uri" => Some(HashKey::Uri),
        _ if s.starts_with("header:") => named("header:")
            .filter(|h| http_token(h))
            .map(|h| HashKey::Header(h.to_ascii_lowercase())),
        _ if s.starts_with("cookie:") => named("cookie:")
            .filter(|c| http_token(c))
            .map(|c| HashKey::Cookie(c.to_string())),
        _ if s.starts_with("query:") => named("query:").map(|q| HashKey::Query(q.to_string())),
        _ => None,
    };
    if k.is_none() {
        cx.err(
            path,
            v.span(),
            format!("\"{s}\": expected \"client_ip\", \"path\", \"uri\", \"header:NAME\", \"cookie:NAME\" or \"query:NAME\""),
        );
    }
    if let Some(HashKey::Header(h)) = &k {
        if !cx.client_header(path, v.span(), h) {
            return None;
        }
    }
    k
}

pub(crate) fn affinity(cx: &mut Cx, path: &str, v: &Value) -> Option<Affinity> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut ok = true;
    let cookie = match t.get("cookie") {
        None => "route".to_string(),
        Some(cv) => match as_str(cx, &t.key_path("cookie"), cv) {
            Some(c) if http_token(c) && !c.is_empty() => c.to_string(),
            Some(c) => {
                cx.err(
                    &t.key_path("cookie"),
                    cv.span(),
                    format!("\"{c}\" is not a cookie name"),
                );
                ok = false;
                String::new()
            }
            None => {
                ok = false;
                String::new()
            }
        },
    };
    let mut max_age = None;
    if let Some(mv) = t.get("max_age") {
        max_age = duration(cx, &t.key_path("max_age"), mv);
        ok &= max_age.is_some();
    }
    let mut cookie_path = "/".to_string();
    if let Some(pv) = t.get("path") {
        match as_str(cx, &t.key_path("path"), pv) {
            Some(p)
                if p.starts_with('/') && p.bytes().all(|b| b.is_ascii_graphic() && b != b';') =>
            {
                cookie_path = p.to_string();
            }
            Some(p) => {
                cx.err(
                    &t.key_path("path"),
                    pv.span(),
                    format!(
                        "\"{p}\": a cookie path starts with '/' and holds no space, ';' or control"
                    ),
                );
                ok = false;
            }
            None => ok = false,
        }
    }
    let secure = t.bool(cx, "secure");
    let mut secret = None;
    if let Some(sv) = t.get("secret") {
        match as_str(cx, &t.key_path("secret"), sv) {
            Some(s) if s.len() >= 16 => secret = Some(s.to_string()),
            Some(_) => {
                cx.err(
                    &t.key_path("secret"),
                    sv.span(),
                    "needs at least 16 characters",
                );
                ok = false;
            }
            None => ok = false,
        }
    }
    t.finish(cx);
    ok.then_some(Affinity {
        cookie,
        max_age,
        path: cookie_path,
        secure,
        secret,
    })
}

pub(crate) fn retry(cx: &mut Cx, path: &str, v: &Value) -> Option<Retry> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut ok = true;
    let attempts = match t.get("attempts") {
        None => 2,
        Some(_) => match t.int_in(cx, "attempts", 0, 10) {
            Some(n) => n as u32,
            None => {
                ok = false;
                0
            }
        },
    };
    let on = match t.get("on") {
        None => Some(RETRY_ON_DEFAULT),
        Some(ov) => retry_on(cx, &t.key_path("on"), ov),
    };
    let mut budget = RETRY_BUDGET_DEFAULT;
    if let Some(bv) = t.get("budget") {
        match crate::scalars::number_in(cx, &t.key_path("budget"), bv, 10.0, "retries per request")
        {
            Some(b) => budget = b,
            None => ok = false,
        }
    }
    let targets = match t.get("targets") {
        None => Some(RetryTargets::Untried),
        Some(tv) => retry_targets(cx, &t.key_path("targets"), tv),
    };
    let backoff = match t.get("backoff") {
        None => Some(None),
        Some(bv) => match duration(cx, &t.key_path("backoff"), bv) {
            Some(d) if d <= std::time::Duration::from_secs(60) => {
                Some(Some(d).filter(|d| !d.is_zero()))
            }
            Some(_) => {
                cx.err(
                    &t.key_path("backoff"),
                    bv.span(),
                    "at most 60s between retries",
                );
                None
            }
            None => None,
        },
    };
    t.finish(cx);
    let (Some(on), Some(targets), Some(backoff), true) = (on, targets, backoff, ok) else {
        return None;
    };
    Some(Retry {
        attempts,
        on,
        budget,
        targets,
        backoff,
    })
}

/// `retry.on`: `connect`, `error`, `reset`, `timeout` and statuses from 400 to 599.
fn retry_on(cx: &mut Cx, path: &str, v: &Value) -> Option<RetryOn> {
    let mut on = RetryOn::default();
    let mut ok = true;
    for (ip, s, span) in as_str_list(cx, path, v, false)? {
        match s {
            "connect" => on.connect = true,
            // nginx's `error`: no connection, or one lost before the answer.
            "error" => {
                on.connect = true;
                on.reset = true;
            }
            "reset" => on.reset = true,
            "timeout" => on.timeout = true,
            code => match code.parse::<u16>() {
                Ok(c) if (400..=599).contains(&c) && code.len() == 3 => on.set_status(c),
                _ => {
                    cx.err(
                        &ip,
                        span,
                        format!("\"{code}\": expected \"connect\", \"error\", \"reset\", \"timeout\", or a status from \"400\" to \"599\" (\"502\")"),
                    );
                    ok = false;
                }
            },
        }
    }
    ok.then_some(on)
}

/// `retry.targets`: `"untried"` or `"any"`.
fn retry_targets(cx: &mut Cx, path: &str, v: &Value) -> Option<RetryTargets> {
    match as_str(cx, path, v)? {
        "untried" => Some(RetryTargets::Untried),
        "any" => Some(RetryTargets::Any),
        other => {
            cx.err(
                path,
                v.span(),
                format!("\"{other}\": expected \"untried\" (only targets not tried yet, as nginx) or \"any\" (then the same ones again, as Envoy)"),
            );
            None
        }
    }
}
