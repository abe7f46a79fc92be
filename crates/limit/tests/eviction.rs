//! State an abuser cannot evict (issue 11): a flood of fresh keys through a bounded store lifts
//! no refusal and no block. Manual clock; the floods are the issue's, a million keys in 20 s
//! through a limit of 5,000 keys (a fifth of that for the sliding log and the quota, whose
//! families are already flooded in full: it is the debug build's time that is spared).

use std::time::Duration;
use tollgate_limit::*;

const SEC: Nanos = NANOS_PER_SEC;
const FLOOD: u64 = 1_000_000;
const MAX_KEYS: usize = 5_000;

/// Distinct keys spread over every shard (an odd multiplier is a bijection).
fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Victims are keys 0..8, the flood's keys come after them.
fn flood_key(i: u64) -> u64 {
    key(1_000 + i)
}

fn spec(algorithm: AlgorithmKind) -> LimitSpec {
    LimitSpec {
        algorithm,
        // Slow enough that nothing refills during the flood: a victim still refused after it
        // kept its state.
        rate: Rate::new(10, Duration::from_secs(3600)).expect("rate"),
        burst: 10,
        delay: 10,
        calendar: Some(Calendar {
            unit: CalendarUnit::Month,
            offset_secs: 0,
        }),
    }
}

/// Exhausts victims 0..8, floods a store of `max_keys` with `flood` fresh keys in 20 s (each
/// admitted once, so each keeps allowance), hits victims 4..8 every 1,000 keys and never
/// touches 0..4; then every victim must answer exactly as in a store that saw no flood.
fn flood_leaves_victims_refused(algorithm: AlgorithmKind, flood: u64, max_keys: usize) {
    let spec = spec(algorithm);
    let store = spec.local(max_keys);
    let calm = spec.local(max_keys);
    let t0 = 10_000 * SEC;
    for v in 0..8 {
        for l in [&store, &calm] {
            while l.acquire(key(v), t0, 1).is_allowed() {}
        }
    }
    let mut now = t0;
    for i in 0..flood {
        now += 20 * SEC / flood;
        let _ = store.acquire(flood_key(i), now, 1);
        if i % 1_000 == 0 {
            for v in 4..8 {
                for l in [&store, &calm] {
                    assert!(!l.acquire(key(v), now, 1).is_allowed(), "{algorithm:?}");
                }
            }
        }
    }
    let s = store.stats();
    assert!(s.keys <= max_keys + 64, "{algorithm:?}: bounded: {s:?}");
    assert!(
        s.evicted_active >= flood - max_keys as u64 - 64,
        "{algorithm:?}: the flood was lossy: {s:?}"
    );
    assert_eq!(s.evicted_refused, 0, "{algorithm:?}: {s:?}");
    for v in 0..8 {
        let d = store.peek(key(v), now, 1);
        assert!(!d.is_allowed(), "{algorithm:?}: victim {v} refused");
        assert_eq!(d, calm.peek(key(v), now, 1), "{algorithm:?}: victim {v}");
    }
}

#[test]
fn a_million_fresh_keys_leave_an_exhausted_token_bucket_refused() {
    flood_leaves_victims_refused(AlgorithmKind::TokenBucket, FLOOD, MAX_KEYS);
}

#[test]
fn a_million_fresh_keys_leave_an_exhausted_gcra_refused() {
    flood_leaves_victims_refused(AlgorithmKind::Gcra, FLOOD, MAX_KEYS);
}

#[test]
fn a_million_fresh_keys_leave_an_exhausted_leaky_bucket_refused() {
    flood_leaves_victims_refused(AlgorithmKind::LeakyBucket, FLOOD, MAX_KEYS);
}

#[test]
fn a_million_fresh_keys_leave_an_exhausted_fixed_window_refused() {
    flood_leaves_victims_refused(AlgorithmKind::FixedWindow, FLOOD, MAX_KEYS);
}

#[test]
fn a_million_fresh_keys_leave_an_exhausted_sliding_window_refused() {
    flood_leaves_victims_refused(AlgorithmKind::SlidingWindow, FLOOD, MAX_KEYS);
}

#[test]
fn a_flood_of_fresh_keys_leaves_an_exhausted_sliding_log_refused() {
    flood_leaves_victims_refused(AlgorithmKind::SlidingLog, FLOOD / 5, MAX_KEYS / 5);
}

#[test]
fn a_flood_of_fresh_keys_leaves_an_exhausted_quota_refused() {
    flood_leaves_victims_refused(AlgorithmKind::Quota, FLOOD / 5, MAX_KEYS / 5);
}

