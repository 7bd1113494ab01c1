"""The run-bound API (the official 0.3.0 client's: `@runstate.once`, `limit`, `slots`, `budget`,
`queue` with `serve` and `gather`, `sleep`, `together`, `stop`, `events`, `status`) on our
package, against a real kernel in-process: in virtual time under trio, and in real time under
asyncio. The blocking forms, across processes and against a real server, are in
`tests/compat/test_official_030*.py`, which run the same scripts with the official client and
with ours.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import trio

import runstate
from runstate import _keys, _units, testing

pytest.importorskip("runstate.server.app")


# -- settings ------------------------------------------------------------------------------------


def test_a_client_checks_nothing_until_its_first_call(monkeypatch):
    """Runstate() (and so `import runstate`) never raises: the missing key is a ConfigError at the
    first call, naming what to set; configure() then makes the next call work."""
    monkeypatch.delenv("RUNSTATE_API_KEY", raising=False)
    monkeypatch.delenv("RUNSTATE_SPACE_ID", raising=False)
    client = runstate.Runstate(run="later")
    with pytest.raises(runstate.ConfigError, match="RUNSTATE_API_KEY"):
        client.run_id()
    with pytest.raises(runstate.ConfigError, match="unknown option"):
        client.configure(colour="blue")
    monkeypatch.setenv("RUNSTATE_RUN", "from-the-environment")
    assert runstate.Runstate(api_key="k", space_id="s")._shared.settings().run == "from-the-environment"
    assert runstate.Runstate(api_key="k", space_id="s", run="given")._shared.settings().run == "given"
    assert runstate.Runstate(api_key="k", space_id="s", timeout="2s")._shared.settings().config.request_timeout_ms == 2000
    assert runstate.Runstate(api_key="k", space_id="s", worker="w", holder="w")._shared.settings().config.holder == "w"
    both = runstate.Runstate(api_key="k", space_id="s", worker="w", holder="h")  # one of the two would be dropped
    with pytest.raises(runstate.ConfigError, match="worker='w' and holder='h' name the same thing"):
        both._shared.settings()


def test_durations_windows_and_amounts_read_as_the_official_client_reads_them():
    assert [_units.parse_duration(v) for v in (30, 0.5, "500ms", "30s", "10m", "2h", "1d")] == [30, 0.5, 0.5, 30, 600, 7200, 86400]
    assert [_units.parse_per(v) for v in ("second", "minute", "hour", "day", "90s", 60)] == [1, 60, 3600, 86400, 90, 60]
    assert _units.to_minor(0.1 + 0.2, 2) == "30" and _units.to_minor("0.40", 2) == "40" and _units.to_minor(12, 3) == "12000"
    assert _units.lease_seconds(None) == 30 and _units.lease_seconds(1) == 5 and _units.lease_seconds("1h") == 600
    for bad in (lambda: _units.parse_duration("soon"), lambda: _units.parse_per("1.5s"), lambda: _units.to_minor("0.401", 2)):
        with pytest.raises(runstate.ConfigError):
            bad()


def test_work_keys_hash_canonical_json_as_every_client_does():
    """A key is the name and the first 32 hex digits of sha256 over JSON.stringify with sorted
    keys: the same in the official 0.3.0 client (this vector is its), so mixed workers share work."""
    assert _keys.work_key("f", ["acme"]) == "f:07fad54f7446269afc481e306a48f046"
    assert _keys.canonical_json({"b": 1, "a": [1.5, 1e21, 1e-7, None, True]}) == '{"a":[1.5,1e+21,1e-7,null,true],"b":1}'
    assert _keys.canonical_json("\u2028é\x01") == '"\u2028é\\u0001"'
    assert _keys.work_key("q", [{"x": 1}], lambda data: f"id-{data['x']}") == "q:id-1"
    with pytest.raises(runstate.ConfigError, match=r"\$\[0\] is a set; pass key="):
        _keys.work_key("f", [{1, 2}])


# -- once ----------------------------------------------------------------------------------------


@pytest.mark.trio
async def test_once_runs_its_body_once_for_every_caller_with_the_same_arguments(autojump_clock):
    """Three callers at once (one of them by keyword): the body runs once, all three get its
    result; the running call sees its context (attempt 1, the work key); other arguments are other work."""
    async with testing.serve() as rs:
        client = rs.client(run="once")
        ran, contexts = [], []

        @client.once
        async def research(name, depth=1):
            ran.append(name)
            contexts.append(runstate.context())
            await trio.sleep(2)
            return {"company": name}

        results = []
        async with trio.open_nursery() as nursery:
            for call in (lambda: research("acme"), lambda: research(name="acme"), lambda: research("acme")):
                nursery.start_soon(lambda call=call: _append(results, call))
        assert results == [{"company": "acme"}] * 3 and ran == ["acme"]
        (context,) = contexts
        assert context.attempt == 1 and context.key.startswith("research:") and not context.signal.is_set()
        assert await research("globex") == {"company": "globex"} and ran == ["acme", "globex"]
        assert runstate.context() is None


async def _append(results, call):
    results.append(await call())


@pytest.mark.trio
async def test_once_records_failed_attempts_then_raises_once_failed_to_every_caller(autojump_clock):
    """attempts=2: two calls raise the function's own error, the third gets OnceFailedError without
    running it; a result over 64 KiB and a result that is not JSON are refused on this side."""
    async with testing.serve() as rs:
        client = rs.client(run="fails")
        calls = []

        @client.once(attempts=2)
        async def flaky():
            calls.append(1)
            raise ValueError("no luck")

        for expected in (ValueError, runstate.OnceFailedError, runstate.OnceFailedError):
            with pytest.raises(expected) as caught:
                await flaky()
        assert len(calls) == 2 and caught.value.attempts == 2 and "ValueError: no luck" in str(caught.value)

        @client.once
        async def huge():
            return "x" * 70_000

        with pytest.raises(runstate.ResultTooLargeError):
            await huge()

        @client.once(name="not-json")
        async def opaque():
            return object()

        with pytest.raises(runstate.ConfigError, match="not JSON"):
            await opaque()


@pytest.mark.trio
async def test_a_caller_waiting_on_a_dead_holder_takes_the_work_over(autojump_clock):
    """The first caller is cancelled while it holds the work (its process died): nothing is
    recorded, its lease (5 s) lapses, and the caller that waited runs the body as attempt 2."""
    async with testing.serve() as rs:
        client = rs.client(run="takeover")
        attempts = []

        @client.once(lease=5)
        async def work():
            attempts.append(runstate.context().attempt)
            await trio.sleep(len(attempts) == 1 and 3600 or 1)
            return "done"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(work)
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
        started = trio.current_time()
        assert await work() == "done"
        assert attempts == [1, 2] and trio.current_time() - started < 7


# -- capacity ------------------------------------------------------------------------------------


@pytest.mark.trio
async def test_limit_lets_at_most_its_units_through_per_window(autojump_clock):
    """max=2 per second, five calls: they all run, and never more than the windows so far allow."""
    async with testing.serve() as rs:
        client = rs.client(run="limit")
        starts = []

        @client.limit("search-api", max=2, per="second")
        async def search(query):
            starts.append(trio.current_time())
            return query

        begin = trio.current_time()
        assert [await search(n) for n in range(5)] == list(range(5))
        # A grant of the window that starts at k s comes no sooner than k s: at most 2k calls before k s.
        for k in (1, 2, 3):
            assert len([at for at in starts if at - begin < k]) <= 2 * k
        assert starts[-1] - begin >= 2
        await client.atake("search-api", units=1)  # take() without a function, same quota
        with pytest.raises(runstate.ConflictError):
            await client.asetup(limits={"search-api": {"max": 3, "per": "second"}})


@pytest.mark.trio
async def test_slots_hold_a_pool_as_decorator_and_as_a_block(autojump_clock):
    """max=2: five 1 s calls never run more than two at once; `async with` holds one slot too,
    and its context's signal is live."""
    async with testing.serve() as rs:
        client = rs.client(run="slots")
        inside, most = [0], [0]

        @client.slots("browser", max=2)
        async def browse(n):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            await trio.sleep(1)
            inside[0] -= 1
            return n

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(browse, n)
        assert most == [2]
        async with client.slots("browser") as context:
            assert not context.signal.is_set()
            pool = (await rs.pools.list())[0]
            assert pool["unitsAvailable"] == 1
        assert (await rs.pools.list())[0]["unitsAvailable"] == 2


