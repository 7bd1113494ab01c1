"""`runstate inspect pools|quotas|budgets` against a real server."""

from __future__ import annotations

import pytest

from .test_cli import admin_env, admin_server, as_json, runstate  # noqa: F401 (admin_server is a fixture)

pytestmark = pytest.mark.e2e


def test_inspect_pools_quotas_and_budgets(admin_server):  # noqa: F811
    """A pool with a grant, an allowance partly used and a budget with a reservation show as rows and as JSON."""
    with admin_server.client() as http:
        base = "/v1/spaces/default"
        run = http.post(base + "/scopes", json={"name": "capacity"}).json()
        pool = http.post(base + "/permits", json={"name": "inspected-gpu", "units": 4}).json()
        http.post(base + f"/permits/{pool['id']}/acquire", json={"scopeId": run["id"], "units": 3, "holder": "h", "holderSession": "s", "leaseSeconds": 600})
        allowance = http.post(base + "/allowances", json={"name": "inspected-llm", "unitsLimit": 5, "windowSeconds": 3600}).json()
        http.post(base + f"/allowances/{allowance['id']}/consume", json={"scopeId": run["id"], "units": 2, "holder": "h"})
        budget = http.post(base + "/budgets", json={"name": "inspected-spend", "currency": "EUR", "scale": 2, "limitMinor": "5000"}).json()
        http.post(base + f"/budgets/{budget['id']}/reserve", json={"scopeId": run["id"], "holder": "h", "amountMinor": "1250"})
    env = admin_env(admin_server)
    pools = as_json(runstate("inspect", "pools", "--json", env=env))["permits"]
    row = next(p for p in pools if p["name"] == "inspected-gpu")
    assert (row["unitsInUse"], row["unitsAvailable"]) == (3, 1)
    table = runstate("inspect", "pools", env=env)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:4] == ["NAME", "ID", "UNITS", "IN"]
    quotas = as_json(runstate("inspect", "quotas", "--json", env=env))["allowances"]
    assert next(q for q in quotas if q["name"] == "inspected-llm")["remaining"] == 3
    assert "inspected-llm" in runstate("inspect", "quotas", env=env).stdout
    budgets = as_json(runstate("inspect", "budgets", "--json", env=env))["budgets"]
    row = next(b for b in budgets if b["name"] == "inspected-spend")
    assert (row["reservedMinor"], row["availableMinor"]) == ("1250", "3750")
    table = runstate("inspect", "budgets", env=env)
    # Amounts in the currency: 5000 minor units at scale 2 are 50.00 EUR, 3750 are 37.50.
    assert table.returncode == 0 and "inspected-spend" in table.stdout
    row = next(line.split() for line in table.stdout.splitlines() if line.startswith("inspected-spend"))
    assert row[2:] == ["EUR", "50.00", "0.00", "12.50", "37.50"], table.stdout


@pytest.mark.parametrize("what", ["pools", "quotas", "budgets"])
def test_each_capacity_inspection_explains_itself(what, capsys):
    """--help of each new inspection prints its examples."""
    from runstate.server.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["inspect", what, "--help"])
    assert exited.value.code == 0 and "runstate inspect" in capsys.readouterr().out
