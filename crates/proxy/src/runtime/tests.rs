use super::*;

fn rt(toml: &str) -> Runtime {
    let cfg = tollgate_config::parse_str(toml, "t.toml").expect("config");
    Runtime::build(cfg, None, None, &Metrics::new().expect("metrics")).expect("runtime")
}

#[test]
fn routing_prefers_host_then_longest_prefix_then_methods() {
    let r = rt(r#"
[[routes]]
name = "root"
path_prefix = "/"
respond = { status = 200, body = "root" }
[[routes]]
name = "api"
path_prefix = "/api"
respond = { status = 200 }
[[routes]]
name = "login"
path_prefix = "/api/login"
methods = ["POST"]
respond = { status = 200 }
[[routes]]
name = "hosted"
host = "Admin.Example.com"
path_prefix = "/"
respond = { status = 200 }
"#);
    let name = |i: Option<usize>| i.map(|i| r.routes[i].cfg.name.clone());
    assert_eq!(name(r.route_for(None, "/api/x", "GET")), Some("api".into()));
    assert_eq!(
        name(r.route_for(None, "/api/login", "POST")),
        Some("login".into())
    );
    assert_eq!(
        name(r.route_for(None, "/api/login", "GET")),
        Some("api".into())
    );
    assert_eq!(
        name(r.route_for(Some("admin.example.com"), "/api/x", "GET")),
        Some("hosted".into())
    );
    assert_eq!(
        name(r.route_for(Some("other"), "/zzz", "GET")),
        Some("root".into())
    );
    let e = rt(r#"
[[routes]]
name = "prefix"
path_prefix = "/foo/"
respond = { status = 200 }
[[routes]]
name = "exact"
path_exact = "/foo"
respond = { status = 200 }
[[routes]]
name = "root"
path_prefix = "/"
respond = { status = 200 }
"#);
    let n = |p: &str| {
        e.route_for(None, p, "GET")
            .map(|i| e.routes[i].cfg.name.clone())
    };
    assert_eq!(n("/foo").as_deref(), Some("exact"));
    assert_eq!(n("/foo/bar").as_deref(), Some("prefix"));
    assert_eq!(
        n("/foobar").as_deref(),
        Some("root"),
        "not a segment of /foo"
    );
}

#[test]
fn a_request_of_no_known_port_takes_no_route_that_names_ports() {
    let r = rt(r#"
[[routes]]
name = "listener"
path_prefix = "/"
ports = [8080]
respond = { status = 200 }
[[routes]]
name = "anywhere"
path_prefix = "/open"
respond = { status = 200 }
"#);
    let h = http::HeaderMap::new();
    let at = |port, path| {
        let asked = Asked {
            headers: &h,
            query: None,
            port: Some(port),
        };
        r.route_entry(None, path, "GET", asked)
            .map(|e| r.routes[e.route].cfg.name.clone())
    };
    assert_eq!(at(8080, "/x").as_deref(), Some("listener"));
    assert_eq!(at(routing_port(None), "/x"), None);
    assert_eq!(at(routing_port(None), "/open").as_deref(), Some("anywhere"));
}
