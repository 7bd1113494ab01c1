"""`EtcdClient(grpc=True)`: a txn sent as a gRPC call (`grpc2`, `etcd_proto`) against a real etcd 3.4.

What must hold is that nothing but the wire changes: the same answers as through the JSON
gateway, the same errors, the same member rotation and the same indeterminate writes. Real time,
kept short (attempts of 0.5-2 s), as in `test_etcd_client.py`; every test under its own prefix.
"""

from __future__ import annotations

import os

import pytest
import trio

from runstate.snapshots.etcd import (
    Compare,
    DeleteResult,
    EtcdClient,
    EtcdIndeterminate,
    EtcdLeaseNotFound,
    EtcdServerError,
    EtcdUnavailable,
    KeyValue,
    Op,
    PutResult,
    RangeResult,
    TxnResult,
)

from ..etcd import EtcdCluster
from .test_etcd_client import ask_until_no_leader, follower_first

pytestmark = pytest.mark.trio


def _plain(result: TxnResult) -> tuple[object, ...]:
    """A txn's answer with the answering member left out (the two clients may ask different ones)."""
    def kvs(response: object) -> list[KeyValue]:
        if isinstance(response, RangeResult):
            return response.kvs
        if isinstance(response, DeleteResult):
            return response.prev_kvs
        assert isinstance(response, PutResult)
        return [response.prev_kv] if response.prev_kv is not None else []

    return (result.header.revision, result.succeeded, [
        (type(r).__name__, r.header.revision, kvs(r), getattr(r, "count", None), getattr(r, "more", None),
         getattr(r, "deleted", None))
        for r in result.responses])


async def test_a_txn_over_grpc_answers_exactly_what_the_gateway_answers(etcd1: EtcdCluster) -> None:
    """The journal's fenced txn (won, then refused and read back), a txn of reads with every
    option, and writes with prev_kv give equal results over gRPC and through the gateway, down to
    the defaults left out of an answer (a failed txn, a range that found nothing)."""
    async with EtcdClient(etcd1.endpoints, grpc=True) as grpc, EtcdClient(etcd1.endpoints) as gateway:
        lease = (await gateway.lease_grant(30)).lease_id
        await gateway.put("g/eq/leader", b"node", lease=lease)
        leader = await gateway.get("g/eq/leader")
        assert leader is not None
        batch = os.urandom(3450)
        outcomes = []
        for client in (grpc, gateway):
            fence = [Compare.create_revision("g/eq/leader", "==", leader.create_revision), Compare.absent("g/eq/log/1")]
            outcomes.append(await client.txn(fence, [Op.put("g/eq/log/1", batch)], [Op.get("g/eq/leader"), Op.get("g/eq/log/1")],
                                             repeatable=True))
        won, refused = outcomes
        assert won.succeeded and not refused.succeeded and refused.header.revision == won.header.revision
        again = await grpc.txn([Compare.absent("g/eq/log/1")], [Op.put("g/eq/log/1", b"again")],
                               [Op.get("g/eq/leader"), Op.get("g/eq/log/1")], repeatable=True)
        assert _plain(again) == _plain(refused)
        assert [r.kvs[0].lease for r in again.responses if isinstance(r, RangeResult)] == [lease, 0]
        assert again.responses[1].kvs[0].value == batch  # type: ignore[union-attr]

        reads = [Op.range("g/eq/", prefix=True, limit=1, sort_order="DESCEND", sort_target="KEY", keys_only=True),
                 Op.range("g/eq/nothing"), Op.range("g/eq/", prefix=True, count_only=True, serializable=True)]
        compares = [Compare.value("g/eq/log/1", "==", batch), Compare.version("g/eq/leader", ">", 0),
                    Compare.mod_revision("g/eq/leader", "<", 1 << 40), Compare.lease("g/eq/leader", "==", lease)]
        first, second = await grpc.txn(compares, reads), await gateway.txn(compares, reads)
        assert first.succeeded and _plain(first) == _plain(second)
        assert [len(r.kvs) for r in first.responses] == [1, 0, 0]  # type: ignore[union-attr]
        assert first.responses[0].kvs[0].key == b"g/eq/log/1" and first.responses[0].more  # type: ignore[union-attr]
        assert first.responses[2].count == 2  # type: ignore[union-attr]

        for client, key in ((grpc, "g/eq/w/1"), (gateway, "g/eq/w/2")):
            await client.txn([], [Op.put(key, b"old")])
        written = [await client.txn([], [Op.put(key, b"new", prev_kv=True)]) for client, key in ((grpc, "g/eq/w/1"), (gateway, "g/eq/w/2"))]
        assert [[(kv.value, kv.version) for kv in _plain(w)[2][0][2]] for w in written] == [[(b"old", 1)]] * 2  # type: ignore[index]
        deleted = [await client.txn([], [Op.delete(key, prev_kv=True), Op.delete("g/eq/none")])
                   for client, key in ((grpc, "g/eq/w/1"), (gateway, "g/eq/w/2"))]
        assert [[(r.deleted, [kv.value for kv in r.prev_kvs]) for r in d.responses] for d in deleted] == (  # type: ignore[union-attr]
            [[(1, [b"new"]), (0, [])]] * 2)


