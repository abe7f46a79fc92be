//! The Gateway API's types, v1.6.1 standard channel, generated from `crds/` by kopium
//! (`generate.sh`; do not edit the generated files), and Tollgate's own RateLimitPolicy.

#![allow(clippy::all, missing_docs)]

pub mod backendtlspolicies;
pub mod gatewayclasses;
pub mod gateways;
pub mod grpcroutes;
pub mod httproutes;
pub mod policy;
pub mod referencegrants;
