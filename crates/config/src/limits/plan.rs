//! `plan = "rate" | "quota"`: the limit's numbers come from the caller's plan (`[plans]`).

use super::{Draft, Env, PlanMode};
use crate::reader::{as_str, Cx, Tbl};
use tollgate_limit::Rate;

/// `plan`; the limit's own `rate`, `burst` and `quota` are then refused.
pub(super) fn read(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft, env: &Env) {
    let rate = d.rate;
    let plans_present = env.plans_present;
    // From the caller's plan: the rate (and burst) or the quota is the plan's.
    let plan_mode = match l.get("plan") {
        Some(v) => {
            let p = l.key_path("plan");
            let mode = match as_str(cx, &p, v) {
                Some("rate") => Some(PlanMode::Rate),
                Some("quota") => Some(PlanMode::Quota),
                Some(other) => {
                    cx.err(&p, v.span(), format!("unknown plan \"{other}\": write plan = \"rate\" (the plan's rate and burst) or plan = \"quota\" (the plan's quota)"));
                    None
                }
                None => None,
            };
            if !plans_present && mode.is_some() {
                cx.err(
                    &p,
                    v.span(),
                    "plan reads the caller's plan: add a [plans] section",
                );
            }
            for k in ["rate", "burst", "quota"] {
                if let (Some(_), Some(kv)) = (mode, l.get(k)) {
                    cx.err(
                        &l.key_path(k),
                        kv.span(),
                        format!("{k} comes from the caller's plan here (plan = ...): remove it"),
                    );
                }
            }
            mode
        }
        None => None,
    };
    let rate = match plan_mode {
        Some(_) => Rate::per_second(1).ok(),
        None => rate,
    };
    d.plan_mode = plan_mode;
    d.rate = rate;
}
