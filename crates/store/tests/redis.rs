//! The scripts and the store against a real redis-server (and a real 3-master cluster), each
//! test with its own server on a free port.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_limit::{
    AlgorithmKind, Calendar, CalendarUnit, Clock, Decision, LimitSpec, ManualClock, Rate,
};
use tollgate_store::*;
use tollgate_testkit::{RedisCluster, RedisServer, StallingProxy};

fn metrics() -> StoreMetrics {
    StoreMetrics::register(&prometheus::Registry::new()).expect("metrics")
}

fn store_with(target: Target, clock: Arc<dyn Clock>, timeout: Duration) -> RedisStore {
    RedisStore::new(&RedisConfig::new(target, timeout, 2), clock, metrics()).expect("store")
}

fn store(r: &RedisServer) -> RedisStore {
    store_with(
        Target::Single(r.url()),
        Arc::new(ManualClock::new(1)),
        Duration::from_millis(500),
    )
}

fn spec(algorithm: AlgorithmKind, count: u64, period: Duration, burst: u64) -> LimitSpec {
    LimitSpec {
        algorithm,
        rate: Rate::new(count, period).expect("rate"),
        burst,
        delay: 0,
        calendar: None,
    }
}

const HOUR: Duration = Duration::from_secs(3600);
const TTL: Duration = Duration::from_secs(1);

fn key(limit: &str, k: u64) -> GlobalKey<'_> {
    GlobalKey {
        limit,
        key: k,
        known: false,
        patient: false,
    }
}

async fn acquire(s: &RedisStore, spec: &LimitSpec, k: GlobalKey<'_>, cost: u64) -> Decision {
    s.acquire(spec, k, cost).await.expect("redis answers")
}

fn pttl(r: &RedisServer, k: GlobalKey<'_>, kind: AlgorithmKind) -> i64 {
    r.cli(&["PTTL", &k.redis_key(kind)]).parse().unwrap_or(-3)
}

#[tokio::test]
async fn every_algorithm_admits_its_burst_then_refuses_and_sets_ttls() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    for kind in AlgorithmKind::ALL {
        let sp = spec(kind, 1, HOUR, 5);
        let k = key(kind.name(), 42);
        for want in (0..5).rev() {
            match acquire(&s, &sp, k, 1).await {
                Decision::Allow { remaining, .. } => {
                    assert_eq!(remaining, want, "{}", kind.name())
                }
                d => panic!("{}: {d:?}", kind.name()),
            }
            let ttl = pttl(&r, k, kind);
            assert!(ttl > 0, "{}: PTTL {ttl} after an admit", kind.name());
        }
        match acquire(&s, &sp, k, 1).await {
            Decision::Deny { retry_after } => {
                // One interval (1 h) for the buckets; for the windows (5 h long, 5 per
                // window) up to the next window's end.
                let bound = if kind.is_window() { 10 * HOUR } else { HOUR };
                assert!(
                    retry_after > 0 && retry_after <= bound.as_nanos() as u64,
                    "{}: {retry_after}",
                    kind.name()
                );
            }
            d => panic!("{}: the sixth must be refused: {d:?}", kind.name()),
        }
        assert!(
            pttl(&r, k, kind) > 0,
            "{}: TTL kept after a refusal",
            kind.name()
        );
        // Another key of the same limit is untouched.
        assert!(acquire(&s, &sp, key(kind.name(), 43), 1).await.is_allowed());
    }
    // Every key written by any script has a TTL.
    let keys = r.cli(&["KEYS", "*"]);
    assert!(!keys.is_empty());
    for k in keys.lines() {
        let ttl: i64 = r.cli(&["PTTL", k]).parse().unwrap_or(-3);
        assert!(ttl > 0, "{k} has PTTL {ttl}");
    }
}

#[tokio::test]
async fn cost_above_one_and_refunds() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    for kind in AlgorithmKind::ALL {
        let sp = spec(kind, 1, HOUR, 10);
        let k = key(kind.name(), 7);
        match acquire(&s, &sp, k, 4).await {
            Decision::Allow { remaining, .. } => assert_eq!(remaining, 6, "{}", kind.name()),
            d => panic!("{}: {d:?}", kind.name()),
        }
        assert!(acquire(&s, &sp, k, 6).await.is_allowed(), "{}", kind.name());
        assert!(
            !acquire(&s, &sp, k, 1).await.is_allowed(),
            "{}",
            kind.name()
        );
        s.refund(&sp, k, 3).await.expect("refund");
        // (A counting window counted the refused unit too: 11, 8 after the refund.)
        let again = if kind == AlgorithmKind::CountingWindow {
            2
        } else {
            3
        };
        match acquire(&s, &sp, k, again).await {
            Decision::Allow { remaining, .. } => assert_eq!(remaining, 0, "{}", kind.name()),
            d => panic!("{}: the refund is usable: {d:?}", kind.name()),
        }
        // More than the capacity never passes.
        let fresh = key(kind.name(), 8);
        assert!(
            !acquire(&s, &sp, fresh, 11).await.is_allowed(),
            "{}",
            kind.name()
        );
        // A refund on a key never seen creates nothing.
        s.refund(&sp, key(kind.name(), 9), 1).await.expect("refund");
        assert_eq!(
            r.cli(&["EXISTS", &key(kind.name(), 9).redis_key(kind)]),
            "0"
        );
    }
}

