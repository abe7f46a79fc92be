//! `[redis]`: where global limits keep their state. One node (`url`) or a cluster's seed nodes
//! (`cluster`), plain (`redis://`) or TLS (`rediss://`, verified against `ca` or the system's
//! roots, never skipped), an ACL user in the URL, the password in the URL or in the
//! environment (`password_env`), and a client certificate for mutual TLS (`client_cert`).
//! Certificate files are read here (relative to the config's folder) and checked as PEM.

use crate::model::{OnError, RedisClientCert, RedisSettings, RedisTarget, RedisTls};
use crate::reader::{as_int_in, as_str, as_str_list, Cx, Tbl, Value};
use crate::scalars::{duration, on_error};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default entries of the verdict cache per global limit.
pub const DEFAULT_VERDICT_CACHE: usize = 100_000;
/// `max_in_flight`: Redis calls one process may have waiting at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 128;

/// What a node URL says, as far as the config cares.
struct Url {
    tls: bool,
    user: bool,
    password: bool,
}

const URL_FORM: &str =
    "write redis://HOST:PORT or rediss://HOST:PORT (TLS), optionally with USER:PASSWORD@ and /DB";

fn redis_url(cx: &mut Cx, path: &str, s: &str, span: Range<usize>) -> Option<Url> {
    let (tls, rest) = match (s.strip_prefix("redis://"), s.strip_prefix("rediss://")) {
        (Some(r), _) => (false, r),
        (None, Some(r)) => (true, r),
        (None, None) => {
            cx.err(
                path,
                span,
                format!("\"{s}\" is not a Redis URL: {URL_FORM}"),
            );
            return None;
        }
    };
    if rest.contains('#') {
        // The redis crate reads `#insecure` as "skip certificate verification".
        cx.err(
            path,
            span,
            format!("\"{s}\": a fragment (#...) is not supported: the server's certificate is always verified (use ca = \"FILE\" for a private CA)"),
        );
        return None;
    }
    let (userinfo, hostpart) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let host = hostpart.split(['/', '?']).next().unwrap_or(hostpart);
    if host.is_empty() {
        cx.err(
            path,
            span,
            format!("\"{s}\" is not a Redis URL: {URL_FORM}"),
        );
        return None;
    }
    let (user, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((user, pw)) => (!user.is_empty(), !pw.is_empty()),
            None => (!u.is_empty(), false),
        },
        None => (false, false),
    };
    Some(Url {
        tls,
        user,
        password,
    })
}

