# The two commands a new user needs: `make demo` and `make test`. Each creates the
# virtual environment on first use and installs what it needs.
# It also works from another directory (make -f PATH/Makefile demo): the virtual
# environment stays in the checkout, and what a command writes lands in the current one.
ROOT := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
PYTHON ?= python3
VENV ?= $(ROOT)/.venv
BIN := $(VENV)/bin

.PHONY: demo test test-all lint example-service bench bench-postgres bench-checker check diagrams campaign campaign-long campaign-job campaign-job-readback campaign-dedup-stalls clean

$(BIN)/.installed: $(ROOT)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '$(ROOT)[dev]'
	touch $@

demo: $(BIN)/.installed  ## dispatch drafts with concurrent, crashing workers on a SQLite file
	$(BIN)/claimfsm demo

test: $(BIN)/.installed  ## the quick suite, on every core; PostgreSQL tests skip (one line) without a server
	$(BIN)/python -m pytest -q -m "not slow" -n auto --dist loadfile

test-all: $(BIN)/.installed  ## everything, including the slow suites (what CI runs)
	$(BIN)/python -m pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(BIN)/.installed  ## SQLite figures
	$(BIN)/python $(ROOT)/bench/bench_sqlite.py

bench-checker: $(BIN)/.installed  ## model-checker figures
	$(BIN)/python $(ROOT)/bench/bench_checker.py

example-service: $(BIN)/.installed  ## the asyncio example service: 12 drafts over HTTP, then stop
	$(BIN)/python $(ROOT)/examples/dispatch_service.py --demo-receiver fencing --seed 12 --until-idle

check: $(BIN)/.installed  ## model-check the claim protocol (in both checker worlds), the job lifecycle and every known-wrong design
	$(BIN)/claimfsm check
	$(BIN)/claimfsm check job --workers 3
	$(BIN)/claimfsm check --workers 2 --replay
	$(BIN)/claimfsm check --workers 2 --remote dedup --drafts 1 --epochs 2 --replay
	for design in $$($(BIN)/claimfsm check --list | cut -d' ' -f1); do \
		$(BIN)/claimfsm check --design $$design --workers 2 > /dev/null; \
		test $$? -eq 1 || { echo "design $$design was not caught"; exit 1; }; \
		echo "$$design: violation found, as it must be"; \
	done
	$(BIN)/claimfsm check --world lifecycle --workers 2 --replay
	for design in $$($(BIN)/claimfsm check --list | cut -d' ' -f1 | grep -v '^job-'); do \
		$(BIN)/claimfsm check --design $$design --world lifecycle --workers 2 > /dev/null; \
		test $$? -eq 1 || { echo "design $$design was not caught in the lifecycle world"; exit 1; }; \
		echo "$$design: violation found in the lifecycle world too"; \
	done

diagrams: $(BIN)/.installed  ## regenerate diagrams/ from the declarations in specs/
	$(BIN)/claimfsm diagram --out diagrams

bench-postgres: $(BIN)/.installed  ## PostgreSQL figures (server from CLAIMFSM_PG_URL)
	$(BIN)/python $(ROOT)/bench/bench_postgres.py

campaign: $(BIN)/.installed  ## a short crash and fault campaign: worker processes, SIGKILL, a remote process
	$(BIN)/claimfsm campaign --dispatches 30 --seconds 300

campaign-long: $(BIN)/.installed  ## the long campaigns RELIABILITY.md quotes (PostgreSQL: restarts the local server)
	$(BIN)/claimfsm campaign --backend sqlite --remote fencing --seconds 180 --dir campaign/sqlite-fencing
	$(BIN)/claimfsm campaign --backend postgresql --remote fencing --seconds 180 --dir campaign/postgresql-fencing
	$(BIN)/claimfsm campaign --backend sqlite --remote dedup --stall-probability 0 --seconds 60 --dir campaign/sqlite-dedup
	$(BIN)/claimfsm campaign --backend postgresql --remote dedup --stall-probability 0 --seconds 60 --dir campaign/postgresql-dedup
	$(BIN)/claimfsm campaign --backend sqlite --remote plain --targets 16 --seconds 60 --dir campaign/sqlite-plain

campaign-job: $(BIN)/.installed  ## the job lifecycle's campaigns RELIABILITY.md quotes (PostgreSQL: restarts the local server)
	$(BIN)/claimfsm campaign job --backend sqlite --dispatches 200 --dir campaign/job-sqlite
	$(BIN)/claimfsm campaign job --backend postgresql --dispatches 200 --dir campaign/job-postgresql

campaign-job-readback: $(BIN)/.installed  ## the finding: requeue on "not running" against an executor that cannot fence (a sample: exit 1 when it meets a stalled run), and the job against it
	-$(BIN)/claimfsm campaign job-requeue_on_readback --remote dedup --stall-probability 0.1 --dispatches 100 --dir campaign/job-readback-dedup
	$(BIN)/claimfsm campaign job --remote dedup --stall-probability 0.1 --dispatches 100 --dir campaign/job-dedup

campaign-dedup-stalls: $(BIN)/.installed  ## the finding: with stalled workers a deduping remote sees overlaps (exit 1 expected)
	-$(BIN)/claimfsm campaign --backend sqlite --remote dedup --seconds 60 --dir campaign/sqlite-dedup-stalls

clean:
	rm -rf $(VENV) build dist campaign .pytest_cache .mypy_cache .ruff_cache .hypothesis
