# The two quick-start commands: `make demo` (install + the main job) and `make test` (install + the suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.videorl-installed
PYTEST_ARGS ?=

.PHONY: install demo test lint typecheck unit clean-venv

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
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck unit

clean-venv:
	rm -rf $(VENV)
