//! What the TLS listeners serve: the certificates and client verification, loaded at start,
//! looked at twice a second and renewed in place; `tollgate_tls_*` metrics.

use super::certs::{date, load, sources, CertSet, Loaded, Resolver};
use super::client_auth::{client_verifier, ClientVerifier, Verifier};
use super::provider;
use super::resumption::{Resumption, Sessions, Tickets};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use rustls::ServerConfig;
use std::path::Path;
use std::sync::Arc;
use tollgate_config::model::{CertFiles, TlsConfig, TlsVersion};

/// Loads every certificate `cfg` names as start would, and says what is wrong (check, and a
/// config reload before it changes anything).
pub fn check(cfg: &TlsConfig) -> Result<(), Vec<String>> {
    let metrics =
        TlsMetrics::register(&Registry::new()).map_err(|e| vec![format!("metrics: {e}")])?;
    Certificates::load(cfg, metrics).map(|_| ())
}

/// `tollgate_tls_*` metrics.
#[derive(Clone)]
pub struct TlsMetrics {
    /// notAfter of each certificate served, Unix seconds, by its first name.
    pub expiry: IntGaugeVec,
    /// Certificate loads after start: `ok`, or `error` (the old one kept serving).
    pub reloads: IntCounterVec,
    /// Certificates being served.
    pub served: prometheus::IntGauge,
}

impl TlsMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let expiry = IntGaugeVec::new(
            Opts::new(
                "tollgate_tls_certificate_expiry_seconds",
                "When each certificate served expires (notAfter), Unix seconds, by its first name",
            ),
            &["name"],
        )?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "tollgate_tls_certificate_reloads_total",
                "Certificates loaded after start (renewals), by result; on error the old certificate keeps serving",
            ),
            &["result"],
        )?;
        let served = prometheus::IntGauge::new(
            "tollgate_tls_certificates_served",
            "Certificates the TLS listeners are serving",
        )?;
        registry.register(Box::new(expiry.clone()))?;
        registry.register(Box::new(reloads.clone()))?;
        registry.register(Box::new(served.clone()))?;
        // Exported at 0 from the start, so increase() sees the first refusal.
        for r in ["ok", "error"] {
            reloads.with_label_values(&[r]);
        }
        Ok(TlsMetrics {
            expiry,
            reloads,
            served,
        })
    }
}

/// A certificate source as last looked at.
struct Entry {
    files: CertFiles,
    stamp: u64,
    loaded: Option<Loaded>,
}

struct Watch {
    cfg: TlsConfig,
    entries: Vec<Entry>,
    /// The client CA file as last loaded.
    ca_stamp: u64,
    /// What all sources looked like at the last load, and a change seen once (loaded when the
    /// next look sees it unchanged).
    seen: u64,
    pending: Option<u64>,
}

/// The certificates and client verification of the TLS listeners, renewed in place.
pub struct Certificates {
    set: Arc<ArcSwap<CertSet>>,
    verifier: Arc<ArcSwap<Verifier>>,
    resumption: Arc<Resumption>,
    min_version: TlsVersion,
    metrics: TlsMetrics,
    watch: Mutex<Watch>,
}

