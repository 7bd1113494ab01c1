"""The cluster under real faults, with the official clients working it: each fault of the CI slice
(`chaos.CI_FAULTS`) once, in order.

Three etcd members and three `runstate serve` nodes on this machine; four workers on the official
0.2.0 client and two on the official 0.3.0 client, each call through a node picked at random;
then SIGKILL of a partition's leader, SIGSTOP of one past its session (it must be fenced: another
node holds the partition under a new epoch before it resumes) and (as root, where network
namespaces can be made) a leader cut off the network and joined again. (The other faults each
have a test of their own and are all in `make chaos`: `chaos.CI_FAULTS` says which.) After each
the cluster must be whole again within 30 s; after the last, every acknowledged change is checked
(`history.py`). The longer campaigns are `make chaos SECONDS=600` (`chaos.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .chaos import CI_FAULTS, Campaign
from .network import network_available

pytestmark = [pytest.mark.e2e, pytest.mark.compat, pytest.mark.slow]


def test_every_fault_once_loses_no_acknowledged_change(tmp_path: Path, official_client: Path, official_client_030: Path) -> None:
    lines: list[str] = []
    with Campaign(tmp_path, {"0.2.0": official_client, "0.3.0": official_client_030}, seed=24, say=lines.append) as campaign:
        expected = campaign.faults_here(CI_FAULTS)
        outcome = campaign.plan(expected)
    story = "\n".join([*lines, outcome.render()])
    print(story)
    assert not outcome.report.violations, story
    assert sorted(outcome.faults) == sorted(expected) and set(outcome.faults.values()) == {1}, story
    if network_available() is None:
        assert "cut_node" in outcome.faults, story
    for kind in ("runs created", "claims acquired", "claims renewed", "claims released", "tasks submitted",
                 "deliveries leased", "completions", "once results", "events shown"):
        assert outcome.report.checked[kind] > 0, f"nothing checked for {kind}:\n{story}"
