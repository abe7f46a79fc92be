//! `canary: "true"` Ingresses: never routes of their own. Each is attached to the production
//! routes of the same host, path and path type (ingress-nginx's merge), as the route's
//! `canary`: header first, then cookie, then weight; production stays the default. A canary
//! without production is skipped, and a second canary for the same rule too (ingress-nginx
//! applies one). Its other annotations are ignored: ingress-nginx uses the production
//! Ingress's.

use super::anns::Anns;
use super::objects::{Ingress, PathKind};
use super::routes::{Action, Canary, Choice, Origin, Route};
use super::settings::Settings;
use super::text::{comment, parse_bool, Warnings};
use super::upstreams::UpKey;

/// `canary: "true"` (anything else, as ingress-nginx: not a canary).
pub(super) fn is_canary(ing: &Ingress, w: &mut Warnings) -> bool {
    match ing.ann("canary").map(parse_bool) {
        Some(Ok(b)) => b,
        None => false,
        Some(Err(v)) => {
            w.push(comment(&format!(
                "{}: canary \"{v}\" is not true or false: not a canary (as by ingress-nginx)",
                ing.ctx
            )));
            false
        }
    }
}

/// `canary-by-header` as a header name, and `canary-by-header-pattern` as ingress-nginx
/// reads it beside the header and its value (left out, named, where it cannot apply).
fn header_checks(
    ctx: &str,
    header: &mut Option<String>,
    header_value: Option<&str>,
    pattern: &mut Option<String>,
    w: &mut Warnings,
) {
    if let Some(h) = header.as_deref() {
        if !h
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            w.push(comment(&format!(
                "{ctx}: canary-by-header \"{h}\" is not a header name: left out"
            )));
            *header = None;
        }
    }
    match (&*pattern, header_value, &*header) {
        (None, _, _) => {}
        (Some(_), Some(_), _) => {
            w.push(format!(
                "{ctx}: canary-by-header-pattern is ignored when canary-by-header-value is set (as by ingress-nginx)"
            ));
            *pattern = None;
        }
        (Some(p), None, Some(h)) => {
            // ingress-nginx matches with PCRE (ngx.re.match), Tollgate with RE2 syntax: the
            // common patterns read alike; one RE2 cannot read (a lookaround, a backreference)
            // leaves the header out rather than choose otherwise.
            if let Err(e) = regex::RegexBuilder::new(p).size_limit(1 << 20).build() {
                let e = e
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                w.push(comment(&format!(
                    "{ctx}: canary-by-header-pattern \"{p}\" is not a regular expression Tollgate reads (RE2 syntax: {e}): canary-by-header {h} left out (requests it would choose stay on production)"
                )));
                *header = None;
                *pattern = None;
            }
        }
        (Some(_), None, None) => {
            w.push(format!(
                "{ctx}: canary-by-header-pattern without canary-by-header: ignored (as by ingress-nginx)"
            ));
            *pattern = None;
        }
    }
}

