use super::*;

const NGINX: PathRules = PathRules {
    merge_slashes: true,
    escaped_slashes: EscapedSlashes::Reject,
};

fn n(p: &str) -> Result<String, Refusal> {
    normalize_path(p.as_bytes(), NGINX).map(Cow::into_owned)
}

#[test]
fn every_spelling_of_a_path_is_one_path() {
    for p in [
        "/login",
        "//login",
        "/./login",
        "/x/../login",
        "/%6cogin",
        "/%6Cogin",
        "/%2e/login",
        "/a/%2E%2E/b/%2e%2E/x/..//login",
        "///login",
        "/a/b/../../login",
        "/.//login",
    ] {
        assert_eq!(n(p), Ok("/login".to_string()), "{p}");
    }
}

#[test]
fn plain_paths_are_borrowed() {
    for p in [
        "/",
        "/api/v1/users",
        "/a-b_c~d",
        "/a.b/c.d",
        "/x/",
        "/.well-known/acme",
        "/.../x",
    ] {
        assert!(
            matches!(normalize_path(p.as_bytes(), NGINX), Ok(Cow::Borrowed(_))),
            "{p}"
        );
    }
}

#[test]
fn trailing_slashes_and_root() {
    assert_eq!(n("/a/b/").as_deref(), Ok("/a/b/"));
    assert_eq!(n("/a/b//").as_deref(), Ok("/a/b/"));
    assert_eq!(n("/a/.").as_deref(), Ok("/a/"));
    assert_eq!(n("/a/..").as_deref(), Ok("/"));
    assert_eq!(n("/.").as_deref(), Ok("/"));
    assert_eq!(n("//").as_deref(), Ok("/"));
    assert_eq!(n("/...").as_deref(), Ok("/..."), "three dots is a name");
    assert_eq!(n("/.hidden").as_deref(), Ok("/.hidden"));
}

#[test]
fn reserved_escapes_stay_encoded_and_upper_cased() {
    assert_eq!(n("/a%3bb").as_deref(), Ok("/a%3Bb"));
    assert_eq!(n("/a%20b").as_deref(), Ok("/a%20b"));
    assert_eq!(n("/%E2%82%ac").as_deref(), Ok("/%E2%82%AC"));
    assert_eq!(
        n("/a%25b").as_deref(),
        Ok("/a%25b"),
        "an escaped % stays one"
    );
    assert_eq!(
        n("/a%3F").as_deref(),
        Ok("/a%3F"),
        "an escaped ? is not a query"
    );
}

#[test]
fn bytes_outside_ascii_are_escaped() {
    assert_eq!(n("/x/../lo\u{e9}").as_deref(), Ok("/lo%C3%A9"));
    assert_eq!(
        n("/lo\u{e9}").as_deref(),
        Ok("/lo%C3%A9"),
        "raw UTF-8 is one spelling"
    );
    assert_eq!(n("/lo%c3%a9").as_deref(), Ok("/lo%C3%A9"));
    let invalid = normalize_path(b"/a\xff", NGINX).map(Cow::into_owned);
    assert_eq!(invalid.as_deref(), Ok("/a%FF"), "invalid UTF-8 too");
}

#[test]
fn what_cannot_be_made_canonical_is_refused() {
    assert_eq!(n("/.%2flogin"), Err(Refusal::EncodedSlash));
    assert_eq!(n("/a%2Fb"), Err(Refusal::EncodedSlash));
    assert_eq!(n("/a%5cb"), Err(Refusal::EncodedSlash));
    assert_eq!(n("/a\\b"), Err(Refusal::Backslash));
    assert_eq!(n("/a%00b"), Err(Refusal::Control));
    assert_eq!(n("/a%0ab"), Err(Refusal::Control));
    assert_eq!(n("/a%7f"), Err(Refusal::Control));
    assert_eq!(n("/a\tb"), Err(Refusal::Control));
    assert_eq!(n("/.."), Err(Refusal::AboveRoot));
    assert_eq!(n("/a/../../b"), Err(Refusal::AboveRoot));
    assert_eq!(n("/%2e%2e/etc/passwd"), Err(Refusal::AboveRoot));
    assert_eq!(n("/a%zz"), Err(Refusal::BadEscape));
    assert_eq!(n("/a%4"), Err(Refusal::BadEscape));
    assert_eq!(n("/a%"), Err(Refusal::BadEscape));
    assert_eq!(n("*"), Err(Refusal::NotAbsolute));
}

