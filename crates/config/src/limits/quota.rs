//! Quotas: `quota = "N/period"` on the calendar (`utc_offset`, `upgrade_url`), and what a
//! quota does past its count (`overage`, `soft_limit_percent`, `throttle_rate`).

use super::{Draft, PlanMode};
use crate::model::*;
use crate::reader::{as_int_in, as_str, Cx, Tbl};
use crate::scalars::{parse_quota, parse_utc_offset};
use crate::values::parse_rate;
use std::time::Duration;
use tollgate_limit::{AlgorithmKind, Calendar, CalendarUnit, Rate};

/// `quota`, its calendar and upgrade URL; a plan's quota is a placeholder filled per plan.
pub(super) fn quota(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft) {
    let plan_mode = d.plan_mode;
    let algorithm = d.algorithm;
    let rate = d.rate;
    // A quota: N per calendar period; counted like a fixed window on the calendar.
    let mut calendar = None;
    let mut upgrade_url = None;
    let quota_value = match plan_mode {
        Some(PlanMode::Quota) => None,
        _ => l.get("quota"),
    };
    let (algorithm, rate) = match quota_value {
        Some(qv) => own_quota(cx, l, qv, &mut calendar, &mut upgrade_url),
        None if plan_mode == Some(PlanMode::Quota) => {
            plan_quota(cx, l, &mut calendar, &mut upgrade_url)
        }
        None => {
            for k in ["utc_offset", "upgrade_url"] {
                if let Some(v) = l.get(k) {
                    cx.err(
                        &l.key_path(k),
                        v.span(),
                        format!("{k} applies only to a quota"),
                    );
                }
            }
            (algorithm, rate)
        }
    };
    d.algorithm = algorithm;
    d.rate = rate;
    d.calendar = calendar;
    d.upgrade_url = upgrade_url;
}

type Shape = (Option<AlgorithmKind>, Option<Rate>);

/// The limit's own `quota = "N/period"`: no rate, algorithm or burst beside it.
fn own_quota(
    cx: &mut Cx,
    l: &mut Tbl<'_, '_>,
    qv: &crate::reader::Value,
    calendar: &mut Option<Calendar>,
    upgrade_url: &mut Option<String>,
) -> Shape {
    let qp = l.key_path("quota");
    let mut ok = true;
    if let Some(rv) = l.get("rate") {
        cx.err(
            &l.key_path("rate"),
            rv.span(),
            "set either rate or quota, not both",
        );
        ok = false;
    }
    for k in ["algorithm", "burst"] {
        if let Some(v) = l.get(k) {
            cx.err(
                &l.key_path(k),
                v.span(),
                format!("{k} does not apply to a quota (N per calendar period)"),
            );
            ok = false;
        }
    }
    let offset = match l.get("utc_offset") {
        Some(v) => {
            let p = l.key_path("utc_offset");
            as_str(cx, &p, v).and_then(|s| match parse_utc_offset(s) {
                Some(o) => Some(o),
                None => {
                    cx.err(&p, v.span(), format!("\"{s}\" is not a UTC offset: write \"+HH:MM\" or \"-HH:MM\", e.g. \"+02:00\""));
                    None
                }
            })
        }
        None => Some(0),
    };
    if let Some(v) = l.get("upgrade_url") {
        *upgrade_url = as_str(cx, &l.key_path("upgrade_url"), v).map(str::to_string);
    }
    let q = as_str(cx, &qp, qv).and_then(|s| match parse_quota(s) {
        Some(q) => Some(q),
        None => {
            cx.err(&qp, qv.span(), format!("\"{s}\" is not a quota: write N/day, N/week, N/month or N/year, e.g. \"10000/month\""));
            None
        }
    });
    match (q, offset, ok) {
        (Some((n, unit)), Some(offset_secs), true) => {
            *calendar = Some(Calendar { unit, offset_secs });
            (
                Some(AlgorithmKind::Quota),
                Rate::new(n, Duration::from_secs(unit.nominal_secs())).ok(),
            )
        }
        _ => (None, None),
    }
}

