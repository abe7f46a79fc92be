//! What a refusal does and what a limit keeps: `action` (reject, tarpit, challenge) and their
//! settings, the escalation ladder (`block`), `count = "failures"`, `retry_after_jitter`,
//! `shadow`, `max_keys`.

use super::Draft;
use crate::model::*;
use crate::reader::{as_bool, as_int_in, Cx, Tbl};
use crate::scalars::duration;
use std::time::Duration;
use tollgate_limit::DEFAULT_MAX_KEYS;

/// The action and its settings, the ladder and the rest of what a limit keeps.
pub(super) fn read(cx: &mut Cx, l: &mut Tbl<'_, '_>, d: &mut Draft) {
    let path = d.path.clone();
    let concurrency = d.concurrency;
    let retry_after_jitter = match l.get("retry_after_jitter") {
        Some(v) => {
            let p = l.key_path("retry_after_jitter");
            duration(cx, &p, v).and_then(|d| {
                if d > Duration::from_secs(3600) {
                    cx.err(&p, v.span(), "at most 1h");
                    None
                } else {
                    Some(d)
                }
            })
        }
        None => Some(Duration::ZERO),
    };
    let shadow = match l.get("shadow") {
        Some(v) => as_bool(cx, &l.key_path("shadow"), v).unwrap_or(false),
        None => false,
    };
    let max_keys = match l.get("max_keys") {
        Some(v) => as_int_in(cx, &l.key_path("max_keys"), v, 1, 100_000_000).map(|n| n as usize),
        None => Some(DEFAULT_MAX_KEYS),
    };
    let action = match l.get("action") {
        Some(av) => crate::abuse::action(cx, &l.key_path("action"), av),
        None => Some(Action::Reject),
    };
    let tarpit = match (l.get("tarpit"), action) {
        (Some(v), Some(Action::Tarpit)) => {
            crate::abuse::tarpit(cx, &l.key_path("tarpit"), v).map(Some)
        }
        (Some(v), _) => {
            cx.err(
                &l.key_path("tarpit"),
                v.span(),
                "tarpit settings need action = \"tarpit\"",
            );
            None
        }
        (None, _) => Some(None),
    };
    let challenge_url = match (l.get("challenge_url"), action) {
        (Some(v), Some(Action::Challenge)) => {
            crate::abuse::challenge_url(cx, &l.key_path("challenge_url"), v).map(Some)
        }
        (Some(v), _) => {
            cx.err(
                &l.key_path("challenge_url"),
                v.span(),
                "challenge_url needs action = \"challenge\"",
            );
            None
        }
        (None, Some(Action::Challenge)) => {
            cx.err(
                &path,
                l.span.clone(),
                "action = \"challenge\" needs challenge_url (where the client solves it)",
            );
            None
        }
        (None, _) => Some(None),
    };
    let block = match l.get("block") {
        Some(v) => crate::abuse::ladder(cx, &l.key_path("block"), v),
        None => Some(Vec::new()),
    };
    let count_failures = crate::abuse::count_failures(cx, l).ok();
    if concurrency {
        // A slot is held for the request's whole life and given back at its end.
        for k in ["count", "plan"] {
            if let Some(v) = l.get(k) {
                cx.err(
                    &l.key_path(k),
                    v.span(),
                    format!("{k} does not apply to a concurrency limit (a slot is held while its request runs)"),
                );
            }
        }
    }
    d.retry_after_jitter = retry_after_jitter;
    d.shadow = shadow;
    d.max_keys = max_keys;
    d.action = action;
    d.tarpit = tarpit;
    d.challenge_url = challenge_url;
    d.block = block;
    d.count_failures = count_failures;
}
