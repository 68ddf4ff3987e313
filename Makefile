# Fresh machine: `make demo` (main job) and `make test` (the test suite). Each makes its
# own virtualenv in .venv from pyproject.toml and constraints.txt; nothing else is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv demo test lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml sandbox/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ./sandbox -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kfp-ray run xgboost_tune --local

bench: $(STAMP)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP)
	$(BIN)/ruff check .
	tools/install-browser-check
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
