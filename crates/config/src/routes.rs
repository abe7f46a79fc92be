//! `[[routes]]`: which requests go where, under which limits (docs/routes.md).

use crate::model::*;
use crate::model::{AuthConfig, LimitConfig, RouteConfig, UpstreamConfig};
use crate::reader::{as_bool, as_int_in, as_str, as_str_list, Cx, Tbl, Value};
use crate::scalars::{http_token, list_or_none};
use crate::MAX_LIMITS_PER_ROUTE;
use std::collections::HashMap;
use std::path::PathBuf;

/// What routes refer to: the upstreams and limits defined, each limit's weight (a plan
/// limit's variants), and what auth tables need.
pub(crate) struct Tables<'a> {
    pub upstreams: Named<'a, UpstreamConfig>,
    pub limits: Named<'a, Option<LimitConfig>>,
    pub weights: &'a [usize],
    pub auth: &'a crate::auth::Env<'a>,
}

pub(crate) use crate::named::Named;

pub(crate) fn read(
    cx: &mut Cx,
    v: &Value,
    tables: &Tables,
    auths: &mut Vec<Option<AuthConfig>>,
    files: &mut Vec<PathBuf>,
) -> Vec<RouteConfig> {
    let Some(items) = crate::reader::as_array(cx, "routes", v) else {
        return Vec::new();
    };
    let mut out: Vec<RouteConfig> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("routes[{i}]");
        let Some(r) = Tbl::of(cx, path.clone(), item) else {
            continue;
        };
        out.extend(route(cx, r, i, tables, &mut names, auths, files));
    }
    out
}

/// One `[[routes]]` entry, or None when any of its keys is wrong (each error reported).
fn route(
    cx: &mut Cx,
    mut r: Tbl,
    i: usize,
    tables: &Tables,
    names: &mut HashMap<String, usize>,
    auths: &mut Vec<Option<AuthConfig>>,
    files: &mut Vec<PathBuf>,
) -> Option<RouteConfig> {
    let Tables {
        upstreams,
        limits,
        weights,
        ..
    } = tables;
    let base = tables.auth.base;
    let path = r.path.clone();
    let path = path.as_str();
    let mut ok = true;
    let case_insensitive = flag(cx, &mut r, "case_insensitive").unwrap_or(false);
    let path_match = path_match(cx, &mut r, path, case_insensitive);
    let name = route_name(cx, &mut r, path_match.as_ref(), names, i);
    ok &= name.as_ref().is_some_and(|n| n.1);
    let name = name.map(|n| n.0);
    let (host, aliases) = host(cx, &mut r);
    let methods = methods(cx, &mut r);
    let (mut action, split) = action(cx, &mut r, path, upstreams);
    let matches = crate::matching::route(cx, &mut r, &mut ok);
    let ports = crate::matching::ports(cx, &mut r, &mut ok);
    let listener_host = crate::matching::listener_host(cx, &mut r, &mut ok);
    let redirect = redirect(cx, &mut r, path_match.as_ref(), action.as_mut(), &mut ok);
    let limit_idx = route_limits(cx, &mut r, limits, weights);
    let access = access(cx, &mut r, base, files);
    let timeouts = crate::timeouts::route(cx, &mut r, action.as_ref(), &mut ok);
    let tarpit = tarpit(cx, &mut r, &mut ok);
    let rewrite = rewrite(cx, &mut r);
    let canary = route_canary(
        cx,
        &mut r,
        upstreams,
        (action.as_ref(), split.is_some()),
        &mut ok,
    );
    let fallback = crate::fallback::route(cx, &mut r, action.as_ref(), upstreams, &mut ok);
    let https_redirect = flag(cx, &mut r, "https_redirect");
    let route_name = name.as_deref().unwrap_or(path);
    let auth = crate::auth::route(cx, &mut r, route_name, tables.auth, auths, files);
    ok &= auth.is_ok();
    let edge = crate::edge::route(cx, &mut r, upstreams);
    ok &= edge.is_some();
    if let Some(e) = &edge {
        ok &= edge_fits(
            cx,
            &r,
            e,
            &EdgeOf {
                host: host.as_deref(),
                aliases: &aliases,
                action: action.as_ref(),
                rewrite: rewrite.as_ref(),
                auth: auth
                    .as_ref()
                    .ok()
                    .copied()
                    .flatten()
                    .and_then(|a| auths.get(a))
                    .and_then(|a| a.as_ref()),
            },
        );
    }
    r.finish(cx);
    match (ok, path_match, name, action) {
        (true, Some(path), Some(name), Some(action)) => Some(RouteConfig {
            name,
            host,
            path,
            case_insensitive,
            rewrite: rewrite.map(Box::new),
            canary: canary.map(Box::new),
            methods,
            action,
            limits: limit_idx,
            access: access.map(Box::new),
            tarpit: tarpit.map(Box::new),
            https_redirect,
            auth: auth.ok().flatten(),
            aliases,
            edge: EdgeConfig::shared(edge.unwrap_or_default()),
            fallback,
            matches,
            split: split.map(Box::new),
            ports,
            listener_host,
            redirect: redirect.map(Box::new),
            timeouts,
        }),
        _ => None,
    }
}

