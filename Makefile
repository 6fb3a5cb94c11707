# sidecar-debug: `make demo` shows the product on a local one-node Kubernetes, `make test` runs
# every test. Both set up what they need on a fresh Debian 12 machine (root) by themselves.
SHELL := /bin/bash
VENV := .venv/bin
PYTEST_ARGS ?=
# The toolset's Python scripts (no .py suffix, so ruff and mypy get them by name).
TOOLSET_PY := $(shell grep -l '^\#!.*python' toolset/bin/* 2>/dev/null)

.PHONY: help setup cluster-bins images lint test test-unit test-chart test-e2e test-runtime \
        demo demo-down bench golden clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

setup: ## Debian packages, .venv with the project, helm and kubectl
	scripts/setup.sh

cluster-bins: setup ## build Kubernetes 1.20 from Debian's source (cached, ~7-10 min once)
	scripts/build-kubernetes.sh

images: setup ## build the webhook, toolset and sample images with podman (cached)
	scripts/images.sh all

lint: setup ## ruff, mypy --strict, chart files and chart README in sync
	$(VENV)/ruff check webhook tests bench toolset/lib $(TOOLSET_PY)
	$(VENV)/mypy
	scripts/sync-chart-files.sh --check
	$(VENV)/python scripts/chart_readme.py --check

test: setup cluster-bins images lint ## everything: unit, chart, end-to-end, runtime
	$(VENV)/pytest $(PYTEST_ARGS) tests

test-unit: setup ## fast tests, no cluster and no containers
	$(VENV)/pytest $(PYTEST_ARGS) tests/unit

test-chart: setup
	$(VENV)/pytest $(PYTEST_ARGS) tests/chart

test-e2e: setup cluster-bins images
	$(VENV)/pytest $(PYTEST_ARGS) tests/e2e

test-runtime: setup images
	$(VENV)/pytest $(PYTEST_ARGS) tests/runtime

golden: setup ## rewrite tests/golden/*.injected.yaml after an intended change
	$(VENV)/pytest tests/unit/test_core_golden.py --update-golden

demo: setup cluster-bins images ## local one-node Kubernetes + chart + an injected pod
	scripts/demo.sh up

demo-down: ## stop everything `make demo` started
	scripts/demo.sh down

bench: setup cluster-bins ## benchmarks: prints a table, writes bench/results/*.json
	$(VENV)/python -m bench

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .hypothesis
