//! Limiter behaviour on a manual clock: exact admits, refill, Retry-After, odd clocks.

use std::time::Duration;
use tollgate_limit::*;

const SEC: u64 = NANOS_PER_SEC;

fn both(rate: Rate, burst: u64) -> Vec<(&'static str, Box<dyn LocalLimiter>)> {
    vec![
        (
            "token_bucket",
            Box::new(KeyedStore::new(TokenBucket::new(rate, burst), 1000)) as Box<dyn LocalLimiter>,
        ),
        (
            "gcra",
            Box::new(KeyedStore::new(Gcra::new(rate, burst), 1000)),
        ),
        (
            "leaky_bucket nodelay",
            Box::new(KeyedStore::new(LeakyBucket::new(rate, burst, burst), 1000)),
        ),
    ]
}

fn admitted(l: &dyn LocalLimiter, key: u64, now: Nanos, n: usize) -> usize {
    (0..n)
        .filter(|_| l.acquire(key, now, 1).is_allowed())
        .count()
}

#[test]
fn burst_then_refill_at_the_rate() {
    let clock = ManualClock::new(1_000 * SEC);
    for (name, l) in both(Rate::per_second(10).expect("rate"), 20) {
        let t0 = clock.now();
        assert_eq!(admitted(&*l, 1, t0, 50), 20, "{name}: burst");
        // 100 ms later exactly one token is back.
        assert_eq!(admitted(&*l, 1, t0 + SEC / 10, 5), 1, "{name}: one refill");
        assert_eq!(
            admitted(&*l, 1, t0 + SEC / 10 + SEC / 10 - 1, 5),
            0,
            "{name}: not early"
        );
        // One second later: ten more.
        assert_eq!(
            admitted(&*l, 1, t0 + SEC + SEC / 10, 50),
            10,
            "{name}: rate"
        );
    }
}

#[test]
fn remaining_counts_down_and_retry_after_is_exact() {
    for (name, l) in both(Rate::new(5, Duration::from_secs(60)).expect("rate"), 5) {
        let now = 10 * SEC;
        for want in (0..5).rev() {
            match l.acquire(7, now, 1) {
                Decision::Allow { remaining, .. } => assert_eq!(remaining, want, "{name}"),
                d => panic!("{name}: {d:?}"),
            }
        }
        match l.acquire(7, now, 1) {
            // One token every 12 s.
            Decision::Deny { retry_after } => assert_eq!(retry_after, 12 * SEC, "{name}"),
            d => panic!("{name}: {d:?}"),
        }
        match l.acquire(7, now + 5 * SEC, 1) {
            Decision::Deny { retry_after } => assert_eq!(retry_after, 7 * SEC, "{name}"),
            d => panic!("{name}: {d:?}"),
        }
        assert!(
            l.acquire(7, now + 12 * SEC, 1).is_allowed(),
            "{name}: after retry_after"
        );
        assert_eq!(ceil_secs(12 * SEC - 1), 12);
        assert_eq!(ceil_secs(1), 1);
    }
}

#[test]
fn reset_reports_time_to_full() {
    for (name, l) in both(Rate::per_second(1).expect("rate"), 3) {
        match l.acquire(1, 100 * SEC, 2) {
            Decision::Allow {
                remaining, reset, ..
            } => {
                assert_eq!(remaining, 1, "{name}");
                assert_eq!(reset, 2 * SEC, "{name}");
            }
            d => panic!("{name}: {d:?}"),
        }
    }
}

#[test]
fn keys_are_isolated() {
    for (name, l) in both(Rate::per_second(1).expect("rate"), 2) {
        assert_eq!(admitted(&*l, 1, SEC, 5), 2, "{name}");
        assert_eq!(admitted(&*l, 2, SEC, 5), 2, "{name}");
    }
}

#[test]
fn huge_gaps_do_not_overflow_and_cap_at_burst() {
    for (name, l) in both(Rate::per_second(1_000_000_000).expect("rate"), 3) {
        assert_eq!(admitted(&*l, 1, 0, 10), 3, "{name}");
        assert_eq!(
            admitted(&*l, 1, u64::MAX / 2, 10),
            3,
            "{name}: after ~292 years"
        );
        assert_eq!(
            admitted(&*l, 1, u64::MAX / 2 + 1, 10),
            1,
            "{name}: one ns later, one unit"
        );
    }
    for (name, l) in both(
        Rate::new(1, Duration::from_secs(86_400 * 365)).expect("rate"),
        1_000_000,
    ) {
        assert!(l.acquire(1, 5, 1).is_allowed(), "{name}");
        match l.acquire(1, 5, 2_000_000) {
            Decision::Deny { retry_after } => assert!(retry_after > 0, "{name}"),
            d => panic!("{name}: cost above burst must be denied: {d:?}"),
        }
    }
}

