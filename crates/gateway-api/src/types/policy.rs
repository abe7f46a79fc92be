//! Tollgate's RateLimitPolicy (`tollgate.io/v1alpha1`, namespaced), in the Gateway API's
//! direct policy attachment: `targetRefs` name a Gateway (optionally one listener by
//! `sectionName`), an HTTPRoute (optionally one named rule) or an Ingress of the policy's
//! namespace; `limits` are `[limits.NAME]` tables, the same fields and names. Its CRD with the
//! API server's validation is `deploy/k8s/crds/tollgate.io_ratelimitpolicies.yaml`.

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tollgate.io",
    version = "v1alpha1",
    kind = "RateLimitPolicy",
    plural = "ratelimitpolicies",
    namespaced,
    status = "RateLimitPolicyStatus",
    schema = "disabled"
)]
pub struct RateLimitPolicySpec {
    #[serde(rename = "targetRefs")]
    pub target_refs: Vec<PolicyTargetRef>,
    /// Each a `[limits.NAME]` table, as JSON.
    pub limits: BTreeMap<String, serde_json::Value>,
    /// `Shared` (default): one count per key for every route the targets reach (a Gateway's
    /// limit is the Gateway's); `PerRoute`: each route counts apart, as Envoy Gateway's
    /// BackendTrafficPolicy does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Buckets>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Buckets {
    #[default]
    Shared,
    PerRoute,
}

/// A `LocalPolicyTargetReferenceWithSectionName`: in the policy's own namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PolicyTargetRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "sectionName"
    )]
    pub section_name: Option<String>,
}

/// The Gateway API's `PolicyStatus`: one entry per ancestor (a Gateway) the policy reaches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct RateLimitPolicyStatus {
    #[serde(default)]
    pub ancestors: Vec<serde_json::Value>,
}
