//! envoyproxy/ratelimit's own lookup cases (tests/fixtures/envoy-ratelimit/upstream/
//! lookups.json: every GetLimit its config_test.go makes, with what its code returned), against
//! Tollgate's tree: the same limit, name, flags, stats key and shared pattern for every lookup.

use serde_json::Value;
use tollgate_proxy::limits::tree::TreeRt;

fn fixture(name: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/envoy-ratelimit/upstream")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

#[test]
fn every_upstream_lookup_finds_what_the_service_finds() {
    let cases = fixture("lookups.json");
    let mut failures = Vec::new();
    let mut lookups = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap_or_default();
        let files: Vec<(String, String)> = case["file_list"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|p| {
                        (
                            p[0].as_str().unwrap_or_default().into(),
                            p[1].as_str().unwrap_or_default().into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let merge = case["merge_domains"].as_bool().unwrap_or(false);
        let domains = match tollgate_config::envoy_ratelimit::load_domains(&files, merge) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{name}: does not load: {e:?}"));
                continue;
            }
        };
        let tree = TreeRt::build(&domains, |_| Some(0));
        for (i, l) in case["lookups"].as_array().into_iter().flatten().enumerate() {
            lookups += 1;
            let domain = l["domain"].as_str().unwrap_or_default();
            let entries: Vec<(String, String)> = l["entries"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e[0].as_str().unwrap_or_default().into(),
                        e[1].as_str().unwrap_or_default().into(),
                    )
                })
                .collect();
            let refs: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let at = format!("{name} lookup {i} {domain} {entries:?}");
            let expect = &l["expect"];
            if !l["limit_override"].is_null() {
                // Overrides are the service's (rls::envoy): the tree answers only whether the
                // domain is known, which is what decides.
                let o = &l["limit_override"];
                if expect.is_null() == tree.serves(domain) {
                    failures.push(format!(
                        "{at}: override in a domain served: {}",
                        tree.serves(domain)
                    ));
                } else if !expect.is_null()
                    && (expect["requests_per_unit"] != o["requests_per_unit"]
                        || expect["unit"] != o["unit"])
                {
                    failures.push(format!("{at}: an override's limit is the override"));
                }
                continue;
            }
            let found = tree.find(domain, &refs);
            let got = found.as_ref().and_then(|f| {
                let node = &tree.nodes[f.node];
                node.limit.as_ref().map(|lim| (f, node, lim))
            });
            match (expect.is_null(), got) {
                (true, None) => {}
                (true, Some((_, n, _))) => {
                    failures.push(format!("{at}: found {}, the service none", n.full_key))
                }
                (false, None) => failures.push(format!("{at}: found none, the service {expect}")),
                (false, Some((f, n, lim))) => {
                    let unit = lim.unit.map_or("UNKNOWN", |u| u.name());
                    let mut diff = Vec::new();
                    let cmp = |d: &mut Vec<String>, k: &str, got: Value| {
                        if !expect[k].is_null() && expect[k] != got {
                            d.push(format!("{k}: {} vs {got}", expect[k]));
                        }
                    };
                    cmp(
                        &mut diff,
                        "requests_per_unit",
                        Value::from(lim.requests_per_unit),
                    );
                    cmp(&mut diff, "unit", Value::from(unit));
                    cmp(&mut diff, "name", Value::from(lim.name.clone()));
                    cmp(&mut diff, "unlimited", Value::from(lim.unlimited));
                    cmp(&mut diff, "shadow_mode", Value::from(lim.shadow_mode));
                    cmp(&mut diff, "quota_mode", Value::from(lim.quota_mode));
                    cmp(&mut diff, "replaces", Value::from(lim.replaces.clone()));
                    cmp(&mut diff, "full_key", Value::from(f.stat_key.clone()));
                    if !expect["share_threshold_key_pattern"].is_null() {
                        let got = f.share.clone().map_or(Value::Null, Value::from);
                        cmp(&mut diff, "share_threshold_key_pattern", got);
                    }
                    if !expect["metadata"].is_null() {
                        cmp(
                            &mut diff,
                            "metadata",
                            n.metadata.clone().unwrap_or(Value::Null),
                        );
                    }
                    if !diff.is_empty() {
                        failures.push(format!("{at}: {}", diff.join("; ")));
                    }
                }
            }
        }
    }
    assert!(lookups >= 100, "{lookups} lookups");
    assert!(
        failures.is_empty(),
        "{} of {lookups}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
