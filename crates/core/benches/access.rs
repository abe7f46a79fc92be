//! Access-list matching: one lookup against 10, 10k and 100k CIDRs (IPv4 and IPv6 mixed), for
//! an address inside a listed range and one outside every range; and a whole access check
//! (addresses, User-Agent globs, API-key globs) as a request meets it.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tollgate_config::model::AccessConfig;
use tollgate_core::filters::access::{AccessRt, IpSet};

/// `n` random CIDRs, 3 in 4 IPv4 (/16 to /32) and 1 in 4 IPv6 (/32 to /64), fixed seed.
fn cidrs(n: usize) -> Vec<IpNet> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..n)
        .map(|_| {
            if rng.u8(0..4) < 3 {
                let ip = Ipv4Addr::from(rng.u32(..));
                IpNet::new(IpAddr::V4(ip), rng.u8(16..=32))
                    .expect("prefix")
                    .trunc()
            } else {
                let ip = Ipv6Addr::from(rng.u128(..));
                IpNet::new(IpAddr::V6(ip), rng.u8(32..=64))
                    .expect("prefix")
                    .trunc()
            }
        })
        .collect()
}

fn lookups(c: &mut Criterion) {
    let mut g = c.benchmark_group("ipset_contains");
    for n in [10usize, 10_000, 100_000] {
        let nets = cidrs(n);
        let set = IpSet::new(&nets);
        // Inside: the first address of a listed range; outside: an address no range holds.
        let inside = match nets[n / 2] {
            IpNet::V4(v4) => IpAddr::V4(v4.network()),
            IpNet::V6(v6) => IpAddr::V6(v6.network()),
        };
        let mut outside = IpAddr::V4(Ipv4Addr::new(0, 0, 0, 1));
        let mut rng = fastrand::Rng::with_seed(11);
        while set.contains(outside) {
            outside = IpAddr::V4(Ipv4Addr::from(rng.u32(..)));
        }
        assert!(set.contains(inside));
        g.bench_with_input(BenchmarkId::new("hit", n), &inside, |b, ip| {
            b.iter(|| set.contains(black_box(*ip)))
        });
        g.bench_with_input(BenchmarkId::new("miss", n), &outside, |b, ip| {
            b.iter(|| set.contains(black_box(*ip)))
        });
    }
    g.finish();
}

fn whole_check(c: &mut Criterion) {
    let server = AccessConfig {
        deny: cidrs(100_000),
        allow: vec!["203.0.113.50/32".parse().expect("net")],
        deny_user_agents: vec!["BadBot/1.0".into(), "Scraper*".into(), "*curl*".into()],
        allow_api_keys: vec!["sk_partner_*".into()],
        api_key_header: None,
        only_from: Vec::new(),
    };
    let rt = AccessRt::build(&server, None).expect("lists");
    let mut h = http::HeaderMap::new();
    h.insert(
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0"
            .parse()
            .expect("ua"),
    );
    h.insert("x-api-key", "sk_live_0123456789".parse().expect("key"));
    let mut rng = fastrand::Rng::with_seed(3);
    let mut client = IpAddr::V4(Ipv4Addr::from(rng.u32(..)));
    while rt.check(client, &h) != tollgate_core::filters::access::Access::Unlisted {
        client = IpAddr::V4(Ipv4Addr::from(rng.u32(..)));
    }
    c.bench_function("access_check_100k_cidrs_3_ua_globs_1_key_glob", |b| {
        b.iter(|| rt.check(black_box(client), black_box(&h)))
    });
    // The same without User-Agent and key lists: what the address lists alone cost.
    let ips_only = AccessConfig {
        deny_user_agents: Vec::new(),
        allow_api_keys: Vec::new(),
        ..server
    };
    let rt = AccessRt::build(&ips_only, None).expect("lists");
    c.bench_function("access_check_100k_cidrs_only", |b| {
        b.iter(|| rt.check(black_box(client), black_box(&h)))
    });
}

criterion_group!(benches, lookups, whole_check);
criterion_main!(benches);
