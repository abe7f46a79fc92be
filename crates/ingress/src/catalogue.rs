//! Every ingress-nginx annotation (its documentation's list, v1.x), and what the import does
//! with it. The table of docs/ingress-nginx.md is checked against this list
//! by a test, so the two cannot drift apart.
//!
//! `Refused` annotations protect something and have no exact Tollgate equivalent: the routes
//! of an Ingress that carries one answer 403 (the import exits 3), unless `--allow-insecure`.
//! `Ignored` ones change nothing about who may reach what; each is named in one warning with
//! the reason it is harmless to drop.

/// What the import does with an annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Same behaviour in Tollgate.
    Exact,
    /// An equivalent that differs in a way docs/ingress-nginx.md states.
    Approximate,
    /// The Ingress's routes answer 403 (or, where stated, only when the value cannot be kept).
    Refused,
    /// Dropped with a warning: it changes nothing about who may reach what.
    Ignored,
}

/// One ingress-nginx annotation (without the `nginx.ingress.kubernetes.io/` prefix).
#[derive(Debug, Clone, Copy)]
pub struct Annotation {
    pub name: &'static str,
    pub treatment: Treatment,
    /// For `Ignored`: why dropping it is harmless, as the warning says it.
    pub why: &'static str,
}

const fn a(name: &'static str, treatment: Treatment, why: &'static str) -> Annotation {
    Annotation {
        name,
        treatment,
        why,
    }
}

use Treatment::{Approximate, Exact, Ignored, Refused};

const BUFFERING: &str = "nginx buffering and connection details: Tollgate streams";
const TELEMETRY: &str = "logging and tracing";
const REDIRECTS: &str = "redirect details";

