use super::*;
use tollgate_config::model::{HealthCheck, UpstreamConfig};

fn upstream(name: &str, targets: &[SocketAddr], hc: Option<(u64, u64)>) -> Arc<Pool> {
    let cfg = UpstreamConfig {
        name: name.into(),
        health_check: hc.map(|(interval, timeout)| HealthCheck {
            interval: Duration::from_millis(interval),
            timeout: Duration::from_millis(timeout),
        }),
        ..crate::pool::tests::upstream(targets)
    };
    Arc::new(Pool::new(&cfg, &[], false))
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn ten_thousand_upstreams_on_one_address_make_one_probe_a_round() {
    let pools: Vec<Arc<Pool>> = (0..10_000)
        .map(|i| upstream(&format!("u{i}"), &[addr(8080)], Some((2000, 1000))))
        .collect();
    let mut rounds = HealthRounds::default();
    let t0 = Instant::now();
    let due = rounds.due(1, || &pools, t0);
    assert_eq!(due.len(), 1);
    assert_eq!(rounds.groups(), 1);
    assert_eq!(due[0].addr, addr(8080));
    // One answer moves every upstream that names the address.
    assert_eq!(due[0].apply(false), 10_000);
    assert!(pools.iter().all(|p| !p.targets()[0].healthy()));
    assert_eq!(due[0].apply(false), 0, "no change, nothing counted");
    assert_eq!(due[0].apply(true), 10_000);
    assert!(pools.iter().all(|p| p.targets()[0].healthy()));
}

#[test]
fn a_group_is_its_address_and_timeout_at_the_shortest_interval() {
    let pools = vec![
        upstream("a", &[addr(1), addr(2)], Some((2000, 1000))),
        upstream("b", &[addr(2)], Some((500, 1000))),
        upstream("c", &[addr(2)], Some((2000, 300))),
        upstream("unchecked", &[addr(3)], None),
    ];
    let mut rounds = HealthRounds::default();
    let t0 = Instant::now();
    let mut due: Vec<(SocketAddr, Duration)> = rounds
        .due(1, || &pools, t0)
        .iter()
        .map(|p| (p.addr, p.timeout))
        .collect();
    due.sort();
    // Port 3 has no check; port 2 is checked with two timeouts, so twice.
    assert_eq!(
        due,
        [(addr(1), ms(1000)), (addr(2), ms(300)), (addr(2), ms(1000))]
    );
    // Port 2 at 1 s timeout is shared by a (2 s) and b (0.5 s): due every 0.5 s.
    let again: Vec<(SocketAddr, Duration)> = rounds
        .due(1, || &pools, t0 + ms(500))
        .iter()
        .map(|p| (p.addr, p.timeout))
        .collect();
    assert_eq!(again, [(addr(2), ms(1000))]);
    assert!(rounds.due(1, || &pools, t0 + ms(999)).is_empty());
    assert_eq!(rounds.due(1, || &pools, t0 + ms(1000)).len(), 1);
    assert_eq!(rounds.due(1, || &pools, t0 + ms(2000)).len(), 3);
}

#[test]
fn an_idle_tick_does_not_walk_the_pools() {
    let pools = vec![upstream("a", &[addr(1)], Some((2000, 1000)))];
    let mut rounds = HealthRounds::default();
    let t0 = Instant::now();
    let walks = std::cell::Cell::new(0);
    let walk = || {
        walks.set(walks.get() + 1);
        &pools
    };
    assert_eq!(rounds.due(7, walk, t0).len(), 1);
    for i in 1..40 {
        // Another test's pool may bump the shared epoch: that is a walk, never a probe early.
        assert!(rounds.due(7, || &pools, t0 + ms(i * 50)).is_empty());
    }
    assert_eq!(walks.get(), 1);
    assert_eq!(rounds.due(7, || &pools, t0 + ms(2000)).len(), 1);
}

#[test]
fn a_reload_keeps_the_schedule_of_unchanged_groups_and_probes_new_members_at_once() {
    let a = upstream("a", &[addr(1)], Some((2000, 1000)));
    let b = upstream("b", &[addr(2)], Some((2000, 1000)));
    let mut rounds = HealthRounds::default();
    let t0 = Instant::now();
    let before = vec![a.clone(), b.clone()];
    assert_eq!(rounds.due(1, || &before, t0).len(), 2);
    // A reload builds every pool anew: the same upstreams keep their schedule...
    let (a, b) = (
        upstream("a", &[addr(1)], Some((2000, 1000))),
        upstream("b", &[addr(2)], Some((2000, 1000))),
    );
    let rebuilt = vec![a.clone(), b.clone()];
    assert!(rounds.due(2, || &rebuilt, t0 + ms(50)).is_empty());
    // ...and one that adds c on b's address probes that address at once.
    let c = upstream("c", &[addr(2)], Some((2000, 1000)));
    let after = vec![a.clone(), b.clone(), c.clone()];
    let due = rounds.due(3, || &after, t0 + ms(100));
    assert_eq!(due.iter().map(|p| p.addr).collect::<Vec<_>>(), [addr(2)]);
    // c learns what the address answers now, not a round later.
    assert_eq!(due[0].apply(false), 2);
    assert!(!c.targets()[0].healthy());
    // A reload that drops an upstream drops its address from the rounds.
    let fewer = vec![a.clone()];
    assert!(rounds.due(4, || &fewer, t0 + ms(200)).is_empty());
    assert_eq!(rounds.groups(), 1);
    assert_eq!(
        rounds
            .due(4, || &fewer, t0 + ms(2000))
            .iter()
            .map(|p| p.addr)
            .collect::<Vec<_>>(),
        [addr(1)]
    );
}

#[test]
fn no_checked_upstream_no_probe() {
    let pools = vec![upstream("a", &[addr(1)], None)];
    let mut rounds = HealthRounds::default();
    let t0 = Instant::now();
    assert!(rounds.due(1, || &pools, t0).is_empty());
    assert!(rounds.due(1, || &pools, t0 + ms(60_000)).is_empty());
    assert_eq!(rounds.groups(), 0);
}

/// A real listener passes the check; a closed port fails it and leaves rotation; when it
/// listens again it comes back.
#[tokio::test]
async fn the_tcp_check_takes_targets_out_and_brings_them_back() {
    let open = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_addr = closed.local_addr().expect("addr");
    drop(closed);
    let open_addr = open.local_addr().expect("addr");
    // Two upstreams share the closed address: one probe takes both out.
    let pools = vec![
        upstream("a", &[open_addr, closed_addr], Some((2000, 2000))),
        upstream("b", &[closed_addr], Some((2000, 2000))),
    ];
    let mut rounds = HealthRounds::default();
    let t0 = Instant::now();
    for p in rounds.due(1, || &pools, t0) {
        p.run().await;
    }
    assert!(pools[0].targets()[0].healthy());
    assert!(!pools[0].targets()[1].healthy());
    assert!(!pools[1].targets()[0].healthy());
    for _ in 0..4 {
        assert_eq!(
            pools[0]
                .choose(&crate::pool::Choice {
                    hash: None,
                    pinned: None,
                    tried: &[]
                })
                .map(|p| p.target.addr),
            Some(open_addr)
        );
    }
    assert!(pools[1].select_peer().is_none());
    let back = std::net::TcpListener::bind(closed_addr).expect("rebind the same port");
    for p in rounds.due(1, || &pools, t0 + ms(2000)) {
        p.run().await;
    }
    assert!(pools[0].targets()[1].healthy());
    assert!(pools[1].targets()[0].healthy());
    drop(back);
}
