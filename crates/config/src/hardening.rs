//! The edge-hardening keys of `[server]`: deadlines and bounds on every connection, and how
//! request paths are made canonical. Each default is safe at the edge (docs/hardening.md).

use crate::model::{EscapedSlashes, Hardening};
use crate::reader::{as_bool, as_int_in, as_str, Cx, Tbl};
use crate::scalars::duration;
use std::time::Duration;

impl Default for Hardening {
    fn default() -> Self {
        Hardening {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(60),
            min_body_rate: 1024,
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            max_connections: 50_000,
            max_connections_per_client: 0,
            max_h2_streams: 100,
            merge_slashes: true,
            escaped_slashes: EscapedSlashes::Reject,
        }
    }
}

/// A deadline: at least a millisecond, at most a day (a zero deadline would close every
/// connection; "never" is what these keys exist to prevent).
fn deadline(cx: &mut Cx, t: &mut Tbl, key: &str, into: &mut Duration) {
    let Some(v) = t.get(key) else { return };
    let path = t.key_path(key);
    if let Some(d) = duration(cx, &path, v) {
        if d < Duration::from_millis(1) || d > Duration::from_secs(86_400) {
            cx.err(&path, v.span(), "between 1ms and 1d");
        } else {
            *into = d;
        }
    }
}

fn count(cx: &mut Cx, t: &mut Tbl, key: &str, lo: i64, hi: i64, into: &mut usize) {
    if let Some(v) = t.get(key) {
        if let Some(n) = as_int_in(cx, &t.key_path(key), v, lo, hi) {
            *into = n as usize;
        }
    }
}

/// Reads the hardening keys of `[server]` (the caller reads the rest of the table).
pub(crate) fn read(cx: &mut Cx, t: &mut Tbl) -> Hardening {
    let mut h = Hardening::default();
    deadline(cx, t, "header_timeout", &mut h.header_timeout);
    deadline(cx, t, "idle_timeout", &mut h.idle_timeout);
    deadline(cx, t, "body_timeout", &mut h.body_timeout);
    deadline(cx, t, "send_timeout", &mut h.send_timeout);
    if let Some(v) = t.get("idle_timeout") {
        if h.idle_timeout.subsec_nanos() != 0 {
            // Pingora keeps HTTP/1 keep-alive in whole seconds.
            cx.err(
                &t.key_path("idle_timeout"),
                v.span(),
                "whole seconds, e.g. \"60s\"",
            );
        }
    }
    let mut rate = h.min_body_rate as usize;
    count(cx, t, "min_body_rate", 0, 1 << 30, &mut rate);
    h.min_body_rate = rate as u64;
    // 1 KiB holds no real request head; 1 MiB is Pingora's own ceiling.
    count(
        cx,
        t,
        "max_header_bytes",
        1024,
        1 << 20,
        &mut h.max_header_bytes,
    );
    // Pingora's parser holds at most 256 fields.
    count(cx, t, "max_headers", 8, 256, &mut h.max_headers);
    count(
        cx,
        t,
        "max_connections",
        1,
        10_000_000,
        &mut h.max_connections,
    );
    count(
        cx,
        t,
        "max_connections_per_client",
        0,
        10_000_000,
        &mut h.max_connections_per_client,
    );
    count(cx, t, "max_h2_streams", 1, 10_000, &mut h.max_h2_streams);
    if let Some(v) = t.get("merge_slashes") {
        if let Some(b) = as_bool(cx, &t.key_path("merge_slashes"), v) {
            h.merge_slashes = b;
        }
    }
    if let Some(v) = t.get("escaped_slashes") {
        let path = t.key_path("escaped_slashes");
        match as_str(cx, &path, v) {
            Some("reject") => h.escaped_slashes = EscapedSlashes::Reject,
            Some("keep") => h.escaped_slashes = EscapedSlashes::Keep,
            Some("decode") => h.escaped_slashes = EscapedSlashes::Decode,
            Some(other) => cx.err(
                &path,
                v.span(),
                format!("\"{other}\": one of \"reject\", \"keep\", \"decode\""),
            ),
            None => {}
        }
    }
    h
}