async def test_etcd_s_refusals_over_grpc_are_the_gateway_s_errors(etcd1: EtcdCluster) -> None:
    """A grpc-status other than OK becomes the same typed error, code and HTTP status as the
    gateway's: a duplicate key is InvalidArgument (3, 400), an unknown lease NotFound (5, 404)."""
    async with EtcdClient(etcd1.endpoints, grpc=True) as grpc, EtcdClient(etcd1.endpoints) as gateway:
        for client in (grpc, gateway):
            with pytest.raises(EtcdServerError, match="duplicate key") as duplicate:
                await client.txn([], [Op.put("g/err/k", "a"), Op.put("g/err/k", "b")])
            assert (duplicate.value.code, duplicate.value.status, duplicate.value.unavailable) == (3, 400, False)
            with pytest.raises(EtcdLeaseNotFound, match="lease not found") as missing:
                await client.txn([], [Op.put("g/err/k", "v", lease=123456789)])
            assert (missing.value.code, missing.value.status) == (5, 404)


async def test_calls_at_once_share_one_connection_and_a_large_txn_passes_flow_control(etcd1: EtcdCluster) -> None:
    """Fifty txns at once go on one HTTP/2 connection, each answered with its own result; a txn
    of 1 MB (many times etcd's 64 KB stream window) is sent and read back whole."""
    async with EtcdClient(etcd1.endpoints, grpc=True) as grpc:
        answers: dict[int, bytes] = {}

        async def one(number: int) -> None:
            key = f"g/many/{number:03d}"
            result = await grpc.txn([Compare.absent(key)], [Op.put(key, f"v{number}"), Op.get(key)])
            answers[number] = result.responses[1].kvs[0].value  # type: ignore[union-attr]

        async with trio.open_nursery() as nursery:
            for number in range(50):
                nursery.start_soon(one, number)
        assert answers == {number: f"v{number}".encode() for number in range(50)}
        assert grpc.connects == 1 and grpc.requests == 50 and grpc.connections_busy == 0

        big = os.urandom(1 << 20)
        result = await grpc.txn([], [Op.put("g/big", big), Op.get("g/big")])
        assert result.responses[1].kvs[0].value == big  # type: ignore[union-attr]
        assert grpc.connects == 1


