# serverless-karpenter: `make demo` runs the local simulation, `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
# Three workers on CI's two cores: the simulations hand over between threads and wait on subprocesses,
# leaving a core idle an eighth of the time with two.
PYTEST_WORKERS ?= 3

.PHONY: install lock upgrade layer-requirements demo demo-keep demo-stop test lint typecheck unit clean
.DEFAULT_GOAL := demo

# Every install comes from uv.lock, so a clean checkout builds the same thing today and next year. uv
# itself is bootstrapped at the version the lock pins (uv is a dev dependency), and `uv sync --locked`
# then makes the venv exactly the lock. Byte code is compiled at install: where PYTHONDONTWRITEBYTECODE
# is set (as on CI), every Python process would otherwise compile each module it imports (~2 s each for
# the kubernetes client's 846 model files).
UV := $(BIN)/uv
LOCKED_UV_VERSION = $(shell $(PYTHON) -c "import tomllib; print(next(p['version'] for p in tomllib.load(open('uv.lock', 'rb'))['package'] if p['name'] == 'uv'))")
export UV_PROJECT_ENVIRONMENT := $(VENV)
LAYER_REQUIREMENTS := layers/dependencies/requirements.txt

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'uv==$(LOCKED_UV_VERSION)'

$(STAMP): pyproject.toml uv.lock | $(UV)
	@$(UV) lock --check --quiet --offline 2>/dev/null || $(UV) lock --check --quiet || { \
		echo "uv.lock does not match pyproject.toml: run 'make lock' to re-lock, then 'make test'." >&2; exit 1; }
	$(UV) sync --locked --all-extras --compile-bytecode --quiet --python $(BIN)/python
	touch $(STAMP)

# Re-resolves only what pyproject.toml changed; the layer's requirements are exported from the same lock.
lock: | $(UV)
	$(UV) lock
	$(MAKE) --no-print-directory layer-requirements

# Moves every dependency to its newest allowed version; then run `make test`.
upgrade: | $(UV)
	$(UV) lock --upgrade
	$(MAKE) --no-print-directory layer-requirements

# The dependency layer's pins: the runtime dependencies of uv.lock, with their hashes (no extras, no dev).
layer-requirements: | $(UV)
	{ echo "# Generated from uv.lock by \`make lock\`: the dependency layer's runtime packages. Do not edit."; \
	  $(UV) export --frozen --no-dev --no-emit-project --no-header --quiet --format requirements-txt; \
	} > $(LAYER_REQUIREMENTS)

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

TYPECHECKED := layers/core/python/serverless_karpenter simulator/serverless_karpenter_sim cli/serverless_karpenter_cli functions infra app.py
typecheck: $(STAMP)
	$(BIN)/mypy $(TYPECHECKED)

# pytest exits 5 when it collected no test; like every other non-zero exit, that fails the target.
# mypy (about a minute from a cold cache, as on CI) runs beside pytest rather than before it: the suite
# leaves a core idle about an eighth of the time (subprocesses, the simulators' threads handing over), and
# mypy fills it. Its report is printed after pytest's, and either failing fails the target.
MYPY_LOG := $(VENV)/mypy.log
test: lint
	@$(BIN)/mypy $(TYPECHECKED) > $(MYPY_LOG) 2>&1 & mypy_pid=$$!; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal --timeout 600 --durations 25 tests; pytest_rc=$$?; \
	wait $$mypy_pid; mypy_rc=$$?; \
	echo "$(BIN)/mypy $(TYPECHECKED)"; cat $(MYPY_LOG); \
	if [ $$pytest_rc -ne 0 ]; then exit $$pytest_rc; fi; exit $$mypy_rc

unit: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) tests/unit

# Stops the demo's simulator first: without its env file, nothing would find it to stop it.
clean:
	if [ -x $(BIN)/serverless-karpenter ]; then $(BIN)/serverless-karpenter simulate --stop; fi
	rm -rf cdk.out .serverless-karpenter .pytest_cache .mypy_cache .ruff_cache

-include Makefile.infra

# The infrastructure targets need the project installed first.
synth cfn-lint dependency-layer: | $(STAMP)
