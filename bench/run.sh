#!/usr/bin/env bash
# Load comparison on loopback, side by side in one run: see bench/README.md.
# Usage: bench/run.sh [seconds-per-scenario] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v oha >/dev/null || [ -x "$HOME/.cargo/bin/oha" ] || cargo install oha --locked
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; }
[ -x target/release/tollgate ] || cargo build --release -p tollgate
export PATH="$HOME/.cargo/bin:/usr/sbin:$PATH"
exec python3 bench/loadtest.py "${1:-8}" "${2:-50}"
