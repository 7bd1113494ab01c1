"""The official 0.3.0 client's README, run as its users would run it, with the official client and
with our package as `runstate` (the `sdk_030` fixture), against a real server; and the two clients
side by side in one run, where they must agree on what names a piece of work.

The README's examples leave the bodies out (`...`); here they are filled in with small bodies whose
effects the test can see. Everything else is as the README writes it: the decorators and their
arguments, the calls, `runstate.stop()`, a queue module imported by producers and workers,
`runstate.serve()`, and the `a`-prefixed async forms.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from ..servers import ServerProcess
from .test_official_030 import Sdk, _background, _finish, _start, _wait_until, sdk_030  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

SCRIPT_S = 60


@pytest.fixture(scope="module")
def server(sdk_030: Sdk):
    with ServerProcess() as process:
        yield process


USE = """
import os, sys, time
from dataclasses import dataclass

@dataclass
class ModelReply:
    text: str
    usd: float

@runstate.once
def research_company(name: str) -> dict:
    with open(os.path.join(ARGS["dir"], "researched"), "a") as out:
        out.write(name + "\\n")
    return {"company": name, "employees": 12}

@runstate.limit("search-api", max=60, per="minute")
async def search_web(query: str) -> list:
    return [f"{query} result {n}" for n in range(2)]

@runstate.slots("browser", max=5)
def open_page(url: str) -> str:
    return f"<title>{url}</title>"

@runstate.budget("model-usd", reserve=0.40, cost=lambda r: r.usd, limit=50)
def call_model(prompt: str):
    return ModelReply(text=prompt.upper(), usd=0.25)

first = research_company("acme")   # looks like a normal call
again = research_company("acme")
found = asyncio.run(search_web("acme"))
page = open_page("https://acme.example")
reply = call_model("summarise acme")
runstate.stop()            # every worker stops taking new work
try:
    research_company("globex")
    after_stop = None
except runstate.StoppedError:
    after_stop = "StoppedError"
emit(first=first, again=again, found=found, page=page, reply=reply.text, after_stop=after_stop)
"""


def test_the_readme_use_section_runs_as_written(sdk_030, server, tmp_path):
    """once runs its body once, limit, slots and budget wrap their functions (plain and async)
    and charge the reply's cost, and after stop() a call raises StoppedError."""
    done = _finish(_start(sdk_030, server, USE, "readme-use", dir=str(tmp_path)), timeout_s=SCRIPT_S)
    assert done == {
        "first": {"company": "acme", "employees": 12}, "again": {"company": "acme", "employees": 12},
        "found": ["acme result 0", "acme result 1"], "page": "<title>https://acme.example</title>",
        "reply": "SUMMARISE ACME", "after_stop": "StoppedError",
    }
    assert (tmp_path / "researched").read_text().split() == ["acme"]
    with server.client() as http:
        budget = next(b for b in http.get(f"/v1/spaces/{server.space_id}/budgets").json()["budgets"] if b["name"] == "model-usd")
    assert (budget["limitMinor"], budget["spentMinor"], budget["reservedMinor"]) == ("5000", "25", "0")


REVIEW_MODULE = """
import runstate

# review.py, imported by producers and workers
@runstate.queue("review", slots="browser")
def review(doc: dict) -> dict:
    return {"title": doc["title"], "score": doc["quality"]}
"""

WORKER = """
sys.path.insert(0, ARGS["dir"])
runstate.setup(slots={"browser": {"max": 5}})
import review  # the definitions, with the handler

emit(ready=True)
runstate.serve()
emit(served=True)
"""

PRODUCER = """
sys.path.insert(0, ARGS["dir"])
from review import review

docs = [{"title": f"doc {n}", "quality": 0.9 if n % 3 else 0.5} for n in range(8)]
score = review(docs[0])
accepted = review.gather(docs, need=5, accept=lambda result, doc: result["score"] > 0.8)

async def main():
    job = await review.asend({"title": "async", "quality": 1.0})
    result = await job.aresult(timeout=30)
    await runstate.astop()
    return result

emit(score=score, accepted=accepted, sent=asyncio.run(main()))
"""


