//! `[tls]`: the certificates the TLS listeners serve and how clients are asked for theirs;
//! and the `tls`/`h2` keys of an upstream. Only names and forms are checked here: the
//! certificate files themselves (PEM, key matches certificate, expiry) are read by the gateway
//! (`tollgate_core::tls`), which `tollgate check` runs too.

use crate::model::{CertFiles, ClientAuth, TlsConfig, TlsVersion, UnknownSni, UpstreamTls};
use crate::reader::{as_array, as_bool, as_str, type_err, Cx, Tbl, Value};
use std::path::Path;
use toml::de::DeValue;

/// `{ cert = "FILE", key = "FILE" }`, relative to the config's folder.
fn cert_files(cx: &mut Cx, path: &str, v: &Value, base: &Path) -> Option<CertFiles> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    let file = |cx: &mut Cx, t: &mut Tbl, key: &str| match t.get(key) {
        Some(fv) => as_str(cx, &t.key_path(key), fv).map(|s| base.join(s)),
        None => {
            cx.err(path, v.span(), format!("missing key \"{key}\""));
            None
        }
    };
    let cert = file(cx, &mut t, "cert");
    let key = file(cx, &mut t, "key");
    t.finish(cx);
    Some(CertFiles {
        cert: cert?,
        key: key?,
        key_path: path.to_string(),
    })
}

/// Reads `[tls]`.
pub(crate) fn read(cx: &mut Cx, mut t: Tbl, base: &Path) -> TlsConfig {
    let mut tls = TlsConfig {
        certificates: Vec::new(),
        certificate_dirs: Vec::new(),
        min_version: TlsVersion::V12,
        unknown_sni: UnknownSni::Default,
        hsts: None,
        client_ca: None,
        client_auth: ClientAuth::Require,
    };
    certificates(cx, &mut t, base, &mut tls);
    if tls.certificates.is_empty() && tls.certificate_dirs.is_empty() {
        cx.err(
            "tls",
            t.span.clone(),
            "no certificate: set certificates = [{ cert = \"FILE\", key = \"FILE\" }] or certificate_dirs = [\"DIR\"]",
        );
    }
    versions_and_sni(cx, &mut t, &mut tls);
    if let Some(v) = t.get("hsts") {
        let p = t.key_path("hsts");
        if let Some(s) = as_str(cx, &p, v) {
            if valid_hsts(s) {
                tls.hsts = Some(s.to_string());
            } else {
                cx.err(
                    &p,
                    v.span(),
                    "a Strict-Transport-Security value: \"max-age=SECONDS\", optionally \"; includeSubDomains\" and \"; preload\"",
                );
            }
        }
    }
    client_certificates(cx, &mut t, base, &mut tls);
    t.finish(cx);
    tls
}

/// `certificates` (cert and key files) and `certificate_dirs`.
fn certificates(cx: &mut Cx, t: &mut Tbl, base: &Path, tls: &mut TlsConfig) {
    if let Some(v) = t.get("certificates") {
        let p = t.key_path("certificates");
        if let Some(items) = as_array(cx, &p, v) {
            for (i, item) in items.iter().enumerate() {
                if let Some(c) = cert_files(cx, &format!("{p}[{i}]"), item, base) {
                    tls.certificates.push(c);
                }
            }
        }
    }
    if let Some(v) = t.get("certificate_dirs") {
        let p = t.key_path("certificate_dirs");
        if let Some(items) = crate::reader::as_str_list(cx, &p, v, false) {
            tls.certificate_dirs = items
                .iter()
                .map(|(ip, d, _)| (base.join(d), ip.clone()))
                .collect();
        }
    }
}

