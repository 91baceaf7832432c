# Two entry points for a fresh clone: `make demo` and `make test`.
# Both create .venv with Python >= 3.11 and install the project (editable) with its dev tools.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Packages whose code is linted and type-checked by `make test`.
CORE   := agent placement_service scheduler_plugin

.PHONY: demo test lint typecheck pytest protos bench dist clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (found %s); set PYTHON=python3.11" % sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/harvest demo --out demo-out

lint: $(STAMP)
	$(BIN)/ruff check $(CORE) tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy $(CORE)

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

# The release artifacts (wheel and sdist) into dist/; CI builds them after the tests.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

clean:
	rm -rf $(VENV) demo-out dist build .pytest_cache .mypy_cache .ruff_cache
