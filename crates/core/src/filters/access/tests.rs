use super::*;

fn nets(s: &[&str]) -> Vec<IpNet> {
    s.iter().map(|n| n.parse().expect("net")).collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn ranges_merge_and_match_at_their_edges() {
    let set = IpSet::new(&nets(&[
        "10.0.0.0/8",
        "10.1.0.0/16",
        "11.0.0.0/8",
        "192.0.2.0/24",
        "2001:db8::/32",
        "::ffff:198.51.100.0/120",
    ]));
    assert_eq!(set.ranges(), 4, "10/8 + 11/8 merge, 10.1/16 inside");
    for yes in [
        "10.0.0.0",
        "11.255.255.255",
        "192.0.2.0",
        "192.0.2.255",
        "2001:db8::1",
        "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        "198.51.100.7",
    ] {
        assert!(set.contains(ip(yes)), "{yes}");
    }
    for no in [
        "9.255.255.255",
        "12.0.0.0",
        "192.0.3.0",
        "192.0.1.255",
        "2001:db9::",
        "::1",
        "0.0.0.0",
    ] {
        assert!(!set.contains(ip(no)), "{no}");
    }
    assert!(!IpSet::new(&[]).contains(ip("1.2.3.4")));
    let all = IpSet::new(&nets(&["::/0"]));
    assert!(all.contains(ip("::")) && all.contains(ip("ffff::1")) && all.contains(ip("1.2.3.4")));
}

/// `only_from` (ingress-nginx's whitelist-source-range): outside it nothing passes, not
/// even the allow list; inside it the client is merely unlisted (its limits still apply).
/// A route's `only_from` narrows the server's, never widens it.
#[test]
fn only_from_bounds_everything_and_narrows_across_lists() {
    let server = AccessConfig {
        only_from: nets(&["10.0.0.0/8", "2001:db8::/32"]),
        allow: nets(&["192.0.2.1/32"]),
        ..AccessConfig::default()
    };
    let route = AccessConfig {
        only_from: nets(&["10.1.0.0/16"]),
        ..AccessConfig::default()
    };
    let none = http::HeaderMap::new();
    let a = AccessRt::build(&server, None).expect("lists");
    assert_eq!(a.check(ip("10.9.9.9"), &none), Access::Unlisted);
    assert_eq!(a.check(ip("2001:db8::5"), &none), Access::Unlisted);
    assert_eq!(a.check(ip("::ffff:10.9.9.9"), &none), Access::Unlisted);
    for outside in ["11.0.0.1", "192.0.2.1", "::1", "2001:db9::1"] {
        assert_eq!(
            a.check(ip(outside), &none),
            Access::Denied(DenyReason::Ip),
            "{outside}"
        );
    }
    let both = AccessRt::build(&server, Some(&route)).expect("lists");
    assert_eq!(both.check(ip("10.1.2.3"), &none), Access::Unlisted);
    assert_eq!(
        both.check(ip("10.2.0.1"), &none),
        Access::Denied(DenyReason::Ip)
    );
}

#[test]
fn rules_apply_in_order() {
    let server = AccessConfig {
        deny: nets(&["198.51.100.0/24", "2001:db8::/32"]),
        allow: nets(&["198.51.100.7/32"]),
        deny_user_agents: vec!["BadBot/1.0".into(), "Scraper*".into()],
        allow_api_keys: vec!["sk_partner_*".into()],
        api_key_header: None,
        only_from: Vec::new(),
    };
    let a = AccessRt::build(&server, None).expect("lists");
    let h = |ua: &str, key: &str| {
        let mut m = http::HeaderMap::new();
        m.insert("user-agent", ua.parse().expect("ua"));
        if !key.is_empty() {
            m.insert("x-api-key", key.parse().expect("key"));
        }
        m
    };
    let c = ip("203.0.113.1");
    assert_eq!(a.check(c, &h("curl/8", "")), Access::Unlisted);
    assert_eq!(
        a.check(ip("198.51.100.9"), &h("curl/8", "sk_partner_x")),
        Access::Denied(DenyReason::Ip),
        "a key never overrides a deny"
    );
    assert_eq!(
        a.check(ip("198.51.100.7"), &h("Scraper", "")),
        Access::Allowed(AllowReason::Ip),
        "an allowed address is carved out of the deny"
    );
    assert_eq!(
        a.check(c, &h("scraperbot/2", "")),
        Access::Denied(DenyReason::UserAgent)
    );
    assert_eq!(
        a.check(c, &h("BadBot/1.0", "")),
        Access::Denied(DenyReason::UserAgent)
    );
    assert_eq!(
        a.check(c, &h("BadBot/1.01", "")),
        Access::Unlisted,
        "whole value"
    );
    assert_eq!(
        a.check(c, &h("x", "sk_partner_abc")),
        Access::Allowed(AllowReason::ApiKey)
    );
    assert_eq!(
        a.check(c, &h("x", "SK_PARTNER_abc")),
        Access::Unlisted,
        "keys are exact"
    );
    assert_eq!(a.check(c, &h("x", "sk_live_abc")), Access::Unlisted);
    // A route adds its own lists.
    let route = AccessConfig {
        deny: nets(&["203.0.113.0/24"]),
        ..Default::default()
    };
    let r = AccessRt::build(&server, Some(&route)).expect("lists");
    assert_eq!(r.check(c, &h("x", "")), Access::Denied(DenyReason::Ip));
    assert!(AccessRt::build(&AccessConfig::default(), None).is_none());
}