/// `min_version` and `unknown_sni`.
fn versions_and_sni(cx: &mut Cx, t: &mut Tbl, tls: &mut TlsConfig) {
    if let Some(v) = t.get("min_version") {
        let p = t.key_path("min_version");
        match as_str(cx, &p, v) {
            Some("1.2") => tls.min_version = TlsVersion::V12,
            Some("1.3") => tls.min_version = TlsVersion::V13,
            Some(other) => cx.err(
                &p,
                v.span(),
                format!("\"{other}\": write \"1.2\" or \"1.3\" (older versions are not offered)"),
            ),
            None => {}
        }
    }
    if let Some(v) = t.get("unknown_sni") {
        let p = t.key_path("unknown_sni");
        match as_str(cx, &p, v) {
            Some("default") => tls.unknown_sni = UnknownSni::Default,
            Some("reject") => tls.unknown_sni = UnknownSni::Reject,
            Some(other) => cx.err(
                &p,
                v.span(),
                format!("\"{other}\": write \"default\" (the first certificate) or \"reject\""),
            ),
            None => {}
        }
    }
}

/// `client_ca` and `client_auth` (which needs it).
fn client_certificates(cx: &mut Cx, t: &mut Tbl, base: &Path, tls: &mut TlsConfig) {
    if let Some(v) = t.get("client_ca") {
        if let Some(s) = as_str(cx, &t.key_path("client_ca"), v) {
            tls.client_ca = Some(base.join(s));
        }
    }
    if let Some(v) = t.get("client_auth") {
        let p = t.key_path("client_auth");
        match as_str(cx, &p, v) {
            Some("require") => tls.client_auth = ClientAuth::Require,
            Some("optional") => tls.client_auth = ClientAuth::Optional,
            Some(other) => cx.err(
                &p,
                v.span(),
                format!("\"{other}\": write \"require\" or \"optional\""),
            ),
            None => {}
        }
        if tls.client_ca.is_none() {
            cx.err(
                &p,
                v.span(),
                "needs client_ca (the CA that signs client certificates)",
            );
        }
    }
}

/// `max-age=N` with the directives browsers know, separated by `;`.
fn valid_hsts(s: &str) -> bool {
    let mut max_age = false;
    for d in s.split(';').map(str::trim) {
        let lower = d.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("max-age=") {
            if max_age || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return false;
            }
            max_age = true;
        } else if lower != "includesubdomains" && lower != "preload" {
            return false;
        }
    }
    max_age
}

/// An upstream's `tls = true | { ca, sni, verify, client_cert }`.
pub(crate) fn upstream_tls(cx: &mut Cx, path: &str, v: &Value, base: &Path) -> Option<UpstreamTls> {
    let mut tls = UpstreamTls {
        ca: None,
        sni: None,
        verify: true,
        client_cert: None,
    };
    match v.get_ref() {
        DeValue::Boolean(true) => Some(tls),
        DeValue::Boolean(false) => None,
        DeValue::Table(_) => {
            let mut t = Tbl::of(cx, path.to_string(), v)?;
            if let Some(cv) = t.get("ca") {
                tls.ca = as_str(cx, &t.key_path("ca"), cv).map(|s| base.join(s));
            }
            if let Some(sv) = t.get("sni") {
                let p = t.key_path("sni");
                if let Some(s) = as_str(cx, &p, sv) {
                    if crate::scalars::dns_name(s) {
                        tls.sni = Some(s.to_ascii_lowercase());
                    } else {
                        cx.err(&p, sv.span(), format!("\"{s}\" is not a DNS name"));
                    }
                }
            }
            if let Some(bv) = t.get("verify") {
                tls.verify = as_bool(cx, &t.key_path("verify"), bv).unwrap_or(true);
            }
            if let Some(cv) = t.get("client_cert") {
                tls.client_cert = cert_files(cx, &t.key_path("client_cert"), cv, base);
            }
            t.finish(cx);
            Some(tls)
        }
        _ => {
            type_err(
                cx,
                path,
                v,
                "true, false or a table { ca, sni, verify, client_cert }",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::valid_hsts;

    #[test]
    fn hsts_values() {
        assert!(valid_hsts("max-age=31536000"));
        assert!(valid_hsts("max-age=31536000; includeSubDomains; preload"));
        assert!(valid_hsts("max-age=0"));
        assert!(!valid_hsts("includeSubDomains"));
        assert!(!valid_hsts("max-age=1; max-age=2"));
        assert!(!valid_hsts("max-age=1\r\nSet-Cookie: x"));
        assert!(!valid_hsts("max-age=abc"));
        assert!(!valid_hsts(""));
    }
}
