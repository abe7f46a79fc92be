//! Stage 6: the TOML text. Everything taken from the input is written through `q` (a TOML
//! string) or `comment` (a comment line), so no Ingress can write configuration.

use super::anns::{LimitKind, Refusal};
use super::auth::AuthOut;
use super::deny::annotations;
use super::listener::Tls;
use super::routes::{Action, Route};
use super::settings::Settings;
use super::text::secret_dir;
use super::text::{comment, q, unique};
use super::upstreams::UpKey;
use super::TLS_LISTEN;
use std::collections::BTreeMap;
use std::fmt::Write;
use tollgate_config::TLS_MOUNT;

/// Everything decided, ready to be written.
pub(super) struct Plan<'a> {
    pub ingresses: usize,
    pub warnings: &'a [String],
    pub tls: &'a Tls,
    pub settings: &'a [Settings],
    pub routes: &'a [Route],
    pub redirects: &'a [Option<bool>],
    pub covering: &'a [Vec<Refusal>],
    pub allow_insecure: bool,
    pub upstreams: &'a BTreeMap<UpKey, String>,
    pub global: &'a super::global::Global,
    /// `ssl-passthrough`: each host and its `/` path's upstream.
    pub passthrough: &'a BTreeMap<String, UpKey>,
}

pub(super) fn write(p: &Plan) -> String {
    let mut out = String::new();
    header(&mut out, p);
    server(&mut out, p);
    tls(&mut out, p.tls);
    upstreams(&mut out, p.upstreams);
    super::passthrough::write(&mut out, p.passthrough, p.upstreams);
    limits(&mut out, p.settings);
    for (i, r) in p.routes.iter().enumerate() {
        route(&mut out, p, r, p.redirects[i], &p.covering[i]);
    }
    out
}

fn header(out: &mut String, p: &Plan) {
    let _ = writeln!(
        out,
        "# Made by `tollgate import-ingress` from {} Ingress object(s). Check it with\n\
         # `tollgate check FILE`; see docs/ingress-nginx.md.",
        p.ingresses
    );
    for w in p.warnings {
        let _ = writeln!(out, "# warning: {}", comment(w));
    }
}

fn server(out: &mut String, p: &Plan) {
    out.push_str("\n[server]\nlisten = [\"0.0.0.0:8080\"]\n");
    if p.tls.serve {
        let _ = writeln!(
            out,
            "# HTTPS (HTTP/1.1 and h2): the Service maps port 443 here (the container runs as\n\
             # non-root); redirects name port 443, the Service's.\n\
             tls_listen = [{}]\nhttps_port = 443",
            q(TLS_LISTEN)
        );
    } else if p.redirects.contains(&Some(true)) {
        out.push_str("# force-ssl-redirect: TLS is served in front of Tollgate, on port 443.\nhttps_port = 443\n");
    }
    out.push_str(
        "admin = \"0.0.0.0:9901\"\n\
         # Like ingress-nginx, X-Forwarded-For is not believed until you name the load balancer\n\
         # in front (its addresses only: any other peer could then forge a client address).\n\
         trusted_proxies = []\n\
         # As ingress-nginx: a host some route names answers its unmatched paths itself (404, or\n\
         # its Ingress's defaultBackend), never with the routes of other hosts.\n\
         host_fallthrough = false\n",
    );
    if p.global.underscores_in_headers {
        let _ = writeln!(
            out,
            "# ConfigMap {}: enable-underscores-in-headers: \"true\" (header names holding `_`\n\
             # are kept; ingress-nginx's default, and Tollgate's, drops them).\n\
             underscores_in_headers = true",
            comment(p.global.from.as_deref().unwrap_or_default())
        );
    }
}