/// Sorted by name.
const ALL: &[Annotation] = &[
    a("affinity", Approximate, ""),
    a("affinity-canary-behavior", Approximate, ""),
    a("affinity-mode", Approximate, ""),
    a("allowlist-source-range", Exact, ""),
    a("app-root", Exact, ""),
    a("auth-always-set-cookie", Approximate, ""),
    a("auth-cache-duration", Approximate, ""),
    a("auth-cache-key", Exact, ""),
    a("auth-keepalive", Ignored, "keepalive to the auth service: Tollgate keeps a pool of its own"),
    a("auth-keepalive-requests", Ignored, "keepalive to the auth service: Tollgate keeps a pool of its own"),
    a("auth-keepalive-share-vars", Ignored, "keepalive to the auth service: Tollgate keeps a pool of its own"),
    a("auth-keepalive-timeout", Ignored, "keepalive to the auth service: Tollgate keeps a pool of its own"),
    a("auth-method", Exact, ""),
    a("auth-proxy-set-headers", Refused, ""),
    a("auth-realm", Exact, ""),
    a("auth-request-redirect", Exact, ""),
    a("auth-response-headers", Exact, ""),
    a("auth-secret", Exact, ""),
    a("auth-secret-type", Exact, ""),
    a("auth-signin", Exact, ""),
    a("auth-signin-redirect-param", Exact, ""),
    a("auth-snippet", Refused, ""),
    a(
        "auth-tls-error-page",
        Ignored,
        "a failed client certificate is refused rather than redirected",
    ),
    a("auth-tls-match-cn", Refused, ""),
    a("auth-tls-pass-certificate-to-upstream", Exact, ""),
    a("auth-tls-secret", Approximate, ""),
    a("auth-tls-verify-client", Approximate, ""),
    a("auth-tls-verify-depth", Approximate, ""),
    a("auth-type", Exact, ""),
    a("auth-url", Exact, ""),
    a("backend-protocol", Approximate, ""),
    a("canary", Exact, ""),
    a("canary-by-cookie", Exact, ""),
    a("canary-by-header", Exact, ""),
    a("canary-by-header-pattern", Exact, ""),
    a("canary-by-header-value", Exact, ""),
    a("canary-weight", Exact, ""),
    a("canary-weight-total", Exact, ""),
    a("client-body-buffer-size", Ignored, BUFFERING),
    a("configuration-snippet", Refused, ""),
    a("connection-proxy-header", Ignored, BUFFERING),
    a("cors-allow-credentials", Approximate, ""),
    a("cors-allow-headers", Approximate, ""),
    a("cors-allow-methods", Approximate, ""),
    a("cors-allow-origin", Approximate, ""),
    a("cors-expose-headers", Approximate, ""),
    a("cors-max-age", Approximate, ""),
    a("custom-headers", Approximate, ""),
    a("custom-http-errors", Exact, ""),
    a("default-backend", Exact, ""),
    a("denylist-source-range", Exact, ""),
    a("disable-proxy-intercept-errors", Exact, ""),
    a("enable-access-log", Ignored, TELEMETRY),
    a("enable-cors", Approximate, ""),
    a("enable-global-auth", Refused, ""),
    a("enable-modsecurity", Refused, ""),
    a("enable-opentelemetry", Ignored, TELEMETRY),
    a("enable-owasp-core-rules", Refused, ""),
    a("enable-rewrite-log", Ignored, TELEMETRY),
    a(
        "fastcgi-index",
        Ignored,
        "FastCGI: HTTP is spoken to the upstream, which refuses it",
    ),
    a(
        "fastcgi-params-configmap",
        Ignored,
        "FastCGI: HTTP is spoken to the upstream, which refuses it",
    ),
    a("force-ssl-redirect", Exact, ""),
    a("from-to-www-redirect", Exact, ""),
    a("hsts", Approximate, ""),
    a("hsts-include-subdomains", Approximate, ""),
    a("hsts-max-age", Approximate, ""),
    a("hsts-preload", Approximate, ""),
    a(
        "http2-push-preload",
        Ignored,
        "HTTP/2 push is gone from browsers",
    ),
    a("limit-allowlist", Approximate, ""),
    a("limit-burst-multiplier", Exact, ""),
    a("limit-connections", Exact, ""),
    a("limit-rate", Exact, ""),
    a("limit-rate-after", Exact, ""),
    a("limit-rpm", Exact, ""),
    a("limit-rps", Exact, ""),
    a("limit-whitelist", Approximate, ""),
    a("load-balance", Approximate, ""),
    a("mirror-host", Exact, ""),
    a("mirror-request-body", Exact, ""),
    a("mirror-target", Exact, ""),
    a("modsecurity-snippet", Refused, ""),
    a(
        "modsecurity-transaction-id",
        Ignored,
        "ModSecurity logging (ModSecurity itself is refused)",
    ),
    a("opentelemetry-operation-name", Ignored, TELEMETRY),
    a("opentelemetry-trust-incoming-span", Ignored, TELEMETRY),
    a("permanent-redirect", Exact, ""),
    a("permanent-redirect-code", Exact, ""),
    a("preserve-trailing-slash", Exact, ""),
    a("proxy-body-size", Exact, ""),
    a("proxy-buffer-size", Ignored, BUFFERING),
    a("proxy-buffering", Ignored, BUFFERING),
    a("proxy-buffers-number", Ignored, BUFFERING),
    a("proxy-busy-buffers-size", Ignored, BUFFERING),
    a("proxy-connect-timeout", Exact, ""),
    a("proxy-cookie-domain", Exact, ""),
    a("proxy-cookie-path", Exact, ""),
    a("proxy-http-version", Ignored, BUFFERING),
    a("proxy-max-temp-file-size", Ignored, BUFFERING),
    a("proxy-next-upstream", Approximate, ""),
    a("proxy-next-upstream-timeout", Ignored, "a time bound on all tries: each attempt keeps the upstream's timeouts, and retries are bounded by attempts and the budget"),
    a("proxy-next-upstream-tries", Approximate, ""),
    a("proxy-read-timeout", Exact, ""),
    a("proxy-redirect-from", Exact, ""),
    a("proxy-redirect-to", Exact, ""),
    a("proxy-request-buffering", Ignored, BUFFERING),
    a("proxy-send-timeout", Exact, ""),
    a("proxy-ssl-ciphers", Approximate, ""),
    a("proxy-ssl-name", Approximate, ""),
    a("proxy-ssl-protocols", Approximate, ""),
    a("proxy-ssl-secret", Approximate, ""),
    a("proxy-ssl-server-name", Approximate, ""),
    a("proxy-ssl-verify", Approximate, ""),
    a("proxy-ssl-verify-depth", Approximate, ""),
    a("relative-redirects", Ignored, REDIRECTS),
    a("rewrite-target", Exact, ""),
    a(
        "satisfy",
        Ignored,
        "`any` lets a client in by either its address or its credentials; Tollgate asks both (stricter)",
    ),
    a("server-alias", Exact, ""),
    a("server-snippet", Refused, ""),
    a("service-upstream", Exact, ""),
    a("session-cookie-change-on-failure", Approximate, ""),
    a("session-cookie-conditional-samesite-none", Approximate, ""),
    a("session-cookie-domain", Approximate, ""),
    a("session-cookie-expires", Approximate, ""),
    a("session-cookie-max-age", Approximate, ""),
    a("session-cookie-name", Approximate, ""),
    a("session-cookie-path", Approximate, ""),
    a("session-cookie-samesite", Approximate, ""),
    a("session-cookie-secure", Approximate, ""),
    a(
        "ssl-ciphers",
        Ignored,
        "Tollgate offers modern TLS suites only",
    ),
    a("ssl-passthrough", Exact, ""),
    a(
        "ssl-prefer-server-ciphers",
        Ignored,
        "Tollgate offers modern TLS suites only",
    ),
    a("ssl-redirect", Exact, ""),
    a(
        "stream-snippet",
        Ignored,
        "TCP/UDP services of the controller, not this Ingress's HTTP routes",
    ),
    a("temporal-redirect", Exact, ""),
    a("temporal-redirect-code", Exact, ""),
    a("upstream-hash-by", Approximate, ""),
    a("upstream-hash-by-subset", Approximate, ""),
    a("upstream-hash-by-subset-size", Approximate, ""),
    a("upstream-vhost", Exact, ""),
    a("use-port-in-redirects", Ignored, REDIRECTS),
    a("use-regex", Approximate, ""),
    a("whitelist-source-range", Exact, ""),
    a("x-forwarded-prefix", Exact, ""),
];

/// Every annotation the import knows, sorted by name.
pub fn annotations() -> &'static [Annotation] {
    ALL
}

pub(super) fn find(name: &str) -> Option<&'static Annotation> {
    ALL.binary_search_by(|a| a.name.cmp(name))
        .ok()
        .map(|i| &ALL[i])
}

pub(super) const CANARY_KEYS: [&str; 7] = [
    "canary",
    "canary-by-cookie",
    "canary-by-header",
    "canary-by-header-pattern",
    "canary-by-header-value",
    "canary-weight",
    "canary-weight-total",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_once_each_and_every_ignored_one_says_why() {
        assert!(ALL.windows(2).all(|w| w[0].name < w[1].name));
        for a in ALL {
            assert_eq!(a.treatment == Ignored, !a.why.is_empty(), "{}", a.name);
        }
        assert_eq!(find("auth-url").map(|a| a.treatment), Some(Exact));
        assert_eq!(find("auth-snippet").map(|a| a.treatment), Some(Refused));
        assert!(find("nope").is_none());
    }
}
