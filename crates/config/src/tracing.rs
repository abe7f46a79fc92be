//! `[tracing]` (docs/tracing.md): OpenTelemetry traces, exported over OTLP/HTTP (protobuf).

use crate::model::{
    ClientAddress, TracingConfig, TrustContext, MAX_QUEUE_DEFAULT, SAMPLE_DEFAULT, TIMEOUT_DEFAULT,
};
use crate::reader::{as_str, type_err, Cx, Tbl, Value};
use std::time::Duration;
use toml::de::DeValue;

pub(crate) fn read(cx: &mut Cx, mut t: Tbl) -> Option<TracingConfig> {
    let mut ok = true;
    let endpoint = match t.get("otlp") {
        None => {
            cx.err(
                &t.path.clone(),
                t.span.clone(),
                "missing key \"otlp\" (the collector's OTLP/HTTP URL, e.g. \"http://127.0.0.1:4318\")",
            );
            None
        }
        Some(v) => endpoint(cx, &t.key_path("otlp"), v),
    };
    ok &= endpoint.is_some();
    let mut sample = SAMPLE_DEFAULT;
    if let Some(v) = t.get("sample") {
        match crate::scalars::ratio(cx, &t.key_path("sample"), v, "the share of requests traced") {
            Some(r) => sample = r,
            None => ok = false,
        }
    }
    let sample_refusals = t.bool(cx, "sample_refusals").unwrap_or(false);
    let service_name = match t.get("service_name") {
        Some(v) => match as_str(cx, &t.key_path("service_name"), v) {
            Some(s) if !s.trim().is_empty() => s.to_string(),
            Some(_) => {
                cx.err(&t.key_path("service_name"), v.span(), "must not be empty");
                ok = false;
                String::new()
            }
            None => {
                ok = false;
                String::new()
            }
        },
        None => "tollgate".to_string(),
    };
    let headers = match t.get("headers") {
        Some(v) => headers(cx, &t.key_path("headers"), v).unwrap_or_else(|| {
            ok = false;
            Vec::new()
        }),
        None => Vec::new(),
    };
    let timeout = match t.get("timeout") {
        Some(v) => match crate::scalars::duration(cx, &t.key_path("timeout"), v) {
            Some(d) if !d.is_zero() && d <= Duration::from_secs(60) => d,
            Some(_) => {
                cx.err(&t.key_path("timeout"), v.span(), "from 1ms to 60s");
                ok = false;
                TIMEOUT_DEFAULT
            }
            None => {
                ok = false;
                TIMEOUT_DEFAULT
            }
        },
        None => TIMEOUT_DEFAULT,
    };
    let max_queue = t
        .int_in(cx, "max_queue", 1, 1 << 20)
        .map_or(MAX_QUEUE_DEFAULT, |n| n as usize);
    let trust = one_of(
        cx,
        &mut t,
        "trust_context",
        &[
            ("trusted_proxies", TrustContext::TrustedProxies),
            ("all", TrustContext::All),
            ("none", TrustContext::None),
        ],
        &mut ok,
    );
    let client_address = one_of(
        cx,
        &mut t,
        "client_address",
        &[
            ("hashed", ClientAddress::Hashed),
            ("plain", ClientAddress::Plain),
            ("none", ClientAddress::None),
        ],
        &mut ok,
    );
    t.finish(cx);
    Some(TracingConfig {
        endpoint: endpoint?,
        sample,
        sample_refusals,
        service_name,
        headers,
        timeout,
        max_queue,
        trust,
        client_address,
    })
    .filter(|_| ok)
}

/// The value of `key` among `choices` (the first is the default); an unknown one is named
/// with the choices.
fn one_of<T: Copy>(cx: &mut Cx, t: &mut Tbl, key: &str, choices: &[(&str, T)], ok: &mut bool) -> T {
    let default = choices[0].1;
    let Some(v) = t.get(key) else {
        return default;
    };
    let path = t.key_path(key);
    let Some(given) = as_str(cx, &path, v) else {
        *ok = false;
        return default;
    };
    if let Some((_, c)) = choices.iter().find(|(name, _)| *name == given) {
        return *c;
    }
    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
    let (last, rest) = names.split_last().unwrap_or((&"", &[]));
    cx.err(
        &path,
        v.span(),
        format!("unknown {key} \"{given}\" ({} or {last})", rest.join(", ")),
    );
    *ok = false;
    default
}

/// `headers = { name = "value" }`: sent with each export.
fn headers(cx: &mut Cx, p: &str, v: &Value) -> Option<Vec<(String, String)>> {
    let mut m = Tbl::of(cx, p.to_string(), v)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (name, value, span) in m.entries() {
        let ip = format!("{p}.{name}");
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            cx.err(&ip, span, format!("\"{name}\" is not a header name"));
            ok = false;
            continue;
        }
        match as_str(cx, &ip, value) {
            Some(s) if http::HeaderValue::from_str(s).is_ok() => {
                out.push((name.to_ascii_lowercase(), s.to_string()))
            }
            Some(_) => {
                cx.err(&ip, value.span(), "not a header value (visible ASCII)");
                ok = false;
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// An http(s) URL with a host; `/v1/traces` added when it has no path.
fn endpoint(cx: &mut Cx, path: &str, v: &Value) -> Option<String> {
    let s = match v.get_ref() {
        DeValue::String(_) => as_str(cx, path, v)?,
        _ => {
            type_err(cx, path, v, "a URL (\"http://127.0.0.1:4318\")");
            return None;
        }
    };
    let uri: http::Uri = match s.parse() {
        Ok(u) => u,
        Err(_) => {
            cx.err(path, v.span(), "not a URL (e.g. \"http://127.0.0.1:4318\")");
            return None;
        }
    };
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        cx.err(path, v.span(), "an http:// or https:// URL with a host");
        return None;
    }
    Some(match uri.path() {
        "" | "/" => format!("{}/v1/traces", s.trim_end_matches('/')),
        _ => s.to_string(),
    })
}
