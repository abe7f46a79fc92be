use super::*;

/// An upstream named "u" of these address targets, without health check or policy (the
/// health tests build on it too).
pub(crate) fn upstream(targets: &[SocketAddr]) -> UpstreamConfig {
    UpstreamConfig {
        name: "u".into(),
        targets: targets
            .iter()
            .map(|a| tollgate_config::model::UpstreamTarget {
                written: a.to_string(),
                host: a.ip().to_string(),
                port: a.port(),
                addr: Some(*a),
            })
            .collect(),
        resolve_every: Duration::from_secs(5),
        connect_timeout: Duration::from_millis(300),
        read_timeout: Duration::from_secs(7),
        write_timeout: Duration::from_secs(8),
        tls: None,
        h2: false,
        health_check: None,
        balance: Balance::RoundRobin,
        hash_key: None,
        affinity: None,
        retry: None,
        outlier: None,
    }
}

#[test]
fn round_robin_skips_the_unhealthy_and_gives_up_when_none_is_left() {
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let pool = Pool::new(&upstream(&addrs), &[], false);
    let picks: Vec<u16> = (0..6)
        .filter_map(|_| pool.select().map(|t| t.addr.port()))
        .collect();
    assert_eq!(picks, [1, 2, 3, 1, 2, 3]);

    pool.set_health(&pool.targets()[1], false);
    let picks: Vec<u16> = (0..4)
        .filter_map(|_| pool.select().map(|t| t.addr.port()))
        .collect();
    assert!(!picks.contains(&2), "{picks:?}");
    assert_eq!(picks.len(), 4);

    for t in pool.targets().iter() {
        pool.set_health(t, false);
    }
    assert!(pool.select().is_none());
    assert!(Pool::new(&upstream(&[]), &[], false).select().is_none());
}

fn ports(picks: &[crate::target::Pick]) -> Vec<u16> {
    picks.iter().map(|p| p.target.addr.port()).collect()
}

fn choose(
    pool: &Pool,
    hash: Option<&[u8]>,
    pinned: Option<u64>,
    tried: &[u64],
) -> Option<crate::target::Pick> {
    pool.choose(&Choice {
        hash,
        pinned,
        tried,
    })
}

#[test]
fn least_request_takes_the_target_with_the_fewest_in_flight() {
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let mut cfg = upstream(&addrs);
    cfg.balance = Balance::LeastRequest;
    let pool = Pool::new(&cfg, &[], false);
    // Three held picks land on three targets; a fourth joins one of them.
    let held: Vec<_> = (0..3)
        .filter_map(|_| choose(&pool, None, None, &[]))
        .collect();
    let mut p = ports(&held);
    p.sort();
    assert_eq!(p, [1, 2, 3]);
    // Target 2's requests end: the next two go there first, one at a time.
    let (two, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|p| p.target.addr.port() == 2);
    drop(two);
    let next = choose(&pool, None, None, &[]).expect("a pick");
    assert_eq!(next.target.addr.port(), 2);
    assert_eq!(
        pool.targets()
            .iter()
            .map(|t| t.active.load(Ordering::Relaxed))
            .sum::<usize>(),
        3
    );
    drop((next, rest));
    assert!(pool
        .targets()
        .iter()
        .all(|t| t.active.load(Ordering::Relaxed) == 0));
}

#[test]
fn ewma_avoids_the_slow_target_until_it_recovers() {
    let addrs: Vec<SocketAddr> = (1..=2)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let mut cfg = upstream(&addrs);
    cfg.balance = Balance::Ewma;
    let pool = Pool::new(&cfg, &[], false);
    let slow = choose(&pool, None, None, &[]).expect("pick");
    let slow_port = slow.target.addr.port();
    slow.observe(500_000);
    drop(slow);
    let fast = choose(&pool, None, None, &[]).expect("pick");
    assert_ne!(fast.target.addr.port(), slow_port);
    fast.observe(2_000);
    drop(fast);
    for _ in 0..20 {
        let p = choose(&pool, None, None, &[]).expect("pick");
        assert_ne!(p.target.addr.port(), slow_port);
        p.observe(2_000);
    }
}

