//! The abuse-defence parts of the format: access lists (inline and in list files), tarpits,
//! actions, escalation ladders and failure-only counting.

use crate::model::{AccessConfig, Action, TarpitConfig};
use crate::reader::{as_array, as_int_in, as_str, as_str_list, type_err, Cx, Tbl, Value};
use crate::scalars::{cidr, duration};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::de::DeValue;

/// The longest a tarpit holds a request.
const MAX_TARPIT_DELAY: Duration = Duration::from_secs(300);

/// Entries of a list file: one per line, `#` starts a comment, blank lines are skipped. Each
/// entry is checked by `item`; problems name the file and its line.
fn list_file(
    cx: &mut Cx,
    path: &str,
    file: &str,
    span: std::ops::Range<usize>,
    base: &Path,
    files: &mut Vec<PathBuf>,
    mut item: impl FnMut(&str) -> Result<(), String>,
) {
    use crate::files::{entries, Comments};
    entries(
        cx,
        path,
        file,
        span,
        base,
        files,
        Comments::Anywhere,
        |_, e| item(e),
    );
}

fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    if let Ok(n) = s.parse::<ipnet::IpNet>() {
        return Ok(n.trunc());
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(ipnet::IpNet::from(ip));
    }
    Err(format!("\"{s}\" is not an IP address or CIDR"))
}

/// An API-key pattern: exact, or a prefix of at least this many characters before the first
/// wildcard. The gateway does not verify keys, so a pattern any client can guess (`*`, `sk*`)
/// would exempt everyone from every limit.
const MIN_KEY_PREFIX: usize = 4;

fn check_key_pattern(s: &str) -> Result<String, String> {
    let prefix = s.find(['*', '?', '[', '{']).unwrap_or(s.len());
    if prefix < MIN_KEY_PREFIX {
        return Err(format!("\"{s}\": an API-key pattern needs at least {MIN_KEY_PREFIX} literal characters before its first wildcard (the gateway does not verify keys: a guessable pattern would exempt anyone)"));
    }
    check_glob(s)
}

fn check_glob(s: &str) -> Result<String, String> {
    globset::Glob::new(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("\"{s}\" is not a valid glob: {}", e.kind()))
}

/// `[access]` or a route's `access`.
pub fn access(cx: &mut Cx, mut t: Tbl, base: &Path, files: &mut Vec<PathBuf>) -> AccessConfig {
    let mut a = AccessConfig::default();
    for key in ["deny", "allow", "only_from"] {
        let list = match key {
            "deny" => &mut a.deny,
            "allow" => &mut a.allow,
            _ => &mut a.only_from,
        };
        if let Some(v) = t.get(key) {
            let p = t.key_path(key);
            for (ip, s, span) in as_str_list(cx, &p, v, false).unwrap_or_default() {
                if let Some(n) = cidr(cx, &ip, s, span) {
                    list.push(n);
                }
            }
        }
        let fkey = format!("{key}_files");
        if let Some(v) = t.get(&fkey) {
            let p = t.key_path(&fkey);
            for (ip, f, span) in as_str_list(cx, &p, v, true).unwrap_or_default() {
                list_file(cx, &ip, f, span, base, files, |e| {
                    list.push(parse_cidr(e)?);
                    Ok(())
                });
            }
        }
    }
    for (key, ua) in [("deny_user_agents", true), ("allow_api_keys", false)] {
        let list = if ua {
            &mut a.deny_user_agents
        } else {
            &mut a.allow_api_keys
        };
        let check: fn(&str) -> Result<String, String> =
            if ua { check_glob } else { check_key_pattern };
        if let Some(v) = t.get(key) {
            let p = t.key_path(key);
            for (ip, s, span) in as_str_list(cx, &p, v, false).unwrap_or_default() {
                if s.trim().is_empty() {
                    cx.err(&ip, span, "an empty pattern would match nothing useful");
                    continue;
                }
                match check(s) {
                    Ok(g) => list.push(g),
                    Err(why) => cx.err(&ip, span, why),
                }
            }
        }
        let fkey = format!("{key}_files");
        if let Some(v) = t.get(&fkey) {
            let p = t.key_path(&fkey);
            for (ip, f, span) in as_str_list(cx, &p, v, true).unwrap_or_default() {
                list_file(cx, &ip, f, span, base, files, |e| {
                    list.push(check(e)?);
                    Ok(())
                });
            }
        }
    }
    if let Some(v) = t.get("api_key_header") {
        let p = t.key_path("api_key_header");
        if let Some(s) = as_str(cx, &p, v) {
            let h = s.trim().to_ascii_lowercase();
            if h.is_empty() || !crate::scalars::http_token(&h) {
                cx.err(&p, v.span(), format!("\"{s}\" is not a header name"));
            } else if cx.client_header(&p, v.span(), &h) {
                a.api_key_header = Some(h);
            }
        }
    }
    t.finish(cx);
    a
}

