//! What each algorithm is and can do, in one table that every crate reads: the config's
//! checks, the runtime, the Redis store and the script bounds. The table is an exhaustive
//! `match`: an algorithm added without its row does not compile, and nothing anywhere falls
//! back to another algorithm's script or rules.

use crate::algorithm::AlgorithmKind;

/// One algorithm's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Its name in the config, in metrics and in Redis key names.
    pub name: &'static str,
    /// Its place in [`AlgorithmKind::EVERY`] (the store's script table is in that order).
    pub index: usize,
    /// Chosen by `algorithm = "..."` (a quota is chosen by `quota = "..."`).
    pub named: bool,
    /// Has a rate: units come back over time (a concurrency limit has only its cap).
    pub rated: bool,
    /// `burst` is a count per window, not a bucket's capacity.
    pub window: bool,
    /// Periods follow the calendar (`/day` .. `/year`), not a fixed duration.
    pub calendar: bool,
    /// Its windows are aligned on the Unix epoch: decided on calendar time
    /// ([`crate::Clock::unix_now`]), as the calendar quotas are, not the monotonic clock.
    pub epoch: bool,
    /// A request holds its unit while it runs and gives it back when it ends.
    pub holds: bool,
    /// A refusal lasts until a known time, so the edge may cache it until then (a freed
    /// concurrency slot can come back at any moment).
    pub caches_refusals: bool,
    /// `sync = "lease"` can slice it: its script takes "up to N units" and a slice's unspent
    /// units can go back.
    pub leases: bool,
    /// Queues requests (`delay`): a request may be held, then passed on.
    pub queues: bool,
    /// Its Redis script takes the local limiter's step (interval and tick), so both decide
    /// alike to the nanosecond.
    pub stepped: bool,
    /// The most `burst` can be (one entry per request is kept); `None`: no bound of its own.
    pub max_burst: Option<u64>,
}

impl AlgorithmKind {
    /// Every algorithm, in the order of the store's script table.
    pub const EVERY: [AlgorithmKind; 9] = [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::Concurrency,
        AlgorithmKind::CountingWindow,
        AlgorithmKind::Quota,
    ];

    /// This algorithm's row of the table.
    pub const fn caps(self) -> Capabilities {
        const BUCKET: Capabilities = Capabilities {
            name: "",
            index: 0,
            named: true,
            rated: true,
            window: false,
            calendar: false,
            epoch: false,
            holds: false,
            caches_refusals: true,
            leases: true,
            queues: false,
            stepped: false,
            max_burst: None,
        };
        match self {
            AlgorithmKind::TokenBucket => Capabilities {
                name: "token_bucket",
                index: 0,
                ..BUCKET
            },
            AlgorithmKind::Gcra => Capabilities {
                name: "gcra",
                index: 1,
                stepped: true,
                ..BUCKET
            },
            AlgorithmKind::SlidingWindow => Capabilities {
                name: "sliding_window",
                index: 2,
                window: true,
                ..BUCKET
            },
            AlgorithmKind::FixedWindow => Capabilities {
                name: "fixed_window",
                index: 3,
                window: true,
                ..BUCKET
            },
            AlgorithmKind::SlidingLog => Capabilities {
                name: "sliding_log",
                index: 4,
                window: true,
                // A slice's units cannot go back into a log of timestamps.
                leases: false,
                max_burst: Some(MAX_SLIDING_LOG_BURST),
                ..BUCKET
            },
            AlgorithmKind::LeakyBucket => Capabilities {
                name: "leaky_bucket",
                index: 5,
                // A queued request's place is its own: it cannot be handed out in a slice.
                leases: false,
                queues: true,
                stepped: true,
                ..BUCKET
            },
            AlgorithmKind::Concurrency => Capabilities {
                name: "concurrency",
                index: 6,
                rated: false,
                holds: true,
                caches_refusals: false,
                leases: false,
                ..BUCKET
            },
            AlgorithmKind::CountingWindow => Capabilities {
                name: "counting_window",
                index: 7,
                window: true,
                epoch: true,
                // Every hit counts, refused ones too: a slice's units are not the count.
                leases: false,
                ..BUCKET
            },
            AlgorithmKind::Quota => Capabilities {
                name: "quota",
                index: 8,
                named: false,
                window: true,
                calendar: true,
                epoch: true,
                leases: false,
                ..BUCKET
            },
        }
    }
}

/// The sliding log keeps one entry per request: at most this many per window.
pub const MAX_SLIDING_LOG_BURST: u64 = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_has_its_own_row_in_table_order() {
        for (i, k) in AlgorithmKind::EVERY.iter().enumerate() {
            let c = k.caps();
            assert_eq!(c.index, i, "{k:?}");
            assert_eq!(AlgorithmKind::EVERY[c.index], *k);
            assert!(!c.name.is_empty(), "{k:?}");
            assert_eq!(AlgorithmKind::from_name(c.name).is_some(), c.named, "{k:?}");
        }
        let names: std::collections::HashSet<_> =
            AlgorithmKind::EVERY.iter().map(|k| k.caps().name).collect();
        assert_eq!(names.len(), AlgorithmKind::EVERY.len(), "names are unique");
        // The named ones are what `algorithm = "..."` accepts, in order.
        let named: Vec<_> = AlgorithmKind::EVERY
            .into_iter()
            .filter(|k| k.caps().named)
            .collect();
        assert_eq!(named, AlgorithmKind::ALL);
    }
}
