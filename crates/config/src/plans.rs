//! `[plans]`: the plans callers belong to (by a key source's value or a tenant table), each
//! with its rate, burst and quota for the limits marked `plan = ...`.

use crate::limits::{key_source, script_exact};
use crate::model::Plans;
use crate::model::*;
use crate::reader::{as_int_in, as_str, join, Cx, Tbl, Value};
use crate::scalars::{list_or_none, parse_quota};
use crate::values::parse_rate;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Rate};

/// Plan names that are settings of [plans], not plans.
const PLAN_SETTINGS: [&str; 4] = ["default", "from", "tenant", "tenants"];

pub(crate) fn plans(cx: &mut Cx, mut t: Tbl) -> Option<Plans> {
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
        let (def, def_ok) = plan(cx, &mut pt, &path);
        ok &= def_ok;
        pt.finish(cx);
        names.push(name.to_string());
        defs.push(def);
    }
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
    let from = source(cx, &mut t, "from", &mut ok);
    let tenant = source(cx, &mut t, "tenant", &mut ok);
    let tenants = tenants(cx, &mut t, &names, tenant.is_some(), &mut ok);
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

/// One plan's table: its rate and burst, its quota, at least one of them; numbers a global
/// limit's script keeps exact. The definition, and whether it is whole.
fn plan(cx: &mut Cx, pt: &mut Tbl, path: &str) -> (PlanDef, bool) {
    let mut ok = true;
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
        Some(bv) => as_int_in(cx, &pt.key_path("burst"), bv, 1, 1_000_000_000).map(|n| n as u64),
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
            path,
            pt.span.clone(),
            "a plan needs a rate, a quota or both",
        );
        ok = false;
    }
    // A plan's numbers may feed a global limit: they must be exact in its script.
    if let (Some(r), Some(b)) = (rate, burst) {
        script_exact(
            cx,
            pt,
            "rate",
            AlgorithmKind::TokenBucket,
            r,
            b,
            "too large",
        );
    }
    if let Some((n, unit)) = quota {
        if let Ok(r) = Rate::new(n, Duration::from_secs(unit.nominal_secs())) {
            script_exact(cx, pt, "quota", AlgorithmKind::Quota, r, n, "too large");
        }
    }
    let def = PlanDef {
        rate,
        burst: burst.unwrap_or(1),
        quota,
    };
    (def, ok)
}

/// A plan named at `p`: its index among the defined plans.
fn plan_index(cx: &mut Cx, p: &str, v: &Value, names: &[String]) -> Option<usize> {
    let s = as_str(cx, p, v)?;
    let i = names.iter().position(|n| n == s);
    if i.is_none() {
        let known: Vec<_> = names.iter().map(String::as_str).collect();
        cx.err(
            p,
            v.span(),
            format!("unknown plan \"{s}\" (defined: {})", list_or_none(&known)),
        );
    }
    i
}

/// `from` / `tenant`: the key source a caller's plan (or tenant) is read from.
fn source(cx: &mut Cx, t: &mut Tbl, k: &str, ok: &mut bool) -> Option<KeySource> {
    let v = t.get(k)?;
    let p = t.key_path(k);
    let s = as_str(cx, &p, v)?;
    match key_source(cx, &p, s, v.span()) {
        Some(
            ks @ (KeySource::Header(_)
            | KeySource::Query(_)
            | KeySource::Jwt(_)
            | KeySource::Consumer),
        ) => Some(ks),
        Some(_) => {
            cx.err(
                &p,
                v.span(),
                "a plan or tenant is read from header:NAME, query:NAME, jwt:CLAIM or consumer",
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

/// `tenants`: tenant name -> plan, read from the key source `tenant` names.
fn tenants(
    cx: &mut Cx,
    t: &mut Tbl,
    names: &[String],
    tenant: bool,
    ok: &mut bool,
) -> Vec<(String, usize)> {
    let mut tenants = Vec::new();
    let Some(v) = t.get("tenants") else {
        return tenants;
    };
    if let Some(mut tt) = Tbl::of(cx, t.key_path("tenants"), v) {
        for (tenant_name, pv, _) in tt.entries() {
            let p = join(&tt.path, tenant_name);
            if let Some(i) = plan_index(cx, &p, pv, names) {
                tenants.push((tenant_name.to_string(), i));
            } else {
                *ok = false;
            }
        }
        tt.finish(cx);
    }
    if !tenant {
        cx.err(
            &t.key_path("tenants"),
            v.span(),
            "tenants needs tenant = (a key source naming the caller's tenant)",
        );
        *ok = false;
    }
    tenants
}
