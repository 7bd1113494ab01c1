"""The official runstate-sdk 0.2.0 client, unchanged, on the paths a user gets wrong or a crash
takes: odd keys, a lease taken away, a replayed request. Each test is one script against the
module's server (`official_scripts.Clients`)."""

from __future__ import annotations

import pytest

from .official_scripts import Clients, clients  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.compat, pytest.mark.e2e]


def test_claim_keys_dot_and_dot_dot_renew_and_release(clients: Clients):
    """The client puts a claim key in the path percent-encoded, but `.` and `..` stay as they are,
    and its HTTP library then drops them as dot segments: renew and release of `.` reach
    `/claims/renew` and `/claims/release`, of `..` `/renew` and `/release`. Those were 404, so
    `run()` lost a lease nobody took (its first renewal failed) and the key stayed held until the
    lease ran out."""
    out = clients.run("""
async def main():
    rs, other = AsyncRunstate(holder="a"), AsyncRunstate(holder="b")
    run = await rs.scopes.create()
    result = {}
    for key in (".", ".."):
        async def work(lease):
            await asyncio.sleep(2.5)  # past the first renewal of a 5 s lease (every 1.5-1.8 s)
            return "done"
        try:
            ran = await run.claim(key).run(work, lease_seconds=5)
        except LeaseLostError as err:
            ran = err.code
        taken = await other.scope(run.id).claim(key).try_acquire(lease_seconds=5)
        lease = taken.get("lease")
        manual = []
        if lease is not None:
            await lease.renew(10)
            manual.append(lease.generation)
            await lease.release()
            again = await rs.scope(run.id).claim(key).acquire(lease_seconds=5)
            manual.append(again.generation)
            await again.release()
        result[key] = {"ran": ran, "after": taken["kind"], "generations": manual}
    emit(**result)
asyncio.run(main())
""")
    for key in (".", ".."):
        assert out[key]["ran"] == "done", out
        assert out[key]["after"] == "acquired", out  # run()'s release freed the key
        first, second = out[key]["generations"]
        assert int(second) == int(first) + 1, out


def test_a_result_with_a_payload_field_among_others_is_the_outcome_as_it_is(clients: Clients):
    """0.3.0 completes with `{"payload": <its return value>}` and reads the task's outcome as that
    value, so the server takes a result's `payload` as the outcome. It took it from any result
    that had one: a 0.2.0 worker's `{"payload": ..., "meta": ...}` lost everything but `payload`.
    Only the wrapper, a result whose one field is `payload`, is unwrapped now."""
    out = clients.run("""
async def main():
    rs = AsyncRunstate()
    await rs.mailboxes.ensure("results")
    run = await rs.scopes.create()
    box = run.mailbox("results")
    outcomes = []
    for n, result in enumerate([{"payload": {"rows": 3}, "meta": {"took_ms": 12}}, {"payload": 5}]):
        ticket = await box.submit({"n": n}, key=f"job-{n}")
        delivery = await box.receive()
        await delivery.complete(result)
        outcomes.append((await ticket.result(timeout_ms=5000))["outcome"])
    emit(outcomes=outcomes)
asyncio.run(main())
""")
    assert out["outcomes"] == [{"payload": {"rows": 3}, "meta": {"took_ms": 12}}, 5], out