/// `access`, when given.
fn access(
    cx: &mut Cx,
    r: &mut Tbl,
    base: &std::path::Path,
    files: &mut Vec<PathBuf>,
) -> Option<AccessConfig> {
    let v = r.get("access")?;
    Tbl::of(cx, r.key_path("access"), v).map(|t| crate::abuse::access(cx, t, base, files))
}

/// A boolean key, when given (a wrong value is reported and read as not given).
fn flag(cx: &mut Cx, r: &mut Tbl, key: &str) -> Option<bool> {
    r.get(key).and_then(|v| as_bool(cx, &r.key_path(key), v))
}

/// A route's `redirect`, when given; a redirect's status is its `respond` action's.
fn redirect(
    cx: &mut Cx,
    r: &mut Tbl,
    path_match: Option<&PathMatch>,
    action: Option<&mut RouteAction>,
    ok: &mut bool,
) -> Option<Redirect> {
    let v = r.get("redirect")?;
    let rd = crate::redirect::read(cx, &r.key_path("redirect"), v, path_match);
    *ok &= rd.is_some();
    if let (Some(rd), Some(RouteAction::Respond { status, .. })) = (&rd, action) {
        *status = rd.status;
    }
    rd
}

/// A route's `canary`, when given: it needs an upstream to share with, and no `backends`
/// (`(action, has_backends)`).
fn route_canary(
    cx: &mut Cx,
    r: &mut Tbl,
    upstreams: &Named<UpstreamConfig>,
    (action, has_backends): (Option<&RouteAction>, bool),
    ok: &mut bool,
) -> Option<Canary> {
    let v = r.get("canary")?;
    let c = canary(cx, &r.key_path("canary"), v, upstreams)?;
    let span = v.span();
    let wrong = if matches!(action, Some(RouteAction::Respond { .. })) {
        Some("a canary needs a route with an upstream, not respond")
    } else if has_backends {
        Some("backends and canary: set one (a canary is a backend with its weight)")
    } else {
        None
    };
    if let Some(msg) = wrong {
        cx.err(&r.key_path("canary"), span, msg);
        *ok = false;
    }
    Some(c)
}

/// A route's `tarpit`, when given (`ok` cleared when it is wrong).
fn tarpit(cx: &mut Cx, r: &mut Tbl, ok: &mut bool) -> Option<TarpitConfig> {
    let v = r.get("tarpit")?;
    let t = crate::abuse::tarpit(cx, &r.key_path("tarpit"), v);
    *ok &= t.is_some();
    t
}

/// `name` (the path when absent), unique among routes: the name and whether it is unique.
fn route_name(
    cx: &mut Cx,
    r: &mut Tbl,
    path_match: Option<&PathMatch>,
    names: &mut HashMap<String, usize>,
    i: usize,
) -> Option<(String, bool)> {
    let name = match r.get("name") {
        Some(nv) => as_str(cx, &r.key_path("name"), nv).map(|s| (s.to_string(), nv.span())),
        None => path_match.map(|p| (p.as_str().to_string(), r.span.clone())),
    };
    let (n, span) = name?;
    if let Some(prev) = names.insert(n.clone(), i) {
        cx.err(
            &r.key_path("name"),
            span,
            format!("route name \"{n}\" is already used by routes[{prev}]"),
        );
        return Some((n, false));
    }
    Some((n, true))
}

