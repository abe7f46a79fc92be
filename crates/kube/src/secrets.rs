//! The Secrets a translation names, held in memory ([`tollgate_config::mounted`]) at the
//! paths the importer gives them (`TLS_MOUNT/NAMESPACE/SECRET/KEY`): TLS certificates
//! (`spec.tls`), htpasswd files (`auth-secret`) and CA bundles (`auth-tls-secret`). Only the
//! Secrets a served Ingress names are held; nothing is written to disk.
//!
//! A `spec.tls` Secret that is missing (cert-manager has not issued it yet) or holds no
//! `tls.crt` and `tls.key` leaves its hosts on the default certificate, their routes served,
//! as ingress-nginx does; a missing auth Secret makes its Ingress's translation fail, so that
//! Ingress is not served (fail closed).

use k8s_openapi::api::core::v1::Secret;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use tollgate_config::mounted::{Files, Held};
use tollgate_config::TLS_MOUNT;
use toml::{Table, Value};

/// The folder (under [`TLS_MOUNT`]) the default certificate is held at: `_` is in no
/// namespace's name, so no Secret's folder can be it.
pub const DEFAULT_DIR: &str = "_default";

/// The default certificate's files, `tls.crt` and `tls.key` under [`DEFAULT_DIR`].
pub fn default_paths() -> (PathBuf, PathBuf) {
    let dir = Path::new(TLS_MOUNT).join(DEFAULT_DIR);
    (dir.join("tls.crt"), dir.join("tls.key"))
}

/// The Secret `(namespace, name)` a path under [`TLS_MOUNT`] is in.
fn secret_of(path: &str) -> Option<(String, String)> {
    let rest = Path::new(path).strip_prefix(TLS_MOUNT).ok()?;
    let mut parts = rest.components().filter_map(|c| match c {
        std::path::Component::Normal(s) => s.to_str(),
        _ => None,
    });
    let (ns, name) = (parts.next()?, parts.next()?);
    (ns != DEFAULT_DIR).then(|| (ns.to_string(), name.to_string()))
}

/// The keys whose values name a file a Secret holds: a certificate and its key, a client
/// CA, an htpasswd file or folder, an upstream's CA. No other value (a route's path, say)
/// makes a Secret held.
const FILE_KEYS: [&str; 5] = ["cert", "key", "client_ca", "htpasswd", "ca"];

fn files<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Array(a) => a.iter().for_each(|v| files(v, out)),
        Value::Table(t) => {
            for (k, v) in t {
                match v {
                    Value::String(s) if FILE_KEYS.contains(&k.as_str()) => out.push(s),
                    _ => files(v, out),
                }
            }
        }
        _ => {}
    }
}

/// The Secrets a translation names (as a certificate, client CA or htpasswd file).
pub fn named(table: &Table) -> BTreeSet<(String, String)> {
    let mut all = Vec::new();
    table.values().for_each(|v| files(v, &mut all));
    all.into_iter().filter_map(secret_of).collect()
}

fn find<'a>(secrets: &[&'a Secret], ns: &str, name: &str) -> Option<&'a Secret> {
    secrets.iter().copied().find(|s| {
        s.metadata.namespace.as_deref() == Some(ns) && s.metadata.name.as_deref() == Some(name)
    })
}

/// The files of `secret` under `dir`, each versioned by the Secret's uid, resourceVersion and
/// key (so a look twice a second hashes a few bytes, not every certificate).
fn files_of(secret: &Secret, dir: &Path, out: &mut Files) {
    use std::hash::{Hash, Hasher};
    for (key, value) in secret.data.iter().flatten() {
        let path = dir.join(key);
        // The API server allows neither a `/` nor a leading dot-dot in a key; not counted on
        // (an absolute key would replace `dir` in the join).
        if key.starts_with('.') || key.contains('/') || !tollgate_config::mounted::may_hold(&path) {
            continue;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            &secret.metadata.uid,
            &secret.metadata.resource_version,
            key,
            value.0.len(),
        )
            .hash(&mut h);
        out.insert(
            path,
            Held {
                bytes: Arc::from(value.0.as_slice()),
                version: h.finish(),
            },
        );
    }
}

/// The files of every Secret `table` names, and the default certificate: the Secret
/// `default` (`--default-ssl-certificate NS/NAME`) when it holds `tls.crt` and `tls.key`,
/// else a self-signed one made once per process.
pub fn volume(table: &Table, secrets: &[&Secret], default: Option<&str>) -> Files {
    let mut out = Files::new();
    for (ns, name) in named(table) {
        if let Some(s) = find(secrets, &ns, &name) {
            files_of(s, &Path::new(TLS_MOUNT).join(&ns).join(&name), &mut out);
        }
    }
    let (crt, key) = default_paths();
    if let Some((ns, name)) = default.and_then(|d| d.split_once('/')) {
        if let Some(s) = find(secrets, ns, name) {
            let mut own = Files::new();
            files_of(s, &Path::new(TLS_MOUNT).join(DEFAULT_DIR), &mut own);
            if own.contains_key(&crt) && own.contains_key(&key) {
                out.insert(crt.clone(), own[&crt].clone());
                out.insert(key.clone(), own[&key].clone());
            }
        }
    }
    if !out.contains_key(&crt) {
        let (c, k) = fake();
        out.insert(crt, c.clone());
        out.insert(key, k.clone());
    }
    out
}

