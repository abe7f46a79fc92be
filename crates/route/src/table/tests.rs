//! The table against the linear scan it replaces: on random route sets (exact, wildcard and
//! no hosts, aliases, www spellings, exact, prefix and regex paths, either case, methods) and
//! random requests, both find the same entry, under each tier and `host_fallthrough`.

use super::{Table, REGEX_SET_MIN};
use crate::routing::{order, path_matches, Entry, Hosts};
use proptest::prelude::*;
use tollgate_config::model::{EdgeConfig, PathMatch, RouteAction, RouteConfig};

const HOSTS: [&str; 7] = [
    "a.test",
    "b.test",
    "*.test",
    "x.a.test",
    "*.a.test",
    "**.test",
    "**.a.test",
];
const PATHS: [&str; 8] = ["/", "/a", "/A", "/ab", "/a/b", "/b", "/aB/c", "/ab/"];
const REGEXES: [&str; 7] = [
    "/a.*", "/[ab]+$", "/b", "/A/?", "/(a|B)/", "/ab?$", "/[^/]*/b",
];

/// A route drawn: its host and alias (indexes into HOSTS), www spelling, path kind (exact,
/// prefix, regex) and path, case-insensitivity, and method (GET or POST; `None`: any).
type Spec = (
    Option<usize>,
    Option<usize>,
    bool,
    u8,
    usize,
    bool,
    Option<bool>,
);

fn route(i: usize, (host, alias, www, kind, p, ci, method): Spec) -> RouteConfig {
    let text = |s: &str| {
        if ci {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    let path = match kind {
        0 => PathMatch::Exact(text(PATHS[p % PATHS.len()])),
        1 => PathMatch::Prefix(text(PATHS[p % PATHS.len()])),
        _ => PathMatch::Regex(REGEXES[p % REGEXES.len()].to_string()),
    };
    let host = host.map(|h| HOSTS[h].to_string());
    let www = www && host.as_deref().is_some_and(|h| !h.contains('*'));
    RouteConfig {
        name: format!("r{i}"),
        aliases: alias
            .filter(|_| host.is_some())
            .map(|a| HOSTS[a].to_string())
            .into_iter()
            .collect(),
        host,
        path,
        case_insensitive: ci,
        rewrite: None,
        canary: None,
        methods: method.map(|get| vec![if get { "GET" } else { "POST" }.to_string()]),
        action: RouteAction::Upstream(0),
        limits: Vec::new(),
        access: None,
        tarpit: None,
        https_redirect: None,
        auth: None,
        edge: EdgeConfig::shared(EdgeConfig {
            www_redirect: www,
            ..EdgeConfig::default()
        }),
        fallback: None,
        matches: None,
        split: None,
        ports: None,
        listener_host: None,
        redirect: None,
        timeouts: None,
    }
}

fn routes() -> impl Strategy<Value = Vec<RouteConfig>> {
    routes_of((0..HOSTS.len()).boxed(), (0u8..3).boxed())
}

/// Mostly regex routes on two hosts: buckets of many regexes, behind a `RegexSet`.
fn regex_routes() -> impl Strategy<Value = Vec<RouteConfig>> {
    routes_of(
        (0..2usize).boxed(),
        prop_oneof![4 => Just(2u8), 1 => 0u8..2].boxed(),
    )
}

fn routes_of(
    host: BoxedStrategy<usize>,
    kind: BoxedStrategy<u8>,
) -> impl Strategy<Value = Vec<RouteConfig>> {
    let one = (
        proptest::option::of(host),
        proptest::option::weighted(0.2, 0..HOSTS.len()),
        proptest::bool::weighted(0.2),
        kind,
        0..PATHS.len(),
        proptest::bool::weighted(0.3),
        proptest::option::weighted(0.3, any::<bool>()),
    );
    proptest::collection::vec(one, 0..24).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, spec)| route(i, spec))
            .collect()
    })
}

fn requests() -> impl Strategy<Value = Vec<(Option<String>, String, bool)>> {
    let host = proptest::option::weighted(
        0.9,
        prop_oneof![
            (0..HOSTS.len()).prop_map(|h| HOSTS[h].replace("**", "y").replace('*', "y")),
            Just("www.a.test".to_string()),
            Just("a.test".to_string()),
            Just("test".to_string()),
            Just("z.b.test".to_string()),
            Just("p.q.a.test".to_string()),
            Just("p.x.a.test".to_string()),
        ],
    );
    let path = prop_oneof![
        (0..PATHS.len()).prop_map(|p| PATHS[p].to_string()),
        "/[aAbB/]{0,5}",
    ];
    proptest::collection::vec((host, path, any::<bool>()), 1..16)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_table_finds_what_the_scan_finds(rs in routes(), reqs in requests(), fallthrough in any::<bool>()) {
        table_meets_scan(&rs, &reqs, fallthrough)?;
    }

    #[test]
    fn a_host_s_regex_set_finds_what_the_scan_finds(rs in regex_routes(), reqs in requests(), fallthrough in any::<bool>()) {
        table_meets_scan(&rs, &reqs, fallthrough)?;
    }
}

