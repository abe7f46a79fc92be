#!/bin/sh
# The Gateway API types, generated from the CRDs in crds/ (v1.6.1, standard channel) by
# kopium (`cargo install kopium --locked`, 0.24). Run from the repository root after the CRDs
# change: ./crates/gateway-api/generate.sh
set -eu
cd "$(dirname "$0")"
for k in gatewayclasses gateways httproutes grpcroutes referencegrants backendtlspolicies; do
  kopium -f "crds/$k.yaml" --derive PartialEq | sed 's|kopium -f crds/|kopium -f crates/gateway-api/crds/|' > "src/types/$k.rs"
  rustfmt --edition 2021 "src/types/$k.rs"
done
