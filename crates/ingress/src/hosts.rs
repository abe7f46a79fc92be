//! Ingress rule hosts, checked as Kubernetes checks them: a DNS-1123 subdomain in lower case,
//! or `*.` and one, for a one-label wildcard. A placeholder left in from documentation
//! (`<your-host>`, `__INGRESS_HOST__`) or an address is not a host.

/// `server-alias`: an alias that is a rule host of any Ingress, or an alias of an earlier
/// one, is left out (ingress-nginx adds an alias to one server only, never over a host).
pub(super) fn aliases(
    ings: &[super::objects::Ingress],
    settings: &mut [super::settings::Settings],
    w: &mut super::text::Warnings,
) {
    let hosts: std::collections::BTreeSet<&str> = ings
        .iter()
        .flat_map(|i| i.rules.iter().filter_map(|r| r.host.as_deref()))
        .collect();
    let mut taken = std::collections::BTreeSet::new();
    for (ing, s) in ings.iter().zip(settings.iter_mut()) {
        let exact: std::collections::BTreeSet<&str> = ing
            .rules
            .iter()
            .filter_map(|r| r.host.as_deref())
            .filter(|h| !h.starts_with('*'))
            .collect();
        if s.edge.www_redirect && exact.is_empty() {
            w.push(format!(
                "{}: from-to-www-redirect needs a rule host (not a wildcard): left out",
                ing.ctx
            ));
            s.edge.www_redirect = false;
        }
        if s.edge.aliases.is_empty() {
            continue;
        }
        let Some(first) = ing
            .rules
            .iter()
            .filter_map(|r| r.host.as_deref())
            .find(|h| !h.starts_with('*'))
        else {
            w.push(format!(
                "{}: server-alias on an Ingress without a rule host: left out",
                ing.ctx
            ));
            s.edge.aliases.clear();
            continue;
        };
        if exact.len() > 1 {
            w.push(format!(
                "{}: server-alias names more hosts for {first} only (the Ingress's first host)",
                ing.ctx
            ));
        }
        s.edge.alias_of = Some(first.to_string());
        s.edge.aliases.retain(|a| {
            let why = if hosts.contains(a.as_str()) {
                "is a host of an Ingress rule"
            } else if !taken.insert(a.clone()) {
                "is an alias of an earlier Ingress already"
            } else {
                return true;
            };
            w.push(format!(
                "{}: server-alias {a} {why}: left out (as by ingress-nginx)",
                ing.ctx
            ));
            false
        });
        if s.edge.www_redirect && !s.edge.aliases.is_empty() {
            w.push(format!("{}: from-to-www-redirect with server-alias: a route with several names has no one name to redirect to; the www redirect is left out", ing.ctx));
            s.edge.www_redirect = false;
        }
    }
}