/// The `[tls] certificates` whose files `volume` does not hold left out (their hosts get the
/// default certificate, which [`crate::merge`] adds), one problem each. The rest of `[tls]`
/// (a client CA above all) stays.
pub fn unheld_certificates(table: &mut Table, volume: &Files) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(Value::Table(tls)) = table.get_mut("tls") else {
        return problems;
    };
    if let Some(Value::Array(certs)) = tls.get_mut("certificates") {
        certs.retain(|c| {
            let file = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
            let held = [file("cert"), file("key")]
                .iter()
                .all(|f| !f.starts_with(TLS_MOUNT) || volume.contains_key(Path::new(f)));
            if !held {
                let (ns, name) = secret_of(file("cert")).unwrap_or_default();
                problems.push(format!(
                    "Secret {ns}/{name} (spec.tls): missing, or without tls.crt and tls.key: its hosts are served with the default certificate until it is there"
                ));
            }
            held
        });
        if certs.is_empty() {
            tls.remove("certificates");
        }
    }
    problems
}

/// Each upstream's `tls` from a `proxy-ssl-secret` with the keys its Secret lacks left out, as
/// ingress-nginx does: no `ca.crt`, not verified; no `tls.crt` and `tls.key`, no client
/// certificate. A Secret holding neither (or missing) is left named: its Ingress's check
/// fails, and that Ingress is not served (ingress-nginx denies its locations).
pub fn unheld_upstream_tls(table: &mut Table, volume: &Files) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(Value::Table(ups)) = table.get_mut("upstreams") else {
        return problems;
    };
    let held = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_some_and(|f| volume.contains_key(Path::new(f)))
    };
    for (name, up) in ups.iter_mut() {
        let Some(Value::Table(tls)) = up.get_mut("tls") else {
            continue;
        };
        let Some((ns, secret)) = tls.get("ca").and_then(Value::as_str).and_then(secret_of) else {
            continue;
        };
        let ca = held(tls.get("ca"));
        let client = tls
            .get("client_cert")
            .is_some_and(|c| held(c.get("cert")) && held(c.get("key")));
        if !ca && !client {
            continue;
        }
        if !ca {
            tls.remove("ca");
            // proxy-ssl-verify "on" without a CA: verified against the system's roots (an
            // in-cluster certificate then fails, 502), never quietly unverified as
            // ingress-nginx leaves it.
            if tls.get("verify").and_then(Value::as_bool) == Some(true) {
                problems.push(format!(
                    "Secret {ns}/{secret} (proxy-ssl-secret of upstream {name}) holds no ca.crt but proxy-ssl-verify is on: verified against the system's roots (ingress-nginx would not verify at all)"
                ));
            }
        }
        if !client {
            tls.remove("client_cert");
        }
    }
    problems
}

/// What a Secret reflector keeps: the data of Secrets no Ingress can name as Tollgate reads
/// them (Helm releases, service account tokens) is dropped, so a cluster's release history
/// does not sit in the controller's memory.
pub fn trim(s: &mut Secret) {
    if matches!(
        s.type_.as_deref(),
        Some("helm.sh/release.v1" | "kubernetes.io/service-account-token")
    ) {
        s.data = None;
        s.string_data = None;
    }
    s.metadata.managed_fields = None;
    if let Some(a) = s.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// ingress-nginx's "Kubernetes Ingress Controller Fake Certificate", Tollgate's: self-signed,
/// for `ingress.local`, made once per process.
fn fake() -> &'static (Held, Held) {
    static FAKE: OnceLock<(Held, Held)> = OnceLock::new();
    FAKE.get_or_init(|| {
        let made = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).and_then(|key| {
            let mut params = rcgen::CertificateParams::new(vec!["ingress.local".to_string()])?;
            params.distinguished_name.push(
                rcgen::DnType::CommonName,
                "Tollgate Ingress Controller Fake Certificate",
            );
            let cert = params.self_signed(&key)?;
            Ok((cert.pem(), key.serialize_pem()))
        });
        match made {
            Ok((c, k)) => (Held::new(c.into_bytes()), Held::new(k.into_bytes())),
            // Not expected (ring's P-256); an empty pair makes the TLS check say so.
            Err(e) => {
                tracing::error!(event = "kube_default_certificate", error = %e, "the default certificate could not be made");
                (Held::new(Vec::new()), Held::new(Vec::new()))
            }
        }
    })
}

#[cfg(test)]
mod tests;