/// A plan limit's quota (`plan = ... ` with quotas): placeholders each plan's variant fills
/// with the plan's quota and period.
fn plan_quota(
    cx: &mut Cx,
    l: &mut Tbl<'_, '_>,
    calendar: &mut Option<Calendar>,
    upgrade_url: &mut Option<String>,
) -> Shape {
    let offset = match l.get("utc_offset") {
        Some(v) => {
            let p = l.key_path("utc_offset");
            match as_str(cx, &p, v).map(parse_utc_offset) {
                Some(Some(o)) => Some(o),
                Some(None) => {
                    cx.err(
                        &p,
                        v.span(),
                        "not a UTC offset: write \"+HH:MM\" or \"-HH:MM\", e.g. \"+02:00\"",
                    );
                    None
                }
                None => None,
            }
        }
        None => Some(0),
    };
    if let Some(v) = l.get("upgrade_url") {
        *upgrade_url = as_str(cx, &l.key_path("upgrade_url"), v).map(str::to_string);
    }
    // Placeholders: each plan's variant gets the plan's quota and period.
    *calendar = offset.map(|offset_secs| Calendar {
        unit: CalendarUnit::Month,
        offset_secs,
    });
    (
        Some(AlgorithmKind::Quota),
        Rate::new(1, Duration::from_secs(CalendarUnit::Month.nominal_secs())).ok(),
    )
}

/// `overage` and the keys of its modes.
pub(super) fn overage(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft) {
    let calendar = d.calendar;
    let overage = match (l.get("overage"), calendar.is_some()) {
        (Some(v), false) => {
            cx.err(
                &l.key_path("overage"),
                v.span(),
                "overage applies only to a quota",
            );
            None
        }
        (Some(v), true) => {
            let p = l.key_path("overage");
            match as_str(cx, &p, v) {
                Some("hard") => Some(Overage::Hard),
                Some("soft") => match l.get("soft_limit_percent") {
                    Some(pv) => as_int_in(cx, &l.key_path("soft_limit_percent"), pv, 1, 1000)
                        .map(|n| Overage::Soft(n as u32)),
                    None => Some(Overage::Soft(10)),
                },
                Some("overage") => Some(Overage::Count),
                Some("throttle") => match l.get("throttle_rate") {
                    Some(rv) => {
                        let rp = l.key_path("throttle_rate");
                        as_str(cx, &rp, rv).and_then(|s| match parse_rate(s) {
                            Ok(r) => Some(Overage::Throttle(r)),
                            Err(e) => {
                                cx.err(&rp, rv.span(), e);
                                None
                            }
                        })
                    }
                    None => {
                        cx.err(&p, v.span(), "overage \"throttle\" needs throttle_rate (e.g. throttle_rate = \"1/s\")");
                        None
                    }
                },
                Some(other) => {
                    cx.err(
                        &p,
                        v.span(),
                        format!("unknown overage \"{other}\" (hard, soft, overage or throttle)"),
                    );
                    None
                }
                None => None,
            }
        }
        (None, _) => Some(Overage::Hard),
    };
    let want = |o: &Option<Overage>, k: &str| {
        matches!(
            (k, o),
            ("soft_limit_percent", Some(Overage::Soft(_)))
                | ("throttle_rate", Some(Overage::Throttle(_)))
        )
    };
    for k in ["soft_limit_percent", "throttle_rate"] {
        if let Some(v) = l.get(k) {
            if !want(&overage, k) && overage.is_some() {
                let which = if k == "throttle_rate" {
                    "throttle"
                } else {
                    "soft"
                };
                cx.err(
                    &l.key_path(k),
                    v.span(),
                    format!("{k} applies only to overage = \"{which}\""),
                );
            }
        }
    }
    d.overage = overage;
}
