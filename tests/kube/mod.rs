//! What the controller's end-to-end tests share: the API server stand-in with kubectl, the
//! gateway run against it, a Service with its EndpointSlice, and waiting for an answer.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tollgate_kube_standin::StandIn;
use tollgate_testkit::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

pub fn kubectl_bin() -> PathBuf {
    tollgate_kube_standin::kubectl().unwrap_or_else(|e| panic!("{e}"))
}

pub struct Cluster {
    pub standin: StandIn,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let standin = StandIn::start(
            "127.0.0.1:0".parse().expect("addr"),
            Duration::from_millis(500),
        )
        .await
        .expect("stand-in");
        let dir = temp_dir("kube");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, standin.kubeconfig()).expect("kubeconfig");
        let c = Cluster {
            standin,
            dir,
            kubeconfig,
        };
        c.kubectl(&["create", "namespace", "shop"]);
        c.apply(CLASSES);
        c
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let o = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", &self.dir)
            .output()
            .expect("kubectl");
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn apply(&self, yaml: &str) {
        let f = self.dir.join(format!("obj-{}.yaml", fastrand::u64(..)));
        std::fs::write(&f, yaml).expect("write");
        self.kubectl(&["apply", "--validate=false", "-f", f.to_str().expect("path")]);
    }

    pub async fn gateway(&self, port: u16, admin: u16, base_extra: &str) -> GatewayProc {
        self.gateway_with(Path::new(BIN), port, admin, base_extra, &[])
            .await
    }

    /// `run --kubernetes` on this cluster with BASE.toml's `[server]` (and `base_extra`) and
    /// the `flags` beside.
    pub async fn gateway_with(
        &self,
        bin: &Path,
        port: u16,
        admin: u16,
        base_extra: &str,
        flags: &[&str],
    ) -> GatewayProc {
        let base = format!("[server]\nlisten = [\"127.0.0.1:{port}\"]\nadmin = \"127.0.0.1:{admin}\"\n{base_extra}");
        let kc = self.kubeconfig.to_str().expect("path").to_string();
        let mut args = vec!["--kubernetes", "--kubeconfig", &kc];
        args.extend_from_slice(flags);
        GatewayProc::start_with(bin, &base, port, Some(admin), &args)
            .await
            .expect("gateway")
    }

    /// A gateway with a TLS listener too: (port, admin, TLS port) and the process.
    pub async fn tls_gateway(&self) -> (u16, u16, u16, GatewayProc) {
        let (port, admin, tls) = (free_port(), free_port(), free_port());
        let gw = self
            .gateway(
                port,
                admin,
                &format!("tls_listen = [\"127.0.0.1:{tls}\"]\n"),
            )
            .await;
        assert!(ready(admin).await);
        (port, admin, tls, gw)
    }
}

pub const CLASSES: &str = r#"apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: tollgate
spec:
  controller: tollgate.io/ingress-controller
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: nginx
spec:
  controller: k8s.io/ingress-nginx
"#;

pub fn service(name: &str, backend_port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: shop
spec:
  ports:
  - name: http
    port: 80
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: shop
  labels:
    kubernetes.io/service-name: {name}
addressType: IPv4
ports:
- name: http
  port: {backend_port}
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
"#
    )
}

pub async fn status(port: u16, host: &str, path: &str) -> u16 {
    match get(port, path, &[("host", host)]).await {
        Ok(r) => r.status,
        Err(_) => 0,
    }
}

/// How long until `host` `path` answers `want` (at most `limit`).
pub async fn until(
    port: u16,
    host: &str,
    path: &str,
    want: u16,
    limit: Duration,
) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if status(port, host, path).await == want {
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

pub async fn ready(admin: u16) -> bool {
    eventually(Duration::from_secs(10), || async move {
        get(admin, "/readyz", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await
}

impl Cluster {
    /// `kubectl create secret tls NAME` (applied, so a second call renews it).
    pub fn tls_secret(&self, name: &str, cert: &Path, key: &Path) {
        let yaml = self.kubectl(&[
            "create",
            "secret",
            "tls",
            name,
            "-n",
            "shop",
            "--dry-run=client",
            "-o",
            "yaml",
            &format!("--cert={}", cert.display()),
            &format!("--key={}", key.display()),
        ]);
        self.apply(&yaml);
    }
}
