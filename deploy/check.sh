#!/usr/bin/env bash
# Checks what deploy/ ships, offline: the alert rules (promtool check + unit tests), the
# Kubernetes manifests (kubernetes-validate, strict, against the schemas it bundles), the
# ConfigMap's TOML (tollgate check), and the Dockerfile's references. Run by `make test`.
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
"$VENV/bin/python" - "$tmp/tollgate.toml" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open("deploy/k8s/configmap.yaml")):
    if doc and doc.get("kind") == "ConfigMap":
        open(sys.argv[1], "w").write(doc["data"]["tollgate.toml"])
PY
TOLLGATE_ADMIN_TOKEN=check-only-token-0123456789 "$BIN" check "$tmp/tollgate.toml"

echo "== Dockerfile: the files it copies exist"
grep -E '^COPY [^-]' deploy/Dockerfile | while read -r _ srcs; do
  for s in ${srcs% *}; do
    [ "$s" = "." ] || test -e "$s" || { echo "deploy/Dockerfile copies a missing $s"; exit 1; }
  done
done
echo "deploy: ok"