async def test_a_killed_member_is_skipped_for_the_next_and_a_restarted_one_is_reached_again(etcd3: EtcdCluster) -> None:
    """A member whose connection breaks or is refused gives way to the next at once (a write that
    never left is not indeterminate, even if not repeatable); once it is back, a new connection
    reaches it."""
    order = follower_first(etcd3)
    async with EtcdClient([m.client_url for m in order], attempt_s=2.0, grpc=True) as grpc:
        await grpc.txn([], [Op.put("g/kill/k", "before")])
        assert grpc._preferred == 0
        order[0].kill()
        grpc._preferred = 0
        began = trio.current_time()
        done = await grpc.txn([Compare.present("g/kill/k")], [Op.put("g/kill/k", "after")])
        assert done.succeeded and trio.current_time() - began < 1.5
        assert grpc._preferred == 1 and order[0].client_url in grpc.failures
        etcd3.restart(order[0])
        etcd3.wait_healthy()
        grpc._preferred = 0
        again = await grpc.txn([Compare.value("g/kill/k", "==", "after")], [Op.get("g/kill/k")])
        assert again.succeeded and grpc._preferred == 0 and order[0].client_url not in grpc.failures


async def test_a_stopped_member_costs_one_attempt_and_a_write_to_it_is_indeterminate(etcd3: EtcdCluster) -> None:
    """A member that takes the call and never answers (SIGSTOP): a write that is not repeatable
    raises EtcdIndeterminate after `attempt_s` and the next call starts on the next member; a
    repeatable one is sent on to the next member; the cancelled call's connection takes no more."""
    order = follower_first(etcd3)
    async with EtcdClient([m.client_url for m in order], attempt_s=0.5, grpc=True) as grpc:
        await grpc.txn([], [Op.put("g/stop/k", "before")])
        order[0].stop()
        grpc._preferred = 0
        began = trio.current_time()
        with pytest.raises(EtcdIndeterminate) as indeterminate:
            await grpc.txn([], [Op.put("g/stop/k", "maybe")])
        assert indeterminate.value.endpoint == order[0].client_url and 0.45 <= trio.current_time() - began < 2.0
        assert grpc._preferred == 1
        await grpc.txn([], [Op.put("g/stop/k", "next")])  # straight to the next member

        grpc._preferred = 0
        fenced = await grpc.txn([Compare.value("g/stop/k", "==", "next")], [Op.put("g/stop/k", "fenced")], repeatable=True)
        assert fenced.succeeded
        order[0].cont()
        etcd3.wait_healthy()
        grpc._preferred = 0
        check = await grpc.txn([Compare.present("g/stop/k")], [Op.get("g/stop/k")])
        assert check.succeeded and grpc._preferred == 0
        # The stopped member read the indeterminate write once it ran again, and may have passed
        # it on after the fenced one: "may or may not have been applied" holds both ways.
        assert check.responses[0].kvs[0].value in (b"fenced", b"maybe")  # type: ignore[union-attr]


async def test_no_member_reachable_is_unavailable_with_each_one_s_reason() -> None:
    """Nothing listening on any endpoint: EtcdUnavailable names every member; nothing was sent."""
    from ..ports import free_port

    endpoints = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    async with EtcdClient(endpoints, attempt_s=0.5, grpc=True) as grpc:
        with pytest.raises(EtcdUnavailable) as unavailable:
            await grpc.txn([], [Op.put("g/none", "v")])
        assert len(unavailable.value.failures) == 2
        assert all("cannot call" in failure for failure in unavailable.value.failures)


async def test_a_member_cut_off_from_the_others_refuses_a_txn_with_no_leader_at_once(etcd3: EtcdCluster) -> None:
    """The call carries `hasleader: true`: with the two other members stopped, the third refuses a
    txn with "no leader" (Unavailable, a refusal that proves nothing was applied) as soon as it
    knows it has no leader, instead of holding it until its request times out."""
    lone, *others = etcd3.members
    async with EtcdClient([lone.client_url], attempt_s=2.0, grpc=True) as grpc:
        await grpc.txn([], [Op.put("g/cut/k", "v")])
        for member in others:
            member.stop()
        refused_in = await ask_until_no_leader(lambda: grpc.txn([Compare.present("g/cut/k")], [Op.put("g/cut/k", "w")]),
                                               meanwhile=(EtcdIndeterminate,))
        assert refused_in < 0.5