#[tokio::test]
async fn refill_follows_the_rate_on_redis_time() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    // 20/s: one unit every 50 ms. Real time here, but the bound is loose (Redis's clock).
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::LeakyBucket,
    ] {
        let sp = spec(kind, 20, Duration::from_secs(1), 2);
        let k = key(kind.name(), 1);
        assert!(acquire(&s, &sp, k, 1).await.is_allowed());
        assert!(acquire(&s, &sp, k, 1).await.is_allowed());
        let retry = match acquire(&s, &sp, k, 1).await {
            Decision::Deny { retry_after } => retry_after,
            d => panic!("{}: {d:?}", kind.name()),
        };
        assert!(retry <= 50_000_000, "{}: {retry}", kind.name());
        tokio::time::sleep(Duration::from_nanos(retry) + Duration::from_millis(2)).await;
        assert!(
            acquire(&s, &sp, k, 1).await.is_allowed(),
            "{}: admitted after retry_after",
            kind.name()
        );
    }
}

#[tokio::test]
async fn the_sliding_log_never_holds_more_than_its_limit() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let sp = spec(AlgorithmKind::SlidingLog, 1, HOUR, 25);
    let k = key("log", 5);
    let mut admitted = 0;
    for i in 0..200 {
        if acquire(&s, &sp, k, 1 + i % 3).await.is_allowed() {
            admitted += 1;
        }
        let card: u64 = r
            .cli(&["ZCARD", &k.redis_key(AlgorithmKind::SlidingLog)])
            .parse()
            .unwrap_or(999);
        assert!(card <= 25, "ZCARD {card}");
    }
    // Full: every cost-1 request fills a gap, refusals add nothing.
    assert_eq!(
        r.cli(&["ZCARD", &k.redis_key(AlgorithmKind::SlidingLog)]),
        "25"
    );
    assert!((12..=25).contains(&admitted), "{admitted}");
}

#[tokio::test]
async fn the_leaky_bucket_reports_growing_delays() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let mut sp = spec(AlgorithmKind::LeakyBucket, 10, Duration::from_secs(1), 5);
    sp.delay = 1;
    let k = key("leaky", 1);
    let mut delays = Vec::new();
    for _ in 0..5 {
        match acquire(&s, &sp, k, 1).await {
            Decision::Allow { delay, .. } => delays.push(delay / 1_000_000),
            d => panic!("{d:?}"),
        }
    }
    // The first two pass at once (one free queued request), then ~100 ms more each (the calls
    // themselves take a little time, which the queue drains meanwhile).
    assert_eq!(delays[0], 0);
    assert_eq!(delays[1], 0);
    for w in delays.windows(2).skip(1) {
        assert!(w[1] > w[0] && w[1] - w[0] <= 100, "{delays:?}");
    }
    assert!(delays[4] > 250 && delays[4] <= 300, "{delays:?}");
    assert!(!acquire(&s, &sp, k, 1).await.is_allowed());
}

/// Redis's clock as microseconds since the epoch.
fn redis_now_us(r: &RedisServer) -> f64 {
    let t = r.cli(&["TIME"]);
    let mut parts = t.lines().map(|l| l.trim().parse::<f64>().unwrap_or(0.0));
    let (s, us) = (parts.next().unwrap_or(0.0), parts.next().unwrap_or(0.0));
    s * 1e6 + us
}