@pytest.mark.trio
async def test_a_slots_release_rides_through_an_outage(autojump_clock):
    """A slots call whose release meets an outage (its first 3 s refused at the transport) sends
    it again until it gets through: the units are back at once, not when the lease runs out."""
    async with testing.serve() as rs:
        origin = trio.current_time()

        class ReleasesDown:
            base_url = "the in-process test server"

            async def send(self, method, path, headers, body, timeout_s):
                if path.endswith("/release") and trio.current_time() - origin < 3:
                    raise runstate.transport.TransportError("connection refused")
                return await rs.transport.send(method, path, headers, body, timeout_s)

        client = runstate.Runstate(
            transport=ReleasesDown(), api_key=rs._config.api_key, space_id=rs.space_id, run="slots-outage"
        )

        @client.slots("browser", max=2)
        async def browse():
            return "page"

        assert await browse() == "page"
        assert 3 <= trio.current_time() - origin < 5
        assert (await rs.pools.list())[0]["unitsAvailable"] == 2


@pytest.mark.trio
async def test_a_slot_taken_away_before_its_release_raises_lease_lost(autojump_clock):
    """The grant behind a slots call goes stale between two renewals (its run is ended from
    elsewhere): the release is refused, and the call raises LeaseLostError instead of returning."""
    async with testing.serve() as rs:
        client = rs.client(run="slots-lost")

        @client.slots("browser", max=1)
        async def browse():
            await rs.scope(await client.arun_id()).cancel()
            return "page"

        with pytest.raises(runstate.LeaseLostError) as caught:
            await browse()
        assert "release was refused" in caught.value.message