/// `host`: one name or a list of them (ingress-nginx `server-alias`), each a name or a
/// wildcard of one leading label; the first is the route's host, the rest its aliases.
fn host(cx: &mut Cx, r: &mut Tbl) -> (Option<String>, Vec<String>) {
    let Some(hv) = r.get("host") else {
        return (None, Vec::new());
    };
    let p = r.key_path("host");
    let Some(items) = as_str_list(cx, &p, hv, true) else {
        return (None, Vec::new());
    };
    if items.is_empty() {
        cx.err(
            &p,
            hv.span(),
            "an empty list: name at least one host, or leave host out",
        );
    }
    let mut hosts: Vec<String> = Vec::new();
    for (ip, s, span) in items {
        match route_host(s) {
            Some(h) if hosts.contains(&h) => {
                cx.err(&ip, span, format!("\"{s}\" is listed twice"));
            }
            Some(h) => hosts.push(h),
            None => cx.err(
                &ip,
                span,
                format!(
                    "\"{s}\" is not a host name (a wildcard is one leading label: \"*.example.com\", or \"**.example.com\" for names of any depth below it)"
                ),
            ),
        }
    }
    let mut it = hosts.into_iter();
    (it.next(), it.collect())
}

/// `methods`: HTTP method tokens, upper-cased.
fn methods(cx: &mut Cx, r: &mut Tbl) -> Option<Vec<String>> {
    let mv = r.get("methods")?;
    let p = r.key_path("methods");
    let items = as_str_list(cx, &p, mv, false)?;
    let mut ms = Vec::new();
    for (ip, m, span) in items {
        let up = m.to_ascii_uppercase();
        if http_token(&up) && !up.is_empty() {
            ms.push(up);
        } else {
            cx.err(&ip, span, format!("\"{m}\" is not an HTTP method"));
        }
    }
    Some(ms)
}

/// Where the route sends a request: exactly one of `upstream` (a defined one), `backends`
/// (a split among them) and `respond`.
fn action(
    cx: &mut Cx,
    r: &mut Tbl,
    path: &str,
    upstreams: &Named<UpstreamConfig>,
) -> (Option<RouteAction>, Option<Split>) {
    let given: Vec<(&str, &Value)> = ["upstream", "backends", "respond", "redirect"]
        .into_iter()
        .filter_map(|k| r.get(k).map(|v| (k, v)))
        .collect();
    match given[..] {
        [] => {
            cx.err(
                path,
                r.span.clone(),
                "missing key \"upstream\" or \"respond\"",
            );
            (None, None)
        }
        [("upstream", uv)] => (
            upstreams
                .refer(cx, &r.key_path("upstream"), uv, "upstream")
                .map(RouteAction::Upstream),
            None,
        ),
        [("backends", bv)] => {
            match crate::split::read(cx, &r.key_path("backends"), bv, upstreams) {
                Some((split, first)) => (Some(RouteAction::Upstream(first)), Some(split)),
                None => (None, None),
            }
        }
        [("respond", rv)] => (respond_action(cx, &r.key_path("respond"), rv), None),
        // Read by the route (it needs the route's path); its status is the answer's.
        [("redirect", _)] => (
            Some(RouteAction::Respond {
                status: 302,
                body: String::new(),
                location: None,
            }),
            None,
        ),
        _ => {
            let (k, v) = given[1];
            let names: Vec<&str> = given.iter().map(|(k, _)| *k).collect();
            let msg = if names == ["upstream", "respond"] {
                "a route has either upstream or respond, not both".to_string()
            } else {
                format!(
                    "a route has one of upstream, backends, respond and redirect, not {}",
                    names.join(" and ")
                )
            };
            cx.err(&r.key_path(k), v.span(), msg);
            (None, None)
        }
    }
}

