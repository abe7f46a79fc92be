//! Tollgate's ground floor: what every concern of the gateway above it uses, and nothing that
//! reads a request's state (that is `tollgate_proxy::ctx`, above).
//!
//! - [`respond`]: problem+json answers and the IETF RateLimit fields.
//! - [`filters`]: access lists, CORS, header rules, compression and bandwidth.
//! - [`tls`]: certificates by SNI, client certificates, upstream TLS, the crypto provider.
//! - [`net`]: the HTTP client that forward auth, JWKS and traces share.
//! - [`client_ip`]: the client's address behind trusted proxies.
//! - [`connections`]: connection bounds per listener and per client.
//! - [`observe`]: metrics, traces, the log guard.
//! - [`error`]: the gateway's build errors.
//!
//! Within the crate the order is: respond, client_ip, tls, connections and error are leaves;
//! filters read respond and client_ip; net reads tls; observe reads net, tls and respond.

pub mod client_ip;
pub mod connections;
pub mod error;
pub mod filters;
pub mod net;
pub mod observe;
pub mod respond;
pub mod tls;
