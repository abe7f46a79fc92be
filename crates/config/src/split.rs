//! A route's `backends` (docs/routes.md): its requests split among upstreams by weight, the
//! Gateway API's weighted `backendRefs`. `{ status = 500, weight }` is a share answered 500
//! (a backend the cluster named that cannot be used, as the Gateway API asks).
//!
//! Refused at load: `backends` with `upstream`, `respond` or `canary`; an unknown upstream;
//! no upstream at all among them; weights that sum to 0 (write `respond` instead).

use crate::model::{Backend, Split, UpstreamConfig};
use crate::named::Named;
use crate::reader::{as_array, as_int_in, Cx, Tbl, Value};

/// The largest weight (the Gateway API's bound).
pub const MAX_WEIGHT: i64 = 1_000_000;

/// `backends`, read: the split, and the upstream it sends to first (the route's action).
pub(crate) fn read(
    cx: &mut Cx,
    p: &str,
    v: &Value,
    upstreams: &Named<UpstreamConfig>,
) -> Option<(Split, usize)> {
    let items = as_array(cx, p, v)?;
    let mut backends = Vec::new();
    let mut good = true;
    for (i, item) in items.iter().enumerate() {
        match backend(cx, &format!("{p}[{i}]"), item, upstreams) {
            Some(b) => backends.push(b),
            None => good = false,
        }
    }
    if !good {
        return None;
    }
    let Some(first) = backends.iter().find_map(|b| b.upstream) else {
        cx.err(p, v.span(), "backends needs at least one upstream");
        return None;
    };
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    if total == 0 {
        cx.err(
            p,
            v.span(),
            "the weights sum to 0: no request could be sent (write respond instead)",
        );
        return None;
    }
    let total = u32::try_from(total).ok().or_else(|| {
        cx.err(p, v.span(), "the weights sum to more than 4294967295");
        None
    })?;
    Some((Split { backends, total }, first))
}

fn backend(cx: &mut Cx, p: &str, v: &Value, upstreams: &Named<UpstreamConfig>) -> Option<Backend> {
    let mut t = Tbl::of(cx, p.to_string(), v)?;
    let weight = match t.get("weight") {
        Some(w) => as_int_in(cx, &t.key_path("weight"), w, 0, MAX_WEIGHT).map(|w| w as u32),
        None => Some(1),
    };
    let upstream = match (t.get("upstream"), t.get("status")) {
        (Some(_), Some(sv)) => {
            cx.err(
                &t.key_path("status"),
                sv.span(),
                "upstream and status: set one",
            );
            None
        }
        (Some(uv), None) => upstreams
            .refer(cx, &t.key_path("upstream"), uv, "upstream")
            .map(Some),
        (None, Some(sv)) => as_int_in(cx, &t.key_path("status"), sv, 500, 500).map(|_| None),
        (None, None) => {
            cx.err(p, t.span.clone(), "missing key \"upstream\" or \"status\"");
            None
        }
    };
    t.finish(cx);
    Some(Backend {
        upstream: upstream?,
        weight: weight?,
    })
}