/// `tarpit = { delay = ["1s", "3s"], max_concurrent = 256, then = "reject" }`.
pub fn tarpit(cx: &mut Cx, path: &str, v: &Value) -> Option<TarpitConfig> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let mut out = TarpitConfig::default();
    let mut ok = true;
    if let Some(dv) = t.get("delay") {
        let p = t.key_path("delay");
        let range = match dv.get_ref() {
            DeValue::String(_) => duration(cx, &p, dv).map(|d| (d, d)),
            DeValue::Array(_) => {
                let items = as_array(cx, &p, dv).unwrap_or(&[]);
                if items.len() == 2 {
                    match (
                        duration(cx, &format!("{p}[0]"), &items[0]),
                        duration(cx, &format!("{p}[1]"), &items[1]),
                    ) {
                        (Some(a), Some(b)) if a <= b => Some((a, b)),
                        (Some(_), Some(_)) => {
                            cx.err(&p, dv.span(), "the shortest delay comes first");
                            None
                        }
                        _ => None,
                    }
                } else {
                    cx.err(
                        &p,
                        dv.span(),
                        "expected [shortest, longest], e.g. [\"1s\", \"3s\"]",
                    );
                    None
                }
            }
            _ => {
                type_err(cx, &p, dv, "a duration or [shortest, longest]");
                None
            }
        };
        match range {
            Some((a, b)) if b > MAX_TARPIT_DELAY => {
                let _ = a;
                cx.err(&p, dv.span(), "at most 5m: held connections must end");
                ok = false;
            }
            Some((a, b)) => {
                out.delay_min = a;
                out.delay_max = b;
            }
            None => ok = false,
        }
    }
    if let Some(mv) = t.get("max_concurrent") {
        match as_int_in(cx, &t.key_path("max_concurrent"), mv, 1, 1_000_000) {
            Some(n) => out.max_concurrent = n as usize,
            None => ok = false,
        }
    }
    if let Some(tv) = t.get("then") {
        let p = t.key_path("then");
        match as_str(cx, &p, tv) {
            Some("reject") => out.then_pass = false,
            Some("pass") => out.then_pass = true,
            Some(other) => {
                cx.err(
                    &p,
                    tv.span(),
                    format!("unknown \"{other}\" (reject: answer 429 after the hold; pass: pass the request on)"),
                );
                ok = false;
            }
            None => ok = false,
        }
    }
    t.finish(cx);
    ok.then_some(out)
}

pub fn action(cx: &mut Cx, path: &str, v: &Value) -> Option<Action> {
    match as_str(cx, path, v)? {
        "reject" => Some(Action::Reject),
        "tarpit" => Some(Action::Tarpit),
        "challenge" => Some(Action::Challenge),
        other => {
            cx.err(
                path,
                v.span(),
                format!("unknown action \"{other}\" (reject, tarpit or challenge)"),
            );
            None
        }
    }
}

