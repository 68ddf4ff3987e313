# Fresh machine: `make demo` (main job) and `make test` (the test suite). Each makes its
# own virtualenv in .venv from pyproject.toml and constraints.txt; nothing else is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the clean task pods' package index (sandbox/wheelhouse.py): what compiled/ installs, pinned by constraints.txt
WHEELS := $(VENV)/wheelhouse/wheelhouse.json

.PHONY: venv demo test lint bench clean

venv: $(STAMP) $(WHEELS)

$(STAMP): pyproject.toml sandbox/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ./sandbox -e '.[test]'
	touch $(STAMP)

$(WHEELS): $(STAMP) constraints.txt $(wildcard compiled/*.yaml compiled/components/*.yaml compiled/components/*/*.yaml)
	$(BIN)/python -m kfp_ray_sandbox.wheelhouse --compiled compiled --constraints constraints.txt --out $(VENV)/wheelhouse --warm

demo: $(STAMP) $(WHEELS)
	$(BIN)/kfp-ray run xgboost_tune --local

bench: $(STAMP) $(WHEELS)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) $(WHEELS)
	$(BIN)/ruff check .
	tools/install-browser-check
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
