#!/usr/bin/env bash
# Checks what deploy/ ships, offline: the alert rules (promtool check + unit tests), the
# Kubernetes manifests (kubernetes-validate, strict, against the schemas it bundles), the
# ServiceMonitor (whose CRD those schemas lack: checked against the Service, the Deployment
# and the ConfigMap instead), the ConfigMap's TOML (tollgate check, with throwaway
# certificates where the Secrets would be mounted), and the Dockerfile's references. Run by
# `make test`; needs openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TOLLGATE_BIN:-target/debug/tollgate}
VENV=${DEPLOY_VENV:-target/deploy-venv}
K8S_VERSION=${K8S_VERSION:-1.30.0}

echo "== promtool: deploy/prometheus"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/tests/alerts_test.yml

echo "== kubernetes-validate $K8S_VERSION: deploy/k8s"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q kubernetes-validate
fi
# servicemonitor.yaml is a custom resource (monitoring.coreos.com/v1) the bundled schemas do
# not know (kubernetes-validate would only warn and check nothing): it is checked below.
manifests=$(ls deploy/k8s/*.yaml deploy/k8s/controller/*.yaml | grep -v -e kustomization.yaml -e servicemonitor.yaml)
"$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" $manifests
# Every resource kustomization.yaml lists exists.
for r in $("$VENV/bin/python" -c 'import sys,yaml; print(" ".join(yaml.safe_load(open("deploy/k8s/kustomization.yaml"))["resources"]))'); do
  test -f "deploy/k8s/$r" || { echo "kustomization.yaml lists a missing $r"; exit 1; }
done
for r in $("$VENV/bin/python" -c 'import sys,yaml; print(" ".join(yaml.safe_load(open("deploy/k8s/controller/kustomization.yaml"))["resources"]))'); do
  test -f "deploy/k8s/controller/$r" || { echo "controller/kustomization.yaml lists a missing $r"; exit 1; }
done

echo "== CRDs: deploy/k8s/crds (the schema, and its CEL rules run on cases)"
"$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" deploy/k8s/crds/*.yaml
if ! "$VENV/bin/python" -c 'import celpy' 2>/dev/null; then
  "$VENV/bin/pip" install -q cel-python
fi
for crd in deploy/k8s/crds/*.yaml; do
  "$VENV/bin/python" deploy/tests/crd_rules.py "$crd"
done
# The RBAC lets the controller read and write the status of every kind it watches.
"$VENV/bin/python" - <<'PY'
import yaml
role = [d for d in yaml.safe_load_all(open("deploy/k8s/controller/rbac.yaml")) if d["kind"] == "ClusterRole"][0]
granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
for want in [("gateway.networking.k8s.io", k) for k in ["gatewayclasses", "gateways", "httproutes", "referencegrants", "gatewayclasses/status", "gateways/status", "httproutes/status"]] + [("tollgate.io", "ratelimitpolicies"), ("tollgate.io", "ratelimitpolicies/status"), ("", "namespaces")]:
    assert want in granted, want
print("Gateway API RBAC ok")
PY

echo "== the controller: deploy/k8s/controller"
# Its ServiceAccount is the one the binding names; BASE.toml in its ConfigMap checks; the
# Deployment runs it with --kubernetes on that file.
"$VENV/bin/python" - "$BIN" <<'PY'
import subprocess, sys, tempfile, yaml
docs = {}
for f in ["rbac", "configmap", "deployment", "service"]:
    for d in yaml.safe_load_all(open(f"deploy/k8s/controller/{f}.yaml")):
        docs[(d["kind"], d["metadata"]["name"])] = d
dep = docs[("Deployment", "tollgate-controller")]["spec"]["template"]["spec"]
sa = dep["serviceAccountName"]
assert ("ServiceAccount", sa) in docs, sa
binding = docs[("ClusterRoleBinding", "tollgate-controller")]
assert any(s["name"] == sa for s in binding["subjects"]), binding
args = dep["containers"][0]["args"]
assert "--kubernetes" in args and args[args.index("--config") + 1] == "/etc/tollgate/config/base.toml", args
# The Lease the Role lets it write is the one it elects with; the Service it publishes exists.
eid = args[args.index("--election-id") + 1] if "--election-id" in args else "tollgate-leader"
role = docs[("Role", "tollgate-controller")]
assert any("leases" in r["resources"] and eid in r.get("resourceNames", []) and "update" in r["verbs"] for r in role["rules"]), role
assert any("ingresses/status" in r["resources"] for r in docs[("ClusterRole", "tollgate-controller")]["rules"])
pub = args[args.index("--publish-service") + 1].split("/")[1]
assert ("Service", pub) in docs, pub
base = docs[("ConfigMap", "tollgate-controller-base")]["data"]["base.toml"]
with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
    f.write(base)
    f.flush()
    subprocess.run([sys.argv[1], "check", "--kubernetes", f.name], check=True)
print("controller manifests ok")
PY

echo "== ServiceMonitor: deploy/k8s/servicemonitor.yaml"
# What it must do: select a Service of service.yaml by its labels, name a port of that
# Service which leads to the container's admin listener (the ConfigMap's server.admin, where
# /metrics is served), scrape the path and port the prometheus.io annotations name, and stay
# out of kustomization.yaml (a cluster without the Operator's CRDs would refuse it).
"$VENV/bin/python" - <<'PY'
import re, sys, yaml
try:
    import tomllib  # Python 3.11+
except ImportError:
    tomllib = None

def fail(msg):
    sys.exit(f"servicemonitor.yaml: {msg}")

def docs(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]

sms = docs("deploy/k8s/servicemonitor.yaml")
if len(sms) != 1:
    fail(f"one object expected, found {len(sms)}")
sm = sms[0]
if sm.get("apiVersion") != "monitoring.coreos.com/v1" or sm.get("kind") != "ServiceMonitor":
    fail(f"apiVersion/kind {sm.get('apiVersion')}/{sm.get('kind')}, not monitoring.coreos.com/v1/ServiceMonitor")
if not sm.get("metadata", {}).get("name"):
    fail("metadata.name is missing")
if set(sm) - {"apiVersion", "kind", "metadata"} != {"spec"}:
    fail(f"unexpected top-level keys {sorted(set(sm) - {'apiVersion', 'kind', 'metadata', 'spec'})}")
spec = sm["spec"]
# Strict like the other manifests: a misspelt key fails here rather than being ignored by
# the Operator. (The fields this file may use; extend the lists to use more.)
SPEC_KEYS = {"jobLabel", "targetLabels", "podTargetLabels", "selector", "namespaceSelector",
             "endpoints", "sampleLimit", "targetLimit", "attachMetadata"}
ENDPOINT_KEYS = {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
                 "honorTimestamps", "relabelings", "metricRelabelings", "params",
                 "tlsConfig", "authorization", "bearerTokenSecret", "followRedirects",
                 "enableHttp2", "filterRunning"}
if set(spec) - SPEC_KEYS:
    fail(f"unknown spec keys {sorted(set(spec) - SPEC_KEYS)}")
selector = spec.get("selector") or {}
if set(selector) != {"matchLabels"} or not selector["matchLabels"]:
    fail("spec.selector must be a non-empty matchLabels (what this check understands)")
want = selector["matchLabels"]

services = [d for d in docs("deploy/k8s/service.yaml") if d.get("kind") == "Service"]
selected = [s for s in services
            if want.items() <= (s["metadata"].get("labels") or {}).items()]
if not selected:
    fail(f"selector {want} matches no Service in service.yaml")
pods = [d["spec"]["template"] for d in docs("deploy/k8s/deployment.yaml")
        if d.get("kind") == "Deployment"]
if len(pods) != 1:
    fail("deployment.yaml: one Deployment expected")
pod = pods[0]
pod_labels = pod["metadata"].get("labels") or {}
annotations = pod["metadata"].get("annotations") or {}
container_ports = [p for c in pod["spec"]["containers"] for p in c.get("ports", [])]

toml = next(d for d in docs("deploy/k8s/configmap.yaml")
            if d.get("kind") == "ConfigMap")["data"]["tollgate.toml"]
if tomllib:
    admin = tomllib.loads(toml).get("server", {}).get("admin")
else:
    # [server]'s lines, up to the next table header (at the start of a line).
    m = re.search(r'^\[server\][ \t]*$(.*?)(?=^\[|\Z)', toml, re.M | re.S)
    a = m and re.search(r'^\s*admin\s*=\s*"([^"]+)"', m.group(1), re.M)
    admin = a and a.group(1)
if not admin:
    fail("the ConfigMap's server.admin is not set: there is no /metrics to scrape")
admin_port = int(admin.rsplit(":", 1)[1])
if annotations.get("prometheus.io/port") != str(admin_port):
    fail(f"deployment.yaml: prometheus.io/port is {annotations.get('prometheus.io/port')!r}, "
         f"the admin listener is on {admin_port}")

endpoints = spec.get("endpoints") or []
if not endpoints:
    fail("spec.endpoints is empty")
for ep in endpoints:
    if set(ep) - ENDPOINT_KEYS:
        fail(f"unknown endpoint keys {sorted(set(ep) - ENDPOINT_KEYS)}")
    name = ep.get("port")
    if not isinstance(name, str):
        fail("each endpoint names a Service port (port: NAME)")
    path = ep.get("path", "/metrics")
    if path != annotations.get("prometheus.io/path", "/metrics"):
        fail(f"endpoint path {path} is not the annotations' {annotations.get('prometheus.io/path')}")
    reached = []
    for s in selected:
        for sp in s["spec"].get("ports", []):
            if sp.get("name") != name:
                continue
            if not (s["spec"].get("selector") or {}).items() <= pod_labels.items():
                continue
            target = sp.get("targetPort", sp["port"])
            for cp in container_ports:
                if target in (cp.get("name"), cp["containerPort"]):
                    reached.append((s["metadata"]["name"], cp["containerPort"]))
    if not reached:
        fail(f"port {name!r}: no selected Service has a port of that name leading to a container port")
    for svc, port in reached:
        if port != admin_port:
            fail(f"port {name!r} of Service {svc} leads to {port}, not the admin listener's {admin_port}")

job = spec.get("jobLabel")
if job and not all(job in (s["metadata"].get("labels") or {}) for s in selected):
    fail(f"jobLabel {job} is not a label of every selected Service")
for l in spec.get("podTargetLabels", []):
    if l not in pod_labels:
        fail(f"podTargetLabels: the pods have no label {l}")

resources = yaml.safe_load(open("deploy/k8s/kustomization.yaml"))["resources"]
if "servicemonitor.yaml" in resources:
    fail("listed in kustomization.yaml: `kubectl apply -k` would fail on a cluster without the CRD")
PY

echo "== tollgate check: the ConfigMap's tollgate.toml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The certificates live in Secrets mounted at /etc/tollgate/tls/NAMESPACE/SECRET/ (made by
# cert-manager in the cluster): here each folder the config names gets a throwaway
# self-signed certificate (tls.crt, tls.key, and the same certificate as ca.crt), and the
# paths point into $tmp. Every such folder must be a Secret mounted in deployment.yaml,
# without subPath (a subPath mount never sees a renewal).
"$VENV/bin/python" - "$tmp" <<'PY'
import re, sys, yaml
tmp = sys.argv[1]
toml = next(d for d in yaml.safe_load_all(open("deploy/k8s/configmap.yaml"))
            if d and d.get("kind") == "ConfigMap")["data"]["tollgate.toml"]
dirs = sorted(set(re.findall(r'"/etc/tollgate/tls/([^"]+)/(?:tls\.crt|tls\.key|ca\.crt)"', toml)))
mounts = {}
for doc in yaml.safe_load_all(open("deploy/k8s/deployment.yaml")):
    if not doc or doc.get("kind") != "Deployment":
        continue
    pod = doc["spec"]["template"]["spec"]
    secrets = {v["name"] for v in pod.get("volumes", []) if "secret" in v}
    for c in pod["containers"]:
        for m in c.get("volumeMounts", []):
            if m["name"] in secrets:
                if m.get("subPath") or m.get("subPathExpr"):
                    sys.exit(f"deployment.yaml: {m['mountPath']}: a Secret mounted with subPath never sees a renewal")
                mounts[m["mountPath"]] = m.get("readOnly", False)
for d in dirs:
    path = f"/etc/tollgate/tls/{d}"
    if path not in mounts:
        sys.exit(f"configmap.yaml names {path}/ but deployment.yaml mounts no Secret there")
    if not mounts[path]:
        sys.exit(f"deployment.yaml: {path}: mount the Secret readOnly")
open(f"{tmp}/tollgate.toml", "w").write(toml.replace('"/etc/tollgate/tls/', f'"{tmp}/tls/'))
open(f"{tmp}/tls-dirs", "w").write("".join(d + "\n" for d in dirs))
PY
while read -r d; do
  mkdir -p "$tmp/tls/$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=tollgate.example" -addext "subjectAltName=DNS:tollgate.example" \
    -keyout "$tmp/tls/$d/tls.key" -out "$tmp/tls/$d/tls.crt" 2>/dev/null
  cp "$tmp/tls/$d/tls.crt" "$tmp/tls/$d/ca.crt"
done < "$tmp/tls-dirs"
TOLLGATE_ADMIN_TOKEN=check-only-token-0123456789 "$BIN" check "$tmp/tollgate.toml"

echo "== Dockerfile: the files it copies exist"
grep -E '^COPY [^-]' deploy/Dockerfile | while read -r _ srcs; do
  for s in ${srcs% *}; do
    [ "$s" = "." ] || test -e "$s" || { echo "deploy/Dockerfile copies a missing $s"; exit 1; }
  done
done
echo "deploy: ok"
