//! `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`: the upstream's
//! `connect_timeout`, `read_timeout`, `write_timeout`. Without them ingress-nginx's defaults
//! (5 s, 60 s, 60 s) are written, so a migration keeps them: a WebSocket idle for 50 s stays
//! open, as behind ingress-nginx.

use super::anns::Anns;
use super::text::{comment, Warnings};
use super::upstreams::Timeouts;

pub(super) fn read(a: &mut Anns, w: &mut Warnings) -> Timeouts {
    let mut timeouts = Timeouts::DEFAULT;
    let ctx = a.ctx();
    let t = &mut timeouts;
    for (key, slot) in [
        ("proxy-connect-timeout", &mut t.connect),
        ("proxy-read-timeout", &mut t.read),
        ("proxy-send-timeout", &mut t.send),
    ] {
        let Some(v) = a.get(key) else { continue };
        match seconds(v) {
            Some((n, false)) => *slot = n,
            Some((n, true)) => {
                w.push(comment(&format!(
                    "{ctx}: {key} \"{v}\": ingress-nginx reads whole seconds without a unit (and used its default for this); {n}s used, as meant"
                )));
                *slot = n;
            }
            None => w.push(comment(&format!(
                "{ctx}: {key} \"{v}\" is not a number of seconds: {}s used (ingress-nginx's default)",
                *slot
            ))),
        }
    }
    timeouts
}

/// Whole seconds, at least 1; `true` when written with an `s`.
fn seconds(v: &str) -> Option<(u64, bool)> {
    let v = v.trim();
    let (digits, unit) = match v.strip_suffix('s') {
        Some(d) => (d, true),
        None => (v, false),
    };
    match digits.parse::<u64>() {
        Ok(n) if (1..=86_400).contains(&n) && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Some((n, unit))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn whole_seconds_with_or_without_a_unit() {
        assert_eq!(super::seconds("60"), Some((60, false)));
        assert_eq!(super::seconds(" 3s"), Some((3, true)));
        for bad in ["0", "-3", "soon", "1.5", "+4", "100000"] {
            assert_eq!(super::seconds(bad), None, "{bad}");
        }
    }
}
