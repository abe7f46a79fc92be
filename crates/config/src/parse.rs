//! The walk from TOML text to [`Config`]: the orchestration only. Each table has its reader
//! (`server`, `jwt`, `plans`, `redis`, `tls`, `upstreams`, `routes`, `limits/`, `abuse`),
//! each reading its keys, checking them, and leaving unknown ones to be reported; this walk
//! calls them in order and joins what one table needs of another.

use crate::jwt::jwt;
use crate::limits::PlanMode;
use crate::model::*;
use crate::model::{AuthConfig, JwtSettings, LimitConfig, Plans, RouteConfig, ServerConfig};
use crate::plans::plans;
use crate::reader::{Cx, Problem, Tbl};
use crate::server::{server, server_defaults};
use std::path::Path;
use std::time::Duration;
use tollgate_limit::{Calendar, Rate};
use toml::de::DeTable;

/// `base`: the directory relative file names in the config (key files) are read from.
pub fn parse(text: &str, base: &Path, resolve: bool) -> Result<Config, Vec<Problem>> {
    let mut cx = Cx::new(text);
    cx.resolve = resolve;
    parse_in(cx, text, base)
}

/// An `import-ingress` output: checked as `tollgate check` does, its Secrets (mounted under
/// `mounted`) allowed to be absent here.
pub fn parse_import(text: &str, mounted: &'static str) -> Result<Config, Vec<Problem>> {
    let mut cx = Cx::new(text);
    cx.resolve = false;
    cx.mounted_elsewhere = Some(mounted);
    parse_in(cx, text, Path::new("."))
}

fn parse_in(mut cx: Cx, text: &str, base: &Path) -> Result<Config, Vec<Problem>> {
    let Some(doc) = document(&mut cx, text) else {
        return Err(cx.problems);
    };
    let mut root = Tbl::new(String::new(), doc.get_ref(), doc.span());

    let server = server_table(&mut cx, &mut root);
    cx.drops_underscores = !server.as_ref().is_some_and(|s| s.underscores_in_headers);
    let upstreams = table(&mut cx, &mut root, "upstreams", |cx, t| {
        crate::upstreams::read(cx, t, base)
    })
    .unwrap_or_default();
    let mut files = Vec::new();
    let redis_present = root.get("redis").is_some();
    let redis = table(&mut cx, &mut root, "redis", |cx, t| {
        crate::redis::read(cx, t, base, &mut files)
    })
    .flatten();
    let jwt_present = root.get("jwt").is_some();
    let jwt = table(&mut cx, &mut root, "jwt", |cx, t| {
        jwt(cx, t, base, &mut files)
    })
    .flatten();
    let plans_present = root.get("plans").is_some();
    let plans = table(&mut cx, &mut root, "plans", plans).flatten();
    let env = crate::limits::Env {
        redis: redis.as_ref(),
        redis_present,
        jwt_present,
        plans_present,
    };
    let (limits, mut variants) = limits_table(&mut cx, &mut root, &env, plans.as_ref());
    let weights: Vec<usize> = variants.iter().map(Vec::len).collect();
    let access = table(&mut cx, &mut root, "access", |cx, t| {
        crate::abuse::access(cx, t, base, &mut files)
    })
    .unwrap_or_default();
    let auth_env = crate::auth::Env { base, jwt_present };
    let mut auths = table(&mut cx, &mut root, "auth", |cx, t| {
        crate::auth::named(cx, t, &auth_env, &mut files)
    })
    .unwrap_or_default();
    let tables = crate::routes::Tables {
        upstreams: crate::routes::Named::new(&upstreams),
        limits: crate::routes::Named::new(&limits),
        weights: &weights,
        auth: &auth_env,
    };
    let routes = root.get("routes").map_or_else(Vec::new, |v| {
        crate::routes::read(&mut cx, v, &tables, &mut auths, &mut files)
    });
    let (tls, tls_passthrough) = tls_tables(&mut cx, &mut root, base, server.as_ref(), &tables);
    let mut made = Vec::new();
    let rls_env = crate::rls::Env { redis_present };
    let rls = table(&mut cx, &mut root, "rls", |cx, t| {
        crate::rls::read(cx, t, &limits, &weights, &rls_env, &mut made)
    })
    .flatten();
    let mut limits = limits;
    tree_limits(made, &mut limits, &mut variants);
    let tracing = table(&mut cx, &mut root, "tracing", crate::tracing::read).flatten();
    let tables = Read {
        server: server.as_ref(),
        tls: tls.as_ref(),
        rls: rls.as_ref(),
        routes: &routes,
        plans: plans.as_ref(),
        plans_present,
        jwt_present,
        jwt: jwt.as_ref(),
        auths: &auths,
    };
    across_tables(&mut cx, &tables);
    root.finish(&mut cx);

    if !cx.problems.is_empty() {
        cx.problems.sort_by_key(|p| p.line);
        return Err(cx.problems);
    }
    let server = server.unwrap_or_else(server_defaults);
    let (limits, routes) = expand_plans(limits, &variants, plans.as_ref(), routes);
    Ok(Config {
        server,
        upstreams: upstreams.into_iter().map(|(_, u)| u).collect(),
        routes,
        limits,
        redis,
        jwt,
        plans,
        access,
        tls,
        auth: auths.into_iter().flatten().collect(),
        files,
        rls,
        tracing,
        tls_passthrough,
    })
}

