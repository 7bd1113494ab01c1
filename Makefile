# Quick start: `make serve` and `make test`. Each target creates or reuses .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv serve test sim soak clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,test]'
	@touch $(STAMP)

venv: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/runstate serve $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The deterministic simulation (tests/sim): SEEDS seeds, or replay one with SEED=n.
SEEDS ?= 300
sim: $(STAMP)
	$(PY) -m tests.sim $(if $(SEED),--seed $(SEED),--seeds $(SEEDS))

# The simulation for as long as asked: new seeds until SECONDS of wall time have passed.
SECONDS ?= 600
soak: $(STAMP)
	$(PY) -m tests.sim --seconds $(SECONDS)

clean:
	rm -rf $(VENV) build *.egg-info
