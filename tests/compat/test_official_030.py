"""The current official client, runstate-sdk 0.3.0, as users write code with it, against a real
server: `@runstate.once` across processes, its attempts, runs by name and `runstate.stop()`, and
both official clients against one server process at the same time.

Every script here (and in the other `test_official_030_*` files) runs twice, through the `sdk_030`
fixture: once with the official client, installed into an isolated folder and put first on
`PYTHONPATH` (it imports as `runstate`), and once with `import runstate` resolved to our own
package, unchanged: code written for 0.3.0 runs as it is on ours. Each script checks which one it
got. Scripts and the test wait on events, never on time passing: a script says what it has done
(a JSON line the test reads as it comes, `Background`), the test watches the server's own
diagnostics (`/ops/waits`: which calls are parked, for whom), and the test lets scripts go on by
making a file they wait for (`meet()`: every process of a test calls at once, once all are ready).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..servers import ServerProcess, base_python
from .official_scripts import Background

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

# Where our own package lives: a script of ours must import `runstate` from there.
OUR_SDK = Path(__file__).resolve().parents[2] / "sdk"

PRELUDE = """
import asyncio, json, os, sys, time
import runstate
if os.environ["TEST_SDK"] == "official":
    assert runstate.__version__ == "0.3.0", runstate.__version__
    assert runstate.__file__.startswith(os.environ["PYTHONPATH"]), runstate.__file__
else:
    assert runstate.__file__.startswith(os.environ["TEST_OUR_SDK"]), runstate.__file__
ARGS = json.loads(os.environ.get("TEST_ARGS", "{}"))

def emit(**fields):
    print(json.dumps(fields), flush=True)

def wait_file(path, timeout_s=60):  # the test says "go on" by making the file
    deadline = time.time() + timeout_s
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit(f"{path} was not made within {timeout_s} s")
        time.sleep(0.002)

def meet():  # every process of a test goes at once: when the test makes ARGS["go"], else at the instant ARGS["start_at"]
    if "go" in ARGS:
        wait_file(ARGS["go"])
        return
    while time.time() < ARGS["start_at"]:
        time.sleep(0.001)

def note(*fields):  # a line in this process's log, in the folder ARGS["dir"]
    with open(os.path.join(ARGS["dir"], f"{os.getpid()}.log"), "a") as out:
        out.write(" ".join(map(str, fields)) + "\\n")
"""


@dataclass(frozen=True)
class Sdk:
    """Which package `import runstate` gives a script: the official 0.3.0 client in `folder`, or ours."""

    name: str
    folder: Path | None = None

    @property
    def python(self) -> str:
        # The official client runs under the base interpreter (where no runstate of ours is
        # installed); ours under the test interpreter, whose runstate is this checkout.
        return base_python() if self.folder is not None else sys.executable


@pytest.fixture(scope="module", params=["official", "ours"])
def sdk_030(request: pytest.FixtureRequest) -> Sdk:
    """The same scripts with the official 0.3.0 client, then with our package as `runstate`; each
    module's server is made per client (it depends on this fixture), so runs by name start fresh."""
    if request.param == "official":
        return Sdk("official", request.getfixturevalue("official_client_030"))
    return Sdk("ours")


def _env(sdk: Sdk | Path, server: ServerProcess, run: str, args: dict) -> dict[str, str]:
    import os

    if isinstance(sdk, Path):  # a client folder (the official 0.2.0 client's, for the mixed tests)
        sdk = Sdk("official", sdk)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        "RUNSTATE_BASE_URL": server.base_url,
        "RUNSTATE_API_KEY": server.api_key,
        "RUNSTATE_SPACE_ID": server.space_id,
        "RUNSTATE_RUN": run,
        "TEST_ARGS": json.dumps(args),
        "TEST_SDK": sdk.name,
        "TEST_OUR_SDK": str(OUR_SDK),
    }
    if sdk.folder is not None:
        env["PYTHONPATH"] = str(sdk.folder)
    return env


