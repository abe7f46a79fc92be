//! `[jwt] jwks_url`: the key set fetched when due (at start, then per its max-age; sooner
//! after a failure), in a task of its own bounded by the fetch's deadline. A fetch for an
//! unknown kid (a request's) moves the schedule too: see [`tollgate_auth::jwks`].

use crate::runtime::Runtime;
use crate::shared::Shared;
use std::sync::Arc;
use std::time::Instant;

pub(super) fn refresh(shared: &Arc<Shared>, rt: &Arc<Runtime>, now: Instant) {
    let Some(jwks) = &rt.jwks else {
        return;
    };
    if !jwks.due(now) {
        return;
    }
    let (jwks, shared) = (jwks.clone(), shared.clone());
    tokio::spawn(async move { jwks.scheduled(&shared.metrics).await });
}
