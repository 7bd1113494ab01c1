"""Fixtures for the SDK tests."""

import pytest

from runstate import _runtime


@pytest.fixture
def pinned_jitter(monkeypatch):
    """Every random draw returns the middle of its range, so times are exact."""
    monkeypatch.setattr(_runtime, "uniform", lambda low, high, rng=None: (low + high) / 2)


@pytest.fixture
def anyio_backend():
    return "asyncio"