/// `limits`: defined limits, each once, at most [`MAX_LIMITS_PER_ROUTE`] (a plan limit counts
/// once per plan it has a variant for).
fn route_limits(
    cx: &mut Cx,
    r: &mut Tbl,
    limits: &Named<Option<LimitConfig>>,
    weights: &[usize],
) -> Vec<usize> {
    let mut limit_idx = Vec::new();
    let Some(lv) = r.get("limits") else {
        return limit_idx;
    };
    let p = r.key_path("limits");
    for (ip, l, span) in as_str_list(cx, &p, lv, false).unwrap_or_default() {
        match limits.position(l) {
            Some(idx) if limit_idx.contains(&idx) => {
                cx.err(&ip, span, format!("limit \"{l}\" is listed twice"));
            }
            Some(idx)
                if limits[idx]
                    .1
                    .as_ref()
                    .is_some_and(|c| c.key.contains(&KeySource::Descriptor)) =>
            {
                cx.err(
                    &ip,
                    span,
                    format!("limit \"{l}\" is keyed by \"descriptor\", which only [[rls.rules]] give: a route has no descriptor"),
                );
            }
            Some(idx) => limit_idx.push(idx),
            None => {
                let known: Vec<_> = limits.iter().map(|(n, _)| n.as_str()).collect();
                cx.err(
                    &ip,
                    span,
                    format!("unknown limit \"{l}\" (defined: {})", list_or_none(&known)),
                );
            }
        }
    }
    let count: usize = limit_idx
        .iter()
        .map(|&i| weights.get(i).copied().unwrap_or(1))
        .sum();
    if count > MAX_LIMITS_PER_ROUTE {
        cx.err(
            &p,
            lv.span(),
            format!("at most {MAX_LIMITS_PER_ROUTE} limits per route (a plan limit counts once per plan), got {count}"),
        );
    }
    limit_idx
}

fn respond_action(cx: &mut Cx, path: &str, v: &Value) -> Option<RouteAction> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let status = match t.get("status") {
        Some(sv) => as_int_in(cx, &t.key_path("status"), sv, 200, 599).map(|n| n as u16),
        None => Some(200),
    };
    let body = match t.get("body") {
        Some(bv) => as_str(cx, &t.key_path("body"), bv).map(str::to_string),
        None => Some(String::new()),
    };
    let location = match t.get("location") {
        Some(lv) => {
            let lp = t.key_path("location");
            let l = as_str(cx, &lp, lv)?;
            if l.is_empty() || l.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
                cx.err(
                    &lp,
                    lv.span(),
                    format!("\"{l}\" is not a URL (visible ASCII, no spaces)"),
                );
                return None;
            }
            Some(l.to_string())
        }
        None => None,
    };
    t.finish(cx);
    Some(RouteAction::Respond {
        status: status?,
        body: body?,
        location,
    })
}

/// `path_prefix`, `path_exact` or `path_regex`: exactly one.
fn path_match(cx: &mut Cx, r: &mut Tbl, path: &str, case_insensitive: bool) -> Option<PathMatch> {
    let given: Vec<&str> = ["path_prefix", "path_exact", "path_regex"]
        .into_iter()
        .filter(|k| r.get(k).is_some())
        .collect();
    let key = match given.as_slice() {
        [one] => *one,
        [] => {
            cx.err(
                path,
                r.span.clone(),
                "missing key \"path_prefix\" (or \"path_exact\" or \"path_regex\")",
            );
            return None;
        }
        [first, second, ..] => {
            let span = r.get(second).map(|v| v.span()).unwrap_or(0..0);
            cx.err(
                &r.key_path(second),
                span,
                format!("a route has one of path_prefix, path_exact and path_regex, not {first} and {second}"),
            );
            return None;
        }
    };
    let pv = r.get(key)?;
    let p = r.key_path(key);
    let s = as_str(cx, &p, pv)?;
    if key == "path_regex" {
        // The pattern as written first, so that an error quotes it (not the anchored form).
        return match regex::Regex::new(s).and_then(|_| path_regex(s, case_insensitive)) {
            Ok(_) => Some(PathMatch::Regex(s.to_string())),
            Err(e) => {
                cx.err(
                    &p,
                    pv.span(),
                    format!("not a regular expression: {}", one_line(&e)),
                );
                None
            }
        };
    }
    if !s.starts_with('/') {
        cx.err(&p, pv.span(), format!("\"{s}\" must start with \"/\""));
        return None;
    }
    if !crate::scalars::canonical_route_path(s) {
        cx.err(
            &p,
            pv.span(),
            format!("\"{s}\" is not a canonical path (no \"//\", \".\" or \"..\" segment, backslash, space, control character, ?, # or non-ASCII; escapes as %XX in upper case, none for A-Z a-z 0-9 - . _ ~): requests are matched after normalisation, so it would never match"),
        );
        return None;
    }
    let s = if case_insensitive {
        s.to_ascii_lowercase()
    } else {
        s.to_string()
    };
    Some(if key == "path_exact" {
        PathMatch::Exact(s)
    } else {
        PathMatch::Prefix(s)
    })
}

