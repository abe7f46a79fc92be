//! How the keyed tables (limiter states, cached refusals, leases) split their keys: a power of
//! two of shards picked by a key's top bits, each holding at most its share of the bound.

/// A table's shard layout for a bound of `max` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sharding {
    bits: u32,
    /// The most keys one shard holds.
    pub cap: usize,
}

impl Sharding {
    /// Enough shards to keep contention away, few enough that each holds a useful share.
    pub fn for_max(max: usize) -> Self {
        let max = max.max(1);
        let shards = (max / 256).clamp(1, 64).next_power_of_two().min(64);
        Self {
            bits: shards.trailing_zeros(),
            cap: max.div_ceil(shards),
        }
    }

    pub fn count(self) -> usize {
        1 << self.bits
    }

    /// The shard of `key` (its top bits: the low ones pick the slot inside the shard).
    #[inline]
    pub fn of(self, key: u64) -> usize {
        if self.bits == 0 {
            0
        } else {
            (key >> (64 - self.bits)) as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_grow_with_the_bound_up_to_64_and_split_keys_by_their_top_bits() {
        assert_eq!(Sharding::for_max(0), Sharding { bits: 0, cap: 1 });
        assert_eq!(Sharding::for_max(1000).count(), 4);
        assert_eq!(Sharding::for_max(1000).cap, 250);
        let s = Sharding::for_max(100_000_000);
        assert_eq!((s.count(), s.of(u64::MAX), s.of(1 << 58)), (64, 63, 1));
    }
}
