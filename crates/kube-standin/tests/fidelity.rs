//! The stand-in's fidelity, proved with clients written against the real API server:
//! Debian's kubectl (kubernetes-client, unpacked by `make test` into target/kubectl) creating,
//! applying, patching, replacing, watching and deleting through it, and the Python client
//! (python3-kubernetes) listing and watching, with bookmarks and an expired resourceVersion.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;
use tollgate_kube_standin::StandIn;

fn kubectl_bin() -> PathBuf {
    tollgate_kube_standin::kubectl().unwrap_or_else(|e| panic!("{e}"))
}

struct Env {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Env {
    fn new(s: &StandIn, name: &str) -> Env {
        let dir =
            std::env::temp_dir().join(format!("tollgate-standin-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, s.kubeconfig()).expect("kubeconfig");
        Env { dir, kubeconfig }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", &self.dir)
            .output()
            .expect("kubectl runs")
    }

    /// kubectl, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).expect("kubectl prints JSON")
    }
}

const INGRESS: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "10"
spec:
  ingressClassName: nginx
  rules:
  - host: shop.example
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
"#;

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  ports:
  - name: http
    port: 80
  - name: https
    port: 443
"#;

/// A stand-in on a free port (on its own runtime, kept with it) and a client folder.
fn started(name: &str) -> (tokio::runtime::Runtime, StandIn, Env) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let s = rt
        .block_on(StandIn::start(
            "127.0.0.1:0".parse().expect("addr"),
            Duration::from_millis(200),
        ))
        .expect("stand-in");
    let e = Env::new(&s, name);
    (rt, s, e)
}

#[test]
fn kubectl_creates_applies_patches_watches_and_deletes() {
    let (_rt, s, e) = started("kubectl");
    // Discovery: kubectl finds the kinds by their names and short names.
    let resources = e.ok(&["api-resources", "--no-headers"]);
    for want in [
        "ingresses",
        "endpointslices",
        "leases",
        "ingressclasses",
        "httproutes",
    ] {
        assert!(resources.contains(want), "{want} in:\n{resources}");
    }
    assert!(e.ok(&["version"]).contains("v1.32.0-tollgate-standin"));
    // A namespace must exist before objects go in it, as on a real cluster.
    let ing = e.file("ing.yaml", INGRESS);
    let refused = e.kubectl(&[
        "apply",
        "--validate=false",
        "-f",
        ing.to_str().expect("path"),
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("namespaces \"shop\" not found"));
    e.ok(&["create", "namespace", "shop"]);
    assert!(e
        .ok(&[
            "apply",
            "--validate=false",
            "-f",
            ing.to_str().expect("path")
        ])
        .contains("created"));
    let got = e.json(&["get", "ingress", "web", "-n", "shop"]);
    assert_eq!(got["spec"]["rules"][0]["host"], "shop.example");
    assert_eq!(got["metadata"]["generation"], 1);
    assert!(
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    // A watch, opened now, sees what follows.
    let watcher = Command::new("timeout")
        .arg("6")
        .arg(kubectl_bin())
        .arg("--kubeconfig")
        .arg(&e.kubeconfig)
        .args([
            "get",
            "ingress",
            "-n",
            "shop",
            "--watch",
            "-o",
            "jsonpath={.metadata.annotations.step}{\"\\n\"}",
        ])
        .env("HOME", &e.dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl --watch");
    std::thread::sleep(Duration::from_millis(1500));
    // apply again (a strategic merge patch): a changed annotation and path.
    let changed = INGRESS
        .replace("\"10\"", "\"20\"")
        .replace("path: /\n", "path: /v2\n");
    let ing2 = e.file("ing2.yaml", &changed);
    assert!(e
        .ok(&[
            "apply",
            "--validate=false",
            "-f",
            ing2.to_str().expect("path")
        ])
        .contains("configured"));
    let got = e.json(&["get", "ingress", "web", "-n", "shop"]);
    assert_eq!(
        got["metadata"]["annotations"]["nginx.ingress.kubernetes.io/limit-rps"],
        "20"
    );
    assert_eq!(got["spec"]["rules"][0]["http"]["paths"][0]["path"], "/v2");
    assert_eq!(
        got["metadata"]["generation"], 2,
        "a spec change is a new generation"
    );
    // annotate and label (merge patches), patch by JSON patch and by merge patch.
    e.ok(&["annotate", "ingress", "web", "-n", "shop", "step=annotated"]);
    e.ok(&["label", "ingress", "web", "-n", "shop", "team=a"]);
    e.ok(&[
        "patch",
        "ingress",
        "web",
        "-n",
        "shop",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/rules/0/host","value":"b.example"}]"#,
    ]);
    e.ok(&[
        "patch",
        "ingress",
        "web",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"step":"merged"}}}"#,
    ]);
    let got = e.json(&["get", "ingress", "web", "-n", "shop"]);
    assert_eq!(got["spec"]["rules"][0]["host"], "b.example");
    assert_eq!(got["metadata"]["labels"]["team"], "a");
    assert_eq!(got["metadata"]["annotations"]["step"], "merged");
    // A replace with a stale resourceVersion is refused as the API server refuses it.
    let mut stale = got.clone();
    stale["metadata"]["resourceVersion"] = serde_json::json!("2");
    let stale_file = e.file("stale.json", &stale.to_string());
    let o = e.kubectl(&[
        "replace",
        "--validate=false",
        "-f",
        stale_file.to_str().expect("path"),
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the object has been modified"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Keyed lists merge as kubectl means them: one Service port changed, the other kept.
    let svc = e.file("svc.yaml", SERVICE);
    e.ok(&[
        "apply",
        "--validate=false",
        "-f",
        svc.to_str().expect("path"),
    ]);
    let svc2 = e.file("svc2.yaml", &SERVICE.replace("name: https", "name: tls"));
    e.ok(&[
        "apply",
        "--validate=false",
        "-f",
        svc2.to_str().expect("path"),
    ]);
    let got = e.json(&["get", "service", "web", "-n", "shop"]);
    assert_eq!(
        got["spec"]["ports"],
        serde_json::json!([{"name": "http", "port": 80}, {"name": "tls", "port": 443}])
    );
    // Leases, as leader election writes them.
    let lease = e.file("lease.yaml", "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: tollgate-leader\n  namespace: default\nspec:\n  holderIdentity: a\n  leaseDurationSeconds: 15\n");
    e.ok(&[
        "create",
        "--validate=false",
        "-f",
        lease.to_str().expect("path"),
    ]);
    assert!(e
        .ok(&["get", "lease", "-o", "name"])
        .contains("lease.coordination.k8s.io/tollgate-leader"));
    // Delete waits for the object to go (kubectl watches for it).
    let started = std::time::Instant::now();
    e.ok(&["delete", "ingress", "web", "-n", "shop"]);
    assert!(started.elapsed() < Duration::from_secs(5));
    let o = e.kubectl(&["get", "ingress", "web", "-n", "shop"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("not found"));
    let out = watcher.wait_with_output().expect("watch ends");
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen.contains("annotated") && seen.contains("merged"),
        "the watch saw: {seen}"
    );
    // Every request kubectl made was understood: nothing answered 404 but the two gets of
    // things not there (the first apply's and the last get's) and discovery's openapi.
    let odd: Vec<_> = s
        .log()
        .into_iter()
        .filter(|r| r["status"].as_u64().unwrap_or(0) >= 405 || r["status"] == 400)
        .collect();
    assert!(
        odd.iter().all(|r| r["status"] == 409),
        "unexpected answers: {odd:#?}"
    );
}

const PY: &str = r#"
import json, sys, threading, time, urllib.request
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
url = sys.argv[2]
net = client.NetworkingV1Api()
core = client.CoreV1Api()
core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
def ing(name, path):
    return client.V1Ingress(metadata=client.V1ObjectMeta(name=name), spec=client.V1IngressSpec(rules=[
        client.V1IngressRule(host=name + ".example", http=client.V1HTTPIngressRuleValue(paths=[
            client.V1HTTPIngressPath(path=path, path_type="Prefix", backend=client.V1IngressBackend(
                service=client.V1IngressServiceBackend(name="s", port=client.V1ServiceBackendPort(number=80))))]))]))
for i in range(5):
    net.create_namespaced_ingress("py", ing("i%d" % i, "/"))
# Pages of two, as a reflector lists.
names, cont = [], None
while True:
    page = net.list_namespaced_ingress("py", limit=2, _continue=cont)
    names += [i.metadata.name for i in page.items]
    cont = page.metadata._continue
    if not cont:
        break
assert names == ["i0", "i1", "i2", "i3", "i4"], names
rv = page.metadata.resource_version
# A watch from the list's version sees the changes after it, with bookmarks.
def change():
    time.sleep(0.5)
    body = net.read_namespaced_ingress("i1", "py")
    body.spec.rules[0].http.paths[0].path = "/changed"
    net.replace_namespaced_ingress("i1", "py", body)
    net.delete_namespaced_ingress("i2", "py")
    body.metadata.resource_version = "1"
    try:
        net.replace_namespaced_ingress("i1", "py", body)
        raise SystemExit("a stale replace passed")
    except ApiException as e:
        assert e.status == 409, e.status
threading.Thread(target=change).start()
seen = []
w = watch.Watch()
for ev in w.stream(net.list_namespaced_ingress, "py", resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=3, _preload_content=False if False else True):
    seen.append((ev["type"], ev["object"].metadata.name if ev["type"] != "BOOKMARK" else None))
assert ("MODIFIED", "i1") in seen and ("DELETED", "i2") in seen, seen
assert any(t == "BOOKMARK" for t, _ in seen), seen
# Status written through the subresource only changes .status.
body = net.read_namespaced_ingress("i0", "py")
body.status = client.V1IngressStatus(load_balancer=client.V1LoadBalancerStatus(ingress=[client.V1LoadBalancerIngress(ip="10.1.2.3")]))
body.spec.rules[0].host = "not-this.example"
out = net.replace_namespaced_ingress_status("i0", "py", body)
assert out.status.load_balancer.ingress[0].ip == "10.1.2.3"
assert out.spec.rules[0].host == "i0.example"
# After compaction, a watch from the old version is told 410 Gone, in the stream.
urllib.request.urlopen(urllib.request.Request(url + "/standin/compact", method="POST")).read()
try:
    for ev in watch.Watch().stream(net.list_namespaced_ingress, "py", resource_version=rv, timeout_seconds=2):
        pass
    raise SystemExit("no 410")
except ApiException as e:
    assert e.status == 410, e
print("python ok")
"#;

#[test]
fn the_python_client_lists_pages_watches_and_recovers_from_410() {
    let (_rt, s, e) = started("python");
    let script = e.file("client.py", PY);
    // Debian's python3-kubernetes installs for the system interpreter.
    let o = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&e.kubeconfig)
        .arg(s.url())
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("python ok"),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
