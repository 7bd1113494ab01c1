"""A call cancelled while a request the server answers at once is on its way gives back what the
server granted.

The server applies a request whose connection the client cut: an acquire cancelled while its
answer was on the way left the key or the units held, renewed by no one, until the lease ran out.
`CutOnAnswer` cancels the caller's scope exactly when the answer to one path arrives, before the
caller reads it, as a `move_on_after` or a cancelled task group would at that moment; the test
then looks at the server.
"""

from __future__ import annotations

from typing import Any, Mapping

import pytest
import trio

import runstate
from runstate import testing
from runstate.transport import Exchange

pytestmark = pytest.mark.trio


class CutOnAnswer:
    """A transport in front of the in-process server that, once armed, cancels `scope` when the
    answer to a request whose path ends in `ending` has come back, and checkpoints: a caller not
    shielded from it loses the answer there."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.base_url = inner.base_url
        self.armed: tuple[trio.CancelScope, str] | None = None
        self.cut = 0

    def arm(self, scope: trio.CancelScope, ending: str) -> None:
        self.armed = (scope, ending)

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        exchange: Exchange = await self.inner.send(method, path, headers, body, timeout_s)
        if self.armed is not None and path.partition("?")[0].endswith(self.armed[1]):
            scope, _ = self.armed
            self.armed = None
            self.cut += 1
            scope.cancel()
            await trio.lowlevel.checkpoint()
        return exchange


async def _cut_client(rs: testing.InProcessRunstate) -> tuple[Any, CutOnAnswer]:
    transport = CutOnAnswer(rs.transport)
    return rs.new_client(holder="cut", transport=transport), transport


@pytest.mark.parametrize("wait", [False, True])
async def test_a_claim_acquire_cancelled_as_its_grant_comes_back_releases_the_key(autojump_clock, wait):
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/claims")
            await client.scope(run.id).claim("k").acquire(wait=wait)
        assert scope.cancelled_caught and transport.cut == 1
        other = await rs.new_client(holder="other").scope(run.id).claim("k").try_acquire()
        assert other["kind"] == "acquired", "the key was left held by the cancelled acquire"
        await other["lease"].release()


async def test_a_claim_acquire_in_a_cancelled_task_group_releases_the_key(autojump_clock):
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        client, transport = await _cut_client(rs)
        async with trio.open_nursery() as nursery:
            transport.arm(nursery.cancel_scope, "/claims")
            nursery.start_soon(lambda: client.scope(run.id).claim("k").acquire())
        other = await rs.new_client(holder="other").scope(run.id).claim("k").try_acquire()
        assert other["kind"] == "acquired"


async def test_a_pool_acquire_cancelled_as_its_grant_comes_back_gives_its_units_back(autojump_clock):
    async with testing.serve() as rs:
        await rs.pools.ensure("gpu", capacity=1)
        run = await rs.scopes.create()
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/acquire")
            await client.scope(run.id).pool("gpu").acquire()
        assert scope.cancelled_caught and transport.cut == 1
        other = await rs.new_client(holder="other").scope(run.id).pool("gpu").try_acquire()
        assert other["kind"] == "acquired", "the unit was left held by the cancelled acquire"


async def test_a_cancelled_acquire_waits_for_a_hung_server_two_seconds_at_most(autojump_clock):
    """The request let finish after a cancellation is cut 2 s after it, when no answer comes."""

    class Hangs:
        base_url = "a server that hangs"

        async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
            await trio.sleep_forever()
            raise AssertionError

    async with testing.serve() as rs:
        client = rs.new_client(holder="cut", transport=Hangs())
        started = trio.current_time()
        with trio.move_on_after(0.1):
            await client.scope("sc_1").claim("k").acquire()
        assert 2.0 <= trio.current_time() - started < 2.2


async def _leased(rs: testing.InProcessRunstate, run_id: str) -> int:
    counts = (await rs.diagnostics.run(run_id))["counts"]["messages"]
    return int(counts.get("LEASED", 0))


@pytest.mark.parametrize("wait_ms", [0, 5_000])
async def test_a_receive_cancelled_as_its_message_comes_back_puts_it_back(autojump_clock, wait_ms):
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("inbox")
        run = await rs.scopes.create()
        await run.mailbox("inbox").send({"n": 1})
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/recv")
            await client.scope(run.id).mailbox("inbox").receive(wait_ms=wait_ms)
        assert scope.cancelled_caught and transport.cut == 1
        assert await _leased(rs, run.id) == 0, "the message was left leased to no one"


@pytest.mark.parametrize("prefetch", [1, 3])
async def test_consume_cancelled_as_a_recv_answers_puts_the_message_back(autojump_clock, prefetch):
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("inbox")
        run = await rs.scopes.create()
        await run.mailbox("inbox").send({"n": 1})
        client, transport = await _cut_client(rs)
        handled = []

        async def handle(data, delivery):
            handled.append(data)

        with trio.CancelScope() as scope:
            transport.arm(scope, "/recv-many" if prefetch > 1 else "/recv")
            await client.scope(run.id).mailbox("inbox").consume(handle, prefetch=prefetch)
        assert scope.cancelled_caught and transport.cut == 1 and handled == []
        assert await _leased(rs, run.id) == 0, "the message was left leased to no one"


async def test_an_admit_cancelled_as_it_admits_a_task_gives_it_back_with_its_grants(autojump_clock):
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("work", mode="WORK")
        await rs.pools.ensure("gpu", capacity=1)
        run = await rs.scopes.create()
        ticket = await run.mailbox("work").submit({"n": 1}, key="t1", requirements={"pools": [{"name": "gpu", "units": 1}]})
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/tasks/admit")
            await client.scope(run.id).mailbox("work").admit(wait_ms=5_000)
        assert scope.cancelled_caught and transport.cut == 1
        assert await _leased(rs, run.id) == 0, "the task was left leased to no one"
        assert (await ticket.status())["state"] == "QUEUED"
        free = (await rs.scope(run.id).pool("gpu").status())["unitsAvailable"]
        assert free == 1, "the pool unit admitted with it was left held"


@pytest.mark.parametrize("cut", ["at the waiter's creation", "in line"])
async def test_a_quota_take_cancelled_while_it_waits_leaves_the_line(autojump_clock, cut):
    """Its waiter stayed in line until its time to live, and was served at the next window,
    consuming the units for no one."""
    async with testing.serve() as rs:
        await rs.quotas.ensure("calls", units_per_window=1, window_seconds=10)
        run = await rs.scopes.create()
        await run.quota("calls").take()  # the window's one unit
        client, transport = await _cut_client(rs)
        with trio.move_on_after(1) as scope:
            if cut == "at the waiter's creation":
                transport.arm(scope, "/wait")
            await client.scope(run.id).quota("calls").take(timeout_ms=25_000)
        assert scope.cancelled_caught
        await trio.sleep(11)  # the next window
        other = await rs.new_client(holder="other").scope(run.id).quota("calls").try_take()
        assert other["kind"] == "consumed", "the cancelled take's waiter was served for no one"


async def test_serve_cancelled_as_an_admission_answers_puts_the_job_back(autojump_clock):
    """The run-bound serve() takes its jobs by admission: one admitted as serve() is cancelled
    goes back at once, not leased to no one for the whole lease."""
    async with testing.serve() as rs:
        producer = rs.client(run="cut-serve", worker="p1")
        job = await producer.queue("review").asend("hello")
        transport = CutOnAnswer(rs.transport)
        worker = runstate.Runstate(transport=transport, api_key="test-key", space_id=rs.space_id, run="cut-serve", worker="w1")
        ran = []

        @worker.queue("review")
        async def review(text):
            ran.append(text)

        with trio.CancelScope() as scope:
            transport.arm(scope, "/tasks/admit")
            await worker.aserve()
        assert scope.cancelled_caught and transport.cut == 1 and ran == []
        run_id = (await rs._ctx.call("GET", f"/tasks/{job.id}")).body["scopeId"]
        assert await _leased(rs, run_id) == 0, "the job was left leased to no one"


async def _budget_row(rs: testing.InProcessRunstate) -> dict:
    return (await rs._ctx.call("GET", "/budgets")).body["budgets"][0]


async def test_a_budget_reserve_cancelled_as_its_reservation_comes_back_voids_it(autojump_clock):
    """The reservation stayed held, refusing every other caller, until its time to be settled."""
    async with testing.serve() as rs:
        await rs.budgets.ensure("llm", currency="USD", scale=2, limit="1.00")
        run = await rs.scopes.create()
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/reserve")
            await client.scope(run.id).budget("llm").reserve(amount="1.00")
        assert scope.cancelled_caught and transport.cut == 1
        assert (await _budget_row(rs))["reservedMinor"] == "0", "the money was left reserved for no one"
        await rs.scope(run.id).budget("llm").reserve(amount="1.00")


def _run_bound(rs: testing.InProcessRunstate, run: str) -> tuple[runstate.Runstate, CutOnAnswer]:
    transport = CutOnAnswer(rs.transport)
    client = runstate.Runstate(transport=transport, api_key="test-key", space_id=rs.space_id, run=run, worker="w1")
    return client, transport


async def test_a_budget_call_cancelled_as_its_reservation_comes_back_voids_it(autojump_clock):
    async with testing.serve() as rs:
        client, transport = _run_bound(rs, "cut-budget")
        ran = []

        @client.budget("llm", reserve=1.00, limit=1.00)
        async def model():
            ran.append(1)

        await client.asetup(budgets={"llm": {"limit": 1.00}})
        with trio.CancelScope() as scope:
            transport.arm(scope, "/reserve")
            await model()
        assert scope.cancelled_caught and transport.cut == 1 and ran == []
        assert (await _budget_row(rs))["reservedMinor"] == "0", "the money was left reserved for no one"


async def test_a_slots_call_cancelled_as_its_grant_comes_back_releases_the_units(autojump_clock):
    async with testing.serve() as rs:
        client, transport = _run_bound(rs, "cut-slots")
        await client.asetup(slots={"browser": {"max": 1}})
        with trio.CancelScope() as scope:
            transport.arm(scope, "/acquire")
            async with client.slots("browser"):
                raise AssertionError("the block ran after its cancellation")
        assert scope.cancelled_caught and transport.cut == 1
        assert (await rs.pools.list())[0]["unitsAvailable"] == 1, "the slot was left held by no one"


async def test_a_slots_call_cancelled_as_it_joins_the_line_leaves_it(autojump_clock):
    """Its waiter stayed first in line: when the slot came free, its turn went to no one, and the
    next caller waited for that turn to run out."""
    async with testing.serve() as rs:
        client, transport = _run_bound(rs, "cut-slots-line")
        other = rs.client(run="cut-slots-line", worker="w2")
        await client.asetup(slots={"browser": {"max": 1}})
        async with other.slots("browser"):
            with trio.CancelScope() as scope:
                transport.arm(scope, "/wait")
                async with client.slots("browser"):
                    raise AssertionError("the block ran after its cancellation")
            assert scope.cancelled_caught and transport.cut == 1
        started = trio.current_time()
        async with other.slots("browser", timeout=30):
            assert trio.current_time() - started < 1, "the next caller waited for a turn given to no one"


async def test_a_take_cancelled_as_it_joins_the_line_leaves_it(autojump_clock):
    """Its waiter stayed in line until its time to live, and was served at the next window,
    consuming the units for no one."""
    async with testing.serve() as rs:
        client, transport = _run_bound(rs, "cut-take")
        other = rs.client(run="cut-take", worker="w2")
        await other.asetup(limits={"calls": {"max": 1, "per": 10}})
        await other.atake("calls")  # the window's one unit
        with trio.CancelScope() as scope:
            transport.arm(scope, "/wait")
            await client.atake("calls", timeout=30)
        assert scope.cancelled_caught and transport.cut == 1
        await trio.sleep(11)  # the next window
        with trio.move_on_after(1) as late:
            await other.atake("calls")
        assert not late.cancelled_caught, "the cancelled take's waiter was served for no one"


async def test_a_once_call_cancelled_as_it_acquires_gives_the_key_back_unused(autojump_clock):
    """The key stayed held for its whole lease, every other caller waiting on it, and that
    acquisition then counted as one of the work's attempts."""
    async with testing.serve() as rs:
        client, transport = _run_bound(rs, "cut-once")
        other = rs.client(run="cut-once", worker="w2")
        ran = []

        async def research(topic):
            ran.append(topic)
            return f"notes on {topic}"

        cut, whole = client.once(research), other.once(research, attempts=1)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/once/acquire")
            await cut("tides")
        assert scope.cancelled_caught and transport.cut == 1 and ran == []
        started = trio.current_time()
        assert await whole("tides") == "notes on tides"
        assert trio.current_time() - started < 1, "the next caller waited for the cut caller's lease"


