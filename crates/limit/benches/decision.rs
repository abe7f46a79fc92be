//! One limiter decision: uncontended, and with two threads on one key.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::sync::Arc;
use std::time::Duration;
use tollgate_limit::*;

/// Every algorithm at a rate that never refuses (the admit path is the one that writes).
fn stores() -> Vec<(&'static str, Arc<dyn LocalLimiter>)> {
    let rate = Rate::per_second(1_000_000_000).expect("rate");
    AlgorithmKind::ALL
        .iter()
        .map(|&algorithm| {
            // The log keeps one entry per unit in its window: a small window keeps it short.
            let burst = if algorithm == AlgorithmKind::SlidingLog {
                100
            } else {
                1_000_000
            };
            let spec = LimitSpec {
                algorithm,
                rate,
                burst,
                delay: burst,
                calendar: None,
            };
            (algorithm.name(), spec.local(DEFAULT_MAX_KEYS))
        })
        .collect()
}

/// The edge verdict cache: the refusal of a hot key answered from memory.
fn verdict_cache(c: &mut Criterion) {
    let clock = MonotonicClock::new();
    let cache = VerdictCache::new(100_000);
    for k in 0..10_000u64 {
        cache.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), u64::MAX, 0);
    }
    c.bench_function("verdict_cache/refused_hot_key", |b| {
        b.iter(|| {
            black_box(cache.check(
                black_box(42u64.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                clock.now(),
                1,
            ))
        })
    });
    c.bench_function("verdict_cache/miss", |b| {
        b.iter(|| black_box(cache.check(black_box(7), clock.now(), 1)))
    });
}

/// The floors a decision stands on: reading the clock, and one contended atomic update (the
/// least any shared per-key state costs when two cores write it at once).
fn floors(c: &mut Criterion) {
    let clock = MonotonicClock::new();
    c.bench_function("floor/clock_now", |b| b.iter(|| black_box(clock.now())));
    let cell = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (cell, stop) = (cell.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cell.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
        })
    };
    c.bench_function("floor/contended_atomic_2_threads", |b| {
        b.iter(|| black_box(cell.fetch_add(1, std::sync::atomic::Ordering::AcqRel)))
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = other.join();
}

fn decision(c: &mut Criterion) {
    let clock = MonotonicClock::new();
    for (name, store) in stores() {
        c.bench_function(&format!("{name}/one_key"), |b| {
            b.iter(|| black_box(store.acquire(black_box(42), clock.now(), 1)))
        });
        // 10k keys in rotation: the map lookups miss the cache like real traffic.
        let mut k = 0u64;
        c.bench_function(&format!("{name}/10k_keys"), |b| {
            b.iter(|| {
                k = (k + 1) % 10_000;
                black_box(store.acquire(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), clock.now(), 1))
            })
        });
        // Two threads on one key: this thread measures while a second hammers the same key.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = {
            let (store, stop, clock) = (store.clone(), stop.clone(), clock.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    black_box(store.acquire(42, clock.now(), 1));
                }
            })
        };
        c.bench_function(&format!("{name}/one_key_2_threads"), |b| {
            b.iter(|| black_box(store.acquire(black_box(42), clock.now(), 1)))
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = other.join();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = floors, decision, verdict_cache
}
criterion_main!(benches);
