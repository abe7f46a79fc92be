//! `[auth.NAME]` tables and a route's `auth`: who may pass (docs/auth.md). Each table names
//! exactly one method: `jwt` (with `claims` and `forward_claims`), `forward`, `basic` or
//! `api_key`. Files (htpasswd, API keys) are read and checked here, at load: a hash that
//! cannot be verified or a key given twice is a config error naming the file and line.

use crate::model::AuthConfig;
use crate::model::*;
use crate::reader::{as_bool, as_str, as_str_list, join, type_err, Cx, Tbl, Value};
use crate::scalars::{duration, http_token};
use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::de::DeValue;

/// The methods, as a table names them.
const METHODS: [&str; 4] = ["jwt", "forward", "basic", "api_key"];
/// The longest an auth service may take (its `timeout`).
const MAX_FORWARD_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest an auth service's answer is reused (its `cache`).
const MAX_FORWARD_CACHE: Duration = Duration::from_secs(3600);
/// An auth service's default timeout.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// The realm a basic-auth challenge names by default.
const REALM: &str = "Restricted";

/// What the readers need of the rest of the document.
pub(crate) struct Env<'a> {
    pub base: &'a Path,
    /// A `[jwt]` table is present (required tokens are verified with its keys).
    pub jwt_present: bool,
}

/// `[auth]`: named tables routes refer to with `auth = "NAME"`.
pub(crate) fn named(
    cx: &mut Cx,
    mut t: Tbl,
    env: &Env,
    files: &mut Vec<PathBuf>,
) -> Vec<Option<AuthConfig>> {
    let mut out = Vec::new();
    for (name, v, _) in t.entries() {
        let path = join(&t.path, name);
        let read = Tbl::of(cx, path.clone(), v).and_then(|mut at| {
            let m = method(cx, &mut at, &path, env, files);
            at.finish(cx);
            m
        });
        out.push(read.map(|method| AuthConfig {
            name: name.to_string(),
            method,
        }));
    }
    t.finish(cx);
    out
}

/// A route's `auth`: the name of an `[auth.NAME]` table, or a table of its own (pushed onto
/// `auths`, named after the route). The index into `auths`; `Err(())` when the key is wrong.
///
/// The route may also say `hide_credentials` or `forward_token` itself, beside `auth`: a
/// named table is then taken as this route's own copy with that setting.
pub(crate) fn route(
    cx: &mut Cx,
    r: &mut Tbl,
    route_name: &str,
    env: &Env,
    auths: &mut Vec<Option<AuthConfig>>,
    files: &mut Vec<PathBuf>,
) -> Result<Option<usize>, ()> {
    let mut setting = None;
    for k in ["hide_credentials", "forward_token"] {
        if let Some(v) = r.get(k) {
            let kp = r.key_path(k);
            let b = as_bool(cx, &kp, v).ok_or(())?;
            if setting.is_some() {
                cx.err(&kp, v.span(), "hide_credentials and forward_token: a route's auth takes one (basic and api_key: hide_credentials; jwt: forward_token)");
                return Err(());
            }
            setting = Some((k, b, kp, v.span()));
        }
    }
    let named = matches!(r.get("auth").map(|v| v.get_ref()), Some(DeValue::String(_)));
    let found = route_auth(cx, r, route_name, env, auths, files)?;
    let Some((key, value, kp, span)) = setting else {
        return Ok(found);
    };
    let Some(i) = found else {
        cx.err(
            &kp,
            span,
            format!("{key} goes with the route's auth: it has none"),
        );
        return Err(());
    };
    if !named {
        cx.err(
            &kp,
            span,
            format!("{key} beside an auth table of the route's own: write it inside that table"),
        );
        return Err(());
    }
    let Some(mut own) = auths.get(i).cloned().flatten() else {
        return Err(());
    };
    let applied = match (&mut own.method, key) {
        (AuthMethod::Basic(b), "hide_credentials") => Some(&mut b.hide_credentials),
        (AuthMethod::ApiKey(k), "hide_credentials") => Some(&mut k.hide_credentials),
        (AuthMethod::Jwt(j), "forward_token") => Some(&mut j.forward_token),
        _ => None,
    };
    let Some(slot) = applied else {
        let what = if key == "hide_credentials" {
            "hide_credentials goes with basic and api_key auth (a bearer token is kept from the upstream with forward_token = false)"
        } else {
            "forward_token goes with jwt auth (basic and api_key credentials: hide_credentials)"
        };
        cx.err(&kp, span, what);
        return Err(());
    };
    *slot = value;
    own.name = route_name.to_string();
    auths.push(Some(own));
    Ok(Some(auths.len() - 1))
}

