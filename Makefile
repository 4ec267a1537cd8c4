# attnload: `make demo` runs the GQA-vs-MLA demo, `make test` runs the test suite.
# Both install what they need into .venv first (Python >= 3.11).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-acceptance test-fast lint bench bench-quick deploy-gen dashboards test-image observe clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnload demo

test: $(STAMP)
	$(BIN)/ruff check src tests bench locustfiles
	$(BIN)/pytest -q -rfEs -m "not bimodal"

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
	rm -rf $(VENV) results .pytest_cache
