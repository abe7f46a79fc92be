use super::*;

fn rt(url: &str) -> MirrorRt {
    *MirrorRt::build(&MirrorConfig {
        url: tollgate_config::parse_mirror_url(url).expect("url"),
        host: "m".into(),
        body: true,
        timeout: Duration::from_secs(1),
        upstream: None,
    })
    .expect("built")
}

fn req<'a>(request_uri: &'a str) -> Request<'a> {
    Request {
        request_uri,
        uri: request_uri.split('?').next().unwrap_or(""),
        host: "shop.example.com",
        secure: true,
    }
}

#[test]
fn the_url_is_filled_per_request_and_its_host_stays_the_configs() {
    let u = rt("http://m.ns.svc:8080$request_uri")
        .url(&req("/a/b?x=1"), None)
        .expect("in the test");
    assert_eq!(u.to_string(), "http://m.ns.svc:8080/a/b?x=1");
    let u = rt("http://m").url(&req("/p?q"), None).expect("in the test");
    assert_eq!(u.to_string(), "http://m/p?q", "no path: the client's");
    let u = rt("http://m/copy$is_args$args")
        .url(&req("/p"), None)
        .expect("in the test");
    assert_eq!(u.to_string(), "http://m/copy");
    let u = rt("http://m/copy$is_args$args")
        .url(&req("/p?z=2"), None)
        .expect("in the test");
    assert_eq!(u.to_string(), "http://m/copy?z=2");
    let u = rt("http://m/$scheme/$host$uri")
        .url(&req("/p?z"), None)
        .expect("in the test");
    assert_eq!(u.to_string(), "http://m/https/shop.example.com/p");
    // A request URI cannot move the authority (origin-form always starts with "/",
    // but "*" and the like must not make another host either).
    for odd in ["@evil.com/x", ".evil.com/x", ":81/x", "*"] {
        assert!(
            rt("http://m$request_uri").url(&req(odd), None).is_none(),
            "{odd}"
        );
    }
}

#[test]
fn to_an_upstream_the_authority_is_the_target_s_and_the_host_the_request_s() {
    let m = MirrorRt::build(&MirrorConfig {
        url: tollgate_config::parse_mirror_url("http://upstream$request_uri").expect("url"),
        host: String::new(),
        body: true,
        timeout: Duration::from_secs(1),
        upstream: Some(0),
    })
    .expect("built");
    let to: std::net::SocketAddr = "10.0.0.7:8080".parse().expect("in the test");
    let u = m.url(&req("/a?x=1"), Some(to)).expect("in the test");
    assert_eq!(u.to_string(), "http://10.0.0.7:8080/a?x=1");
    assert!(m.url(&req("/a"), None).is_none(), "no target: no copy");
    assert!(m.url(&req("@evil.com/x"), Some(to)).is_none());
    let mut h = http::HeaderMap::new();
    h.insert("host", HeaderValue::from_static("shop.example.com"));
    let c = mirrors()
        .start(&m, &Arc::from("r"), &Method::GET, &h, &req("/a"), Some(to))
        .expect("started");
    assert_eq!(c.req.headers()["host"], "shop.example.com");
}

fn mirrors() -> Mirrors {
    Mirrors::new(
        IntCounterVec::new(prometheus::Opts::new("m", "m"), &["route", "result"])
            .expect("in the test"),
        Arc::default(),
    )
}

#[test]
fn copies_are_bounded_and_give_their_place_back() {
    let m = mirrors();
    let r = rt("http://m");
    let route: Arc<str> = "r".into();
    let mut h = http::HeaderMap::new();
    h.insert("x-request-id", HeaderValue::from_static("id"));
    h.insert("connection", HeaderValue::from_static("keep-alive"));
    h.insert("host", HeaderValue::from_static("shop"));
    let mut held = Vec::new();
    for _ in 0..MAX_IN_FLIGHT {
        held.push(
            m.start(&r, &route, &Method::POST, &h, &req("/"), None)
                .expect("a place"),
        );
    }
    assert!(m
        .start(&r, &route, &Method::POST, &h, &req("/"), None)
        .is_none());
    assert_eq!(m.total.with_label_values(&["r", "dropped"]).get(), 1);
    let c = &held[0];
    assert_eq!(c.req.headers().get("host").expect("in the test"), "m");
    assert!(c.req.headers().get("connection").is_none());
    assert_eq!(
        c.req.headers().get("x-request-id").expect("in the test"),
        "id"
    );
    let mut c = held.pop().expect("in the test");
    assert!(m.push(&mut c, &[0; 100], 150));
    assert!(!m.push(&mut c, &[0; 100], 150), "over the route's cap");
    assert_eq!(m.bytes.load(Ordering::Acquire), 200);
    drop(c);
    drop(held);
    assert_eq!(m.in_flight.load(Ordering::Acquire), 0);
    assert_eq!(m.bytes.load(Ordering::Acquire), 0);
    let mut big = m
        .start(&r, &route, &Method::PUT, &h, &req("/"), None)
        .expect("in the test");
    assert!(m.push(&mut big, &vec![0; MAX_BODY_BYTES], 0));
    let mut other = m
        .start(&r, &route, &Method::PUT, &h, &req("/"), None)
        .expect("in the test");
    assert!(!m.push(&mut other, &[0; 1], 0), "the bound in all");
}