#[tokio::test]
async fn time_comes_from_redis_whatever_the_gateways_clocks_say() {
    let r = RedisServer::start().expect("redis-server");
    // Two gateways whose clocks are 5 s ahead and 5 s behind (their clocks drive only their
    // breakers: no time is ever sent to a script).
    let base = 1_000_000_000_000u64;
    let ahead = store_with(
        Target::Single(r.url()),
        Arc::new(ManualClock::new(base + 5_000_000_000)),
        Duration::from_millis(500),
    );
    let behind = store_with(
        Target::Single(r.url()),
        Arc::new(ManualClock::new(base - 5_000_000_000)),
        Duration::from_millis(500),
    );
    for kind in AlgorithmKind::ALL {
        let sp = spec(kind, 1, HOUR, 6);
        let k = key(kind.name(), 77);
        let mut admitted = 0;
        for i in 0..12 {
            let s = if i % 2 == 0 { &ahead } else { &behind };
            admitted += acquire(s, &sp, k, 1).await.is_allowed() as u32;
        }
        assert_eq!(admitted, 6, "{}: one limit for both", kind.name());
    }
    // The timestamps the scripts stored are Redis's own (within a second of its TIME).
    let now = redis_now_us(&r);
    let near = |t: f64, what: &str| {
        assert!((t - now).abs() < 1e6, "{what}: stored {t}, Redis now {now}");
    };
    let k = |kind: AlgorithmKind| key(kind.name(), 77).redis_key(kind);
    let tb: f64 = r
        .cli(&["HGET", &k(AlgorithmKind::TokenBucket), "c"])
        .parse()
        .expect("token bucket credit time");
    near(tb, "token bucket");
    // GCRA's TAT runs 6 intervals (6 h) ahead of the time of the requests.
    let tat: f64 = r
        .cli(&["GET", &k(AlgorithmKind::Gcra)])
        .parse()
        .expect("tat");
    near(tat - 6.0 * 3600e6, "gcra");
    let log = r.cli(&[
        "ZRANGE",
        &k(AlgorithmKind::SlidingLog),
        "0",
        "0",
        "WITHSCORES",
    ]);
    let score: f64 = log
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("score");
    near(score, "sliding log");
}

#[tokio::test]
async fn a_flushed_script_cache_is_reloaded_on_noscript() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let sp = spec(AlgorithmKind::Gcra, 1, HOUR, 3);
    assert!(acquire(&s, &sp, key("g", 1), 1).await.is_allowed());
    assert_eq!(r.cli(&["SCRIPT", "FLUSH"]), "OK");
    let loads = r.command_calls("script|load");
    assert!(acquire(&s, &sp, key("g", 1), 1).await.is_allowed());
    assert_eq!(
        r.command_calls("script|load"),
        loads + 1,
        "loaded again once"
    );
    assert!(r.command_calls("evalsha") >= 3);
    assert_eq!(
        r.command_calls("eval"),
        0,
        "never sends the script body per call"
    );
}