/// The canary annotations of a canary Ingress; None when nothing would ever be chosen.
fn choice(ing: &Ingress, w: &mut Warnings) -> Option<Choice> {
    let mut a = Anns::new(ing);
    let ctx = a.ctx();
    let number = |key: &str, v: Option<&str>, default: u32, w: &mut Warnings| match v {
        None => default,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                w.push(comment(&format!(
                    "{ctx}: {key} \"{v}\" is not a whole number: {default} used (as by ingress-nginx)"
                )));
                default
            }
        },
    };
    let weight_total = match number("canary-weight-total", a.get("canary-weight-total"), 100, w) {
        0 => 100,
        n => n.min(1_000_000),
    };
    let mut weight = number("canary-weight", a.get("canary-weight"), 0, w);
    if weight > weight_total {
        w.push(comment(&format!(
            "{ctx}: canary-weight \"{weight}\" is over the total ({weight_total}): every request goes to the canary"
        )));
        weight = weight_total;
    }
    let text = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let mut header = text(a.get("canary-by-header"));
    let header_value = text(a.get("canary-by-header-value"));
    let mut pattern = text(a.get("canary-by-header-pattern"));
    let cookie = text(a.get("canary-by-cookie"));
    header_checks(ctx, &mut header, header_value.as_deref(), &mut pattern, w);
    if header_value.is_some() && header.is_none() && pattern.is_none() {
        w.push(format!(
            "{ctx}: canary-by-header-value without canary-by-header: ignored (as by ingress-nginx)"
        ));
    }
    for key in super::catalogue::CANARY_KEYS {
        a.get(key);
    }
    // Everything else on a canary is the production Ingress's business.
    for key in a.unread().collect::<Vec<_>>() {
        w.gather(
            &comment(key),
            "on a canary Ingress ingress-nginx uses the production Ingress's",
            ctx,
        );
        a.get(key);
    }
    let c = Choice {
        weight,
        weight_total,
        header_value: header.as_ref().and(header_value),
        header_pattern: header.as_ref().and(pattern),
        header,
        cookie,
    };
    if c.weight == 0 && c.header.is_none() && c.cookie.is_none() {
        w.push(format!(
            "{ctx}: a canary without weight, header or cookie gets no request: skipped"
        ));
        return None;
    }
    Some(c)
}

/// Attaches each canary Ingress to the production routes it shares host, path and path type
/// with. `upstream` makes the canary's upstream from the production route's Ingress (its
/// protocol and timeouts: a canary inherits them).
pub(super) fn attach(
    canaries: &[Ingress],
    routes: &mut [Route],
    settings: &[Settings],
    upstream: impl Fn(&Ingress, &Settings, &super::objects::Backend) -> UpKey,
    w: &mut Warnings,
) {
    for c in canaries {
        let Some(choice) = choice(c, w) else { continue };
        let mut wanted: Vec<(Option<&str>, &str, PathKind, &super::objects::Backend)> = Vec::new();
        for rule in &c.rules {
            for p in &rule.paths {
                wanted.push((rule.host.as_deref(), &p.path, p.kind, &p.backend));
            }
        }
        for (host, path, kind, backend) in wanted {
            let mut found = false;
            for r in routes.iter_mut() {
                let Origin::Path {
                    host: rh,
                    path: rp,
                    kind: rk,
                } = &r.origin
                else {
                    continue;
                };
                if rh.as_deref() != host || rp != path || *rk != kind {
                    continue;
                }
                let Action::Proxy { canary, .. } = &mut r.action else {
                    continue;
                };
                found = true;
                match canary {
                    Some(existing) if existing.ctx != c.ctx => w.push(format!(
                        "{}: {}{path} ({}) has the canary of {} already; ingress-nginx applies one: skipped",
                        c.ctx,
                        host.unwrap_or("*"),
                        kind.as_str(),
                        existing.ctx
                    )),
                    Some(_) => {}
                    None => {
                        *canary = Some(Box::new(Canary {
                            upstream: upstream(c, &settings[r.ing], backend),
                            choice: choice.clone(),
                            ctx: c.ctx.clone(),
                        }));
                    }
                }
            }
            if !found {
                w.push(comment(&format!(
                    "{}: no production Ingress for {}{path} ({}): canary skipped (as by ingress-nginx)",
                    c.ctx,
                    host.unwrap_or("*"),
                    kind.as_str()
                )));
            }
        }
        // A canary's defaultBackend joins every route of ingress-nginx's default server: the
        // routes without a host.
        if let Some(backend) = &c.default_backend {
            let mut found = false;
            for r in routes.iter_mut().filter(|r| r.host.is_none()) {
                if let Action::Proxy {
                    canary: slot @ None,
                    ..
                } = &mut r.action
                {
                    *slot = Some(Box::new(Canary {
                        upstream: upstream(c, &settings[r.ing], backend),
                        choice: choice.clone(),
                        ctx: c.ctx.clone(),
                    }));
                    found = true;
                }
            }
            if !found {
                w.push(format!(
                    "{}: defaultBackend: no production route without a host: canary skipped (as by ingress-nginx)",
                    c.ctx
                ));
            }
        }
    }
}
