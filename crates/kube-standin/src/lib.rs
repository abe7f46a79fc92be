//! A Kubernetes API server stand-in for tests, since no kube-apiserver installs here.
//!
//! It serves what a controller and kubectl meet: discovery (`/version`, `/api`, `/apis`,
//! each group version's resources), and for every kind in [`kinds::KINDS`] list (with
//! `limit`/`continue` and label and field selectors), watch (from a resourceVersion, with
//! `BOOKMARK` events, `sendInitialEvents`, `timeoutSeconds`; a resourceVersion older than
//! the history answers 200 and then an `ERROR` event with code 410, as the real server
//! does), get, create (409 AlreadyExists; `generateName`), replace (409 Conflict on a stale
//! resourceVersion), patch (merge, JSON, strategic, apply), delete (with preconditions) and
//! the status subresource (the object's write keeps `.status`; `/status` writes only it).
//! One resourceVersion counter orders every change, as etcd's revision does.
//!
//! Hooks for tests, under `/standin/` (and as methods): `compact` (older resourceVersions
//! expire), `expire-watches` (open watches get 410), `drop-watches`, `outage?ms=N` (the
//! listener closes and comes back on the same port), `log` (every request seen).
//! kubectl and python3-kubernetes, clients written against the real server, are run against
//! it in `tests/fidelity.rs`: what they send it understands, and what it answers they accept.

pub mod kinds;
pub mod patch;
pub mod select;
pub mod server;
pub mod store;

use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use server::{Control, State};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

pub use store::Store;

/// A running stand-in on a loopback port.
pub struct StandIn {
    state: Arc<State>,
    serving: Arc<Mutex<Option<JoinHandle<()>>>>,
    outages: Option<JoinHandle<()>>,
}

/// Accepts connections until aborted; each connection's task is aborted with it.
async fn serve(listener: TcpListener, state: Arc<State>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let st = state.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| server::handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

impl StandIn {
    /// Listens on `addr` (port 0: any free port). Bookmarks go out every `bookmark_every` on
    /// watches that allow them (the API server's interval is about a minute).
    pub async fn start(addr: SocketAddr, bookmark_every: Duration) -> std::io::Result<StandIn> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (outage, mut outages) = mpsc::unbounded_channel::<Duration>();
        let state = Arc::new(State {
            store: Mutex::new(Store::new()),
            control: broadcast::channel(16).0,
            log: Mutex::new(Vec::new()),
            bookmark_every,
            addr,
            outage,
        });
        let serving = Arc::new(Mutex::new(Some(tokio::spawn(serve(
            listener,
            state.clone(),
        )))));
        let (st, sv) = (state.clone(), serving.clone());
        let outages = tokio::spawn(async move {
            while let Some(d) = outages.recv().await {
                Self::go_away(&st, &sv, d).await;
            }
        });
        Ok(StandIn {
            state,
            serving,
            outages: Some(outages),
        })
    }

    async fn go_away(state: &Arc<State>, serving: &Mutex<Option<JoinHandle<()>>>, d: Duration) {
        if let Some(h) = serving.lock().take() {
            h.abort();
        }
        let _ = state.control.send(Control::Drop);
        tokio::time::sleep(d).await;
        // The same port again (SO_REUSEADDR); retried while the old socket lingers.
        for _ in 0..100 {
            if let Ok(l) = TcpListener::bind(state.addr).await {
                *serving.lock() = Some(tokio::spawn(serve(l, state.clone())));
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.state.addr)
    }

    /// A kubeconfig that points kubectl, kube-rs and the Python client here.
    pub fn kubeconfig(&self) -> String {
        kubeconfig(&self.url())
    }

    /// Runs `f` on the objects (a test's direct write, without HTTP).
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        f(&mut self.state.store.lock())
    }

    /// Older resourceVersions expire: a watch from one is told 410 Gone.
    pub fn compact(&self) {
        self.state.store.lock().compact();
    }

    /// Every open watch gets `ERROR` 410 and ends (the client must list again).
    pub fn expire_watches(&self) {
        self.compact();
        let _ = self.state.control.send(Control::Expire);
    }

    /// Every open watch ends (the client watches again from its last resourceVersion).
    pub fn drop_watches(&self) {
        let _ = self.state.control.send(Control::Drop);
    }

    /// The server goes away for `d`: connections are cut and refused, then it listens again
    /// on the same port with the same objects.
    pub async fn outage(&self, d: Duration) {
        Self::go_away(&self.state, &self.serving, d).await;
    }

    /// Every request seen so far (method, path, query, agent, status).
    pub fn log(&self) -> Vec<serde_json::Value> {
        self.state.log.lock().clone()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(h) = self.serving.lock().take() {
            h.abort();
        }
        if let Some(h) = self.outages.take() {
            h.abort();
        }
    }
}

/// Debian's kubectl as `make test` unpacks it (target/kubectl), or `$KUBECTL`: the client the
/// stand-in's tests and the controller's run.
pub fn kubectl() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os("KUBECTL") {
        return Ok(p.into());
    }
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/kubectl/usr/bin/kubectl");
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} missing: `make test` unpacks Debian's kubernetes-client there (or set KUBECTL)",
            p.display()
        ))
    }
}

pub fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {server}\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: standin\n    namespace: default\ncurrent-context: standin\nusers:\n- name: standin\n  user:\n    token: standin\n"
    )
}
