//! What the libraries under the gateway may write to its log.
//!
//! - **No heads or bodies at debug.** Pingora's proxy and protocol code, h2 and hyper print
//!   request and response heads (`Authorization`, cookies, the query) and body sizes at debug
//!   and trace level. Those lines are left out whatever `TOLLGATE_LOG` says, so debug logs
//!   show no more of a request than info logs do (the request summary Pingora's error lines
//!   use is the gateway's own: method and route). `TOLLGATE_LOG_UNREDACTED=1` lets them
//!   through for a debugging session on a machine whose logs are private.
//! - **Client-caused lines are rate-limited.** Pingora writes an ERROR line per failed TLS or
//!   h2 handshake and per bad request: a scanner or a flood of bad heads becomes a log storm.
//!   Each library target may write 20 WARN/ERROR lines a second; the rest are dropped and
//!   counted in `tollgate_log_lines_suppressed_total{target}`.

use parking_lot::Mutex;
use prometheus::{IntCounterVec, Opts};
use std::collections::HashMap;
use std::sync::LazyLock;
use tracing::{Level, Metadata};

/// Library lines per target per second at WARN or ERROR.
pub const LINES_PER_SECOND: u32 = 20;

/// Targets whose debug and trace lines print heads and bodies.
const DUMPERS: [&str; 3] = ["pingora", "h2", "hyper"];

/// `tollgate_log_lines_suppressed_total{target}`: registered in every process registry.
pub static SUPPRESSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let opts = Opts::new(
        "tollgate_log_lines_suppressed_total",
        "Library log lines (WARN/ERROR) dropped because their target wrote over 20 a second: handshake failures, bad requests and the like, which clients can cause at will.",
    );
    IntCounterVec::new(opts, &["target"]).unwrap_or_else(|_| unreachable!("static metric"))
});

/// The second being counted, and the lines each target wrote in it.
static WINDOW: LazyLock<Mutex<(u64, HashMap<String, u32>)>> =
    LazyLock::new(|| Mutex::new((0, HashMap::new())));

/// The crate that wrote a line (`pingora_core::services::listening` -> `pingora_core`): the
/// label stays bounded.
fn crate_of(target: &str) -> &str {
    target.split("::").next().unwrap_or(target)
}

fn is_library(target: &str) -> bool {
    DUMPERS.iter().any(|d| target.starts_with(d))
}

/// Whether a line may be written. `unredacted`: library debug lines are let through.
pub fn allows(meta: &Metadata<'_>, unredacted: bool, now_secs: u64) -> bool {
    let target = meta.target();
    if !is_library(target) {
        return true;
    }
    let level = *meta.level();
    if level > Level::INFO {
        return unredacted;
    }
    if level > Level::WARN || !meta.is_event() {
        return true;
    }
    let krate = crate_of(target);
    let mut w = WINDOW.lock();
    if w.0 != now_secs {
        *w = (now_secs, HashMap::new());
    }
    let n = match w.1.get_mut(krate) {
        Some(n) => n,
        None => w.1.entry(krate.to_string()).or_insert(0),
    };
    *n += 1;
    if *n <= LINES_PER_SECOND {
        return true;
    }
    drop(w);
    SUPPRESSED.with_label_values(&[krate]).inc();
    false
}

/// The filter the binary puts on its log layer (with `TOLLGATE_LOG`'s): library debug lines
/// never enabled at their call sites (free on the hot path, as any line below the level),
/// library WARN/ERROR lines asked per event ([`allows`]), everything else left to the level.
pub struct Guard {
    pub unredacted: bool,
}

impl<S> tracing_subscriber::layer::Filter<S> for Guard {
    fn enabled(&self, meta: &Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        // Lines bridged from the `log` crate (Pingora's) share call sites per level: they
        // are judged here, per line, by their own target.
        if !is_library(meta.target()) || *meta.level() == Level::INFO {
            return true;
        }
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        allows(meta, self.unredacted, secs)
    }

    /// No hint of its own (it never enables more than the level does), so that combined with
    /// the level's filter the level's hint stands: the `log` crate's maximum level follows it,
    /// and Pingora's `debug!` costs one comparison, as before.
    fn max_level_hint(&self) -> Option<tracing_subscriber::filter::LevelFilter> {
        Some(tracing_subscriber::filter::LevelFilter::TRACE)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        use tracing::subscriber::Interest;
        let level = *meta.level();
        if !is_library(meta.target()) || level == Level::INFO {
            Interest::always()
        } else if level > Level::INFO {
            if self.unredacted {
                Interest::always()
            } else {
                Interest::never()
            }
        } else {
            // WARN and ERROR: counted per event.
            Interest::sometimes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::callsite::Identifier;
    use tracing::metadata::Kind;

    struct Site;
    impl tracing::callsite::Callsite for Site {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!()
        }
    }
    static SITE: Site = Site;

    fn meta(target: &'static str, level: Level) -> Metadata<'static> {
        Metadata::new(
            "event",
            target,
            level,
            None,
            None,
            None,
            tracing::field::FieldSet::new(&[], Identifier(&SITE)),
            Kind::EVENT,
        )
    }

    #[test]
    fn library_debug_call_sites_are_off_and_cost_nothing() {
        use tracing::subscriber::Interest;
        use tracing_subscriber::layer::Filter;
        let interest = |g: &Guard, target: &'static str, level| {
            let m: &'static Metadata<'static> = Box::leak(Box::new(meta(target, level)));
            let i = <Guard as Filter<tracing_subscriber::Registry>>::callsite_enabled(g, m);
            (i.is_never(), i.is_sometimes(), i.is_always())
        };
        let g = Guard { unredacted: false };
        let (never, sometimes, always) = (
            (true, false, false),
            (false, true, false),
            (false, false, true),
        );
        assert_eq!(interest(&g, "h2::proto", Level::DEBUG), never);
        assert_eq!(interest(&g, "pingora_core::x", Level::ERROR), sometimes);
        assert_eq!(interest(&g, "pingora_core::x", Level::INFO), always);
        assert_eq!(
            interest(&g, "tollgate_proxy::service", Level::DEBUG),
            always
        );
        let open = Guard { unredacted: true };
        assert_eq!(interest(&open, "h2::proto", Level::DEBUG), always);
        let _: Interest = Interest::always();
    }

    #[test]
    fn library_dumps_are_left_out_and_storms_are_cut() {
        let dump = meta("pingora_proxy::proxy_h1", Level::DEBUG);
        assert!(!allows(&dump, false, 1));
        assert!(allows(&dump, true, 1), "unless asked for");
        assert!(!allows(&meta("h2::codec", Level::TRACE), false, 1));
        assert!(allows(
            &meta("tollgate_proxy::policy", Level::DEBUG),
            false,
            1
        ));
        // A storm of handshake errors: 20 a second get through, the rest are counted.
        let storm = meta("pingora_core::services::listening", Level::ERROR);
        let before = SUPPRESSED.with_label_values(&["pingora_core"]).get();
        let passed = (0..500).filter(|_| allows(&storm, false, 7)).count();
        assert_eq!(passed, LINES_PER_SECOND as usize);
        assert_eq!(
            SUPPRESSED.with_label_values(&["pingora_core"]).get() - before,
            480
        );
        // The next second starts afresh; the gateway's own lines are never cut.
        assert!(allows(&storm, false, 8));
        let own = meta("tollgate_proxy::service", Level::ERROR);
        assert!((0..500).all(|_| allows(&own, false, 8)));
    }
}
