# The two quick-start commands: `make demo` (install + the main job) and `make test` (install + the suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.videorl-installed
PYTEST_ARGS ?=
# `make unit` and `make test-fast` run on this many pytest-xdist workers (each module on one worker,
# the modules with the most slow tests first: conftest.py)
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --no-loadscope-reorder

.PHONY: install demo test test-fast lint typecheck unit clean-venv

$(STAMP): requirements/cpu.txt scripts/setup-env.sh core/pyproject.toml plugins/rewards/pyproject.toml plugins/benchmarks/pyproject.toml plugins/models/pyproject.toml
	bash scripts/setup-env.sh $(VENV)
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/videorl demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

test: lint typecheck unit

# The developers' fast subset: every test not marked slow (a test over ~10 s is marked; CI runs all).
test-fast: install
	$(BIN)/pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