async def _counts(rs: testing.InProcessRunstate, run_id: str) -> dict[str, int]:
    counts = (await rs.diagnostics.run(run_id))["counts"]["messages"]
    return {state: count for state, count in counts.items() if count}


@pytest.mark.parametrize("prefetch", [1, 3])
async def test_work_put_back_unhandled_does_not_use_up_the_messages_attempts(autojump_clock, prefetch):
    """maxAttempts 2: two receives cut as they answered put the message back each time as a
    retry, which counted both attempts and dead-lettered it with no handler ever seeing it (and
    made it wait a backoff between the two). Returned unhandled, it is there at once for the
    consumer that then handles it."""
    async with testing.serve() as rs:
        await rs._ctx.call("PUT", "/mailboxes/by-name/fragile", body={"maxAttempts": 2})
        run = await rs.scopes.create()
        await run.mailbox("fragile").send({"n": 1})
        client, transport = await _cut_client(rs)
        started = trio.current_time()
        for _ in range(2):
            with trio.CancelScope() as scope:
                transport.arm(scope, "/recv-many" if prefetch > 1 else "/recv")
                await client.scope(run.id).mailbox("fragile").consume(lambda data, delivery: None, prefetch=prefetch)
            assert scope.cancelled_caught
        assert transport.cut == 2 and trio.current_time() - started < 1
        assert await _counts(rs, run.id) == {"QUEUED": 1}
        delivery = await rs.scope(run.id).mailbox("fragile").receive()
        assert delivery is not None and delivery.attempt == 3, "the message was dead-lettered by its put-backs"
        await delivery.complete()