#[tokio::test]
async fn a_dead_redis_fails_fast_opens_the_breaker_and_recovers() {
    let mut r = RedisServer::start().expect("redis-server");
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let timeout = Duration::from_millis(50);
    let s = store_with(Target::Single(r.url()), clock.clone(), timeout);
    let sp = spec(AlgorithmKind::TokenBucket, 1, HOUR, 100);
    assert!(acquire(&s, &sp, key("t", 1), 1).await.is_allowed());
    r.stop();
    // A node silent for a quarter second is down (a timeout sooner after an answer met a
    // queue, not an outage, and never opens the breaker).
    clock.advance(Duration::from_millis(300));
    // Failures until the breaker opens; none waits much past the timeout.
    let mut opened = false;
    for _ in 0..10 {
        let start = Instant::now();
        match s.acquire(&sp, key("t", 1), 1).await {
            Err(StoreError::CircuitOpen) => {
                opened = true;
                assert!(start.elapsed() < Duration::from_millis(5), "open: no wait");
            }
            Err(e) => assert!(
                start.elapsed() < timeout + Duration::from_millis(100),
                "{e} took {:?}",
                start.elapsed()
            ),
            Ok(d) => panic!("a dead Redis decided {d:?}"),
        }
    }
    assert!(opened, "the breaker opened");
    assert!(!s.is_up());
    r.restart().expect("restart");
    // The probe (as the background prober does) finds it back and closes the breaker.
    let start = Instant::now();
    while s.probe().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "Redis never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.is_up());
    // A restarted Redis has no scripts and no keys: decisions work again, from a fresh state.
    match acquire(&s, &sp, key("t", 1), 1).await {
        Decision::Allow { remaining, .. } => assert_eq!(remaining, 99),
        d => panic!("{d:?}"),
    }
    // Half-open without a background probe: after the back-off one request tests Redis.
    r.stop();
    // Silent past a quarter second: its timeouts count as an outage.
    clock.advance(Duration::from_millis(300));
    for _ in 0..10 {
        let _ = s.acquire(&sp, key("t", 1), 1).await;
    }
    assert!(!s.is_up());
    r.restart().expect("restart");
    clock.advance(Duration::from_secs(10));
    let start = Instant::now();
    loop {
        if let Ok(d) = s.acquire(&sp, key("t", 1), 1).await {
            assert!(d.is_allowed());
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no recovery");
        clock.advance(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(s.is_up());
}

#[tokio::test]
async fn a_cluster_spreads_keys_over_its_masters_without_crossslot() {
    let c = RedisCluster::start(3).expect("cluster");
    let s = store_with(
        Target::Cluster(c.urls()),
        Arc::new(ManualClock::new(1)),
        Duration::from_secs(2),
    );
    for kind in AlgorithmKind::ALL {
        let sp = spec(kind, 1, HOUR, 3);
        let mut admitted = 0;
        for k in 0..100u64 {
            for _ in 0..5 {
                let d = s
                    .acquire(&sp, key(kind.name(), k), 1)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
                admitted += d.is_allowed() as u32;
            }
        }
        assert_eq!(admitted, 300, "{}: 100 keys x burst 3", kind.name());
    }
    let counts = c.key_counts();
    // 100 keys per algorithm, one Redis key each.
    let kinds = AlgorithmKind::ALL.len() as u64;
    assert_eq!(counts.iter().sum::<u64>(), 100 * kinds, "{counts:?}");
    assert!(counts.iter().all(|&n| n > 100), "spread: {counts:?}");
}

#[tokio::test]
async fn a_connection_that_goes_silent_is_replaced() {
    let r = RedisServer::start().expect("redis-server");
    let proxy = StallingProxy::start(r.port).await.expect("proxy");
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let timeout = Duration::from_millis(50);
    let s = store_with(Target::Single(proxy.url()), clock.clone(), timeout);
    let sp = spec(AlgorithmKind::Gcra, 1, HOUR, 1000);
    assert!(acquire(&s, &sp, key("silent", 1), 1).await.is_allowed());
    // The peer goes silent without closing: no error, no reset, just no answers.
    proxy.stall_existing();
    let mut timeouts = 0;
    for _ in 0..10 {
        let t = Instant::now();
        match s.acquire(&sp, key("silent", 1), 1).await {
            Err(StoreError::Timeout(_)) => timeouts += 1,
            Err(_) => {}
            Ok(d) => {
                // The connection was replaced after 3 timeouts: the new one answers.
                assert!(d.is_allowed());
                assert!(timeouts >= 3, "replaced after {timeouts} timeouts");
                return;
            }
        }
        assert!(t.elapsed() < timeout + Duration::from_millis(100));
        // Past any breaker back-off: the next call may go through as its probe.
        clock.advance(Duration::from_secs(10));
    }
    panic!("the silent connection was never replaced ({timeouts} timeouts)");
}

#[tokio::test]
async fn a_limit_whose_algorithm_changes_starts_afresh_without_errors() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    // One limit name, its algorithm changed between decisions (a reload, or a fleet mid-deploy
    // running both definitions): each keeps its own Redis type under its own key.
    for kind in AlgorithmKind::ALL.into_iter().chain(AlgorithmKind::ALL) {
        let sp = spec(kind, 1, HOUR, 100);
        let d = s.acquire(&sp, key("same", 1), 1).await;
        assert!(d.is_ok_and(|d| d.is_allowed()), "{}", kind.name());
    }
    assert_eq!(
        r.cli(&["KEYS", "*"]).lines().count(),
        AlgorithmKind::ALL.len()
    );
    assert!(s.is_up());
}

#[tokio::test]
async fn the_quota_script_ends_periods_where_the_rust_calendar_does() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    for unit in [
        CalendarUnit::Day,
        CalendarUnit::Week,
        CalendarUnit::Month,
        CalendarUnit::Year,
    ] {
        for offset_secs in [0, 7200, -5 * 3600 - 1800, 14 * 3600] {
            let cal = Calendar { unit, offset_secs };
            let sp = LimitSpec {
                algorithm: AlgorithmKind::Quota,
                rate: Rate::new(2, Duration::from_secs(unit.nominal_secs())).expect("rate"),
                burst: 2,
                delay: 0,
                calendar: Some(cal),
            };
            let k = key(
                "quota",
                (offset_secs as i64 + 100_000) as u64 * 10
                    + unit.code().len() as u64
                    + unit.nominal_secs(),
            );
            let now_ns = (redis_now_us(&r) * 1000.0) as u64;
            let (_, end) = cal.period(now_ns);
            let reset = match acquire(&s, &sp, k, 1).await {
                Decision::Allow {
                    remaining, reset, ..
                } => {
                    assert_eq!(remaining, 1);
                    reset
                }
                d => panic!("{d:?}"),
            };
            let lua_end = now_ns + reset;
            assert!(
                lua_end.abs_diff(end) < 1_000_000_000,
                "{unit:?} at {offset_secs}: script ends at {lua_end}, Rust at {end}"
            );
            assert!(acquire(&s, &sp, k, 1).await.is_allowed());
            match acquire(&s, &sp, k, 1).await {
                Decision::Deny { retry_after } => {
                    assert!(retry_after.abs_diff(reset) < 1_000_000_000)
                }
                d => panic!("{unit:?}: the third is over the quota: {d:?}"),
            }
            let ttl: i64 = r
                .cli(&["PTTL", &k.redis_key(AlgorithmKind::Quota)])
                .parse()
                .unwrap_or(-3);
            assert!(ttl > 0, "{unit:?}: PTTL {ttl}");
        }
    }
}

#[tokio::test]
async fn the_block_registry_shares_blocks_and_lifts_with_a_grace() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let min = Duration::from_secs(60);
    s.block("login", 0xabc, 5 * min, 0).await.expect("block");
    s.block("login", 0xdef, 5 * min, 0).await.expect("block");
    s.block("api", 0xabc, min, 0).await.expect("block");
    // A lower or equal step does not shorten a block; a higher one replaces it.
    s.block("login", 0xabc, min, 0).await.expect("block");
    let list = || async { s.blocks(0).await.expect("list").blocks };
    let find = |v: &[SharedBlock], limit: &str, key: u64| {
        v.iter()
            .find(|b| b.limit == limit && b.key == key)
            .cloned()
            .expect("listed")
    };
    let v = list().await;
    assert_eq!(v.len(), 3);
    let b = find(&v, "login", 0xabc);
    assert!(b.remaining > 4 * min && !b.lifted && b.rung == 0, "{b:?}");
    s.block("login", 0xabc, 60 * min, 1).await.expect("block");
    let b = find(&list().await, "login", 0xabc);
    assert!(b.remaining > 59 * min && b.rung == 1, "{b:?}");
    // The registry has a TTL past its last block.
    let ttl: i64 = r.cli(&["PTTL", "{tollgate:blocks}"]).parse().expect("pttl");
    assert!(ttl > 3_600_000, "{ttl}");

    // Lift one key; then every block of a limit.
    assert_eq!(s.lift("login", Some(0xabc)).await.expect("lift"), 1);
    assert_eq!(
        s.lift("login", Some(0xabc)).await.expect("lift"),
        0,
        "already lifted"
    );
    let v = list().await;
    assert!(
        find(&v, "login", 0xabc).lifted,
        "a tombstone tells the others"
    );
    assert!(!find(&v, "login", 0xdef).lifted);
    // An instance that has not seen the lift yet cannot block the key again at once.
    s.block("login", 0xabc, 60 * min, 1).await.expect("block");
    assert!(find(&list().await, "login", 0xabc).lifted);
    assert_eq!(s.lift("login", None).await.expect("lift all"), 1);
    let v = list().await;
    assert!(find(&v, "login", 0xdef).lifted);
    assert!(!find(&v, "api", 0xabc).lifted, "other limits keep theirs");
    // A block for another limit named like a prefix is not touched.
    s.block("login2", 0x1, min, 0).await.expect("block");
    s.lift("login", None).await.expect("lift all");
    assert!(!find(&list().await, "login2", 0x1).lifted);
}

