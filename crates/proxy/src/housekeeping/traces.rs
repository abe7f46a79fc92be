//! Trace spans exported (`[tracing]`): the queue is drained every second, or as soon as a
//! batch is full, by one export task at a time (each of its batches bounded by `timeout`);
//! at shutdown what is queued goes out once more.

use crate::shared::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Starts an export when spans wait and one is due (a full batch, or a second since the
/// last), unless one is under way.
pub fn run(shared: &Arc<Shared>, due: &mut super::Due, now: Instant) {
    let q = &shared.spans;
    if q.is_empty() || !(q.len() >= crate::traces::BATCH || due.now(now)) {
        return;
    }
    if q.exporting.swap(true, Ordering::AcqRel) {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let rt = shared.runtime.load_full();
        crate::traces::export(rt.tracing.as_deref(), &shared.spans, &shared.metrics).await;
        shared.spans.exporting.store(false, Ordering::Release);
    });
}

/// At shutdown: what is queued is exported once more (within the export's timeout).
pub async fn flush(shared: &Shared) {
    if shared.spans.is_empty() {
        return;
    }
    let rt = shared.runtime.load_full();
    crate::traces::export(rt.tracing.as_deref(), &shared.spans, &shared.metrics).await;
}