/// A `path_regex` as it is matched: from the path's start (as nginx's `location ~`), RE2
/// syntax, bounded in size (a hostile pattern cannot make matching slow: the `regex` crate
/// matches in linear time).
pub fn path_regex(pattern: &str, case_insensitive: bool) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})"))
        .case_insensitive(case_insensitive)
        .size_limit(1 << 20)
        .build()
}

/// A route's `host` as requests' hosts are matched: lower case, no trailing dot, IPv6
/// unbracketed in its one spelling; `*.` then a name for a one-label wildcard, `**.` for one
/// of any depth.
pub(crate) fn route_host(s: &str) -> Option<String> {
    let lower = s.trim().to_ascii_lowercase();
    let h = lower.strip_suffix('.').unwrap_or(&lower);
    if let Some(rest) = h.strip_prefix("**.") {
        return crate::scalars::dns_name(rest).then(|| format!("**.{rest}"));
    }
    if let Some(rest) = h.strip_prefix("*.") {
        return crate::scalars::dns_name(rest).then(|| format!("*.{rest}"));
    }
    let h = h
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(h);
    let h = match h.parse::<std::net::Ipv6Addr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => h.to_string(),
    };
    let port = h.contains(':') && h.parse::<std::net::Ipv6Addr>().is_err();
    let bad = h.is_empty()
        || port
        || h.contains('*')
        || h.bytes()
            .any(|b| b == b'/' || b == b' ' || !b.is_ascii_graphic());
    (!bad).then_some(h)
}

/// `rewrite = { regex, replace }` or `strip_prefix`.
fn rewrite(cx: &mut Cx, r: &mut Tbl) -> Option<Rewrite> {
    match (r.get("rewrite"), r.get("strip_prefix")) {
        (Some(_), Some(sv)) => {
            cx.err(
                &r.key_path("strip_prefix"),
                sv.span(),
                "a route has either rewrite or strip_prefix, not both",
            );
            None
        }
        (None, Some(sv)) => {
            let p = r.key_path("strip_prefix");
            let s = as_str(cx, &p, sv)?;
            if !crate::scalars::canonical_route_path(s) {
                cx.err(
                    &p,
                    sv.span(),
                    format!("\"{s}\" is not a canonical path starting with \"/\""),
                );
                return None;
            }
            Some(Rewrite::StripPrefix(s.trim_end_matches('/').to_string()))
        }
        (Some(rv), None) => {
            let p = r.key_path("rewrite");
            let mut t = Tbl::of(cx, p.clone(), rv)?;
            let regex = t.get("regex").and_then(|v| {
                let rp = t.key_path("regex");
                let s = as_str(cx, &rp, v)?;
                match regex::RegexBuilder::new(s).size_limit(1 << 20).build() {
                    Ok(_) => Some(s.to_string()),
                    Err(e) => {
                        cx.err(
                            &rp,
                            v.span(),
                            format!("not a regular expression: {}", one_line(&e)),
                        );
                        None
                    }
                }
            });
            // It goes into the request line: visible ASCII, no fragment.
            let replace = t.get("replace").and_then(|v| {
                let rp = t.key_path("replace");
                let s = as_str(cx, &rp, v)?;
                if s.bytes().any(|b| !(0x21..0x7f).contains(&b) || b == b'#') {
                    cx.err(
                        &rp,
                        v.span(),
                        format!(
                            "\"{}\" is not a path: visible ASCII only, no spaces or #",
                            s.escape_debug()
                        ),
                    );
                    return None;
                }
                Some(s.to_string())
            });
            // Every group the template names must exist: a typo would write nothing, silently.
            if let (Some(re), Some(rep), Some(v)) = (&regex, &replace, t.get("replace")) {
                if let Ok(re) = regex::Regex::new(re) {
                    let names: Vec<&str> = re.capture_names().flatten().collect();
                    for part in crate::model::rewrite_template(rep) {
                        let missing = match &part {
                            crate::model::TemplatePart::Index(i) => {
                                (*i >= re.captures_len()).then(|| {
                                    format!(
                                        "${i}: the regex has {} group(s)",
                                        re.captures_len() - 1
                                    )
                                })
                            }
                            crate::model::TemplatePart::Name(n) => (!names.contains(&n.as_str()))
                                .then(|| format!("${{{n}}}: the regex has no group of that name")),
                            crate::model::TemplatePart::Lit(_) => None,
                        };
                        if let Some(why) = missing {
                            cx.err(&t.key_path("replace"), v.span(), why);
                        }
                    }
                }
            }
            for (key, got) in [("regex", regex.is_some()), ("replace", replace.is_some())] {
                if !got && t.get(key).is_none() {
                    cx.err(&p, t.span.clone(), format!("missing key \"{key}\""));
                }
            }
            t.finish(cx);
            Some(Rewrite::Regex {
                regex: regex?,
                replace: replace?,
            })
        }
        (None, None) => None,
    }
}

