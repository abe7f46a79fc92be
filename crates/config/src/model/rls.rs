//! `[rls]`, `[[rls.rules]]` and `[[rls.domains]]`: Envoy's rate limit service on Tollgate's limits.

use std::net::SocketAddr;

/// At most this many entries in a rule's descriptor (envoyproxy/ratelimit's trees are a few
/// levels deep).
pub const MAX_DESCRIPTOR_ENTRIES: usize = 16;

/// Which fields an answer asks Envoy to add to the client's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlsHeaders {
    /// The IETF RateLimit fields of the descriptor nearest to exhaustion (Tollgate's own).
    Ietf,
    /// None (envoyproxy/ratelimit's default).
    None,
    /// envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED`: limit, remaining and reset
    /// under `header_names`.
    Envoy,
}

/// `[rls]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsConfig {
    /// Plaintext gRPC (h2c), or TLS with `tls`. Read at start.
    pub listen: SocketAddr,
    /// Serve the listener over TLS with `[tls]`'s certificates (and its client CA: mutual
    /// TLS when `client_auth` asks for it). Read at start.
    pub tls: bool,
    pub rules: Vec<RlsRule>,
    /// envoyproxy/ratelimit's configuration, as that service reads it (`[[rls.domains]]`).
    pub domains: Vec<RlsDomain>,
    pub response_headers: RlsHeaders,
    /// `response_headers = "envoy"`: the names of the limit, remaining and reset fields.
    pub header_names: [String; 3],
    /// envoyproxy/ratelimit's `SHADOW_MODE`: every answer's overall code is OK.
    pub shadow_mode: bool,
    /// Its global quota mode: every descriptor is a quota descriptor.
    pub quota_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`: the answer carries `dynamic_metadata`.
    pub dynamic_metadata: bool,
    /// A `[[rls.domains]]` count known past its limit is answered from memory until its
    /// window ends (no Redis call; that count stops growing), as the service's local cache
    /// (`LOCAL_CACHE_SIZE_IN_BYTES`). Off: every hit counts in Redis, as the service counts
    /// by default.
    pub local_cache: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a call whose descriptor would pass its
    /// limit counts only the descriptors that would.
    pub stop_increment_when_over: bool,
}

/// One `[[rls.rules]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsRule {
    pub domain: String,
    /// The entries a descriptor must have, in order: a key, and the value when one is named
    /// (otherwise any value, which is then part of the key).
    pub descriptor: Vec<(String, Option<String>)>,
    /// Limit names (`[limits.NAME]`), each keyed by `descriptor` or `global`; empty: the
    /// descriptor is never limited (envoyproxy/ratelimit's `unlimited`).
    pub limits: Vec<String>,
    /// Every matching descriptor is over the limit (envoyproxy/ratelimit's
    /// `requests_per_unit: 0`).
    pub deny: bool,
}

impl RlsRule {
    /// How many entries name a value: more is more specific.
    pub fn specificity(&self) -> usize {
        self.descriptor.iter().filter(|(_, v)| v.is_some()).count()
    }
}

/// envoyproxy/ratelimit's units, and the spans its windows count (from the Unix epoch: a month
/// is 30 days, a year 365).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EnvoyUnit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl EnvoyUnit {
    pub const ALL: [EnvoyUnit; 7] = [
        EnvoyUnit::Second,
        EnvoyUnit::Minute,
        EnvoyUnit::Hour,
        EnvoyUnit::Day,
        EnvoyUnit::Week,
        EnvoyUnit::Month,
        EnvoyUnit::Year,
    ];

    /// As the service reads a unit: its name in any case (`second`, `SECOND`, `ſecond`).
    pub fn parse(s: &str) -> Option<EnvoyUnit> {
        // Go's strings.ToUpper, as the service reads it (Unicode: `ſecond` is SECOND).
        let upper = s.to_uppercase();
        Self::ALL.into_iter().find(|u| u.name() == upper)
    }

    /// The proto's name (`SECOND` .. `YEAR`).
    pub fn name(self) -> &'static str {
        match self {
            EnvoyUnit::Second => "SECOND",
            EnvoyUnit::Minute => "MINUTE",
            EnvoyUnit::Hour => "HOUR",
            EnvoyUnit::Day => "DAY",
            EnvoyUnit::Week => "WEEK",
            EnvoyUnit::Month => "MONTH",
            EnvoyUnit::Year => "YEAR",
        }
    }

    /// The proto's number (`RateLimitResponse.RateLimit.Unit`: WEEK is 7, after YEAR).
    pub fn number(self) -> i32 {
        match self {
            EnvoyUnit::Second => 1,
            EnvoyUnit::Minute => 2,
            EnvoyUnit::Hour => 3,
            EnvoyUnit::Day => 4,
            EnvoyUnit::Month => 5,
            EnvoyUnit::Year => 6,
            EnvoyUnit::Week => 7,
        }
    }

    /// The unit of a proto number.
    pub fn of_number(n: i32) -> Option<EnvoyUnit> {
        Self::ALL.into_iter().find(|u| u.number() == n)
    }

    /// The service's divider: the span one window counts, in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            EnvoyUnit::Second => 1,
            EnvoyUnit::Minute => 60,
            EnvoyUnit::Hour => 3_600,
            EnvoyUnit::Day => 86_400,
            EnvoyUnit::Week => 7 * 86_400,
            EnvoyUnit::Month => 30 * 86_400,
            EnvoyUnit::Year => 365 * 86_400,
        }
    }
}

/// A node's `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyLimit {
    pub requests_per_unit: u32,
    /// `None` only with `unlimited`.
    pub unit: Option<EnvoyUnit>,
    pub unlimited: bool,
    /// `current_limit.name` (empty when none), and what `replaces` names.
    pub name: String,
    pub replaces: Vec<String>,
    /// The limit counting it (`rls:FULL_KEY`); `None` when unlimited.
    pub limit: Option<String>,
}

/// One descriptor node.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsNode {
    pub key: String,
    /// Empty: the key's default (any value); may hold `*` wildcards.
    pub value: String,
    pub rate_limit: Option<EnvoyLimit>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    /// Returned in `dynamic_metadata` for a descriptor that passed (`[rls] dynamic_metadata`).
    pub metadata: Option<serde_json::Value>,
    pub descriptors: Vec<RlsNode>,
}

impl RlsNode {
    /// The key this node is found by at its level: `KEY` or `KEY_VALUE`, as the service keys it.
    pub fn final_key(&self) -> String {
        if self.value.is_empty() {
            self.key.clone()
        } else {
            format!("{}_{}", self.key, self.value)
        }
    }
}

/// One `[[rls.domains]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsDomain {
    pub domain: String,
    pub descriptors: Vec<RlsNode>,
}
