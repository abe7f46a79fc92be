//! The walk from TOML text to [`Config`]: one function per table, each reading its keys,
//! checking them, and leaving unknown ones to be reported.

use crate::limits::{key_source, script_exact, PlanMode};
use crate::reader::{as_bool, as_int_in, as_str, as_str_list, join, Cx, Problem, Tbl, Value};
use crate::scalars::{cidr, duration, http_token, list_or_none, parse_quota};
use crate::types::*;
use crate::values::parse_rate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Calendar, Rate};
use toml::de::DeTable;

/// `base`: the directory relative file names in the config (key files) are read from.
pub fn parse(text: &str, base: &Path, resolve: bool) -> Result<Config, Vec<Problem>> {
    let mut cx = Cx::new(text);
    cx.resolve = resolve;
    let doc = match DeTable::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            cx.err("", span, format!("not valid TOML: {}", e.message().trim()));
            return Err(cx.problems);
        }
    };
    let mut root = Tbl::new(String::new(), doc.get_ref(), doc.span());

    let server = match root.get("server") {
        Some(v) => Tbl::of(&mut cx, "server".into(), v).map(|t| server(&mut cx, t)),
        None => Some(server_defaults()),
    };
    let upstreams = match root.get("upstreams") {
        Some(v) => Tbl::of(&mut cx, "upstreams".into(), v)
            .map(|t| crate::upstreams::read(&mut cx, t, base))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut files = Vec::new();
    let redis = match root.get("redis") {
        Some(v) => Tbl::of(&mut cx, "redis".into(), v)
            .and_then(|t| crate::redis::read(&mut cx, t, base, &mut files)),
        None => None,
    };
    let jwt_present = root.get("jwt").is_some();
    let jwt = match root.get("jwt") {
        Some(v) => {
            Tbl::of(&mut cx, "jwt".into(), v).and_then(|t| jwt(&mut cx, t, base, &mut files))
        }
        None => None,
    };
    let plans_present = root.get("plans").is_some();
    let plans = match root.get("plans") {
        Some(v) => Tbl::of(&mut cx, "plans".into(), v).and_then(|t| plans(&mut cx, t)),
        None => None,
    };
    let mut plan_modes = Vec::new();
    let limits = match root.get("limits") {
        Some(v) => Tbl::of(&mut cx, "limits".into(), v)
            .map(|t| {
                let env = crate::limits::Env {
                    redis: redis.as_ref(),
                    redis_present: root.get("redis").is_some(),
                    jwt_present,
                    plans_present,
                };
                crate::limits::read(&mut cx, t, &env, &mut plan_modes)
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    // A plan limit becomes one variant per plan that defines its rate (or quota).
    let variants: Vec<Vec<usize>> = limits
        .iter()
        .map(
            |(name, _)| match plan_modes.iter().find(|(n, _)| n == name) {
                Some((_, mode)) => plans.as_ref().map_or(Vec::new(), |p| {
                    (0..p.names.len())
                        .filter(|&i| match mode {
                            PlanMode::Rate => p.defs[i].rate.is_some(),
                            PlanMode::Quota => p.defs[i].quota.is_some(),
                        })
                        .collect()
                }),
                None => vec![usize::MAX],
            },
        )
        .collect();
    let weights: Vec<usize> = variants.iter().map(Vec::len).collect();
    let access = match root.get("access") {
        Some(v) => Tbl::of(&mut cx, "access".into(), v)
            .map(|t| crate::abuse::access(&mut cx, t, base, &mut files))
            .unwrap_or_default(),
        None => AccessConfig::default(),
    };
    let routes = match root.get("routes") {
        Some(v) => crate::routes::read(&mut cx, v, &upstreams, &limits, &weights, base, &mut files),
        None => Vec::new(),
    };
    let tls = match root.get("tls") {
        Some(v) => Tbl::of(&mut cx, "tls".into(), v).map(|t| crate::tls::read(&mut cx, t, base)),
        None => None,
    };
    if let Some(s) = &server {
        match (&tls, s.tls_listen.is_empty()) {
            (None, false) => cx.err(
                "server.tls_listen",
                0..0,
                "TLS listeners need certificates: add a [tls] section",
            ),
            // (Unless tls_listen was given and is wrong: that error says enough.)
            (Some(_), true)
                if !cx
                    .problems
                    .iter()
                    .any(|p| p.path.starts_with("server.tls_listen")) =>
            {
                cx.err(
                    "tls",
                    0..0,
                    "no listener serves these certificates: add server.tls_listen",
                )
            }
            _ => {}
        }
        let redirects = s.https_redirect || routes.iter().any(|r| r.https_redirect == Some(true));
        if redirects && s.tls_listen.is_empty() && s.https_port.is_none() {
            cx.err(
                "server.https_redirect",
                0..0,
                "redirects to HTTPS need server.tls_listen (or server.https_port, for TLS served in front of Tollgate)",
            );
        }
    }

    if plans_present
        && plans.as_ref().is_some_and(|p| {
            p.from
                .as_ref()
                .or(p.tenant.as_ref())
                .is_some_and(|k| matches!(k, KeySource::Jwt(_)))
        })
        && !jwt_present
    {
        cx.err(
            "plans",
            0..0,
            "plans read a jwt: claim: add a [jwt] section",
        );
    }
    root.finish(&mut cx);

    if !cx.problems.is_empty() {
        cx.problems.sort_by_key(|p| p.line);
        return Err(cx.problems);
    }
    let server = server.unwrap_or_else(server_defaults);
    // Expand plan limits into their variants and point routes at them.
    let mut expanded: Vec<LimitConfig> = Vec::new();
    let mut new_index: Vec<Vec<usize>> = Vec::new();
    for ((_, l), vars) in limits.into_iter().zip(&variants) {
        let Some(l) = l else {
            new_index.push(Vec::new());
            continue;
        };
        let mut ids = Vec::new();
        for &v in vars {
            let mut c = l.clone();
            if v != usize::MAX {
                if let Some(p) = &plans {
                    let def = &p.defs[v];
                    c.plan = Some(v);
                    if let Some((n, unit)) = def.quota.filter(|_| l.calendar.is_some()) {
                        c.burst = n;
                        c.rate = Rate::new(n, Duration::from_secs(unit.nominal_secs()))
                            .unwrap_or(c.rate);
                        c.calendar = l.calendar.map(|cal| Calendar { unit, ..cal });
                    } else if let Some(r) = def.rate {
                        c.rate = r;
                        c.burst = def.burst;
                    }
                }
            }
            ids.push(expanded.len());
            expanded.push(c);
        }
        new_index.push(ids);
    }
    let routes = routes
        .into_iter()
        .map(|mut r| {
            r.limits = r
                .limits
                .iter()
                .flat_map(|&i| new_index.get(i).cloned().unwrap_or_default())
                .collect();
            r
        })
        .collect();
    Ok(Config {
        server,
        upstreams: upstreams.into_iter().map(|(_, u)| u).collect(),
        routes,
        limits: expanded,
        redis,
        jwt,
        plans,
        access,
        tls,
        files,
    })
}

/// Plan names that are settings of [plans], not plans.
const PLAN_SETTINGS: [&str; 4] = ["default", "from", "tenant", "tenants"];

fn plans(cx: &mut Cx, mut t: Tbl) -> Option<Plans> {
    let mut names = Vec::new();
    let mut defs = Vec::new();
    let mut ok = true;
    for (name, v, _) in t.entries() {
        if PLAN_SETTINGS.contains(&name) {
            continue;
        }
        let path = join(&t.path, name);
        let Some(mut pt) = Tbl::of(cx, path.clone(), v) else {
            ok = false;
            continue;
        };
        let rate = pt.get("rate").and_then(|rv| {
            let p = pt.key_path("rate");
            as_str(cx, &p, rv).and_then(|s| match parse_rate(s) {
                Ok(r) => Some(r),
                Err(e) => {
                    cx.err(&p, rv.span(), e);
                    None
                }
            })
        });
        let burst = match pt.get("burst") {
            Some(bv) => {
                as_int_in(cx, &pt.key_path("burst"), bv, 1, 1_000_000_000).map(|n| n as u64)
            }
            None => rate.map(|r| r.count()),
        };
        let quota = pt.get("quota").and_then(|qv| {
            let p = pt.key_path("quota");
            as_str(cx, &p, qv).and_then(|s| match parse_quota(s) {
                Some(q) => Some(q),
                None => {
                    cx.err(&p, qv.span(), format!("\"{s}\" is not a quota: write N/day, N/week, N/month or N/year, e.g. \"10000/month\""));
                    None
                }
            })
        });
        if rate.is_none() && quota.is_none() {
            cx.err(
                &path,
                pt.span.clone(),
                "a plan needs a rate, a quota or both",
            );
            ok = false;
        }
        // A plan's numbers may feed a global limit: they must be exact in its script.
        if let (Some(r), Some(b)) = (rate, burst) {
            script_exact(
                cx,
                &mut pt,
                "rate",
                AlgorithmKind::TokenBucket,
                r,
                b,
                "too large",
            );
        }
        if let Some((n, unit)) = quota {
            if let Ok(r) = Rate::new(n, Duration::from_secs(unit.nominal_secs())) {
                script_exact(
                    cx,
                    &mut pt,
                    "quota",
                    AlgorithmKind::Quota,
                    r,
                    n,
                    "too large",
                );
            }
        }
        pt.finish(cx);
        names.push(name.to_string());
        defs.push(PlanDef {
            rate,
            burst: burst.unwrap_or(1),
            quota,
        });
    }
    let plan_index = |cx: &mut Cx, p: &str, v: &Value, names: &[String]| -> Option<usize> {
        let s = as_str(cx, p, v)?;
        match names.iter().position(|n| n == s) {
            Some(i) => Some(i),
            None => {
                let known: Vec<_> = names.iter().map(String::as_str).collect();
                cx.err(
                    p,
                    v.span(),
                    format!("unknown plan \"{s}\" (defined: {})", list_or_none(&known)),
                );
                None
            }
        }
    };
    let default = match t.get("default") {
        Some(v) => plan_index(cx, &t.key_path("default"), v, &names),
        None => {
            cx.err(
                "plans",
                t.span.clone(),
                "missing key \"default\": the plan of callers no rule names",
            );
            None
        }
    };
    let mut source = |cx: &mut Cx, t: &mut Tbl, k: &str| -> Option<KeySource> {
        let v = t.get(k)?;
        let p = t.key_path(k);
        let s = as_str(cx, &p, v)?;
        match key_source(cx, &p, s, v.span()) {
            Some(ks @ (KeySource::Header(_) | KeySource::Query(_) | KeySource::Jwt(_))) => Some(ks),
            Some(_) => {
                cx.err(
                    &p,
                    v.span(),
                    "a plan or tenant is read from header:NAME, query:NAME or jwt:CLAIM",
                );
                ok = false;
                None
            }
            None => {
                ok = false;
                None
            }
        }
    };
    let from = source(cx, &mut t, "from");
    let tenant = source(cx, &mut t, "tenant");
    let mut tenants = Vec::new();
    if let Some(v) = t.get("tenants") {
        if let Some(mut tt) = Tbl::of(cx, t.key_path("tenants"), v) {
            for (tenant_name, pv, _) in tt.entries() {
                let p = join(&tt.path, tenant_name);
                if let Some(i) = plan_index(cx, &p, pv, &names) {
                    tenants.push((tenant_name.to_string(), i));
                } else {
                    ok = false;
                }
            }
            tt.finish(cx);
        }
        if tenant.is_none() {
            cx.err(
                &t.key_path("tenants"),
                v.span(),
                "tenants needs tenant = (a key source naming the caller's tenant)",
            );
            ok = false;
        }
    }
    t.finish(cx);
    match (ok, default) {
        (true, Some(default)) => Some(Plans {
            names,
            defs,
            default,
            from,
            tenant,
            tenants,
        }),
        _ => None,
    }
}

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

fn jwt(cx: &mut Cx, mut t: Tbl, base: &Path, files: &mut Vec<PathBuf>) -> Option<JwtSettings> {
    use jsonwebtoken::{Algorithm as A, DecodingKey};
    let mut ok = true;
    let secret = match (t.get("secret"), t.get("secret_env")) {
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
                        ok = false;
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
            ok = false;
            None
        }
        (None, None) => None,
    };
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
                        ok = false;
                    }
                }
                Err(e) => {
                    cx.err(
                        &ip,
                        span,
                        format!("cannot read \"{}\": {e}", full.display()),
                    );
                    ok = false;
                }
            }
        }
    }
    let jwks = match t.get("jwks_file") {
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
    };
    let has_rsa = public_keys.iter().any(|k| k.rsa) || jwks.is_some();
    let has_ec = public_keys.iter().any(|k| !k.rsa) || jwks.is_some();
    let algorithms = match t.get("algorithms") {
        Some(v) => {
            let p = t.key_path("algorithms");
            let items = as_str_list(cx, &p, v, true).unwrap_or_default();
            let algs: Vec<A> = items
                .iter()
                .filter_map(|(ip, s, span)| jwt_algorithm(cx, ip, s, span.clone()))
                .collect();
            if algs.len() != items.len() {
                ok = false;
            }
            for (a, (ip, s, span)) in algs.iter().zip(items.iter()) {
                let keyed = if is_hmac(*a) {
                    secret.is_some()
                } else if is_ec(*a) {
                    has_ec
                } else {
                    has_rsa
                };
                if !keyed {
                    cx.err(ip, span.clone(), format!("{s} is accepted but no key for it is configured (secret for HS*, public_keys or jwks_file for RS*/PS*/ES*)"));
                    ok = false;
                }
            }
            algs
        }
        None => {
            let mut algs = Vec::new();
            if secret.is_some() {
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
    };
    if secret.is_none() && public_keys.is_empty() && jwks.is_none() && ok {
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
    let leeway = match t.get("leeway") {
        Some(v) => duration(cx, &t.key_path("leeway"), v).unwrap_or(Duration::from_secs(30)),
        None => Duration::from_secs(30),
    };
    let header = match t.get("header") {
        Some(v) => {
            let p = t.key_path("header");
            match as_str(cx, &p, v) {
                Some(h) if http_token(h) => h.to_ascii_lowercase(),
                Some(_) => {
                    cx.err(&p, v.span(), "needs a valid header name");
                    ok = false;
                    String::new()
                }
                None => String::new(),
            }
        }
        None => "authorization".into(),
    };
    t.finish(cx);
    ok.then_some(JwtSettings {
        algorithms,
        secret,
        public_keys,
        jwks,
        issuer,
        audience,
        leeway,
        header,
    })
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn server_defaults() -> ServerConfig {
    ServerConfig {
        listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
        admin: None,
        threads: default_threads(),
        trusted_proxies: Vec::new(),
        ipv6_prefix: 64,
        shadow: false,
        grace_period: Duration::from_secs(5),
        upgrade_sock: PathBuf::from("/tmp/tollgate_upgrade.sock"),
        h2c: true,
        access_log: false,
        admin_token: None,
        legacy_headers: false,
        preserve_header_case: false,
        key_body_limit: 16 * 1024,
        hardening: Hardening::default(),
        tls_listen: Vec::new(),
        https_redirect: false,
        https_port: None,
        host_fallthrough: false,
    }
}

fn socket_addr(
    cx: &mut Cx,
    path: &str,
    s: &str,
    span: std::ops::Range<usize>,
) -> Option<SocketAddr> {
    match s.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            cx.err(
                path,
                span,
                format!("\"{s}\" is not an address: write IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::1]:8080\""),
            );
            None
        }
    }
}

fn server(cx: &mut Cx, mut t: Tbl) -> ServerConfig {
    let mut s = server_defaults();
    if let Some(v) = t.get("listen") {
        s.listen = addresses(cx, &t.key_path("listen"), v, &[]);
    }
    if let Some(v) = t.get("tls_listen") {
        s.tls_listen = addresses(cx, &t.key_path("tls_listen"), v, &s.listen);
    }
    if let Some(v) = t.get("https_redirect") {
        s.https_redirect = as_bool(cx, &t.key_path("https_redirect"), v).unwrap_or(false);
    }
    if let Some(v) = t.get("host_fallthrough") {
        s.host_fallthrough = as_bool(cx, &t.key_path("host_fallthrough"), v).unwrap_or(false);
    }
    if let Some(v) = t.get("https_port") {
        if let Some(n) = as_int_in(cx, &t.key_path("https_port"), v, 1, 65535) {
            s.https_port = Some(n as u16);
        }
    }
    if let Some(v) = t.get("admin") {
        let p = t.key_path("admin");
        if let Some(a) = as_str(cx, &p, v) {
            s.admin = socket_addr(cx, &p, a, v.span());
        }
        if let Some(a) = s.admin {
            let clashes = |l: &SocketAddr| {
                l.port() == a.port()
                    && l.is_ipv4() == a.is_ipv4()
                    && (l.ip() == a.ip() || l.ip().is_unspecified() || a.ip().is_unspecified())
            };
            for (list, key) in [
                (&s.listen, "server.listen"),
                (&s.tls_listen, "server.tls_listen"),
            ] {
                if list.iter().any(clashes) {
                    cx.err(
                        &p,
                        v.span(),
                        format!("{a} is also a proxy listener ({key})"),
                    );
                }
            }
        }
    }
    if let Some(v) = t.get("threads") {
        if let Some(n) = as_int_in(cx, &t.key_path("threads"), v, 1, 1024) {
            s.threads = n as usize;
        }
    }
    if let Some(v) = t.get("trusted_proxies") {
        let p = t.key_path("trusted_proxies");
        if let Some(items) = as_str_list(cx, &p, v, false) {
            s.trusted_proxies = items
                .iter()
                .filter_map(|(ip, n, span)| cidr(cx, ip, n, span.clone()))
                .collect();
        }
    }
    if let Some(v) = t.get("ipv6_prefix") {
        if let Some(n) = as_int_in(cx, &t.key_path("ipv6_prefix"), v, 1, 128) {
            s.ipv6_prefix = n as u8;
        }
    }
    if let Some(v) = t.get("shadow") {
        s.shadow = as_bool(cx, &t.key_path("shadow"), v).unwrap_or(false);
    }
    if let Some(v) = t.get("grace_period") {
        if let Some(d) = duration(cx, &t.key_path("grace_period"), v) {
            s.grace_period = d;
        }
    }
    if let Some(v) = t.get("upgrade_sock") {
        if let Some(p) = as_str(cx, &t.key_path("upgrade_sock"), v) {
            s.upgrade_sock = PathBuf::from(p);
        }
    }
    if let Some(v) = t.get("h2c") {
        s.h2c = as_bool(cx, &t.key_path("h2c"), v).unwrap_or(true);
    }
    if let Some(v) = t.get("access_log") {
        s.access_log = as_bool(cx, &t.key_path("access_log"), v).unwrap_or(false);
    }
    if let Some(v) = t.get("key_body_limit") {
        if let Some(n) = as_int_in(cx, &t.key_path("key_body_limit"), v, 1, 64 * 1024) {
            s.key_body_limit = n as usize;
        }
    }
    match (t.get("admin_token"), t.get("admin_token_env")) {
        (Some(v), None) => {
            let p = t.key_path("admin_token");
            if let Some(tok) = as_str(cx, &p, v) {
                if tok.len() < 16 {
                    cx.err(
                        &p,
                        v.span(),
                        "at least 16 characters (it guards the blocks API)",
                    );
                } else {
                    s.admin_token = Some(tok.to_string());
                }
            }
        }
        (None, Some(v)) => {
            let p = t.key_path("admin_token_env");
            if let Some(name) = as_str(cx, &p, v) {
                match std::env::var(name) {
                    Ok(tok) if tok.len() >= 16 => s.admin_token = Some(tok),
                    Ok(_) => cx.err(
                        &p,
                        v.span(),
                        format!("the environment variable {name} holds fewer than 16 characters"),
                    ),
                    Err(_) => cx.err(
                        &p,
                        v.span(),
                        format!("the environment variable {name} is not set"),
                    ),
                }
            }
        }
        (Some(v), Some(_)) => cx.err(
            &t.key_path("admin_token"),
            v.span(),
            "set either admin_token or admin_token_env, not both",
        ),
        (None, None) => {}
    }
    if let Some(v) = t.get("legacy_headers") {
        s.legacy_headers = as_bool(cx, &t.key_path("legacy_headers"), v).unwrap_or(false);
    }
    if let Some(v) = t.get("preserve_header_case") {
        s.preserve_header_case =
            as_bool(cx, &t.key_path("preserve_header_case"), v).unwrap_or(false);
    }
    s.hardening = crate::hardening::read(cx, &mut t);
    t.finish(cx);
    s
}

/// A list of listening addresses: each once, none also in `taken` (another list's).
fn addresses(cx: &mut Cx, p: &str, v: &Value, taken: &[SocketAddr]) -> Vec<SocketAddr> {
    let Some(items) = as_str_list(cx, p, v, true) else {
        return Vec::new();
    };
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for (ip, a, span) in &items {
        let Some(addr) = socket_addr(cx, ip, a, span.clone()) else {
            continue;
        };
        // A second listener on one address cannot be bound.
        if addrs.contains(&addr) {
            cx.err(ip, span.clone(), format!("{addr} is listed twice"));
        } else if taken.contains(&addr) {
            cx.err(ip, span.clone(), format!("{addr} is also in server.listen"));
        } else {
            addrs.push(addr);
        }
    }
    if items.is_empty() {
        cx.err(p, v.span(), "needs at least one address");
    }
    addrs
}