#[test]
fn a_clock_going_backwards_grants_nothing() {
    for (name, l) in both(Rate::per_second(1).expect("rate"), 2) {
        assert_eq!(admitted(&*l, 1, 100 * SEC, 5), 2, "{name}");
        assert_eq!(admitted(&*l, 1, 50 * SEC, 5), 0, "{name}: back in time");
        assert_eq!(
            admitted(&*l, 1, 100 * SEC, 5),
            0,
            "{name}: back to the present"
        );
        assert_eq!(admitted(&*l, 1, 101 * SEC, 5), 1, "{name}: time moves on");
    }
}

#[test]
fn refund_gives_back_exactly_what_was_taken() {
    for (name, l) in both(Rate::new(1, Duration::from_secs(60)).expect("rate"), 2) {
        assert!(l.acquire(1, SEC, 1).is_allowed());
        l.refund(1, SEC, 1);
        assert_eq!(admitted(&*l, 1, SEC, 5), 2, "{name}: the refund is usable");
        l.refund(1, SEC, 5);
        assert_eq!(admitted(&*l, 1, SEC, 5), 2, "{name}: never above burst");
    }
}

#[test]
fn peek_takes_nothing() {
    for (name, l) in both(Rate::per_second(1).expect("rate"), 1) {
        assert!(l.peek(1, SEC, 1).is_allowed(), "{name}");
        assert!(l.acquire(1, SEC, 1).is_allowed(), "{name}");
        assert!(!l.peek(1, SEC, 1).is_allowed(), "{name}");
        assert!(!l.acquire(1, SEC, 1).is_allowed(), "{name}");
    }
}

#[test]
fn the_store_is_bounded_and_evicts_idle_keys_first() {
    let rate = Rate::new(1, Duration::from_secs(60)).expect("rate");
    let store = KeyedStore::new(Gcra::new(rate, 1), 1000);
    let cap = store.capacity();
    assert!((1000..1100).contains(&cap), "capacity {cap}");
    // 5000 distinct keys, each spending its allowance: the map never grows past capacity.
    for k in 0..5000u64 {
        let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        assert!(store.acquire(key, SEC, 1).is_allowed());
        assert!(store.len() <= cap);
    }
    let s = store.stats();
    assert!(
        s.evicted_active > 0,
        "the flood forced lossy evictions: {s:?}"
    );
    // Once they are at rest (a minute later), new keys push out only idle ones.
    let before = store.stats().evicted_active;
    for k in 5000..6000u64 {
        let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        assert!(store.acquire(key, 120 * SEC, 1).is_allowed());
    }
    let s = store.stats();
    assert_eq!(s.evicted_active, before, "idle keys went first: {s:?}");
    assert!(s.evicted_idle > 0);
    // A key still in its window keeps its state while idle keys are around.
    let hot = 0xDEAD_BEEF_u64;
    assert!(store.acquire(hot, 130 * SEC, 1).is_allowed());
    // 500 more keys while nothing is at rest: the least recently active go, not the hot key.
    for k in 6000..6500u64 {
        let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let _ = store.acquire(key, 140 * SEC, 1);
    }
    assert!(
        !store.acquire(hot, 140 * SEC, 1).is_allowed(),
        "hot key kept its state"
    );
}

#[test]
fn bytes_per_key() {
    // The figure quoted in the README: measured, not assumed.
    let rate = Rate::per_second(10).expect("rate");
    let gcra = KeyedStore::new(Gcra::new(rate, 10), 100_000);
    let tb = KeyedStore::new(TokenBucket::new(rate, 10), 100_000);
    for k in 0..100_000u64 {
        let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let _ = gcra.acquire(key, SEC, 1);
        let _ = tb.acquire(key, SEC, 1);
    }
    let g = gcra.stats();
    let t = tb.stats();
    let per_key_g = g.table_bytes as f64 / g.keys as f64;
    let per_key_t = t.table_bytes as f64 / t.keys as f64;
    println!(
        "gcra: {} keys, {:.1} B/key; token_bucket: {} keys, {:.1} B/key",
        g.keys, per_key_g, t.keys, per_key_t
    );
    assert!(g.keys > 90_000 && t.keys > 90_000);
    assert!(per_key_g <= 40.0, "gcra {per_key_g} B/key");
    assert!(per_key_t <= 64.0, "token bucket {per_key_t} B/key");
}

