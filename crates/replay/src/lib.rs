//! What `tollgate simulate` reads and writes around its simulation: access logs in four
//! formats, read as a stream of [`Record`]s ([`logs`]), and the self-contained HTML page of its
//! [`Report`] ([`report`]).
//!
//! The simulation itself (routes, limits, the virtual clock) is the gateway's.

pub mod logs;
pub mod report;

pub use logs::{open, Client, Format, LineError, Reader, Record};
pub use report::{html, FirstRefusal, KeyCount, LimitReport, Report, Scaled, Series};
