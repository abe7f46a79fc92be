//! The balancing annotations: `load-balance`, `upstream-hash-by`, `affinity` with
//! `session-cookie-*`, and `proxy-next-upstream*`, as the upstream keys of docs/upstreams.md
//! (`balance`, `hash_key`, `affinity`, `retry`). They shape the upstream, so Ingresses that ask
//! differently for one Service get an upstream each.
//!
//! ingress-nginx balances over a Service's endpoints (its pods); Tollgate over the addresses
//! its target name resolves to. The imported target is the Service's cluster name: under
//! `run --kubernetes` the controller places the Service's ready endpoints under it (pods, as
//! ingress-nginx); offline, the name's one address (a ClusterIP) is what kube-proxy spreads,
//! so for these keys to choose among pods, make the Service headless (`clusterIP: None`).
//! Each Ingress using them is told so. `service-upstream: "true"` asks for the ClusterIP
//! itself: the target is then the Service's short name (`SVC.NS.svc`, found through a pod's
//! search domains), which the controller never places.

use super::anns::Anns;
use super::text::{comment, flag, q, Warnings};

/// What an Ingress asks of its upstream's balancing, as TOML lines (ordered, so an upstream
/// key can hold it).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Balancing {
    /// `balance = ...` and `hash_key = ...` lines.
    pub balance: Option<String>,
    pub affinity: Option<String>,
    pub retry: Option<String>,
    /// `service-upstream: "true"`: through the ClusterIP, never the endpoints.
    pub service_upstream: bool,
}

impl Balancing {
    pub fn is_empty(&self) -> bool {
        self.balance.is_none() && self.affinity.is_none() && self.retry.is_none()
    }
}

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> Balancing {
    let mut balancing = Balancing::default();
    let ctx = a.ctx();
    let b = &mut balancing;
    if let Some(v) = a.get("load-balance") {
        match v.trim() {
            "round_robin" => {}
            "ewma" => b.balance = Some("balance = \"ewma\"".into()),
            other => w.push(comment(&format!(
                "{ctx}: load-balance \"{other}\" is not round_robin or ewma: round robin used"
            ))),
        }
    }
    if let Some(v) = a.get("upstream-hash-by") {
        match hash_key(v.trim()) {
            Some(k) => {
                b.balance = Some(format!("balance = \"hash\"\nhash_key = {}", q(&k)));
            }
            None => w.push(comment(&format!(
                "{ctx}: upstream-hash-by \"{v}\" is not one variable Tollgate can hash ($remote_addr, $request_uri, $uri, $http_NAME, $cookie_NAME, $arg_NAME): balanced as before"
            ))),
        }
        for k in ["upstream-hash-by-subset", "upstream-hash-by-subset-size"] {
            if a.get(k).is_some() {
                w.push(comment(&format!(
                    "{ctx}: {k}: subsets are not translated: the key hashes over every target"
                )));
            }
        }
    }
    let affinity = a.get("affinity");
    let cookie_keys = [
        "affinity-mode",
        "affinity-canary-behavior",
        "session-cookie-name",
        "session-cookie-max-age",
        "session-cookie-expires",
        "session-cookie-path",
        "session-cookie-secure",
        "session-cookie-samesite",
        "session-cookie-domain",
        "session-cookie-change-on-failure",
        "session-cookie-conditional-samesite-none",
    ];
    match affinity.map(str::trim) {
        Some("cookie") => b.affinity = Some(affinity_line(a, ctx, w)),
        Some(other) => {
            w.push(comment(&format!(
                "{ctx}: affinity \"{other}\" is not cookie: no affinity (as by ingress-nginx)"
            )));
            for k in cookie_keys {
                let _ = a.get(k);
            }
        }
        None => {
            for k in cookie_keys {
                if a.get(k).is_some() {
                    w.push(comment(&format!(
                        "{ctx}: {k} without affinity: cookie: ignored (as by ingress-nginx)"
                    )));
                }
            }
        }
    }
    b.retry = retry(a, ctx, w);
    match a.get("service-upstream").map(str::trim) {
        None | Some("false") => {}
        Some("true") => b.service_upstream = true,
        // ingress-nginx reads a bad boolean as its default, false.
        Some(other) => w.push(comment(&format!(
            "{ctx}: service-upstream \"{other}\" is not true or false: false (the endpoints), as ingress-nginx reads it"
        ))),
    }
    if !b.is_empty() && b.service_upstream {
        w.push(comment(&format!(
            "{ctx}: service-upstream sends to the Service's one ClusterIP: the balancing annotations have that one address to choose among, as in ingress-nginx"
        )));
    } else if !b.is_empty() {
        w.push(comment(&format!(
            "{ctx}: balancing annotations choose among the addresses of the Service's name: make the Service headless (clusterIP: None) so that its pods are the targets, as ingress-nginx's endpoints were"
        )));
    }
    balancing
}

/// `upstream-hash-by`'s one variable as a `hash_key`.
fn hash_key(v: &str) -> Option<String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    };
    Some(match v {
        "$remote_addr" | "$binary_remote_addr" => "client_ip".into(),
        "$request_uri" => "uri".into(),
        "$uri" | "$document_uri" => "path".into(),
        _ => {
            if let Some(h) = v.strip_prefix("$http_").filter(|n| name_ok(n)) {
                format!("header:{}", h.replace('_', "-").to_ascii_lowercase())
            } else if let Some(c) = v.strip_prefix("$cookie_").filter(|n| name_ok(n)) {
                format!("cookie:{c}")
            } else if let Some(q) = v.strip_prefix("$arg_").filter(|n| name_ok(n)) {
                format!("query:{q}")
            } else {
                return None;
            }
        }
    })
}

