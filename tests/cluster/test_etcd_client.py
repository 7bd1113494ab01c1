"""The etcd client (`runstate.snapshots.etcd`) against a real etcd 3.4, one member or three.

Virtual time cannot drive a real etcd, so the lease and rotation tests wait in real time, kept
short: 1 s leases (granted as asked under the tuned timing `tests/etcd.py` starts etcd with) and
attempts of 0.5-2 s. Every test uses keys under its own prefix.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import pytest
import trio

from runstate.snapshots.etcd import (
    REQUEST_BYTES_MAX,
    TXN_OPS_MAX,
    Compare,
    DeleteResult,
    EtcdClient,
    EtcdCompacted,
    EtcdFutureRevision,
    EtcdIndeterminate,
    EtcdLeaseNotFound,
    EtcdLimitExceeded,
    EtcdServerError,
    EtcdUnavailable,
    LeaseKeeper,
    Op,
    PutResult,
    RangeResult,
    WatchCanceled,
    prefix_end,
)

from ..etcd import EtcdCluster, EtcdMember
from .etcd_proxy import EtcdProxy, Rule

pytestmark = pytest.mark.trio


def follower_first(cluster: EtcdCluster) -> list[EtcdMember]:
    """The members with a follower first (the client tries it first), then the others."""
    leader = cluster.wait_healthy()
    followers = [m for m in cluster.members if m is not leader]
    return [followers[0], leader, *followers[1:]]


async def ask_until_no_leader(ask: Callable[[], Awaitable[object]], *, meanwhile: tuple[type[Exception], ...] = ()) -> float:
    """Ask a member cut off from the others, every 0.1 s, until it refuses with "no leader"
    (within 10 s); how long that last call took. Asked while the member still believes in its
    leader, a call waits out its attempt (and may fail with one of `meanwhile`)."""
    with trio.fail_after(10):
        while True:
            asked = trio.current_time()
            try:
                await ask()
            except EtcdUnavailable as err:
                if "no leader" in str(err):
                    return trio.current_time() - asked
            except meanwhile:
                pass
            await trio.sleep(0.1)


# -- one member: the calls and what they answer ---------------------------------------------------


async def test_keys_and_values_round_trip_as_bytes_and_absent_fields_read_as_defaults(etcd1: EtcdCluster) -> None:
    """str and bytes keys and values are base64 on the wire and bytes here; a missing key is None,
    a range that finds nothing has no kvs and count 0, a delete of nothing deletes 0."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        put = await etcd.put("kv/a", b"\x00\xff binary")
        assert isinstance(put, PutResult) and put.prev_kv is None and put.header.revision > 0
        await etcd.put(b"kv/b", "text \u00e9")
        again = await etcd.put("kv/a", b"second", prev_kv=True)
        assert again.prev_kv is not None and again.prev_kv.value == b"\x00\xff binary"

        kv = await etcd.get("kv/a")
        assert kv is not None and kv.key == b"kv/a" and kv.value == b"second"
        assert kv.version == 2 and kv.mod_revision == again.header.revision and kv.create_revision == put.header.revision
        assert kv.lease == 0
        assert await etcd.get("kv/missing") is None

        both = await etcd.range("kv/", prefix=True)
        assert [k.key for k in both.kvs] == [b"kv/a", b"kv/b"] and both.count == 2 and not both.more
        assert both.kvs[1].value == "text \u00e9".encode()
        limited = await etcd.range("kv/", prefix=True, limit=1)
        assert len(limited.kvs) == 1 and limited.more and limited.count == 2
        nothing = await etcd.range("kv/none/", prefix=True)
        assert nothing.kvs == [] and nothing.count == 0 and nothing.header.revision == again.header.revision
        counted = await etcd.range("kv/", prefix=True, count_only=True)
        assert counted.kvs == [] and counted.count == 2

        old = await etcd.get("kv/a", revision=put.header.revision)
        assert old is not None and old.value == b"\x00\xff binary"

        gone = await etcd.delete("kv/", prefix=True, prev_kv=True)
        assert isinstance(gone, DeleteResult) and gone.deleted == 2 and len(gone.prev_kvs) == 2
        none = await etcd.delete("kv/", prefix=True)
        assert none.deleted == 0 and none.prev_kvs == []