#[test]
fn hashing_keeps_keys_on_their_target_and_moves_only_a_leavers_share() {
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let mut cfg = upstream(&addrs);
    cfg.balance = Balance::Hash;
    let pool = Pool::new(&cfg, &[], false);
    let keys: Vec<String> = (0..3000).map(|i| format!("user-{i}")).collect();
    let before: Vec<u16> = keys
        .iter()
        .map(|k| {
            choose(&pool, Some(k.as_bytes()), None, &[])
                .expect("pick")
                .target
                .addr
                .port()
        })
        .collect();
    for port in 1..=3 {
        let share = before.iter().filter(|p| **p == port).count();
        assert!(
            (700..1300).contains(&share),
            "target {port} holds {share} of 3000"
        );
    }
    // The same key again: the same target.
    assert!(keys.iter().zip(&before).all(|(k, p)| {
        choose(&pool, Some(k.as_bytes()), None, &[]).map(|x| x.target.addr.port()) == Some(*p)
    }));
    // Target 3 leaves rotation: only its keys move.
    pool.set_health(&pool.targets()[2], false);
    let mut moved = 0;
    for (k, p) in keys.iter().zip(&before) {
        let now = choose(&pool, Some(k.as_bytes()), None, &[])
            .expect("pick")
            .target
            .addr
            .port();
        assert_ne!(now, 3);
        if now != *p {
            assert_eq!(*p, 3, "{k} moved from a target that stayed");
            moved += 1;
        }
    }
    assert_eq!(moved, before.iter().filter(|p| **p == 3).count());
    // Without the key: round robin.
    assert!(choose(&pool, None, None, &[]).is_some());
}

#[test]
fn a_pin_holds_while_its_target_is_healthy_and_retries_leave_tried_targets() {
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let mut cfg = upstream(&addrs);
    cfg.retry = Some(tollgate_config::model::Retry {
        attempts: 2,
        on: tollgate_config::model::RETRY_ON_DEFAULT,
        budget: 0.2,
        targets: Default::default(),
        backoff: None,
    });
    let pool = Pool::new(&cfg, &[], false);
    assert!(pool.chooses());
    let t2 = pool.targets()[1].id;
    for _ in 0..5 {
        assert_eq!(
            choose(&pool, None, Some(t2), &[]).expect("pick").target.id,
            t2
        );
    }
    // An unknown id, or the pinned target down or tried: the policy's choice.
    assert!(choose(&pool, None, Some(12345), &[]).is_some());
    pool.set_health(&pool.targets()[1], false);
    assert_ne!(
        choose(&pool, None, Some(t2), &[]).expect("pick").target.id,
        t2
    );
    pool.set_health(&pool.targets()[1], true);
    let tried = [t2, pool.targets()[0].id];
    assert_eq!(
        choose(&pool, None, Some(t2), &tried)
            .expect("pick")
            .target
            .addr
            .port(),
        3
    );
    assert_eq!(pool.untried(&tried), 1);
    let all: Vec<u64> = pool.targets().iter().map(|t| t.id).collect();
    assert!(choose(&pool, None, None, &all).is_none());
    // Ids are stable: a new pool for the same targets gives the same ones.
    assert_eq!(Pool::new(&cfg, &[], false).targets()[1].id, t2);
}

#[test]
fn the_peer_carries_the_upstreams_settings() {
    let a = SocketAddr::from(([127, 0, 0, 1], 9));
    let mut cfg = upstream(&[a]);
    cfg.h2 = true;
    let pool = Pool::new(&cfg, &[], false);
    let p = pool.select().expect("a target").peer();
    assert_eq!(
        p._address,
        pingora::protocols::l4::socket::SocketAddr::Inet(a)
    );
    assert_eq!(
        p.options.connection_timeout,
        Some(Duration::from_millis(300))
    );
    assert_eq!(p.options.read_timeout, Some(Duration::from_secs(7)));
    assert_eq!(p.options.write_timeout, Some(Duration::from_secs(8)));
    assert_eq!(p.options.alpn, pingora::protocols::ALPN::H2);
    assert!(!p.is_tls());
}

