#!/usr/bin/env bash
# Load comparison on loopback, side by side in one run: see bench/README.md.
# Usage: bench/run.sh [seconds-per-scenario] [connections]
#        bench/run.sh global [seconds-per-scenario] [connections]   (Redis-backed limits)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:/usr/sbin:$PATH"
install() { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
[ -x target/release/tollgate ] || cargo build --release -p tollgate
command -v nginx >/dev/null || install nginx-light
if [ "${1:-}" = global ]; then
  command -v oha >/dev/null || cargo install oha --locked
  command -v redis-server >/dev/null || install redis-server
  exec python3 bench/global.py "${2:-8}" "${3:-50}"
fi
# The load comparison: wrk drives it; nginx, HAProxy and Caddy are the peers (Debian packages).
# Their own system services are not used (every server here runs on a free loopback port):
# stopped and disabled if the packages started them.
missing=""
for p in wrk haproxy caddy; do command -v "$p" >/dev/null || missing="$missing $p"; done
if [ -n "$missing" ]; then
  install $missing
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    for svc in $missing; do systemctl disable --now "$svc" >/dev/null 2>&1 || true; done
  fi
fi
exec python3 bench/loadtest.py "${1:-8}" "${2:-50}"
