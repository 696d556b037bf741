# The two quick-start commands: `make demo` (install + the main job) and `make test` (install + the suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.videorl-installed
PYTEST_ARGS ?=

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

# The suite runs on JOBS processes (pytest-xdist); tests that start a Ray runtime share one of them
# (xdist_group "ray"), and tests marked serial, which watch machine-wide state, run alone afterwards.
# Both parts always run; the target fails if either did (pytest's 5, nothing selected, is no failure).
JOBS ?= 2
PARALLEL := -n $(JOBS) --dist loadgroup

unit: install
	status=0; \
	$(BIN)/pytest $(PARALLEL) -m "not serial" $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/pytest -m serial $(PYTEST_ARGS) || { s=$$?; [ $$s -eq 5 ] || status=$$s; }; \
	exit $$status

test: lint typecheck unit

# The developers' fast subset: every test not marked slow (a test over ~10 s is marked; CI runs all).
test-fast: install
	status=0; \
	$(BIN)/pytest $(PARALLEL) -m "not slow and not serial" $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/pytest -m "serial and not slow" $(PYTEST_ARGS) || { s=$$?; [ $$s -eq 5 ] || status=$$s; }; \
	exit $$status

clean-venv:
	rm -rf $(VENV)
