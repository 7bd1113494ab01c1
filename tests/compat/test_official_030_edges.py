"""The 0.3.0 client (official and ours, `sdk_030`) on the inputs a user gets wrong or odd."""

from __future__ import annotations

import pytest

from .test_official_030 import _finish, _start, sdk_030, server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

DOT_NAMES = """
out = {}
for name in (".", ".."):
    got = {}
    def attempt(what, call):
        try:
            got[what] = call()
        except Exception as err:
            got[what] = f"{type(err).__name__}: {err}"
    run = runstate.run(name)
    attempt("run", run.run_id)
    attempt("run again", runstate.Runstate().run(name).run_id)
    def limited():
        return "limited"
    def slotted():
        return "slotted"
    def charged():
        return "charged"
    attempt("limit", run.limit(name, limited, max=2, per="minute"))
    attempt("slots", run.slots(name, slotted, max=1))
    attempt("budget", run.budget(name, charged, reserve="1", limit="5"))
    attempt("sleep", lambda: run.sleep(name, 0.1) or "slept")
    attempt("together", lambda: run.together(name, 1, timeout=10) or "met")
    attempt("queue", lambda: run.queue(name).send({"n": 1}).id[:3])
    out[name] = got
emit(**out)
"""


def test_names_dot_and_dot_dot_reach_their_runs_and_resources(sdk_030, server):
    """The client percent-encodes a name in the path, but `.` and `..` stay as they are and its
    HTTP library drops them as dot segments: `PUT /runs/.` arrives as `PUT /runs`, `PUT
    /permits/by-name/..` as `PUT /permits`. Those were 404 and 405 ("no such route", "use GET,
    POST"), which named no mistake of the caller's."""
    out = _finish(_start(sdk_030, server, DOT_NAMES, "edges"))
    for name in (".", ".."):
        got = out[name]
        assert got["run"].startswith("sc_") and got["run again"] == got["run"], got
        assert (got["limit"], got["slots"], got["budget"]) == ("limited", "slotted", "charged"), got
        assert (got["sleep"], got["together"], got["queue"]) == ("slept", "met", "tk_"), got
    assert out["."]["run"] != out[".."]["run"]


LATE_WORKER = """
runstate.setup(budgets={"spend": {"limit": "10.00"}})

@runstate.queue("costly", budget={"name": "spend", "reserve": "1.50"})
def costly(n):
    time.sleep(ARGS["work_s"])  # past the reservation's settleBy: the server gives it back
    return n

emit(event="ready")
runstate.serve()
"""

LATE_PRODUCER = """
emit(result=runstate.queue("costly").send(7).result(timeout=60))
"""


def test_a_job_that_outlives_its_reservation_is_still_charged(sdk_030, tmp_path):
    """A job's reservation is released at its settleBy; the worker's settle is then 409 CONFLICT
    and the client charges the cost late: it finds the reservation's run in `GET /budgets/{id}`
    and reserves one minor unit there to settle the cost against. That listing held only active
    reservations, so the client found nothing and the cost was never charged."""
    from ..servers import ServerProcess
    from .test_official_030 import _background, _wait_until

    with ServerProcess("--settle-by-s-default", "2") as server:
        worker = _background(sdk_030, server, LATE_WORKER, "late", work_s=3.5)
        worker.wait_for("ready", timeout_s=30)
        try:
            done = _finish(_start(sdk_030, server, LATE_PRODUCER, "late"), timeout_s=90)
            assert done["result"] == 7
            # The worker charges after it completes the job (a run stopped meanwhile: below).
            def spend() -> dict:
                with server.client() as http:
                    budgets = http.get(f"/v1/spaces/{server.space_id}/budgets").json()["budgets"]
                return next(budget for budget in budgets if budget["name"] == "spend")

            _wait_until("the late charge", lambda: spend()["spentMinor"] != "0", (worker,), timeout_s=15)
            # The reserve (150) is the cost, charged once; nothing is left reserved.
            assert (spend()["spentMinor"], spend()["reservedMinor"]) == ("150", "0"), spend()
        finally:
            worker.kill()


LATE_AFTER_STOP = """
import threading

runstate.setup(budgets={"spend": {"limit": "10.00"}})

@runstate.budget("spend", reserve="1.50", cost=lambda result: "2.25")
def costly():
    time.sleep(ARGS["work_s"])  # the run is stopped meanwhile
    return "done"

def stop_meanwhile():
    time.sleep(ARGS["stop_after_s"])
    runstate.stop()

stopper = threading.Thread(target=stop_meanwhile)
stopper.start()
emit(result=costly())
stopper.join()
"""


def test_work_that_outlives_its_run_is_still_charged(sdk_030):
    """The run is stopped while the work runs: the work happened, so the settle of its
    reservation after the stop is accepted and its cost (over the reserve: allowOverrun) counted.
    (A late charge in a stopped run, when the reservation's settleBy passed too, is
    `tests/server/test_capacity_routes.py`.)"""
    from ..servers import ServerProcess

    with ServerProcess() as server:
        done = _finish(_start(sdk_030, server, LATE_AFTER_STOP, "late-stopped", work_s=2.0, stop_after_s=0.5), timeout_s=90)
        assert done["result"] == "done"
        with server.client() as http:
            budgets = http.get(f"/v1/spaces/{server.space_id}/budgets").json()["budgets"]
        spend = next(budget for budget in budgets if budget["name"] == "spend")
        assert (spend["spentMinor"], spend["reservedMinor"]) == ("225", "0"), spend
        with server.client() as http:
            run = http.put(f"/v1/spaces/{server.space_id}/runs/late-stopped", json={}).json()
        assert run["storedState"] == "CANCELLED", run
