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

/// One store of each kind, of `cap` keys in one shard, fed `ops` (key, gap, requests in a row);
/// checked after every request (issue 11): a key refused at that moment is evicted only if no
/// other key in the shard would have admitted a request (short of those at rest, which go
/// first, losslessly); a new key always gets a state; the store keeps to its bound; and its
/// counters tell exactly what went.
fn refusals_outlast_every_other_key(
    kind: u8,
    rate: Rate,
    burst: u64,
    cap: usize,
    ops: &[(u64, u64, u8)],
) -> Result<(), TestCaseError> {
    match kind {
        0 => check_refusals(KeyedStore::new(TokenBucket::new(rate, burst), cap), ops),
        1 => check_refusals(KeyedStore::new(Gcra::new(rate, burst), cap), ops),
        2 => check_refusals(KeyedStore::new(LeakyBucket::new(rate, burst, 0), cap), ops),
        3 => check_refusals(KeyedStore::new(SlidingLog::new(rate, burst), cap), ops),
        4 => check_refusals(KeyedStore::new(FixedWindow::new(rate, burst), cap), ops),
        5 => check_refusals(KeyedStore::new(SlidingWindow::new(rate, burst), cap), ops),
        _ => {
            let day = Calendar {
                unit: CalendarUnit::Day,
                offset_secs: 0,
            };
            check_refusals(KeyedStore::new(FixedWindow::calendar(day, burst), cap), ops)
        }
    }
}

/// Keys below 32 are a client's own, hit again and again; the others stand for fresh keys, each
/// seen once with one request (the churn of the issue).
fn check_refusals<A: Algorithm>(
    store: KeyedStore<A>,
    ops: &[(u64, u64, u8)],
) -> Result<(), TestCaseError> {
    let mut now = 86_400_000_000_000u64;
    let mut held: Vec<u64> = Vec::new();
    for (i, &(k, gap, times)) in ops.iter().enumerate() {
        now += gap;
        let (k, times) = if k < 32 {
            (k, times)
        } else {
            (1_000 + i as u64, 1)
        };
        let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        held.retain(|&h| store.contains(h));
        let before: Vec<(u64, bool)> = held
            .iter()
            .filter(|&&h| h != key)
            .map(|&h| (h, !store.peek(h, now, 1).is_allowed()))
            .collect();
        let stats = store.stats();
        for _ in 0..times {
            let _ = store.acquire(key, now, 1);
        }
        prop_assert!(store.contains(key), "a new key gets a state");
        prop_assert!(store.len() <= store.capacity());
        let after = store.stats();
        let (idle, active) = (
            after.evicted_idle - stats.evicted_idle,
            after.evicted_active - stats.evicted_active,
        );
        let gone = before.iter().filter(|(h, _)| !store.contains(*h)).count() as u64;
        let refused = before
            .iter()
            .filter(|&&(h, refused)| refused && !store.contains(h))
            .count() as u64;
        prop_assert_eq!(gone, idle + active);
        prop_assert_eq!(refused, after.evicted_refused - stats.evicted_refused);
        // Refused keys went: then nothing that would admit a request was lost with them (had
        // there been such a key, it would have gone instead).
        if refused > 0 {
            prop_assert_eq!(
                active,
                refused,
                "a refused key went while another key would admit"
            );
            prop_assert!(before.iter().all(|&(h, r)| r || !store.contains(h)));
        }
        if !held.contains(&key) {
            held.push(key);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/proptests.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_refused_key_is_evicted_only_from_a_shard_of_refusals(
        kind in 0u8..7,
        count in 1u64..20,
        period_ms in 1u64..5_000,
        burst in 1u64..6,
        // Under 512 keys a store is one shard.
        cap in 2usize..64,
        ops in prop::collection::vec(
            // Gaps in thousandths of the period, most of them none.
            (0u64..64, prop_oneof![2 => Just(0u64), 1 => 0u64..100], 1u8..8),
            1..300,
        ),
    ) {
        let rate = Rate::new(count, Duration::from_millis(period_ms)).expect("rate");
        let ops: Vec<_> = ops
            .into_iter()
            .map(|(k, gap, times)| (k, period_ms * 1_000 * gap, times))
            .collect();
        refusals_outlast_every_other_key(kind, rate, burst, cap, &ops)?;
    }
}

/// The contract a full store relies on to drop states at rest: `pressure` is 0 exactly when
/// `at_rest`, at every moment after any sequence of acquires and refunds.
fn pressure_is_zero_exactly_at_rest<A: Algorithm>(
    alg: A,
    ops: &[(u64, u8)],
    probes: &[u64],
) -> Result<(), TestCaseError> {
    let mut now = 86_400_000_000_000u64;
    let mut s = alg.new_state(now);
    for &(gap, op) in ops {
        now += gap;
        match op {
            0 => alg.refund(&mut s, now, 1),
            cost => {
                let _ = alg.acquire(&mut s, now, cost as u64);
            }
        }
        for &p in probes {
            let t = now + p;
            prop_assert_eq!(
                alg.at_rest(&s, t),
                alg.pressure(&s, t) == 0,
                "at {} + {}",
                now,
                p
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/proptests.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn pressure_is_zero_exactly_when_a_state_is_at_rest(
        kind in 0u8..7,
        count in 1u64..20,
        period_ms in 1u64..5_000,
        burst in 1u64..8,
        ops in prop::collection::vec((prop_oneof![Just(0u64), 0u64..2_000_000_000], 0u8..4), 1..100),
        probes in prop::collection::vec(0u64..10_000_000_000, 1..4),
    ) {
        let rate = Rate::new(count, Duration::from_millis(period_ms)).expect("rate");
        let day = Calendar { unit: CalendarUnit::Day, offset_secs: 0 };
        match kind {
            0 => pressure_is_zero_exactly_at_rest(TokenBucket::new(rate, burst), &ops, &probes)?,
            1 => pressure_is_zero_exactly_at_rest(Gcra::new(rate, burst), &ops, &probes)?,
            2 => pressure_is_zero_exactly_at_rest(LeakyBucket::new(rate, burst, 0), &ops, &probes)?,
            3 => pressure_is_zero_exactly_at_rest(SlidingLog::new(rate, burst), &ops, &probes)?,
            4 => pressure_is_zero_exactly_at_rest(FixedWindow::new(rate, burst), &ops, &probes)?,
            5 => pressure_is_zero_exactly_at_rest(SlidingWindow::new(rate, burst), &ops, &probes)?,
            _ => pressure_is_zero_exactly_at_rest(FixedWindow::calendar(day, burst), &ops, &probes)?,
        }
    }
}
