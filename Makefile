# Two entry points for a fresh clone: `make demo` and `make test`.
# Both create .venv with Python >= 3.11 and install the project (editable) with its dev tools.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Packages whose code is linted and type-checked by `make test`.
CORE   := agent placement_service scheduler_plugin

.PHONY: demo test lint typecheck pytest hadoop-tier protos bench dist clean hadoop

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

# Real Apache Hadoop for the integration tier (tests/hadoop): every version's jars from Maven Central
# into .cache/hadoop-<version>/ (the second run is offline). `make test` runs it when a JDK and Maven
# exist; without them tests/hadoop skips, or fails under CI=true.
HADOOP_TOOLS := $(shell command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && echo yes)

hadoop: $(STAMP)
	$(BIN)/python -m scheduler_plugin.testbed.versions

# The Python suite, in two processes (pytest-xdist; the tests are independent), then the real-Hadoop
# tier alone (its clusters need the machine's cores to themselves), one process per Hadoop version
# (one worker per version, so its cluster is started once: tests/hadoop/conftest.py).
pytest: $(STAMP)
	$(BIN)/pytest -q -n 2 --ignore=tests/hadoop --durations=20

hadoop-tier: $(STAMP) $(if $(HADOOP_TOOLS),hadoop)
	$(BIN)/pytest -q -n 2 tests/hadoop --durations=15

test: lint typecheck pytest hadoop-tier

# The release artifacts (wheel and sdist) into dist/; CI builds them after the tests.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

clean:
	rm -rf $(VENV) demo-out dist build .pytest_cache .mypy_cache .ruff_cache