/// A step's duration: required, between 1 s and `max_days`.
fn rung_duration(
    cx: &mut Cx,
    t: &mut Tbl,
    item: &Value,
    key: &str,
    max_days: u64,
    what: &str,
) -> Option<Duration> {
    let Some(v) = t.get(key) else {
        cx.err(
            &t.path,
            item.span(),
            format!("missing key \"{key}\" ({what})"),
        );
        return None;
    };
    let p = t.key_path(key);
    let d = duration(cx, &p, v)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(max_days * 86400) {
        cx.err(&p, v.span(), format!("between 1s and {max_days}d"));
        return None;
    }
    Some(d)
}

/// `block = [{ after = 10, within = "1m", for = "5m" }, ...]`.
pub fn ladder(cx: &mut Cx, path: &str, v: &Value) -> Option<Vec<tollgate_limit::Rung>> {
    let items = as_array(cx, path, v)?;
    if items.is_empty() {
        cx.err(
            path,
            v.span(),
            "needs at least one step, e.g. [{ after = 10, within = \"1m\", for = \"5m\" }]",
        );
        return None;
    }
    let mut rungs = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let Some(mut t) = Tbl::of(cx, p.clone(), item) else {
            ok = false;
            continue;
        };
        let after = match t.get("after") {
            Some(v) => as_int_in(cx, &t.key_path("after"), v, 1, 1_000_000_000).map(|n| n as u64),
            None => {
                cx.err(
                    &p,
                    item.span(),
                    "missing key \"after\" (refusals that block)",
                );
                None
            }
        };
        let within = rung_duration(
            cx,
            &mut t,
            item,
            "within",
            7,
            "the window refusals are counted in",
        );
        let block_for = rung_duration(cx, &mut t, item, "for", 30, "how long a key stays blocked");
        t.finish(cx);
        match (after, within, block_for) {
            (Some(after), Some(within), Some(block_for)) => rungs.push(tollgate_limit::Rung {
                after,
                within,
                block_for,
            }),
            _ => ok = false,
        }
    }
    if ok && rungs.len() > 8 {
        cx.err(path, v.span(), "at most 8 steps");
        return None;
    }
    ok.then_some(rungs)
}

/// `count = "all" | "failures"` with `failure_statuses` (default 401 and 403).
pub fn count_failures(cx: &mut Cx, l: &mut Tbl) -> Result<Option<Vec<u16>>, ()> {
    let statuses = match l.get("failure_statuses") {
        Some(v) => {
            let p = l.key_path("failure_statuses");
            let items = as_array(cx, &p, v).ok_or(())?;
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                out.push(as_int_in(cx, &format!("{p}[{i}]"), item, 100, 599).ok_or(())? as u16);
            }
            if out.is_empty() {
                cx.err(&p, v.span(), "needs at least one status");
                return Err(());
            }
            Some((out, v.span()))
        }
        None => None,
    };
    let failures = match l.get("count") {
        Some(v) => match as_str(cx, &l.key_path("count"), v) {
            Some("all") => false,
            Some("failures") => true,
            Some(other) => {
                cx.err(
                    &l.key_path("count"),
                    v.span(),
                    format!("unknown \"{other}\" (all: every request counts; failures: only requests answered with a failure_statuses status, e.g. failed logins)"),
                );
                return Err(());
            }
            None => return Err(()),
        },
        None => false,
    };
    match (failures, statuses) {
        (true, Some((s, _))) => Ok(Some(s)),
        (true, None) => Ok(Some(vec![401, 403])),
        (false, Some((_, span))) => {
            cx.err(
                &l.key_path("failure_statuses"),
                span,
                "failure_statuses needs count = \"failures\"",
            );
            Err(())
        }
        (false, None) => Ok(None),
    }
}

/// A challenge URL: absolute http(s) or a path on this site.
pub fn challenge_url(cx: &mut Cx, path: &str, v: &Value) -> Option<String> {
    let s = as_str(cx, path, v)?;
    let ok = (s.starts_with("https://") || s.starts_with("http://") || s.starts_with('/'))
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"');
    if !ok {
        cx.err(
            path,
            v.span(),
            format!("\"{s}\" is not an http(s) URL or a path starting with /"),
        );
        return None;
    }
    Some(s.to_string())
}