/// The store's other order: among keys that are not refused, those using most of their
/// allowance stay; once only refused keys are left, the refusals ending last stay.
#[test]
fn a_full_store_drops_the_least_used_first_and_refusals_only_among_refusals() {
    let rate = Rate::new(10, Duration::from_secs(3600)).expect("rate");
    // One shard of 16 keys.
    let store = KeyedStore::new(Gcra::new(rate, 10), 16);
    assert_eq!(store.capacity(), 16);
    let t0 = 10_000 * SEC;
    // Keys 0..15 took 1..=15 units (capped at the burst: 10 and more are refused).
    for k in 0..15u64 {
        for _ in 0..=k {
            let _ = store.acquire(key(k), t0, 1);
        }
    }
    // Fresh keys take one unit each: key 0, which took one unit a moment before them, goes
    // first; the keys that took more stay.
    for i in 0..1_000 {
        let _ = store.acquire(flood_key(i), t0 + 1, 1);
    }
    for k in 0..15u64 {
        assert_eq!(store.contains(key(k)), k >= 1, "key {k}");
    }
    assert_eq!(store.stats().evicted_refused, 0);
    // Now only refusals: a new refused key every second. The ones refused longest ago (nearest
    // the end of their refusal) go first, the newest stay.
    let mut now = t0 + 1;
    for i in 1_000..1_100 {
        now += SEC;
        while store.acquire(flood_key(i), now, 1).is_allowed() {}
    }
    let s = store.stats();
    assert!(s.evicted_refused > 0, "{s:?}");
    assert!((0..15).all(|k| !store.contains(key(k))));
    assert!((1_086..1_100).all(|i| store.contains(flood_key(i))));
    assert!(s.keys <= 16);
}

/// A ladder over a store of 5,000 keys: a million keys refused once each (counter churn), one
/// in a hundred refused ten times (a 5-minute block each: twice what the block table holds),
/// a few climbing to the hour. A key blocked for an hour before the flood stays blocked for
/// exactly that hour; every block imposed during the flood holds to its end too (none gives
/// way to a newer one), and what did not fit is counted, not swapped in.
#[test]
fn a_million_refused_keys_leave_an_hour_block_in_force_to_its_end() {
    let ladder = Ladder::new(
        &[
            Rung {
                after: 10,
                within: Duration::from_secs(60),
                block_for: Duration::from_secs(300),
            },
            Rung {
                after: 100,
                within: Duration::from_secs(300),
                block_for: Duration::from_secs(3600),
            },
        ],
        MAX_KEYS,
    );
    let t0 = 10_000 * SEC;
    let victim = key(1);
    let until = t0 + 3600 * SEC;
    let tripped: Vec<_> = (0..100)
        .filter_map(|_| ladder.refused(victim, t0))
        .collect();
    assert_eq!(tripped.len(), 2, "{tripped:?}");
    assert_eq!((tripped[1].rung, tripped[1].until), (1, until));

    let mut now = t0;
    let (mut short, mut long) = (0, Vec::new());
    for i in 0..FLOOD {
        now += 20_000;
        let k = flood_key(i);
        let times = match i {
            _ if i % 20_000 == 0 => 100,
            _ if i % 100 == 0 => 10,
            _ => 1,
        };
        for _ in 0..times {
            match ladder.refused(k, now) {
                Some(t) if t.rung == 0 => short += 1,
                Some(_) => long.push((k, now + 3600 * SEC)),
                None => {}
            }
        }
        // The victim keeps hammering now and then: answered "blocked", counted, never more.
        if i % 10_000 == 0 {
            assert_eq!(ladder.refused(victim, now), None);
        }
    }
    // Churn of keys refused once never costs a repeat offender its count: blocks are imposed
    // until the tables are full of them (10,000 offenders for 5,000 slots), the rest counted.
    assert!(short >= MAX_KEYS as u64 / 2, "{short} five-minute blocks");
    assert!(!long.is_empty());
    assert!(ladder.blocks.len() <= ladder.blocks.capacity());
    assert!(ladder.blocks.active(now) <= MAX_KEYS + 16);
    assert!(ladder.blocks.refused_full() + ladder.untracked() > 0);
    // Every hour block imposed during the flood is kept to its end.
    assert!(long
        .iter()
        .all(|&(k, end)| ladder.blocks.check(k, now) == Some(end - now)));
    assert_eq!(ladder.blocks.check(victim, now), Some(until - now));
    assert_eq!(ladder.blocks.check(victim, until - 1), Some(1));
    assert_eq!(ladder.blocks.check(victim, until), None);
}

fn issue_ladder() -> Ladder {
    Ladder::new(
        &[Rung {
            after: 3,
            within: Duration::from_secs(3600),
            block_for: Duration::from_secs(3600),
        }],
        DEFAULT_MAX_KEYS,
    )
}