fn tls(out: &mut String, t: &Tls) {
    if !t.serve {
        return;
    }
    let _ = writeln!(
        out,
        "\n# Each Secret of the Ingresses' spec.tls, mounted read-only at {TLS_MOUNT}/NAMESPACE/SECRET/\n\
         # (a secret volume without subPath: renewed certificates are picked up). The first is\n\
         # served to clients without SNI or with a name no certificate holds (ingress-nginx\n\
         # served its own default certificate there; unknown_sni = \"reject\" refuses them).\n\
         [tls]\ncertificates = ["
    );
    for ((ns, secret), (hosts, by)) in &t.certs {
        let dir = secret_dir(ns, secret);
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "  # Secret {}: {} ({})\n  {{ cert = {}, key = {} }},",
            comment(&format!("{ns}/{secret}")),
            comment(&if hosts.is_empty() {
                "no hosts listed".to_string()
            } else {
                hosts.join(", ")
            }),
            comment(&by.join(", ")),
            q(&format!("{dir}/tls.crt")),
            q(&format!("{dir}/tls.key")),
        );
    }
    out.push_str("]\n");
    match (&t.hsts, t.hsts_note) {
        (Some(v), _) => {
            let _ = writeln!(out, "hsts = {}", q(v));
        }
        (None, true) => out.push_str(
            "# ingress-nginx's default, if its ConfigMap kept hsts: \"true\":\n\
             # hsts = \"max-age=31536000; includeSubDomains\"\n",
        ),
        (None, false) => {}
    }
    if let Some(c) = &t.client {
        let _ = writeln!(
            out,
            "# auth-tls-secret: the CA Secret's ca.crt, mounted like the certificates; server-wide\n\
             # in Tollgate (every Ingress served over TLS asked the same).\n\
             client_ca = {}\nclient_auth = {}",
            q(&c.ca),
            q(c.mode.as_str())
        );
    }
}

fn upstreams(out: &mut String, ups: &BTreeMap<UpKey, String>) {
    let mut by_name: Vec<(&String, &UpKey)> = ups.iter().map(|(k, n)| (n, k)).collect();
    by_name.sort();
    if !by_name.is_empty() {
        // Said once, not per upstream: a cluster's 10,000 upstreams made it 40,000 lines.
        out.push_str(
            "\n# Each upstream's connect_timeout, read_timeout and write_timeout are its Ingress's\n\
             # proxy-connect-timeout, proxy-read-timeout (also a WebSocket's idle time) and\n\
             # proxy-send-timeout; ingress-nginx's defaults are 5, 60 and 60 seconds.\n",
        );
    }
    for (name, k) in by_name {
        let t = k.timeouts;
        let _ = writeln!(
            out,
            "\n[upstreams.{}]\ntargets = [{}]\n\
             connect_timeout = \"{}s\"\nread_timeout = \"{}s\"\nwrite_timeout = \"{}s\"",
            q(name),
            q(&k.target()),
            t.connect,
            t.read,
            t.send
        );
        if k.proto.tls() {
            out.push_str(&k.ssl.line());
        }
        if k.proto.h2() {
            out.push_str("# backend-protocol GRPC/GRPCS: HTTP/2 to the targets.\nh2 = true\n");
        }
        let b = &k.balancing;
        for line in [&b.balance, &b.affinity, &b.retry].into_iter().flatten() {
            let _ = writeln!(out, "{line}");
        }
    }
}

fn limits(out: &mut String, settings: &[Settings]) {
    for l in settings.iter().flat_map(|s| &s.limits) {
        match &l.kind {
            LimitKind::Rate { rate, burst } => {
                // nginx's burst is the queue beyond the request being served: one more.
                let capacity = burst.saturating_add(1);
                let _ = writeln!(
                    out,
                    "\n# ingress-nginx: limit_req rate={rate} burst={burst} nodelay, per client address\n\
                     [limits.{}]\nkey = \"client_ip\"\nalgorithm = \"leaky_bucket\"\nrate = {}\nburst = {capacity}\ndelay = {capacity}",
                    q(&l.name),
                    q(rate),
                );
            }
            LimitKind::Concurrency { max } => {
                let _ = writeln!(
                    out,
                    "\n# ingress-nginx: limit_conn {max} per client address (requests being served)\n\
                     [limits.{}]\nkey = \"client_ip\"\nalgorithm = \"concurrency\"\nburst = {max}",
                    q(&l.name),
                );
            }
        }
        if l.global {
            out.push_str(
                "# tollgate.io/limit-scope: global: one count across every replica, in Redis\nscope = \"global\"\n",
            );
        }
    }
}

