"""Kill -9 under concurrent load, 20+ cycles: nothing acknowledged is lost, generations only grow,
nothing terminal changes, and claims alive at a crash renew afterwards (see `crashloop.py`)."""

from __future__ import annotations

import os

import pytest
import trio

from .crashloop import run_cycles
from .helpers import check

CYCLES = int(os.environ.get("RUNSTATE_CRASH_CYCLES", "20"))


@pytest.mark.e2e
def test_kill_9_cycles_lose_nothing_acknowledged(tmp_path):
    data = str(tmp_path / "data")
    log = str(tmp_path / "server.log")
    try:
        acked = trio.run(run_cycles, data, CYCLES, 20261130, log)
    except BaseException:
        print(open(log, encoding="utf-8", errors="replace").read()[-5000:])
        raise
    assert acked.changes > CYCLES * 5, "the clients got too little done to prove anything"
    assert acked.renewed_after_restart > 0
    report = check(data)
    assert report.ok, report.format()
    assert report.epoch == CYCLES