/// The issue's walk through the ladder (`after = 3, within = 1h, for = 1h`, the default bound
/// of 100,000 keys): one key blocked for an hour, then a million fresh keys refused three
/// times each in 35 s, each blocked while its shard of the table has room. The hour block
/// holds to its end and the table never exceeds its bound. A key with two refusals counted
/// before the flood keeps them: its third trips the rung, and with its shard of the table full
/// of the flood's blocks the block is refused for room and counted, never swapped in.
#[test]
fn a_million_fresh_blocked_keys_never_lift_an_hour_block() {
    let ladder = issue_ladder();
    let t0 = 36_000 * SEC;
    let (blocked, counted) = (key(1), key(2));
    assert_eq!(ladder.refused(blocked, t0), None);
    assert_eq!(ladder.refused(blocked, t0), None);
    let t = ladder
        .refused(blocked, t0)
        .expect("the third refusal blocks");
    let until = t.until;
    assert_eq!(until, t0 + 3600 * SEC);
    assert_eq!(ladder.refused(counted, t0), None);
    assert_eq!(ladder.refused(counted, t0), None);

    let mut now = t0;
    let mut tripped = 0u64;
    for i in 0..FLOOD {
        now += 35_000;
        let k = flood_key(i);
        for _ in 0..3 {
            tripped += u64::from(ladder.refused(k, now).is_some());
        }
        assert!(ladder.blocks.len() <= ladder.blocks.capacity(), "key {i}");
    }
    assert!(tripped >= ladder.blocks.capacity() as u64 / 2, "{tripped}");
    assert!(
        ladder.blocks.refused_full() > 0,
        "the flood outgrew the table"
    );
    assert!(ladder.untracked() > 0, "the flood outgrew the counters");
    assert_eq!(ladder.blocks.check(blocked, now), Some(until - now));
    assert_eq!(ladder.blocks.check(blocked, until - 1), Some(1));
    assert_eq!(ladder.blocks.check(blocked, until), None);

    let (full, untracked) = (ladder.blocks.refused_full(), ladder.untracked());
    let blocked_now = ladder.refused(counted, now);
    assert_eq!(ladder.untracked(), untracked, "its count was kept");
    match blocked_now {
        Some(t) => assert_eq!(ladder.blocks.check(counted, now), Some(t.until - now)),
        None => assert_eq!(ladder.blocks.refused_full(), full + 1, "tripped, no room"),
    }
}

/// The churn of counts alone: a key with two refusals counted, then a million fresh keys
/// refused twice each (as many as the key: none trips) fill every counter shard. The key's
/// third refusal still trips the rung and blocks it.
#[test]
fn a_million_fresh_counted_keys_never_erase_a_count() {
    let ladder = issue_ladder();
    let t0 = 36_000 * SEC;
    let counted = key(2);
    assert_eq!(ladder.refused(counted, t0), None);
    assert_eq!(ladder.refused(counted, t0), None);
    let mut now = t0;
    for i in 0..FLOOD {
        now += 35_000;
        for _ in 0..2 {
            assert_eq!(ladder.refused(flood_key(i), now), None);
        }
    }
    assert!(ladder.untracked() > 0, "the flood outgrew the counters");
    assert!(ladder.blocks.is_empty());
    let t = ladder
        .refused(counted, now)
        .expect("the counted key's third refusal blocks it");
    assert_eq!(ladder.blocks.check(counted, now), Some(t.until - now));
}

/// Fresh keys brought to more refusals than the attacker's key (three each against its two,
/// on a rung of five) still cannot evict its count: they only ever displace counts no heavier
/// than the one refusal each brings when it arrives.
#[test]
fn fresh_keys_heavier_than_a_counted_key_cannot_evict_it() {
    let ladder = Ladder::new(
        &[Rung {
            after: 5,
            within: Duration::from_secs(600),
            block_for: Duration::from_secs(600),
        }],
        MAX_KEYS,
    );
    let t0 = 6_000 * SEC;
    let attacker = key(3);
    for _ in 0..2 {
        assert_eq!(ladder.refused(attacker, t0), None);
    }
    let mut now = t0;
    for i in 0..200_000 {
        now += 100_000;
        for _ in 0..3 {
            assert_eq!(ladder.refused(flood_key(i), now), None);
        }
    }
    assert!(ladder.untracked() > 0);
    assert_eq!(ladder.refused(attacker, now), None, "third");
    assert_eq!(ladder.refused(attacker, now), None, "fourth");
    assert!(ladder.refused(attacker, now).is_some(), "the fifth trips");
}

/// The heaviest key of a minute outlives a flood of keys refused once each: a full store of
/// one-minute counts drops the lowest counts first.
#[test]
fn a_flood_of_light_keys_does_not_hide_the_heaviest_key() {
    let hot = HotKeys::new(MAX_KEYS);
    let t0 = 600 * SEC;
    let heavy = key(4);
    for _ in 0..50 {
        hot.refused(heavy, t0);
    }
    for i in 0..FLOOD {
        hot.refused(flood_key(i), t0 + 1 + i);
    }
    hot.refused(heavy, t0 + FLOOD + 1);
    assert_eq!(hot.max(t0 + FLOOD + 2), 51, "its count was kept");
}

/// A new key always gets a state (a limit never fails open), even in a shard where every key
/// is refused.
#[test]
fn a_new_key_always_gets_a_state() {
    let rate = Rate::new(1, Duration::from_secs(3600)).expect("rate");
    let store = KeyedStore::new(TokenBucket::new(rate, 1), 16);
    for i in 0..1_000 {
        let k = flood_key(i);
        assert!(store.acquire(k, SEC + i, 1).is_allowed(), "fresh key {i}");
        assert!(store.contains(k));
        assert!(!store.acquire(k, SEC + i, 1).is_allowed());
        assert!(store.len() <= 16);
    }
}
