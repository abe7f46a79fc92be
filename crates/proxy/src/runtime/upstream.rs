//! The upstreams, compiled: each one's pool of targets with their TLS.

use super::Kept;
use std::sync::Arc;
use tollgate_config::model::UpstreamConfig;
use tollgate_core::error::BuildError;
use tollgate_upstream::pool::Pool;

pub struct UpstreamRt {
    /// The targets, their health and the peers they are reached through (and the upstream's
    /// config: [`UpstreamRt::cfg`]).
    pub pool: Arc<Pool>,
}

impl UpstreamRt {
    pub fn cfg(&self) -> &UpstreamConfig {
        self.pool.config()
    }
}

/// Each target's TLS, in target order (the name verified is the target's host unless `sni`
/// says); empty for a plaintext upstream.
fn upstream_tls(
    cfg: &UpstreamConfig,
) -> Result<Vec<tollgate_core::tls::upstream::UpstreamTlsRt>, BuildError> {
    let Some(tls) = &cfg.tls else {
        return Ok(Vec::new());
    };
    if !tls.verify {
        tracing::warn!(
            event = "upstream_tls_unverified",
            upstream = %cfg.name,
            "upstream {}: tls.verify = false: its certificates are not verified",
            cfg.name
        );
    }
    cfg.targets
        .iter()
        .map(|target| {
            tollgate_core::tls::upstream::upstream_tls(tls, &target.host).map_err(|reason| {
                BuildError::UpstreamTls {
                    upstream: cfg.name.clone(),
                    reason,
                }
            })
        })
        .collect()
}

/// Each upstream's pool, built anew (a reload reads the TLS files again), with the health
/// of the previous pool when the upstream did not change.
pub(super) fn upstreams(
    configs: &[UpstreamConfig],
    kept: &Kept,
    preserve_case: bool,
) -> Result<Vec<UpstreamRt>, BuildError> {
    let mut upstreams = Vec::with_capacity(configs.len());
    for cfg in configs {
        let pool = Pool::new(cfg, &upstream_tls(cfg)?, preserve_case);
        if let Some(old) = kept.upstreams.get(cfg.name.as_str()) {
            pool.inherit(&old.pool);
        }
        upstreams.push(UpstreamRt {
            pool: Arc::new(pool),
        });
    }
    Ok(upstreams)
}