async def test_work_taken_ahead_and_put_back_at_a_stop_keeps_its_attempts(autojump_clock):
    """maxAttempts 1, prefetch 3, one handler at a time: the first handler stops consume(); the
    two deliveries taken ahead, which no handler saw, go back queued (as retries they used up
    their one attempt and were dead-lettered)."""
    async with testing.serve() as rs:
        await rs._ctx.call("PUT", "/mailboxes/by-name/strict", body={"maxAttempts": 1})
        run = await rs.scopes.create()
        for n in range(3):
            await run.mailbox("strict").send({"n": n})
        stop = trio.Event()
        handled = []

        async def handle(data, delivery):
            handled.append(data["n"])
            stop.set()

        await run.mailbox("strict").consume(handle, prefetch=3, concurrency=1, stop_event=stop)
        assert handled == [0]
        assert await _counts(rs, run.id) == {"QUEUED": 2}, "work taken ahead was dead-lettered"


async def test_a_server_without_return_gets_the_work_back_as_a_retry(autojump_clock):
    """Against a server that has no `/return` (404), what was taken unhandled is retried instead,
    as before: back on the queue after its backoff, the attempt counted, never left leased."""

    class NoReturn:
        def __init__(self, inner: Any) -> None:
            self.inner, self.base_url, self.refused = inner, inner.base_url, 0

        async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
            if path.partition("?")[0].endswith("/return"):
                self.refused += 1
                envelope = b'{"error":{"code":"NOT_FOUND","message":"no such route"}}'
                return 404, {"content-type": "application/json"}, envelope
            answer: Exchange = await self.inner.send(method, path, headers, body, timeout_s)
            return answer

    async with testing.serve() as rs:
        await rs.mailboxes.ensure("inbox")
        run = await rs.scopes.create()
        await run.mailbox("inbox").send({"n": 1})
        transport = CutOnAnswer(NoReturn(rs.transport))
        client = rs.new_client(holder="cut", transport=transport)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/recv")
            await client.scope(run.id).mailbox("inbox").receive()
        assert scope.cancelled_caught and transport.inner.refused == 1
        assert await _counts(rs, run.id) == {"DELAYED": 1}


