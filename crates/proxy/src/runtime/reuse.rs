//! The parts a reload carries over whole while their config is unchanged: the trace
//! exporter, the JWKS and each auth (with their caches and schedules).

use super::{Kept, Runtime};
use std::sync::Arc;
use tollgate_config::model::Config;
use tollgate_core::error::BuildError;

/// `[tracing]`, compiled: the previous runtime's while it is unchanged (its client and
/// queue stay).
pub(super) fn tracing(
    config: &Config,
    previous: Option<&Runtime>,
) -> Result<Option<Arc<tollgate_core::observe::traces::TraceRt>>, BuildError> {
    Ok(match &config.tracing {
        None => None,
        Some(t) => match previous
            .and_then(|p| p.tracing.as_ref())
            .filter(|p| p.cfg == *t)
        {
            Some(kept) => Some(kept.clone()),
            None => Some(Arc::new(
                tollgate_core::observe::traces::TraceRt::build(t).map_err(BuildError::Tracing)?,
            )),
        },
    })
}

/// `[jwt] jwks_url`'s set: the previous runtime's when the URL, CA and refetch floor stay (its
/// keys and schedule go on), else a new one (fetched by housekeeping).
pub(super) fn jwks(
    config: &Config,
    previous: Option<&Runtime>,
) -> Result<Option<Arc<tollgate_auth::jwks::Jwks>>, BuildError> {
    let Some(r) = config.jwt.as_ref().and_then(|j| j.remote.as_ref()) else {
        return Ok(None);
    };
    let kept = previous
        .and_then(|p| p.jwks.as_ref())
        .filter(|j| j.url == r.url && j.ca.as_deref() == r.ca.as_deref() && j.refetch == r.refetch);
    if let Some(j) = kept {
        return Ok(Some(j.clone()));
    }
    tollgate_auth::jwks::Jwks::new(&r.url, r.ca.as_deref(), r.refetch)
        .map(|j| Some(Arc::new(j)))
        .map_err(|e| BuildError::Auth("jwt.jwks_url".into(), e))
}

/// Each auth compiled, or the previous runtime's when unchanged (a `jwt` auth only while
/// `[jwt]` is unchanged too: tokens it verified stay verified only under the same keys).
pub(super) fn auths(
    config: &Config,
    previous: Option<&Runtime>,
    kept: &Kept,
) -> Result<Vec<Arc<tollgate_auth::AuthRt>>, BuildError> {
    let same_jwt = previous.is_some_and(|p| p.config.jwt == config.jwt);
    config
        .auth
        .iter()
        .map(|cfg| {
            let kept = kept
                .auths
                .get(cfg.name.as_str())
                .filter(|a| a.cfg == *cfg)
                .filter(|a| same_jwt || !matches!(a.method, tollgate_auth::Method::Bearer(_)));
            match kept {
                Some(a) => Ok(Arc::clone(a)),
                None => tollgate_auth::AuthRt::build(
                    cfg,
                    config
                        .jwt
                        .as_ref()
                        .map_or("authorization", |j| j.header.as_str()),
                )
                .map(Arc::new)
                .map_err(|e| BuildError::Auth(cfg.name.clone(), e)),
            }
        })
        .collect()
}
