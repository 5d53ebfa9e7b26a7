# `make demo` and `make test` build .venv from nothing when it is missing or older than
# pyproject.toml, then run. Only Python 3.11 and make are needed on the machine.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-gpu lint format clean venv docs

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python -m sparsetir_py.demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/python -m pytest -n 2 -q

# `make test-gpu`: every CUDA kernel the project generates, on a real GPU against scipy
# (tests/gpu), then a short CUDA bench against cuSPARSE and torch (bench/cuda_quick.py). It runs
# with the machine's own python3 and no install (PYTHONPATH=.; numba, numba-cuda, scipy and
# pytest needed; cupy and torch where present) and writes test-gpu.md/.json and
# bench-cuda.md/.json under $SPARSETIR_REPORT_DIR (default gpu-report/). Without a GPU both
# parts skip with the reason (status 0). `make test` runs none of it (tests/gpu skips itself).
GPU_PYTHON ?= python3
# Compiling the kernels dominates: 93 s with 8 pytest-xdist workers on the H200 machine (16
# cores), several times that in one process. With 12 workers, 2-3 SDDMM tests' workers crashed
# without a traceback in both runs (those tests pass alone; no crash in the run with 8).
GPU_TEST_WORKERS ?= 8
SPARSETIR_REPORT_DIR ?= gpu-report
export SPARSETIR_REPORT_DIR

test-gpu:
	@mkdir -p "$(SPARSETIR_REPORT_DIR)"
	SPARSETIR_TEST_GPU=1 PYTHONPATH=. $(GPU_PYTHON) -m pytest -q -p no:cacheprovider --confcutdir=tests/gpu \
		-o addopts="-ra" $$($(GPU_PYTHON) -c "import xdist" 2>/dev/null && echo "-n $(GPU_TEST_WORKERS)") \
		tests/gpu; status=$$?; \
	PYTHONPATH=. $(GPU_PYTHON) -m bench.cuda_quick || status=1; \
	echo "report: $(SPARSETIR_REPORT_DIR)/test-gpu.md, $(SPARSETIR_REPORT_DIR)/bench-cuda.md"; \
	test $$status -eq 0 -o $$status -eq 5

# The documentation (Sphinx, docs/): HTML in docs/_build/html, warnings are errors.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info docs/_build
