"""The SDK's capacity handles against a real kernel through `runstate.testing`, in virtual time
under trio and in real time under asyncio: pools, quotas, work limits and budgets by the 0.2.0 names."""

from __future__ import annotations

import anyio
import pytest
import trio

import runstate
from runstate import testing
from runstate.transport import TransportError

pytest.importorskip("runstate.server.app")


class Flaky:
    """Wraps a transport; while `down` is true, grant renewals fail as if the network dropped them."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.down = False

    async def send(self, method, path, headers, body, timeout_s):
        if self.down and "/grants/" in path and path.endswith("/renew"):
            raise TransportError("network unreachable")
        return await self.inner.send(method, path, headers, body, timeout_s)


@pytest.mark.trio
async def test_a_pool_lease_is_renewed_and_a_full_pool_waits_then_times_out(autojump_clock):
    """ensure creates once and verifies; a 5 s grant lives for minutes by renewal; a full pool makes
    try_acquire say capacity-unavailable and acquire time out after exactly its timeout."""
    async with testing.serve() as rs:
        created = await rs.pools.ensure("gpu", capacity=2)
        assert (await rs.pools.ensure("gpu", capacity=2))["id"] == created["id"]
        with pytest.raises(runstate.ConflictError):
            await rs.pools.ensure("gpu", capacity=3)
        run = await rs.scopes.create(name="pools")
        lease = await run.pool("gpu").acquire(units=2, lease_seconds=5)
        await trio.sleep(120)
        assert not lease.is_lost and (await run.pool("gpu").status())["unitsAvailable"] == 0
        assert await run.pool("gpu").try_acquire() == {"kind": "capacity-unavailable"}
        started = trio.current_time()
        with pytest.raises(runstate.WaitTimeoutError):
            await run.pool("gpu").acquire(timeout_ms=2000)
        assert trio.current_time() - started == pytest.approx(2.0, abs=0.01)
        await lease.release()
        assert (await run.pool("gpu").status())["unitsAvailable"] == 2


@pytest.mark.trio
async def test_a_lost_grant_cancels_run_and_raises_lease_lost(autojump_clock):
    """When renewals fail, run(fn) cancels fn and raises LeaseLostError; the server then expires
    the grant on its own and the units come back."""
    async with testing.serve() as rs:
        flaky = Flaky(rs.transport)
        client = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker-1", transport=flaky)
        await rs.pools.ensure("gpu", capacity=1)
        run = client.scope((await rs.scopes.create(name="lost")).id)
        reached = []

        async def work(lease):
            flaky.down = True
            await trio.sleep(3600)
            reached.append("end")

        with pytest.raises(runstate.LeaseLostError):
            await run.pool("gpu").run(work, lease_seconds=6)
        assert reached == []
        await trio.sleep(10)
        assert (await rs.scope(run.id).pool("gpu").status())["unitsAvailable"] == 1


@pytest.mark.trio
async def test_a_grant_rides_through_an_outage_shorter_than_its_lease(autojump_clock):
    """Renewals that fail for 15 s of a 30 s lease are tried again until one gets through: the
    grant is not lost, and run(fn) returns fn's value (as a claim's lease does)."""
    async with testing.serve() as rs:
        flaky = Flaky(rs.transport)
        client = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker-1", transport=flaky)
        await rs.pools.ensure("gpu", capacity=1)
        run = client.scope((await rs.scopes.create(name="outage")).id)

        async def work(lease):
            await trio.sleep(12)
            flaky.down = True
            await trio.sleep(15)
            assert not lease.is_lost
            flaky.down = False
            await trio.sleep(60)
            assert not lease.is_lost
            return "done"

        assert await run.pool("gpu").run(work, lease_seconds=30) == "done"
        assert (await rs.scope(run.id).pool("gpu").status())["unitsAvailable"] == 1
        await client.aclose()


@pytest.mark.trio
async def test_a_grant_gone_before_its_release_makes_run_raise_lease_lost(autojump_clock):
    """The run ends while fn holds a grant, and fn returns before the next renewal: the release is
    refused, so run() raises LeaseLostError instead of returning fn's result."""
    async with testing.serve() as rs:
        await rs.pools.ensure("gpu", capacity=1)
        run = await rs.scopes.create(name="ended")
        held = []

        async def work(lease):
            held.append(lease)
            await run.cancel()
            return "result"

        with pytest.raises(runstate.LeaseLostError):
            await run.pool("gpu").run(work, lease_seconds=30)
        assert held[0].is_lost


