//! `proxy-ssl-*`: TLS toward an HTTPS / GRPCS upstream from a Secret, as ingress-nginx's
//! `proxy_ssl_*` directives, as the upstream's `tls = { ca, verify, sni, client_cert }`.
//!
//! ingress-nginx reads the other keys only with `proxy-ssl-secret` (`NAMESPACE/SECRET`, the
//! Ingress's own namespace): the Secret's `ca.crt` verifies the upstream when
//! `proxy-ssl-verify: "on"` (default off), its `tls.crt` / `tls.key` are the client
//! certificate, `proxy-ssl-name` the name verified and sent. The files are mounted like the
//! certificates (`TLS_MOUNT/NAMESPACE/SECRET/`); under `run --kubernetes` the controller holds
//! them in memory and leaves out a key the Secret lacks (a missing `ca.crt`: not verified, as
//! ingress-nginx).
//!
//! Without a Secret, Tollgate verifies an HTTPS upstream against the system's roots
//! (stricter than ingress-nginx, which does not verify): `proxy-ssl-verify: "off"` alone,
//! which ingress-nginx ignores, is the switch to its way.

use super::anns::{Anns, Refusal};
use super::text::secret_dir;
use super::text::{comment, k8s_name, Warnings};

/// How one Ingress's upstreams speak TLS (with `backend-protocol` HTTPS or GRPCS).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct UpstreamSsl {
    /// `proxy-ssl-secret`'s folder: its `ca.crt`, `tls.crt` and `tls.key`.
    pub secret: Option<String>,
    /// With a Secret: `proxy-ssl-verify` (default off). Without: `Some(false)` for an explicit
    /// `"off"`, `None` for Tollgate's default (the system's roots).
    pub verify: Option<bool>,
    /// `proxy-ssl-name`: the name sent (SNI) and verified.
    pub name: Option<String>,
}

impl UpstreamSsl {
    /// The upstream's `tls` line.
    pub fn line(&self) -> String {
        let Some(dir) = &self.secret else {
            return match self.verify {
                Some(false) => "# proxy-ssl-verify \"off\": not verified, as ingress-nginx.\ntls = { verify = false }\n".into(),
                _ => "# backend-protocol HTTPS/GRPCS. Tollgate verifies the certificate against the system's\n\
                      # roots and the target's name; ingress-nginx did not verify it (proxy-ssl-verify \"off\").\n\
                      # A private CA: tls = { ca = \"FILE\", sni = \"NAME\" }; no verification, as before:\n\
                      # tls = { verify = false }.\n\
                      tls = true\n"
                    .into(),
            };
        };
        let q = super::text::q;
        let sni = self
            .name
            .as_deref()
            .map(|n| format!("sni = {}, ", q(n)))
            .unwrap_or_default();
        format!(
            "# proxy-ssl-secret: its ca.crt verifies the upstream (proxy-ssl-verify), its tls.crt and\n\
             # tls.key are the client certificate; mounted like the certificates. Without\n\
             # run --kubernetes, leave out ca or client_cert for a key the Secret lacks.\n\
             tls = {{ ca = {}, verify = {}, {sni}client_cert = {{ cert = {}, key = {} }} }}\n",
            q(&format!("{dir}/ca.crt")),
            self.verify.unwrap_or(false),
            q(&format!("{dir}/tls.crt")),
            q(&format!("{dir}/tls.key")),
        )
    }
}

const KEYS: [&str; 6] = [
    "proxy-ssl-verify",
    "proxy-ssl-verify-depth",
    "proxy-ssl-name",
    "proxy-ssl-server-name",
    "proxy-ssl-ciphers",
    "proxy-ssl-protocols",
];