async def test_a_take_cancelled_while_in_line_leaves_it(autojump_clock):
    """The run-bound take() cancelled while its waiter waits: the waiter stayed in line and was
    served at the next window, consuming the unit for no one."""
    async with testing.serve() as rs:
        taker, other = rs.client(run="line-take", worker="w1"), rs.client(run="line-take", worker="w2")
        await other.asetup(limits={"calls": {"max": 1, "per": 10}})
        await other.atake("calls")  # the window's one unit
        with trio.move_on_after(1) as scope:
            await taker.atake("calls", timeout=30)
        assert scope.cancelled_caught
        await trio.sleep(10)  # the next window
        with trio.move_on_after(1) as late:
            await other.atake("calls")
        assert not late.cancelled_caught, "the cancelled take's waiter was served for no one"


async def test_a_slots_call_cancelled_while_in_line_leaves_it(autojump_clock):
    """slots() cancelled while its waiter waits in the pool's line: when the slot came free the
    turn went to the waiter no one watched, and the next caller waited for that turn to run out."""
    async with testing.serve() as rs:
        waiting, other = rs.client(run="line-slots", worker="w1"), rs.client(run="line-slots", worker="w2")
        await other.asetup(slots={"browser": {"max": 1}})
        async with other.slots("browser"):
            with trio.move_on_after(2) as scope:
                async with waiting.slots("browser", timeout=30):
                    raise AssertionError("the slot was held by another")
            assert scope.cancelled_caught
        started = trio.current_time()
        async with other.slots("browser", timeout=30):
            assert trio.current_time() - started < 1, "the next caller waited for a turn given to no one"


