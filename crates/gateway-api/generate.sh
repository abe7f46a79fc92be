#!/bin/sh
# The Gateway API types, generated from the CRDs in crds/ (v1.6.1, standard channel) by
# kopium (`cargo install kopium --locked`, 0.24); HTTPRoute's from the experimental channel's
# CRD (crds/experimental/), a superset of the standard one's that adds the rules' `retry` and
# `sessionPersistence` and the `ExternalAuth` filter. Run from the repository root after the
# CRDs change: ./crates/gateway-api/generate.sh
set -eu
cd "$(dirname "$0")"
for k in gatewayclasses gateways experimental/httproutes grpcroutes referencegrants backendtlspolicies; do
  out="src/types/$(basename "$k").rs"
  kopium -f "crds/$k.yaml" --derive PartialEq | sed 's|kopium -f crds/|kopium -f crates/gateway-api/crds/|' > "$out"
  rustfmt --edition 2021 "$out"
done