#[tokio::test]
async fn the_block_registry_pages_its_change_log() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let min = Duration::from_secs(60);
    for k in 0..1200u64 {
        s.block("ip", k, min, 0).await.expect("block");
    }
    let first = s.blocks(0).await.expect("page");
    assert_eq!((first.blocks.len(), first.more), (500, true));
    let second = s.blocks(first.next).await.expect("page");
    let third = s.blocks(second.next).await.expect("page");
    assert_eq!(
        (second.blocks.len(), third.blocks.len(), third.more),
        (500, 200, false)
    );
    // Only what changed since: one lift, one new block.
    s.lift("ip", Some(7)).await.expect("lift");
    s.block("ip", 5000, min, 0).await.expect("block");
    let delta = s.blocks(third.next).await.expect("delta");
    let keys: Vec<(u64, bool)> = delta.blocks.iter().map(|b| (b.key, b.lifted)).collect();
    assert_eq!(keys, [(7, true), (5000, false)]);
    assert!(s.blocks(delta.next).await.expect("none").blocks.is_empty());
    // Every registry key has a TTL.
    for k in BLOCKS_KEYS {
        let ttl: i64 = r.cli(&["PTTL", k]).parse().expect("pttl");
        assert!(ttl > 50_000, "{k}: {ttl}");
    }
    // A registry that lost its state (Redis restarted empty) is read whole again.
    r.cli(&["FLUSHALL"]);
    s.block("ip", 9, min, 0).await.expect("block");
    let reset = s.blocks(delta.next).await.expect("reset");
    assert!(reset.more && reset.next == 0);
    assert_eq!(s.blocks(0).await.expect("all").blocks.len(), 1);
}

