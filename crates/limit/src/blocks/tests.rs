use super::*;
use crate::clock::{Clock, ManualClock};

const SEC: Nanos = 1_000_000_000;

fn ladder() -> Ladder {
    Ladder::new(
        &[
            Rung {
                after: 100,
                within: Duration::from_secs(300),
                block_for: Duration::from_secs(3600),
            },
            Rung {
                after: 10,
                within: Duration::from_secs(60),
                block_for: Duration::from_secs(300),
            },
        ],
        1000,
    )
}

#[test]
fn ten_refusals_in_a_minute_block_for_five_minutes_then_a_hundred_for_an_hour() {
    let clock = ManualClock::new(1_000 * SEC);
    let l = ladder();
    let k = 42;
    for i in 1..10 {
        assert_eq!(
            l.refused(k, clock.now()),
            None,
            "refusal {i} does not block"
        );
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(l.blocks.check(k, clock.now()), None);
    let t = l.refused(k, clock.now()).expect("the 10th refusal blocks");
    assert_eq!((t.rung, t.block_for), (0, Duration::from_secs(300)));
    assert_eq!(l.blocks.check(k, clock.now()), Some(300 * SEC));
    assert_eq!(l.blocks.check(7, clock.now()), None, "other keys pass");
    // More refusals while blocked do not prolong the block...
    clock.advance(Duration::from_secs(10));
    assert_eq!(l.refused(k, clock.now()), None);
    assert_eq!(l.blocks.check(k, clock.now()), Some(290 * SEC));
    // ...until they reach the next rung: 100 within 5 minutes blocks for an hour.
    let mut escalated = None;
    for _ in 0..100 {
        clock.advance(Duration::from_secs(1));
        if let Some(t) = l.refused(k, clock.now()) {
            escalated = Some(t);
            break;
        }
    }
    let t = escalated.expect("escalates");
    assert_eq!((t.rung, t.block_for), (1, Duration::from_secs(3600)));
    assert_eq!(l.blocks.check(k, clock.now()), Some(3600 * SEC));
    // A pardon starts the key from the bottom of the ladder.
    assert!(l.forgive(k, clock.now()));
    assert_eq!(l.blocks.check(k, clock.now()), None);
    assert_eq!(l.refused(k, clock.now()), None, "counts cleared");
    l.blocks.impose(
        k,
        Block {
            until: clock.now() + 3600 * SEC,
            rung: 1,
        },
        clock.now(),
    );
    // An hour later the key is free again, and the table is empty (nothing to look up).
    l.blocks.impose(
        7,
        Block {
            until: clock.now() + SEC,
            rung: 0,
        },
        clock.now(),
    );
    clock.advance(Duration::from_secs(3600));
    assert_eq!(l.blocks.check(k, clock.now()), None);
    l.blocks.sweep(clock.now());
    assert_eq!(l.blocks.len.load(Ordering::Relaxed), 0);
    assert!(l.blocks.list(clock.now()).is_empty());
}

#[test]
fn refusals_spread_thinner_than_the_window_never_block() {
    let clock = ManualClock::new(1_000 * SEC);
    let l = ladder();
    // One refusal every 10 s: at most ~6 per minute.
    for _ in 0..200 {
        assert_eq!(l.refused(1, clock.now()), None);
        clock.advance(Duration::from_secs(10));
    }
}

#[test]
fn lifting_unblocks_and_the_table_stays_bounded() {
    let clock = ManualClock::new(SEC);
    let t = BlockTable::new(64);
    let b = |s: u64| Block {
        until: SEC + s * SEC,
        rung: 0,
    };
    for k in 0..1000u64 {
        t.impose(
            k.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            b(10 + k),
            clock.now(),
        );
    }
    assert!(t.list(clock.now()).len() <= 64 + SHARDS);
    let (k, _) = t.list(clock.now())[0];
    assert!(t.get(k, clock.now()).is_some());
    assert!(t.lift(k, clock.now()));
    assert_eq!(t.check(k, clock.now()), None);
    assert!(!t.lift(k, clock.now()));
    assert!(t.lift_all(clock.now()) > 0);
    assert_eq!(t.active(clock.now()), 0);
    assert_eq!(t.check(1, clock.now()), None);
}

/// Keys of one shard (shards are picked by the top bits).
fn in_shard(shard: u64, i: u64) -> u64 {
    shard << 60 | i
}

#[test]
fn a_full_table_refuses_new_blocks_and_reclaims_only_blocks_that_ended() {
    // 16 blocks per shard: shard 3 full of blocks ending at 101..=116 s.
    let t = BlockTable::new(16 * SHARDS);
    assert_eq!(t.capacity(), 16 * SHARDS);
    let b = |end: u64, rung: u8| Block {
        until: end * SEC,
        rung,
    };
    let now = SEC;
    for i in 0..16 {
        assert!(t.impose(in_shard(3, i), b(101 + i, 0), now));
    }
    assert!(
        t.impose(in_shard(5, 0), b(50, 0), now),
        "other shards have room"
    );
    assert_eq!(t.refused_full(), 0);
    // Whatever the new block's end or rung, none in force gives way: it is refused, and
    // counted, however often it is asked for.
    for (n, end) in [(1, 200), (2, 60), (3, 102), (4, 101), (5, 10_000)] {
        assert!(!t.impose(in_shard(3, 100 + n), b(end, 1), now), "{end}");
        assert_eq!(t.get(in_shard(3, 100 + n), now), None);
        assert_eq!(t.refused_full(), n);
    }
    for i in 0..16 {
        assert_eq!(t.get(in_shard(3, i), now), Some(b(101 + i, 0)), "block {i}");
    }
    assert_eq!((t.active(now), t.len()), (17, 17));
    // A key already in the table climbs in place: no room needed.
    assert!(t.impose(in_shard(3, 0), b(300, 1), now));
    assert_eq!(t.get(in_shard(3, 0), now), Some(b(300, 1)));
    // Blocks that ended make room (all of them at once), and only they.
    let later = 105 * SEC;
    assert!(t.impose(in_shard(3, 102), b(106, 0), later));
    assert_eq!(t.refused_full(), 5);
    assert_eq!(
        t.active(later),
        17 - 4 + 1 - 1,
        "102..=105 ended, shard 5's too"
    );
    assert!((5..16).all(|i| t.get(in_shard(3, i), later).is_some()));
    assert_eq!(t.get(in_shard(3, 0), later), Some(b(300, 1)));
    // Three free slots now (16 - 13): the fourth new block is refused again.
    for n in 0..3 {
        assert!(t.impose(in_shard(3, 200 + n), b(1000, 0), later));
    }
    assert!(!t.impose(in_shard(3, 203), b(1000, 0), later));
    assert_eq!(t.refused_full(), 6);
    let listed = t.list(later).len();
    assert_eq!(t.len.load(Ordering::Relaxed), listed);
    // Lifting keeps the table's own count exact, and frees a slot.
    assert!(t.lift(in_shard(3, 200), later));
    assert!(t.impose(in_shard(3, 203), b(107, 0), later));
    let listed = t.list(later).len();
    assert_eq!(t.len.load(Ordering::Relaxed), listed);
}

/// The walk: a key blocked for an hour, then a million fresh keys blocked in
/// 35 s (more than ten times the table) fill every shard: the hour block holds to its end,
/// and the table never holds more than its bound.
#[test]
fn a_million_fresh_blocks_never_lift_an_hour_block() {
    let t = BlockTable::new(100_000);
    let t0 = 1_000 * SEC;
    let attacker = 0x5EED_u64.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let hour = Block {
        until: t0 + 3600 * SEC,
        rung: 0,
    };
    assert!(t.impose(attacker, hour, t0));
    let mut kept = 0u64;
    for i in 0..1_000_000u64 {
        let now = t0 + i * 35_000;
        let k = (i + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
        // Fresh blocks as short as a second: the attacker's hour would end last, not first.
        let block = Block {
            until: now + SEC + (i % 7) * 3600 * SEC,
            rung: 0,
        };
        kept += u64::from(t.impose(k, block, now));
        assert!(t.len() <= t.capacity(), "key {i}: {} entries", t.len());
    }
    let now = t0 + 35 * SEC;
    assert_eq!(t.get(attacker, now), Some(hour));
    assert_eq!(t.check(attacker, now), Some(hour.until - now));
    assert_eq!(t.check(attacker, hour.until - 1), Some(1));
    // The blocks of a second ended along the way and made room for others.
    assert!(kept > t.capacity() as u64, "{kept} kept");
    assert_eq!(t.refused_full(), 1_000_000 - kept);
}

#[test]
fn a_rung_of_one_blocks_at_the_first_refusal() {
    let l = Ladder::new(
        &[Rung {
            after: 1,
            within: Duration::from_secs(1),
            block_for: Duration::from_secs(5),
        }],
        10,
    );
    assert!(l.refused(9, SEC).is_some());
    assert_eq!(l.blocks.check(9, SEC), Some(5 * SEC));
}
