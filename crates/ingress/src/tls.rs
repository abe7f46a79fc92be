//! TLS as ingress-nginx serves it (docs/ingress-nginx.md, "Ingress TLS, redirects and client certificates"):
//! `spec.tls` Secrets as certificates mounted at `TLS_MOUNT/NAMESPACE/SECRET/`, a TLS listener,
//! the HTTP-to-HTTPS redirect per route, `backend-protocol` as the upstream's TLS and h2,
//! client certificates (`auth-tls-*`) as the server-wide `[tls] client_ca` when every Ingress
//! served over TLS agrees (else those Ingresses are refused), `hsts*` when they agree.

use super::hosts::tls_covers;
use super::objects::Ingress;
use super::settings::{Anns, Refusal, Settings};
use super::text::{comment, flag, k8s_name, Warnings};
use super::upstreams::Proto;
use std::collections::{BTreeMap, BTreeSet};
use tollgate_config::TLS_MOUNT;

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

/// The folder a Secret is mounted at.
pub(super) fn secret_dir(ns: &str, secret: &str) -> String {
    format!("{TLS_MOUNT}/{ns}/{secret}")
}

const HSTS_KEYS: [&str; 4] = [
    "hsts",
    "hsts-max-age",
    "hsts-include-subdomains",
    "hsts-preload",
];