async def test_calls_one_after_another_share_one_kept_connection(etcd1: EtcdCluster) -> None:
    """Unary calls go on a connection kept open: small answers (a Content-Length), a keepalive's
    (a stream of one message, in chunks) and a large range (in chunks) alike leave it for the next
    call, and a call after the member closed it (a restart) goes on a new one."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        grant = await etcd.lease_grant(5)
        large = b"x" * 300_000
        for round in range(3):
            await etcd.put(f"kept/{round}", large, lease=grant.lease_id)
            assert await etcd.lease_keepalive(grant.lease_id) == 5
            result = await etcd.txn([Compare.absent("kept/none")], [Op.range("kept/", prefix=True)])
            assert result.succeeded and len(result.responses[0].kvs) == round + 1
            assert (await etcd.range("kept/", prefix=True)).count == round + 1
        assert (etcd.requests, etcd.connects) == (13, 1)
        etcd1.restart(etcd1.members[0])
        assert (await etcd.get("kept/0")) is not None
        assert etcd.connects == 2


async def test_prefix_end_covers_exactly_the_keys_under_a_prefix() -> None:
    """The range end of a prefix increments its last byte below 0xff; all-0xff means every key."""
    assert prefix_end("a/") == b"a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\0"
    assert prefix_end("") == b"\0"


async def test_a_journal_batch_is_fenced_on_the_leader_epoch_and_its_first_log_key(etcd1: EtcdCluster) -> None:
    """The journal's txn: it appends only while the leader key is the one created at `epoch` and the
    batch's first log key is absent. A repeat of a batch that got through fails the compare, and
    its failure branch reads back enough to recognise it as ours; a new leader (a new create
    revision) fences off every append of the old epoch."""
    leader, log = "fence/p/0/leader", "fence/p/0/log/"
    async with EtcdClient(etcd1.endpoints) as etcd:
        won = await etcd.txn([Compare.absent(leader)], [Op.put(leader, "node-a")], [Op.get(leader)])
        assert won.succeeded and won.responses and isinstance(won.responses[0], PutResult)
        epoch = won.header.revision

        def append(lsn: int, batch: bytes, epoch: int) -> tuple[list[Compare], list[Op], list[Op]]:
            key = f"{log}{lsn:020d}"
            return ([Compare.create_revision(leader, "==", epoch), Compare.absent(key)],
                    [Op.put(key, batch)], [Op.get(leader), Op.get(key)])

        first = await etcd.txn(*append(1, b"batch-1", epoch), repeatable=True)
        assert first.succeeded
        # The same batch again (its answer was lost, say): it fails, and reads back as ours.
        repeat = await etcd.txn(*append(1, b"batch-1", epoch), repeatable=True)
        assert not repeat.succeeded
        leader_read, log_read = repeat.responses
        assert isinstance(leader_read, RangeResult) and isinstance(log_read, RangeResult)
        assert leader_read.kvs[0].create_revision == epoch and log_read.kvs[0].value == b"batch-1"
        assert (await etcd.txn(*append(2, b"batch-2", epoch))).succeeded

        # Another node takes over: the leader key is deleted and created again.
        await etcd.delete(leader)
        taken = await etcd.txn([Compare.absent(leader)], [Op.put(leader, "node-b")])
        assert taken.succeeded and taken.header.revision != epoch
        deposed = await etcd.txn(*append(3, b"stale", epoch))
        assert not deposed.succeeded
        leader_read, log_read = deposed.responses
        assert isinstance(leader_read, RangeResult) and leader_read.kvs[0].value == b"node-b"
        assert isinstance(log_read, RangeResult) and log_read.kvs == []
        assert await etcd.get(f"{log}{3:020d}") is None
        assert (await etcd.txn(*append(3, b"new", taken.header.revision))).succeeded


async def test_compares_on_value_mod_revision_version_and_lease(etcd1: EtcdCluster) -> None:
    """Each compare target decides the branch; an empty failure branch answers no responses."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        put = await etcd.put("cmp/k", "v1")
        grant = await etcd.lease_grant(30)
        await etcd.put("cmp/leased", "x", lease=grant.lease_id)
        cases = [
            (Compare.value("cmp/k", "==", "v1"), True),
            (Compare.value("cmp/k", "!=", "v1"), False),
            (Compare.value("cmp/k", ">", "v0"), True),
            (Compare.mod_revision("cmp/k", "==", put.header.revision), True),
            (Compare.mod_revision("cmp/k", "<", put.header.revision), False),
            (Compare.version("cmp/k", "==", 1), True),
            (Compare.version("cmp/missing", "==", 0), True),
            (Compare.present("cmp/k"), True),
            (Compare.absent("cmp/k"), False),
            (Compare.lease("cmp/leased", "==", grant.lease_id), True),
            (Compare.lease("cmp/k", "==", grant.lease_id), False),
        ]
        for compare, expected in cases:
            result = await etcd.txn([compare], [Op.get("cmp/k")])
            assert result.succeeded is expected, compare
            assert len(result.responses) == (1 if expected else 0)
        both = await etcd.txn([Compare.value("cmp/k", "==", "v1"), Compare.version("cmp/k", "==", 2)], [Op.put("cmp/k", "no")])
        assert not both.succeeded and (await etcd.get("cmp/k")).value == b"v1"  # type: ignore[union-attr]
        await etcd.lease_revoke(grant.lease_id)


