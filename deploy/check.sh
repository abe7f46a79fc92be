#!/usr/bin/env bash
# Checks what deploy/ ships, offline: the alert rules (promtool check + unit tests), the
# Kubernetes manifests (kubernetes-validate, strict, against the schemas it bundles), the
# ConfigMap's TOML (tollgate check, with throwaway certificates where the Secrets would be
# mounted), and the Dockerfile's references. Run by `make test`; needs openssl.
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
manifests=$(ls deploy/k8s/*.yaml | grep -v kustomization.yaml)
"$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" $manifests
# Every resource kustomization.yaml lists exists.
for r in $("$VENV/bin/python" -c 'import sys,yaml; print(" ".join(yaml.safe_load(open("deploy/k8s/kustomization.yaml"))["resources"]))'); do
  test -f "deploy/k8s/$r" || { echo "kustomization.yaml lists a missing $r"; exit 1; }
done

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
