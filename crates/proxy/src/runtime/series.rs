//! A route's metric series, each made on its first use. Made up front, a cluster's 15,000
//! routes held ~20 series each (and 600 empty status slots) before their first request; now
//! a route that is never asked for costs a few empty cells, and a series appears in
//! `/metrics` once something counted in it (as Prometheus client libraries' labelled series
//! do). The hot path pays one atomic load per series touched.

use crate::limits::compiled::LimitRt;
use prometheus::{Histogram, IntCounter, IntGauge};
use std::sync::OnceLock;
use tollgate_core::observe::metrics::{status_str, Metrics};

/// The statuses with a slot of their own; any other is looked up by its labels each time.
const SLOTTED: [u16; 36] = [
    100, 101, 200, 201, 202, 204, 206, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 405, 406,
    408, 409, 410, 411, 412, 413, 414, 415, 416, 422, 429, 431, 499, 500, 502, 503, 504,
];

/// Each status's slot in [`SLOTTED`] (`NONE`: it has none), so that a response finds its
/// counter by one index, as the 600 slots did.
const SLOT_OF: [u8; 600] = {
    let mut t = [NONE; 600];
    let mut i = 0;
    while i < SLOTTED.len() {
        t[SLOTTED[i] as usize] = i as u8;
        i += 1;
    }
    t
};
const NONE: u8 = u8::MAX;

fn slot(status: u16) -> Option<usize> {
    match SLOT_OF.get(status as usize) {
        Some(&i) if i != NONE => Some(i as usize),
        _ => None,
    }
}

/// What a refusal by one of the route's limits is counted as
/// (`http_requests_rejected_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// `rate_limit`, or `quota` for a calendar limit.
    Limit = 0,
    Blocked = 1,
    TarpitOverflow = 2,
    Challenge = 3,
}

#[derive(Default)]
pub struct RouteSeries {
    /// `http_requests_total{route,status}`, by [`slot`]; the slots are made on the first count.
    statuses: OnceLock<Box<[OnceLock<IntCounter>]>>,
    /// `http_request_duration_seconds{route}`.
    duration: OnceLock<Histogram>,
    /// The series of refusals, access lists and tarpits, made when the first is counted
    /// (most routes never count one: 8 bytes instead of ~110 and a box per route).
    rare: OnceLock<Box<Rare>>,
    /// The route's limits (the refusal series' rows).
    limits: u32,
}

#[derive(Default)]
struct Rare {
    /// `http_requests_rejected_total{reason="body_too_large",route,limit=""}`.
    body_refused: OnceLock<IntCounter>,
    /// `tollgate_access_allowed_total{route,reason}` for reasons ip, api_key.
    access_allowed: [OnceLock<IntCounter>; 2],
    /// `http_requests_rejected_total{reason="access_denied",route,limit=""}`.
    access_denied: OnceLock<IntCounter>,
    /// `tollgate_tarpit_held{route}`, `tollgate_tarpit_held_total{route}`.
    tarpit_held: OnceLock<IntGauge>,
    tarpit_total: OnceLock<IntCounter>,
    /// `http_requests_rejected_total{reason,route,limit}` by the limit's position in the
    /// route's `limits`, then by [`RefusalKind`].
    refused: Box<[[OnceLock<IntCounter>; 4]]>,
}

impl RouteSeries {
    /// For a route with `limits` limits.
    pub fn new(limits: usize) -> Self {
        Self {
            limits: u32::try_from(limits).unwrap_or(u32::MAX),
            ..Self::default()
        }
    }

    fn rare(&self) -> &Rare {
        self.rare.get_or_init(|| {
            Box::new(Rare {
                refused: (0..self.limits).map(|_| Default::default()).collect(),
                ..Rare::default()
            })
        })
    }

    /// Counts a response (statuses from 600 up are not HTTP's and not counted, as before).
    pub fn count(&self, m: &Metrics, route: &str, status: u16) {
        if status >= 600 {
            return;
        }
        let series = || m.requests.with_label_values(&[route, status_str(status)]);
        match slot(status) {
            Some(i) => self
                .statuses
                .get_or_init(|| SLOTTED.iter().map(|_| OnceLock::new()).collect())[i]
                .get_or_init(series)
                .inc(),
            None => series().inc(),
        }
    }

