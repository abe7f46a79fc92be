//! The Gateway API project's own examples (v1.6.1, `examples/`): each object reads into the
//! generated types and says back what it was given, and the HTTP ones translate into a
//! config Tollgate's own checker accepts, with the statuses the spec asks.

mod common;

use common::*;
use std::path::Path;
use tollgate_gateway_api::translate::translate;
use tollgate_gateway_api::types::gatewayclasses::GatewayClass;
use tollgate_gateway_api::types::gateways::Gateway;
use tollgate_gateway_api::types::httproutes::HttpRoute;
use tollgate_gateway_api::types::referencegrants::ReferenceGrant;

fn every_example() -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("examples").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let text = std::fs::read_to_string(&p).expect("read");
                for v in docs(&text) {
                    out.push((p.display().to_string(), v));
                }
            }
        }
    }
    out
}

/// The fields a type read and wrote back are the example's (nothing dropped, nothing made
/// up), for every kind Tollgate reads.
#[test]
fn every_upstream_example_reads_into_the_types_and_back() {
    let mut read = 0;
    for (file, v) in every_example() {
        let back = match v["kind"].as_str().unwrap_or("") {
            "GatewayClass" => serde_json::to_value(
                serde_json::from_value::<GatewayClass>(v.clone()).expect(&file),
            ),
            "Gateway" => {
                serde_json::to_value(serde_json::from_value::<Gateway>(v.clone()).expect(&file))
            }
            "HTTPRoute" => {
                serde_json::to_value(serde_json::from_value::<HttpRoute>(v.clone()).expect(&file))
            }
            "GRPCRoute" => serde_json::to_value(
                serde_json::from_value::<tollgate_gateway_api::types::grpcroutes::GrpcRoute>(
                    v.clone(),
                )
                .expect(&file),
            ),
            "ReferenceGrant" => serde_json::to_value(
                serde_json::from_value::<ReferenceGrant>(v.clone()).expect(&file),
            ),
            "BackendTLSPolicy" => serde_json::to_value(
                serde_json::from_value::<
                    tollgate_gateway_api::types::backendtlspolicies::BackendTlsPolicy,
                >(v.clone())
                .expect(&file),
            ),
            _ => continue,
        }
        .expect("writes");
        assert_eq!(strip(&back), strip(&v), "{file}");
        read += 1;
    }
    assert!(read >= 30, "only {read} objects read");
}

/// Without the fields the types fill in themselves (empty metadata maps).
fn strip(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.retain(|_, x| !x.is_null());
    }
    v
}

fn example(rel: &[&str]) -> String {
    rel.iter()
        .map(|r| {
            std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("examples")
                    .join(r),
            )
            .expect(r)
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[test]
fn the_http_routing_guide_serves_each_host_and_header_as_it_says() {
    let c = Cluster::of(&example(&[
        "http-routing/gateway.yaml",
        "http-routing/foo-httproute.yaml",
        "http-routing/bar-httproute.yaml",
    ]));
    let out = translate(&c.input(), &[]);
    assert_eq!(out.listeners, vec![(80, false)]);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let cfg = loads(&out);
    let names: Vec<(Option<&str>, &str)> = cfg
        .routes
        .iter()
        .map(|r| (r.host.as_deref(), r.path.as_str()))
        .collect();
    // foo's /login prefix is whole segments: /login exactly and /login/.
    assert!(names.contains(&(Some("foo.example.com"), "/login")));
    assert!(names.contains(&(Some("foo.example.com"), "/login/")));
    // bar's header rule is before its catch-all (more header matches first).
    let bar: Vec<bool> = cfg
        .routes
        .iter()
        .filter(|r| r.host.as_deref() == Some("bar.example.com"))
        .map(|r| r.matches.is_some())
        .collect();
    assert_eq!(bar, vec![true, false]);
    assert!(cfg
        .routes
        .iter()
        .all(|r| r.ports.as_deref() == Some(&[80][..])));
    assert_eq!(out.routes.len(), 3);
    let route_status = out
        .statuses
        .iter()
        .find(|s| s.kind == "HTTPRoute" && s.name == "bar-route")
        .expect("status");
    let conds = &route_status.status["parents"][0]["conditions"];
    assert_eq!(conds[0]["type"], "Accepted");
    assert_eq!(conds[0]["status"], "True");
    assert_eq!(conds[1]["type"], "ResolvedRefs");
    assert_eq!(conds[1]["status"], "True");
    let gw = out
        .statuses
        .iter()
        .find(|s| s.kind == "Gateway")
        .expect("gateway status");
    assert_eq!(gw.status["listeners"][0]["attachedRoutes"], 3);
    assert_eq!(gw.status["conditions"][1]["type"], "Programmed");
    assert_eq!(gw.status["conditions"][1]["status"], "True");
    assert_eq!(
        gw.status["addresses"][0],
        serde_json::json!({"type": "IPAddress", "value": "192.0.2.10"})
    );
}

#[test]
fn every_http_example_translates_into_a_config_that_loads() {
    for set in [
        &[
            "simple-gateway/gateway.yaml",
            "simple-gateway/httproute.yaml",
        ][..],
        &[
            "http-routing/gateway.yaml",
            "http-routing/foo-httproute.yaml",
            "http-routing/bar-httproute.yaml",
        ],
        &[
            "http-routing/gateway.yaml",
            "traffic-splitting/simple-split.yaml",
        ],
        &[
            "http-routing/gateway.yaml",
            "traffic-splitting/traffic-split-1.yaml",
        ],
        &[
            "http-routing/gateway.yaml",
            "traffic-splitting/traffic-split-2.yaml",
        ],
        &[
            "http-routing/gateway.yaml",
            "traffic-splitting/traffic-split-3.yaml",
        ],
        &["http-redirect.yaml"],
        &["http-redirect-path.yaml"],
        &["http-rewrite.yaml"],
        &["http-filter.yaml"],
        &["http-request-header-add.yaml"],
        &["http-request-header-remove.yaml"],
        &["http-request-header-set.yaml"],
        &["default-match-http.yaml"],
        &["basic-http.yaml"],
    ] {
        let text = example(set);
        let c = Cluster::of(&text);
        let out = translate(&c.input(), &[]);
        let cfg = loads(&out);
        assert!(!cfg.routes.is_empty(), "{set:?}: no route");
        // X-Request-Id is the gateway's own (it writes one for every request, after the
        // rules): the example's removal of it is said, not served.
        let expected: &[&str] = if set == ["http-request-header-remove.yaml"] {
            &["HTTPRoute default/header-http-echo: header x-request-id is written by the gateway: a rule cannot replace or remove it: left out"]
        } else {
            &[]
        };
        assert_eq!(out.problems, expected, "{set:?}");
    }
}