async def test_limits_are_refused_before_anything_is_sent(etcd1: EtcdCluster) -> None:
    """More than 128 operations in a branch, or more than 1.5 MiB, is refused here with the limit
    named, without a request; bad arguments raise ValueError."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        sent = etcd.requests
        with pytest.raises(EtcdLimitExceeded, match="at most 128"):
            await etcd.txn([], [Op.put(f"lim/{i}", "v") for i in range(TXN_OPS_MAX + 1)])
        with pytest.raises(EtcdLimitExceeded, match="bytes"):
            await etcd.put("lim/big", b"x" * REQUEST_BYTES_MAX)
        with pytest.raises(EtcdLimitExceeded):
            await etcd.txn([], [Op.put(f"lim/{i}", b"x" * 20_000) for i in range(100)])
        assert etcd.requests == sent
        with pytest.raises(ValueError):
            await etcd.put("", "v")
        with pytest.raises(ValueError):
            Compare.value("k", "<>", "v")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            Op.range("k", "z", prefix=True)
        with pytest.raises(ValueError):
            await etcd.lease_grant(0)
        # The largest txn within the limits goes through.
        assert (await etcd.txn([], [Op.put(f"lim/{i}", "v") for i in range(TXN_OPS_MAX)])).succeeded
    for bad in ([], ["127.0.0.1:1"], ["http://127.0.0.1:1/v3"], ["ftp://127.0.0.1:1"]):
        with pytest.raises(ValueError):
            EtcdClient(bad)


async def test_errors_say_what_etcd_refused(etcd1: EtcdCluster) -> None:
    """etcd's refusals come back as typed errors with its code and message, not as empty answers."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        with pytest.raises(EtcdLeaseNotFound, match="lease not found"):
            await etcd.put("err/k", "v", lease=123456789)
        with pytest.raises(EtcdServerError, match="duplicate key") as duplicate:
            await etcd.txn([], [Op.put("err/k", "a"), Op.put("err/k", "b")])
        assert duplicate.value.code == 3 and duplicate.value.status == 400 and not duplicate.value.unavailable
        head = (await etcd.range("err/", prefix=True)).header.revision
        with pytest.raises(EtcdFutureRevision):
            await etcd.get("err/k", revision=head + 1000)


# -- leases ----------------------------------------------------------------------------------------


