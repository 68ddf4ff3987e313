# Fresh machine: `make demo` (main job) and `make test` (the test suite). Each makes its
# own virtualenv in .venv from pyproject.toml and constraints.txt; nothing else is assumed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the clean task pods' package index (sandbox/wheelhouse.py): what compiled/ installs, pinned by constraints.txt
WHEELS := $(VENV)/wheelhouse/wheelhouse.json

.PHONY: venv demo test lint bench clean

# The project's own modules byte-compiled (no-op when current): where PYTHONDONTWRITEBYTECODE=1
# (this machine, CI) nothing writes them, and every process that imports them (each CLI run,
# kfp.local task, sandbox) would compile them again: about 0.2 CPU-s for the sandbox alone.
PYC := $(BIN)/python -m compileall -q -j 0 runtime sandbox pipelines components tests benchmarks

venv: $(STAMP) $(WHEELS)

WHEELHOUSE := $(BIN)/python -m kfp_ray_sandbox.wheelhouse --compiled compiled --constraints constraints.txt --out $(VENV)/wheelhouse --warm

# The long install is one pip, on one core: the wheelhouse, which needs only PyYAML and the
# sandbox's own modules (installed first, without their dependencies), builds on the other
# core meanwhile. The full install then finds the editable sandbox there and adds its dependencies.
$(STAMP): pyproject.toml sandbox/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt --no-deps PyYAML -e ./sandbox
	$(WHEELHOUSE) & wheels=$$!; \
	  $(BIN)/python -m pip install -q -c constraints.txt -e '.[test]' || { kill $$wheels; wait; exit 1; }; \
	  wait $$wheels
	touch $(STAMP)
	touch $(WHEELS)

$(WHEELS): $(STAMP) constraints.txt $(wildcard compiled/*.yaml compiled/components/*.yaml compiled/components/*/*.yaml)
	$(WHEELHOUSE)

demo: $(STAMP) $(WHEELS)
	$(PYC)
	$(BIN)/kfp-ray run xgboost_tune --local

bench: $(STAMP) $(WHEELS)
	$(PYC)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check .

# The browser check's install (apt-get, npm: mostly waiting on the network and the disk) runs
# beside the venv's (pip: one core), not after it.
test:
	tools/install-browser-check & browser=$$!; \
	  $(MAKE) --no-print-directory venv || { wait $$browser; exit 1; }; \
	  wait $$browser
	$(BIN)/ruff check .
	$(PYC)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
