//! Status conditions as the Gateway API writes them (`metav1.Condition`): type, status,
//! reason, message and the generation observed. `lastTransitionTime` is the status writer's
//! (kept while the status stays, now when it changes).

use serde_json::{json, Value};

pub fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Value {
    json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "observedGeneration": generation.unwrap_or(0),
    })
}
