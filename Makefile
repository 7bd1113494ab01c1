# Quick start: `make serve` and `make test`. Each target creates or reuses .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: venv serve test test-py test-ts test-types reference sim soak fuzz chaos clean bench bench-quick profile etcd chromium

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,test]'
	@touch $(STAMP)

venv: $(STAMP)

# In a terminal, request lines would bury the server's own messages: `make serve` keeps them out
# unless asked (LOG_REQUESTS=errors or all, or RUNSTATE_LOG_REQUESTS); `runstate serve` itself
# logs every request by default (docs/configuration.md).
LOG_REQUESTS ?= $(or $(RUNSTATE_LOG_REQUESTS),off)
serve: $(STAMP)
	$(VENV)/bin/runstate serve --log-requests $(LOG_REQUESTS) $(ARGS)

# The Python SDK's reference (docs/python-reference.md) from the docstrings, and pdoc's HTML pages
# into build/reference/ (git-ignored). `make test` checks it: every public name documented, the
# file current (tests/reference.py).
reference: $(STAMP)
	$(PY) -m tests.reference --html build/reference

# Three parts side by side, each one's output printed whole when it ends (much of the tests' time is
# waiting on servers, leases and etcd): the strict type check and the reference's check
# (`test-types`: tests/typecheck.py, mypy over the SDK, the kernel's actors/ and snapshots/, the
# server's server/, and the product page's examples; every public name of the SDK has a
# docstring), pytest (`test-py`) and the TypeScript SDK's suite (`test-ts`). Pytest runs four
# processes (more than the cores: most of a test's time is spent waiting), each taking a test file whole, or one seed of the simulation's batch (a class each),
# as it is free (tests/conftest.py says which go first), and lists the 25 slowest tests at the end.
# The console's browser tests (tests/console) drive Debian's Chromium: installed first when missing.
PYTEST_ARGS ?= -n 4 --dist loadscope --no-loadscope-reorder --durations=25
test: $(STAMP) $(TS_STAMP) etcd chromium
	$(MAKE) --no-print-directory -j3 --output-sync=target test-types test-py test-ts

test-types: $(STAMP)
	$(PY) -m tests.typecheck
	$(PY) -m tests.reference --check

test-py: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The cluster tests start real etcd members (tests/etcd.py): Debian's etcd-server, installed here
# when it is missing and this runs as root. Otherwise those tests are skipped, saying how to
# install it, except in CI (CI=true), where they fail.
ETCD_PACKAGES := etcd-server etcd-client
etcd:
	@if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing $(ETCD_PACKAGES) for the cluster tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q --no-install-recommends $(ETCD_PACKAGES) >/dev/null \
	      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $(ETCD_PACKAGES) >/dev/null; } \
	      || echo "make: could not install $(ETCD_PACKAGES): the cluster tests will say so"; \
	  else \
	    echo "make: etcd not found; the cluster tests need it: sudo apt-get install -y --no-install-recommends $(ETCD_PACKAGES)"; \
	  fi; \
	fi

# Chromium from Debian for the browser tests (tests/console; Playwright's own download cannot be
# used here): installed when missing and this runs as root. Otherwise the browser tests are
# skipped, saying how to install it, except in CI (CI=true), where they fail.
CHROMIUM ?= /usr/bin/chromium
chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing chromium for the browser tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q --no-install-recommends chromium >/dev/null \
	      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; } \
	      || echo "make: could not install chromium: the browser tests will say so"; \
	  else \
	    echo "make: $(CHROMIUM) not found; the browser tests need it: sudo apt-get install -y --no-install-recommends chromium"; \
	  fi; \
	fi

# The TypeScript SDK (typescript/): its dev dependencies from the lockfile (npm ci, again whenever
# package-lock.json changes), then the build and the Node tests against a real `runstate serve`.
TS := typescript
TS_STAMP := $(TS)/node_modules/.installed

$(TS_STAMP): $(TS)/package-lock.json $(TS)/package.json
	cd $(TS) && npm ci --no-audit --no-fund
	@touch $(TS_STAMP)

test-ts: $(STAMP) $(TS_STAMP)
	cd $(TS) && npm run build && npm test

# The deterministic simulation (tests/sim): SEEDS seeds, or replay one with SEED=n (`make test`
# runs the first 40 and the seeds that once found a defect).
SEEDS ?= 300
sim: $(STAMP)
	$(PY) -m tests.sim $(if $(SEED),--seed $(SEED),--seeds $(SEEDS))

# The schemathesis run (tests/server/test_openapi.py) with ten times the requests per operation
# that `make test` sends (EXAMPLES of each way; 10 in make test).
EXAMPLES ?= 100
fuzz: $(STAMP)
	SCHEMATHESIS_EXAMPLES=$(EXAMPLES) $(PY) -m pytest -q -n 2 --dist loadscope tests/server/test_openapi.py

# The simulation for as long as asked: new seeds until SECONDS of wall time have passed.
SECONDS ?= 600
soak: $(STAMP)
	$(PY) -m tests.sim --seconds $(SECONDS)

# Fault campaigns against a real cluster (tests/cluster/chaos.py): three etcd members, three nodes,
# the official clients working through every node, faults injected at random for SECONDS; every
# acknowledged change is checked after. As root the nodes run in network namespaces and may be
# cut off the network too. `make test` runs each fault once (tests/cluster/test_faults.py).
chaos: $(STAMP) etcd
	$(PY) -m tests.cluster.chaos --seconds $(SECONDS) $(if $(SEED),--seed $(SEED))

# Benchmarks (bench/README.md): wrk, redis-server and etcd come from Debian (apt-get install -y wrk
# redis-server etcd-server); the bench installs them itself when run as root, or says how.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[server,test,bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

bench-quick: $(BENCH_STAMP)
	$(PY) -m bench.run --quick $(BENCH_ARGS)

profile: $(BENCH_STAMP)
	$(PY) -m bench.profile $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info $(TS)/node_modules $(TS)/dist $(TS)/build
