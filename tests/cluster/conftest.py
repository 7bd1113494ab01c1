"""Real etcd clusters for the cluster tests (see `tests/etcd.py`).

`etcd1` is one member, `etcd3` three; each is started once per test module. After a test that
killed or stopped members of `etcd3`, they are continued or restarted and the cluster is healthy
again before the next test begins.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from ..etcd import EtcdCluster


@pytest.fixture(scope="module")
def etcd1_module() -> Iterator[EtcdCluster]:
    with EtcdCluster(1) as cluster:
        yield cluster


@pytest.fixture
def etcd1(etcd1_module: EtcdCluster) -> EtcdCluster:
    return etcd1_module


@pytest.fixture(scope="module")
def etcd3_module() -> Iterator[EtcdCluster]:
    with EtcdCluster(3) as cluster:
        yield cluster


@pytest.fixture
def etcd3(etcd3_module: EtcdCluster) -> Iterator[EtcdCluster]:
    yield etcd3_module
    for member in etcd3_module.members:
        if member.stopped:
            member.cont()
    for member in etcd3_module.members:
        if not member.alive:
            etcd3_module.restart(member)
    etcd3_module.wait_healthy()
