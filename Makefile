# Quick start: `make run` (demo) and `make test` (test suite). Both create .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# No download cache: on a fresh machine it would hold a second copy of every wheel (Ray, TVM)
# beside the installed ones, and CI machines have run out of disk mid-install.
PIP_FLAGS := --disable-pip-version-check --no-cache-dir -q
PIP := $(BIN)/python -m pip $(PIP_FLAGS)
# Every install, build environments included, at the versions in constraints.txt (`make lock`).
LOCK := constraints.txt
PIN := -c $(LOCK) --build-constraint $(LOCK)

.PHONY: run test test-slow test-all test-native native lint bench bench-native lock clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -c $(LOCK) pip

# Core install: what `make run` needs.
$(VENV)/.core: pyproject.toml $(LOCK) $(BIN)/python
	$(PIP) install $(PIN) -e .
	touch $@

# Everything the tests touch: test tools, apps (pinned CPU torch + TVM), Ray for `bless cluster` (~260 MB, ~9 s to install here).
$(VENV)/.test: pyproject.toml $(LOCK) $(BIN)/python
	$(PIP) install $(PIN) -e '.[test,apps,cuda,cluster]'
	touch $@ $(VENV)/.core

# The linters.
$(VENV)/.lint: pyproject.toml $(LOCK) $(BIN)/python
	$(PIP) install $(PIN) -e '.[lint]'
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

# The scheduler step as `pip install .` ships it, compiled by mypyc (hatch_build.py): a standard
# wheel unpacked into $(NATIVE)/site, which PYTHONPATH puts before the editable source. `pytest`
# and `bless`, not `python -m`: that would put the working folder, the uncompiled source, first.
NATIVE := .native
native: $(VENV)/.test
	rm -rf $(NATIVE)
	BLESS_NATIVE=1 $(PIP) wheel --no-deps --build-constraint $(LOCK) -w $(NATIVE)/dist .
	$(PIP) install --no-deps --target $(NATIVE)/site $(NATIVE)/dist/*.whl

# The fast tests against the compiled modules (tests/conftest.py checks they are the ones loaded);
# the shared data where the source checkout finds it (an installed package looks beside itself).
test-native: native
	BLESS_EXPECT_NATIVE=1 BLESS_SHARED_DATA=$${BLESS_SHARED_DATA:-$(abspath $(CURDIR)/../shared/data)} \
		PYTHONPATH=$(CURDIR)/$(NATIVE)/site $(BIN)/pytest -q -m "not slow"

bench-native: native
	PYTHONPATH=$(CURDIR)/$(NATIVE)/site $(BIN)/bless bench overhead

# ruff (lint and format), mypy on core/policies/hw/sim, and the layer contracts (import-linter).
lint: $(VENV)/.lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.core
	$(BIN)/bless bench sim

# Re-resolve constraints.txt: the newest versions pyproject.toml allows, in a scratch environment,
# build requirements included (pip freeze leaves out bless itself and torch, which pyproject pins).
LOCK_VENV := .lock-venv
LOCK_PIP := $(LOCK_VENV)/bin/python -m pip $(PIP_FLAGS)
lock:
	rm -rf $(LOCK_VENV)
	$(PY) -m venv $(LOCK_VENV)
	$(LOCK_PIP) install --upgrade pip
	$(LOCK_PIP) install '.[test,apps,cuda,cluster,lint]' hatchling grpcio-tools setuptools
	{ sed -n '/^#/p' $(LOCK); $(LOCK_VENV)/bin/python -m pip freeze --all --exclude bless --exclude torch \
		| sort -f; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) $(NATIVE) $(LOCK_VENV) .pytest_cache build dist
