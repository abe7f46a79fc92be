//! The TLS listener across all Ingresses (docs/ingress-nginx.md, "Ingress TLS, redirects and
//! client certificates"): the certificates by host, the server-wide `[tls] client_ca` when
//! every Ingress served over TLS agrees (else those Ingresses are refused), `hsts*` when they
//! agree, and each route's HTTP-to-HTTPS redirect. Each Ingress's own TLS annotations are the
//! `tls` family's.

use super::anns::Refusal;
use super::host_name::tls_covers;
use super::objects::Ingress;
use super::settings::Settings;
use super::text::{comment, k8s_name, Warnings};
use super::tls::{ClientAuth, ClientCa};
use std::collections::{BTreeMap, BTreeSet};

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