#[test]
fn two_threads_on_one_key_admit_exactly_burst() {
    use std::sync::Arc;
    let l: Arc<dyn LocalLimiter> = Arc::new(KeyedStore::new(
        TokenBucket::new(Rate::new(1, Duration::from_secs(3600)).expect("rate"), 1000),
        100,
    ));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || {
                (0..5000)
                    .filter(|_| l.acquire(9, SEC, 1).is_allowed())
                    .count()
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    assert_eq!(total, 1000);
}

fn spec(
    algorithm: AlgorithmKind,
    rate: Rate,
    burst: u64,
    delay: u64,
) -> std::sync::Arc<dyn LocalLimiter> {
    LimitSpec {
        algorithm,
        rate,
        burst,
        delay,
        calendar: None,
    }
    .local(1000)
}

fn allow(d: Decision) -> (u64, Nanos, Nanos) {
    match d {
        Decision::Allow {
            remaining,
            reset,
            delay,
        } => (remaining, reset, delay),
        d => panic!("expected an admit: {d:?}"),
    }
}

fn deny(d: Decision) -> Nanos {
    match d {
        Decision::Deny { retry_after } => retry_after,
        d => panic!("expected a refusal: {d:?}"),
    }
}

#[test]
fn fixed_window_counts_per_aligned_window() {
    let l = spec(
        AlgorithmKind::FixedWindow,
        Rate::per_second(5).expect("rate"),
        5,
        0,
    );
    let t = 100 * SEC + SEC / 4; // a quarter into a window
    for want in (0..5).rev() {
        assert_eq!(allow(l.acquire(1, t, 1)), (want, 3 * SEC / 4, 0));
    }
    assert_eq!(
        deny(l.acquire(1, t, 1)),
        3 * SEC / 4,
        "until the window ends"
    );
    assert!(!l.acquire(1, 101 * SEC - 1, 1).is_allowed());
    // The edge: a whole new allowance at once (the fixed window's known weakness).
    assert_eq!(admitted(&*l, 1, 101 * SEC, 10), 5);
    // burst 10 at 5/s: a 2 s window holding 10.
    let l = spec(
        AlgorithmKind::FixedWindow,
        Rate::per_second(5).expect("rate"),
        10,
        0,
    );
    assert_eq!(admitted(&*l, 1, 100 * SEC, 20), 10);
    assert_eq!(deny(l.acquire(1, 101 * SEC, 1)), SEC);
    // Cost and refund.
    let l = spec(
        AlgorithmKind::FixedWindow,
        Rate::per_second(5).expect("rate"),
        5,
        0,
    );
    assert_eq!(allow(l.acquire(2, 10 * SEC, 3)).0, 2);
    assert!(!l.acquire(2, 10 * SEC, 3).is_allowed());
    l.refund(2, 10 * SEC, 3);
    assert_eq!(allow(l.acquire(2, 10 * SEC, 5)).0, 0);
}

#[test]
fn sliding_window_weights_the_previous_window() {
    let l = spec(
        AlgorithmKind::SlidingWindow,
        Rate::per_second(10).expect("rate"),
        10,
        0,
    );
    // Ten at the end of window 100.
    assert_eq!(admitted(&*l, 1, 100 * SEC + 9 * SEC / 10, 20), 10);
    // A quarter into window 101 the previous window still weighs 3/4: 7.5 used, 2 more fit.
    let t = 101 * SEC + SEC / 4;
    assert_eq!(allow(l.acquire(1, t, 1)).0, 1);
    assert_eq!(allow(l.acquire(1, t, 1)).0, 0);
    // The next needs 10*(1-e) + 2 + 1 <= 10: e >= 0.3, i.e. 50 ms from now.
    assert_eq!(deny(l.acquire(1, t, 1)), SEC / 20);
    assert!(l.acquire(1, t + SEC / 20, 1).is_allowed());
    // Two windows later nothing is left.
    assert_eq!(admitted(&*l, 1, 103 * SEC, 20), 10);
    // This window alone full: wait for the next, then for its weight to fall enough.
    let l = spec(
        AlgorithmKind::SlidingWindow,
        Rate::per_second(4).expect("rate"),
        4,
        0,
    );
    assert_eq!(admitted(&*l, 1, 10 * SEC, 10), 4);
    // Next window: 4*(1-e) + 1 <= 4 -> e >= 1/4.
    assert_eq!(deny(l.acquire(1, 10 * SEC, 1)), SEC + SEC / 4);
}

#[test]
fn sliding_log_is_exact_over_any_window() {
    let l = spec(
        AlgorithmKind::SlidingLog,
        Rate::per_second(3).expect("rate"),
        3,
        0,
    );
    assert!(l.acquire(1, 10 * SEC, 1).is_allowed());
    assert!(l.acquire(1, 10 * SEC + SEC / 2, 1).is_allowed());
    assert_eq!(allow(l.acquire(1, 10 * SEC + 9 * SEC / 10, 1)).0, 0);
    // The oldest leaves at 11 s.
    assert_eq!(deny(l.acquire(1, 10 * SEC + 9 * SEC / 10, 1)), SEC / 10);
    assert!(l.acquire(1, 11 * SEC, 1).is_allowed());
    assert!(!l.acquire(1, 11 * SEC, 1).is_allowed());
    // Cost 2 needs the two oldest gone: 10.5 s and 10.9 s entries -> 11.9 s.
    assert_eq!(deny(l.acquire(1, 11 * SEC, 2)), 9 * SEC / 10);
    // Refund removes the newest.
    l.refund(1, 11 * SEC, 1);
    assert!(l.acquire(1, 11 * SEC, 1).is_allowed());
    // Cost above the limit: never, reported as the time until the log is empty.
    assert_eq!(deny(l.acquire(1, 11 * SEC, 4)), SEC);
}

#[test]
fn leaky_bucket_delays_queued_requests_like_nginx() {
    // 10/s, capacity 5, no free passes: each queued request waits one more interval.
    let l = spec(
        AlgorithmKind::LeakyBucket,
        Rate::per_second(10).expect("rate"),
        5,
        0,
    );
    let t = 50 * SEC;
    for i in 0..5 {
        assert_eq!(allow(l.acquire(1, t, 1)).2, i * SEC / 10, "request {i}");
    }
    assert_eq!(deny(l.acquire(1, t, 1)), SEC / 10);
    // delay = 2: the first two queued pass at once, then the waits start.
    let l = spec(
        AlgorithmKind::LeakyBucket,
        Rate::per_second(10).expect("rate"),
        5,
        2,
    );
    let delays: Vec<_> = (0..5).map(|_| allow(l.acquire(1, t, 1)).2).collect();
    assert_eq!(delays, vec![0, 0, 0, SEC / 10, 2 * SEC / 10]);
}

#[test]
fn a_share_divides_rate_and_burst_between_instances() {
    let s = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::new(1, Duration::from_secs(3600)).expect("rate"),
        burst: 6,
        delay: 0,
        calendar: None,
    };
    let share = s.share(4);
    assert_eq!(share.rate.period(), Duration::from_secs(4 * 3600));
    assert_eq!(share.rate.count(), 1);
    assert_eq!(share.burst, 2);
    assert_eq!(s.share(0), s.share(1));
    assert_eq!(s.share(1), s);
}

