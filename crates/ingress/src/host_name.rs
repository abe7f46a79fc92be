//! Host names as an Ingress writes them: a rule's host (lower-cased, one trailing dot off, a
//! `*.` wildcard only as its first label), and whether a TLS host covers a rule's.

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
