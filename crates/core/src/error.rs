//! Why a config could not be built into a runtime.

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("limit {0}: scope \"global\" needs Redis, and [redis] was not configured at start: restart to connect")]
    NoStore(String),
    #[error("redis: {0}")]
    Store(#[from] tollgate_store::StoreError),
    #[error("{}", .0.join("\n"))]
    Tls(Vec<String>),
    #[error("route {0}: {1}")]
    Route(String, String),
    #[error("tracing: {0}")]
    Tracing(String),
    #[error("auth {0}: {1}")]
    Auth(String, String),
    #[error("upstreams.{upstream}.tls: {reason}")]
    UpstreamTls { upstream: String, reason: String },
}