def test_the_readme_queue_section_hands_work_to_a_serving_worker(sdk_030, server, tmp_path):
    """A module defines the queue; a worker process imports it and serves; a producer imports it,
    calls it, gathers five accepted results out of eight, sends one with the async form, and
    stops the run, which ends the worker's serve()."""
    (tmp_path / "review.py").write_text(REVIEW_MODULE)
    worker = _background(sdk_030, server, WORKER, "readme-queue", dir=str(tmp_path))
    try:
        # As a user starts workers first: the queue asks for the "browser" pool, which a worker's
        # setup makes; a producer before any worker is refused (404, no such pool).
        _wait_until("the worker's setup made the browser pool", lambda: "browser" in _pools(server), (worker,), timeout_s=SCRIPT_S)
        done = _finish(_start(sdk_030, server, PRODUCER, "readme-queue", dir=str(tmp_path)), timeout_s=SCRIPT_S)
        assert done["score"] == {"title": "doc 0", "score": 0.5}
        assert len(done["accepted"]) == 5 and all(result["score"] > 0.8 for result in done["accepted"])
        assert done["sent"] == {"title": "async", "score": 1.0}
        assert worker.finish(timeout_s=15) == {"served": True}
    finally:
        worker.kill()


def _pools(server: ServerProcess) -> set[str]:
    with server.client() as http:
        return {pool["name"] for pool in http.get(f"/v1/spaces/{server.space_id}/permits").json()["permits"]}


ONCE_BY = """
@runstate.once
def research(name, region="eu"):
    with open(os.path.join(ARGS["dir"], "ran"), "a") as out:
        out.write(ARGS["who"] + "\\n")
    return {"company": name, "by": ARGS["who"]}

emit(result=research(*ARGS["args"], **ARGS["kwargs"]))
"""


def test_the_official_client_and_ours_share_once_work_in_one_run(official_client_030, tmp_path):
    """One run, one server: the official client runs `research("acme")`; our package, calling it
    with the same arguments (by keyword this time), gets that result without running the body;
    and the other way round for another company. The two clients name work alike."""
    official, ours = Sdk("official", official_client_030), Sdk("ours")
    with ServerProcess() as shared:
        calls = [
            (official, ["acme"], {}, "official"), (ours, [], {"name": "acme"}, "official"),
            (ours, ["globex", "us"], {}, "ours"), (official, ["globex"], {"region": "us"}, "ours"),
        ]
        for sdk, args, kwargs, by in calls:
            done = _finish(_start(sdk, shared, ONCE_BY, "mixed-once", dir=str(tmp_path), who=sdk.name, args=args, kwargs=kwargs))
            assert done["result"]["by"] == by, (sdk.name, args, kwargs, done)
    assert (tmp_path / "ran").read_text().split() == ["official", "ours"]


KEYS = """
from runstate.keys import work_key
emit(keys=[work_key(name, args) for name, args in ARGS["cases"]])
"""

KEY_CASES = [
    ["research", ["acme"]],
    ["research", [{"b": [1, 2.5, None], "a": "\u00e9\u2028", "\U0001F600": True, "\uffff": False}]],
    ["n", [0.1, 1e21, 1e-7, -0.0, 2**53 + 1, 123456789.125, 5e-324, 1.7976931348623157e308]],
    ["t", [["x", ["y"]], {"z": {}}]],
    ["escapes", ["\U0001F600", "\u0001\n\t\"\\", "\ud800"]],
]


def test_work_keys_are_the_same_in_both_clients(official_client_030, module_server, tmp_path):
    """The official client's own key function and ours give the same key for awkward values:
    floats at the edges of JavaScript's notation, nested objects, sorted non-ASCII keys, escapes."""
    from runstate import _keys

    cases = json.loads(json.dumps(KEY_CASES))  # as the script reads them
    done = _finish(_start(Sdk("official", official_client_030), module_server, KEYS, "keys", cases=cases))
    assert done["keys"] == [_keys.work_key(name, args) for name, args in cases]