/// `[tls]` and `[[tls_passthrough]]` (which needs TLS listeners).
fn tls_tables(
    cx: &mut Cx,
    root: &mut Tbl,
    base: &Path,
    server: Option<&ServerConfig>,
    tables: &crate::routes::Tables,
) -> (Option<TlsConfig>, Vec<Passthrough>) {
    let tls = table(cx, root, "tls", |cx, t| crate::tls::read(cx, t, base));
    let listeners = server.is_none_or(|s| !s.tls_listen.is_empty());
    let passthrough = root.get("tls_passthrough").map_or_else(Vec::new, |v| {
        crate::passthrough::read(cx, v, &tables.upstreams, listeners)
    });
    (tls, passthrough)
}

/// `[server]`: an absent one is all defaults; one that is not a table is an error (None).
fn server_table(cx: &mut Cx, root: &mut Tbl) -> Option<ServerConfig> {
    match root.get("server") {
        Some(_) => table(cx, root, "server", server),
        None => Some(server_defaults()),
    }
}

/// Each `[limits]` entry by name, None where it did not read.
type Limits = Vec<(String, Option<LimitConfig>)>;

/// `[limits]`, and each limit's variants by plan.
fn limits_table<'a, 'i>(
    cx: &mut Cx,
    root: &mut Tbl<'a, 'i>,
    env: &crate::limits::Env,
    plans: Option<&Plans>,
) -> (Limits, Vec<Vec<usize>>) {
    let mut plan_modes = Vec::new();
    let limits = table(cx, root, "limits", |cx, t| {
        crate::limits::read(cx, t, env, &mut plan_modes)
    })
    .unwrap_or_default();
    let variants = plan_variants(&limits, &plan_modes, plans);
    (limits, variants)
}

/// The [[rls.domains]] nodes' limits, after the others: one variant each (no plans).
fn tree_limits(
    made: Vec<LimitConfig>,
    limits: &mut Vec<(String, Option<LimitConfig>)>,
    variants: &mut Vec<Vec<usize>>,
) {
    for m in made {
        variants.push(vec![usize::MAX]);
        limits.push((m.name.clone(), Some(m)));
    }
}

/// The document, or None (and the error) when the text is not TOML.
fn document<'i>(cx: &mut Cx, text: &'i str) -> Option<toml::Spanned<DeTable<'i>>> {
    match DeTable::parse(text) {
        Ok(doc) => Some(doc),
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            cx.err("", span, format!("not valid TOML: {}", e.message().trim()));
            None
        }
    }
}

/// What the checks across tables read of the tables read.
struct Read<'a> {
    server: Option<&'a ServerConfig>,
    tls: Option<&'a TlsConfig>,
    rls: Option<&'a RlsConfig>,
    routes: &'a [RouteConfig],
    plans: Option<&'a Plans>,
    plans_present: bool,
    jwt_present: bool,
    jwt: Option<&'a JwtSettings>,
    auths: &'a [Option<AuthConfig>],
}

/// The checks that need more than one table: the RLS's TLS needs `[tls]`, the listeners the
/// routes need, plans need `[jwt]`, and the identity provider's tokens.
fn across_tables(cx: &mut Cx, r: &Read) {
    if r.rls.is_some_and(|x| x.tls) && r.tls.is_none() {
        cx.err(
            "rls.tls",
            0..0,
            "the rate limit service's TLS uses [tls]'s certificates: add a [tls] section",
        );
    }
    if let Some(s) = r.server {
        listeners_check(cx, s, r.tls.is_some(), r.routes);
    }
    if r.plans_present && !r.jwt_present {
        plans_jwt_check(cx, r.plans);
    }
    provider_tokens_check(cx, r.jwt, r.auths);
}

