"""What `deploy/` ships: the Grafana dashboard loads and covers what an operator watches, and every
query of it and of the Prometheus rules names a metric this server exports; `promtool` checks the
rules and runs their unit tests."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import runstate.testing
from runstate.server.app import create_app
from runstate.server.settings import Settings
from runstate.testing import call_asgi

from ..tools import require_tool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "runstate-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "runstate-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "runstate-alerts.test.yml"
# A metric's name in a query: ours and the process collector's (label names and functions are not).
METRIC = re.compile(r"\b((?:runstate|process)_[a-z0-9_]+)\b")
CLUSTER_METRICS = ("runstate_cluster_", "runstate_etcd_")


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in board["panels"] for target in panel.get("targets", ())]
    queries += [variable["definition"] for variable in board["templating"]["list"] if "definition" in variable]
    return queries


def rule_queries() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


async def exported() -> set[str]:
    """Every sample name the server's /metrics can show (histograms' and counters' included)."""
    app = create_app(Settings(api_key="k", seed=1))
    async with runstate.testing.serve_app(app):
        _, _, body = await call_asgi(app, "GET", "/metrics", {}, None, client=("127.0.0.1", 40000))
    names = set()
    for family in text_string_to_metric_families(body.decode()):
        names.add(family.name)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
    return names


def test_the_dashboard_loads_and_covers_what_an_operator_watches():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["panels"] and {v["name"] for v in board["templating"]["list"]} == {"datasource", "instance", "space"}
    titles = " | ".join(panel["title"].lower() for panel in board["panels"])
    for topic in ("request rate by route", "errors by route", "expiries", "takeovers", "queue depth", "oldest waiting",
                  "dead letters", "fsync", "refus", "caps", "memory"):
        assert topic in titles, topic
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]


@pytest.mark.trio
async def test_every_query_names_a_metric_the_server_exports():
    known = await exported()
    for query in dashboard_queries() + rule_queries():
        names = METRIC.findall(query)
        assert names, query
        # (a cluster's node exports its own: tests/cluster/test_cluster_ops.py checks those)
        missing = [name for name in names if name not in known and not name.startswith(CLUSTER_METRICS)]
        assert not missing, f"{missing} in {query!r} are not exported"


def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    promtool = require_tool("promtool", "prometheus")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