class CutOnGrant(CutOnAnswer):
    """Cancels `scope` when a look at a quota waiter answers GRANTED: the grant came as the caller
    was cancelled, before it read it."""

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        exchange: Exchange = await self.inner.send(method, path, headers, body, timeout_s)
        if self.armed is not None and method == "GET" and "/allowance-waiters/" in path and b'"GRANTED"' in exchange[2]:
            scope, _ = self.armed
            self.armed = None
            self.cut += 1
            scope.cancel()
            await trio.lowlevel.checkpoint()
        return exchange


class WaitsLate:
    """A transport that sends a quota waiter's creation only at `at` (virtual time): the window
    that refused the consume has ended by then, and the waiter is granted in its answer."""

    def __init__(self, inner: Any, at: float) -> None:
        self.inner, self.base_url, self.at = inner, inner.base_url, at

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        if path.partition("?")[0].endswith("/wait"):
            await trio.sleep_until(self.at)
        answer: Exchange = await self.inner.send(method, path, headers, body, timeout_s)
        return answer


async def _took_one(rs: testing.InProcessRunstate, run_id: str) -> bool:
    """Whether another caller can take the window's one unit now."""
    return (await rs.new_client(holder="other").scope(run_id).quota("calls").try_take())["kind"] == "consumed"