async def test_a_lease_left_without_keepalives_expires_and_takes_its_keys(etcd1: EtcdCluster) -> None:
    """A 1 s lease lives while keepalives come, then ends within TTL + 0.5 s (etcd checks expiry
    every 0.5 s) of the last one, with its keys; afterwards keepalive raises, time-to-live says
    -1 and revoke answers False."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        grant = await etcd.lease_grant(1)
        assert grant.ttl_s == 1  # granted as asked under the tuned timing
        await etcd.put("lease/k", "v", lease=grant.lease_id)
        for _ in range(4):
            await trio.sleep(0.3)
            assert await etcd.lease_keepalive(grant.lease_id) == 1
        last = trio.current_time()
        live = await etcd.lease_time_to_live(grant.lease_id, keys=True)
        assert live.alive and live.granted_ttl_s == 1 and live.keys == [b"lease/k"]
        assert await etcd.get("lease/k") is not None  # 1.2 s after the grant: the keepalives held it
        with trio.fail_after(5):
            while await etcd.get("lease/k") is not None:
                await trio.sleep(0.05)
        ended = trio.current_time() - last
        assert 0.9 <= ended <= 2.5, ended
        gone = await etcd.lease_time_to_live(grant.lease_id)
        assert not gone.alive and gone.ttl_s == -1 and gone.granted_ttl_s == 0
        with pytest.raises(EtcdLeaseNotFound):
            await etcd.lease_keepalive(grant.lease_id)
        assert await etcd.lease_revoke(grant.lease_id) is False


async def test_the_lease_keeper_holds_a_lease_until_cancelled_and_its_deadline_moves_with_it(etcd1: EtcdCluster) -> None:
    """LeaseKeeper renews a 1 s lease every third of a second; its deadline (the send time of the
    last answered keepalive plus the TTL) stays ahead of the clock; once it stops, the lease ends."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        keeper = await LeaseKeeper.grant(etcd, 1)
        await etcd.put("keeper/k", "v", lease=keeper.lease_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keeper.run)
            for _ in range(5):
                await trio.sleep(0.5)
                assert keeper.alive and keeper.deadline > trio.current_time()
                assert keeper.deadline <= trio.current_time() + 1
            assert await etcd.get("keeper/k") is not None
            nursery.cancel_scope.cancel()
        assert keeper.keepalives >= 6 and not keeper.lost.is_set()
        with trio.fail_after(5):
            while await etcd.get("keeper/k") is not None:
                await trio.sleep(0.05)


async def test_the_lease_keeper_reports_a_revoked_lease_as_lost(etcd1: EtcdCluster) -> None:
    """A lease revoked behind the keeper's back is noticed at its next keepalive: `lost` is set,
    `lost_reason` names it, and run() returns."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        keeper = await LeaseKeeper.grant(etcd, 3)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(keeper.run)
                await etcd.lease_revoke(keeper.lease_id)
                await keeper.lost.wait()
        assert "gone" in keeper.lost_reason and not keeper.alive


async def test_a_keeper_that_outlives_its_deadline_wakes_its_waiters_when_etcd_answers_again(etcd1: EtcdCluster) -> None:
    """etcd's answers to keepalives are held (a relay, `etcd_proxy.py`; etcd gets the keepalives,
    so it keeps the lease): the keeper's deadline passes and, with `outlive_deadline`, it is not
    alive but not lost either. `wait_alive()` parks meanwhile and returns as soon as a keepalive
    is answered again, not at some later poll; `lapses` counts the lapse."""
    with EtcdProxy(etcd1.endpoints[0]) as proxy:
        async with EtcdClient([proxy.url], attempt_s=0.3) as etcd:
            keeper = await LeaseKeeper.grant(etcd, 1, outlive_deadline=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(keeper.run)
                proxy.add(Rule(lambda path, body: path == "/v3/lease/keepalive", hold_s=5.0, times=1000))
                with trio.fail_after(5):
                    while keeper.alive:
                        await trio.sleep(0.02)
                woken = trio.Event()

                async def wait() -> None:
                    await keeper.wait_alive()
                    woken.set()

                nursery.start_soon(wait)
                await trio.sleep(0.5)
                assert not woken.is_set() and not keeper.lost.is_set()
                proxy.clear()
                cleared = trio.current_time()
                with trio.fail_after(5):
                    await woken.wait()
                assert keeper.alive and not keeper.lost.is_set(), keeper.lost_reason
                assert trio.current_time() - cleared < 0.8  # one attempt's 0.3 s at most, then an answer
                assert keeper.lapses == 1
                nursery.cancel_scope.cancel()


# -- watch -----------------------------------------------------------------------------------------


async def test_a_watch_is_created_first_then_delivers_puts_and_deletes_in_order(etcd1: EtcdCluster) -> None:
    """`watch()` returns once etcd confirmed it; events come in revision order with their kind and,
    when asked, the previous value; a start revision in the past replays history from there."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        before = await etcd.put("watch/a", "0")
        async with etcd.watch("watch/", prefix=True, prev_kv=True) as watch:
            assert watch.header.revision == before.header.revision
            assert watch.next_revision == before.header.revision + 1
            await etcd.put("watch/a", "1")
            await etcd.put("watch/b", "2")
            await etcd.delete("watch/a")
            seen = []
            with trio.fail_after(5):
                async for response in watch:
                    seen.extend(response.events)
                    if len(seen) >= 3:
                        break
        assert [(e.type, e.kv.key, e.kv.value) for e in seen] == [
            ("PUT", b"watch/a", b"1"), ("PUT", b"watch/b", b"2"), ("DELETE", b"watch/a", b""),
        ]
        assert seen[0].prev_kv is not None and seen[0].prev_kv.value == b"0"
        assert seen[2].prev_kv is not None and seen[2].prev_kv.value == b"1"
        assert [e.kv.mod_revision for e in seen] == list(range(before.header.revision + 1, before.header.revision + 4))
        assert watch.next_revision == seen[-1].kv.mod_revision + 1

        replayed = []
        async with etcd.watch("watch/a", start_revision=before.header.revision) as history:
            with trio.fail_after(5):
                async for response in history:
                    replayed.extend(response.events)
                    if len(replayed) >= 3:
                        break
        assert [(e.type, e.kv.value) for e in replayed] == [("PUT", b"0"), ("PUT", b"1"), ("DELETE", b"")]