/// Reads the table `name` with `read` when the document has one (`None` when absent or not a
/// table: that error is already reported).
fn table<'a, 'i, T>(
    cx: &mut Cx,
    root: &mut Tbl<'a, 'i>,
    name: &str,
    read: impl FnOnce(&mut Cx, Tbl<'a, 'i>) -> T,
) -> Option<T> {
    let v = root.get(name)?;
    Tbl::of(cx, name.into(), v).map(|t| read(cx, t))
}

/// A plan limit becomes one variant per plan that defines its rate (or quota); any other limit
/// is one variant (`usize::MAX`).
fn plan_variants(
    limits: &[(String, Option<LimitConfig>)],
    plan_modes: &[(String, PlanMode)],
    plans: Option<&Plans>,
) -> Vec<Vec<usize>> {
    limits
        .iter()
        .map(
            |(name, _)| match plan_modes.iter().find(|(n, _)| n == name) {
                Some((_, mode)) => plans.map_or(Vec::new(), |p| {
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
        .collect()
}

/// TLS listeners and certificates come together; redirects to HTTPS need somewhere to go.
fn listeners_check(cx: &mut Cx, s: &ServerConfig, tls: bool, routes: &[RouteConfig]) {
    match (tls, s.tls_listen.is_empty()) {
        (false, false) => cx.err(
            "server.tls_listen",
            0..0,
            "TLS listeners need certificates: add a [tls] section",
        ),
        // (Unless tls_listen was given and is wrong: that error says enough.)
        (true, true)
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

/// An identity provider (`jwks_url`) signs tokens for other applications and tenants too: when
/// its tokens let requests pass a route (`auth = { jwt = ... }`), the issuer and the audience
/// they were made for must be checked.
fn provider_tokens_check(cx: &mut Cx, jwt: Option<&JwtSettings>, auths: &[Option<AuthConfig>]) {
    let Some(j) = jwt.filter(|j| j.remote.is_some()) else {
        return;
    };
    let authenticates = auths
        .iter()
        .flatten()
        .any(|a| matches!(a.method, AuthMethod::Jwt(_)));
    if authenticates && (j.issuer.is_none() || j.audience.is_none()) {
        cx.err(
            "jwt.jwks_url",
            0..0,
            "tokens from an identity provider let requests through auth = { jwt = ... }: set [jwt] issuer and audience (the provider signs tokens for other applications too)",
        );
    }
}

/// Plans keyed by a `jwt:` claim need the `[jwt]` table that verifies it.
fn plans_jwt_check(cx: &mut Cx, plans: Option<&Plans>) {
    let reads_jwt = plans.is_some_and(|p| {
        p.from
            .as_ref()
            .or(p.tenant.as_ref())
            .is_some_and(|k| matches!(k, KeySource::Jwt(_)))
    });
    if reads_jwt {
        cx.err(
            "plans",
            0..0,
            "plans read a jwt: claim: add a [jwt] section",
        );
    }
}

/// Expand plan limits into their variants and point routes at them.
fn expand_plans(
    limits: Vec<(String, Option<LimitConfig>)>,
    variants: &[Vec<usize>],
    plans: Option<&Plans>,
    routes: Vec<RouteConfig>,
) -> (Vec<LimitConfig>, Vec<RouteConfig>) {
    let mut expanded: Vec<LimitConfig> = Vec::new();
    let mut new_index: Vec<Vec<usize>> = Vec::new();
    for ((_, l), vars) in limits.into_iter().zip(variants) {
        let Some(l) = l else {
            new_index.push(Vec::new());
            continue;
        };
        let mut ids = Vec::new();
        for &v in vars {
            let mut c = l.clone();
            if let Some(p) = plans.filter(|_| v != usize::MAX) {
                plan_variant(&mut c, &l, &p.defs[v], v);
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
    (expanded, routes)
}

/// One plan's variant of a plan limit: its quota (for a calendar limit) or its rate.
fn plan_variant(c: &mut LimitConfig, l: &LimitConfig, def: &PlanDef, v: usize) {
    c.plan = Some(v);
    if let Some((n, unit)) = def.quota.filter(|_| l.calendar.is_some()) {
        c.burst = n;
        c.rate = Rate::new(n, Duration::from_secs(unit.nominal_secs())).unwrap_or(c.rate);
        c.calendar = l.calendar.map(|cal| Calendar { unit, ..cal });
    } else if let Some(r) = def.rate {
        c.rate = r;
        c.burst = def.burst;
    }
}
