//! Trace spans exported (`[tracing]`): the queue is drained every 5 s (`EXPORT_EVERY`), or
//! as soon as a batch is full, by one export task at a time (each of its batches bounded by
//! `timeout`); at shutdown what is queued goes out once more.

use crate::shared::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Starts an export when spans wait and one is due (a full batch, or `EXPORT_EVERY` since the
/// last), unless one is under way.
pub fn run(shared: &Arc<Shared>, due: &mut super::Due, now: Instant) {
    let q = &shared.spans;
    if q.is_empty() || !(q.len() >= tollgate_core::observe::traces::BATCH || due.now(now)) {
        return;
    }
    if q.exporting.swap(true, Ordering::AcqRel) {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        // Cleared however the export ends (done, failed, or its task dropped).
        let _done = Exporting(&shared);
        let rt = shared.runtime.load_full();
        tollgate_core::observe::traces::export(
            rt.tracing.as_deref(),
            &shared.spans,
            &shared.metrics,
            None,
        )
        .await;
    });
}

struct Exporting<'a>(&'a Shared);

impl Drop for Exporting<'_> {
    fn drop(&mut self) {
        self.0.spans.exporting.store(false, Ordering::Release);
    }
}

/// At shutdown, after the leases went back: what is queued is exported once more, within
/// [`FLUSH_WITHIN`] (what is left then is counted as dropped).
pub async fn flush(shared: &Shared) {
    if shared.spans.is_empty() {
        return;
    }
    let rt = shared.runtime.load_full();
    let deadline = Instant::now() + FLUSH_WITHIN;
    tollgate_core::observe::traces::export(
        rt.tracing.as_deref(),
        &shared.spans,
        &shared.metrics,
        Some(deadline),
    )
    .await;
}

/// The most the last export may take at shutdown.
pub const FLUSH_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
