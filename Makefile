# Every entry point bootstraps its own virtual environment, so a fresh clone needs only
# python3, a C compiler and (for the Prometheus tests) root to apt-get Debian's packages.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
APT_PKGS := prometheus prometheus-alertmanager chromium iproute2 containerd runc containernetworking-plugins
APT_CMDS := prometheus promtool prometheus-alertmanager chromium ip containerd runc /usr/lib/cni/bridge
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: all venv system-deps npm-deps demo test test-gpu lint bench image-footprint generate proto clean

all: test

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

# `make demo`'s install: the runtime and the demo extra, with pip's progress shown. A venv
# `make test` made has it all already (the test extra needs no more than the demo's).
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	python3 -m venv $(VENV) && $(PY) -m pip install --upgrade pip \
	  && $(PY) -m pip install -e '.[demo]' && touch $@

# Debian's prometheus (with promtool), alertmanager, chromium (the report's rendering test),
# iproute2 (the test host network namespaces of the operator test) and containerd, runc and
# the CNI plugins (the real node of the node-marked tests), installed when missing.
system-deps:
	@missing=; for cmd in $(APT_CMDS); do command -v $$cmd >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $(APT_PKGS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $(APT_PKGS) >/dev/null; \
	fi

# @grafana/schema and TypeScript for tests/integration/test_dashboards_schema.py, at the
# versions tests/dashboard_schema/package-lock.json pins, in a cache outside the checkout;
# installed again only when that lock changes (npm from Debian when it is missing).
NPM_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kube-gpu-exporter/npm
NPM_LOCK := tests/dashboard_schema/package-lock.json
npm-deps:
	@if ! cmp -s $(NPM_LOCK) $(NPM_DIR)/package-lock.json \
	  || [ ! -f $(NPM_DIR)/node_modules/typescript/bin/tsc ]; then \
	  command -v npm >/dev/null || { echo "installing Debian packages: nodejs npm"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }; \
	  mkdir -p $(NPM_DIR) && cp tests/dashboard_schema/package.json $(NPM_LOCK) $(NPM_DIR)/ \
	    && npm ci --prefix $(NPM_DIR) --no-audit --no-fund; \
	fi

# The real control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) and
# Prometheus 3, promtool, alertmanager, amtool and helm, two kubelets (node-bin: 1.37 and
# 1.34) and Kueue's controller with its CRDs and webhook manifests (kueue-bin), compiled
# from their Go modules at the versions tools/real_components.py pins, into
# ${KGE_BIN_CACHE:-~/.cache/kube-gpu-exporter/bin} outside the checkout; a component already
# built there is not built again.
.PHONY: k8s-bin prom-bin node-bin kueue-bin real-bin
k8s-bin prom-bin node-bin kueue-bin real-bin:
	python3 tools/real_components.py build $(patsubst %-bin,%,$(subst real-bin,all-bin,$@))

# The container image, built from the Dockerfile as it is without a registry: Debian's buildah
# on a base made once from Debian's packages (debootstrap) passed as PYTHON_IMAGE, built again
# only when the Dockerfile or what it copies changes, exported as a docker-archive; all in
# ${KGE_IMAGE_CACHE:-~/.cache/kube-gpu-exporter/image} outside the checkout (tools/image.py).
# Installs buildah and debootstrap (as root) when missing.
.PHONY: image
image:
	@command -v buildah >/dev/null && command -v debootstrap >/dev/null || { \
	  echo "installing Debian packages: buildah debootstrap"; apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    buildah debootstrap >/dev/null; }
	python3 tools/image.py build

# The story node, its kubelet, Prometheus and Alertmanager with the generated rules; Ctrl-C
# stops them all. HOST=0.0.0.0 to reach it from another machine.
HOST ?= 127.0.0.1
demo: APT_PKGS := prometheus prometheus-alertmanager
demo: APT_CMDS := prometheus prometheus-alertmanager
demo: $(DEMO_STAMP) system-deps
	$(VENV)/bin/kube-gpu-exporter demo --host=$(HOST)

# mypy checks the installed names: it cannot follow setuptools' package-dir mapping, so the
# source folders are linked into $(VENV)/typecheck/kube_gpu_exporter/ (pyproject's mypy_path).
PACKAGES := exporter rules grafana demo
TYPECHECK := $(VENV)/typecheck/kube_gpu_exporter

lint: $(STAMP)
	$(VENV)/bin/ruff check $(PACKAGES) tests bench
	$(VENV)/bin/ruff format --check $(PACKAGES) tests bench
	@mkdir -p $(TYPECHECK)
	@for pkg in $(PACKAGES); do ln -sfn ../../../$$pkg $(TYPECHECK)/$$pkg; done
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The suite mostly waits (on exporters, Prometheus, promtool, sockets), so pytest-xdist runs it
# on more workers than cores; TEST_WORKERS=0 runs it in one process. Each test file stays on
# one worker, so its module fixtures (a Prometheus, the demo) are built once.
TEST_WORKERS ?= 6

# What CI runs: lint, the generated files up to date, and every test but the gpu-marked ones
# (the k8s-marked ones run on the components real-bin builds when they are not in the cache;
# the image-marked ones on the image `make image` builds and prints the size of).
test: $(STAMP) system-deps npm-deps real-bin image lint
	$(VENV)/bin/kube-gpu-exporter generate --check
	$(VENV)/bin/pytest -m "not gpu" -n $(TEST_WORKERS) --dist loadfile

# The edit loop, in well under a minute: lint and the unit tests (no subprocesses, no
# Prometheus; in one process, since a worker's start-up would cost more than it saves).
.PHONY: check
check: lint
	$(VENV)/bin/pytest -m "not gpu" tests/unit

# What the Dockerfile's final stage adds to python:3.12-slim, measured without a Docker engine
# (needs the package index for the CPython 3.12 wheels).
image-footprint: $(STAMP)
	$(PY) bench/image_footprint.py

# Pin the image's runtime dependencies again, with their wheels' hashes, from pyproject.toml's
# ranges into requirements.lock (needs the package index; commit the result).
.PHONY: lock
lock: $(STAMP)
	$(PY) tools/lock.py

# Regenerate deploy/ and docs/runbooks.md from the thresholds (commit the result).
generate: $(STAMP)
	$(VENV)/bin/kube-gpu-exporter generate

# Run on a machine with a real NVIDIA driver (the device machine).
test-gpu: $(STAMP)
	$(VENV)/bin/pytest -m gpu -v

bench: $(STAMP)
	@command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends wrk >/dev/null; }
	$(PY) bench/run.py
	$(PY) bench/peers.py --readme
	$(PY) bench/peers.py --node h100 --readme
	$(PY) bench/rss_profile.py --readme
	$(PY) bench/pod_watch.py --readme
	$(PY) bench/profiling.py --readme
	$(PY) bench/abuse.py --readme
	$(PY) bench/cluster.py --scale 3 --rate 100 --neighbour --readme
	cd bench && ../$(PY) series_cost.py
	$(PY) bench/cluster_decode.py --scale 3
	$(PY) bench/cluster_incremental.py
	$(PY) bench/cluster_real.py --scale 3 --rate 100 --readme

# Regenerate the kubelet pod-resources stubs from exporter/kubelet/v1/api.proto.
proto: $(STAMP)
	$(PY) -m kube_gpu_exporter.exporter.kubelet.generate

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache *.egg-info