#[test]
fn escaped_slashes_kept_or_decoded() {
    let keep = PathRules {
        merge_slashes: true,
        escaped_slashes: EscapedSlashes::Keep,
    };
    let decode = PathRules {
        merge_slashes: true,
        escaped_slashes: EscapedSlashes::Decode,
    };
    assert_eq!(normalize_path(b"/a%2fb", keep).as_deref(), Ok("/a%2Fb"));
    assert_eq!(normalize_path(b"/a%5cb", keep).as_deref(), Ok("/a%5Cb"));
    assert_eq!(
        normalize_path(b"/.%2flogin", keep).as_deref(),
        Ok("/.%2Flogin")
    );
    assert_eq!(
        normalize_path(b"/.%2flogin", decode).as_deref(),
        Ok("/login")
    );
    assert_eq!(
        normalize_path(b"/a%5c..%5clogin", decode).as_deref(),
        Ok("/login")
    );
    assert_eq!(
        normalize_path(b"/%2e%2e%2fetc", decode),
        Err(Refusal::AboveRoot)
    );
}

#[test]
fn unmerged_slashes_stay() {
    let keep = PathRules {
        merge_slashes: false,
        escaped_slashes: EscapedSlashes::Reject,
    };
    assert_eq!(normalize_path(b"//a//b", keep).as_deref(), Ok("//a//b"));
    assert_eq!(normalize_path(b"//a/./b", keep).as_deref(), Ok("//a/b"));
}

#[test]
fn canonical_paths_are_fixed_points() {
    for p in ["/a%3Bb", "/login/", "/%E2%82%AC", "/a/b"] {
        let once = n(p).unwrap_or_default();
        assert_eq!(n(&once), Ok(once.clone()), "{p}");
    }
}

#[test]
fn inputs_given_twice_are_ambiguous() {
    let mut i = Inputs::default();
    i.header(http::HeaderName::from_static("x-api-key"));
    i.query("api_key");
    let mut h = http::HeaderMap::new();
    h.append("x-api-key", http::HeaderValue::from_static("a"));
    h.append("x-other", http::HeaderValue::from_static("1"));
    h.append("x-other", http::HeaderValue::from_static("2"));
    assert_eq!(i.ambiguous(&h, Some("api_key=a&x=1&x=2")), None);
    assert_eq!(
        i.ambiguous(&h, Some("api_key=a&%61pi_key=b")).as_deref(),
        Some("?api_key"),
        "names are compared decoded"
    );
    let mut hop = h.clone();
    hop.append(
        "connection",
        http::HeaderValue::from_static("keep-alive, X-API-Key"),
    );
    assert_eq!(
        i.ambiguous(&hop, None).as_deref(),
        Some("Connection: X-API-Key")
    );
    h.append("X-Api-Key", http::HeaderValue::from_static("b"));
    assert_eq!(i.ambiguous(&h, None).as_deref(), Some("x-api-key"));
}

#[test]
fn hosts() {
    let h = |s: &str| normalize_host(s).map(Cow::into_owned);
    assert_eq!(h("api.example.com").as_deref(), Ok("api.example.com"));
    assert_eq!(h("API.Example.COM").as_deref(), Ok("api.example.com"));
    assert_eq!(h("api.example.com.").as_deref(), Ok("api.example.com"));
    assert_eq!(h("api.example.com.:8080").as_deref(), Ok("api.example.com"));
    assert_eq!(h("api.example.com:443").as_deref(), Ok("api.example.com"));
    assert_eq!(h("[::1]:80").as_deref(), Ok("::1"));
    assert_eq!(h("[0::1]").as_deref(), Ok("::1"));
    assert_eq!(h("127.0.0.1:8080").as_deref(), Ok("127.0.0.1"));
    for bad in [
        "",
        ".",
        "api.example.com..",
        "a..b",
        "a b",
        "a/b",
        "user@host",
        "host:port",
        "host:",
        "[::1",
        "[::1]x",
        "[zz]",
        "a\\b",
        "host:123456",
    ] {
        assert_eq!(h(bad), Err(Refusal::BadHost), "{bad:?}");
    }
}

/// `normalize_host` as it was before its one-pass name check: the oracle the proptest holds
/// the fast form to.
fn normalize_host_before(raw: &str) -> Result<Cow<'_, str>, Refusal> {
    if raw.contains('@') {
        return Err(Refusal::BadHost);
    }
    if raw.starts_with('[') {
        return normalize_host(raw);
    }
    let host = match raw.rsplit_once(':') {
        Some((h, port)) => {
            if !valid_port(port) {
                return Err(Refusal::BadHost);
            }
            h
        }
        None => raw,
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty()
        || host.len() > 253
        || host.split('.').any(|label| {
            label.is_empty()
                || label.len() > 63
                || !label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    {
        return Err(Refusal::BadHost);
    }
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Ok(Cow::Owned(host.to_ascii_lowercase()));
    }
    Ok(Cow::Borrowed(host))
}

proptest::proptest! {
    #[test]
    fn hosts_are_judged_as_before(
        raw in "[a-zA-Z0-9._@: \\-]{0,12}|[a-z]{60,66}(\\.[a-z]{1,3})?\\.?(:[0-9]{1,6})?|([a-z]{63}\\.){3}[a-z]{60,64}"
    ) {
        proptest::prop_assert_eq!(normalize_host(&raw), normalize_host_before(&raw));
    }
}
