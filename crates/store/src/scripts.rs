//! The Lua scripts (one per algorithm, from `lua/`) and their reply.
//!
//! Calling convention, shared by all (checked by `lua/prelude.lua`, prepended to each):
//! `KEYS[1]` is the limiter key; `ARGV` is count, period (µs), burst, cost, mode (`acquire` |
//! `refund`), delay (leaky bucket); then GCRA and the leaky bucket take their emission
//! interval and its tick in ns (`lua/tat.lua`), a quota its calendar, a concurrency limit the
//! calling gateway's id (mode `hold` renews its slots). The reply is
//! `{allowed, remaining, reset_us, retry_after_us, delay_us}`; an admitted `lease` adds
//! `granted, lapse_us` (units taken; when they lapse, 0 for never).

use crate::StoreError;
use tollgate_limit::{AlgorithmKind, Decision};

/// The script run for `kind`: the shared prelude (arguments, Redis time) and the algorithm.
pub fn script_source(kind: AlgorithmKind) -> &'static str {
    macro_rules! script {
        ($($name:literal),+) => {
            concat!(
                include_str!("../../../lua/prelude.lua"),
                $(include_str!(concat!("../../../lua/", $name, ".lua"))),+
            )
        };
    }
    match kind {
        AlgorithmKind::TokenBucket => script!("token_bucket"),
        AlgorithmKind::Gcra => script!("tat", "gcra"),
        AlgorithmKind::FixedWindow => script!("fixed_window"),
        AlgorithmKind::SlidingWindow => script!("sliding_window"),
        AlgorithmKind::SlidingLog => script!("sliding_log"),
        AlgorithmKind::LeakyBucket => script!("tat", "leaky_bucket"),
        AlgorithmKind::Concurrency => script!("concurrency"),
        AlgorithmKind::CountingWindow => script!("counting_window"),
        AlgorithmKind::Quota => script!("quota"),
    }
}

/// The shared block registry's script (`lua/blocks.lua`): block, lift, list.
pub const BLOCKS_SCRIPT: &str = include_str!("../../../lua/blocks.lua");

/// The registry's keys (see the script): one hash tag, one cluster slot.
pub const BLOCKS_KEYS: [&str; 4] = [
    "{tollgate:blocks}",
    "{tollgate:blocks}:seq",
    "{tollgate:blocks}:ends",
    "{tollgate:blocks}:n",
];

/// A script's answer, in the script's units (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptReply {
    pub allowed: bool,
    pub remaining: u64,
    pub reset_us: u64,
    pub retry_after_us: u64,
    pub delay_us: u64,
    /// Units an admitted lease took (up to the cost asked); 0 for any other reply.
    pub granted: u64,
    /// An admitted lease's units lapse in this many µs (0: never).
    pub lapse_us: u64,
}

impl ScriptReply {
    pub fn parse(v: &[i64]) -> Result<Self, StoreError> {
        let (allowed, remaining, reset, retry, delay, lease) = match *v {
            [a, r, s, t, d] => (a, r, s, t, d, None),
            [a, r, s, t, d, g, l] => (a, r, s, t, d, Some((g, l))),
            _ => {
                return Err(StoreError::BadReply(format!(
                    "{} values, expected 5 or 7",
                    v.len()
                )))
            }
        };
        let u = |x: i64| u64::try_from(x).unwrap_or(0);
        let (granted, lapse_us) = lease.map_or((0, 0), |(g, l)| (u(g), u(l)));
        Ok(Self {
            allowed: allowed == 1,
            remaining: u(remaining),
            reset_us: u(reset),
            retry_after_us: u(retry),
            delay_us: u(delay),
            granted,
            lapse_us,
        })
    }

    pub fn decision(&self) -> Decision {
        const US: u64 = 1_000;
        if self.allowed {
            Decision::Allow {
                remaining: self.remaining,
                reset: self.reset_us.saturating_mul(US),
                delay: self.delay_us.saturating_mul(US),
            }
        } else {
            Decision::Deny {
                retry_after: self.retry_after_us.saturating_mul(US).max(1),
            }
        }
    }
}
