//! HTTPRoutes and GRPCRoutes as one shape the translation reads: their kind, metadata,
//! hostnames, parentRefs and rules (as JSON), a GRPCRoute's rules said as HTTP's: a gRPC
//! call is `POST /SERVICE/METHOD` over HTTP/2, so a method match is a path match and its
//! backends speak HTTP/2.

use crate::attach::ParentRef;
use crate::types::grpcroutes::GrpcRoute;
use crate::types::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value as Json};

/// A parentRef, owned.
#[derive(Debug, Clone)]
pub struct Parent {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
    pub section_name: Option<String>,
    pub port: Option<i32>,
}

impl Parent {
    pub fn as_ref(&self) -> ParentRef<'_> {
        ParentRef {
            group: self.group.as_deref(),
            kind: self.kind.as_deref(),
            name: &self.name,
            namespace: self.namespace.as_deref(),
            section_name: self.section_name.as_deref(),
            port: self.port,
        }
    }
}

/// A route of either kind.
pub struct RouteObj<'a> {
    pub kind: &'static str,
    pub meta: &'a ObjectMeta,
    pub hostnames: Vec<String>,
    pub parents: Vec<Parent>,
    /// HTTPRoute rules (a GRPCRoute's said so).
    pub rules: Json,
    /// Its backends speak HTTP/2 (gRPC).
    pub h2: bool,
}

fn parents(spec: &Json) -> Vec<Parent> {
    let s = |v: &Json, k: &str| v.get(k).and_then(Json::as_str).map(str::to_string);
    spec.get("parentRefs")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .map(|p| Parent {
            group: s(p, "group"),
            kind: s(p, "kind"),
            name: s(p, "name").unwrap_or_default(),
            namespace: s(p, "namespace"),
            section_name: s(p, "sectionName"),
            port: p
                .get("port")
                .and_then(Json::as_i64)
                .and_then(|p| i32::try_from(p).ok()),
        })
        .collect()
}

impl<'a> RouteObj<'a> {
    pub fn http(r: &'a HttpRoute) -> Self {
        let spec = serde_json::to_value(&r.spec).unwrap_or(Json::Null);
        RouteObj {
            kind: "HTTPRoute",
            meta: &r.metadata,
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            parents: parents(&spec),
            rules: spec.get("rules").cloned().unwrap_or(Json::Null),
            h2: false,
        }
    }

    pub fn grpc(r: &'a GrpcRoute) -> Self {
        let spec = serde_json::to_value(&r.spec).unwrap_or(Json::Null);
        let rules: Vec<Json> = spec
            .get("rules")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .map(grpc_rule)
            .collect();
        RouteObj {
            kind: "GRPCRoute",
            meta: &r.metadata,
            hostnames: r.spec.hostnames.clone().unwrap_or_default(),
            parents: parents(&spec),
            rules: Json::Array(rules),
            h2: true,
        }
    }
}

/// A GRPCRoute rule as an HTTPRoute rule: each match's method as a path, its headers as
/// they are; filters and backendRefs as they are (the same shapes).
fn grpc_rule(rule: &Json) -> Json {
    let mut out = rule.clone();
    if let Some(ms) = rule.get("matches").and_then(Json::as_array) {
        let matches: Vec<Json> = ms.iter().map(grpc_match).collect();
        out["matches"] = Json::Array(matches);
    }
    out
}

/// `method: {service, method, type}` as a path match: both, `/S/M` exactly; the service
/// alone, `/S/` and below; the method alone, any service's; RegularExpression, their
/// patterns in place (RE2).
fn grpc_match(m: &Json) -> Json {
    let mut out = json!({});
    if let Some(h) = m.get("headers") {
        out["headers"] = h.clone();
    }
    let Some(method) = m.get("method") else {
        return out;
    };
    let service = method.get("service").and_then(Json::as_str);
    let name = method.get("method").and_then(Json::as_str);
    let regex = method.get("type").and_then(Json::as_str) == Some("RegularExpression");
    let path = if regex {
        json!({"type": "RegularExpression", "value": format!("/{}/{}", service.unwrap_or("[^/]+"), name.unwrap_or("[^/]+"))})
    } else {
        match (service, name) {
            (Some(s), Some(n)) => json!({"type": "Exact", "value": format!("/{s}/{n}")}),
            (Some(s), None) => json!({"type": "PathPrefix", "value": format!("/{s}")}),
            (None, Some(n)) => {
                json!({"type": "RegularExpression", "value": format!("/[^/]+/{}", regex_escape(n))})
            }
            (None, None) => return out,
        }
    };
    out["path"] = path;
    out
}

fn regex_escape(s: &str) -> String {
    regex::escape(s)
}