/// The TLS annotations of one Ingress.
pub(super) fn read(a: &mut Anns, s: &mut Settings, w: &mut Warnings) {
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
    if s.proto.tls() {
        w.push(format!("{ctx}: backend-protocol {}: Tollgate verifies the upstream's certificate (against the system's roots, for the Service's DNS name), ingress-nginx does not by default (proxy-ssl-verify \"off\"): set the upstream's tls = {{ ca = \"FILE\" }} for a private CA, or tls = {{ verify = false }} to do as ingress-nginx did", if s.proto == Proto::Https { "HTTPS" } else { "GRPCS" }));
    }
    s.client_auth = client_auth(a, w);
    if let Some(d) = a.get("auth-tls-verify-depth") {
        if s.client_auth.is_some() {
            w.push(comment(&format!("{ctx}: auth-tls-verify-depth \"{d}\": Tollgate does not bound the chain: a certificate the CA signed through intermediates the client sends is accepted")));
        }
    }
    s.hsts = hsts(a, w);
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

/// Server-wide TLS, decided once every Ingress is read.
pub(super) struct Tls {
    /// (namespace, Secret) -> (hosts, the Ingresses that name it): sorted, so the order (and
    /// the default certificate, the first) does not depend on the input's.
    pub certs: BTreeMap<(String, String), (BTreeSet<String>, Vec<String>)>,
    /// Every host of a spec.tls, with or without secretName: ingress-nginx redirects these.
    pub hosts: BTreeSet<String>,
    /// There is a certificate to serve.
    pub serve: bool,
    pub client: Option<ClientCa>,
    pub hsts: Option<String>,
    /// No Ingress said anything about HSTS: ingress-nginx's default is left as a comment.
    pub hsts_note: bool,
}

/// Certificates, client certificates and HSTS for all the Ingresses; a client certificate
/// requirement that cannot be kept becomes a refusal of its Ingress.
pub(super) fn decide(ings: &[Ingress], settings: &mut [Settings], w: &mut Warnings) -> Tls {
    let mut certs: BTreeMap<(String, String), (BTreeSet<String>, Vec<String>)> = BTreeMap::new();
    let mut hosts = BTreeSet::new();
    for ing in ings {
        for (ti, t) in ing.tls.iter().enumerate() {
            hosts.extend(t.hosts.iter().cloned());
            match t.secret.as_deref() {
                None => w.push(format!(
                    "{}: tls[{ti}] has no secretName: ingress-nginx serves its default certificate (--default-ssl-certificate) for {}; add that certificate to [tls] certificates (first, to be the default) or these hosts get another's",
                    ing.ctx,
                    if t.hosts.is_empty() { "every host".to_string() } else { t.hosts.join(", ") }
                )),
                Some(secret) if k8s_name(&ing.ns) && k8s_name(secret) => {
                    let entry = certs
                        .entry((ing.ns.clone(), secret.to_string()))
                        .or_default();
                    entry.0.extend(t.hosts.iter().cloned());
                    if !entry.1.contains(&ing.ctx) {
                        entry.1.push(ing.ctx.clone());
                    }
                }
                Some(secret) => w.push(comment(&format!(
                    "{}: tls[{ti}]: Secret \"{secret}\" in namespace \"{}\" is not a Kubernetes name: no certificate made",
                    ing.ctx, ing.ns
                ))),
            }
        }
    }
    let serve = !certs.is_empty();
    if !serve && ings.iter().any(|i| !i.tls.is_empty()) {
        w.push("spec.tls without any usable secretName: no TLS listener made (Tollgate needs a certificate file); hosts listed there are not redirected to HTTPS");
    }
    for ing in ings.iter().filter(|i| !i.tls.is_empty()) {
        for h in ing.rules.iter().filter_map(|r| r.host.as_deref()) {
            if !hosts.iter().any(|t| tls_covers(t, h)) {
                w.push(format!("{}: host {h} is in no spec.tls hosts: ingress-nginx serves it over TLS (and redirects it) if a certificate of this Ingress names it; Tollgate serves any certificate by the names it holds, but redirects only the hosts listed", ing.ctx));
            }
        }
    }
    let client = client_ca(ings, settings, serve, w);
    let (hsts, hsts_note) = hsts_value(ings, settings, serve, w);
    Tls {
        certs,
        hosts,
        serve,
        client,
        hsts,
        hsts_note,
    }
}

/// Tollgate's client_ca is server-wide: translated only when every Ingress served over TLS (or
/// asking for client certificates) asks the same; any other requirement is refused.
fn client_ca(
    ings: &[Ingress],
    settings: &mut [Settings],
    serve: bool,
    w: &mut Warnings,
) -> Option<ClientCa> {
    let concerned: Vec<usize> = (0..ings.len())
        .filter(|&i| !ings[i].tls.is_empty() || settings[i].client_auth.is_some())
        .collect();
    let asked: Vec<&ClientCa> = concerned
        .iter()
        .filter_map(|&i| {
            settings[i]
                .client_auth
                .as_ref()
                .and_then(|a| a.as_ref().ok())
        })
        .collect();
    let all_same = asked.windows(2).all(|p| p[0] == p[1]);
    let exact = !asked.is_empty() && asked.len() == concerned.len() && all_same;
    // Optional everywhere: those without it are only asked, never refused.
    let optional = !asked.is_empty()
        && all_same
        && asked[0].mode == ClientAuth::Optional
        && concerned
            .iter()
            .all(|&i| !matches!(settings[i].client_auth, Some(Err(_))));
    let mut client = None;
    if exact || optional {
        client = asked.first().map(|a| (*a).clone());
        if optional && !exact {
            w.push("auth-tls-verify-client optional: Tollgate's client_ca is server-wide: clients of every host are asked for a certificate (none is required)");
        }
    }
    if !serve {
        client = None;
    }
    for (ing, s) in ings.iter().zip(settings.iter_mut()) {
        let why = match &s.client_auth {
            None => continue,
            Some(Err(why)) => why.clone(),
            Some(Ok(_)) if !serve => {
                "a client certificate without a TLS listener (no spec.tls certificate)".into()
            }
            Some(Ok(_)) if client.is_none() => "Tollgate's client_ca and client_auth are server-wide, and the Ingresses served over TLS do not all ask the same".into(),
            Some(Ok(_)) => continue,
        };
        let annotation = if ing.ann("auth-tls-match-cn").is_some() {
            "auth-tls-match-cn"
        } else {
            "auth-tls-secret"
        };
        s.refusals.push(Refusal {
            annotation: annotation.into(),
            why,
        });
    }
    client
}

/// ingress-nginx's HSTS is controller-wide: translated when the Ingresses agree.
fn hsts_value(
    ings: &[Ingress],
    settings: &[Settings],
    serve: bool,
    w: &mut Warnings,
) -> (Option<String>, bool) {
    let said: Vec<(&str, &Option<String>)> = ings
        .iter()
        .zip(settings)
        .filter_map(|(i, s)| s.hsts.as_ref().map(|v| (i.ctx.as_str(), v)))
        .collect();
    let Some((_, first)) = said.first() else {
        if serve {
            w.push("ingress-nginx sends Strict-Transport-Security over HTTPS by default (ConfigMap hsts: \"true\", max-age=31536000; includeSubDomains); the import cannot see the ConfigMap: [tls] hsts is left as a comment");
        }
        return (None, serve);
    };
    if !said.iter().all(|(_, v)| v == first) {
        let seen: Vec<String> = said
            .iter()
            .map(|(c, v)| format!("{c}: {}", v.as_deref().unwrap_or("off")))
            .collect();
        w.push(format!(
            "hsts annotations disagree ({}): Tollgate's [tls] hsts is server-wide: not translated",
            seen.join("; ")
        ));
        return (None, false);
    }
    w.push("hsts annotations are ingress-nginx ConfigMap keys (ingress-nginx ignores them on an Ingress): translated as the server-wide [tls] hsts");
    if !serve && first.is_some() {
        w.push("hsts: no TLS listener made: not translated");
        return (None, false);
    }
    ((*first).clone(), false)
}

impl Tls {
    /// Whether a route is redirected to HTTPS, as ingress-nginx decides it per location:
    /// force-ssl-redirect, or ssl-redirect where the host has a certificate; never an ACME
    /// challenge. A route that requires a client certificate is never served in plain text.
    pub fn redirect(&self, s: &Settings, host: Option<&str>, acme: bool) -> Option<bool> {
        if self.requires_certificate(s) {
            return Some(true);
        }
        if acme {
            return Some(false);
        }
        let host_tls =
            self.serve && host.is_some_and(|h| self.hosts.iter().any(|t| tls_covers(t, h)));
        (s.force_redirect || (s.ssl_redirect && host_tls)).then_some(true)
    }

    /// The Ingress's routes need a client certificate (server-wide `require`).
    pub fn requires_certificate(&self, s: &Settings) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.mode == ClientAuth::Require && s.client_auth.is_some())
    }
}