#[test]
fn the_verdict_cache_answers_until_expiry_and_stays_bounded() {
    let c = VerdictCache::new(1000);
    assert_eq!(c.check(1, 10, 5), Cached::Miss);
    c.insert(1, 100, 10);
    assert_eq!(c.check(1, 40, 5), Cached::Refused(60));
    assert_eq!(c.peek(1, 40), Some(60));
    // Expired: one probe, the others refused while it asks (for at most the hold).
    assert_eq!(c.check(1, 100, 5), Cached::Probe);
    assert_eq!(c.check(1, 101, 5), Cached::Refused(4));
    assert_eq!(c.check(1, 104, 5), Cached::Refused(1));
    // The probe got no answer in time: the next caller probes.
    assert_eq!(c.check(1, 105, 5), Cached::Probe);
    // The probe was admitted with room left: the key flows to Redis again.
    c.remove(1);
    assert_eq!(c.check(1, 106, 5), Cached::Miss);
    for k in 0..10_000u64 {
        c.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1_000 + k, 0);
    }
    assert!(c.len() <= 1100, "bounded: {}", c.len());
    // The most recent (longest-lived) refusals are kept.
    let last = 9_999u64.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    assert!(c.peek(last, 500).is_some());
    c.remove(last);
    assert_eq!(c.peek(last, 500), None);
}