/// Plain targets with the same settings share one peer, yet each request's copy goes to its
/// own target's address, and other settings get a peer of their own.
#[test]
fn plain_targets_share_their_settings_but_not_their_address() {
    use pingora::upstreams::peer::Peer;
    let (a, b) = (
        SocketAddr::from(([127, 0, 0, 1], 11)),
        SocketAddr::from(([127, 0, 0, 2], 12)),
    );
    let one = Pool::new(&upstream(&[a]), &[], false);
    let two = Pool::new(&upstream(&[b, a]), &[], false);
    let t = two.targets();
    assert!(Arc::ptr_eq(&one.targets()[0].peer, &t[0].peer));
    assert!(Arc::ptr_eq(&t[0].peer, &t[1].peer));
    let inet = pingora::protocols::l4::socket::SocketAddr::Inet;
    assert_eq!(t[0].peer()._address, inet(b));
    assert_eq!(t[1].peer()._address, inet(a));
    assert_eq!(one.targets()[0].peer()._address, inet(a));
    assert_ne!(t[0].peer().reuse_hash(), t[1].peer().reuse_hash());
    assert_eq!(
        t[1].peer().reuse_hash(),
        one.targets()[0].peer().reuse_hash()
    );
    let mut slower = upstream(&[a]);
    slower.read_timeout = Duration::from_secs(70);
    let other = Pool::new(&slower, &[], false);
    assert!(!Arc::ptr_eq(&other.targets()[0].peer, &t[1].peer));
    assert_eq!(
        other.targets()[0].peer().options.read_timeout,
        Some(Duration::from_secs(70))
    );
    let preserving = Pool::new(&upstream(&[a]), &[], true);
    assert!(!Arc::ptr_eq(&preserving.targets()[0].peer, &t[1].peer));
}

/// Two names of one TLS upstream that resolve to one address stay two targets, each with
/// its own SNI, and Pingora never hands one's connection to the other (its reuse hash
/// covers the SNI).
#[test]
fn targets_on_one_address_keep_their_own_sni() {
    use pingora::upstreams::peer::Peer;
    let a = SocketAddr::from(([127, 0, 0, 1], 8443));
    let mut cfg = upstream(&[]);
    for name in ["a.test", "b.test"] {
        cfg.targets.push(tollgate_config::model::UpstreamTarget {
            written: format!("{name}:8443"),
            host: name.into(),
            port: 8443,
            addr: None,
        });
    }
    let tls: Vec<UpstreamTlsRt> = ["a.test", "b.test"]
        .iter()
        .map(|n| UpstreamTlsRt {
            sni: n.to_string(),
            verify: true,
            ca: None,
            client_cert: None,
        })
        .collect();
    let pool = Pool::new(&cfg, &tls, false);
    let both = vec![
        Resolved {
            addrs: vec![a],
            error: None,
            placed: false,
        };
        2
    ];
    *pool.resolved.lock() = both.clone();
    pool.rebuild(&both);
    let peers: Vec<_> = pool.targets().iter().map(|t| t.peer()).collect();
    assert_eq!(peers.len(), 2);
    assert_eq!((peers[0].sni(), peers[1].sni()), ("a.test", "b.test"));
    assert_ne!(peers[0].reuse_hash(), peers[1].reuse_hash());
    // A reload keeps each name's own peer too.
    let next = Pool::new(&cfg, &tls, false);
    next.inherit(&pool);
    let snis: Vec<String> = next
        .targets()
        .iter()
        .map(|t| t.peer().sni().to_string())
        .collect();
    assert_eq!(snis, ["a.test", "b.test"]);
}

/// A target that leaves the pool (its name now resolves elsewhere) takes its failures in a
/// row along: the pool's count of targets with failures goes back to zero, and answers to
/// one load; a target that stays keeps its count.
#[test]
fn a_leaving_target_takes_its_failures_along() {
    let (a, b) = (
        SocketAddr::from(([127, 0, 0, 1], 21)),
        SocketAddr::from(([127, 0, 0, 1], 22)),
    );
    let mut cfg = upstream(&[a, b]);
    cfg.outlier = Some(tollgate_config::model::Outlier::default());
    let pool = Pool::new(&cfg, &[], false);
    let now = Instant::now();
    assert_eq!(pool.failed(a, now), None);
    assert_eq!(pool.failed(b, now), None);
    assert_eq!(pool.suspects.load(Ordering::Relaxed), 2);
    let only_b = [
        Resolved {
            addrs: vec![],
            error: None,
            placed: false,
        },
        Resolved {
            addrs: vec![b],
            error: None,
            placed: false,
        },
    ];
    pool.rebuild(&only_b);
    assert_eq!(pool.suspects.load(Ordering::Relaxed), 1);
    pool.answered(b);
    assert_eq!(pool.suspects.load(Ordering::Relaxed), 0);
    assert_eq!(pool.targets()[0].fails.load(Ordering::Relaxed), 0);
}

