//! Authentication annotations, translated exactly where Tollgate has the same behaviour
//! (docs/auth.md), refused (the routes answer 403) where it has not.
//!
//! - `auth-url` (with `auth-method`, `auth-signin`, `auth-response-headers`,
//!   `auth-request-redirect`, `auth-cache-key`, `auth-cache-duration`,
//!   `auth-always-set-cookie`, `auth-keepalive*`) becomes the route's `forward` auth. A URL or
//!   sign-in URL with nginx variables other than the host and the request URI, a cache key with
//!   a variable that has no key source at least as fine, `auth-signin-redirect-param` other
//!   than `rd`, `auth-proxy-set-headers` (a ConfigMap the import cannot see) and `auth-snippet`
//!   are refused.
//! - `auth-type: basic` with `auth-secret` (same namespace, mounted like the TLS Secrets) and
//!   `auth-realm` becomes `basic`: `auth-secret-type: auth-file` (the default) reads the
//!   Secret's `auth` key as an htpasswd file; `auth-map` its keys as users, their values as
//!   hashes (a directory `htpasswd` reads that way). `auth-type: digest` is refused.

use super::anns::{Anns, Refusal};
use super::text::secret_dir;
use super::text::{comment, Warnings};

/// A route's authentication, as the output writes it.
#[derive(Clone, Debug)]
pub(super) enum AuthOut {
    Basic {
        htpasswd: String,
        realm: Option<String>,
    },
    Forward(ForwardOut),
}

#[derive(Clone, Debug, Default)]
/// `auth-url` or `auth-type: basic` of one Ingress, translated, and what cannot be.
pub(super) struct ForwardOut {
    pub url: String,
    pub method: Option<String>,
    /// With `$host` / `$http_host` left for the route's host (see [`ForwardOut::signin_for`]).
    pub signin: Option<String>,
    pub response_headers: Vec<String>,
    pub redirect: Option<String>,
    /// Seconds.
    pub cache: Option<u64>,
    pub cache_key: Vec<String>,
}

impl ForwardOut {
    /// The auth URL for a route on `host` (`$host` replaced; the import refused an Ingress
    /// with `$host` there and a rule without an exact host).
    pub fn url_for(&self, host: Option<&str>) -> String {
        match host {
            Some(h) => self.url.replace("$http_host", h).replace("$host", h),
            None => self.url.clone(),
        }
    }

    /// The sign-in URL for a route on `host`: `$host` replaced by an exact host; on a route
    /// for any (or a wildcard) host, the URL's path alone, which the browser resolves on the
    /// host it asked (what `$host` is).
    pub fn signin_for(&self, host: Option<&str>) -> Option<String> {
        let s = self.signin.as_deref()?;
        if !s.contains("$host") && !s.contains("$http_host") {
            return Some(s.to_string());
        }
        match host.filter(|h| !h.starts_with('*')) {
            Some(h) => Some(s.replace("$http_host", h).replace("$host", h)),
            None => {
                let rest = s.split_once("://").map_or(s, |(_, r)| r);
                Some(
                    rest.find('/')
                        .map_or("/".to_string(), |i| rest[i..].to_string()),
                )
            }
        }
    }
}

const AUTH_KEYS: [&str; 17] = [
    "auth-url",
    "auth-method",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-response-headers",
    "auth-request-redirect",
    "auth-cache-key",
    "auth-cache-duration",
    "auth-always-set-cookie",
    "auth-keepalive",
    "auth-keepalive-requests",
    "auth-keepalive-share-vars",
    "auth-keepalive-timeout",
    "auth-type",
    "auth-secret",
    "auth-secret-type",
    "auth-realm",
];

/// The auth annotations' values, trimmed; an empty one (a Helm template's unset value) is
/// absent.
struct Vals<'a>(Vec<(&'static str, Option<&'a str>)>);

impl<'a> Vals<'a> {
    fn get(&self, k: &str) -> Option<&'a str> {
        self.0
            .iter()
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| *v)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }
}

