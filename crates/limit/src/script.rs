//! What a Redis script can compute exactly. Lua numbers are IEEE doubles: integers are exact
//! up to 2^53 - 1 and no further, so a global limit's counts, and its times in the script's
//! unit, must stay within that, or the script would round (or reject) on every call. `check`
//! refuses such a limit up front; `step` tells a GCRA or leaky bucket script the unit that
//! keeps it exact, so a global limit admits what the local one admits at any rate.

use crate::algorithm::AlgorithmKind;
use crate::decision::Rate;

/// The largest integer a Lua number holds exactly.
pub const SCRIPT_EXACT_MAX: u64 = (1 << 53) - 1;

/// The longest time a global limit may look ahead, in microseconds: added to Redis's clock,
/// it stays below 2^53 until the year 2115.
const HORIZON_MAX_US: u64 = 1 << 52;

/// The emission interval of a global GCRA or leaky bucket, in ticks of `tick_ns`: the same
/// interval as the local limiter's (`period / count` rounded up to whole nanoseconds) counted
/// in nanoseconds when `burst × interval` fits in a double, else in whole microseconds (then
/// the interval is at least ~9 ms, and rounding it up to a microsecond is below 0.011 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptStep {
    pub interval: u64,
    /// 1 (nanoseconds) or 1000 (microseconds).
    pub tick_ns: u64,
}

/// The step for `rate` and `burst` (see [`ScriptStep`]).
pub fn step(rate: Rate, burst: u64) -> ScriptStep {
    let t_ns = rate.time_for(1).max(1);
    if t_ns as u128 * burst.max(1) as u128 <= SCRIPT_EXACT_MAX as u128 {
        ScriptStep {
            interval: t_ns,
            tick_ns: 1,
        }
    } else {
        ScriptStep {
            interval: t_ns.div_ceil(1_000),
            tick_ns: 1_000,
        }
    }
}

/// Why a global limit of `algorithm`, `rate` and `burst` (a quota's count for a quota) cannot
/// be decided exactly by its Redis script, if it cannot: names the number and the bound.
pub fn check(algorithm: AlgorithmKind, rate: Rate, burst: u64) -> Result<(), String> {
    const BOUND: &str =
        "2^53 - 1 (9007199254740991), the largest integer a Redis script holds exactly";
    if rate.count() > SCRIPT_EXACT_MAX {
        return Err(format!("the count {} is above {BOUND}", rate.count()));
    }
    if burst > SCRIPT_EXACT_MAX {
        return Err(format!("{burst} is above {BOUND}"));
    }
    if algorithm.caps().calendar {
        // Counted per calendar period, which the script computes from the date.
        return Ok(());
    }
    // The time the rate takes to accrue `burst`: every script's window, refill or TAT horizon,
    // and the longest reset or retry it answers, in microseconds. Scripts add it to Redis's
    // clock (~2^50.6 us since 1970), so it must stay within 2^52 for the sum to stay exact.
    let mut fill_us =
        (burst as u128 * rate.period_ns() as u128).div_ceil(rate.count() as u128 * 1_000);
    if algorithm.caps().stepped {
        let s = step(rate, burst);
        fill_us = fill_us.max((s.interval * s.tick_ns) as u128 * burst as u128 / 1_000);
    }
    if fill_us > HORIZON_MAX_US as u128 {
        return Err(format!(
            "burst / rate spans {} years, over the ~142 years (2^52 microseconds) a Redis script counts exactly: use a shorter period or a smaller burst",
            fill_us / 31_557_600_000_000
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rate(n: u64, secs: u64) -> Rate {
        Rate::new(n, Duration::from_secs(secs)).expect("rate")
    }

    #[test]
    fn the_step_is_the_local_interval_in_nanoseconds_while_it_fits() {
        // 750,000/s: 1,333.33 ns, rounded up as the local GCRA does; in whole microseconds it
        // would be 2 (500,000/s, -33 %).
        assert_eq!(
            step(rate(750_000, 1), 1_000),
            ScriptStep {
                interval: 1_334,
                tick_ns: 1
            }
        );
        assert_eq!(step(rate(100, 1), 100).interval, 10_000_000);
        // 7/day with a burst of 1,000: burst x interval is ~1.2e16 ns, past 2^53; in
        // microseconds, rounded up by less than one part in 10^10.
        let s = step(rate(7, 86_400), 1_000);
        assert_eq!(s.tick_ns, 1_000);
        assert_eq!(s.interval, 12_342_857_143);
    }

    #[test]
    fn numbers_a_script_cannot_hold_are_refused_with_their_bound() {
        use AlgorithmKind::*;
        let max = SCRIPT_EXACT_MAX;
        assert!(check(Gcra, rate(max, 1), 1).is_ok());
        let e = check(TokenBucket, rate(max + 1, 1), 1).expect_err("count");
        assert!(e.contains("9007199254740991"), "{e}");
        assert!(check(FixedWindow, rate(1, 1), max + 1).is_err());
        assert!(check(Quota, rate(max + 1, 86_400), max + 1).is_err());
        assert!(check(Quota, rate(max, 86_400), max).is_ok());
        // 1/day with a burst of 10^9: 2.7 million years of microseconds.
        let e = check(SlidingWindow, rate(1, 86_400), 1_000_000_000).expect_err("window");
        assert!(e.contains("2737850 years"), "{e}");
        // Just inside and outside 2^52 us (52,125 days) for a 1/day rate.
        assert!(check(FixedWindow, rate(1, 86_400), 52_000).is_ok());
        assert!(check(Gcra, rate(1, 86_400), 52_000).is_ok());
        assert!(check(LeakyBucket, rate(1, 86_400), 53_000).is_err());
        assert!(check(TokenBucket, rate(1, 86_400), 53_000).is_err());
    }

    proptest::proptest! {
        /// Whatever the rate and burst, an accepted limit's horizon fits a double in the unit
        /// its script counts in, and the step never admits more than the local interval.
        #[test]
        fn an_accepted_limit_fits_its_script(
            n in 1u64..=SCRIPT_EXACT_MAX,
            secs in proptest::sample::select(vec![1u64, 60, 3_600, 86_400]),
            burst in 1u64..=1_000_000_000,
        ) {
            let r = rate(n, secs);
            if check(AlgorithmKind::Gcra, r, burst).is_ok() {
                let s = step(r, burst);
                // The horizon in ticks, and added to the clock of 2115 in microseconds.
                proptest::prop_assert!(s.interval as u128 * burst as u128 <= SCRIPT_EXACT_MAX as u128);
                let horizon_us = s.interval as u128 * s.tick_ns as u128 * burst as u128 / 1_000;
                proptest::prop_assert!(horizon_us + 4_500_000_000_000_000 <= SCRIPT_EXACT_MAX as u128);
                proptest::prop_assert!(s.interval * s.tick_ns >= r.time_for(1).max(1));
            }
        }
    }
}
