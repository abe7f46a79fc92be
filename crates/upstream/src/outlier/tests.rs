use super::*;
use crate::pool::Pool;
use std::time::{Duration, Instant};

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A pool of `n` targets on ports 1..=n with outlier ejection `o`, and its own ejection list
/// (the process's is shared by every test running at once).
fn pool(n: u16, o: Outlier) -> (Pool, &'static Ejections) {
    let targets: Vec<SocketAddr> = (1..=n).map(addr).collect();
    let mut cfg = crate::pool::tests::upstream(&targets);
    cfg.outlier = Some(o);
    let mut p = Pool::new(&cfg, &[], false);
    let list: &'static Ejections = Box::leak(Box::default());
    p.ejections = list;
    (p, list)
}

fn o(consecutive: u32, pct: u8) -> Outlier {
    Outlier {
        consecutive_failures: consecutive,
        ejection: Duration::from_secs(30),
        max_ejection: Duration::from_secs(300),
        max_ejected_percent: pct,
    }
}

fn out(p: &Pool) -> Vec<u16> {
    p.targets()
        .iter()
        .filter(|t| t.ejected())
        .map(|t| t.addr.port())
        .collect()
}

#[test]
fn failures_in_a_row_eject_and_an_answer_between_them_starts_over() {
    let (p, list) = pool(10, o(5, 10));
    let t0 = Instant::now();
    for _ in 0..4 {
        assert_eq!(p.failed(addr(3), t0), None);
    }
    // An answer below 500 clears the count: four more are not enough.
    p.answered(addr(3));
    assert_eq!(p.suspects.load(Ordering::Relaxed), 0);
    for _ in 0..4 {
        assert_eq!(p.failed(addr(3), t0), None);
    }
    let e = p.failed(addr(3), t0).expect("the fifth in a row ejects");
    assert_eq!(
        (e.addr, e.failures, e.lasts, e.times),
        (addr(3), 5, Duration::from_secs(30), 1)
    );
    assert_eq!(out(&p), [3]);
    assert_eq!(list.len(), 1);
    // Round robin skips it: ten picks, nine targets, never port 3.
    let picks: Vec<u16> = (0..18)
        .filter_map(|_| p.select_peer())
        .map(|peer| peer._address.as_inet().expect("inet").port())
        .collect();
    assert_eq!(picks.len(), 18);
    assert!(!picks.contains(&3), "{picks:?}");
    // Its time ends: back in rotation, said once.
    assert!(list.lift(t0 + Duration::from_secs(29)).is_empty());
    let back = list.lift(t0 + Duration::from_secs(30));
    assert_eq!(back.len(), 1);
    assert_eq!((&*back[0].upstream, back[0].addr), ("u", addr(3)));
    assert!(out(&p).is_empty());
    assert!(list.is_empty());
    assert!(list.lift(t0 + Duration::from_secs(3600)).is_empty());
}

#[test]
fn each_ejection_lasts_longer_up_to_the_cap_and_a_quiet_target_starts_over() {
    let (p, list) = pool(10, o(1, 10));
    let mut now = Instant::now();
    let mut lasted = Vec::new();
    for _ in 0..12 {
        let e = p.failed(addr(1), now).expect("ejected");
        lasted.push(e.lasts.as_secs());
        now += e.lasts;
        assert_eq!(list.lift(now).len(), 1);
    }
    assert_eq!(
        lasted,
        [30, 60, 90, 120, 150, 180, 210, 240, 270, 300, 300, 300]
    );
    // Back for the longest ejection without being taken out: it starts over at one.
    now += Duration::from_secs(300);
    assert_eq!(p.failed(addr(1), now).expect("ejected").times, 1);
}

#[test]
fn no_more_than_the_share_is_out_and_the_last_target_never_is() {
    // 10 % of 30 targets: three may be out, however many fail.
    let (p, _) = pool(30, o(1, 10));
    let t0 = Instant::now();
    let ejected = (1..=30)
        .filter(|&port| p.failed(addr(port), t0).is_some())
        .count();
    assert_eq!(ejected, 3);
    // Of fewer than ten targets, one may be out (the share rounds down, at least one).
    let (p, _) = pool(4, o(1, 10));
    assert_eq!(
        (1..=4)
            .filter(|&port| p.failed(addr(port), t0).is_some())
            .count(),
        1
    );
    // 100 %: all but the last one in rotation.
    let (p, _) = pool(4, o(1, 100));
    assert_eq!(
        (1..=4)
            .filter(|&port| p.failed(addr(port), t0).is_some())
            .count(),
        3
    );
    assert!(p.select_peer().is_some(), "the pool still answers");
    // A single target is never ejected, however long it fails.
    let (p, list) = pool(1, o(1, 100));
    for _ in 0..1000 {
        assert_eq!(p.failed(addr(1), t0), None);
    }
    assert!(list.is_empty());
    assert!(p.select_peer().is_some());
    // The health check took the others out: the last one in rotation stays.
    let (p, _) = pool(3, o(1, 100));
    for t in p.targets().iter().filter(|t| t.addr.port() != 2) {
        assert!(p.set_health(t, false));
    }
    assert_eq!(p.failed(addr(2), t0), None);
    assert!(p.select_peer().is_some());
    // 0 %: nothing is ever ejected... except that the share is at least one target.
    let (p, _) = pool(10, o(1, 0));
    assert_eq!(
        (1..=10)
            .filter(|&port| p.failed(addr(port), t0).is_some())
            .count(),
        1
    );
}

