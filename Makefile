# Tether: `make run` starts the whole system on embedded defaults; `make test` runs every test.
SHELL := /bin/bash
# uv from PATH, else a private copy installed with pip on first use: a fresh machine needs only
# Python and make (`make run` -> gen -> setup installs everything else).
UV_LOCAL := $(CURDIR)/.tools/uv/bin/uv
UV ?= $(or $(shell command -v uv 2>/dev/null),$(UV_LOCAL))
UV_BOOTSTRAP := $(filter $(UV_LOCAL),$(UV))
PY := $(UV) run --frozen
# The generated code ships in tether-proto (libs/proto), whose wheel build (hatch_build.py)
# runs the same generator; `make gen` writes it into the source tree for the workspace, then
# writes the JS client's copy of the wire's names (clients/js/src/wire.generated.*, committed)
# from the same protos.
GEN_OUT := libs/proto/src
PROTOS := $(shell find proto -name '*.proto')
GEN_STAMP := libs/proto/src/tether/.generated
WIRE_PY := $(wildcard libs/proto/src/tether_proto/*.py)

.PHONY: test-fast setup gen lint fmt typecheck test test-deps run token bench bench-quick bench-langgraph chaos soak conformance clean buf-lint buf-breaking buf-baseline k8s-validate

setup: .venv/.synced node_modules/.installed

$(UV_LOCAL):
	@echo "uv not found on PATH: installing a private copy into .tools/uv"
	python3 -m pip install --quiet --disable-pip-version-check --target $(CURDIR)/.tools/uv uv \
		|| { echo "could not install uv with pip; install it (https://docs.astral.sh/uv/) or python3-pip" >&2; exit 1; }

# --compile-bytecode: every installed module's .pyc written once here, so that no process
# compiles LangGraph, grpc or aiohttp from source again (a shell with PYTHONDONTWRITEBYTECODE set
# never writes them, and each cold process paid for it: 4.7 -> 3.1 s CPU to import the runtime,
# the gateway and LangGraph here).
.venv/.synced: uv.lock pyproject.toml $(wildcard */*/pyproject.toml) | $(UV_BOOTSTRAP)
	$(UV) sync --frozen --all-packages --compile-bytecode
	@touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

gen: $(GEN_STAMP)

$(GEN_STAMP): $(PROTOS) $(WIRE_PY) .venv/.synced
	rm -rf $(GEN_OUT)/tether
	$(PY) python -m grpc_tools.protoc -Iproto --python_out=$(GEN_OUT) --pyi_out=$(GEN_OUT) \
		--grpc_python_out=$(GEN_OUT) $(PROTOS)
	@touch $(GEN_OUT)/tether/runtime/v1/py.typed
	$(PY) python -m tether_proto.wire_js clients/js/src
	@touch $@

buf-lint: node_modules/.installed
	npx buf lint

# The released wire API, as a buf image committed to the repository: every change is checked
# against it, on any clone (a fresh CI clone has nothing else to compare with). A breaking change
# goes into a new version package (tether.runtime.v2), never into v1. `make buf-baseline` writes
# the image again: run it only when releasing (docs/DESIGN.md, "The wire API and its baseline").
BUF_BASELINE := proto/baseline/tether-v1.binpb

buf-breaking: node_modules/.installed
	npx buf breaking --against $(BUF_BASELINE)

buf-baseline: node_modules/.installed
	npx buf build --exclude-source-info -o $(BUF_BASELINE)

lint: gen buf-lint buf-breaking
	$(PY) ruff check .
	$(PY) ruff format --check .
	$(PY) lint-imports --no-cache
	$(MAKE) --no-print-directory typecheck

typecheck: gen
	$(PY) mypy libs/proto/src/tether_proto libs/client/src/tether_client libs/common/src/tether_common cli/src/tether_cli libs/sdk/src/tether_sdk agents/opspilot/src/tether_opspilot examples/mailer/src/tether_mailer libs/langgraph/src/tether_langgraph examples/lgops/src/tether_lgops services/runtime/src/tether_runtime services/gateway/src/tether_gateway deploy/k8s/tether_k8s deploy/k8s/validate.py

fmt: .venv/.synced
	$(PY) ruff check --fix .
	$(PY) ruff format .

# Everything the tests need that is not Python or Node: Chromium, curl, jq, pgbouncer, redis-server, faketime
# and redis-cli (Debian packages, installed when root or passwordless sudo can; otherwise it stops
# before any test with the one command to run).
test-deps:
	@$(CURDIR)/.ci/ensure_test_deps