@pytest.mark.parametrize("call", ["try_take", "take"])
async def test_a_quota_take_cancelled_as_its_consumption_comes_back_refunds_it(autojump_clock, call):
    """The server consumed all the same: the unit was used by no one until the window ended."""
    async with testing.serve() as rs:
        await rs.quotas.ensure("calls", units_per_window=1, window_seconds=60)
        run = await rs.scopes.create()
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/consume")
            await getattr(client.scope(run.id).quota("calls"), call)()
        assert scope.cancelled_caught and transport.cut == 1
        assert await _took_one(rs, run.id), "the unit was left consumed by the cancelled take"


async def test_a_quota_take_cancelled_as_its_waiter_is_granted_at_once_refunds_it(autojump_clock):
    """The consume was refused, and the waiter, made once the next window had begun, was granted
    in its answer: left to stand, its unit was used by no one until that window ended."""
    async with testing.serve() as rs:
        await rs.quotas.ensure("calls", units_per_window=1, window_seconds=10)
        run = await rs.scopes.create()
        start = trio.current_time()
        await run.quota("calls").take()  # the window's one unit
        transport = CutOnAnswer(WaitsLate(rs.transport, start + 10.5))
        client = rs.new_client(holder="cut", transport=transport)
        with trio.CancelScope() as scope:
            transport.arm(scope, "/wait")
            await client.scope(run.id).quota("calls").take(timeout_ms=25_000)
        assert scope.cancelled_caught and transport.cut == 1 and trio.current_time() - start < 11
        assert await _took_one(rs, run.id), "the cancelled take's grant was left standing"


async def test_a_quota_take_cancelled_as_its_waiter_turns_out_granted_refunds_it(autojump_clock):
    """Cancelled as the look at its waiter answered GRANTED: the cancel that follows finds the
    grant standing, and its unit was used by no one until the window ended."""
    async with testing.serve() as rs:
        await rs.quotas.ensure("calls", units_per_window=1, window_seconds=10)
        run = await rs.scopes.create()
        start = trio.current_time()
        await run.quota("calls").take()  # the window's one unit
        transport = CutOnGrant(rs.transport)
        client = rs.new_client(holder="cut", transport=transport)
        with trio.CancelScope() as scope:
            transport.arm(scope, "")
            await client.scope(run.id).quota("calls").take(timeout_ms=25_000)
        assert scope.cancelled_caught and transport.cut == 1 and 10 <= trio.current_time() - start < 12
        assert await _took_one(rs, run.id), "the grant that came as the take was cancelled was left standing"


async def test_a_quota_take_cancelled_as_it_reads_the_window_of_its_grant_refunds_it(autojump_clock):
    """A waiter's grant known, take() reads the allowance for the window it counts in before it
    returns: cancelled there, the unit was used by no one until the window ended."""
    async with testing.serve() as rs:
        allowance = await rs.quotas.ensure("calls", units_per_window=1, window_seconds=10)
        run = await rs.scopes.create()
        await run.quota("calls").take()  # the window's one unit
        client, transport = await _cut_client(rs)
        with trio.CancelScope() as scope:
            transport.arm(scope, f"/allowances/{allowance['id']}")
            await client.scope(run.id).quota("calls").take(timeout_ms=25_000)
        assert scope.cancelled_caught and transport.cut == 1
        assert await _took_one(rs, run.id), "the grant was left standing for a take that never returned"