#[derive(Default)]
pub(super) struct AuthRead {
    pub auth: Option<AuthOut>,
    pub refusals: Vec<Refusal>,
}

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> AuthRead {
    let mut s = AuthRead::default();
    let ctx = a.ctx();
    let mut refuse = |key: &str, why: String| {
        s.refusals.push(Refusal {
            annotation: key.to_string(),
            why: comment(&why),
        })
    };
    let url = a.get("auth-url").filter(|v| !v.trim().is_empty());
    let kind = a.get("auth-type").filter(|v| !v.trim().is_empty());
    // Read (marked) whether used or not.
    let values = Vals(AUTH_KEYS.iter().map(|k| (*k, a.get(k))).collect());
    let get = &values;
    let out = match (url, kind) {
        (Some(_), Some(_)) => {
            refuse("auth-type", "auth-url and auth-type together: ingress-nginx asks both, Tollgate a route's one method".into());
            None
        }
        (Some(u), None) => {
            forward(u.trim(), get, a.exact_hosts(), &mut refuse, w, ctx).map(AuthOut::Forward)
        }
        (None, Some(k)) => basic(k.trim(), a.ns(), get, &mut refuse),
        (None, None) => {
            for (k, v) in &values.0 {
                if v.is_some_and(|v| !v.trim().is_empty()) {
                    w.push(format!(
                        "{ctx}: {k} without auth-url or auth-type: ignored (as by ingress-nginx)"
                    ));
                }
            }
            None
        }
    };
    s.auth = out;
    s
}

/// `auth-url` and the keys that go with it.
fn forward(
    url: &str,
    get: &Vals,
    exact_hosts: bool,
    refuse: &mut dyn FnMut(&str, String),
    w: &mut Warnings,
    ctx: &str,
) -> Option<ForwardOut> {
    let mut ok = true;
    // `$host` (the docs' oauth2-proxy example) is the route's host: one per rule, so every rule
    // must name an exact one.
    let hosted = url.contains("$host") || url.contains("$http_host");
    if hosted && !exact_hosts {
        refuse("auth-url", format!("\"{url}\": $host stands for the request's host, and a rule of this Ingress names none (or a wildcard)"));
        return None;
    }
    let probe = url
        .replace("$http_host", "h.example")
        .replace("$host", "h.example");
    let parsed = probe.parse::<http::Uri>().ok();
    if probe.contains('$')
        || !parsed
            .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
    {
        refuse("auth-url", format!("\"{url}\": an absolute http(s) URL without nginx variables (other than $host) is needed"));
        return None;
    }
    if url.starts_with("https://") {
        w.push(format!("{ctx}: auth-url {url}: Tollgate verifies the auth service's certificate against the system's roots (ingress-nginx does not verify it)"));
    }
    let mut f = ForwardOut {
        url: url.to_string(),
        ..ForwardOut::default()
    };
    if let Some(m) = get.get("auth-method") {
        const METHODS: [&str; 9] = [
            "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE",
        ];
        if METHODS.contains(&m) {
            f.method = Some(m.to_string());
        } else {
            refuse(
                "auth-method",
                format!("\"{m}\" is not a method ingress-nginx accepts"),
            );
            ok = false;
        }
    }
    if let Some(p) = get.get("auth-signin-redirect-param").filter(|p| *p != "rd") {
        refuse(
            "auth-signin-redirect-param",
            format!("\"{p}\": Tollgate names the original URL rd="),
        );
        ok = false;
    }
    if let Some(signin) = get.get("auth-signin") {
        match sign_in(signin) {
            Ok(s) => f.signin = Some(s),
            Err(why) => {
                refuse("auth-signin", why);
                ok = false;
            }
        }
    }
    if let Some(h) = get.get("auth-response-headers") {
        for name in h.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                f.response_headers.push(name.to_string());
            } else {
                refuse(
                    "auth-response-headers",
                    format!("\"{name}\" is not a header name"),
                );
                ok = false;
            }
        }
    }
    f.redirect = get.get("auth-request-redirect").map(str::to_string);
    ok &= cache(get, exact_hosts, refuse, &mut f);
    ok.then_some(f)
}

/// `auth-cache-key` and `auth-cache-duration`: answers cached by the key, at most an hour.
/// False when either cannot be translated.
fn cache(
    get: &Vals,
    exact_hosts: bool,
    refuse: &mut dyn FnMut(&str, String),
    f: &mut ForwardOut,
) -> bool {
    let mut ok = true;
    if let Some(key) = get.get("auth-cache-key") {
        match cache_key(key, exact_hosts) {
            Ok(k) => {
                f.cache_key = k;
                match cache_duration(get.get("auth-cache-duration").unwrap_or("200 202 401 5m")) {
                    Ok(secs) => f.cache = Some(secs.min(3600)),
                    Err(why) => {
                        refuse("auth-cache-duration", why);
                        ok = false;
                    }
                }
            }
            Err(why) => {
                refuse("auth-cache-key", why);
                ok = false;
            }
        }
    }
    ok
}

