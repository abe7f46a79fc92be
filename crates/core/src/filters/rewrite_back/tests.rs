use super::*;

fn rw(redirect: &[(&str, &str)], domain: &[(&str, &str)], path: &[(&str, &str)]) -> RewriteBack {
    let list = |l: &[(&str, &str)]| {
        l.iter()
            .map(|(f, t)| Replace {
                from: f.to_string(),
                to: t.to_string(),
            })
            .collect::<Vec<_>>()
    };
    let e = EdgeConfig {
        proxy_redirect: list(redirect),
        proxy_cookie_domain: list(domain),
        proxy_cookie_path: list(path),
        ..Default::default()
    };
    *RewriteBack::build(&e).expect("some")
}

fn head(fields: &[(&str, &str)]) -> ResponseHeader {
    let mut h = ResponseHeader::build(302, None).expect("head");
    for (k, v) in fields {
        h.append_header(k.to_string(), *v).expect("field");
    }
    h
}

fn all(h: &ResponseHeader, name: &str) -> Vec<String> {
    h.headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn location_and_refresh_urls_get_their_start_replaced_the_first_rule_wins() {
    let r = rw(
        &[
            ("http://app.internal:8080/", "https://shop.example/"),
            ("http://app.internal", "https://other.example"),
        ],
        &[],
        &[],
    );
    let mut h = head(&[
        ("Location", "http://app.internal:8080/cart?x=1"),
        ("Refresh", "5; url=http://app.internal:8080/done"),
    ]);
    r.apply(&mut h);
    assert_eq!(all(&h, "location"), ["https://shop.example/cart?x=1"]);
    assert_eq!(all(&h, "refresh"), ["5; url=https://shop.example/done"]);
    // Case-sensitive, a prefix only: elsewhere in the URL it stays.
    for kept in [
        "HTTP://APP.INTERNAL:8080/cart",
        "/login?next=http://app.internal:8080/",
        "?url=http://app.internal:8080/",
        "https://app.internal:8080/",
    ] {
        let mut h = head(&[("Location", kept)]);
        r.apply(&mut h);
        assert_eq!(all(&h, "location"), [kept]);
    }
    let mut h = head(&[("Location", "http://app.internal/x")]);
    r.apply(&mut h);
    assert_eq!(all(&h, "location"), ["https://other.example/x"]);
}

#[test]
fn a_cookies_domain_and_path_are_rewritten_the_rest_kept() {
    let r = rw(&[], &[("localhost", "example.org")], &[("/two/", "/")]);
    let mut h = head(&[
        (
            "Set-Cookie",
            "a=1; Domain=.LocalHost; Path=/two/some/uri/; HttpOnly",
        ),
        ("Set-Cookie", "b=domain=localhost; path=/two/; Secure"),
        ("Set-Cookie", "c=3; Domain=localhost.evil; Path=/twothree"),
    ]);
    r.apply(&mut h);
    assert_eq!(
        all(&h, "set-cookie"),
        [
            "a=1; Domain=.example.org; Path=/some/uri/; HttpOnly",
            // The cookie's own value is never read as an attribute.
            "b=domain=localhost; path=/; Secure",
            "c=3; Domain=localhost.evil; Path=/twothree",
        ]
    );
}

#[test]
fn fields_that_match_nothing_are_not_written_again() {
    let r = rw(&[("http://x/", "/")], &[("a", "b")], &[]);
    let mut h = head(&[("Location", "/here"), ("Set-Cookie", "k=v; Path=/")]);
    r.apply(&mut h);
    assert_eq!(all(&h, "location"), ["/here"]);
    assert_eq!(all(&h, "set-cookie"), ["k=v; Path=/"]);
    assert!(RewriteBack::build(&EdgeConfig::default()).is_none());
}
