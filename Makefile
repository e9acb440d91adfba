# serverless-karpenter: `make demo` runs the local simulation, `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
PYTEST_WORKERS ?= 2

.PHONY: install demo demo-keep demo-stop test lint typecheck unit clean
.DEFAULT_GOAL := demo

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Prints the report (JSON on the last line of stdout) and exits, leaving the simulator running in the
# background for `serverless-karpenter status --local`, `doctor --local` and `explain pod --local`; its
# output goes to .serverless-karpenter/simulator.log, never to this target's stdout, so that whoever reads
# the output until EOF gets it when `make demo` exits. A second `make demo` replaces it.
demo: $(STAMP)
	$(BIN)/serverless-karpenter simulate --scenario default --keep --detach --json

# The same, with the simulator in the foreground until Ctrl-C.
demo-keep: $(STAMP)
	$(BIN)/serverless-karpenter simulate --scenario default --keep

demo-stop: $(STAMP)
	$(BIN)/serverless-karpenter simulate --stop

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy layers/core/python/serverless_karpenter simulator/serverless_karpenter_sim cli/serverless_karpenter_cli functions infra app.py

# pytest exits 5 when it collected no test; like every other non-zero exit, that fails the target.
test: lint typecheck
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal --timeout 600 --durations 25 tests

unit: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) tests/unit

# Stops the demo's simulator first: without its env file, nothing would find it to stop it.
clean:
	if [ -x $(BIN)/serverless-karpenter ]; then $(BIN)/serverless-karpenter simulate --stop; fi
	rm -rf cdk.out .serverless-karpenter .pytest_cache .mypy_cache .ruff_cache

-include Makefile.infra

# The infrastructure targets need the project installed first.
synth cfn-lint dependency-layer: | $(STAMP)