fn route_auth(
    cx: &mut Cx,
    r: &mut Tbl,
    route_name: &str,
    env: &Env,
    auths: &mut Vec<Option<AuthConfig>>,
    files: &mut Vec<PathBuf>,
) -> Result<Option<usize>, ()> {
    let Some(v) = r.get("auth") else {
        return Ok(None);
    };
    let p = r.key_path("auth");
    if let DeValue::String(name) = v.get_ref() {
        return match auths
            .iter()
            .position(|a| a.as_ref().is_some_and(|a| a.name == *name))
        {
            Some(i) => Ok(Some(i)),
            None => {
                cx.err(
                    &p,
                    v.span(),
                    format!("unknown auth \"{name}\": define it as [auth.{name}], or write the table here"),
                );
                Err(())
            }
        };
    }
    let mut t = match v.get_ref() {
        DeValue::Table(_) => Tbl::of(cx, p.clone(), v).ok_or(())?,
        _ => {
            type_err(cx, &p, v, "the name of an [auth.NAME] table, or a table");
            return Err(());
        }
    };
    let m = method(cx, &mut t, &p, env, files);
    t.finish(cx);
    let method = m.ok_or(())?;
    auths.push(Some(AuthConfig {
        name: route_name.to_string(),
        method,
    }));
    Ok(Some(auths.len() - 1))
}

/// Exactly one method, and only its keys.
fn method(
    cx: &mut Cx,
    t: &mut Tbl,
    path: &str,
    env: &Env,
    files: &mut Vec<PathBuf>,
) -> Option<AuthMethod> {
    let given: Vec<&str> = METHODS
        .iter()
        .copied()
        .filter(|m| t.get(m).is_some())
        .collect();
    let m = match given.as_slice() {
        [m] => *m,
        [] => {
            cx.err(
                path,
                t.span.clone(),
                "an auth table names one method: jwt, forward, basic or api_key",
            );
            return None;
        }
        [_, second, ..] => {
            let span = t.get(second).map(|v| v.span()).unwrap_or(0..0);
            cx.err(
                &t.key_path(second),
                span,
                format!(
                    "an auth table names one method, not {}: put each on its own route (or [auth.NAME] table)",
                    given.join(" and ")
                ),
            );
            return None;
        }
    };
    // `hide_credentials` (basic, api_key) and `forward_token` (jwt) may sit beside the method.
    let mut hide = None;
    if let Some(v) = t.get("hide_credentials") {
        let hp = t.key_path("hide_credentials");
        if m == "jwt" || m == "forward" {
            let hint = if m == "jwt" {
                "a bearer token is kept from the upstream with forward_token = false"
            } else {
                "an auth service's credentials are the service's to judge, and go on"
            };
            cx.err(
                &hp,
                v.span(),
                format!("hide_credentials goes with basic and api_key: {hint}"),
            );
            return None;
        }
        hide = Some(as_bool(cx, &hp, v)?);
    }
    if m != "jwt" {
        if let Some(v) = t.get("forward_token") {
            cx.err(
                &t.key_path("forward_token"),
                v.span(),
                "forward_token goes with jwt = \"required\" or \"optional\" (basic and api_key credentials: hide_credentials)",
            );
            return None;
        }
    }
    if m != "jwt" {
        for k in ["claims", "forward_claims"] {
            if let Some(v) = t.get(k) {
                cx.err(
                    &t.key_path(k),
                    v.span(),
                    format!("{k} goes with jwt = \"required\" or \"optional\""),
                );
                return None;
            }
        }
    }
    let v = t.get(m)?;
    let p = t.key_path(m);
    match m {
        "jwt" => jwt(cx, t, &p, v, env).map(AuthMethod::Jwt),
        "forward" => {
            let ft = Tbl::of(cx, p.clone(), v)?;
            forward(cx, ft).map(AuthMethod::Forward)
        }
        "basic" => {
            let bt = Tbl::of(cx, p.clone(), v)?;
            basic(cx, bt, env.base, files, hide).map(AuthMethod::Basic)
        }
        _ => {
            let kt = Tbl::of(cx, p.clone(), v)?;
            api_key(cx, kt, env.base, files, hide).map(AuthMethod::ApiKey)
        }
    }
}

