# Quick start: `make run` (demo) and `make test` (test suite). Both create .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# No download cache: on a fresh machine it would hold a second copy of every wheel (Ray, TVM)
# beside the installed ones, and CI machines have run out of disk mid-install.
PIP := $(BIN)/python -m pip --disable-pip-version-check --no-cache-dir -q

.PHONY: run test test-slow test-all lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Core install: what `make run` needs.
$(VENV)/.core: pyproject.toml $(BIN)/python
	$(PIP) install -e .
	touch $@

# Everything the tests touch: test tools, apps (pinned CPU torch + TVM), Ray for `bless cluster` (~260 MB, ~9 s to install here).
$(VENV)/.test: pyproject.toml $(BIN)/python
	$(PIP) install -e '.[test,apps,cuda,cluster]'
	touch $@ $(VENV)/.core

# The linters.
$(VENV)/.lint: pyproject.toml $(BIN)/python
	$(PIP) install -e '.[lint]'
	touch $@ $(VENV)/.core

run: $(VENV)/.core
	$(BIN)/bless demo

test: $(VENV)/.test
	$(BIN)/python -m pytest -q -m "not slow"

# The slow tier (the 10,000-request soak, full model builds): CI runs it as its own step.
test-slow: $(VENV)/.test
	$(BIN)/python -m pytest -q -m slow

test-all: $(VENV)/.test
	$(BIN)/python -m pytest -q

# ruff (lint and format), mypy on core/policies/hw/sim, and the layer contracts (import-linter).
lint: $(VENV)/.lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.core
	$(BIN)/bless bench sim

clean:
	rm -rf $(VENV) .pytest_cache build dist
