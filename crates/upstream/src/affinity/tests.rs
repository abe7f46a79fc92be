use super::*;
use std::time::Duration;

fn req(cookies: &[&str]) -> pingora::http::RequestHeader {
    let mut r = pingora::http::RequestHeader::build("GET", b"/a?x=1", None).expect("req");
    for c in cookies {
        r.append_header("cookie", *c).expect("cookie");
    }
    r
}

fn aff(secret: Option<&str>) -> Affinities {
    Affinities::new(
        "app",
        &Affinity {
            cookie: "route".into(),
            max_age: Some(Duration::from_secs(3600)),
            path: "/".into(),
            secure: None,
            secret: secret.map(str::to_string),
        },
    )
}

#[test]
fn a_cookie_names_only_a_target_the_gateway_signed() {
    let a = aff(Some("0123456789abcdef0123"));
    let v = a.value(42);
    assert_eq!(v.len(), COOKIE_LEN);
    assert_eq!(a.pinned(&req(&[&format!("route={v}")])), Some(42));
    assert_eq!(a.pinned(&req(&[&format!("x=1; route={v}; y=2")])), Some(42));
    // Another id with the same tag, a flipped tag digit, an oversized or short value.
    let forged = format!("{:016x}{}", 43, &v[16..]);
    assert_eq!(a.pinned(&req(&[&format!("route={forged}")])), None);
    let mut flipped = v.clone().into_bytes();
    flipped[COOKIE_LEN - 1] = if flipped[COOKIE_LEN - 1] == b'0' {
        b'1'
    } else {
        b'0'
    };
    let flipped = String::from_utf8(flipped).expect("ascii");
    assert_eq!(a.pinned(&req(&[&format!("route={flipped}")])), None);
    assert_eq!(
        a.pinned(&req(&[&format!("route={v}{}", "0".repeat(4000))])),
        None
    );
    assert_eq!(a.pinned(&req(&["route=0000000000000001.00"])), None);
    // Given twice (in one field or two): names nothing.
    assert_eq!(a.pinned(&req(&[&format!("route={v}; route={v}")])), None);
    assert_eq!(
        a.pinned(&req(&[&format!("route={v}"), &format!("route={v}")])),
        None
    );
    // Another upstream's or another secret's cookie is not this one's.
    assert_eq!(
        aff(Some("another secret, long")).pinned(&req(&[&format!("route={v}")])),
        None
    );
    let other = Affinities::new("other", &a.cfg);
    assert_eq!(other.pinned(&req(&[&format!("route={v}")])), None);
}

#[test]
fn the_set_cookie_field_carries_the_configured_attributes() {
    let a = aff(None);
    let c = a.set_cookie(7, true);
    assert!(
        c.starts_with(&format!(
            "route={}; Path=/; HttpOnly; SameSite=Lax",
            a.value(7)
        )),
        "{c}"
    );
    assert!(
        c.contains("; Max-Age=3600") && c.ends_with("; Secure"),
        "{c}"
    );
    assert!(!a.set_cookie(7, false).contains("Secure"));
}

#[test]
fn hash_inputs_read_what_the_key_names() {
    let ip: IpAddr = "10.0.0.1".parse().expect("ip");
    let mut r = req(&["session=abc"]);
    r.append_header("x-user", "u1").expect("h");
    assert_eq!(
        hash_input(&HashKey::Header("x-user".into()), &r, ip, None),
        Some(b"u1".to_vec())
    );
    assert_eq!(
        hash_input(&HashKey::Cookie("session".into()), &r, ip, None),
        Some(b"abc".to_vec())
    );
    assert_eq!(
        hash_input(&HashKey::Query("x".into()), &r, ip, None),
        Some(b"1".to_vec())
    );
    assert_eq!(
        hash_input(&HashKey::Uri, &r, ip, Some("/a")),
        Some(b"/a?x=1".to_vec())
    );
    assert_eq!(
        hash_input(&HashKey::Path, &r, ip, Some("/a")),
        Some(b"/a".to_vec())
    );
    assert_eq!(
        hash_input(&HashKey::ClientIp, &r, ip, None),
        Some(vec![10, 0, 0, 1])
    );
    assert_eq!(
        hash_input(&HashKey::Header("x-none".into()), &r, ip, None),
        None
    );
}