@pytest.mark.trio
async def test_budget_charges_the_cost_and_refuses_what_no_longer_fits(autojump_clock):
    async with testing.serve() as rs:
        client = rs.client(run="budget")

        @client.budget("llm", reserve=0.30, limit=1.00, cost=lambda spent: spent)
        async def model(spend):
            if spend == "fail":
                raise RuntimeError("the call failed")
            return spend

        assert [await model(0.10), await model(0.50)] == [0.10, 0.50]
        with pytest.raises(RuntimeError):
            await model("fail")  # charged nothing
        assert await model(0.30) == 0.30
        with pytest.raises(runstate.BudgetExceededError) as caught:
            await model(0.05)
        assert caught.value.code == "INSUFFICIENT_BUDGET" and isinstance(caught.value, runstate.ConflictError)
        view = (await rs._ctx.call("GET", "/budgets")).body["budgets"][0]
        assert (view["spentMinor"], view["reservedMinor"]) == ("90", "0")


@pytest.mark.trio
async def test_work_that_outlives_its_reservation_and_its_run_is_charged_late(autojump_clock):
    """The run is stopped while the work runs, and the work outlives its reservation's hour: the
    settle finds it released, and the late charge (one minor unit reserved in the run, the cost
    settled against it) was refused as the run had ended, the spend never counted."""
    async with testing.serve() as rs:
        client = rs.client(run="late-budget")

        @client.budget("llm", reserve=0.30, limit=1.00, cost=lambda spent: spent)
        async def model(spend):
            await rs.scope(await client.arun_id()).cancel()
            await trio.sleep(3700)  # past the reservation's settleBy
            return spend

        assert await model(0.45) == 0.45
        view = (await rs._ctx.call("GET", "/budgets")).body["budgets"][0]
        assert (view["spentMinor"], view["reservedMinor"]) == ("45", "0"), view


# -- queues --------------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_queue_serves_calls_gathers_and_failures(autojump_clock):
    """A worker serves `review`; a producer calls it, sends a job and waits, gathers with need and
    accept, and gets TaskFailedError with the handler's error once its attempts are used."""
    async with testing.serve() as rs:
        worker, producer = rs.client(run="queue", worker="w1"), rs.client(run="queue", worker="p1")
        seen = []

        @worker.queue("review", attempts=2, concurrency=2)
        async def review(text):
            context = runstate.context()
            seen.append((context.attempt, context.key.startswith("review:")))
            if text == "bad":
                raise ValueError(f"cannot review {text!r}")
            await trio.sleep(0.5)
            return {"length": len(text)}

        remote = producer.queue("review")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.aserve)
            assert await remote.acall("hello") == {"length": 5}
            job = await remote.asend("hi")
            assert await job.aresult(timeout=10) == {"length": 2}
            assert len(await remote.agather(["a", "bb", "ccc", "dddd"], need=2)) == 2
            picked = await remote.agather(["p", "qq", "rrr"], need=1, accept=lambda result, text: result["length"] == 3)
            assert picked == [{"length": 3}]
            with pytest.raises(runstate.TaskFailedError) as caught:
                await remote.acall("bad")
            assert caught.value.reason.startswith("handler_error: ValueError: cannot review 'bad'")
            await producer.astop()
        assert (1, True) in seen and (2, True) in seen  # the bad one ran twice