async def test_a_watch_from_a_compacted_revision_is_canceled_with_the_compaction_revision(etcd1: EtcdCluster) -> None:
    """After a compaction, a watch (or a read) of a revision before it is refused: the watch is
    created and then canceled with `compact_revision`, the read raises EtcdCompacted, and so does
    compacting at or below it again."""
    async with EtcdClient(etcd1.endpoints) as etcd:
        first = await etcd.put("compact/k", "1")
        await etcd.put("compact/k", "2")
        last = await etcd.put("compact/k", "3")
        await etcd.compact(last.header.revision, physical=True)
        with trio.fail_after(5):
            async with etcd.watch("compact/k", start_revision=first.header.revision) as watch:
                with pytest.raises(WatchCanceled) as canceled:
                    async for _ in watch:
                        pass
        assert canceled.value.compact_revision == last.header.revision
        with pytest.raises(EtcdCompacted):
            await etcd.get("compact/k", revision=first.header.revision)
        with pytest.raises(EtcdCompacted):
            await etcd.compact(first.header.revision)
        async with etcd.watch("compact/k", start_revision=last.header.revision) as fresh:
            with trio.fail_after(5):
                response = await fresh.__anext__()
        assert response.events[0].kv.value == b"3"


# -- three members: rotation -----------------------------------------------------------------------


async def test_member_list_and_status_name_the_same_raft_leader(etcd3: EtcdCluster) -> None:
    """Every member's status names one leader, the one the fixture finds; the member list has the
    three members with their client URLs."""
    leader = etcd3.wait_healthy()
    async with EtcdClient(etcd3.endpoints) as etcd:
        members = await etcd.member_list()
        assert sorted(url for m in members for url in m.client_urls) == sorted(etcd3.endpoints)
        assert {m.name for m in members} == {"m0", "m1", "m2"} and not any(m.is_learner for m in members)
        statuses = [await etcd.status(url) for url in etcd3.endpoints]
    assert len({s.leader_id for s in statuses}) == 1
    leaders = [s for s in statuses if s.is_leader]
    assert len(leaders) == 1 and leaders[0].endpoint == leader.client_url
    assert all(s.version.startswith("3.") and s.raft_term >= 1 and not s.errors for s in statuses)


