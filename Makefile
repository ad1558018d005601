# gpufleet: `make run` runs the main job on the simulated fleet; `make test` runs every test.
# Both create .venv if missing, install the pinned requirements-dev.txt (the runtime
# requirements.txt plus the test tools) with -c constraints.txt (and gpufleet itself, editable),
# set AIRFLOW_HOME to .airflow/, migrate Airflow's metadata DB and create gpufleet's ledger.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
export AIRFLOW_HOME := $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION := False
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN := sqlite:///$(AIRFLOW_HOME)/airflow.db
export PATH := $(BIN):$(PATH)
# pytest workers (pytest-xdist): each test file on one worker, so module fixtures set up once,
# handed out in collection order with the files of end-to-end (slow) tests first
# (tests/conftest.py), so that none of those starts last and runs alone at the end.
# Three on two cores: the live Airflow and the subprocess tests wait on other processes, and a
# third worker runs meanwhile (the whole suite 531 s on two, 470-510 s on three: docs/PERFORMANCE.md);
# TEST_WORKERS=0 runs in one process
TEST_WORKERS ?= 3

.PHONY: setup run up test check lint bench clean constraints

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/activate requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -r requirements-dev.txt
	$(BIN)/pip install -q -c constraints.txt --no-deps -e .
	touch $@

$(AIRFLOW_HOME)/.migrated: $(VENV)/.installed
	mkdir -p $(AIRFLOW_HOME)
	$(BIN)/airflow db migrate > $(AIRFLOW_HOME)/db-migrate.log 2>&1 || (cat $(AIRFLOW_HOME)/db-migrate.log; exit 1)
	touch $@

# the ledger: created here, once (`gpufleet ledger init`: the configured one, else the local
# default $(AIRFLOW_HOME)/gpufleet/ledger.db); nothing else creates a configured ledger
$(AIRFLOW_HOME)/.ledger-init: $(AIRFLOW_HOME)/.migrated
	$(BIN)/gpufleet ledger init
	touch $@

setup: $(AIRFLOW_HOME)/.migrated $(AIRFLOW_HOME)/.ledger-init

run: setup
	$(BIN)/python scripts/run_fleet.py

# `make up` serves the UI, the REST API and /gpufleet on 127.0.0.1 only; `make up HOST=0.0.0.0`
# serves every interface (only the command line sets it: a HOST in the environment does not).
# Ctrl-C (or SIGTERM) stops everything airflow standalone started.
HOST := 127.0.0.1
up: setup
	@echo "Airflow UI: http://$(HOST):8080  (user admin; password in $(AIRFLOW_HOME)/simple_auth_manager_passwords.json.generated)"
	$(BIN)/python scripts/airflow_up.py --host $(HOST) -- $(BIN)/airflow standalone

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd plugins && $(BIN)/lint-imports --no-cache ../pyproject.toml
	$(BIN)/mypy

test: setup lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# `make check`: the fast loop before a commit (CONTRIBUTING.md), lint plus the unit tiers that
# need no Airflow metadata DB, no ledger database, no cloud fake and no live server (pure domain
# and parsing, manifests, the architecture rules, the catalog, the node lifecycle machine): under
# 2 minutes on two cores (docs/PERFORMANCE.md). CHECK_SKIP leaves out the long files of those
# folders, which stay in `make test`: the transition machine's 600 examples (about 14 s), the
# gate's and drift's Hypothesis and simulated-history searches. It migrates nothing (no `setup`).
# `make test` still runs every test; tests/test_make_check.py keeps both lists to files that
# exist and CHECK_TESTS to files that set up nothing slow.
CHECK_TESTS := tests/domain tests/parsing tests/manifests tests/architecture \
	tests/config/test_catalog.py tests/config/test_catalog_check.py \
	tests/config/test_catalog_gpu_models.py tests/test_make_check.py
CHECK_SKIP := tests/domain/test_transition_machine.py tests/domain/test_gate.py \
	tests/domain/test_gate_health.py tests/domain/test_drift.py
CHECK_WORKERS ?= 2
check: lint
	$(BIN)/pytest -q -n $(CHECK_WORKERS) --dist loadfile $(CHECK_TESTS) \
		$(addprefix --ignore=,$(CHECK_SKIP))

bench: setup  # each prints its figures and exits 1 when it misses its target; all of them run
	-$(BIN)/python -m bench.parse_time
	-$(BIN)/python -m bench.catalog_load
	-$(BIN)/python -m bench.log_scan
	-$(BIN)/python -m bench.gate_latency
	-$(BIN)/python -m bench.fault_campaign
	-$(BIN)/python -m bench.health_campaign
	-$(BIN)/python -m bench.remediation_campaign
	-$(BIN)/python -m bench.topology_campaign
	-$(BIN)/python -m bench.event_campaign
	-$(BIN)/python -m bench.event_storm --pools 200 --exporter-interval-s 0  # the watches; 2,000 pools: docs/PERFORMANCE.md
	-$(BIN)/python -m bench.event_storm --pools 40 --quiet-s 600  # with the interval readings (their cost)
	-$(BIN)/python -m bench.fleet_page
	-$(BIN)/python -m bench.nightly_scale --pools 100  # needs PostgreSQL and Redis

constraints:  # regenerate the full pin set from a clean install of requirements-dev.txt
	rm -rf $(CURDIR)/.venv-constraints
	$(PYTHON) -m venv $(CURDIR)/.venv-constraints
	$(CURDIR)/.venv-constraints/bin/pip install -q -c constraints.txt -r requirements-dev.txt
	(echo "# Full pin set from a clean install of requirements-dev.txt (Python 3.11); regenerate with"; \
	 echo "#   make constraints"; $(CURDIR)/.venv-constraints/bin/pip freeze) > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(CURDIR)/.venv-constraints

clean:
	rm -rf $(AIRFLOW_HOME)
