# `make demo` and `make test` build .venv from nothing when it is missing or older than
# pyproject.toml, then run. Only Python 3.11 and make are needed on the machine.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint format clean venv docs

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