/// `jwt = "required" | "optional"`, `claims = { CLAIM = value or [values] }`,
/// `forward_claims = { CLAIM = "Header-Name" }`.
fn jwt(cx: &mut Cx, t: &mut Tbl, p: &str, v: &Value, env: &Env) -> Option<JwtAuth> {
    let required = match as_str(cx, p, v)? {
        "required" => true,
        "optional" => false,
        other => {
            cx.err(
                p,
                v.span(),
                format!("\"{other}\": write jwt = \"required\" or \"optional\""),
            );
            return None;
        }
    };
    if !env.jwt_present {
        cx.err(
            p,
            v.span(),
            "tokens are verified with the keys of [jwt]: add a [jwt] section (jwks_url, public_keys, jwks_file or secret)",
        );
        return None;
    }
    let mut ok = true;
    let mut claims = Vec::new();
    if let Some(cv) = t.get("claims") {
        let mut ct = Tbl::of(cx, t.key_path("claims"), cv)?;
        for (claim, value, _) in ct.entries() {
            match claim_rule(cx, &join(&ct.path, claim), claim, value) {
                Some(rule) => claims.push(rule),
                None => ok = false,
            }
        }
        ct.finish(cx);
    }
    let mut forward_claims = Vec::new();
    if let Some(fv) = t.get("forward_claims") {
        let mut ft = Tbl::of(cx, t.key_path("forward_claims"), fv)?;
        let mut seen = HashSet::new();
        for (claim, hv, _) in ft.entries() {
            let hp = join(&ft.path, claim);
            match header_name(cx, &hp, hv) {
                Some(h) if !seen.insert(h.clone()) => {
                    cx.err(
                        &hp,
                        hv.span(),
                        format!("header {h} is written by two claims"),
                    );
                    ok = false;
                }
                Some(h) => forward_claims.push((claim.to_string(), h)),
                None => ok = false,
            }
        }
        ft.finish(cx);
    }
    if !required && !claims.is_empty() {
        cx.err(
            &t.key_path("claims"),
            t.get("claims").map(|v| v.span()).unwrap_or(0..0),
            "claims with jwt = \"optional\": a request without a token would pass them by; write jwt = \"required\"",
        );
        ok = false;
    }
    let forward_token = t.bool(cx, "forward_token").unwrap_or(true);
    ok.then_some(JwtAuth {
        required,
        claims,
        forward_claims,
        forward_token,
    })
}

/// One `claims` entry: scopes (`scope`, `scp`) all required; any other claim one of the values.
fn claim_rule(cx: &mut Cx, p: &str, claim: &str, v: &Value) -> Option<ClaimRule> {
    let values: Vec<String> = match v.get_ref() {
        DeValue::String(s) => vec![s.to_string()],
        DeValue::Integer(_) | DeValue::Boolean(_) => vec![scalar_text(v)?],
        DeValue::Array(_) => {
            let items = crate::reader::as_array(cx, p, v)?;
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match scalar_text(item) {
                    Some(s) => out.push(s),
                    None => {
                        type_err(
                            cx,
                            &format!("{p}[{i}]"),
                            item,
                            "a string, integer or boolean",
                        );
                        return None;
                    }
                }
            }
            out
        }
        _ => {
            type_err(cx, p, v, "a value, or a list of values");
            return None;
        }
    };
    if values.is_empty() || values.iter().any(|s| s.is_empty()) {
        cx.err(p, v.span(), "needs at least one non-empty value");
        return None;
    }
    if claim == "scope" || claim == "scp" {
        let all = values
            .iter()
            .flat_map(|s| s.split_ascii_whitespace())
            .map(str::to_string)
            .collect();
        return Some(ClaimRule::Scopes {
            claim: claim.to_string(),
            all,
        });
    }
    Some(ClaimRule::OneOf {
        claim: claim.to_string(),
        any: values,
    })
}