/// `canary = { upstream, weight, weight_total, header, header_value | header_pattern, cookie }`.
fn canary(cx: &mut Cx, p: &str, v: &Value, upstreams: &Named<UpstreamConfig>) -> Option<Canary> {
    let mut t = Tbl::of(cx, p.to_string(), v)?;
    let upstream = match t.get("upstream") {
        Some(uv) => upstreams.refer(cx, &t.key_path("upstream"), uv, "upstream"),
        None => {
            cx.err(p, t.span.clone(), "missing key \"upstream\"");
            None
        }
    };
    let weight_total = match t.get("weight_total") {
        Some(wv) => as_int_in(cx, &t.key_path("weight_total"), wv, 1, 1_000_000)? as u32,
        None => 100,
    };
    let weight = match t.get("weight") {
        Some(wv) => as_int_in(cx, &t.key_path("weight"), wv, 0, weight_total as i64)? as u32,
        None => 0,
    };
    let mut text = |key: &str, lower: bool| -> Option<String> {
        let v = t.get(key)?;
        let kp = t.key_path(key);
        let s = as_str(cx, &kp, v)?;
        if s.is_empty() || (lower && !http_token(s)) {
            cx.err(&kp, v.span(), format!("\"{s}\" is not a valid name"));
            return None;
        }
        if key == "header" && !cx.client_header(&kp, v.span(), s) {
            return None;
        }
        Some(if lower {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        })
    };
    let header = text("header", true);
    let header_value = text("header_value", false);
    let header_pattern = text("header_pattern", false);
    let cookie = text("cookie", false);
    if let (Some(pattern), Some(pv)) = (&header_pattern, t.get("header_pattern")) {
        let kp = t.key_path("header_pattern");
        if let Err(e) = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
        {
            cx.err(
                &kp,
                pv.span(),
                format!("not a regular expression: {}", one_line(&e)),
            );
        } else if header_value.is_some() {
            cx.err(
                &kp,
                pv.span(),
                "header_pattern and header_value: set one of them",
            );
        } else if header.is_none() {
            cx.err(
                &kp,
                pv.span(),
                "header_pattern without header: name the header it matches",
            );
        }
    }
    t.finish(cx);
    Some(Canary {
        upstream: upstream?,
        weight,
        weight_total,
        header,
        header_value,
        header_pattern,
        cookie,
    })
}

