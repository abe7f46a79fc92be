use super::*;
use tollgate_config::model::HeaderPart::*;

#[test]
fn underscores_are_found_wherever_they_are() {
    for n in [
        "_",
        "x_",
        "_x",
        "x-real_ip",
        "abcdefg_",
        "abcdefgh_",
        "abcdefghijklmno_p",
    ] {
        assert!(has_underscore(n), "{n}");
    }
    for n in [
        "",
        "host",
        "x-real-ip",
        "abcdefgh",
        "abcdefghijklmnopq",
        "x-\u{7f}\u{5e}",
    ] {
        assert!(!has_underscore(n), "{n}");
    }
    // Every position of a name of every length up to 24.
    for len in 1..24 {
        for at in 0..len {
            let mut n = vec![b'a'; len];
            n[at] = b'_';
            let n = String::from_utf8(n).expect("ascii");
            assert!(has_underscore(&n), "{n}");
            assert!(!has_underscore(&n.replace('_', "^")), "{n}");
        }
    }
}

#[test]
fn spellings_and_drops() {
    assert!(underscore_spelling("x_real_ip", "x-real-ip"));
    assert!(underscore_spelling("x-real_ip", "x-real-ip"));
    assert!(!underscore_spelling("x-real-ip", "x-real-ip"));
    assert!(!underscore_spelling("x_real_ipv", "x-real-ip"));
    assert!(!underscore_spelling("x_real-ip", "x_real_ip"));
    let mut r = RequestHeader::build("GET", b"/", None).expect("req");
    r.append_header("host", "h").expect("h");
    r.append_header("x_a", "1").expect("h");
    r.append_header("x_a", "2").expect("h");
    r.append_header("X_B", "3").expect("h");
    r.append_header("x-c", "4").expect("h");
    assert_eq!(drop_underscored(&mut r), 3);
    let names: Vec<&str> = r.headers.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["host", "x-c"]);
    assert_eq!(drop_underscored(&mut r), 0);
}

#[test]
fn route_rules_replace_the_servers_and_variables_fill_in() {
    let server = HeaderRules {
        set: vec![("x-env".into(), vec![Lit("stage".into())])],
        add: vec![("x-a".into(), vec![Lit("1".into())])],
        remove: vec!["x-debug".into()],
    };
    let route = HeaderRules {
        set: vec![
            ("x-env".into(), vec![Lit("prod".into())]),
            (
                "x-who".into(),
                vec![
                    Var(HeaderVar::ClientIp),
                    Lit(" via ".into()),
                    Var(HeaderVar::Route),
                ],
            ),
        ],
        add: vec![],
        remove: vec!["x-a".into()],
    };
    let rt = RulesRt::build(&server, &route).expect("rules");
    let mut req = RequestHeader::build("GET", b"/", None).expect("test input");
    req.insert_header("x-debug", "1").expect("test input");
    req.insert_header("x-env", "client").expect("test input");
    req.insert_header("x-a", "client").expect("test input");
    let id = HeaderValue::from_static("id1");
    let vars = Vars {
        client_ip: ClientIp::Known("192.0.2.7".parse().expect("test input")),
        request_id: &id,
        req: None,
        route: "api",
        secure: false,
    };
    rt.apply_request(&mut req, &vars);
    assert!(req.headers.get("x-debug").is_none());
    assert!(req.headers.get("x-a").is_none());
    let env: Vec<_> = req.headers.get_all("x-env").iter().collect();
    assert_eq!(env, vec!["prod"]);
    assert_eq!(req.headers["x-who"], "192.0.2.7 via api");
    assert!(RulesRt::build(&HeaderRules::default(), &HeaderRules::default()).is_none());
}
