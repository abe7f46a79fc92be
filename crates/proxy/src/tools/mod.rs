//! What `tollgate` runs besides serving: [`dryrun`] (the front stages on a request head
//! alone), [`explain`] (`tollgate explain`, admin `/explain`) and [`simulate`] (`tollgate
//! simulate`, on the logs of `crates/replay`).

pub mod dryrun;
pub mod explain;
pub mod simulate;
