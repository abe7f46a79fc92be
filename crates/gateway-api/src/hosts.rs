//! Hostnames: a route's and its listener's intersected, as the Gateway API says
//! (HTTPRouteSpec.hostnames), written in Tollgate's spelling (the Gateway API's `*.x` covers
//! names of any depth: Tollgate's `**.x`).

/// What a route attached to a listener serves: `Some([])` every host, `Some(hosts)` these,
/// `None` no host at all (the route does not attach by hostname).
pub fn intersect(listener: Option<&str>, route: &[String]) -> Option<Vec<String>> {
    let route: Vec<String> = route.iter().map(|h| h.to_ascii_lowercase()).collect();
    let Some(l) = listener.map(str::to_ascii_lowercase) else {
        return Some(route.iter().map(|h| tollgate(h)).collect());
    };
    if route.is_empty() {
        return Some(vec![tollgate(&l)]);
    }
    let mut out: Vec<String> = Vec::new();
    for r in &route {
        let meet = match (suffix(&l), suffix(r)) {
            (None, None) => (*r == l).then(|| l.clone()),
            (None, Some(rs)) => covers(rs, &l).then(|| l.clone()),
            (Some(ls), None) => covers(ls, r).then(|| r.clone()),
            (Some(ls), Some(rs)) => {
                if rs == ls || covers(ls, rs) {
                    Some(r.clone())
                } else if covers(rs, ls) {
                    Some(l.clone())
                } else {
                    None
                }
            }
        };
        if let Some(m) = meet.map(|m| tollgate(&m)) {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `*.example.com` -> `example.com`.
fn suffix(h: &str) -> Option<&str> {
    h.strip_prefix("*.")
}

/// Whether `name` is below `parent` by one label or more.
fn covers(parent: &str, name: &str) -> bool {
    name.len() > parent.len() + 1
        && name.ends_with(parent)
        && name.as_bytes()[name.len() - parent.len() - 1] == b'.'
}

/// A Gateway API hostname as a Tollgate route host.
fn tollgate(h: &str) -> String {
    match suffix(h) {
        Some(s) => format!("**.{s}"),
        None => h.to_string(),
    }
}

/// The specificity of a Tollgate route host, most specific first: exact names, then
/// wildcards by the length of their suffix, then none (the Gateway API's precedence).
pub fn rank(host: Option<&str>) -> (u8, std::cmp::Reverse<usize>) {
    match host {
        Some(h) if h.starts_with("**.") => (1, std::cmp::Reverse(h.len())),
        Some(h) => (0, std::cmp::Reverse(h.len())),
        None => (2, std::cmp::Reverse(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::intersect;

    fn v(hs: &[&str]) -> Vec<String> {
        hs.iter().map(|s| s.to_string()).collect()
    }

    /// The cases of the spec's HTTPRouteSpec.hostnames and of the conformance test
    /// HTTPRouteHostnameIntersection.
    #[test]
    fn the_spec_s_intersections() {
        assert_eq!(intersect(None, &[]), Some(vec![]));
        assert_eq!(
            intersect(None, &v(&["a.com", "*.b.com"])),
            Some(v(&["a.com", "**.b.com"]))
        );
        assert_eq!(
            intersect(Some("very.specific.com"), &[]),
            Some(v(&["very.specific.com"]))
        );
        assert_eq!(
            intersect(
                Some("very.specific.com"),
                &v(&["non.matching.com", "*.specific.com"])
            ),
            Some(v(&["very.specific.com"]))
        );
        assert_eq!(
            intersect(
                Some("*.wildcard.io"),
                &v(&["bar.wildcard.io", "foo.bar.wildcard.io", "non.matching.com"])
            ),
            Some(v(&["bar.wildcard.io", "foo.bar.wildcard.io"]))
        );
        assert_eq!(intersect(Some("*.wildcard.io"), &v(&["wildcard.io"])), None);
        assert_eq!(
            intersect(Some("*.wildcard.io"), &v(&["*.foo.wildcard.io"])),
            Some(v(&["**.foo.wildcard.io"]))
        );
        assert_eq!(
            intersect(Some("*.foo.wildcard.io"), &v(&["*.wildcard.io"])),
            Some(v(&["**.foo.wildcard.io"]))
        );
        assert_eq!(
            intersect(Some("*.anotherwildcard.io"), &v(&["*.anotherwildcard.io"])),
            Some(v(&["**.anotherwildcard.io"]))
        );
        assert_eq!(intersect(Some("foo.com"), &v(&["bar.com"])), None);
        assert_eq!(intersect(Some("*.a.com"), &v(&["*.b.com"])), None);
        // A name cannot be its own wildcard's parent.
        assert_eq!(intersect(Some("a.com"), &v(&["*.a.com"])), None);
    }
}
