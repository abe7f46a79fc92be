//! The Gateway API for Tollgate.

pub mod types;
