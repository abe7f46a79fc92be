//! `[jwt]`: how bearer tokens are verified for `jwt:CLAIM` keys (algorithms, keys from files
//! or inline, issuer, audience, leeway, the header that carries them).

use crate::model::JwtSettings;
use crate::model::*;
use crate::reader::{as_str, as_str_list, Cx, Tbl};
use crate::scalars::{duration, http_token};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn jwt_algorithm(
    cx: &mut Cx,
    path: &str,
    s: &str,
    span: std::ops::Range<usize>,
) -> Option<jsonwebtoken::Algorithm> {
    use jsonwebtoken::Algorithm as A;
    let all = [
        ("HS256", A::HS256),
        ("HS384", A::HS384),
        ("HS512", A::HS512),
        ("RS256", A::RS256),
        ("RS384", A::RS384),
        ("RS512", A::RS512),
        ("PS256", A::PS256),
        ("PS384", A::PS384),
        ("PS512", A::PS512),
        ("ES256", A::ES256),
        ("ES384", A::ES384),
    ];
    if s.eq_ignore_ascii_case("none") {
        cx.err(
            path,
            span,
            "\"none\" is never accepted: an unsigned token proves nothing",
        );
        return None;
    }
    match all.iter().find(|(n, _)| *n == s) {
        Some((_, a)) => Some(*a),
        None => {
            let names: Vec<_> = all.iter().map(|(n, _)| *n).collect();
            cx.err(
                path,
                span,
                format!("unknown algorithm \"{s}\" (one of: {})", names.join(", ")),
            );
            None
        }
    }
}

fn is_hmac(a: jsonwebtoken::Algorithm) -> bool {
    use jsonwebtoken::Algorithm as A;
    matches!(a, A::HS256 | A::HS384 | A::HS512)
}

fn is_ec(a: jsonwebtoken::Algorithm) -> bool {
    use jsonwebtoken::Algorithm as A;
    matches!(a, A::ES256 | A::ES384)
}

