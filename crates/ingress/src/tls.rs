//! TLS as ingress-nginx serves it (docs/ingress-nginx.md, "Ingress TLS, redirects and client certificates"):
//! `spec.tls` Secrets as certificates mounted at `TLS_MOUNT/NAMESPACE/SECRET/`, a TLS listener,
//! the HTTP-to-HTTPS redirect per route, `backend-protocol` as the upstream's TLS and h2,
//! client certificates (`auth-tls-*`) as the server-wide `[tls] client_ca` when every Ingress
//! served over TLS agrees (else those Ingresses are refused), `hsts*` when they agree.

use super::anns::Anns;
use super::text::{comment, flag, k8s_name, secret_dir, Warnings};
use super::upstreams::Proto;

/// ingress-nginx's `no-tls-redirect-locations` default: locations whose path starts with it
/// are never redirected to HTTPS (cert-manager's HTTP-01 challenges).
pub(super) const ACME: &str = "/.well-known/acme-challenge";

/// `ssl_verify_client` of ingress-nginx, as Tollgate's `client_auth`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ClientAuth {
    Require,
    Optional,
}

impl ClientAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Require => "require",
            ClientAuth::Optional => "optional",
        }
    }
}

/// A client certificate requirement: the CA file and the mode.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct ClientCa {
    pub ca: String,
    pub mode: ClientAuth,
}

const HSTS_KEYS: [&str; 4] = [
    "hsts",
    "hsts-max-age",
    "hsts-include-subdomains",
    "hsts-preload",
];

/// The TLS annotations of one Ingress, as read.
pub(super) struct TlsOut {
    pub ssl_redirect: bool,
    pub force_redirect: bool,
    pub proto: Proto,
    /// `auth-tls-*`: None when absent or off; `Err(why)` when it cannot be translated.
    pub client_auth: Option<Result<ClientCa, String>>,
    /// The hsts* keys when any is set: the header value, or None for off.
    pub hsts: Option<Option<String>>,
    /// `auth-tls-pass-certificate-to-upstream: "true"`: `ssl-client-cert` too.
    pub pass_certificate: bool,
}

/// The TLS annotations of one Ingress.
pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> TlsOut {
    let mut s = TlsOut {
        ssl_redirect: true,
        force_redirect: false,
        proto: Proto::Http,
        client_auth: None,
        hsts: None,
        pass_certificate: false,
    };
    let ctx = a.ctx();
    s.ssl_redirect = flag(
        a.get("ssl-redirect"),
        true,
        &format!("{ctx}: ssl-redirect"),
        w,
    );
    s.force_redirect = flag(
        a.get("force-ssl-redirect"),
        false,
        &format!("{ctx}: force-ssl-redirect"),
        w,
    );
    s.proto = match a
        .get("backend-protocol")
        .map(|p| p.trim().to_ascii_uppercase())
    {
        None => Proto::Http,
        Some(p) => match p.as_str() {
            "HTTP" => Proto::Http,
            "HTTPS" => Proto::Https,
            "GRPC" => Proto::Grpc,
            "GRPCS" => Proto::Grpcs,
            _ => {
                w.push(comment(&format!("{ctx}: backend-protocol \"{p}\" is not translated (Tollgate speaks HTTP, HTTPS, h2c and h2 to upstreams): HTTP used")));
                Proto::Http
            }
        },
    };
    s.client_auth = client_auth(a, w);
    s.pass_certificate = flag(
        a.get("auth-tls-pass-certificate-to-upstream"),
        false,
        &format!("{ctx}: auth-tls-pass-certificate-to-upstream"),
        w,
    );
    if let Some(d) = a.get("auth-tls-verify-depth") {
        if s.client_auth.is_some() {
            w.push(comment(&format!("{ctx}: auth-tls-verify-depth \"{d}\": Tollgate does not bound the chain: a certificate the CA signed through intermediates the client sends is accepted")));
        }
    }
    s.hsts = hsts(a, w);
    s
}

fn client_auth(a: &mut Anns, w: &mut Warnings) -> Option<Result<ClientCa, String>> {
    let ctx = a.ctx();
    let verify = a.get("auth-tls-verify-client");
    let match_cn = a.get("auth-tls-match-cn");
    let Some(secret) = a.get("auth-tls-secret") else {
        if verify.is_some() {
            w.push(format!(
                "{ctx}: auth-tls-verify-client without auth-tls-secret: ignored (as by ingress-nginx)"
            ));
        }
        return None;
    };
    let mode = match verify.map(str::trim) {
        None | Some("on") => ClientAuth::Require,
        Some("optional") => ClientAuth::Optional,
        Some("optional_no_ca") => {
            w.push(format!("{ctx}: auth-tls-verify-client optional_no_ca: Tollgate's client_auth = \"optional\" verifies a certificate that is sent (ingress-nginx passed any to the upstream)"));
            ClientAuth::Optional
        }
        Some("off") => return None,
        Some(other) => {
            w.push(comment(&format!(
                "{ctx}: auth-tls-verify-client \"{other}\" is not on, off, optional or optional_no_ca: on used (as by ingress-nginx)"
            )));
            ClientAuth::Require
        }
    };
    let ca = match secret.trim().split_once('/') {
        // Another namespace's CA: ingress-nginx needs allow-cross-namespace-resources (off
        // by default) for it, and a tenant must not pin its clients to another's CA.
        Some((sns, _)) if sns != a.ns() => {
            return Some(Err(comment(&format!(
                "auth-tls-secret \"{secret}\" is in another namespace (ingress-nginx needs allow-cross-namespace-resources for it)"
            ))))
        }
        Some((sns, sname)) if k8s_name(sns) && k8s_name(sname) => {
            format!("{}/ca.crt", secret_dir(sns, sname))
        }
        _ => {
            return Some(Err(comment(&format!(
                "auth-tls-secret \"{secret}\" is not NAMESPACE/SECRET (ingress-nginx denies the location too)"
            ))))
        }
    };
    if let Some(cn) = match_cn {
        return Some(Err(comment(&format!(
            "auth-tls-match-cn \"{cn}\" (only some certificates of the CA are let in) has no Tollgate equivalent"
        ))));
    }
    Some(Ok(ClientCa { ca, mode }))
}

/// ingress-nginx reads these from its ConfigMap only (as annotations it ignores them); taken
/// here as what the controller was configured with.
fn hsts(a: &mut Anns, w: &mut Warnings) -> Option<Option<String>> {
    let ctx = a.ctx();
    let vals: Vec<Option<&str>> = HSTS_KEYS.iter().map(|k| a.get(k)).collect();
    if vals.iter().all(Option::is_none) {
        return None;
    }
    let on = flag(vals[0], true, &format!("{ctx}: hsts"), w);
    let age = vals[1].map(str::trim).unwrap_or("31536000");
    let sub = flag(vals[2], true, &format!("{ctx}: hsts-include-subdomains"), w);
    let preload = flag(vals[3], false, &format!("{ctx}: hsts-preload"), w);
    if age.is_empty() || !age.bytes().all(|b| b.is_ascii_digit()) {
        w.push(comment(&format!(
            "{ctx}: hsts-max-age \"{age}\" is not a number of seconds: hsts not translated"
        )));
        return None;
    }
    let mut v = format!("max-age={age}");
    if sub {
        v.push_str("; includeSubDomains");
    }
    if preload {
        v.push_str("; preload");
    }
    Some(on.then_some(v))
}
