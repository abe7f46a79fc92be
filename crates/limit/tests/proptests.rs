//! Invariants as properties: no window of length t ever admits more than burst + rate*t (+1).

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::time::Duration;
use tollgate_limit::*;

// Kinds 0..4 keep to burst + rate*t in every window; the windows (4, 5) by design do not.
const KINDS: [AlgorithmKind; 6] = [
    AlgorithmKind::TokenBucket,
    AlgorithmKind::Gcra,
    AlgorithmKind::LeakyBucket,
    AlgorithmKind::SlidingLog,
    AlgorithmKind::FixedWindow,
    AlgorithmKind::SlidingWindow,
];

fn limiter(kind: u8, rate: Rate, burst: u64) -> std::sync::Arc<dyn LocalLimiter> {
    let algorithm = KINDS[kind as usize];
    LimitSpec {
        algorithm,
        rate,
        burst,
        delay: burst,
        calendar: None,
    }
    .local(16)
}

proptest! {
    // Failing cases are saved beside this file and replayed first on every run.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/proptests.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_window_admits_more_than_burst_plus_rate_t(
        kind in 0u8..4,
        count in 1u64..50,
        period_ms in 1u64..5_000,
        burst in 1u64..40,
        gaps in prop::collection::vec(0u64..200_000_000, 1..400),
    ) {
        let rate = Rate::new(count, Duration::from_millis(period_ms)).expect("rate");
        let l = limiter(kind, rate, burst);
        let mut now = 1_000_000_000u64;
        let mut admits = Vec::new();
        for g in gaps {
            now += g;
            if l.acquire(1, now, 1).is_allowed() {
                admits.push(now);
            }
        }
        // Every window [admits[i], admits[j]] holds j-i+1 admits.
        for i in 0..admits.len() {
            for j in i..admits.len() {
                let t = (admits[j] - admits[i]) as u128;
                let allowed = burst as u128
                    + t * count as u128 / (period_ms as u128 * 1_000_000)
                    + 1;
                prop_assert!(
                    (j - i + 1) as u128 <= allowed,
                    "{} admits in {} ns, bound {}", j - i + 1, t, allowed
                );
            }
        }
    }

    #[test]
    fn a_steady_client_gets_the_rate(kind in 0u8..3, count in 1u64..20, burst in 1u64..20) {
        // Requests every millisecond over 9.999 s: admits = burst + floor(rate * 9.999 s), less
        // at most one lost to the 1 ms sampling of the refill.
        let rate = Rate::per_second(count).expect("rate");
        let l = limiter(kind, rate, burst);
        let start = 5_000_000_000u64;
        let n = (0..10_000u64).filter(|i| l.acquire(1, start + i * 1_000_000, 1).is_allowed()).count() as u64;
        let expected = burst + count * 9_999 / 1_000;
        prop_assert!(n + 1 >= expected && n <= expected, "{} admitted, expected {}", n, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/proptests.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    /// The window counters' known weakness is bounded: never more than twice the burst plus the
    /// rate in any interval (the fixed window's edge). For every algorithm a retry_after is
    /// honest: the same request at `now + retry_after` is admitted when nothing else arrived.
    #[test]
    fn windows_stay_within_twice_burst_and_retry_after_is_honest(
        kind in 0u8..6,
        count in 1u64..50,
        period_ms in 1u64..5_000,
        burst in 1u64..40,
        gaps in prop::collection::vec(0u64..200_000_000, 1..300),
    ) {
        let rate = Rate::new(count, Duration::from_millis(period_ms)).expect("rate");
        let l = limiter(kind, rate, burst);
        let mut now = 1_000_000_000u64;
        let mut admits = Vec::new();
        for g in gaps {
            now += g;
            match l.acquire(1, now, 1) {
                Decision::Allow { .. } => admits.push(now),
                Decision::Deny { retry_after } => {
                    prop_assert!(l.peek(1, now + retry_after, 1).is_allowed(),
                        "denied at {} with retry_after {} but still denied then", now, retry_after);
                }
            }
        }
        for i in 0..admits.len() {
            for j in i..admits.len() {
                let t = (admits[j] - admits[i]) as u128;
                let allowed = 2 * burst as u128
                    + t * count as u128 / (period_ms as u128 * 1_000_000)
                    + 1;
                prop_assert!((j - i + 1) as u128 <= allowed);
            }
        }
    }
}
