#!/usr/bin/env bash
# Load comparison on loopback, side by side in one run: see bench/README.md.
# Usage: bench/run.sh [seconds-per-scenario] [connections]
#        bench/run.sh global [seconds-per-scenario] [connections]   (Redis-backed limits)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v oha >/dev/null || [ -x "$HOME/.cargo/bin/oha" ] || cargo install oha --locked
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; }
[ -x target/release/tollgate ] || cargo build --release -p tollgate
export PATH="$HOME/.cargo/bin:/usr/sbin:$PATH"
if [ "${1:-}" = global ]; then
  command -v redis-server >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
  exec python3 bench/global.py "${2:-8}" "${3:-50}"
fi
exec python3 bench/loadtest.py "${1:-8}" "${2:-50}"