def _start(sdk: Sdk, server: ServerProcess, script: str, run: str, **args) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    return subprocess.Popen(
        [sdk.python, "-c", PRELUDE + textwrap.dedent(script)],
        env=_env(sdk, server, run, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _finish(process: subprocess.Popen, timeout_s: float = 90) -> dict:
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the script did not end:\n{err[-3000:]}\n{out[-2000:]}")
    if process.returncode != 0:
        raise AssertionError(f"the script failed ({process.returncode}):\n{err[-3000:]}\n{out[-2000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no JSON from the script:\n{out}\n{err[-2000:]}"
    return json.loads(lines[-1])


def _background(sdk: Sdk, server: ServerProcess, script: str, run: str, **args) -> Background:  # type: ignore[no-untyped-def]
    """A script whose JSON lines the test reads as they come (`wait_for`), then its last (`finish`)."""
    return Background(_start(sdk, server, script, run, **args))


def _waits(server: ServerProcess) -> list[dict]:
    """What waits in the space now: the calls parked there (with the holders they are for), and
    the waiters of pools' lines and allowances' queues."""
    with server.client() as http:
        return http.get(f"/v1/spaces/{server.space_id}/ops/waits").json()["waits"]


def _wait_until(what: str, check, scripts: tuple = (), timeout_s: float = 30) -> None:  # type: ignore[no-untyped-def]
    """Return once `check()` holds; fail naming `what` after `timeout_s`, or at once when one of
    `scripts` (Background) has ended, with what it printed."""
    deadline = time.monotonic() + timeout_s
    while not check():
        for script in scripts:
            if script.process.poll() is not None:
                script.finish()  # raises with its output if it failed
                raise AssertionError(f"a script ended before {what}: {script.lines}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def server(sdk_030: Sdk):
    with ServerProcess() as process:
        yield process


ONCE_FROM_MANY = """
runs = os.path.join(ARGS["dir"], "ran")

@runstate.once
def research(name):
    with open(runs, "a") as out:
        out.write(f"{os.getpid()}\\n")
    wait_file(ARGS["finish"])  # the test lets it finish once every other caller waits on it
    return {"company": name, "by": os.getpid()}

runstate.run_id()  # the client set up and the run joined before the meeting
emit(event="ready")
meet()
emit(result=research("acme"))
"""


def test_once_from_four_processes_at_the_same_moment_runs_its_body_once(sdk_030, server, tmp_path):
    """Four processes call the same once at the same moment; while one runs the body, the other
    three wait on the key (parked on the server); all four get the one result."""
    args = {"dir": str(tmp_path), "go": str(tmp_path / "go"), "finish": str(tmp_path / "finish")}
    workers = [_background(sdk_030, server, ONCE_FROM_MANY, "once-4", **args) for _ in range(4)]
    for worker in workers:
        worker.wait_for("ready", timeout_s=60)
    (tmp_path / "go").touch()
    waiting = lambda: any(wait["on"] == "once" and wait["calls"] == 3 for wait in _waits(server))  # noqa: E731
    _wait_until("three callers parked on the once key while the fourth runs the body", waiting, tuple(workers))
    assert len((tmp_path / "ran").read_text().split()) == 1
    (tmp_path / "finish").touch()
    results = [worker.finish(timeout_s=60)["result"] for worker in workers]
    ran = (tmp_path / "ran").read_text().split()
    assert len(ran) == 1, f"the body ran {len(ran)} times"
    assert all(result == {"company": "acme", "by": int(ran[0])} for result in results), results


ONCE_FAILING = """
calls = os.path.join(ARGS["dir"], "calls")

@runstate.once(attempts=3)
def flaky(n):
    with open(calls, "a") as out:
        out.write("x\\n")
    raise RuntimeError(f"no luck with {n}")

errors = []
for _ in range(4):
    try:
        flaky(7)
    except runstate.OnceFailedError as error:
        errors.append(("OnceFailedError", str(error)))
    except RuntimeError as error:
        errors.append(("RuntimeError", str(error)))
emit(errors=errors)
"""


def test_a_failing_once_uses_its_attempts_then_raises_once_failed(sdk_030, server, tmp_path):
    result = _finish(_start(sdk_030, server, ONCE_FAILING, "once-fail", dir=str(tmp_path)))
    kinds = [kind for kind, _ in result["errors"]]
    assert kinds == ["RuntimeError", "RuntimeError", "OnceFailedError", "OnceFailedError"], result
    assert len((tmp_path / "calls").read_text().split()) == 3  # three attempts, then the recorded failure
    assert "no luck with 7" in result["errors"][-1][1]


RUN_AND_STOP = """
@runstate.once
def step(n):
    return n * 2

first = step(21)
run_id = runstate.run_id()  # (asked before the stop: a stopped run's calls raise StoppedError)
runstate.stop()
try:
    step(22)
    stopped = None
except runstate.StoppedError as error:
    stopped = str(error)
emit(first=first, run_id=run_id, stopped=stopped)
"""

JOIN_STOPPED = """
@runstate.once
def step(n):
    return n * 2

try:
    step(1)
    emit(stopped=None)
except runstate.StoppedError as error:
    emit(stopped=str(error))
"""


def test_a_named_run_is_shared_and_stop_reaches_a_process_that_joins_later(sdk_030, server):
    result = _finish(_start(sdk_030, server, RUN_AND_STOP, "stop-me"))
    assert result["first"] == 42 and result["stopped"]
    scope = server.client().get(f"/v1/spaces/{server.space_id}/scopes/{result['run_id']}").json()
    assert scope["name"] == "stop-me" and scope["storedState"] == "CANCELLED"
    late = _finish(_start(sdk_030, server, JOIN_STOPPED, "stop-me"))
    assert late["stopped"] and result["run_id"] in late["stopped"]  # "scope <the run's id> is cancelled"


def test_both_official_clients_work_against_one_server_at_once(official_client, sdk_030, server):
    """A 0.2.0 claim and a 0.3.0 once, from two processes, against the same server process."""
    old = subprocess.Popen(
        [base_python(), "-c", textwrap.dedent("""
            import asyncio, json
            from runstate import AsyncRunstate
            async def main():
                async with AsyncRunstate(holder="old-client") as rs:
                    run = await rs.scopes.create()
                    lease = await rs.scope(run.id).claim("shared-key").acquire()
                    print(json.dumps({"generation": lease.generation}), flush=True)
                    await lease.release()
            asyncio.run(main())
        """)],
        env=_env(official_client, server, "unused", {}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    new = _start(sdk_030, server, "@runstate.once\ndef f():\n    return 'new'\nemit(result=f())\n", "mixed")
    assert _finish(old)["generation"] == 1
    assert _finish(new)["result"] == "new"
