//! Stage 5: which routes lose a protection. A route is covered by its Ingress's refusals, and
//! by the host-wide ones (`server-snippet`) of every Ingress that names its host. Covered
//! routes answer 403 and are listed (the command exits 3), or with `--allow-insecure` are
//! served and listed as unprotected; either way each Ingress is named once.

use super::anns::Refusal;
use super::objects::Ingress;
use super::routes::{Action, Route};
use super::settings::Settings;
use super::text::{unique, Warnings};
use super::Denied;
use std::collections::HashMap;

/// The refusals covering each route (empty: served as translated).
pub(super) fn decide(
    ings: &[Ingress],
    settings: &[Settings],
    routes: &mut [Route],
    allow_insecure: bool,
    w: &mut Warnings,
) -> Vec<Vec<Refusal>> {
    // The Ingresses with host-wide refusals, by each host they name (in Ingress order): a
    // route looks its host up once instead of scanning every Ingress (5,000 Ingresses made
    // that scan 15,000 x 5,000 host comparisons).
    let mut by_host: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
    for (i, (ing, s)) in ings.iter().zip(settings).enumerate() {
        if s.host_refusals.is_empty() {
            continue;
        }
        for rule in &ing.rules {
            let v = by_host.entry(rule.host.as_deref()).or_default();
            if v.last() != Some(&i) {
                v.push(i);
            }
        }
    }
    let mut out = Vec::with_capacity(routes.len());
    for r in routes.iter_mut() {
        let mut covering: Vec<Refusal> = settings[r.ing].refusals.clone();
        let named = by_host.get(&r.host.as_deref()).map_or(&[][..], |v| &v[..]);
        // Its own Ingress, and every Ingress naming its host, once each, in Ingress order.
        let own =
            (!settings[r.ing].host_refusals.is_empty() && !named.contains(&r.ing)).then_some(r.ing);
        let mut which: Vec<usize> = named.iter().copied().chain(own).collect();
        which.sort_unstable();
        for i in which {
            let (ing, s) = (&ings[i], &settings[i]);
            for h in &s.host_refusals {
                covering.push(Refusal {
                    annotation: h.annotation.clone(),
                    why: format!("{} of {}: {}", h.annotation, ing.ctx, h.why),
                });
            }
        }
        if !covering.is_empty() {
            let names = annotations(&covering);
            let whys = unique(covering.iter().map(|c| c.why.as_str())).join("; ");
            if allow_insecure {
                w.push(format!(
                    "{}: {} ({whys}): dropped (--allow-insecure): its routes are served without this protection",
                    r.ctx,
                    names.join(", ")
                ));
            } else {
                w.push(format!(
                    "{}: {} ({whys}): its routes answer 403 until you decide (docs/ingress-nginx.md); --allow-insecure serves them without this protection",
                    r.ctx,
                    names.join(", ")
                ));
                // A canary of a route that answers 403 has nothing to do.
                if let Action::Proxy { canary, .. } = &mut r.action {
                    *canary = None;
                }
            }
        }
        out.push(covering);
    }
    out
}

/// The annotations named, sorted, once each.
pub(super) fn annotations(refusals: &[Refusal]) -> Vec<String> {
    let mut v: Vec<String> = refusals.iter().map(|r| r.annotation.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// The list `Imported` reports.
pub(super) fn listed(routes: &[Route], covering: &[Vec<Refusal>]) -> Vec<Denied> {
    routes
        .iter()
        .zip(covering)
        .filter(|(_, c)| !c.is_empty())
        .map(|(r, c)| Denied {
            route: r.name.clone(),
            annotations: annotations(c),
        })
        .collect()
}