/// A regex error on one line (the crate's parse errors draw the pattern and a caret).
fn one_line(e: &regex::Error) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// What `check` warns about rewrites: a route whose `rewrite` or `strip_prefix` can send its
/// upstream a path that another route of that upstream protects (an access list, limits this
/// route lacks, or an answer of its own such as a 403). A client reaching the path through the
/// rewriting route meets that route's rules only. An estimate from the template's literal
/// start (what the groups and the unmatched rest write is taken to be anything): it may warn
/// where the regex cannot in fact produce the path, never the other way round for prefix and
/// exact routes.
pub fn rewrite_warnings(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in cfg.routes.iter().enumerate() {
        let (Some(rw), RouteAction::Upstream(_)) = (&r.rewrite, &r.action) else {
            continue;
        };
        let ups = r.upstreams_used();
        let lit = written_prefix(rw);
        for (j, p) in cfg.routes.iter().enumerate() {
            if i == j || !routes_meet(r, p) {
                continue;
            }
            let guards_upstream = match &p.action {
                RouteAction::Upstream(u) => ups.contains(u),
                RouteAction::Respond { status, .. } => *status >= 400,
            };
            let how = guards(cfg, p, r);
            // A case-insensitive route's paths are in lower case: compare so.
            let lit = if p.case_insensitive {
                lit.to_ascii_lowercase()
            } else {
                lit.clone()
            };
            if !guards_upstream || how.is_empty() || !may_write(&lit, &p.path) {
                continue;
            }
            let which = if matches!(**rw, Rewrite::StripPrefix(_)) {
                "strip_prefix"
            } else {
                "rewrite"
            };
            out.push(format!(
                "routes[{i}].{which}: route \"{}\" can send its upstream paths under {} \"{}\", which route \"{}\" guards ({}): requests through \"{}\" meet only its own rules there",
                r.name,
                match p.path {
                    PathMatch::Prefix(_) => "path_prefix",
                    PathMatch::Exact(_) => "path_exact",
                    PathMatch::Regex(_) => "path_regex",
                },
                p.path.as_str(),
                p.name,
                how.join("; "),
                r.name,
            ));
        }
    }
    out
}

/// The literal start of every path a rewrite writes, as the upstream will read it ("/" when
/// it may be anything: a strip_prefix, a regex not anchored at the start).
fn written_prefix(rw: &Rewrite) -> String {
    let Rewrite::Regex { regex, replace } = rw else {
        return "/".to_string();
    };
    if !regex.starts_with('^') {
        return "/".to_string();
    }
    let mut lit = String::new();
    for part in crate::model::rewrite_template(replace) {
        let TemplatePart::Lit(s) = part else {
            break;
        };
        let end = s.find('?').unwrap_or(s.len());
        lit.push_str(&s[..end]);
        if end < s.len() {
            break;
        }
    }
    if !lit.starts_with('/') {
        lit.insert(0, '/');
    }
    loose_path(&lit)
}

/// How route `p` guards its paths that route `r` does not: an answer of its own (4xx), an
/// access list, limits `r` lacks. Empty: nothing to walk around.
fn guards(cfg: &Config, p: &RouteConfig, r: &RouteConfig) -> Vec<String> {
    let mut how = Vec::new();
    if matches!(p.action, RouteAction::Respond { status, .. } if status >= 400) {
        how.push("answers it itself".to_string());
    }
    if p.access.is_some() && p.access != r.access {
        how.push("has an access list".to_string());
    }
    let missing: Vec<&str> = p
        .limits
        .iter()
        .filter(|l| !r.limits.contains(l))
        .map(|&l| cfg.limits[l].name.as_str())
        .collect();
    if !missing.is_empty() {
        how.push(format!("applies limits {}", missing.join(", ")));
    }
    how
}

/// A template's literal start as the upstream will read it: unreserved escapes decoded
/// (`%61` is `a`), repeated slashes one (the output is made canonical).
fn loose_path(lit: &str) -> String {
    let b = lit.as_bytes();
    let mut out = String::with_capacity(lit.len());
    let mut i = 0;
    while i < b.len() {
        let c = if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
            match hex {
                Some(v) if v.is_ascii_alphanumeric() || b"-._~".contains(&v) => {
                    i += 3;
                    v as char
                }
                _ => {
                    i += 1;
                    '%'
                }
            }
        } else {
            i += 1;
            b[i - 1] as char
        };
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// Whether two routes can take requests of one host (by their hosts and aliases).
fn routes_meet(a: &RouteConfig, b: &RouteConfig) -> bool {
    if a.host.is_none() || b.host.is_none() {
        return true;
    }
    let hosts = |r: &'_ RouteConfig| {
        r.host
            .clone()
            .into_iter()
            .chain(r.aliases.iter().cloned())
            .collect::<Vec<_>>()
    };
    let (ha, hb) = (hosts(a), hosts(b));
    ha.iter()
        .any(|x| hb.iter().any(|y| hosts_meet(Some(x), Some(y))))
}

