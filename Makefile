# attnload: `make demo` runs the GQA-vs-MLA demo, `make test` runs the test suite.
# Both install what they need into .venv first (Python >= 3.11).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-pure test-acceptance test-fast lint bench bench-quick deploy-gen dashboards test-image observe clean

$(STAMP): pyproject.toml setup.py src/attnload/_fastpath.c  # a changed C file rebuilds the extension
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnload demo

test: $(STAMP)
	$(BIN)/ruff check src tests bench locustfiles
	$(BIN)/pytest -q -rfEs -m "not bimodal"

# The client, measure and core e2e tests again on the pure-Python per-chunk path (the fallback when
# the C extension was not built; docs/performance.md). A few minutes; .ci/run runs it after `make test`.
test-pure: $(STAMP)
	ATTNLOAD_PURE_PYTHON=1 $(BIN)/pytest -q -rfEs tests/test_client.py tests/test_client_budgets.py \
		tests/test_measure.py tests/e2e/test_core_e2e.py

test-acceptance: $(STAMP)
	$(BIN)/pytest -q -rfEs -m acceptance

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not browser and not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench locustfiles

bench: $(STAMP)
	$(BIN)/python bench/client_cost.py

bench-quick: $(STAMP)
	$(BIN)/python bench/client_cost.py --quick

deploy-gen: $(STAMP)
	$(BIN)/python -m attnload.cluster.generate

test-image: $(STAMP)
	bash scripts/test-image.sh

dashboards: $(STAMP)
	$(BIN)/python -m attnload.observe.dashboards

observe: $(STAMP)
	$(BIN)/python -m attnload.observe.prometheus --master 127.0.0.1:9646 --sim 127.0.0.1:8000 --port 9090

clean:
	rm -rf $(VENV) results .pytest_cache build src/attnload/*.so