@pytest.mark.trio
async def test_quota_take_waits_for_the_next_window(autojump_clock):
    """take() on a used-up window registers a waiter and returns the consumption when the server
    grants it at the next window; try_take says exhausted; cooldown is reported back."""
    async with testing.serve() as rs:
        await rs.quotas.ensure("llm", units_per_window=2, window_seconds=10)
        run = await rs.scopes.create(name="quotas")
        quota = run.quota("llm")
        assert (await quota.try_take(units=2))["kind"] == "consumed"
        assert await quota.try_take() == {"kind": "exhausted"}
        started = trio.current_time()
        taken = await quota.take(units=1, timeout_ms=30_000)
        assert taken["units"] == 1 and taken["remaining"] == 1 and taken["consumptionId"].startswith("cs_")
        assert 10 - (trio.current_time() - started) < 0.5
        with pytest.raises(runstate.WaitTimeoutError):
            await quota.take(units=2, wait=False)
        cooled = await quota.cooldown(5, reason="429 upstream")
        assert cooled["reason"] == "429 upstream"


@pytest.mark.trio
async def test_work_limits_and_budgets(autojump_clock):
    """work_limits.ensure and a submit over it (ConflictError BACKLOG_FULL); budgets in exact minor units."""
    async with testing.serve() as rs:
        run = await rs.scopes.create(name="limits")
        await rs.work_limits.ensure("crawl", scope_id=run.id, max_outstanding=1)
        await rs.mailboxes.ensure("jobs")
        await run.mailbox("jobs").submit({"n": 1}, key="a", work_limit="crawl")
        with pytest.raises(runstate.ConflictError) as caught:
            await run.mailbox("jobs").submit({"n": 2}, key="b", work_limit="crawl")
        assert caught.value.code == "BACKLOG_FULL"
        budget = await rs.budgets.ensure("spend", currency="EUR", scale=2, limit="10")
        assert budget["limitMinor"] == "1000"
        assert (await rs.budgets.ensure("spend", currency="EUR", scale=2, limit="10.00"))["id"] == budget["id"]
        reservation = await run.budget("spend").reserve(amount="0.30")
        assert reservation.reserved == "0.30"
        settled = await reservation.settle(amount="0.10", usage_key="call-1")
        assert settled["state"] == "ACTIVE" and reservation.reserved == "0.20"
        voided = await reservation.void(usage_key="call-1:void")
        assert voided["state"] == "VOIDED"
        status = await run.budget("spend").status()
        assert (status["spentMinor"], status["availableMinor"]) == ("10", "990")
        # An amount that is no decimal of the budget's scale is refused before anything is sent,
        # as a ValidationError: the class of its code, VALIDATION_FAILED.
        for amount in ("0.001", "-1", "1e3", "abc"):
            with pytest.raises(runstate.ValidationError) as refused:
                await run.budget("spend").reserve(amount=amount)
            assert refused.value.code == "VALIDATION_FAILED"
        with pytest.raises(runstate.ValidationError):
            await rs.budgets.ensure("other", currency="EUR", scale=2, limit="1.001")


def test_pools_under_asyncio_in_real_time():
    """The same handles under asyncio: a pool grant is taken, run(fn) returns fn's value, released."""
    import asyncio

    async def main():
        async with testing.serve() as rs:
            await rs.pools.ensure("gpu", capacity=1)
            run = await rs.scopes.create(name="asyncio")

            async def work(lease):
                assert (await run.pool("gpu").try_acquire()) == {"kind": "capacity-unavailable"}
                return lease.units

            assert await run.pool("gpu").run(work) == 1
            return (await run.pool("gpu").status())["unitsAvailable"]

    assert asyncio.run(main()) == 1


@pytest.mark.trio
async def test_submit_with_requirements_then_admit(autojump_clock):
    """submit(..., requirements=) then mailbox.admit(): the delivery comes with its grant and
    consumption; a second admit waits (long poll) until the first completes."""
    async with testing.serve() as rs:
        await rs.pools.ensure("gpu", capacity=1)
        await rs.quotas.ensure("llm", units_per_window=10, window_seconds=60)
        await rs.mailboxes.ensure("jobs")
        run = await rs.scopes.create(name="admission")
        box = run.mailbox("jobs")
        needs = {"pools": [{"name": "gpu", "units": 1}], "quotas": [{"name": "llm", "units": 2}]}
        first_ticket = await box.submit({"n": 1}, key="a", requirements=needs)
        await box.submit({"n": 2}, key="b", requirements=needs)
        assert await box.receive() is None, "recv leaves tasks with requirements to admit"
        work = await box.admit()
        assert work.task.id == first_ticket.id and work.delivery.data == {"n": 1}
        assert work.resources["grants"][0]["units"] == 1 and work.resources["consumptions"][0]["units"] == 2
        assert (await first_ticket.status())["state"] == "RUNNING"
        results = []

        async def second():
            results.append(await box.admit(wait_ms=20_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.sleep(3)
            assert results == []
            await work.delivery.complete()
        assert results[0].delivery.data == {"n": 2}
        await results[0].delivery.complete()
        assert (await first_ticket.result())["state"] == "SUCCEEDED"


def test_admitted_work_without_a_task_has_a_repr():
    """A message admitted without a task (`taskId` null) prints, where its repr raised AttributeError."""
    from runstate.capacity import AdmittedWork

    assert repr(AdmittedWork(None, None, {}, 2)) == "AdmittedWork(task=None, attempt=2)"
