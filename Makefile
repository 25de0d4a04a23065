# Every target bootstraps its own virtual environment from the lock file.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The native front-end of sbatch, squeue, sacct, scancel and corral (docs/decisions/0021-native-front-end.md),
# put in place of their console scripts; rebuilt when its source changes or pip wrote the scripts again.
FRONT := $(VENV)/libexec/corral/.front-installed
FRONT_SOURCES := $(wildcard src/corral/slurm/front.c src/corral/slurm/build_front.py src/corral/slurm/front.py)

.PHONY: up test test-fast check bench sim-report chaos venv clean

# `make up` settings: the controller's port (corral up records it in ~/.config/corral/cluster.json, where
# every corral and Slurm command finds it), the simulated nodes and the GPUs of each.
PORT = 6817
NODES = 2
GPUS = 4

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || \
		{ echo "corral needs Python >= 3.11; '$(PYTHON)' is $$($(PYTHON) -V 2>&1): run make PYTHON=python3.11 ..." >&2; exit 1; }
	@echo "creating $(VENV) from requirements.lock (first run only, about 2 minutes and 1.2 GB)..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)
	@echo "$(VENV) is ready"

$(FRONT): $(STAMP) $(FRONT_SOURCES)
	$(PY) -m corral.slurm.build_front
	mkdir -p $(dir $(FRONT)) && touch $(FRONT)

# The native task leader (decision 0022), built with the system C compiler beside its source: every
# target that runs an agent needs it. Linked statically where the C library allows (no dynamic loader
# at each of its starts: a tenth of a task's start), else dynamically.
LEADER := src/corral/agent/corral-task-leader
LEADER_CFLAGS = -O2 -Wall -Wextra
$(LEADER): src/corral/agent/task_leader.c
	$(CC) $(LEADER_CFLAGS) -static -o $@ $< -lm 2>/dev/null || $(CC) $(LEADER_CFLAGS) -o $@ $< -lm
venv up test test-fast bench chaos: $(LEADER)

venv: $(FRONT)

up: $(FRONT)
	$(VENV)/bin/corral up --nodes $(NODES) --gpus-per-node $(GPUS) --port $(PORT)

test: $(FRONT)
	$(PY) -m pytest -q

test-fast: $(FRONT)
	$(PY) -m pytest -q -m "not slow"

# Lint, types and import rules (configured in pyproject.toml); tests/test_architecture.py holds the import
# rules that import-linter cannot state.
check: $(FRONT)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider tests/test_architecture.py

bench: $(FRONT)
	$(PY) bench/run_all.py

sim-report: $(FRONT)
	$(PY) -m corral.sim.suite reports

# The fault suite: FAULTS faults injected into real clusters (CONTROLLERS controllers on PostgreSQL, each
# daemon on a virtual host of its own, so partitions too: needs root) under a job load; the report's
# violations must be 0 (tests/chaos/run.py). CI runs a short one in the test suite.
FAULTS = 200
CONTROLLERS = 2
CHAOS_ARGS = --netns
chaos: $(FRONT)
	$(PY) -m tests.chaos.run --faults $(FAULTS) --controllers $(CONTROLLERS) $(CHAOS_ARGS) --json chaos-report.json

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info $(LEADER)
