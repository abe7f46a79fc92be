//! `use-regex`, `rewrite-target`, `app-root`, `permanent-redirect` and `temporal-redirect`:
//! what path the upstream sees, and routes answered without one.
//!
//! nginx's `rewrite "(?i)PATH" TARGET break;` replaces the whole path by TARGET, `$1`..`$9`
//! being PATH's groups. The regex crate's `replace` changes only the match, and reads `$1abc`
//! as a group named "1abc": so the regex is written to match the whole path, and each group
//! as `${1}`.

use super::anns::{Anns, Redirect, Refusal, Rewrite};
use super::text::{comment, flag, Warnings};

/// `use-regex`, `rewrite-target`, `app-root` and the redirect annotations of one Ingress.
#[derive(Default)]
pub(super) struct RewriteOut {
    pub use_regex: bool,
    pub rewrite: Option<Rewrite>,
    pub app_root: Option<String>,
    pub redirect: Option<Redirect>,
    pub refusals: Vec<Refusal>,
}

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> RewriteOut {
    let mut s = RewriteOut::default();
    let ctx = a.ctx();
    s.use_regex = flag(a.get("use-regex"), false, &format!("{ctx}: use-regex"), w);
    if let Some(t) = a.get("rewrite-target") {
        if valid_target(t) {
            let replace = match replacement(t) {
                Ok(r) => Some(r),
                Err(var) => {
                    w.push(comment(&format!(
                        "{ctx}: rewrite-target \"{t}\": the nginx variable {var} has no Tollgate equivalent: paths are sent as requested"
                    )));
                    None
                }
            };
            s.rewrite = Some(Rewrite {
                target: t.to_string(),
                replace,
            });
        } else {
            w.push(comment(&format!(
                "{ctx}: rewrite-target \"{t}\" holds characters ingress-nginx refuses there: ignored (as by ingress-nginx)"
            )));
        }
    }
    if let Some(root) = a.get("app-root") {
        if root.starts_with('/') && valid_target(root) && !root.contains('$') {
            s.app_root = Some(root.to_string());
        } else {
            w.push(comment(&format!(
                "{ctx}: app-root \"{root}\" is not a path: ignored (as by ingress-nginx)"
            )));
        }
    }
    // temporal-redirect first, as ingress-nginx reads them.
    let temporal = a.get("temporal-redirect").filter(|u| !u.is_empty());
    let temporal_code = a.get("temporal-redirect-code");
    let permanent = a.get("permanent-redirect").filter(|u| !u.is_empty());
    let permanent_code = a.get("permanent-redirect-code");
    let chosen = match (temporal, permanent) {
        (Some(u), _) => Some(("temporal-redirect", u, code(temporal_code, 302, 307))),
        (None, Some(u)) => Some(("permanent-redirect", u, code(permanent_code, 301, 308))),
        (None, None) => None,
    };
    if let Some((key, url, status)) = chosen {
        if url.contains('$') {
            s.refusals.push(Refusal {
                annotation: key.to_string(),
                why: comment(&format!("\"{url}\" uses nginx variables, which a Tollgate answer cannot: the route must not reach its Service instead")),
            });
        } else if url.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            s.redirect = Some(Redirect {
                status,
                url: url.to_string(),
            });
        } else {
            w.push(comment(&format!(
                "{ctx}: {key} \"{url}\" is not a URL: ignored (as by ingress-nginx)"
            )));
        }
    }
    s
}

/// A redirect status in 300..=`max`, else `default` (as ingress-nginx).
fn code(v: Option<&str>, default: u16, max: u16) -> u16 {
    v.and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|c| (300..=max).contains(c))
        .unwrap_or(default)
}

/// ingress-nginx's check of `rewrite-target` and `app-root` (`RegexPathWithCapture`).
fn valid_target(t: &str) -> bool {
    t.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~/:$".contains(&b))
}

/// nginx's replacement in the regex crate's syntax: `$N` (one digit, as nginx reads it) as
/// `${N}`, a lone `$` as `$$`; `Err` names an nginx variable (`$host`), which has none.
pub(super) fn replacement(target: &str) -> Result<String, String> {
    let mut out = String::with_capacity(target.len() + 4);
    let mut chars = target.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some(d @ '1'..='9') => {
                chars.next();
                out.push_str(&format!("${{{d}}}"));
            }
            Some(n) if n.is_ascii_alphanumeric() || n == '_' || n == '{' => {
                let name: String = chars
                    .clone()
                    .take_while(|c| {
                        c.is_ascii_alphanumeric() || *c == '_' || *c == '{' || *c == '}'
                    })
                    .collect();
                return Err(format!("${name}"));
            }
            _ => out.push_str("$$"),
        }
    }
    Ok(out)
}

/// The rewrite regex for a location path: nginx's case-insensitive match, extended over the
/// whole path so that the replacement takes all of it.
pub(super) fn whole_path_regex(path_regex: &str) -> String {
    format!("(?i)^(?:{path_regex})(?s:.*)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(path_regex: &str, target: &str, path: &str) -> String {
        let re = regex::Regex::new(&whole_path_regex(path_regex)).expect("regex");
        re.replace(path, replacement(target).expect("translated").as_str())
            .into_owned()
    }

    #[test]
    fn groups_are_braced_and_dollars_kept() {
        assert_eq!(replacement("/$2").as_deref(), Ok("/${2}"));
        assert_eq!(replacement("/v$1api/$2").as_deref(), Ok("/v${1}api/${2}"));
        assert_eq!(
            replacement("/$12").as_deref(),
            Ok("/${1}2"),
            "nginx: one digit"
        );
        assert_eq!(replacement("/a$").as_deref(), Ok("/a$$"));
        assert_eq!(replacement("/$host/$1"), Err("$host".into()));
        assert_eq!(replacement("/$0"), Err("$0".into()));
    }

    #[test]
    fn the_whole_path_is_replaced_as_nginx_does() {
        // docs/examples/rewrite.
        let p = "/something(/|$)(.*)";
        assert_eq!(apply(p, "/$2", "/something"), "/");
        assert_eq!(apply(p, "/$2", "/something/"), "/");
        assert_eq!(apply(p, "/$2", "/something/new"), "/new");
        // No group: everything below goes to the target.
        assert_eq!(apply("/testpath", "/", "/testpath/a/b"), "/");
        assert_eq!(
            apply("/api/v([0-9]+)/(.*)", "/v$1api/$2", "/API/v2/x"),
            "/v2api/x"
        );
    }

    #[test]
    fn redirect_codes_fall_back_as_ingress_nginx() {
        assert_eq!(code(Some("308"), 301, 308), 308);
        assert_eq!(code(Some("308"), 302, 307), 302);
        assert_eq!(code(Some("x"), 301, 308), 301);
        assert_eq!(code(None, 302, 307), 302);
    }
}
