//! Ingress rule hosts, checked as Kubernetes checks them: a DNS-1123 subdomain in lower case,
//! or `*.` and one, for a one-label wildcard. A placeholder left in from documentation
//! (`<your-host>`, `__INGRESS_HOST__`) or an address is not a host.

/// The host as routes name it (lower case, no trailing dot), or why it is not one.
pub(super) fn rule_host(raw: &str) -> Result<String, String> {
    let h = raw.trim().to_ascii_lowercase();
    let h = h.strip_suffix('.').unwrap_or(&h);
    if h.parse::<std::net::IpAddr>().is_ok() {
        return Err("an IP address is not an Ingress host (Kubernetes refuses it)".into());
    }
    let (wild, name) = match h.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, h),
    };
    if !dns_subdomain(name) {
        return Err(if name.contains('*') {
            "a wildcard is one \"*\" as the whole first label".into()
        } else {
            "not a DNS name (lower-case letters, digits, \"-\" and \".\")".into()
        });
    }
    if wild && !name.contains('.') {
        // `*.com`: Kubernetes allows it, but no Tollgate route should take a whole TLD.
        return Err("a wildcard over a top-level domain".into());
    }
    Ok(if wild {
        format!("*.{name}")
    } else {
        name.into()
    })
}

/// RFC 1123 subdomain: labels of 1 to 63 letters, digits and inner hyphens; 253 at most.
fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// A TLS host (`spec.tls[].hosts`, maybe `*.example.com`) names this rule host.
pub(super) fn tls_covers(tls_host: &str, host: &str) -> bool {
    match tls_host.strip_prefix("*.") {
        Some(parent) => {
            host == tls_host
                || host
                    .split_once('.')
                    .is_some_and(|(first, rest)| !first.is_empty() && rest == parent)
        }
        None => tls_host == host,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_addresses_and_bad_wildcards_are_not_hosts() {
        for bad in [
            "registry.<your domain>",
            "__INGRESS_HOST__",
            "-bad-.example.com",
            "a..b",
            "10.1.2.3",
            "::1",
            "*.*.bar.com",
            "foo.*.com",
            "*",
            "*.com",
            "evil.com\"\n[server]",
            "",
        ] {
            assert!(rule_host(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            rule_host("Registry.Example.COM.").as_deref(),
            Ok("registry.example.com")
        );
        assert_eq!(rule_host("*.foo.com").as_deref(), Ok("*.foo.com"));
    }

    #[test]
    fn a_wildcard_certificate_covers_one_label() {
        assert!(tls_covers("*.foo.com", "a.foo.com"));
        assert!(tls_covers("*.foo.com", "*.foo.com"));
        assert!(!tls_covers("*.foo.com", "a.b.foo.com"));
        assert!(!tls_covers("*.foo.com", "foo.com"));
    }
}
