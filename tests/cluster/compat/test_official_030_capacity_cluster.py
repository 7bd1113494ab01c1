"""tests/compat/test_official_030_capacity.py (the official 0.3.0 client) against three nodes (see
conftest.py). The journal it reads back is the leader's copy of the partitions' logs: the committed
batches, in the WAL's format."""

from pathlib import Path

from ...compat.test_official_030_capacity import *  # noqa: F401,F403 (the suite's tests, as they are)

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


@pytest.fixture(scope="module")
def data_dir(cluster_server: ClusterServer) -> Path:
    return cluster_server.data_dir()
