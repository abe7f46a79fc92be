//! Stage 3: each production Ingress's annotations, translated by family (one module each);
//! whatever no translator read is named by the catalogue: a warning with why it is harmless,
//! once for all the Ingresses that carry it.

use super::anns::{Anns, Limit, Redirect, Refusal, Rewrite};
use super::catalogue::{self, Treatment};
use super::objects::Ingress;
use super::text::{comment, Warnings};
use super::upstreams::{Proto, Timeouts};
use super::{
    access, auth, balancing, custom_headers, edge, limits, protect, proxyssl, rewrite, timeouts,
    tls,
};

/// What one production Ingress asks for.
pub(super) struct Settings {
    pub limits: Vec<Limit>,
    /// `tollgate.io/limits`: BASE.toml limits each route also takes.
    pub attached: Vec<String>,
    /// `limit-whitelist`: exempt from the Ingress's limits.
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// `whitelist-source-range`: nobody else may connect.
    pub only_from: Vec<String>,
    pub timeouts: Timeouts,
    pub proto: Proto,
    /// `proxy-ssl-*`: how the upstreams speak TLS (with an HTTPS / GRPCS `proto`).
    pub upstream_ssl: proxyssl::UpstreamSsl,
    pub ssl_redirect: bool,
    pub force_redirect: bool,
    /// `auth-tls-*`: None when absent or off; `Err(why)` when it cannot be translated.
    pub client_auth: Option<Result<tls::ClientCa, String>>,
    /// `auth-tls-pass-certificate-to-upstream`: the upstream gets `ssl-client-cert` too.
    pub pass_certificate: bool,
    /// The hsts* keys when any is set: the header value, or None for off.
    pub hsts: Option<Option<String>>,
    pub use_regex: bool,
    pub rewrite: Option<Rewrite>,
    pub app_root: Option<String>,
    pub redirect: Option<Redirect>,
    /// `auth-url` or `auth-type: basic`, translated.
    pub auth: Option<super::auth::AuthOut>,
    /// Protections of the Ingress's own routes that cannot be kept.
    pub refusals: Vec<Refusal>,
    /// Protections of every route of its hosts (`server-snippet`: nginx's server block).
    pub host_refusals: Vec<Refusal>,
    /// Body cap, CORS, aliases, www redirect, upstream Host, X-Forwarded-Prefix, bandwidth.
    pub edge: edge::EdgeOut,
    /// The upstream's balancing, affinity and retries.
    pub balancing: balancing::Balancing,
    /// `default-backend`, `custom-http-errors`.
    pub fallback: super::fallback::FallbackOut,
    /// `ssl-passthrough`: the Ingress's hosts' TLS is relayed unread ([`super::passthrough`]).
    pub passthrough: bool,
}

/// Every annotation of a production Ingress.
pub(super) fn read(
    ing: &Ingress,
    lookup: &custom_headers::Lookup,
    ports: &super::objects::Ports,
    w: &mut Warnings,
) -> Settings {
    let mut a = Anns::new(ing);
    let limits = limits::read(&mut a, w);
    let access = access::read(&mut a, &limits.allow, w);
    let timeouts = timeouts::read(&mut a, w);
    let rewrite = rewrite::read(&mut a, w);
    let tls = tls::read(&mut a, w);
    let (upstream_ssl, ssl_refusal) = proxyssl::read(&mut a, tls.proto.tls(), w);
    let auth = auth::read(&mut a, w);
    let protect = protect::read(&mut a, w);
    let mut edge = edge::read(&mut a, w);
    let custom = custom_headers::read(&mut a, lookup);
    let balancing = balancing::read(&mut a, w);
    let fallback = super::fallback::read(&mut a, &ing.ns, &ing.name, ports, w);
    let passthrough = super::text::flag(
        a.get("ssl-passthrough"),
        false,
        &format!("{}: ssl-passthrough", a.ctx()),
        w,
    );
    for key in catalogue::CANARY_KEYS {
        if key != "canary" && a.get(key).is_some() {
            w.push(format!(
                "{}: {key} without canary: \"true\": ignored (as by ingress-nginx)",
                a.ctx()
            ));
        }
    }
    a.get("canary");
    unread(&a, w);
    let mut refusals = limits.refusals;
    refusals.extend(access.refusals);
    refusals.extend(rewrite.refusals);
    refusals.extend(auth.refusals);
    refusals.extend(protect.refusals);
    refusals.extend(ssl_refusal);
    match custom {
        Some(Ok(line)) => edge.response_headers = Some(line),
        Some(Err(r)) => refusals.push(r),
        None => {}
    }
    Settings {
        limits: limits.limits,
        attached: limits.attached,
        allow: limits.allow,
        deny: access.deny,
        only_from: access.only_from,
        timeouts,
        proto: tls.proto,
        upstream_ssl,
        ssl_redirect: tls.ssl_redirect,
        force_redirect: tls.force_redirect,
        client_auth: tls.client_auth,
        pass_certificate: tls.pass_certificate,
        hsts: tls.hsts,
        use_regex: rewrite.use_regex,
        rewrite: rewrite.rewrite,
        app_root: rewrite.app_root,
        redirect: rewrite.redirect,
        auth: auth.auth,
        refusals,
        host_refusals: protect.host_refusals,
        edge,
        balancing,
        fallback,
        passthrough,
    }
}

/// Names what no translator read: the catalogue's reason, or an unknown annotation.
pub(super) fn unread(a: &Anns, w: &mut Warnings) {
    for key in a.own_unknown() {
        w.gather(
            &comment(&format!("tollgate.io/{key}")),
            "not a Tollgate annotation (limit-scope, limits)",
            a.ctx(),
        );
    }
    for key in a.unread() {
        match catalogue::find(key) {
            Some(c) if c.treatment == Treatment::Ignored => w.gather(key, c.why, a.ctx()),
            // Known, translated elsewhere (a canary's own keys on a canary, say).
            Some(_) => {}
            None => w.gather(
                &comment(key),
                "not an ingress-nginx annotation the import knows",
                a.ctx(),
            ),
        }
    }
}
