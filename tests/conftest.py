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


# The longest tests, first: with `-n` each starts on its own process and runs beside the rest.
FIRST = ("test_a_batch_of_seeds_breaks_no_invariant", "test_generated_requests_never_get_a_5xx_and_answers_match_the_document",
         "test_every_fault_once_loses_no_acknowledged_change")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: FIRST.index(item.name) if item.name in FIRST else len(FIRST))