/// One test, as the directory is the process's: the cluster's placements stand in for DNS,
/// pool by pool, without a new pool.
#[tokio::test]
async fn the_cluster_places_a_services_endpoints_in_place_of_dns() {
    use crate::placed::{Placements, CLUSTER};
    let svc = "web.placed.svc.cluster.local:80";
    let (a, b, c) = (
        SocketAddr::from(([127, 0, 0, 1], 31)),
        SocketAddr::from(([127, 0, 0, 1], 32)),
        SocketAddr::from(([127, 0, 0, 1], 33)),
    );
    let place = |addrs: &[SocketAddr]| {
        let mut m = Placements::new();
        m.insert(svc.to_string(), addrs.into());
        // Another spelling of the name is another name: never placed.
        m.insert("WEB.placed.svc.cluster.local:80".into(), [c][..].into());
        CLUSTER.replace(m);
    };
    let mut cfg = upstream(&[c]);
    cfg.targets[0] = tollgate_config::model::UpstreamTarget {
        written: svc.into(),
        host: "web.placed.svc.cluster.local".into(),
        port: 80,
        addr: None,
    };
    place(&[a, b]);
    // Built: placed at once, settled, no lookup needed for its readiness.
    let pool = Pool::new(&cfg, &[], false);
    let addrs = |p: &Pool| p.targets().iter().map(|t| t.addr).collect::<Vec<_>>();
    assert_eq!(addrs(&pool), [a, b]);
    assert!(pool.settled() && !pool.placement_due());
    // DNS (which cannot answer for this name here) does not take the placed name back.
    pool.resolve().await;
    assert_eq!(addrs(&pool), [a, b]);
    assert!(pool.unresolved().is_empty());
    // An endpoint leaves and one comes: the same pool, the staying target keeps its health.
    pool.set_health(&pool.targets()[1], false);
    place(&[b, c]);
    assert!(pool.placement_due());
    pool.place();
    assert!(!pool.placement_due());
    assert_eq!(addrs(&pool), [b, c]);
    assert!(!pool.targets()[0].healthy(), "b kept its health");
    // A reload builds from the directory, not from the old pool's addresses.
    place(&[a]);
    let next = Pool::new(&cfg, &[], false);
    next.inherit(&pool);
    assert_eq!(addrs(&next), [a]);
    // Ready endpoints none: nothing in rotation, and said why.
    place(&[]);
    next.place();
    assert!(next.is_empty());
    assert_eq!(
        next.unresolved(),
        [(svc.to_string(), "no ready endpoint".to_string())]
    );
    // The cluster stops placing it: the last addresses stay until DNS answers, due at once.
    place(&[a]);
    next.place();
    CLUSTER.replace(Placements::new());
    next.place();
    assert_eq!(addrs(&next), [a]);
    assert!(next.claim_resolve(Instant::now()));
    next.resolve().await;
    assert_eq!(addrs(&next), [a], "a failed lookup keeps what was there");
    assert!(next.unresolved().is_empty(), "it has addresses");
    // A pool of literal targets is never due.
    assert!(!Pool::new(&upstream(&[a]), &[], false).placement_due());
}

/// `retry.targets`: `"untried"` stops when every target was tried; `"any"` starts a new
/// round (the one that failed included), within `attempts`; both count each retry.
#[test]
fn retry_targets_any_goes_round_again_within_attempts() {
    use crate::attempt::{attempt, may_retry, BalanceCtx, Failure};
    let one = [SocketAddr::from(([127, 0, 0, 1], 1))];
    let metrics = tollgate_core::observe::metrics::Metrics::new().expect("metrics");
    let req = pingora::http::RequestHeader::build("GET", b"/", None).expect("req");
    let client = std::net::IpAddr::from([127, 0, 0, 1]);
    let retries = |targets| {
        let mut cfg = upstream(&one);
        cfg.retry = Some(tollgate_config::model::Retry {
            attempts: 3,
            on: tollgate_config::model::RETRY_ON_DEFAULT,
            budget: 3.0,
            targets,
            backoff: None,
        });
        let pool = Pool::new(&cfg, &[], false);
        let mut b = BalanceCtx::default();
        let mut n = 0;
        let mut first = true;
        while attempt(&pool, &req, client, None, &mut b, first).is_some() {
            first = false;
            if !may_retry(&pool, Some(&mut b), true, Failure::Reset, &metrics) {
                break;
            }
            n += 1;
        }
        (n, b.resent, b.tried.len())
    };
    assert_eq!(
        retries(tollgate_config::model::RetryTargets::Untried),
        (0, 0, 0)
    );
    // Three retries of the one target; it is never left behind as "tried".
    assert_eq!(
        retries(tollgate_config::model::RetryTargets::Any),
        (3, 3, 0)
    );
}