fn scalar_text(v: &Value) -> Option<String> {
    match v.get_ref() {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => Some(i.to_string()),
        DeValue::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A header name, lower case; never one that frames the request or names the upstream.
/// Names that frame a request or name its host: never set from an auth answer or a claim.
pub const AUTH_FRAMING: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

fn header_name(cx: &mut Cx, p: &str, v: &Value) -> Option<String> {
    let h = as_str(cx, p, v)?;
    if h == "*" {
        cx.err(
            p,
            v.span(),
            "\"*\" (every header of the answer) stands alone in the list",
        );
        return None;
    }
    if h.is_empty() || !http_token(h) {
        cx.err(p, v.span(), format!("\"{h}\" is not a header name"));
        return None;
    }
    let lower = h.to_ascii_lowercase();
    if AUTH_FRAMING.contains(&lower.as_str()) {
        cx.err(
            p,
            v.span(),
            format!("{h} frames the request or names its host: it cannot be set from an auth answer or a claim"),
        );
        return None;
    }
    Some(lower)
}

/// A list of the client's header names (sent on to an auth service).
fn header_list(cx: &mut Cx, t: &mut Tbl, k: &str) -> Option<Vec<String>> {
    let v = t.get(k)?;
    let p = t.key_path(k);
    let items = as_str_list(cx, &p, v, true)?;
    let mut out = Vec::new();
    for (ip, h, span) in items {
        if h.is_empty() || !http_token(h) {
            cx.err(&ip, span, format!("\"{h}\" is not a header name"));
            continue;
        }
        if !cx.client_header(&ip, span, h) {
            continue;
        }
        out.push(h.to_ascii_lowercase());
    }
    Some(out)
}

/// An absolute `http://` or `https://` URL with a host.
fn http_url(cx: &mut Cx, p: &str, v: &Value, what: &str) -> Option<String> {
    let s = as_str(cx, p, v)?;
    let ok = s
        .parse::<http::Uri>()
        .ok()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !ok {
        cx.err(
            p,
            v.span(),
            format!("\"{s}\" is not {what}: write an absolute http:// or https:// URL"),
        );
        return None;
    }
    Some(s.to_string())
}

/// `forward = { url, method, request_headers, response_headers, append_path, signin,
/// redirect, timeout, cache, cache_key }`.
fn forward(cx: &mut Cx, mut t: Tbl) -> Option<ForwardAuth> {
    let mut ok = true;
    let url = match t.get("url") {
        Some(v) => http_url(cx, &t.key_path("url"), v, "the auth service's URL"),
        None => {
            cx.err(
                &t.path,
                t.span.clone(),
                "missing key \"url\": the auth service asked about each request",
            );
            None
        }
    };
    let method = t.get("method").and_then(|v| {
        let p = t.key_path("method");
        let m = as_str(cx, &p, v)?.to_ascii_uppercase();
        if m.is_empty() || !http_token(&m) {
            cx.err(&p, v.span(), format!("\"{m}\" is not an HTTP method"));
            ok = false;
            return None;
        }
        Some(m)
    });
    let request_headers = header_list(cx, &mut t, "request_headers");
    let response_headers = match t.get("response_headers") {
        Some(v) => {
            let p = t.key_path("response_headers");
            let mut out = Vec::new();
            match crate::reader::as_array(cx, &p, v) {
                Some(items)
                    if items.len() == 1
                        && matches!(items[0].get_ref(), toml::de::DeValue::String(s) if s == "*") =>
                {
                    out.push("*".to_string())
                }
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        match header_name(cx, &format!("{p}[{i}]"), item) {
                            Some(h) => out.push(h),
                            None => ok = false,
                        }
                    }
                }
                None => ok = false,
            }
            out
        }
        None => Vec::new(),
    };
    let signin = t.get("signin").and_then(|v| {
        let p = t.key_path("signin");
        // A path: the browser resolves it on the host it asked (never "//host": elsewhere).
        match as_str(cx, &p, v) {
            Some(s) if s.starts_with('/') && !s.starts_with("//") && !s.contains('\\') => {
                Some(s.to_string())
            }
            Some(_) => http_url(cx, &p, v, "a sign-in URL (or a path on the request's host)"),
            None => None,
        }
    });
    let redirect = t
        .get("redirect")
        .and_then(|v| as_str(cx, &t.key_path("redirect"), v).map(str::to_string));
    let timeout = bounded(cx, &mut t, "timeout", MAX_FORWARD_TIMEOUT).unwrap_or(FORWARD_TIMEOUT);
    let cache = bounded(cx, &mut t, "cache", MAX_FORWARD_CACHE).filter(|d| !d.is_zero());
    let append_path = match t.get("append_path") {
        Some(v) => crate::reader::as_bool(cx, &t.key_path("append_path"), v).unwrap_or_else(|| {
            ok = false;
            false
        }),
        None => false,
    };
    let cache_key = match t.get("cache_key") {
        Some(v) => cache_key(cx, &t.key_path("cache_key"), v, &mut ok),
        // The credentials a client sends, and where it is: what an auth service decides by
        // (the method, host, path and query are in every key).
        None => vec![
            KeySource::Header("authorization".into()),
            KeySource::Header("cookie".into()),
            KeySource::ClientIp,
        ],
    };
    t.finish(cx);
    (ok && url.is_some()).then(|| ForwardAuth {
        url: url.unwrap_or_default(),
        method,
        request_headers,
        response_headers,
        append_path,
        signin,
        redirect,
        timeout,
        cache,
        cache_key,
    })
}