async def test_a_killed_member_is_skipped_at_once_for_the_next(etcd3: EtcdCluster) -> None:
    """A member that refuses connections costs nothing: reads and writes, first tried on it, are
    answered by the next member well within one attempt."""
    order = follower_first(etcd3)
    async with EtcdClient([m.client_url for m in order], attempt_s=2.0) as etcd:
        await etcd.put("kill/k", "before")
        order[0].kill()
        for call in (lambda: etcd.put("kill/k", "after"), lambda: etcd.get("kill/k"),
                     lambda: etcd.txn([Compare.present("kill/k")], [Op.put("kill/k", "txn")])):
            etcd._preferred = 0  # start on the dead member each time
            began = trio.current_time()
            await call()
            assert trio.current_time() - began < 1.5
        kv = await etcd.get("kill/k")
        assert kv is not None and kv.value == b"txn"


async def test_a_stopped_member_costs_one_attempt_and_a_write_to_it_is_indeterminate(etcd3: EtcdCluster) -> None:
    """A member that accepts the connection and never answers (SIGSTOP) is given `attempt_s`: a
    read then goes to the next member; a write that is not repeatable raises EtcdIndeterminate
    (it may have been applied) and the next call starts on the next member; a repeatable write is
    sent on to the next member."""
    order = follower_first(etcd3)
    async with EtcdClient([m.client_url for m in order], attempt_s=0.5) as etcd:
        await etcd.put("stop/k", "before")
        order[0].stop()
        began = trio.current_time()
        kv = await etcd.get("stop/k")
        took = trio.current_time() - began
        assert kv is not None and kv.value == b"before" and 0.45 <= took < 2.0, took

        etcd._preferred = 0
        with pytest.raises(EtcdIndeterminate) as indeterminate:
            await etcd.put("stop/k", "maybe")
        assert indeterminate.value.endpoint == order[0].client_url
        assert etcd._preferred == 1
        await etcd.put("stop/k", "next")  # goes straight to the next member

        etcd._preferred = 0
        fenced = await etcd.txn([Compare.value("stop/k", "==", "next")], [Op.put("stop/k", "fenced")], repeatable=True)
        assert fenced.succeeded
        kv = await etcd.get("stop/k")
        assert kv is not None and kv.value == b"fenced"


async def test_a_watch_resumes_on_the_next_member_without_losing_or_repeating_events(etcd3: EtcdCluster) -> None:
    """A watch whose member dies is taken up on the next member from the first revision it had not
    delivered: every event arrives once, in order."""
    order = follower_first(etcd3)
    async with EtcdClient([m.client_url for m in order]) as etcd:
        async with etcd.watch("resume/", prefix=True) as watch:
            assert watch.endpoint == order[0].client_url
            await etcd.put("resume/1", "a")
            with trio.fail_after(5):
                first = await watch.__anext__()
            order[0].kill()
            await etcd.put("resume/2", "b")
            await etcd.put("resume/3", "c")
            seen = list(first.events)
            with trio.fail_after(10):
                async for response in watch:
                    seen.extend(response.events)
                    if len(seen) >= 3:
                        break
        assert [e.kv.key for e in seen] == [b"resume/1", b"resume/2", b"resume/3"]
        assert watch.resumed == 1 and watch.endpoint != order[0].client_url


async def test_a_member_cut_off_from_the_others_answers_no_leader_instead_of_hanging(etcd3: EtcdCluster) -> None:
    """With the two other members stopped, the third has no leader: a read asked of it soon fails
    with "no leader" at once rather than waiting, and a watch open on it ends (hasleader) instead
    of hanging forever."""
    lone, *others = etcd3.members
    async with EtcdClient([lone.client_url], attempt_s=2.0) as etcd:
        async with etcd.watch("cut/", prefix=True) as watch:
            for member in others:
                member.stop()
            # A read caught while the member still believes in its leader waits out its attempt;
            # once it knows it has none (about an election timeout), it refuses at once.
            assert await ask_until_no_leader(lambda: etcd.get("cut/k")) < 0.5
            began = trio.current_time()
            with trio.fail_after(15):
                with pytest.raises(EtcdUnavailable, match="no leader"):
                    async for _ in watch:
                        pass
            assert trio.current_time() - began < 10