/// `auth-signin`: an absolute URL in which only `$host`/`$http_host` (the route's host) and
/// `$scheme` stand for something; an `rd` parameter already in it (`?rd=$escaped_request_uri`
/// and its like) is dropped, since Tollgate adds `rd=` the original URL itself.
fn sign_in(s: &str) -> Result<String, String> {
    let (base, query) = s.split_once('?').unwrap_or((s, ""));
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("rd="))
        .collect();
    let mut out = base.replace("$scheme://", "https://");
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    let vars = out.replace("$http_host", "").replace("$host", "");
    if vars.contains('$') {
        return Err(format!("\"{s}\": nginx variables other than $host, $scheme and an rd= parameter cannot be translated"));
    }
    let probe = out
        .replace("$http_host", "h.example")
        .replace("$host", "h.example");
    let absolute = probe
        .parse::<http::Uri>()
        .ok()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !absolute {
        return Err(format!("\"{s}\" is not an absolute http(s) URL"));
    }
    Ok(out)
}

/// `auth-cache-key`: each nginx variable as a key source at least as fine; literal text is the
/// same for every request and adds nothing.
fn cache_key(key: &str, exact_hosts: bool) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = key;
    while let Some(i) = rest.find('$') {
        let tail = &rest[i + 1..];
        let tail = tail.strip_prefix('{').unwrap_or(tail);
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let var = &tail[..end];
        rest = tail[end..].strip_prefix('}').unwrap_or(&tail[end..]);
        let source = match var {
            "remote_user" | "http_authorization" => "header:authorization".to_string(),
            "remote_addr" | "binary_remote_addr" => "client_ip".to_string(),
            "request_method" => "method".to_string(),
            "uri" | "document_uri" => "path".to_string(),
            // The host is in every key Tollgate makes (and one rule, one host).
            "host" | "http_host" | "server_name" if exact_hosts => continue,
            "host" | "http_host" | "server_name" => {
                return Err(format!("\"{key}\": ${var} on a rule without an exact host"));
            }
            v if v.starts_with("cookie_") => "header:cookie".to_string(),
            v if v.starts_with("http_") && v.len() > 5 => {
                format!("header:{}", v[5..].replace('_', "-"))
            }
            other => {
                return Err(format!("\"{key}\": ${other} has no key source at least as fine (header:, client_ip, method, path)"));
            }
        };
        if !out.contains(&source) {
            out.push(source);
        }
    }
    if out.is_empty() {
        return Err(format!(
            "\"{key}\" names no variable: every request would share one answer"
        ));
    }
    Ok(out)
}

/// `auth-cache-duration` (`"200 202 401 5m"`, or entries separated by commas): the shortest
/// time of its entries, in seconds (Tollgate keeps 2xx, 401 and 403 answers for one time).
fn cache_duration(v: &str) -> Result<u64, String> {
    let mut shortest: Option<u64> = None;
    let mut success = false;
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut total = 0u64;
        let mut timed = false;
        let mut codes = false;
        for word in entry.split_whitespace() {
            if word.len() == 3 && word.bytes().all(|b| b.is_ascii_digit()) && !timed {
                codes = true;
                success |= word.starts_with('2');
                continue;
            }
            let digits = word
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(word.len());
            let (n, unit) = word.split_at(digits);
            let n: u64 = n
                .parse()
                .map_err(|_| format!("\"{v}\": \"{word}\" is not a time"))?;
            let secs = match unit {
                "ms" => 0,
                "s" | "" => 1,
                "m" => 60,
                "h" => 3600,
                "d" => 86_400,
                "w" => 604_800,
                "M" => 2_592_000,
                "y" => 31_536_000,
                _ => return Err(format!("\"{v}\": \"{word}\" is not a time")),
            };
            total = total.saturating_add(n.saturating_mul(secs));
            timed = true;
        }
        if !timed {
            return Err(format!("\"{v}\": the entry \"{entry}\" has no time"));
        }
        // An entry without codes is nginx's 200, 301 and 302.
        success |= !codes;
        shortest = Some(shortest.map_or(total, |s| s.min(total)));
    }
    if !success {
        // Tollgate keeps 2xx answers too: that would keep what nginx asks again.
        return Err(format!(
            "\"{v}\" keeps no 2xx answer, and Tollgate keeps 2xx, 401 and 403 for one time"
        ));
    }
    shortest.ok_or_else(|| format!("\"{v}\" has no entry"))
}