const DAY: u64 = 86_400 * SEC;

fn unix(y: i64, m: u32, d: u32, secs: u64) -> Nanos {
    days_from_civil(y, m, d) as u64 * DAY + secs * SEC
}

#[test]
fn the_calendar_knows_month_ends_leap_days_and_weeks() {
    assert_eq!(days_from_civil(1970, 1, 1), 0);
    assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
    assert_eq!(
        days_from_civil(2024, 3, 1) - days_from_civil(2024, 2, 28),
        2,
        "2024 leaps"
    );
    assert_eq!(
        days_from_civil(2100, 3, 1) - days_from_civil(2100, 2, 28),
        1,
        "2100 does not"
    );
    assert_eq!(
        days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
        2,
        "2000 does"
    );
    for z in -800_000..800_000i64 {
        let (y, m, d) = civil_from_days(z);
        assert_eq!(days_from_civil(y, m, d), z);
    }
    let month = Calendar {
        unit: CalendarUnit::Month,
        offset_secs: 0,
    };
    // Mid-February 2024 ends at March 1st 00:00 UTC; the leap day is inside.
    let (feb, end) = month.period(unix(2024, 2, 15, 3600));
    assert_eq!(end, unix(2024, 3, 1, 0));
    assert_eq!(month.period(unix(2024, 2, 29, 86_399)).0, feb);
    assert_eq!(month.period(unix(2024, 3, 1, 0)).0, feb + 1);
    // December rolls into the next year.
    assert_eq!(month.period(unix(2025, 12, 31, 10)).1, unix(2026, 1, 1, 0));
    // At UTC+02:00 the month starts two hours earlier in UTC.
    let east = Calendar {
        unit: CalendarUnit::Month,
        offset_secs: 7200,
    };
    assert_eq!(
        east.period(unix(2024, 2, 15, 0)).1,
        unix(2024, 2, 29, 22 * 3600)
    );
    assert_eq!(
        east.period(unix(2024, 2, 29, 22 * 3600)).0,
        east.period(unix(2024, 3, 10, 0)).0,
        "22:00 UTC on the 29th is March at UTC+2"
    );
    // ISO weeks start on Monday: 2024-03-04 was a Monday.
    let week = Calendar {
        unit: CalendarUnit::Week,
        offset_secs: 0,
    };
    assert_eq!(week.period(unix(2024, 3, 6, 0)).1, unix(2024, 3, 11, 0));
    assert_eq!(
        week.period(unix(2024, 3, 4, 0)).0,
        week.period(unix(2024, 3, 10, 86_399)).0
    );
    let year = Calendar {
        unit: CalendarUnit::Year,
        offset_secs: -5 * 3600,
    };
    assert_eq!(
        year.period(unix(2024, 6, 1, 0)).1,
        unix(2025, 1, 1, 5 * 3600)
    );
    let day = Calendar {
        unit: CalendarUnit::Day,
        offset_secs: 0,
    };
    assert_eq!(day.period(unix(2024, 2, 29, 5)).1, unix(2024, 3, 1, 0));
}

#[test]
fn a_monthly_quota_renews_on_the_first_and_counts_the_leap_day_in_february() {
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Quota,
        rate: Rate::new(3, Duration::from_secs(30 * 86_400)).expect("rate"),
        burst: 3,
        delay: 0,
        calendar: Some(Calendar {
            unit: CalendarUnit::Month,
            offset_secs: 0,
        }),
    };
    let q = spec.local(1000);
    let clock = ManualClock::new(unix(2024, 2, 28, 12 * 3600));
    assert_eq!(allow(q.acquire(1, clock.now(), 1)).0, 2);
    clock.advance(Duration::from_secs(86_400)); // the leap day: still February
    assert_eq!(allow(q.acquire(1, clock.now(), 2)).0, 0);
    let wait = deny(q.acquire(1, clock.now(), 1));
    assert_eq!(
        wait,
        unix(2024, 3, 1, 0) - clock.now(),
        "until March 1st, 00:00 UTC"
    );
    clock.advance(Duration::from_nanos(wait - 1));
    assert!(
        !q.acquire(1, clock.now(), 1).is_allowed(),
        "not a nanosecond early"
    );
    clock.advance(Duration::from_nanos(1));
    assert_eq!(
        allow(q.acquire(1, clock.now(), 1)).0,
        2,
        "March has its own 3"
    );
    // Another key has its own quota.
    assert!(q.acquire(2, clock.now(), 3).is_allowed());
}
