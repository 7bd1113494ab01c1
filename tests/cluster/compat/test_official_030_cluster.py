"""tests/compat/test_official_030.py (the official 0.3.0 client) against three nodes (see conftest.py)."""

from ...compat.test_official_030 import *  # noqa: F401,F403 (the suite's tests, as they are)

import pytest

from ...compat.test_official_030 import Sdk
from .conftest import ClusterServer


@pytest.fixture(scope="module")
def sdk_030(official_client_030):  # type: ignore[no-untyped-def]
    """The official 0.3.0 client only (our package's run of these scripts is the single-node suite's)."""
    return Sdk("official", official_client_030)


@pytest.fixture(scope="module")
def server(cluster_server: ClusterServer) -> ClusterServer:
    return cluster_server
