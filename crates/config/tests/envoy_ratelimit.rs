//! envoyproxy/ratelimit's own config-loading cases (tests/fixtures/envoy-ratelimit/upstream/
//! loading.json: every `expectConfigPanic` of its config_test.go and the fixtures that load,
//! with the error texts its code gives), through Tollgate's import: what the service refuses is
//! refused, with the service's words, and what it loads imports into a config that checks.

use serde_json::Value;
use tollgate_config::envoy_ratelimit::{import, load_domains, Options};

fn fixture(name: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/envoy-ratelimit/upstream")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str::<Vec<Value>>(&text).expect("json")
}

fn files_of(case: &Value) -> Vec<(String, String)> {
    if let Some(list) = case["file_list"].as_array() {
        return list
            .iter()
            .map(|p| {
                (
                    p[0].as_str().unwrap_or_default().to_string(),
                    p[1].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
    }
    case["files"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_services_loading_cases_load_or_fail_as_it_does() {
    let cases = fixture("loading.json");
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or_default();
        let files = files_of(case);
        let merge = case["merge_domains"].as_bool().unwrap_or(false);
        let got = load_domains(&files, merge);
        match (case["error"].as_str(), got) {
            (None, Ok(_)) => {
                // It loads: the import writes a config that checks.
                let opts = Options {
                    merge_domains: merge,
                    ..Options::default()
                };
                match import(&files, &opts) {
                    Ok(i) => {
                        if let Err(e) = tollgate_config::check_str(&i.toml, "import") {
                            failures.push(format!(
                                "{name}: the import does not check:\n{e}\n{}",
                                i.toml
                            ));
                        }
                    }
                    Err(e) => failures.push(format!("{name}: import refused: {e}")),
                }
            }
            (None, Err(p)) => {
                failures.push(format!("{name}: refused, the service loads it: {p:?}"))
            }
            (Some(want), Ok(_)) => {
                failures.push(format!("{name}: loaded, the service says: {want}"))
            }
            (Some(want), Err(p)) => {
                // go-yaml's own parser messages are not libyaml-in-Rust's: the prefix is.
                let want = if name == "TestBadYaml" {
                    want.split(": yaml:").next().unwrap_or(want)
                } else {
                    want
                };
                if !p.iter().any(|l| l.starts_with(want) || l.contains(want)) {
                    failures.push(format!("{name}: want {want:?}, got {p:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn problems_name_the_file_key_and_line() {
    let files = vec![(
        "a.yaml".to_string(),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n  - key: ''\n  - key: x\n    ratelimit: {}\n".to_string(),
    )];
    let p = load_domains(&files, false).expect_err("refused");
    let all = p.join("\n");
    assert!(
        all.contains(
            "a.yaml: config error, unknown key 'ratelimit' (descriptors[2].ratelimit, line 9)"
        ),
        "{all}"
    );
    // Keys first (as the service checks them), so the unit waits for a file with known keys.
    let files = vec![(
        "a.yaml".to_string(),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n  - key: ''\n".to_string(),
    )];
    let all = load_domains(&files, false).expect_err("refused").join("\n");
    assert!(
        all.contains(
            "a.yaml: invalid rate limit unit 'fortnight' (descriptors[0].rate_limit.unit, line 3)"
        ),
        "{all}"
    );
    assert!(
        all.contains("a.yaml: descriptor has empty key (descriptors[1], line 7)"),
        "{all}"
    );
    // yaml.v2's types: a negative count, a string bool, a float anywhere.
    for (yaml, want) in [
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "cannot unmarshal !!int `-1` into uint32"),
        ("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", "cannot unmarshal !!str `maybe` into bool"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n", "error checking config"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, unlimited: true}\n", "should not specify rate limit unit when unlimited"),
        ("- a\n- b\n", "cannot unmarshal !!seq into map"),
        ("domain: d\n3: x\n", "config error, key is not of type string: 3"),
    ] {
        let files = vec![("f.yaml".to_string(), yaml.to_string())];
        let all = load_domains(&files, false).expect_err(yaml).join("\n");
        assert!(all.contains(want), "{yaml}: {all}");
    }
    // YAML 1.1 as the service reads it: `yes` is true, a quoted number a string.
    let files = vec![(
        "f.yaml".to_string(),
        "domain: d\ndescriptors:\n  - key: k\n    value: '10'\n    shadow_mode: yes\n    rate_limit: {unit: SECOND, requests_per_unit: 0x10}\n".to_string(),
    )];
    let d = load_domains(&files, false).expect("loads");
    let n = &d[0].descriptors[0];
    assert!(n.shadow_mode);
    assert_eq!(n.value, "10");
    assert_eq!(n.rate_limit.as_ref().map(|l| l.requests_per_unit), Some(16));
}

#[test]
fn a_second_document_is_read_as_the_service_reads_it_not_at_all() {
    let files = vec![(
        "f.yaml".to_string(),
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\ndomain: b\n".to_string(),
    )];
    let i = import(&files, &Options::default()).expect("import");
    assert!(
        i.warnings
            .iter()
            .any(|w| w.contains("1 more YAML document")),
        "{:?}",
        i.warnings
    );
    assert!(!i.toml.contains("domain = \"b\""), "{}", i.toml);
}

#[test]
fn anchors_merge_keys_tags_and_duplicates_read_as_yaml_v2_reads_them() {
    // A shared limit by anchor and `<<`, a key written twice (the last wins, as yaml.v2's
    // Unmarshal keeps it), `!!int` on a quoted count, `!!str` on a number and a Unicode unit.
    let yaml = "domain: d\n\
                descriptors:\n\
                \x20 - key: z\n\
                \x20   rate_limit: &b {unit: minute, requests_per_unit: 5}\n\
                \x20 - key: a\n\
                \x20   rate_limit:\n\
                \x20     <<: *b\n\
                \x20     requests_per_unit: 7\n\
                \x20 - key: b\n\
                \x20   value: x\n\
                \x20   value: y\n\
                \x20   rate_limit: {unit: hour, requests_per_unit: !!int \"9\"}\n\
                \x20 - key: c\n\
                \x20   value: !!str 010\n\
                \x20   rate_limit: {unit: \u{17f}econd, requests_per_unit: 1}\n";
    let files = vec![("f.yaml".to_string(), yaml.to_string())];
    let d = load_domains(&files, false).expect("loads");
    let nodes = &d[0].descriptors;
    assert_eq!(nodes.len(), 4, "{nodes:?}");
    let a = nodes[1].rate_limit.as_ref().expect("a's limit");
    assert_eq!(a.requests_per_unit, 7, "written beside `<<`, the key wins");
    assert_eq!(
        a.unit.map(|u| u.name()),
        Some("MINUTE"),
        "merged from the anchor"
    );
    assert_eq!(nodes[2].value, "y", "a duplicate key keeps its last value");
    assert_eq!(
        nodes[2].rate_limit.as_ref().map(|l| l.requests_per_unit),
        Some(9)
    );
    assert_eq!(nodes[3].value, "010");
    assert_eq!(
        nodes[3]
            .rate_limit
            .as_ref()
            .and_then(|l| l.unit)
            .map(|u| u.name()),
        Some("SECOND"),
        "Go's ToUpper reads \u{17f} as S"
    );
    let i = import(&files, &Options::default()).expect("import");
    tollgate_config::check_str(&i.toml, "import").expect("checks");
}

#[test]
fn metadata_is_kept_as_the_service_keeps_it_and_what_toml_cannot_hold_is_said() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      name: a\n      n: 18446744073709551615\n      bad: .nan\n      nested: {1: one, 0x10: sixteen, on: x}\n      list: [1, ~, two]\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let files = vec![("f.yaml".to_string(), yaml.to_string())];
    let d = load_domains(&files, false).expect("loads");
    let m = d[0].descriptors[0]
        .metadata
        .as_ref()
        .expect("metadata kept");
    assert_eq!(m["name"], "a");
    assert_eq!(
        m["n"].as_f64(),
        Some(18446744073709551615.0),
        "a double, as structpb's"
    );
    // Deeper keys as Go's %v prints them (convertMap).
    assert_eq!(m["nested"]["1"], "one");
    assert_eq!(m["nested"]["16"], "sixteen");
    assert_eq!(m["nested"]["true"], "x");
    let i = import(&files, &Options::default()).expect("import");
    tollgate_config::check_str(&i.toml, "import").expect("checks");
    assert!(
        i.warnings.iter().any(|w| w.contains("metadata key bad")),
        "{:?}",
        i.warnings
    );
    assert!(
        i.warnings.iter().any(|w| w.contains("list item")),
        "{:?}",
        i.warnings
    );
    assert!(i.toml.contains("\"name\" = \"a\""), "{}", i.toml);
}

#[test]
fn the_import_gives_redis_envoys_deadline_and_fails_as_the_service_does() {
    let files = vec![(
        "f.yaml".to_string(),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n".to_string(),
    )];
    let i = import(&files, &Options::default()).expect("import");
    let v: toml::Value = toml::from_str(&i.toml).expect("toml");
    assert_eq!(v["redis"]["timeout"].as_str(), Some("10s"), "{}", i.toml);
    assert_eq!(v["rls"]["on_error"].as_str(), Some("fail"));
    assert_eq!(v["rls"]["local_cache"].as_bool(), Some(false));
    assert_eq!(v["rls"]["response_headers"].as_str(), Some("none"));
}