fn table_meets_scan(
    rs: &[RouteConfig],
    reqs: &[(Option<String>, String, bool)],
    fallthrough: bool,
) -> Result<(), TestCaseError> {
    {
        let entries: Vec<Entry> = order(rs.iter());
        let regexes: Vec<Option<regex::Regex>> = rs
            .iter()
            .map(|r| match &r.path {
                PathMatch::Regex(p) => {
                    Some(tollgate_config::path_regex(p, r.case_insensitive).expect("regex"))
                }
                _ => None,
            })
            .collect();
        let hosts = Hosts::new(&entries, |_| None);
        let table = Table::new(&entries, |i| (&rs[i].path, rs[i].case_insensitive));
        for (host, path, get) in reqs {
            let method = if *get { "GET" } else { "POST" };
            let host = host.as_deref();
            let tier = hosts.tier(host, None, None, fallthrough);
            let fits = |e: &Entry| {
                let r = &rs[e.route];
                tier.admits(e.host.as_deref(), host)
                    && path_matches(r, regexes[e.route].as_ref(), path)
                    && r.methods
                        .as_ref()
                        .is_none_or(|ms| ms.iter().any(|m| m == method))
            };
            let scan = entries.iter().position(fits);
            let found = table.find(tier, host, path, |at| fits(&entries[at]));
            prop_assert_eq!(
                found,
                scan,
                "{:?} {:?} {} under {:?}",
                host,
                path,
                method,
                tier
            );
        }
    }
    Ok(())
}

/// From `REGEX_SET_MIN` regexes on, a host's regexes are one set; it finds the first match in
/// their order, and a path none matches finds none.
#[test]
fn many_regexes_of_one_host_are_one_set() {
    let rs: Vec<RouteConfig> = (0..REGEXES.len())
        .map(|p| route(p, (Some(0), None, false, 2, p, p % 2 == 1, None)))
        .collect();
    let entries = order(rs.iter());
    let table = Table::new(&entries, |i| (&rs[i].path, rs[i].case_insensitive));
    assert!(table.exact["a.test"].regex_set.is_some());
    let two: Vec<RouteConfig> = rs[..REGEX_SET_MIN - 1].to_vec();
    let entries2 = order(two.iter());
    let small = Table::new(&entries2, |i| (&two[i].path, two[i].case_insensitive));
    assert!(small.exact["a.test"].regex_set.is_none());
    let hosts = Hosts::new(&entries, |_| None);
    let find = |path: &str| {
        let tier = hosts.tier(Some("a.test"), None, None, false);
        let re = |i: usize| {
            tollgate_config::path_regex(rs[i].path.as_str(), rs[i].case_insensitive).ok()
        };
        table
            .find(tier, Some("a.test"), path, |at| {
                let r = entries[at].route;
                path_matches(&rs[r], re(r).as_ref(), path)
            })
            .map(|at| entries[at].route)
    };
    assert_eq!(find("/abc"), Some(0));
    assert_eq!(find("/b"), Some(1));
    assert_eq!(find("/a/"), Some(0));
    assert_eq!(find("/A/"), Some(3), "case-insensitive /A/? (route 3)");
    assert_eq!(find("/zz"), None);
}

/// A plain case, spelled out: the exact host's routes only, an exact path before the longest
/// prefix, a regex last, a method falling through to the next route.
#[test]
fn a_host_s_routes_in_their_order() {
    let rs = [
        route(0, (Some(0), None, false, 1, 0, false, None)), // a.test /
        route(1, (Some(0), None, false, 1, 3, false, Some(false))), // a.test /ab POST
        route(2, (Some(0), None, false, 0, 3, false, None)), // a.test = /ab
        route(3, (Some(2), None, false, 2, 0, false, None)), // *.test ~ /a.*
        route(4, (None, None, false, 1, 0, false, None)),    // /
    ];
    let entries = order(rs.iter());
    let hosts = Hosts::new(&entries, |_| None);
    let table = Table::new(&entries, |i| (&rs[i].path, rs[i].case_insensitive));
    let find = |host: &str, path: &str, method: &str| {
        let tier = hosts.tier(Some(host), None, None, false);
        table
            .find(tier, Some(host), path, |at| {
                let r = &rs[entries[at].route];
                path_matches(r, None, path)
                    && r.methods
                        .as_ref()
                        .is_none_or(|ms| ms.iter().any(|m| m == method))
            })
            .map(|at| entries[at].route)
    };
    assert_eq!(find("a.test", "/ab", "GET"), Some(2));
    assert_eq!(find("a.test", "/abc", "POST"), Some(1));
    assert_eq!(find("a.test", "/abc", "GET"), Some(0));
    // The wildcard's route is not the exact host's: only its own routes meet it.
    assert_eq!(find("c.test", "/x", "GET"), None);
    assert_eq!(find("other", "/x", "GET"), Some(4));
}
