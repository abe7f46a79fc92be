//! The Gateway API for Tollgate (`run --kubernetes`, beside the Ingresses): the v1.6.1
//! types, Tollgate's RateLimitPolicy, and the pure translation of GatewayClasses, Gateways,
//! HTTPRoutes, ReferenceGrants and RateLimitPolicies into Tollgate's config and the statuses
//! the spec asks (no IO: `crates/kube` watches and writes).
//!
//! The modules, bottom up:
//! - [`types`]: generated from `crds/` by kopium (`generate.sh`), and [`types::policy`];
//! - [`input`]: what is read, with lookups; [`conditions`]: status conditions;
//! - [`hosts`]: hostnames intersected; [`refs`]: ReferenceGrants, backend and certificate
//!   references resolved with the spec's reasons;
//! - [`gateways`]: which classes and Gateways are served, their listeners judged;
//! - [`objects`]: HTTPRoutes and GRPCRoutes as one shape (a gRPC method a path);
//! - [`attach`]: parentRefs to listeners; [`rules`]: rules to routes;
//! - [`policy`]: RateLimitPolicies to limits on those routes; [`backend_tls`]:
//!   BackendTLSPolicies to upstream TLS;
//! - [`translate`]: all of it, in order; [`supported`]: the features claimed.

pub mod attach;
pub mod backend_tls;
pub mod conditions;
pub mod from_ingress;
pub mod gateways;
pub mod hosts;
pub mod input;
pub mod objects;
pub mod policy;
pub mod refs;
pub mod rules;
pub mod supported;
pub mod translate;
pub mod types;