/// A duration at `k`, at most `max`.
fn bounded(cx: &mut Cx, t: &mut Tbl, k: &str, max: Duration) -> Option<Duration> {
    let v = t.get(k)?;
    let p = t.key_path(k);
    let d = duration(cx, &p, v)?;
    if d > max {
        cx.err(&p, v.span(), format!("at most {}s", max.as_secs()));
        return None;
    }
    Some(d)
}

/// `cache_key`: key sources a request's auth answer is reused by.
fn cache_key(cx: &mut Cx, p: &str, v: &Value, ok: &mut bool) -> Vec<KeySource> {
    let mut out = Vec::new();
    for (ip, s, span) in as_str_list(cx, p, v, true).unwrap_or_default() {
        match crate::limits::key_source(cx, &ip, s, span.clone()) {
            Some(
                k @ (KeySource::Header(_)
                | KeySource::Query(_)
                | KeySource::ClientIp
                | KeySource::Path
                | KeySource::Method
                | KeySource::Route
                | KeySource::Global),
            ) => out.push(k),
            Some(_) => {
                cx.err(
                    &ip,
                    span,
                    "an auth answer is cached by header:NAME, query:NAME, client_ip, path, method, route or global",
                );
                *ok = false;
            }
            None => *ok = false,
        }
    }
    out
}

/// `hide_credentials` inside a basic or api_key table, or beside it (`outer`); given in
/// both places is an error. Default: hidden (the upstream never reads a credential the gateway
/// checked).
fn hide_credentials(cx: &mut Cx, t: &mut Tbl, outer: Option<bool>) -> Option<bool> {
    let Some(v) = t.get("hide_credentials") else {
        return Some(outer.unwrap_or(true));
    };
    let p = t.key_path("hide_credentials");
    if outer.is_some() {
        cx.err(
            &p,
            v.span(),
            "hide_credentials is given twice (here and beside the method): give it once",
        );
        return None;
    }
    as_bool(cx, &p, v)
}

/// Lines of an auth file (only a line starting with `#` is a comment: a hash or a key may hold
/// one); the file when every line is good. One mounted where the config runs (an import's
/// Secret) may be absent here.
fn lines(
    cx: &mut Cx,
    p: &str,
    file: &str,
    span: Range<usize>,
    base: &Path,
    files: &mut Vec<PathBuf>,
    item: impl FnMut(usize, &str) -> Result<(), String>,
) -> Option<PathBuf> {
    use crate::files::{entries, Comments};
    let full = base.join(file);
    if cx.mounted_later(&full) {
        return Some(full);
    }
    let (full, bad) = entries(cx, p, file, span, base, files, Comments::WholeLine, item)?;
    (bad == 0).then_some(full)
}

/// A folder of users (a Secret of `auth-map` form, mounted): each file is named after its
/// user and holds the hash. Names starting with a dot (the kubelet's own entries) are skipped.
fn user_files(
    cx: &mut Cx,
    p: &str,
    dir: &str,
    span: Range<usize>,
    base: &Path,
    files: &mut Vec<PathBuf>,
    add: &mut dyn FnMut(&str, &str) -> Result<(), String>,
) -> Option<PathBuf> {
    let full = base.join(dir);
    let mut names: Vec<String> = if crate::mounted::is_dir(&full) {
        crate::mounted::list(&full)
    } else {
        match std::fs::read_dir(&full) {
            Ok(e) => e
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect(),
            Err(e) => {
                cx.err(p, span, format!("cannot read {}: {e}", full.display()));
                return None;
            }
        }
    };
    files.push(full.clone());
    names.retain(|n| !n.starts_with('.'));
    names.sort();
    let mut ok = true;
    for name in names {
        let path = full.join(&name);
        if crate::mounted::read(&path).is_none() && path.is_dir() {
            continue;
        }
        let read = crate::files::read_bounded_text(&path);
        files.push(path);
        let result = match read {
            Ok(hash) => add(&name, hash.trim()),
            Err(e) => Err(format!("cannot read it: {e}")),
        };
        if let Err(why) = result {
            cx.err(p, span.clone(), format!("{dir}/{name}: {why}"));
            ok = false;
        }
    }
    ok.then_some(full)
}