@pytest.mark.parametrize("how", ["take", "limit"])
async def test_a_take_cancelled_as_its_waiter_is_granted_refunds_the_units(autojump_clock, how):
    """The run-bound take() (and limit(), which takes as it does) joins the line, and is granted
    at once when the units are free: cancelled as that answer came, the unit was used by no one
    until the window ended."""
    async with testing.serve() as rs:
        client, transport = _run_bound(rs, f"cut-{how}-granted")
        other = rs.client(run=f"cut-{how}-granted", worker="w2")
        await other.asetup(limits={"calls": {"max": 1, "per": 60}})
        ran = []

        @client.limit("calls")
        async def call_api():
            ran.append(1)

        with trio.CancelScope() as scope:
            transport.arm(scope, "/wait")
            await (client.atake("calls") if how == "take" else call_api())
        assert scope.cancelled_caught and transport.cut == 1 and ran == []
        with trio.move_on_after(1) as late:
            await other.atake("calls")
        assert not late.cancelled_caught, "the cancelled take's unit was used by no one"


async def test_a_take_cancelled_as_its_waiter_turns_out_granted_refunds_the_units(autojump_clock):
    """The run-bound take() cancelled as the look at its waiter answered GRANTED: it leaves the
    line, finds the grant standing, and gives the unit back."""
    async with testing.serve() as rs:
        transport = CutOnGrant(rs.transport)
        client = runstate.Runstate(transport=transport, api_key="test-key", space_id=rs.space_id, run="line-granted", worker="w1")
        other = rs.client(run="line-granted", worker="w2")
        await other.asetup(limits={"calls": {"max": 1, "per": 10}})
        start = trio.current_time()
        await other.atake("calls")  # the window's one unit
        with trio.CancelScope() as scope:
            transport.arm(scope, "")
            await client.atake("calls", timeout=30)
        assert scope.cancelled_caught and transport.cut == 1 and 10 <= trio.current_time() - start < 12
        with trio.move_on_after(1) as late:
            await other.atake("calls")
        assert not late.cancelled_caught, "the grant that came as the take was cancelled was left standing"


class GrantedBeforeCancel:
    """A transport in front of the in-process server that, when a waiter's cancel goes out, first
    gives `consumption` back to its window: the waiter at the head of the line is granted, and the
    cancel then finds it GRANTED, as when a grant and the caller's time running out meet."""

    def __init__(self, inner: Any, allowance_id: str, consumption: str) -> None:
        self.inner = inner
        self.base_url = inner.base_url
        self.refund = f"/allowances/{allowance_id}/consumptions/{consumption}/refund"

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        if path.startswith("/v1/spaces/") and "/allowance-waiters/" in path and path.endswith("/cancel"):
            prefix = path.partition("/allowance-waiters/")[0]
            alone = {name: value for name, value in headers.items() if name.lower() != "idempotency-key"}  # (a call of its own)
            freed = await self.inner.send("POST", prefix + self.refund, alone, b"{}", timeout_s)
            assert freed[0] == 200, freed
        return await self.inner.send(method, path, headers, body, timeout_s)


@pytest.mark.parametrize("how", ["quota", "run-bound"])
async def test_a_quota_take_granted_as_its_time_runs_out_returns_the_grant(autojump_clock, how):
    """Out of time, take() cancels its waiter; granted just before, the cancel answers GRANTED:
    the units are the caller's, so take() returns them rather than a WaitTimeoutError over units
    consumed for no one until the window ends."""
    async with testing.serve() as rs:
        allowance = await rs.quotas.ensure("calls", units_per_window=1, window_seconds=3600)
        run = await rs.scopes.create()
        first = await run.quota("calls").take()  # the window's one unit
        transport = GrantedBeforeCancel(rs.transport, allowance["id"], first["consumptionId"])
        if how == "quota":
            client = rs.new_client(holder="late", transport=transport)
            taken = await client.scope(run.id).quota("calls").take(timeout_ms=2_000)
            assert taken["units"] == 1 and taken["consumptionId"] != first["consumptionId"]
        else:
            bound = runstate.Runstate(transport=transport, api_key="test-key", space_id=rs.space_id, run="late", worker="w1")
            await bound.atake("calls", timeout=2)  # (no WaitTimeoutError)
        assert not await _took_one(rs, run.id), "the window's unit is the late take's"