pub(crate) fn jwt(
    cx: &mut Cx,
    mut t: Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Option<JwtSettings> {
    let mut ok = true;
    let (secret, public_keys, jwks) = keys(cx, &mut t, base, files, &mut ok);
    let remote = remote(cx, &mut t, base, files, &mut ok);
    let has_rsa = public_keys.iter().any(|k| k.rsa) || jwks.is_some() || remote.is_some();
    let has_ec = public_keys.iter().any(|k| !k.rsa) || jwks.is_some() || remote.is_some();
    let algorithms = algorithms(cx, &mut t, secret.is_some(), has_rsa, has_ec, &mut ok);
    if secret.is_none() && public_keys.is_empty() && jwks.is_none() && remote.is_none() && ok {
        cx.err(
            "jwt",
            t.span.clone(),
            "no key to verify tokens with: set secret (or secret_env), public_keys or jwks_file",
        );
        ok = false;
    }
    let opt_str = |cx: &mut Cx, t: &mut Tbl, k: &str| {
        t.get(k)
            .and_then(|v| as_str(cx, &t.key_path(k), v).map(str::to_string))
    };
    let issuer = opt_str(cx, &mut t, "issuer");
    let audience = opt_str(cx, &mut t, "audience");
    // Clock skew allowed on exp and nbf (a bad value is reported; the default stands).
    const LEEWAY: Duration = Duration::from_secs(30);
    let leeway = t
        .get("leeway")
        .and_then(|v| duration(cx, &t.key_path("leeway"), v))
        .unwrap_or(LEEWAY);
    let header = header(cx, &mut t, &mut ok);
    t.finish(cx);
    ok.then_some(JwtSettings {
        algorithms,
        secret,
        public_keys,
        jwks,
        remote,
        issuer,
        audience,
        leeway,
        header,
    })
}

/// The keys tokens are verified with: `secret` (or `secret_env`), `public_keys` files and a
/// `jwks_file`; a problem clears `ok`.
fn keys(
    cx: &mut Cx,
    t: &mut Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
    ok: &mut bool,
) -> (Option<String>, Vec<PublicKey>, Option<String>) {
    let secret = secret(cx, t, ok);
    let public_keys = public_keys(cx, t, base, files, ok);
    let jwks = jwks_file(cx, t, base, files);
    (secret, public_keys, jwks)
}

/// `algorithms`, each with a key configured for it; by default every algorithm the keys can
/// verify.
fn algorithms(
    cx: &mut Cx,
    t: &mut Tbl,
    has_secret: bool,
    has_rsa: bool,
    has_ec: bool,
    ok: &mut bool,
) -> Vec<jsonwebtoken::Algorithm> {
    use jsonwebtoken::Algorithm as A;
    match t.get("algorithms") {
        Some(v) => {
            let p = t.key_path("algorithms");
            let items = as_str_list(cx, &p, v, true).unwrap_or_default();
            let algs: Vec<A> = items
                .iter()
                .filter_map(|(ip, s, span)| jwt_algorithm(cx, ip, s, span.clone()))
                .collect();
            if algs.len() != items.len() {
                *ok = false;
            }
            for (a, (ip, s, span)) in algs.iter().zip(items.iter()) {
                let keyed = if is_hmac(*a) {
                    has_secret
                } else if is_ec(*a) {
                    has_ec
                } else {
                    has_rsa
                };
                if !keyed {
                    cx.err(ip, span.clone(), format!("{s} is accepted but no key for it is configured (secret for HS*, public_keys or jwks_file for RS*/PS*/ES*)"));
                    *ok = false;
                }
            }
            algs
        }
        None => {
            let mut algs = Vec::new();
            if has_secret {
                algs.extend([A::HS256, A::HS384, A::HS512]);
            }
            if has_rsa {
                algs.extend([A::RS256, A::RS384, A::RS512, A::PS256, A::PS384, A::PS512]);
            }
            if has_ec {
                algs.extend([A::ES256, A::ES384]);
            }
            algs
        }
    }
}

/// `header`: where the token is read (`authorization` by default).
fn header(cx: &mut Cx, t: &mut Tbl, ok: &mut bool) -> String {
    match t.get("header") {
        Some(v) => {
            let p = t.key_path("header");
            match as_str(cx, &p, v) {
                Some(h) if http_token(h) && cx.client_header(&p, v.span(), h) => {
                    h.to_ascii_lowercase()
                }
                Some(h) if !http_token(h) => {
                    cx.err(&p, v.span(), "needs a valid header name");
                    *ok = false;
                    String::new()
                }
                Some(_) => {
                    *ok = false;
                    String::new()
                }
                None => String::new(),
            }
        }
        None => "authorization".into(),
    }
}

/// `secret` or `secret_env` (one of them at most).
fn secret(cx: &mut Cx, t: &mut Tbl, ok: &mut bool) -> Option<String> {
    match (t.get("secret"), t.get("secret_env")) {
        (Some(v), None) => as_str(cx, &t.key_path("secret"), v).map(str::to_string),
        (None, Some(v)) => {
            let p = t.key_path("secret_env");
            match as_str(cx, &p, v) {
                Some(name) => match std::env::var(name) {
                    Ok(s) if !s.is_empty() => Some(s),
                    _ => {
                        cx.err(
                            &p,
                            v.span(),
                            format!("the environment variable {name} is not set"),
                        );
                        *ok = false;
                        None
                    }
                },
                None => None,
            }
        }
        (Some(v), Some(_)) => {
            cx.err(
                &t.key_path("secret"),
                v.span(),
                "set either secret or secret_env, not both",
            );
            *ok = false;
            None
        }
        (None, None) => None,
    }
}

/// `public_keys`: PEM files, each an RSA or EC public key.
fn public_keys(
    cx: &mut Cx,
    t: &mut Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
    ok: &mut bool,
) -> Vec<PublicKey> {
    use jsonwebtoken::DecodingKey;
    let mut public_keys = Vec::new();
    if let Some(v) = t.get("public_keys") {
        let p = t.key_path("public_keys");
        for (ip, file, span) in as_str_list(cx, &p, v, true).unwrap_or_default() {
            let full = base.join(file);
            files.push(full.clone());
            match crate::files::read_bounded(&full) {
                Ok(pem) => {
                    if DecodingKey::from_rsa_pem(&pem).is_ok() {
                        public_keys.push(PublicKey {
                            file: file.to_string(),
                            pem,
                            rsa: true,
                        });
                    } else if DecodingKey::from_ec_pem(&pem).is_ok() {
                        public_keys.push(PublicKey {
                            file: file.to_string(),
                            pem,
                            rsa: false,
                        });
                    } else {
                        cx.err(
                            &ip,
                            span,
                            format!("\"{file}\" holds no RSA or EC public key in PEM"),
                        );
                        *ok = false;
                    }
                }
                Err(e) => {
                    cx.err(
                        &ip,
                        span,
                        format!("cannot read \"{}\": {e}", full.display()),
                    );
                    *ok = false;
                }
            }
        }
    }
    public_keys
}

/// `jwks_file`: a JWKS document whose every key can verify.
fn jwks_file(cx: &mut Cx, t: &mut Tbl, base: &Path, files: &mut Vec<PathBuf>) -> Option<String> {
    use jsonwebtoken::DecodingKey;
    match t.get("jwks_file") {
        Some(v) => {
            let p = t.key_path("jwks_file");
            as_str(cx, &p, v).and_then(|file| {
                let full = base.join(file);
                files.push(full.clone());
                match crate::files::read_bounded_text(&full) {
                    Ok(text) => match serde_json::from_str::<jsonwebtoken::jwk::JwkSet>(&text) {
                        Ok(set) if set.keys.iter().all(|k| DecodingKey::from_jwk(k).is_ok()) => Some(text),
                        Ok(_) => {
                            cx.err(&p, v.span(), format!("\"{file}\": a key of the set is not usable for verification"));
                            None
                        }
                        Err(e) => {
                            cx.err(&p, v.span(), format!("\"{file}\" is not a JWKS document: {e}"));
                            None
                        }
                    },
                    Err(e) => {
                        cx.err(&p, v.span(), format!("cannot read \"{}\": {e}", full.display()));
                        None
                    }
                }
            })
        }
        None => None,
    }
}

/// `jwks_url` (HTTPS), its `jwks_ca` (PEM; system roots without one) and `jwks_refetch` (the
/// least time between two fetches for tokens naming an unknown kid).
fn remote(
    cx: &mut Cx,
    t: &mut Tbl,
    base: &Path,
    files: &mut Vec<PathBuf>,
    ok: &mut bool,
) -> Option<RemoteJwks> {
    const REFETCH: Duration = Duration::from_secs(30);
    let ca_given = t.get("jwks_ca");
    let refetch_given = t.get("jwks_refetch");
    let Some(v) = t.get("jwks_url") else {
        for (k, given) in [("jwks_ca", ca_given), ("jwks_refetch", refetch_given)] {
            if let Some(v) = given {
                cx.err(&t.key_path(k), v.span(), format!("{k} goes with jwks_url"));
                *ok = false;
            }
        }
        return None;
    };
    let p = t.key_path("jwks_url");
    let url = as_str(cx, &p, v)?;
    let https = url
        .parse::<http::Uri>()
        .ok()
        .is_some_and(|u| u.scheme_str() == Some("https") && u.host().is_some());
    if !https {
        cx.err(
            &p,
            v.span(),
            format!("\"{url}\" is not an https:// URL: keys fetched in the clear could be replaced on the way"),
        );
        *ok = false;
        return None;
    }
    let ca = match ca_given {
        Some(cv) => {
            let cp = t.key_path("jwks_ca");
            let file = as_str(cx, &cp, cv)?;
            let full = base.join(file);
            files.push(full.clone());
            match crate::files::read_bounded(&full) {
                Ok(pem) if crate::redis::certificates(cx, &cp, file, cv.span(), &pem) => Some(pem),
                Ok(_) => {
                    *ok = false;
                    return None;
                }
                Err(e) => {
                    cx.err(
                        &cp,
                        cv.span(),
                        format!("cannot read \"{}\": {e}", full.display()),
                    );
                    *ok = false;
                    return None;
                }
            }
        }
        None => None,
    };
    let refetch = match refetch_given {
        Some(rv) => {
            let p = t.key_path("jwks_refetch");
            let d = duration(cx, &p, rv)?;
            if d < Duration::from_secs(1) {
                cx.err(
                    &p,
                    rv.span(),
                    "at least 1s: tokens naming random kids must not keep the provider busy",
                );
                *ok = false;
                return None;
            }
            d
        }
        None => REFETCH,
    };
    Some(RemoteJwks {
        url: url.to_string(),
        ca,
        refetch,
    })
}