/// Whether routes with these hosts can take requests of one host.
fn hosts_meet(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            use crate::model::Wildcard;
            let wild = |w: &str, h: &str| Wildcard::of(w).is_some_and(|w| w.covers(h));
            // Two wildcards meet when one's names can be the other's.
            let both = |x: &str, y: &str| match (Wildcard::of(x), Wildcard::of(y)) {
                (Some(wx), Some(wy)) => {
                    wx.parent() == wy.parent()
                        || wx.covers(wy.parent()) && matches!(wx, Wildcard::AnyDepth(_))
                        || wy.covers(wx.parent()) && matches!(wy, Wildcard::AnyDepth(_))
                }
                _ => false,
            };
            a == b || wild(a, b) || wild(b, a) || both(a, b)
        }
        _ => true,
    }
}

/// Whether a path starting with `lit` (and going on with anything) can be one `path` takes.
fn may_write(lit: &str, path: &PathMatch) -> bool {
    match path {
        PathMatch::Prefix(p) => lit.starts_with(p.as_str()) || p.starts_with(lit),
        PathMatch::Exact(p) => p.starts_with(lit),
        PathMatch::Regex(re) => path_regex(re, false).is_ok_and(|re| {
            // A regex matched from the path's start: the literal itself, or a longer path.
            re.is_match(lit) || lit == "/"
        }),
    }
}

/// What [`edge_fits`] checks a route's edge keys against.
struct EdgeOf<'a> {
    host: Option<&'a str>,
    aliases: &'a [String],
    action: Option<&'a RouteAction>,
    rewrite: Option<&'a Rewrite>,
    auth: Option<&'a AuthConfig>,
}

/// The edge keys that depend on the rest of the route: `www_redirect` needs one plain host,
/// the upstream-bound keys an upstream, `x_forwarded_prefix = true` a `strip_prefix`, and no
/// request header rule may write what the route's auth owns.
fn edge_fits(cx: &mut Cx, r: &Tbl, e: &crate::model::EdgeConfig, of: &EdgeOf) -> bool {
    let mut ok = true;
    let mut err = |cx: &mut Cx, key: &str, msg: String| {
        cx.err(&r.key_path(key), r.span.clone(), msg);
        ok = false;
    };
    if e.www_redirect {
        match of.host {
            Some(h) if crate::model::Wildcard::of(h).is_none() && of.aliases.is_empty() && h.contains('.') && h.parse::<std::net::IpAddr>().is_err() => {}
            _ => err(
                cx,
                "www_redirect",
                "www_redirect needs a route with one host name (not a wildcard, a list or an address): its other spelling, with or without \"www.\", answers 308 to it".into(),
            ),
        }
    }
    let proxies = matches!(of.action, Some(RouteAction::Upstream(_)));
    if !proxies && of.action.is_some() {
        for (given, key) in [
            (e.upstream_host.is_some(), "upstream_host"),
            (e.x_forwarded_prefix.is_some(), "x_forwarded_prefix"),
            (!e.request_headers.is_empty(), "request_headers"),
            (e.compress, "compress"),
            (e.limit_rate > 0, "limit_rate"),
        ] {
            if given {
                err(
                    cx,
                    key,
                    format!(
                        "{key} is for a route with an upstream; this route answers with respond"
                    ),
                );
            }
        }
    }
    if e.x_forwarded_prefix.as_deref() == Some("")
        && !matches!(of.rewrite, Some(Rewrite::StripPrefix(_)))
    {
        err(
            cx,
            "x_forwarded_prefix",
            "x_forwarded_prefix = true sends the prefix strip_prefix takes off, and this route has no strip_prefix: write the prefix itself (\"/app\")".into(),
        );
    }
    if let Some(a) = of.auth {
        let owned: Vec<&str> = match &a.method {
            AuthMethod::Jwt(j) => j.forward_claims.iter().map(|(_, h)| h.as_str()).collect(),
            AuthMethod::Forward(f) => f.response_headers.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        for n in e.request_headers.names() {
            if owned.iter().any(|o| o.eq_ignore_ascii_case(n)) {
                err(
                    cx,
                    "request_headers",
                    format!("\"{n}\" is written by this route's auth ({}): a header rule cannot replace or remove it", a.name),
                );
            }
        }
    }
    ok
}