fn list(v: &[String]) -> String {
    v.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ")
}

fn route(out: &mut String, p: &Plan, r: &Route, redirect: Option<bool>, covering: &[Refusal]) {
    let s = &p.settings[r.ing];
    let _ = write!(out, "\n# {}\n", comment(&r.label));
    let denied = !covering.is_empty() && !p.allow_insecure;
    refusal_comment(out, covering, denied);
    let _ = writeln!(out, "[[routes]]\nname = {}", q(&r.name));
    if let Some(h) = &r.host {
        let _ = writeln!(out, "{}", super::edge::host_line(&s.edge, h));
    }
    let _ = writeln!(out, "{} = {}", r.matcher.key(), q(r.matcher.text()));
    if r.is_regex() {
        out.push_str("case_insensitive = true\n");
    }
    match (&r.action, denied) {
        (action, true) => denied_action(out, p, action),
        (Action::Redirect { status, location }, false) => {
            let _ = writeln!(
                out,
                "respond = {{ status = {status}, location = {} }}",
                q(location)
            );
        }
        (
            Action::Proxy {
                upstream,
                rewrite,
                canary,
            },
            false,
        ) => {
            let _ = writeln!(out, "upstream = {}", q(&p.upstreams[upstream]));
            if let Some((re, replace)) = rewrite {
                let _ = writeln!(
                    out,
                    "# rewrite-target: the whole path replaced, as nginx's rewrite does.\n\
                     rewrite = {{ regex = {}, replace = {} }}",
                    q(re),
                    q(replace)
                );
            }
            if let Some(c) = canary {
                canary_line(out, p, c);
            }
            super::edge::lines(out, &s.edge, r.host.as_deref());
            super::fallback::lines(out, &s.fallback, upstream, p.upstreams);
        }
    }
    // ingress-nginx tells the upstream of a host with client certificates about them.
    if matches!(s.client_auth, Some(Ok(_))) {
        out.push_str(if s.pass_certificate {
            "# auth-tls: ssl-client-verify, -subject-dn, -issuer-dn; auth-tls-pass-certificate-to-upstream: ssl-client-cert\nclient_cert_headers = \"with_certificate\"\n"
        } else {
            "# auth-tls: ssl-client-verify, ssl-client-subject-dn, ssl-client-issuer-dn\nclient_cert_headers = true\n"
        });
    }
    match redirect {
        Some(true) if !s.edge.preserve_trailing_slash => out.push_str(
            "# ingress-nginx's redirect drops a trailing / (no preserve-trailing-slash).\n\
             https_redirect = true\nhttps_redirect_drop_slash = true\n",
        ),
        Some(true) => out.push_str("https_redirect = true\n"),
        Some(false) => out.push_str(
            "# ingress-nginx never redirects ACME HTTP-01 challenges (no-tls-redirect-locations).\n\
             https_redirect = false\n",
        ),
        None => {}
    }
    if !s.limits.is_empty() || !s.attached.is_empty() {
        let mut names: Vec<String> = s.limits.iter().map(|l| l.name.clone()).collect();
        names.extend(s.attached.iter().cloned());
        let _ = writeln!(out, "limits = [{}]", list(&names));
    }
    let mut parts = Vec::new();
    for (key, v) in [
        ("only_from", &s.only_from),
        ("allow", &s.allow),
        ("deny", &s.deny),
    ] {
        if !v.is_empty() {
            parts.push(format!("{key} = [{}]", list(v)));
        }
    }
    if !parts.is_empty() {
        let _ = writeln!(out, "access = {{ {} }}", parts.join(", "));
    }
    if let (Some(a), false) = (&s.auth, denied) {
        auth_line(out, a, r.host.as_deref());
    }
}

