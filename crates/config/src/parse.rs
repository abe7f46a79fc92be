//! The walk from TOML text to [`Config`]: the orchestration only. Each table has its reader
//! (`server`, `jwt`, `plans`, `redis`, `tls`, `upstreams`, `routes`, `limits/`, `abuse`),
//! each reading its keys, checking them, and leaving unknown ones to be reported; this walk
//! calls them in order and joins what one table needs of another.

use crate::jwt::jwt;
use crate::limits::PlanMode;
use crate::plans::plans;
use crate::reader::{Cx, Problem, Tbl};
use crate::server::{server, server_defaults};
use crate::types::*;
use std::path::Path;
use std::time::Duration;
use tollgate_limit::{Calendar, Rate};
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
