//! The gateway's own HTTP client (hyper on rustls, bounded in time and size), for the auth
//! services, the JWKS and trace export ([`client`]), and the addresses the cluster places
//! under a Service port's name ([`placed`]), which the pools and that client both read.

pub mod client;
pub mod mirror;
pub mod placed;