/// `auth-type: basic` with its Secret and realm.
fn basic(
    kind: &str,
    ns: &str,
    get: &Vals,
    refuse: &mut dyn FnMut(&str, String),
) -> Option<AuthOut> {
    if kind != "basic" {
        refuse(
            "auth-type",
            format!("\"{kind}\": only basic authentication has a Tollgate equivalent"),
        );
        return None;
    }
    let Some(secret) = get.get("auth-secret") else {
        refuse(
            "auth-secret",
            "auth-type basic without auth-secret (ingress-nginx denies such a location too)".into(),
        );
        return None;
    };
    let (secret_ns, name) = secret.split_once('/').unwrap_or((ns, secret));
    if secret_ns != ns {
        refuse("auth-secret", format!("\"{secret}\" is in another namespace (ingress-nginx needs allow-cross-namespace-resources for it)"));
        return None;
    }
    if !super::text::k8s_name(name) {
        refuse("auth-secret", format!("\"{secret}\" is not a Secret name"));
        return None;
    }
    let dir = secret_dir(ns, name);
    let htpasswd = match get.get("auth-secret-type").unwrap_or("auth-file") {
        "auth-file" => format!("{dir}/auth"),
        // The Secret's keys are users, each mounted as a file holding its hash.
        "auth-map" => dir,
        other => {
            refuse(
                "auth-secret-type",
                format!("\"{other}\" is not auth-file or auth-map"),
            );
            return None;
        }
    };
    Some(AuthOut::Basic {
        htpasswd,
        realm: get.get("auth-realm").map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_are_at_least_as_fine() {
        assert_eq!(
            cache_key("$remote_user$http_authorization", true).expect("key"),
            vec!["header:authorization"]
        );
        assert_eq!(
            cache_key("$cookie__oauth2_proxy$host", true).expect("key"),
            vec!["header:cookie"]
        );
        assert_eq!(
            cache_key("${http_x_api_key}-$remote_addr", true).expect("key"),
            vec!["header:x-api-key", "client_ip"]
        );
        assert!(
            cache_key("$request_uri", true).is_err(),
            "the query would be lost"
        );
        assert!(cache_key("static", true).is_err());
    }

    #[test]
    fn cache_durations_take_the_shortest() {
        assert_eq!(cache_duration("200 202 401 5m"), Ok(300));
        assert_eq!(cache_duration("200 202 10m, 401 5m"), Ok(300));
        assert_eq!(cache_duration("1h 30m"), Ok(5400));
        assert!(cache_duration("200 202").is_err());
        assert!(
            cache_key("$cookie__oauth2_proxy$host", false).is_err(),
            "a wildcard rule"
        );
        assert!(
            cache_duration("401 5m").is_err(),
            "nginx would ask again on every 2xx"
        );
        assert!(cache_duration("5 minutes").is_err());
    }

    #[test]
    fn sign_in_urls() {
        assert_eq!(
            sign_in("https://$host/oauth2/start?rd=$escaped_request_uri").as_deref(),
            Ok("https://$host/oauth2/start")
        );
        assert_eq!(
            sign_in("https://auth.example.com/start?x=1&rd=$scheme://$host$request_uri").as_deref(),
            Ok("https://auth.example.com/start?x=1")
        );
        assert!(sign_in("https://$host/start?next=$request_uri").is_err());
        let f = ForwardOut {
            signin: Some("https://$host/oauth2/start".into()),
            ..ForwardOut::default()
        };
        assert_eq!(
            f.signin_for(Some("app.example.com")).as_deref(),
            Some("https://app.example.com/oauth2/start")
        );
        assert_eq!(
            f.signin_for(Some("*.example.com")).as_deref(),
            Some("/oauth2/start")
        );
        assert_eq!(f.signin_for(None).as_deref(), Some("/oauth2/start"));
    }
}
