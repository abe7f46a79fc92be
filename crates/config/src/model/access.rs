//! `[access]` and a route's `access`: who is refused at once, who skips every limit, and the tarpit.

use ipnet::IpNet;
use std::time::Duration;

/// Access lists (`[access]`, or a route's `access`, which adds to the server's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessConfig {
    /// Clients refused with 403 (IPv4 and IPv6; IPv4-mapped IPv6 clients are matched as IPv4).
    pub deny: Vec<IpNet>,
    /// Clients that skip every limit and every deny rule.
    pub allow: Vec<IpNet>,
    /// When set, clients outside these networks are refused with 403 (clients inside still
    /// meet every limit: ingress-nginx's `whitelist-source-range`).
    pub only_from: Vec<IpNet>,
    /// User-Agent globs refused with 403 (`*` any run, `?` one character; whole value, case
    /// insensitive).
    pub deny_user_agents: Vec<String>,
    /// API keys (exact, or globs such as `sk_partner_*`) that skip every limit.
    pub allow_api_keys: Vec<String>,
    /// The header carrying the API key, lower case (`None`: the server's, else `x-api-key`).
    pub api_key_header: Option<String>,
}

impl AccessConfig {
    pub fn is_empty(&self) -> bool {
        self.deny.is_empty()
            && self.allow.is_empty()
            && self.only_from.is_empty()
            && self.deny_user_agents.is_empty()
            && self.allow_api_keys.is_empty()
    }
}

/// Holding refused requests before answering them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarpitConfig {
    /// Each held request waits a random time in `min..=max`.
    pub delay_min: Duration,
    pub delay_max: Duration,
    /// Held at once per process (per tarpit); past it refusals are answered at once.
    pub max_concurrent: usize,
    /// After the hold: answer 429 (`reject`), or pass the request on (`pass`: slowed, not
    /// refused).
    pub then_pass: bool,
}

impl Default for TarpitConfig {
    fn default() -> Self {
        Self {
            delay_min: Duration::from_secs(1),
            delay_max: Duration::from_secs(3),
            max_concurrent: 256,
            then_pass: false,
        }
    }
}

/// What a limit does with a request over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// 429 at once.
    #[default]
    Reject,
    /// Held, then 429 (or passed on): see [`TarpitConfig`].
    Tarpit,
    /// 429 with `CHALLENGE_REQUIRED` and the limit's `challenge_url`.
    Challenge,
}