/// A global GCRA or leaky bucket steps as the local one does: 750,000/s is 1,334 ns per unit
/// in both (it was 2 us in Redis: 500,000/s), and a rate whose burst x interval is past 2^53 ns
/// steps in microseconds, rounded up by less than one part in 10^9. Compared on a fresh key,
/// where the answer does not depend on when Redis runs the script: the reset after `cost`
/// units is `cost` intervals in both, and what remains is the same.
#[tokio::test]
async fn global_gcra_and_leaky_bucket_step_as_the_local_ones_do() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let cases = [
        (750_000, Duration::from_secs(1), 750_000, 750_000),
        (750_000, Duration::from_secs(1), 1_000, 3),
        (3, Duration::from_secs(1), 10, 7),
        (7, Duration::from_secs(86_400), 1_000, 2),
        (1, Duration::from_secs(86_400), 52_000, 52_000),
    ];
    for kind in [AlgorithmKind::Gcra, AlgorithmKind::LeakyBucket] {
        for (i, &(n, period, burst, cost)) in cases.iter().enumerate() {
            let sp = LimitSpec {
                delay: burst,
                ..spec(kind, n, period, burst)
            };
            let local = sp.local(16);
            let want = local.acquire(1, 0, cost);
            let got = acquire(&s, &sp, key(kind.name(), i as u64), cost).await;
            let (
                Decision::Allow {
                    remaining: lr,
                    reset: lreset,
                    ..
                },
                Decision::Allow {
                    remaining: gr,
                    reset: greset,
                    ..
                },
            ) = (want, got)
            else {
                panic!("{kind:?} {n}/{period:?} burst {burst} cost {cost}: {want:?} vs {got:?}");
            };
            assert_eq!(gr, lr, "{kind:?} {n}/{period:?}: remaining");
            // The script answers in whole microseconds, rounded up.
            assert_eq!(
                greset,
                lreset.div_ceil(1_000) * 1_000,
                "{kind:?} {n}/{period:?} burst {burst} cost {cost}: reset"
            );
        }
    }
    // A TAT written in whole microseconds (by an older gateway, or in microsecond ticks) is
    // read as it was meant: a key 10 s ahead refuses a 1/s limit with burst 5.
    let sp = spec(AlgorithmKind::Gcra, 1, Duration::from_secs(1), 5);
    let k = key("old-format", 1);
    let ahead = redis_now_us(&r) as u64 + 10_000_000;
    r.cli(&["SET", &k.redis_key(AlgorithmKind::Gcra), &ahead.to_string()]);
    match acquire(&s, &sp, k, 1).await {
        Decision::Deny { retry_after } => {
            let secs = retry_after as f64 / 1e9;
            assert!((5.5..=6.0).contains(&secs), "{secs}");
        }
        d => panic!("{d:?}"),
    }
    // A value that is not a TAT (a stray write) counts as no state, and is replaced by one.
    for junk in ["not-a-tat", "12.5.3", "-5", ".5", "1e9"] {
        r.cli(&["SET", &k.redis_key(AlgorithmKind::Gcra), junk]);
        match acquire(&s, &sp, k, 1).await {
            Decision::Allow { remaining: 4, .. } => {}
            d => panic!("{junk:?}: {d:?}"),
        }
        let v = r.cli(&["GET", &k.redis_key(AlgorithmKind::Gcra)]);
        assert!(
            v.trim()
                .split('.')
                .all(|p| p.bytes().all(|b| b.is_ascii_digit())),
            "{junk:?} -> {v:?}"
        );
    }
}

#[tokio::test]
async fn a_lease_takes_what_is_left_up_to_its_want_and_windows_say_when_it_lapses() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let leasable = [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindow,
    ];
    for kind in leasable {
        let sp = spec(kind, 10, HOUR, 10);
        let k = key(kind.name(), 11);
        let l = s.lease(&sp, k, 4, TTL).await.expect("lease");
        assert_eq!(l.granted, 4, "{}", kind.name());
        assert!(
            matches!(l.decision, Decision::Allow { remaining: 6, .. }),
            "{}: {l:?}",
            kind.name()
        );
        // Windows: the units lapse at the window's end (within the hour); the others never.
        match kind {
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => assert!(
                l.lapse.is_some_and(|d| d > Duration::ZERO && d <= HOUR),
                "{}: {l:?}",
                kind.name()
            ),
            _ => assert_eq!(l.lapse, None, "{}", kind.name()),
        }
        // Five wanted, five left: all of them; then fewer than wanted; then a refusal.
        let l = s.lease(&sp, k, 5, TTL).await.expect("lease");
        assert_eq!(
            (l.granted, l.decision.is_allowed()),
            (5, true),
            "{}",
            kind.name()
        );
        let l = s.lease(&sp, k, 5, TTL).await.expect("lease");
        assert_eq!(
            (l.granted, l.decision.is_allowed()),
            (1, true),
            "{}",
            kind.name()
        );
        let l = s.lease(&sp, k, 5, TTL).await.expect("lease");
        assert_eq!(
            (l.granted, l.decision.is_allowed()),
            (0, false),
            "{}",
            kind.name()
        );
        // Units leased out may come back within the ttl: the refusal says so...
        let wait = |d: Decision| match d {
            Decision::Deny { retry_after } => Duration::from_nanos(retry_after),
            d => panic!("{d:?}"),
        };
        assert!(wait(l.decision) <= TTL, "{}: {l:?}", kind.name());
        // ...and once none can, it waits for the next unit (6 minutes at 10/h), so a cached
        // refusal costs no Redis call until then.
        let mark = format!("{}:lease", k.redis_key(kind));
        assert_eq!(r.cli(&["DEL", &mark]), "1", "{}", kind.name());
        let l = s.lease(&sp, k, 5, TTL).await.expect("lease");
        assert!(
            wait(l.decision) > Duration::from_secs(60),
            "{}: {l:?}",
            kind.name()
        );
        // Unspent units go back and can be leased again.
        s.refund(&sp, k, 3).await.expect("refund");
        let l = s.lease(&sp, k, 8, TTL).await.expect("lease");
        assert_eq!(l.granted, 3, "{}", kind.name());
    }
    // The algorithms that decide each request on its own refuse a lease: never a silent
    // acquire of `want` units.
    for kind in [
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::Quota,
    ] {
        let mut sp = spec(kind, 1, HOUR, 10);
        if kind == AlgorithmKind::Quota {
            sp.calendar = Some(Calendar {
                unit: CalendarUnit::Day,
                offset_secs: 0,
            });
        }
        let e = s
            .lease(&sp, key(kind.name(), 12), 4, TTL)
            .await
            .expect_err("no lease");
        assert!(e.to_string().contains("no lease"), "{}: {e}", kind.name());
        assert!(!e.is_outage());
    }
}

