//! A route's `timeouts = { request = "10s", upstream = "5s" }`: how long a request may wait
//! for its answer's head from its arrival (every attempt and the time it was held counted),
//! and how long each attempt waits for the upstream's answer in place of the upstream's
//! `read_timeout`. Either past: `504` (`UPSTREAM_TIMEOUT`).

use crate::model::{RouteAction, RouteTimeouts};
use crate::reader::{Cx, Tbl};

/// The longest timeout a route may set.
const MAX: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

pub(crate) fn route(
    cx: &mut Cx,
    r: &mut Tbl,
    action: Option<&RouteAction>,
    ok: &mut bool,
) -> Option<Box<RouteTimeouts>> {
    let v = r.get("timeouts")?;
    if let Some(RouteAction::Respond { .. }) = action {
        cx.err(
            &r.key_path("timeouts"),
            v.span(),
            "timeouts needs a route with an upstream (this one answers by itself)",
        );
        *ok = false;
        return None;
    }
    let Some(mut t) = Tbl::of(cx, r.key_path("timeouts"), v) else {
        *ok = false;
        return None;
    };
    let mut one = |cx: &mut Cx, t: &mut Tbl, key: &str| {
        let v = t.get(key)?;
        let p = t.key_path(key);
        let d = crate::scalars::duration(cx, &p, v);
        match d {
            Some(d) if d >= std::time::Duration::from_millis(1) && d <= MAX => Some(d),
            Some(_) => {
                cx.err(
                    &p,
                    v.span(),
                    "a timeout is from 1ms to 24h (leave it out for none)",
                );
                *ok = false;
                None
            }
            None => {
                *ok = false;
                None
            }
        }
    };
    let request = one(cx, &mut t, "request");
    let upstream = one(cx, &mut t, "upstream");
    t.finish(cx);
    if request.is_none() && upstream.is_none() {
        return None;
    }
    Some(Box::new(RouteTimeouts { request, upstream }))
}