/// `basic = { htpasswd = "FILE", realm }`.
fn basic(
    cx: &mut Cx,
    mut t: Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
    hide: Option<bool>,
) -> Option<BasicAuth> {
    let hide_credentials = hide_credentials(cx, &mut t, hide);
    let realm = match t.get("realm") {
        Some(v) => {
            let p = t.key_path("realm");
            let r = as_str(cx, &p, v)?;
            if r.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
                cx.err(
                    &p,
                    v.span(),
                    "a realm holds no quote, backslash or control character",
                );
                return None;
            }
            r.to_string()
        }
        None => REALM.to_string(),
    };
    let Some(v) = t.get("htpasswd") else {
        cx.err(
            &t.path,
            t.span.clone(),
            "missing key \"htpasswd\": the file of users and password hashes (made by htpasswd)",
        );
        t.finish(cx);
        return None;
    };
    let p = t.key_path("htpasswd");
    let file = as_str(cx, &p, v)?.to_string();
    let mut users: Vec<(String, String)> = Vec::new();
    let mut weak: Vec<WeakHash> = Vec::new();
    let mut add = |at: String, user: &str, hash: &str| -> Result<(), String> {
        if user.is_empty() {
            return Err("an empty user name".into());
        }
        if users.iter().any(|(u, _)| u == user) {
            return Err(format!("user \"{user}\" is listed twice"));
        }
        if let Some(why) = weakness(hash_format(hash)?, hash) {
            weak.push(WeakHash { at, why });
        }
        users.push((user.to_string(), hash.to_string()));
        Ok(())
    };
    let folder = base.join(&file);
    let full = if crate::mounted::is_dir(&folder) || (folder.is_dir() && !cx.mounted_later(&folder))
    {
        let mut by_file = |user: &str, hash: &str| add(format!("{file}/{user}"), user, hash);
        user_files(cx, &p, &file, v.span(), base, files, &mut by_file)
    } else {
        lines(cx, &p, &file, v.span(), base, files, |n, line| {
            let (user, hash) = line
                .split_once(':')
                .ok_or("not USER:HASH (as htpasswd writes)")?;
            add(format!("{file} line {n}"), user, hash)
        })
    };
    t.finish(cx);
    Some(BasicAuth {
        file: full?,
        users,
        realm,
        hide_credentials: hide_credentials?,
        weak,
    })
}

/// The bcrypt cost below which a hash is named weak: OWASP's floor (htpasswd -B writes 5).
pub const BCRYPT_COST_FLOOR: u32 = 10;

/// The cost of a bcrypt hash (`$2y$NN$...`), as `hash_format` checked it.
pub fn bcrypt_cost(hash: &str) -> Option<u32> {
    hash.get(4..6)?.parse().ok()
}

/// Why a hash `hash_format` accepted is weak (a warning at load), or `None`. Never quotes it.
fn weakness(format: &str, hash: &str) -> Option<String> {
    match format {
        "sha1" => Some(
            "an unsalted SHA-1 ({SHA}) hash, which is guessed at billions a second: rewrite it with htpasswd -B -C 10"
                .into(),
        ),
        "md5" => Some(
            "an MD5 crypt (apr1) hash, which is guessed at millions a second: rewrite it with htpasswd -B -C 10"
                .into(),
        ),
        _ => match bcrypt_cost(hash) {
            Some(c) if c < BCRYPT_COST_FLOOR => Some(format!(
                "bcrypt at cost {c}, under {BCRYPT_COST_FLOOR}: rewrite it with htpasswd -B -C {BCRYPT_COST_FLOOR}"
            )),
            _ => None,
        },
    }
}