/// The route's `auth` (`auth-url`, `auth-type: basic`).
fn auth_line(out: &mut String, a: &AuthOut, host: Option<&str>) {
    match a {
        AuthOut::Basic { htpasswd, realm } => {
            let realm = realm
                .as_ref()
                .map(|r| format!(", realm = {}", q(r)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "# auth-type basic: the Secret mounted like the TLS Secrets.\nauth = {{ basic = {{ htpasswd = {}{realm} }} }}",
                q(htpasswd)
            );
        }
        AuthOut::Forward(f) => {
            let mut parts = vec![format!("url = {}", q(&f.url_for(host)))];
            if let Some(m) = &f.method {
                parts.push(format!("method = {}", q(m)));
            }
            if !f.response_headers.is_empty() {
                parts.push(format!(
                    "response_headers = [{}]",
                    list(&f.response_headers)
                ));
            }
            if let Some(sgn) = f.signin_for(host) {
                parts.push(format!("signin = {}", q(&sgn)));
            }
            if let Some(r) = &f.redirect {
                parts.push(format!("redirect = {}", q(r)));
            }
            if let Some(c) = f.cache {
                parts.push(format!("cache = \"{c}s\""));
                parts.push(format!("cache_key = [{}]", list(&f.cache_key)));
            }
            let _ = writeln!(
                out,
                "# auth-url\nauth = {{ forward = {{ {} }} }}",
                parts.join(", ")
            );
        }
    }
}

/// The comment over a route an annotation without an exact translation covers: DENIED, or
/// INSECURE when served anyway (`--allow-insecure`).
fn refusal_comment(out: &mut String, covering: &[Refusal], denied: bool) {
    if covering.is_empty() {
        return;
    }
    {
        let whys = unique(covering.iter().map(|c| c.why.as_str()));
        let _ = writeln!(
            out,
            "# {} ({}): {}",
            if denied { "DENIED" } else { "INSECURE" },
            annotations(covering).join(", "),
            comment(&whys.join("; "))
        );
        if !denied {
            out.push_str("# Served without this protection: --allow-insecure.\n");
        }
    }
}

/// A denied route: 403, with what it was written as a comment.
fn denied_action(out: &mut String, p: &Plan, action: &Action) {
    let was = match action {
        Action::Proxy { upstream, .. } => {
            format!("upstream = {}", q(&p.upstreams[upstream]))
        }
        Action::Redirect { status, location } => {
            format!(
                "respond = {{ status = {status}, location = {} }}",
                q(location)
            )
        }
    };
    let _ = writeln!(
        out,
        "# Once the protection is in place (or decided against), replace respond with:\n\
         # {was}\n\
         respond = {{ status = 403, body = \"forbidden\\n\" }}"
    );
}

/// The production route's `canary`.
fn canary_line(out: &mut String, p: &Plan, c: &super::routes::Canary) {
    let k = &c.choice;
    let mut parts = vec![
        format!("upstream = {}", q(&p.upstreams[&c.upstream])),
        format!("weight = {}", k.weight),
    ];
    if k.weight_total != 100 {
        parts.push(format!("weight_total = {}", k.weight_total));
    }
    for (key, v) in [
        ("header", &k.header),
        ("header_value", &k.header_value),
        ("header_pattern", &k.header_pattern),
        ("cookie", &k.cookie),
    ] {
        if let Some(v) = v {
            parts.push(format!("{key} = {}", q(v)));
        }
    }
    let _ = writeln!(
        out,
        "# canary: {}\ncanary = {{ {} }}",
        comment(&c.ctx),
        parts.join(", ")
    );
}