/// A file named by `key` in `t`, read whole, relative to `base`, and added to `files` (so a
/// change to it is a change to the config).
fn read_file(
    cx: &mut Cx,
    t: &mut Tbl,
    key: &str,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Option<(String, String, Range<usize>, Vec<u8>)> {
    let v = t.get(key)?;
    let p = t.key_path(key);
    let name = as_str(cx, &p, v)?;
    let full = base.join(name);
    files.push(full.clone());
    match crate::files::read_bounded(&full) {
        Ok(bytes) => Some((p, name.to_string(), v.span(), bytes)),
        Err(e) => {
            cx.err(
                &p,
                v.span(),
                format!("cannot read \"{}\": {e}", full.display()),
            );
            None
        }
    }
}

/// PEM holding at least one certificate, every one of them readable.
pub(crate) fn certificates(
    cx: &mut Cx,
    path: &str,
    file: &str,
    span: Range<usize>,
    pem: &[u8],
) -> bool {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
    match certs {
        Ok(c) if !c.is_empty() => true,
        Ok(_) => {
            cx.err(
                path,
                span,
                format!("\"{file}\" holds no certificate in PEM"),
            );
            false
        }
        Err(e) => {
            cx.err(
                path,
                span,
                format!("\"{file}\" is not a PEM certificate file: {e}"),
            );
            false
        }
    }
}

/// `client_cert = { cert = "FILE", key = "FILE" }`.
fn client_cert(
    cx: &mut Cx,
    path: &str,
    v: &Value,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Option<RedisClientCert> {
    let mut t = Tbl::of(cx, path.to_string(), v)?;
    for key in ["cert", "key"] {
        if t.get(key).is_none() {
            cx.err(
                path,
                v.span(),
                format!(
                    "missing key \"{key}\" (client_cert = {{ cert = \"FILE\", key = \"FILE\" }})"
                ),
            );
        }
    }
    let cert = read_file(cx, &mut t, "cert", base, files)
        .filter(|(p, name, span, pem)| certificates(cx, p, name, span.clone(), pem))
        .map(|(.., pem)| pem);
    let key = read_file(cx, &mut t, "key", base, files).and_then(|(p, name, span, pem)| {
        match PrivateKeyDer::from_pem_slice(&pem) {
            Ok(_) => Some(pem),
            Err(e) => {
                cx.err(
                    &p,
                    span,
                    format!("\"{name}\" holds no private key in PEM: {e}"),
                );
                None
            }
        }
    });
    t.finish(cx);
    Some(RedisClientCert {
        cert: cert?,
        key: key?,
    })
}

/// Reads `[redis]`. `base`: the config's folder, for `ca` and `client_cert`; the files read
/// are added to `files`.
pub(crate) fn read(
    cx: &mut Cx,
    mut t: Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Option<RedisSettings> {
    // The target and every node's URL with its key path and span (for the checks below).
    let mut nodes: Vec<(String, Range<usize>, Url)> = Vec::new();
    let target = target(cx, &mut t, &mut nodes)?;
    // With no readable URL the scheme is unknown: TLS keys are then read but not judged.
    let tls = nodes.first().map(|(.., u)| u.tls);
    let mut ok = true;
    let redis_tls = tls_settings(cx, &mut t, tls, base, files, &mut ok);
    let password = password(cx, &mut t, &nodes, &mut ok);

    let timeout = match t.get("timeout") {
        Some(v) => {
            let p = t.key_path("timeout");
            duration(cx, &p, v).and_then(|d| {
                if d.is_zero() || d > Duration::from_secs(10) {
                    cx.err(&p, v.span(), "must be between 1ms and 10s");
                    None
                } else {
                    Some(d)
                }
            })
        }
        None => Some(Duration::from_millis(20)),
    };
    // Local by default: a protection layer that fails open can be switched off by whoever
    // can make Redis slow; this process's share of each limit is the nearest to exact.
    let on_error = match t.get("on_error") {
        Some(v) => on_error(cx, &t.key_path("on_error"), v),
        None => Some(OnError::Local),
    };
    let max_in_flight = match t.get("max_in_flight") {
        Some(v) => as_int_in(cx, &t.key_path("max_in_flight"), v, 4, 100_000).map(|n| n as usize),
        None => Some(DEFAULT_MAX_IN_FLIGHT),
    };
    let instances = match t.get("instances") {
        Some(v) => as_int_in(cx, &t.key_path("instances"), v, 1, 10_000).map(|n| n as u32),
        None => Some(1),
    };
    let verdict_cache = match t.get("verdict_cache") {
        Some(v) => {
            as_int_in(cx, &t.key_path("verdict_cache"), v, 1, 100_000_000).map(|n| n as usize)
        }
        None => Some(DEFAULT_VERDICT_CACHE),
    };
    t.finish(cx);
    if !ok {
        return None;
    }
    Some(RedisSettings {
        target: target?,
        timeout: timeout?,
        on_error: on_error?,
        instances: instances?,
        verdict_cache: verdict_cache?,
        max_in_flight: max_in_flight?,
        tls: redis_tls,
        password,
    })
}

/// `url` or `cluster`: the target, each node's URL (with its key path and span) pushed to
/// `nodes` for the checks after; `None` when reading stops here (reported).
fn target(
    cx: &mut Cx,
    t: &mut Tbl,
    nodes: &mut Vec<(String, Range<usize>, Url)>,
) -> Option<Option<RedisTarget>> {
    let url = t.get("url").map(|v| (t.key_path("url"), v));
    let cluster = t.get("cluster").map(|v| (t.key_path("cluster"), v));
    Some(match (url, cluster) {
        (Some((p, v)), None) => {
            let s = as_str(cx, &p, v)?;
            let u = redis_url(cx, &p, s, v.span());
            u.map(|u| {
                nodes.push((p, v.span(), u));
                RedisTarget::Url(s.to_string())
            })
        }
        (None, Some((p, v))) => {
            let items = as_str_list(cx, &p, v, false)?;
            if items.is_empty() {
                cx.err(&p, v.span(), "needs at least one node URL");
                return None;
            }
            for (ip, s, span) in &items {
                if let Some(u) = redis_url(cx, ip, s, span.clone()) {
                    nodes.push((ip.clone(), span.clone(), u));
                }
            }
            let schemes_agree = nodes.iter().all(|(.., u)| u.tls == nodes[0].2.tls);
            if !schemes_agree {
                cx.err(
                    &p,
                    v.span(),
                    "mixes redis:// and rediss:// nodes: every node of a cluster is reached alike (all redis:// or all rediss://)",
                );
            }
            (nodes.len() == items.len() && schemes_agree).then(|| {
                RedisTarget::Cluster(items.iter().map(|(_, s, _)| s.to_string()).collect())
            })
        }
        (Some((p, v)), Some(_)) => {
            cx.err(&p, v.span(), "set either url or cluster, not both");
            None
        }
        (None, None) => {
            cx.err(
                "redis",
                t.span.clone(),
                "missing key \"url\" (e.g. url = \"redis://127.0.0.1:6379\") or \"cluster\"",
            );
            None
        }
    })
}

/// `ca` and `client_cert`, judged against the URL's scheme (`tls`: `None` when no URL could
/// be read); a problem clears `ok`.
fn tls_settings(
    cx: &mut Cx,
    t: &mut Tbl,
    tls: Option<bool>,
    base: &Path,
    files: &mut Vec<PathBuf>,
    ok: &mut bool,
) -> Option<RedisTls> {
    let ca_present = t.get("ca").map(|v| (t.key_path("ca"), v.span()));
    let ca = match read_file(cx, t, "ca", base, files) {
        Some((p, name, span, pem)) => {
            if certificates(cx, &p, &name, span, &pem) {
                Some(pem)
            } else {
                *ok = false;
                None
            }
        }
        None => {
            // Absent, or its problem is recorded.
            *ok &= ca_present.is_none();
            None
        }
    };
    let client = match t.get("client_cert") {
        Some(v) => {
            let p = t.key_path("client_cert");
            let c = client_cert(cx, &p, v, base, files);
            *ok &= c.is_some();
            Some((p, v.span(), c))
        }
        None => None,
    };
    if tls == Some(false) {
        if let Some((p, span)) = &ca_present {
            cx.err(
                p,
                span.clone(),
                "only with rediss:// (TLS): the URL is redis://",
            );
            *ok = false;
        }
        if let Some((p, span, _)) = &client {
            cx.err(
                p,
                span.clone(),
                "only with rediss:// (TLS): the URL is redis://",
            );
            *ok = false;
        }
    }
    (tls == Some(true)).then(|| RedisTls {
        ca,
        client_cert: client.and_then(|(.., c)| c),
    })
}

/// `password_env`, or the URL's own password (never both; a user needs one); a problem
/// clears `ok`.
fn password(
    cx: &mut Cx,
    t: &mut Tbl,
    nodes: &[(String, Range<usize>, Url)],
    ok: &mut bool,
) -> Option<String> {
    match t.get("password_env") {
        Some(v) => {
            let p = t.key_path("password_env");
            let name = as_str(cx, &p, v);
            for (np, nspan, u) in nodes {
                if u.password {
                    cx.err(
                        np,
                        nspan.clone(),
                        "the URL carries a password and password_env is set: keep one",
                    );
                    *ok = false;
                }
            }
            match name.map(|n| (n, std::env::var(n))) {
                Some((_, Ok(pw))) if !pw.is_empty() => Some(pw),
                Some((n, _)) => {
                    cx.err(
                        &p,
                        v.span(),
                        format!("the environment variable {n} is not set"),
                    );
                    *ok = false;
                    None
                }
                None => {
                    *ok = false;
                    None
                }
            }
        }
        None => {
            for (np, nspan, u) in nodes {
                if u.user && !u.password {
                    cx.err(
                        np,
                        nspan.clone(),
                        "a user in the URL needs a password: write USER:PASSWORD@ or set password_env",
                    );
                    *ok = false;
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests;