/// `affinity = { ... }` from `session-cookie-*` (ingress-nginx's defaults: INGRESSCOOKIE, a
/// session cookie, the location's path).
fn affinity_line(a: &mut Anns, ctx: &str, w: &mut Warnings) -> String {
    let mut parts = Vec::new();
    let name = a
        .get("session-cookie-name")
        .map(str::trim)
        .unwrap_or("INGRESSCOOKIE");
    let name = if !name.is_empty() && tollgate_config::http_token(name) {
        name
    } else {
        w.push(comment(&format!(
            "{ctx}: session-cookie-name \"{name}\" is not a cookie name: INGRESSCOOKIE used"
        )));
        "INGRESSCOOKIE"
    };
    parts.push(format!("cookie = {}", q(name)));
    // max-age wins over expires, as in ingress-nginx; both are seconds.
    let age = a.get("session-cookie-max-age");
    let expires = a.get("session-cookie-expires");
    if let Some(v) = age.or(expires) {
        match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => parts.push(format!("max_age = \"{n}s\"")),
            _ => w.push(comment(&format!(
                "{ctx}: session-cookie-max-age \"{v}\" is not a number of seconds: a session cookie"
            ))),
        }
    }
    if let Some(p) = a.get("session-cookie-path") {
        let p = p.trim();
        if p.starts_with('/') && p.bytes().all(|b| b.is_ascii_graphic() && b != b';') {
            parts.push(format!("path = {}", q(p)));
        } else {
            w.push(comment(&format!(
                "{ctx}: session-cookie-path \"{p}\" is not a path: \"/\" used"
            )));
        }
    }
    if a.get("session-cookie-secure").is_some() {
        let secure = flag(
            a.get("session-cookie-secure"),
            false,
            &format!("{ctx}: session-cookie-secure"),
            w,
        );
        parts.push(format!("secure = {secure}"));
    }
    for (k, why) in [
        (
            "affinity-mode",
            "the cookie holds while its target is healthy (balanced and persistent alike)",
        ),
        (
            "affinity-canary-behavior",
            "a canary's own choice is made before affinity",
        ),
        ("session-cookie-samesite", "the cookie is SameSite=Lax"),
        (
            "session-cookie-conditional-samesite-none",
            "the cookie is SameSite=Lax",
        ),
        ("session-cookie-domain", "the cookie is the host's"),
        (
            "session-cookie-change-on-failure",
            "a failed target's clients are re-pinned",
        ),
    ] {
        if let Some(v) = a.get(k) {
            w.push(comment(&format!("{ctx}: {k} \"{v}\": {why}")));
        }
    }
    format!(
        "# affinity: cookie; set affinity.secret (the same on every instance) for a fleet.\naffinity = {{ {} }}",
        parts.join(", ")
    )
}

/// `retry = { ... }` from `proxy-next-upstream` and `proxy-next-upstream-tries`.
fn retry(a: &mut Anns, ctx: &str, w: &mut Warnings) -> Option<String> {
    let on = a.get("proxy-next-upstream");
    let tries = a.get("proxy-next-upstream-tries");
    if let Some(v) = a.get("proxy-next-upstream-timeout") {
        w.push(comment(&format!(
            "{ctx}: proxy-next-upstream-timeout \"{v}\": not translated (each attempt has the upstream's timeouts; retries are bounded by attempts and the budget)"
        )));
    }
    if on.is_none() && tries.is_none() {
        return None;
    }
    // ingress-nginx's defaults: "error timeout", 3 tries.
    let mut list = Vec::new();
    for t in on.unwrap_or("error timeout").split_whitespace() {
        match t {
            // A failed connect still falls over (nothing was sent): Tollgate does so in
            // every configuration, `off` included.
            "off" => return Some("# proxy-next-upstream: off (a failed connect still tries the next target: nothing was sent)\nretry = { attempts = 0 }".into()),
            "error" => list.push("error"),
            "timeout" => list.push("timeout"),
            "http_500" | "http_502" | "http_503" | "http_504" | "http_403" | "http_404"
            | "http_429" => list.push(&t[5..]),
            other => w.push(comment(&format!(
                "{ctx}: proxy-next-upstream \"{other}\": not translated (Tollgate retries on error, timeout and http_500, 502, 503, 504, 403, 404, 429, idempotent requests without a body only)"
            ))),
        }
    }
    let attempts = match tries.map(|v| v.trim().parse::<u32>()) {
        None => 2,
        Some(Ok(0)) => 10,
        Some(Ok(n)) => (n - 1).min(10),
        Some(Err(_)) => {
            w.push(comment(&format!(
                "{ctx}: proxy-next-upstream-tries \"{}\" is not a number: 3 tries used (ingress-nginx's default)",
                tries.unwrap_or_default()
            )));
            2
        }
    };
    let on: Vec<String> = list.iter().map(|s| q(s)).collect();
    Some(format!(
        "# proxy-next-upstream, proxy-next-upstream-tries (tries after the first); the budget\n\
         # keeps retries to a fifth of the requests, so an outage is never multiplied.\n\
         retry = {{ attempts = {attempts}, on = [{}], budget = 0.2 }}",
        on.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn hash_variables() {
        for (v, want) in [
            ("$remote_addr", Some("client_ip")),
            ("$request_uri", Some("uri")),
            ("$uri", Some("path")),
            ("$http_x_user_id", Some("header:x-user-id")),
            ("$cookie_session", Some("cookie:session")),
            ("$arg_tenant", Some("query:tenant")),
            ("$remote_addr$request_uri", None),
            ("$host", None),
            ("literal", None),
            ("$http_", None),
        ] {
            assert_eq!(super::hash_key(v).as_deref(), want, "{v}");
        }
    }
}