@pytest.mark.trio
async def test_stopping_the_run_ends_serve_at_once_and_its_jobs_are_cancelled(autojump_clock):
    """A job runs (60 s) when the run is stopped at 3 s: serve() returns within a second, the
    handler is cancelled with its context's signal set, and the job ends CANCELLED, not SUCCEEDED."""
    async with testing.serve() as rs:
        worker = rs.client(run="stop-serve", worker="w1")
        told = []

        @worker.queue("slow")
        async def slow(n):
            context = runstate.context()
            try:
                await trio.sleep(60)
            finally:
                told.append(context.signal.is_set())
            return n

        job = await worker.queue("slow").asend(1)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.aserve)
            await trio.sleep(3)
            await worker.astop()
        assert trio.current_time() - start <= 4
        assert told == [True]
        view = (await rs._ctx.call("GET", f"/tasks/{job.id}")).body
        assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_cancelled"
        with pytest.raises(runstate.StoppedError):
            await job.aresult()


# -- timing, runs, watching ------------------------------------------------------------------------


@pytest.mark.trio
async def test_sleep_together_status_events_and_stop(autojump_clock):
    """A named sleep waits its time once; together() lets two callers go when both arrived; status
    and events follow the run; after stop() every call raises StoppedError and a child run of a
    stopped run cannot be made."""
    async with testing.serve() as rs:
        client, other = rs.client(run="watch", worker="a"), rs.client(run="watch", worker="b")
        start = trio.current_time()
        await client.asleep("nap", "2s")
        assert 2 <= trio.current_time() - start < 3.5
        again = trio.current_time()
        await client.asleep("nap", "2s")
        assert trio.current_time() - again < 0.5
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.atogether, "meet", 2)
            await trio.sleep(1)
            nursery.start_soon(other.atogether, "meet", 2)
        status = await client.astatus()
        assert (status.run.name, status.run.state) == ("watch", "running")
        seen = []
        stop_watching = runstate._signal.Flag()
        async for event in client.aevents(signal=stop_watching):
            seen.append(event.type)
            if event.type == "barrier.released":
                break
        assert seen[0] == "scope.created" and "timer.fired" in seen
        child = client.child("part")
        assert (await child.arun_id()) != (await client.arun_id())
        await client.astop()
        assert (await client.astatus()).run.state == "stopped"
        with pytest.raises(runstate.StoppedError):
            await client.atogether("meet-again", 1)
        with pytest.raises(runstate.StoppedError):
            await client.child().arun_id()


@pytest.mark.trio
async def test_the_module_functions_work_through_the_default_client(autojump_clock):
    """`runstate.once` and friends are the default client's: `testing.use(rs)` points it at the
    in-process server for a block, in the run asked for."""
    async with testing.serve() as rs:

        @runstate.once
        async def answer():
            return 42

        with testing.use(rs, run="module"):
            assert await answer() == 42
            run_id = await runstate.arun_id()
            await runstate.astop()
        view = (await rs._ctx.call("GET", f"/scopes/{run_id}")).body
        assert view["name"] == "module" and view["storedState"] == "CANCELLED"


@pytest.mark.anyio
async def test_the_run_bound_api_under_asyncio():
    """The same calls on asyncio (the kernel as a trio guest, in real time): once, a queue served
    and called, stop."""
    async with testing.serve() as rs:
        client = rs.client(run="asyncio")

        @client.once
        async def double(n):
            return 2 * n

        @client.queue("echo")
        async def echo(text):
            return text.upper()

        assert await double(21) == 42
        async with anyio.create_task_group() as group:
            group.start_soon(client.aserve)
            with anyio.fail_after(10):
                assert await client.queue("echo").acall("hi") == "HI"
            await client.astop()


def test_the_documented_testing_example_runs_verbatim(tmp_path):
    """docs/python.md's example of testing run-bound code in-process, saved as a test file as it
    is, passes under pytest with pytest-trio."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    after = text[text.index("<!-- run-bound-testing-snippet"):]
    start = after.index("```python\n") + len("```python\n")
    (tmp_path / "test_example.py").write_text(after[start:after.index("\n```", start) + 1])
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, f"{done.stdout}\n{done.stderr}"


def test_an_async_queue_called_from_plain_code_and_never_awaited_says_what_to_do():
    """A queue with an async def handler gives an awaitable from plain code (as 0.3.0's does, so
    `asyncio.run(review(doc))` works); left unawaited, Python's warning names the way out."""
    import gc

    client = runstate.Runstate(api_key="k", space_id="s", base_url="http://127.0.0.1:9")

    @client.queue("review")
    async def review(doc):
        return doc

    pending = review({"doc": 1})
    assert "await it in a coroutine, or call review.send(x).result() from plain code" in pending.__qualname__
    with pytest.warns(RuntimeWarning, match=r"review\(\.\.\.\): a queue with an async def handler gives an awaitable"):
        del pending
        gc.collect()
    client.close()
