"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from .servers import OFFICIAL_SDK_030, ServerProcess, official_client_dir


@pytest.fixture(scope="session")
def official_client(request: pytest.FixtureRequest) -> Path:
    """The official runstate-sdk 0.2.0, installed into an isolated folder (cached between runs)."""
    return official_client_dir(Path(request.config.cache.mkdir("official-client")))


@pytest.fixture(scope="session")
def official_client_030(request: pytest.FixtureRequest) -> Path:
    """The current official runstate-sdk 0.3.0, installed into an isolated folder (cached between runs)."""
    return official_client_dir(Path(request.config.cache.mkdir("official-client")), OFFICIAL_SDK_030)


@pytest.fixture
def server():
    """A real `runstate serve` process on 127.0.0.1 and a random port, stopped after the test."""
    with ServerProcess() as process:
        yield process


@pytest.fixture(scope="module")
def module_server():
    """One real server shared by a module's tests."""
    with ServerProcess() as process:
        yield process


# How `make test` shares the tests between its processes (`-n 4 --dist loadscope`): a process takes
# a file's tests together (many share a module-scoped server; the browser tests keep Playwright's
# loop in theirs), or a class's: only the simulation's batch (a class per seed,
# tests/sim/test_sim_batch.py) and the schemathesis run (a class per share of the operations) have
# classes, so those go to whichever process is free. The order below is
# the order the processes take work in: the longest first, so that none starts late and ends the
# run alone (the fault campaign, one test of about two minutes; then the schemathesis run, a class
# per share of the operations, tests/server/test_openapi.py); then the rest; then the simulation's
# injected bugs; then its seeds, which are short and many, and fill the processes to the end.
LONGEST_FILES = (
    "tests/cluster/test_faults.py",
    "tests/server/test_openapi.py",
)
SIMULATION, BATCH = "tests/sim/", "tests/sim/test_sim_batch.py"


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in LONGEST_FILES:
        return LONGEST_FILES.index(path)
    return len(LONGEST_FILES) + (2 if path == BATCH else 1 if path.startswith(SIMULATION) else 0)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)
