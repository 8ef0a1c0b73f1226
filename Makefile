# Two entry points for a fresh machine: `make run` (demo) and `make test` (every test).
# Every target sets up what it needs; the venv is rebuilt only when pyproject.toml changes, the
# ahead-of-time compiled kernels (setup.py, learning/aot.py) when a source they compile from does.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KERNELS := $(VENV)/.kernels-built
KERNEL_SOURCES := setup.py $(wildcard learning/*.py learning/encoders/*.py consumers/decoding/*.py)

.PHONY: run test lint unit integration e2e bench bench-deps kafka-deps soak system-deps clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP) $(KERNELS)

$(KERNELS): $(STAMP) $(KERNEL_SOURCES)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(KERNELS)

system-deps:
	bash scripts/system-deps.sh

bench-deps:
	bash scripts/bench-deps.sh

# Java 17, Maven and the Apache Kafka broker's jars (pinned in kafka-broker/pom.xml), cached
# outside the repository: the broker of the tests and benchmarks.
kafka-deps:
	PYTHON=$(PYTHON) bash scripts/kafka-deps.sh

run: $(KERNELS)
	$(BIN)/novikoff demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: $(KERNELS)
	$(BIN)/pytest learning consumers service tests/unit

integration: $(KERNELS) system-deps kafka-deps
	$(BIN)/pytest -m "not soak" tests/integration

e2e: $(KERNELS) system-deps kafka-deps
	$(BIN)/pytest tests/e2e

test: $(KERNELS) system-deps kafka-deps lint
	$(BIN)/pytest -m "not soak"

bench: $(KERNELS) bench-deps kafka-deps
	$(BIN)/python -m bench

soak: $(KERNELS) system-deps bench-deps kafka-deps
	$(BIN)/pytest -m soak tests

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis test-artifacts
	find learning -name '*.nbi' -delete -o -name '*.nbc' -delete
	find learning consumers -name '_aot_kernels*.so' -delete
