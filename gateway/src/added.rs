//! Listeners a Gateway adds while the gateway runs (its listeners' ports, `run
//! --kubernetes`): bound and served by Pingora's own accept loop (vendor/patches/0018), with
//! the config's listeners' connection bounds, handshake deadline, TLS certificates and
//! passthrough front. A port no Gateway names any more stops accepting (its connections go
//! on until they end); a port the config's own listeners hold is theirs.

use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig, Listeners};
use pingora::proxy::HttpProxy;
use pingora::server::ShutdownWatch;
use pingora::services::listening::Service;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate_proxy::gateway::Gateway;
use tollgate_proxy::shared::Shared;

/// One listener: its port, and whether it speaks TLS.
pub type Wanted = (u16, bool);

pub struct Added {
    app: Arc<HttpProxy<Gateway>>,
    shared: Arc<Shared>,
    /// The host of the config's first `[server] listen`.
    host: IpAddr,
    header_timeout: Duration,
    /// The ports the config's own listeners hold.
    fixed: BTreeSet<u16>,
    serving: Mutex<BTreeMap<Wanted, tokio::task::JoinHandle<()>>>,
}

impl Added {
    pub fn new(
        app: HttpProxy<Gateway>,
        shared: Arc<Shared>,
        server: &tollgate_config::model::ServerConfig,
    ) -> Self {
        let host = server
            .listen
            .first()
            .map_or(IpAddr::from([0, 0, 0, 0]), SocketAddr::ip);
        Added {
            app: Arc::new(app),
            shared,
            host,
            header_timeout: server.hardening.header_timeout,
            fixed: server
                .listen
                .iter()
                .chain(&server.tls_listen)
                .map(SocketAddr::port)
                .collect(),
            serving: Mutex::new(BTreeMap::new()),
        }
    }

    /// Serves `want` (a port both plain and TLS: the first asked wins, the other is a
    /// problem): binds the new ones, stops the ones gone. Returns what could not be served.
    pub async fn set(&self, want: &[Wanted], shutdown: &ShutdownWatch) -> Vec<String> {
        let mut problems = Vec::new();
        let mut keep: BTreeMap<u16, bool> = BTreeMap::new();
        for &(port, tls) in want {
            if self.fixed.contains(&port) {
                continue;
            }
            match keep.get(&port) {
                Some(&t) if t != tls => problems.push(format!(
                    "port {port}: asked for both HTTP and HTTPS; served as {}",
                    if t { "HTTPS" } else { "HTTP" }
                )),
                _ => {
                    keep.insert(port, tls);
                }
            }
        }
        let starting: Vec<Wanted> = {
            let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
            serving.retain(|&(port, tls), task| {
                let wanted = keep.get(&port) == Some(&tls);
                if !wanted {
                    task.abort();
                    tracing::info!(
                        event = "listener_removed",
                        port,
                        tls,
                        "no Gateway listens here any more"
                    );
                }
                wanted
            });
            keep.into_iter()
                .filter(|w| !serving.contains_key(w))
                .collect()
        };
        for (port, tls) in starting {
            match self.start(port, tls, shutdown).await {
                Ok(task) => {
                    tracing::info!(
                        event = "listener_added",
                        port,
                        tls,
                        "serving a Gateway's listener"
                    );
                    self.serving
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((port, tls), task);
                }
                Err(e) => problems.push(format!("port {port}: {e}")),
            }
        }
        problems
    }

    async fn start(
        &self,
        port: u16,
        tls: bool,
        shutdown: &ShutdownWatch,
    ) -> Result<tokio::task::JoinHandle<()>, String> {
        let addr = SocketAddr::new(self.host, port).to_string();
        let mut cfg = ListenerConfig::tcp(addr.clone()).l4_buffer(L4BufferSettings::new(
            crate::L4_READ_BUFFER,
            pingora::listeners::DEFAULT_L4_WRITE_BUFFER_SIZE,
        ));
        let mut listeners = Listeners::new();
        if tls {
            let certs = self.shared.tls.as_ref().ok_or(
                "HTTPS needs TLS in BASE.toml (server.tls_listen: the default certificate and the TLS runtime start with it)",
            )?;
            let server_config = certs.server_config()?;
            let mut settings = TlsSettings::from_server_config(server_config);
            settings.set_callbacks(Box::new(tollgate_core::tls::client_cert::KeepClientCert));
            cfg = cfg.tls(settings).handshake_timeout(self.header_timeout);
            listeners.set_pre_tls_callback(Arc::new(tollgate_proxy::passthrough::Front::new(
                self.shared.clone(),
            )));
        }
        listeners.add_listener(cfg);
        let endpoints = Service::<HttpProxy<Gateway>>::bind_added(listeners)
            .await
            .map_err(|e| format!("{addr}: cannot listen: {e}"))?;
        let admission: Arc<dyn pingora::services::listening::ConnectionAdmission> =
            Arc::new(tollgate_proxy::shared::Admission::new(self.shared.clone()));
        Ok(tokio::spawn(Service::serve_added(
            self.app.clone(),
            endpoints,
            shutdown.clone(),
            Some(admission),
        )))
    }
}
