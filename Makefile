# Every entry point bootstraps its own virtual environment, so a fresh clone needs only
# python3, a C compiler and (for the Prometheus tests) root to apt-get Debian's packages.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
APT_PKGS := prometheus prometheus-alertmanager
SCENARIO ?= exporter/scenarios/demo.yaml
LISTEN  ?= 127.0.0.1:19400

.PHONY: all venv system-deps demo test test-gpu lint bench generate proto clean

all: test

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(STAMP)

# Debian's prometheus (with promtool) and alertmanager, installed when missing.
system-deps:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
	    || ! command -v prometheus-alertmanager >/dev/null; then \
	  echo "installing Debian packages: $(APT_PKGS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $(APT_PKGS) >/dev/null; \
	fi

demo: $(STAMP)
	@echo "kube-gpu-exporter on the simulated node $(SCENARIO)"
	@echo "  metrics:  http://$(LISTEN)/metrics"
	@echo "  overview: http://$(LISTEN)/"
	$(VENV)/bin/kube-gpu-exporter serve --simulate $(SCENARIO) --web.listen-address=$(LISTEN)

lint: $(STAMP)
	$(VENV)/bin/ruff check exporter rules grafana tests bench
	$(VENV)/bin/ruff format --check exporter rules grafana tests bench
	$(VENV)/bin/mypy

test: $(STAMP) system-deps lint
	$(VENV)/bin/kube-gpu-exporter generate --check
	$(VENV)/bin/pytest -m "not gpu"

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

# Regenerate the kubelet pod-resources stubs from exporter/podresources/v1/api.proto.
proto: $(STAMP)
	$(PY) -m kube_gpu_exporter.exporter.podresources.generate

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache *.egg-info