    pub fn duration(&self, m: &Metrics, route: &str) -> &Histogram {
        self.duration
            .get_or_init(|| m.duration.with_label_values(&[route]))
    }

    pub fn body_refused(&self, m: &Metrics, route: &str) -> &IntCounter {
        self.rare()
            .body_refused
            .get_or_init(|| m.rejected.with_label_values(&["body_too_large", route, ""]))
    }

    /// `why`: 0 for an allowed address, 1 for an allowed API key.
    pub fn access_allowed(&self, m: &Metrics, route: &str, why: usize) -> &IntCounter {
        self.rare().access_allowed[why].get_or_init(|| {
            m.access_allowed
                .with_label_values(&[route, ["ip", "api_key"][why]])
        })
    }

    pub fn access_denied(&self, m: &Metrics, route: &str) -> &IntCounter {
        self.rare()
            .access_denied
            .get_or_init(|| m.rejected.with_label_values(&["access_denied", route, ""]))
    }

    pub fn tarpit_held(&self, m: &Metrics, route: &str) -> &IntGauge {
        self.rare()
            .tarpit_held
            .get_or_init(|| m.tarpit_held.with_label_values(&[route]))
    }

    pub fn tarpit_total(&self, m: &Metrics, route: &str) -> &IntCounter {
        self.rare()
            .tarpit_total
            .get_or_init(|| m.tarpit_total.with_label_values(&[route]))
    }

    /// The counter of a refusal by the route's limit at `pos` (`limit`, compiled).
    pub fn refused(
        &self,
        m: &Metrics,
        route: &str,
        pos: usize,
        limit: &LimitRt,
        why: RefusalKind,
    ) -> Option<&IntCounter> {
        let reason = match why {
            RefusalKind::Limit if limit.quota => "quota",
            RefusalKind::Limit => "rate_limit",
            RefusalKind::Blocked => "blocked",
            RefusalKind::TarpitOverflow => "tarpit_overflow",
            RefusalKind::Challenge => "challenge",
        };
        let cell = self.rare().refused.get(pos)?.get(why as usize)?;
        Some(cell.get_or_init(|| {
            m.rejected
                .with_label_values(&[reason, route, &limit.cfg.name])
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector;

    /// (labels, value) of every series of a counter family.
    fn series(c: &prometheus::IntCounterVec) -> Vec<(Vec<String>, u64)> {
        c.collect()[0]
            .get_metric()
            .iter()
            .map(|m| {
                let labels = m.get_label().iter().map(|l| l.value().to_string());
                (labels.collect(), m.get_counter().get_value() as u64)
            })
            .collect()
    }

    #[test]
    fn the_slotted_statuses_are_sorted_and_distinct() {
        assert!(SLOTTED.windows(2).all(|w| w[0] < w[1]));
        for (i, &st) in SLOTTED.iter().enumerate() {
            assert_eq!(slot(st), Some(i));
        }
        assert_eq!(slot(200), Some(2));
        assert_eq!(slot(0), None);
        assert_eq!(slot(599), None);
        assert_eq!(slot(600), None);
        assert_eq!(slot(u16::MAX), None);
    }

    #[test]
    fn a_route_holds_no_series_until_it_counts_and_then_loses_no_count() {
        let m = Metrics::new().expect("metrics");
        let s = RouteSeries::new(2);
        assert!(series(&m.requests).is_empty());
        assert!(series(&m.rejected).is_empty());
        for status in [200, 200, 299, 299, 299, 0, 600, 999] {
            s.count(&m, "r", status);
        }
        let mut got = series(&m.requests);
        got.sort();
        let want = |st: &str, n| (vec!["r".to_string(), st.to_string()], n);
        // A slotted status and one without a slot are counted alike; 600+ is not HTTP's.
        assert_eq!(got, [want("0", 1), want("200", 2), want("299", 3)]);
        s.body_refused(&m, "r").inc();
        s.access_denied(&m, "r").inc();
        s.access_denied(&m, "r").inc();
        let mut got = series(&m.rejected);
        got.sort();
        let want = |why: &str, n| (vec![String::new(), why.to_string(), "r".to_string()], n);
        assert_eq!(got, [want("access_denied", 2), want("body_too_large", 1)]);
    }
}