# Four pytest workers (pytest-xdist), a test file each at a time, on 2 cores: while one waits on
# the processes it started (a lease to expire, a browser, a kill), the others have the CPU. The
# files are handed out in the order conftest.py gives (the longest first); xdist's own reordering
# by number of tests per file is off, since it sent the longest files (few tests each) last.
# Each worker is its own session: its own fresh database and shared runtime.
TEST_WORKERS ?= 4
FAST_WORKERS ?= 2
# The tests find uv on PATH (test_python_client builds the client's wheel with it): the one this
# Makefile uses, also the private copy in .tools/uv that a fresh machine gets.
TEST_PATH := $(dir $(UV)):$(PATH)
# PYTHONDONTWRITEBYTECODE is cleared for the tests: with it, each of the suite's processes
# compiled the repository's own modules again and pytest rewrote every test module's asserts
# again (its cache is a .pyc); __pycache__ is ignored by git.
test: test-deps gen node_modules/.installed
	PYTHONDONTWRITEBYTECODE= PATH="$(TEST_PATH)" $(PY) pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The tests that start no process (every test not marked `process`, outside the integration
# suites), in two workers: under 90 s here. tether_testkit.no_processes fails any of
# them that starts one, so the marks stay true. `make test` runs these and all the rest.
FAST_TESTS := libs/proto/tests libs/client/tests libs/common/tests libs/sdk/tests libs/langgraph/tests \
	services/gateway/tests services/runtime/tests cli/tests tests/deploy tests/docs
test-fast: gen
	PYTHONDONTWRITEBYTECODE= $(PY) pytest -q --durations=10 -n $(FAST_WORKERS) --dist loadfile -p tether_testkit.no_processes \
		-m "not process" $(FAST_TESTS)

run: gen
	$(PY) tether dev

# A bearer token without uv on PATH: `make token USER=alice` (SCOPE=service for a service).
TOKEN_FOR := $(if $(filter command line,$(origin USER)),$(USER),alice)
SCOPE ?= user
token: .venv/.synced
	@$(CURDIR)/.venv/bin/tether token --user $(TOKEN_FOR) --scope $(SCOPE)

# Benchmarks (bench/README.md): real processes, a separate load generator, one JSON document.
# Stores: TETHER_BENCH_DATABASE_URL (admin DSN), TETHER_BENCH_REDIS_URL.
# ARGS: more options, e.g. `make bench ARGS="--only fanout --redis cluster"` (bench/README.md).
bench: gen
	@PYTHONPATH=$(CURDIR)/bench $(PY) python -m tether_bench.main --full $(ARGS)

bench-quick: gen
	@PYTHONPATH=$(CURDIR)/bench $(PY) python -m tether_bench.main --quick $(ARGS)

# The same LangGraph graph on LangGraph's own dev server and on Tether (bench/README.md); not in
# CI: it installs LangGraph's server into .tether/bench/langgraph-venv on first use.
bench-langgraph: gen
	@PYTHONPATH=$(CURDIR)/bench $(PY) python -m tether_bench.langgraph_compare $(ARGS)

# Its processes start cold, as in production: a forked one (tether_cli.forkserver) pays copy-on-write
# faults on its inherited heap while it serves, which slowed the 220 reconnects after a gateway
# kill (p50 1.46-1.73 s forked, 1.09 s cold). Inside `make test` the fault suite forks: it checks
# the zeros there, not the recovery times.
chaos: gen
	TETHER_TEST_FORKSERVER=0 TETHER_CHAOS_SCALE=full $(PY) pytest -q -m chaos tests/integration

# The soak (docs/capacity.md, "Soak"): SOAK_MINUTES (default 30) of mixed load on two runtimes and
# two gateways; every process's RSS, open files, DB connections, Redis memory and loop lag sampled
# every 10 s; a slope over the second half above its bound, or any history checker violation,
# fails it. Stores as the tests find them (TETHER_TEST_DATABASE_URL, TETHER_TEST_REDIS_URL).
SOAK_MINUTES ?= 30
soak: gen
	TETHER_TEST_FORKSERVER=0 SOAK_MINUTES=$(SOAK_MINUTES) PYTHONPATH=$(CURDIR)/tests:$(CURDIR)/tests/integration \
		$(PY) python -m chaos.soak

# `tether conformance` on both shipped agents: every write tool SIGKILLed before, during and after
# its call. Postgres from DATABASE_URL (a DSN allowed to create databases), Redis from REDIS_URL.
# The mailer sends through a real SMTP sink on its own ports, where its effects are counted.
conformance: gen
	TETHER_DB_POOL_SIZE=4 $(PY) tether conformance opspilot --effects tether_opspilot.effects:count
	@set -e; export MAILER_SMTP_PORT=18025 MAILER_SINK_HTTP=127.0.0.1:18026 \
	  TETHER_AGENTS=tether_mailer:agent TETHER_DB_POOL_SIZE=4; \
	$(PY) python -m tether_mailer.mailbox & sink=$$!; trap 'kill $$sink' EXIT; \
	$(PY) tether conformance mailer --effects tether_mailer.effects:count

# Render every deploy/k8s overlay (kubectl kustomize) and validate it offline against pinned
# Kubernetes schemas plus Tether's operational contract.
k8s-validate: .venv/.synced
	$(PY) python deploy/k8s/validate.py --out .tether/k8s-rendered

clean:
	rm -rf .venv node_modules $(GEN_OUT)/tether .tether
