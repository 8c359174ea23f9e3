# The README's commands. `make compare` and `make test` set up .venv on first use.
# Where the pinned packages are already installed (e.g. a prepared GPU host): make test PY=python3
VENV ?= .venv
PY ?= $(VENV)/bin/python
KERNELS ?= k2 k4 fa4
# make test-gpu runs the tests in a pytest-xdist worker: a test that hangs past its time limit
# (tests/conftest.py) or crashes the process fails alone, and a fresh worker runs the rest.
GPU_ISOLATION ?= -n 1 --max-worker-restart=10
# make test spreads the tests over one pytest-xdist worker per core; work that several tests
# read (a csrc unit's compile, the site's build) runs once per run (tests/support.py run_once).
# Work stealing: a worker that runs out takes tests from the other's queue instead of idling
# behind one long compile at the end.
TEST_WORKERS ?= auto

.PHONY: setup compare test test-gpu lint inspect bench docs serve clean

$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -c constraints.txt -e ".[test,docs,model]"
	touch $@

setup: $(if $(filter $(VENV)/bin/python,$(PY)),$(VENV)/.installed)

compare: setup          ## measure on the GPU, or compile report + recorded H200 numbers without one
	$(PY) -m tools.compare $(KERNELS)

test: setup             ## CPU tests always; GPU tests too where CUDA is present (csrc built first)
	$(PY) -m tools.build_ext --if-stale
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test-gpu: setup
	$(PY) -m tools.build_ext --if-stale
	$(PY) -m pytest -q -m gpu $(GPU_ISOLATION)

lint: setup             ## ruff, with the rules in pyproject.toml
	$(PY) -m ruff check .

inspect: setup
	$(PY) -m tools.inspect

bench: setup
	$(PY) -m tools.bench --suite ladder

docs: setup
	$(PY) -m mkdocs build --strict

serve: setup
	$(PY) -m mkdocs serve

clean:
	rm -rf $(VENV) site .pytest_cache
