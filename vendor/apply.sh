#!/usr/bin/env bash
# Re-creates vendor/pingora-core, vendor/pingora-proxy and vendor/pingora-http from the
# crates.io release and the
# patches in vendor/patches, in order. Run it after changing a patch, or with VERSION=x.y.z to
# rebase on a new release (then fix the hunks that no longer apply, and the version pins in
# the root Cargo.toml). The crates are fetched by cargo from crates.io into a scratch project.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="${VERSION:-0.9.1}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/src"
cat > "$scratch/Cargo.toml" <<TOML
[package]
name = "fetch-pingora"
version = "0.0.0"
edition = "2021"
[dependencies]
pingora-core = { version = "=$VERSION", default-features = false }
pingora-proxy = { version = "=$VERSION", default-features = false }
pingora-http = { version = "=$VERSION" }
TOML
touch "$scratch/src/lib.rs"
cargo fetch --manifest-path "$scratch/Cargo.toml" >/dev/null
registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
for crate in pingora-core pingora-proxy pingora-http; do
  src="$(ls -d "$registry"/*/"$crate-$VERSION" | head -n1)"
  rm -rf "$crate"
  cp -r "$src" "$crate"
  rm -f "$crate/.cargo-ok"
done
for p in patches/*.patch; do
  echo "applying $p"
  patch -p1 --quiet --no-backup-if-mismatch < "$p"
done