/// Without `proxy-ssl-secret`: ingress-nginx reads none of the others; `proxy-ssl-verify:
/// "off"` is Tollgate's switch to its unverified TLS. `others`: the keys after the first.
fn without_secret(
    ctx: &str,
    tls: bool,
    verify: Option<&str>,
    others: [&Option<String>; 5],
    w: &mut Warnings,
) -> UpstreamSsl {
    let mut out = UpstreamSsl::default();
    match verify {
        Some("off") if tls => out.verify = Some(false),
        Some("off" | "on") | None => {}
        Some(v) => w.push(comment(&format!(
            "{ctx}: proxy-ssl-verify \"{v}\" is not on or off: ignored"
        ))),
    }
    if tls && out.verify.is_none() {
        w.push(format!("{ctx}: backend-protocol HTTPS/GRPCS: Tollgate verifies the upstream's certificate (against the system's roots, for the Service's DNS name), ingress-nginx does not by default: proxy-ssl-verify: \"off\" (which ingress-nginx ignores without proxy-ssl-secret) does as ingress-nginx did, proxy-ssl-secret names a Secret whose ca.crt verifies it"));
    }
    let set: Vec<&str> = KEYS[1..]
        .iter()
        .zip(others)
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| *k)
        .collect();
    if !set.is_empty() {
        w.push(comment(&format!(
            "{ctx}: {} without proxy-ssl-secret: ignored (as by ingress-nginx)",
            set.join(", ")
        )));
    }
    out
}

/// The `proxy-ssl-*` annotations of one Ingress; `tls`: whether its backend-protocol speaks
/// TLS. A Secret that cannot be named is a refusal (ingress-nginx denies the location).
pub(super) fn read(a: &mut Anns, tls: bool, w: &mut Warnings) -> (UpstreamSsl, Option<Refusal>) {
    let ctx = a.ctx();
    let mut out = UpstreamSsl::default();
    let vals: Vec<Option<String>> = KEYS
        .iter()
        .map(|k| a.get(k).map(|v| v.trim().to_string()))
        .collect();
    let [verify, depth, name, server_name, ciphers, protocols] =
        <[Option<String>; 6]>::try_from(vals).unwrap_or_default();
    let Some(secret) = a.get("proxy-ssl-secret").map(|s| s.trim().to_string()) else {
        let others = [&depth, &name, &server_name, &ciphers, &protocols];
        return (without_secret(ctx, tls, verify.as_deref(), others, w), None);
    };
    if !tls {
        w.push(comment(&format!(
            "{ctx}: proxy-ssl-secret without backend-protocol HTTPS or GRPCS: nothing speaks TLS to the upstream (as in ingress-nginx)"
        )));
        return (out, None);
    }
    let refuse = |why: String| Refusal {
        annotation: "proxy-ssl-secret".into(),
        why,
    };
    match secret.split_once('/') {
        // ingress-nginx: "cross namespace secrets are not supported" (the location denied).
        Some((sns, _)) if sns != a.ns() => {
            return (
                out,
                Some(refuse(format!(
                    "proxy-ssl-secret \"{secret}\" is in another namespace (ingress-nginx denies the location)"
                ))),
            )
        }
        Some((sns, sname)) if k8s_name(sns) && k8s_name(sname) => {
            out.secret = Some(secret_dir(sns, sname));
        }
        _ => {
            return (
                out,
                Some(refuse(format!(
                    "proxy-ssl-secret \"{secret}\" is not NAMESPACE/SECRET (ingress-nginx denies the location)"
                ))),
            )
        }
    }
    out.verify = Some(match verify.as_deref() {
        None | Some("off") => false,
        Some("on") => true,
        Some(v) => {
            w.push(comment(&format!(
                "{ctx}: proxy-ssl-verify \"{v}\" is not on or off: off (as by ingress-nginx)"
            )));
            false
        }
    });
    if let Some(n) = name {
        if tollgate_config::dns_name(&n) {
            out.name = Some(n.to_ascii_lowercase());
        } else {
            w.push(comment(&format!(
                "{ctx}: proxy-ssl-name \"{n}\" is not a server name: the target's name is sent and verified"
            )));
        }
    }
    if let Some(d) = depth.filter(|_| out.verify == Some(true)) {
        w.push(comment(&format!(
            "{ctx}: proxy-ssl-verify-depth \"{d}\": Tollgate does not bound the chain: a certificate the CA signed through intermediates the upstream sends is accepted"
        )));
    }
    if server_name.as_deref() == Some("off") && out.name.is_some() {
        w.push(comment(&format!(
            "{ctx}: proxy-ssl-server-name \"off\": Tollgate sends proxy-ssl-name as SNI all the same"
        )));
    }
    for (k, v) in [
        ("proxy-ssl-ciphers", &ciphers),
        ("proxy-ssl-protocols", &protocols),
    ] {
        if let Some(v) = v {
            w.push(comment(&format!(
                "{ctx}: {k} \"{v}\": Tollgate offers TLS 1.2 and 1.3 with modern suites only"
            )));
        }
    }
    (out, None)
}
