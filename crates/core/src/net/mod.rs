//! The gateway's own HTTP client (hyper on rustls, bounded in time and size), for the auth
//! services, the JWKS and trace export ([`client`]).

pub mod client;
pub mod mirror;