/// The warnings of a config's auth files: each weak password hash by file and line.
pub fn weak_hash_warnings(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for a in &cfg.auth {
        if let AuthMethod::Basic(b) = &a.method {
            for w in &b.weak {
                out.push(format!("auth {}: {}: {}", a.name, w.at, w.why));
            }
        }
    }
    out
}

/// The hash formats `htpasswd` writes that Tollgate verifies: bcrypt (`-B`), apr1 MD5 (`-m`,
/// the default), MD5 crypt (`$1$`) and SHA-1 (`-s`). The crypt(3) formats no well-kept crate
/// verifies (DES `-d`, SHA-256/512 crypt `-5`/`-2`) and plain text (`-p`) are refused at load,
/// never accepted by surprise.
pub fn hash_format(hash: &str) -> Result<&'static str, String> {
    let bcrypt = ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p));
    if bcrypt && hash.len() == 60 {
        return Ok("bcrypt");
    }
    if let Some(rest) = hash
        .strip_prefix("$apr1$")
        .or_else(|| hash.strip_prefix("$1$"))
    {
        let ok = rest
            .split_once('$')
            .is_some_and(|(salt, sum)| !salt.is_empty() && salt.len() <= 8 && sum.len() == 22);
        if ok {
            return Ok("md5");
        }
    }
    if let Some(b) = hash.strip_prefix("{SHA}") {
        if b.len() == 28 {
            return Ok("sha1");
        }
    }
    let why = if hash.starts_with("$5$") || hash.starts_with("$6$") {
        "a SHA-256/512 crypt hash (htpasswd -5/-2), which Tollgate does not verify"
    } else if hash.len() == 13 && !hash.starts_with('$') {
        "a DES crypt hash (htpasswd -d), which Tollgate does not verify (and which is broken)"
    } else {
        "not a hash Tollgate verifies (plain text, or unknown)"
    };
    Err(format!(
        "{why}: write it with htpasswd -B (bcrypt), -m (apr1) or -s (SHA-1)"
    ))
}

/// `api_key = { header | query, keys_file }`: lines `CONSUMER KEY`.
fn api_key(
    cx: &mut Cx,
    mut t: Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
    hide: Option<bool>,
) -> Option<ApiKeyAuth> {
    let hide_credentials = hide_credentials(cx, &mut t, hide);
    let header = match t.get("header") {
        Some(v) => {
            let p = t.key_path("header");
            let h = as_str(cx, &p, v)?;
            if h.is_empty() || !http_token(h) {
                cx.err(&p, v.span(), format!("\"{h}\" is not a header name"));
                return None;
            }
            if !cx.client_header(&p, v.span(), h) {
                return None;
            }
            Some(h.to_ascii_lowercase())
        }
        None => None,
    };
    let query = match t.get("query") {
        Some(v) => {
            let q = as_str(cx, &t.key_path("query"), v)?;
            if q.is_empty() {
                cx.err(&t.key_path("query"), v.span(), "needs a parameter name");
                return None;
            }
            Some(q.to_string())
        }
        None => None,
    };
    let header = match (header, &query) {
        (None, None) => Some("x-api-key".to_string()),
        (h, _) => h,
    };
    let Some(v) = t.get("keys_file") else {
        cx.err(
            &t.path,
            t.span.clone(),
            "missing key \"keys_file\": the file of consumers and their keys (lines: CONSUMER KEY)",
        );
        t.finish(cx);
        return None;
    };
    let p = t.key_path("keys_file");
    let file = as_str(cx, &p, v)?.to_string();
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut seen = HashSet::new();
    let full = lines(cx, &p, &file, v.span(), base, files, |_, line| {
        let mut parts = line.split_ascii_whitespace();
        let (Some(consumer), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err("not CONSUMER KEY".into());
        };
        // A short key is guessed: the floor of Kong's generated keys is far above this.
        if key.len() < 16 {
            return Err(format!(
                "the key of \"{consumer}\" has fewer than 16 characters"
            ));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("the key of \"{consumer}\" is not printable ASCII"));
        }
        // (The key itself is never printed: the file and line say which.)
        if !seen.insert(key.to_string()) {
            return Err("this key is given twice".into());
        }
        keys.push((consumer.to_string(), key.to_string()));
        Ok(())
    });
    t.finish(cx);
    Some(ApiKeyAuth {
        header,
        query,
        file: full?,
        keys,
        hide_credentials: hide_credentials?,
    })
}