/// A real 3-master, 3-replica cluster; a master is killed under traffic. Keys on the healthy
/// masters never fail; keys on the failed master fail until its replica is promoted, and are
/// decided by Redis again within a second of the promotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_master_takes_only_its_own_keys_to_on_error_until_its_replica_is_promoted() {
    let mut c = RedisCluster::with_replicas(3).expect("cluster");
    let registry = prometheus::Registry::new();
    let m = StoreMetrics::register(&registry).expect("metrics");
    let s = Arc::new(
        RedisStore::new(
            &RedisConfig::new(Target::Cluster(c.urls()), Duration::from_millis(250), 2),
            Arc::new(ManualClock::new(1)),
            m.clone(),
        )
        .expect("store"),
    );
    assert!(!s.ready());
    s.probe().await.expect("probe");
    assert!(s.ready() && s.is_up());
    // The background probe, as the gateway runs it.
    let prober = {
        let s = s.clone();
        tokio::spawn(async move {
            loop {
                let _ = s.probe().await;
                tokio::time::sleep(s.probe_every()).await;
            }
        })
    };
    let masters = c.masters();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let owner = |k: u64| {
        let slot = tollgate_store::slot(key("f", k).redis_key(AlgorithmKind::Gcra).as_bytes());
        masters
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|(p, _)| *p)
            .expect("an owner")
    };
    let victim = masters[0].0;
    let on_victim: Vec<u64> = (0..200).filter(|&k| owner(k) == victim).take(8).collect();
    let healthy: Vec<u64> = (0..200).filter(|&k| owner(k) != victim).take(16).collect();
    assert!(on_victim.len() == 8 && healthy.len() == 16);

    // Traffic on both sets until told to stop: (ms since start, ok) per call.
    let t0 = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = |keys: Vec<u64>| {
        let (s, stop) = (s.clone(), stop.clone());
        tokio::spawn(async move {
            let sp = spec(
                AlgorithmKind::Gcra,
                1_000_000,
                Duration::from_secs(1),
                1_000_000,
            );
            let mut out = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for &k in &keys {
                    let r = s.acquire(&sp, key("f", k), 1).await;
                    out.push((t0.elapsed().as_millis() as u64, r.is_ok()));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            out
        })
    };
    let healthy_calls = traffic(healthy.clone());
    let victim_calls = traffic(on_victim.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

    c.node(victim).expect("victim").stop();
    let killed = t0.elapsed().as_millis() as u64;
    // Promotion: a live node sees another master serving the victim's slots.
    let victim_slot = masters[0].1[0].0;
    let promoted = loop {
        let now = c.masters();
        if now.iter().any(|(p, r)| {
            *p != victim && r.iter().any(|&(a, b)| a <= victim_slot && victim_slot <= b)
        }) {
            break t0.elapsed().as_millis() as u64;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no promotion");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    prober.abort();
    let healthy_calls = healthy_calls.await.expect("traffic");
    let victim_calls = victim_calls.await.expect("traffic");

    let failed: Vec<_> = healthy_calls.iter().filter(|c| !c.1).collect();
    assert!(
        failed.is_empty(),
        "keys on healthy masters failed {} of {} calls (killed at {killed} ms): {:?}",
        failed.len(),
        healthy_calls.len(),
        &failed[..failed.len().min(10)]
    );
    let victim_failed: Vec<u64> = victim_calls.iter().filter(|c| !c.1).map(|c| c.0).collect();
    assert!(
        !victim_failed.is_empty(),
        "the failed master's keys did fail"
    );
    let last_failure = victim_failed.iter().max().copied().unwrap_or(0);
    eprintln!(
        "killed at {killed} ms, promoted at {promoted} ms (seen), the failed master's keys failed until {last_failure} ms; healthy keys: {} calls, 0 failed",
        healthy_calls.len()
    );
    assert!(
        last_failure <= promoted + 1000,
        "the failed master's keys failed until {last_failure} ms; promoted at {promoted} ms"
    );
    assert!(
        victim_calls
            .iter()
            .filter(|c| c.0 > promoted + 1000)
            .all(|c| c.1)
            && victim_calls.iter().any(|c| c.0 > promoted + 1000),
        "global again after the promotion"
    );
    assert!(s.is_up(), "every master of the new map answers");
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("metrics text");
    assert_eq!(text.matches("tollgate_redis_up{").count(), 3, "{text}");
    assert!(
        !text.contains(&format!(":{victim}\"")),
        "the dead master's gauge is gone: {text}"
    );
}

/// envoyproxy/ratelimit's counting, in Redis as in the local limiter, step for step: every
/// hit counts (a refused one of many units leaves the count past the limit), a check of 0
/// units passes at exactly the limit and not past it, and a limit of 0 refuses every hit.
#[tokio::test]
async fn the_counting_window_counts_every_hit_as_the_local_one_does() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    let kind = AlgorithmKind::CountingWindow;
    let verdicts = |limit: u64, costs: &[u64]| {
        let sp = spec(kind, limit.max(1), HOUR, limit);
        let local = sp.local(16);
        let now = tollgate_limit::MonotonicClock::new().unix_now();
        let out: Vec<(bool, u64)> = costs
            .iter()
            .map(|&c| match local.acquire(7, now, c) {
                Decision::Allow { remaining, .. } => (true, remaining),
                Decision::Deny { .. } => (false, 0),
            })
            .collect();
        (sp, out)
    };
    // (limit, the costs of the hits, (admitted, remaining) after each)
    type Case<'a> = (u64, &'a [u64], &'a [(bool, u64)]);
    let cases: [Case; 3] = [
        // 10 per hour: 8, then 5 (over: the count is 13), then 1 (still over), a check.
        (
            10,
            &[8, 0, 5, 1, 0],
            &[(true, 2), (true, 2), (false, 0), (false, 0), (false, 0)],
        ),
        // At exactly the limit a check passes; the next unit does not.
        (
            3,
            &[3, 0, 1, 0],
            &[(true, 0), (true, 0), (false, 0), (false, 0)],
        ),
        // requests_per_unit: 0: a check passes until a hit is counted.
        (0, &[0, 1, 0], &[(true, 0), (false, 0), (false, 0)]),
    ];
    for (i, (limit, costs, want)) in cases.iter().enumerate() {
        let (sp, local) = verdicts(*limit, costs);
        assert_eq!(&local[..], *want, "local, case {i}");
        let k = key("counting", 100 + i as u64);
        let mut global = Vec::new();
        for &c in *costs {
            global.push(match acquire(&s, &sp, k, c).await {
                Decision::Allow {
                    remaining, reset, ..
                } => {
                    assert!(reset > 0 && reset <= HOUR.as_nanos() as u64);
                    (true, remaining)
                }
                Decision::Deny { retry_after } => {
                    assert!(retry_after > 0 && retry_after <= HOUR.as_nanos() as u64);
                    (false, 0)
                }
            });
        }
        assert_eq!(&global[..], *want, "Redis, case {i}");
        if costs.iter().any(|&c| c > 0) {
            assert!(pttl(&r, k, kind) > 0);
        }
    }
}

/// A check of 0 units spends nothing, whatever the algorithm.
#[tokio::test]
async fn a_cost_of_zero_spends_nothing() {
    let r = RedisServer::start().expect("redis-server");
    let s = store(&r);
    for kind in AlgorithmKind::ALL {
        if kind == AlgorithmKind::Concurrency {
            continue;
        }
        let sp = spec(kind, 1, HOUR, 2);
        let k = key(kind.name(), 9);
        for _ in 0..3 {
            assert!(
                acquire(&s, &sp, k, 0).await.is_allowed(),
                "{}: a check",
                kind.name()
            );
        }
        match acquire(&s, &sp, k, 1).await {
            Decision::Allow { remaining, .. } => assert_eq!(remaining, 1, "{}", kind.name()),
            d => panic!("{}: {d:?}", kind.name()),
        }
    }
}