/// What files look like (device, inode, size, modification and status-change times, symlinks
/// followed), or their absence, as one number. A Kubernetes ConfigMap or Secret update swaps a
/// symlink (a new inode) and an editor's write or rename changes the status-change time (which
/// no tool can set back), so no update goes unseen; a stat of a few files twice a second costs
/// nothing, whatever their size. (A watcher crate such as notify misses the ConfigMap swap when
/// it watches the file rather than its directory.) A file held in memory (a Secret the
/// controller read, [`tollgate_config::mounted`]) counts by its content. The config watcher
/// uses it too.
pub fn stamp(paths: &[&Path]) -> u64 {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in paths {
        p.hash(&mut h);
        if let Some(held) = tollgate_config::mounted::stamp(p) {
            held.hash(&mut h);
            continue;
        }
        match std::fs::metadata(p) {
            Ok(m) => (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
                .hash(&mut h),
            Err(e) => e.kind().hash(&mut h),
        }
    }
    h.finish()
}

fn entry_stamp(f: &CertFiles) -> u64 {
    stamp(&[&f.cert, &f.key])
}

fn look(cfg: &TlsConfig) -> (Vec<CertFiles>, u64) {
    use std::hash::{Hash, Hasher};
    let sources = sources(cfg);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for s in &sources {
        entry_stamp(s).hash(&mut h);
    }
    cfg.client_ca.as_deref().map(|ca| stamp(&[ca])).hash(&mut h);
    (sources, h.finish())
}

impl Certificates {
    /// Loads every certificate `cfg` names: all of them must be good (check and start).
    pub fn load(cfg: &TlsConfig, metrics: TlsMetrics) -> Result<Self, Vec<String>> {
        let (sources, seen) = look(cfg);
        let mut errors = Vec::new();
        let mut entries = Vec::new();
        for files in sources {
            let stamp = entry_stamp(&files);
            match load(&files) {
                Ok(l) => entries.push(Entry {
                    files,
                    stamp,
                    loaded: Some(l),
                }),
                Err(e) => errors.push(format!("{}: {e}", files.key_path)),
            }
        }
        if entries.is_empty() && errors.is_empty() {
            let dirs: Vec<String> = cfg
                .certificate_dirs
                .iter()
                .map(|(d, _)| d.display().to_string())
                .collect();
            errors.push(format!(
                "tls: no certificate found (certificate_dirs: no subfolder of {} holds tls.crt and tls.key)",
                dirs.join(", ")
            ));
        }
        let verifier = match client_verifier(cfg) {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(format!("tls.client_ca: {e}"));
                None
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        let verifier = verifier.unwrap_or(Verifier {
            inner: None,
            mandatory: false,
        });
        let resumption =
            Resumption::new().map_err(|e| vec![format!("tls: session tickets: {e}")])?;
        let certs = Certificates {
            set: Arc::new(ArcSwap::from_pointee(CertSet::default())),
            verifier: Arc::new(ArcSwap::from_pointee(verifier)),
            resumption: Arc::new(resumption),
            min_version: cfg.min_version,
            metrics,
            watch: Mutex::new(Watch {
                cfg: cfg.clone(),
                entries,
                ca_stamp: cfg.client_ca.as_deref().map_or(0, |ca| stamp(&[ca])),
                seen,
                pending: None,
            }),
        };
        certs.publish(&certs.watch.lock());
        Ok(certs)
    }

    /// The rustls configuration of every TLS listener: the versions allowed, the resolver and
    /// verifier above, ALPN h2 then http/1.1, and resumption (tickets for TLS 1.3, a session
    /// cache for TLS 1.2), both made anew when the client verifier changes.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, String> {
        let versions: &[&'static rustls::SupportedProtocolVersion] = match self.min_version {
            TlsVersion::V12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::V13 => &[&rustls::version::TLS13],
        };
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(Arc::new(ClientVerifier(self.verifier.clone())))
            .with_cert_resolver(Arc::new(Resolver(self.set.clone())));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.ticketer = Arc::new(Tickets(self.resumption.clone()));
        config.session_storage = Arc::new(Sessions(self.resumption.clone()));
        Ok(Arc::new(config))
    }

    /// Serves the entries' certificates and sets the expiry gauges. Never nothing: when every
    /// source is gone or broken, the certificates being served stay (an error, counted).
    fn publish(&self, w: &Watch) {
        let loaded: Vec<Loaded> = w.entries.iter().filter_map(|e| e.loaded.clone()).collect();
        if loaded.is_empty() && !self.set.load().is_empty() {
            self.metrics.reloads.with_label_values(&["error"]).inc();
            tracing::error!(
                event = "certificates_gone",
                "no certificate left to serve (folders empty or every file broken): the ones served so far stay"
            );
            return;
        }
        self.metrics.served.set(loaded.len() as i64);
        self.metrics.expiry.reset();
        for l in &loaded {
            let g = self
                .metrics
                .expiry
                .with_label_values(&[l.names[0].as_str()]);
            // Two certificates for one name (ECDSA and RSA): the one that expires first.
            if g.get() == 0 || l.not_after < g.get() {
                g.set(l.not_after);
            }
        }
        self.set
            .store(Arc::new(CertSet::new(loaded, w.cfg.unknown_sni)));
    }

    /// A config reload: the new `[tls]` (certificates, folders, client CA, unknown_sni) is
    /// looked at now. `min_version` changes only on restart.
    pub fn reconfigure(&self, cfg: &TlsConfig) {
        let mut w = self.watch.lock();
        if w.cfg == *cfg {
            return;
        }
        w.cfg = cfg.clone();
        w.ca_stamp = u64::MAX;
        self.refresh(&mut w, true);
    }

    /// One look (twice a second): loads what changed and then stayed the same for a look. Files
    /// held in memory (the controller's Secrets) are swapped whole, never half-written: a change
    /// of theirs alone is loaded at once.
    pub fn watch(&self) {
        let mut w = self.watch.lock();
        let (sources, now) = look(&w.cfg);
        if now == w.seen {
            w.pending = None;
            return;
        }
        let held = |p: &Path| tollgate_config::mounted::stamp(p).is_some();
        let all_held = sources.iter().all(|f| held(&f.cert) && held(&f.key))
            && w.cfg.client_ca.as_deref().is_none_or(held);
        if w.pending != Some(now) && !all_held {
            w.pending = Some(now);
            return;
        }
        self.refresh(&mut w, false);
    }

    fn refresh(&self, w: &mut Watch, reconfigured: bool) {
        let (sources, seen) = look(&w.cfg);
        w.seen = seen;
        w.pending = None;
        let mut old: Vec<Entry> = std::mem::take(&mut w.entries);
        for files in sources {
            let stamp = entry_stamp(&files);
            let before = old
                .iter()
                .position(|e| e.files.cert == files.cert && e.files.key == files.key)
                .map(|i| old.swap_remove(i));
            match before {
                Some(e) if e.stamp == stamp && e.loaded.is_some() => w.entries.push(e),
                before => match load(&files) {
                    Ok(l) => {
                        self.metrics.reloads.with_label_values(&["ok"]).inc();
                        tracing::info!(
                            event = "certificate_loaded",
                            cert = %files.cert.display(),
                            names = ?l.names,
                            not_after = %date(l.not_after),
                            "certificate loaded: new handshakes use it"
                        );
                        w.entries.push(Entry {
                            files,
                            stamp,
                            loaded: Some(l),
                        });
                    }
                    Err(why) => {
                        self.metrics.reloads.with_label_values(&["error"]).inc();
                        let kept = before.as_ref().is_some_and(|e| e.loaded.is_some());
                        tracing::error!(
                            event = "certificate_rejected",
                            key = %files.key_path,
                            error = %why,
                            kept_old = kept,
                            "certificate refused; {}",
                            if kept { "the old one keeps serving" } else { "not served" }
                        );
                        // Tried once per change: the old certificate (if any) stays, marked
                        // with the new stamp so the broken files are not read again.
                        w.entries.push(Entry {
                            files,
                            stamp,
                            loaded: before.and_then(|e| e.loaded),
                        });
                    }
                },
            }
        }
        for gone in old {
            tracing::warn!(
                event = "certificate_removed",
                cert = %gone.files.cert.display(),
                "certificate no longer configured or its files are gone: not served"
            );
        }
        let ca_now = w.cfg.client_ca.as_deref().map_or(0, |ca| stamp(&[ca]));
        if ca_now != w.ca_stamp || reconfigured {
            match client_verifier(&w.cfg) {
                Ok(v) => {
                    self.verifier.store(Arc::new(v));
                    // A session made under the old verifier must not skip the new one.
                    self.resumption.renew();
                    w.ca_stamp = ca_now;
                    tracing::info!(event = "client_ca_loaded", "client certificate settings in force; earlier TLS sessions no longer resume");
                }
                Err(e) => {
                    self.metrics.reloads.with_label_values(&["error"]).inc();
                    w.ca_stamp = ca_now;
                    // Whatever was meant (a revocation, most likely), sessions made so far stop
                    // resuming: a full handshake meets the verifier in force.
                    self.resumption.renew();
                    tracing::error!(event = "client_ca_rejected", error = %e, "client CA refused; the old one stays in force");
                }
            }
        }
        self.publish(w);
    }
}
