# Every target bootstraps its own virtual environment from the lock file.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: up test test-fast bench sim-report venv clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

up: $(STAMP)
	$(VENV)/bin/corral up --nodes 2 --gpus-per-node 4

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) bench/run_all.py

sim-report: $(STAMP)
	$(PY) -m corral.sim.suite reports

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