#[test]
fn failures_from_many_threads_at_once_eject_no_more_than_the_share() {
    let (p, list) = pool(20, o(3, 10));
    let p = std::sync::Arc::new(p);
    let t0 = Instant::now();
    let ejected = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for i in 0..2000u32 {
                    let port = (i % 20 + 1) as u16;
                    if p.failed(addr(port), t0).is_some() {
                        ejected.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(ejected.load(Ordering::Relaxed), 2);
    assert_eq!(out(&p).len(), 2);
    assert_eq!(list.len(), 2);
    assert_eq!(p.targets().iter().filter(|t| t.in_rotation()).count(), 18);
}

#[test]
fn an_address_not_in_the_pool_and_a_pool_without_outlier_change_nothing() {
    let (p, list) = pool(3, o(1, 100));
    let t0 = Instant::now();
    assert_eq!(p.failed(addr(99), t0), None);
    assert_eq!(p.suspects.load(Ordering::Relaxed), 0);
    let mut cfg = crate::pool::tests::upstream(&[addr(1), addr(2)]);
    cfg.outlier = None;
    let off = Pool::new(&cfg, &[], false);
    for _ in 0..100 {
        assert_eq!(off.failed(addr(1), t0), None);
    }
    assert!(off.targets().iter().all(|t| t.in_rotation()));
    assert!(list.is_empty());
}

#[test]
fn a_reload_keeps_an_ejected_target_out_for_the_rest_of_its_time() {
    let (old, list) = pool(3, o(1, 100));
    let t0 = Instant::now();
    assert!(old.failed(addr(2), t0).is_some());
    let mut cfg = old.config().clone();
    cfg.read_timeout = Duration::from_secs(9);
    let mut new = Pool::new(&cfg, &[], false);
    new.ejections = list;
    new.inherit(&old);
    assert_eq!(out(&new), [2]);
    drop(old);
    // The old pool's entry is forgotten; the new one comes back on time, once.
    assert!(list.lift(t0 + Duration::from_secs(29)).is_empty());
    assert_eq!(list.lift(t0 + Duration::from_secs(30)).len(), 1);
    assert!(out(&new).is_empty());
    assert!(list.is_empty());
    // Its count went on: the next ejection is the second.
    assert_eq!(
        new.failed(addr(2), t0 + Duration::from_secs(31))
            .map(|e| e.times),
        Some(2)
    );
}

/// Ejection never empties a pool, whatever happens after it: a health check that takes the
/// rest out, or a reload that keeps only the ejected target, leaves the ejected one serving.
#[test]
fn a_pool_left_with_only_ejected_targets_still_serves_them() {
    let (p, _) = pool(2, o(1, 100));
    let t0 = Instant::now();
    assert!(p.failed(addr(1), t0).is_some());
    let other = p.targets()[1].clone();
    assert!(p.set_health(&other, false));
    let port = |peer: Box<pingora::upstreams::peer::HttpPeer>| {
        peer._address.as_inet().expect("inet").port()
    };
    assert_eq!(p.select_peer().map(port), Some(1));
    let c = crate::pool::Choice {
        hash: None,
        pinned: None,
        tried: &[],
    };
    assert_eq!(p.choose(&c).map(|k| k.target.addr.port()), Some(1));
    assert_eq!(p.untried(&[]), 1);
    // A health check that fails the ejected one too: nothing healthy, nothing chosen.
    let first = p.targets()[0].clone();
    assert!(p.set_health(&first, false));
    assert!(p.select_peer().is_none());
    // A reload down to the ejected target alone: it is carried over, and still serves.
    let (old, list) = pool(2, o(1, 100));
    assert!(old.failed(addr(2), t0).is_some());
    let mut cfg = crate::pool::tests::upstream(&[addr(2)]);
    cfg.outlier = Some(o(1, 100));
    let mut new = Pool::new(&cfg, &[], false);
    new.ejections = list;
    new.inherit(&old);
    assert_eq!(out(&new), [2]);
    assert_eq!(new.select_peer().map(port), Some(2));
}

/// Failures of requests that were in flight when it went out do not count against its return.
#[test]
fn failures_while_out_do_not_count() {
    let (p, list) = pool(3, o(2, 100));
    let t0 = Instant::now();
    assert_eq!(p.failed(addr(1), t0), None);
    assert!(p.failed(addr(1), t0).is_some());
    for _ in 0..10 {
        assert_eq!(p.failed(addr(1), t0), None);
    }
    assert_eq!(list.lift(t0 + Duration::from_secs(30)).len(), 1);
    assert_eq!(
        p.failed(addr(1), t0 + Duration::from_secs(31)),
        None,
        "one is not two"
    );
    assert!(p.failed(addr(1), t0 + Duration::from_secs(31)).is_some());
}
