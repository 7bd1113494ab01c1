"""The etcd journal and the lease keeper when a node stops leading, in virtual time, on a stand-in
for etcd whose answers the test holds back and lets go (the real etcd is in test_etcd_client.py
and the fault tests).

What a caller is told when the node stops leading: a batch already sent gets its true answer
(committed, or fenced off), what was queued behind it is told it was not recorded (or, on a
hand-off, written first), and a batch whose answer never comes is `Unresolved`, never left
waiting. And a session whose deadline passes while etcd elects its own leader is not given up:
only etcd saying the lease is gone ends it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runstate.snapshots.etcd import EtcdLeaseNotFound, EtcdUnavailable, LeaseKeeper
from runstate.snapshots.etcd_journal import LINGER_S_MAX, EtcdJournal, Fenced, PartitionKeys, Unresolved
from runstate.snapshots.etcd_wire import Header, KeyValue, RangeResult, TxnResult

pytestmark = pytest.mark.trio

EPOCH = 7


class HeldEtcd:
    """Answers each txn when the test says so (`answer`), as committed or fenced off."""

    def __init__(self) -> None:
        self.sent: list[int] = []  # first LSN of each batch sent
        self._answers: list[trio.Event] = []
        self.fenced = False

    async def txn(self, compare: Any, success: Any, failure: Any, *, repeatable: bool = False) -> TxnResult:
        key = success[0].body["key"]
        import base64

        self.sent.append(PartitionKeys.lsn_of(base64.b64decode(key)))
        gate = trio.Event()
        self._answers.append(gate)
        await gate.wait()
        header = Header(1, 1, 100 + len(self.sent), 1)
        if not self.fenced:
            return TxnResult(header, True, [])
        other = KeyValue(b"leader", b'{"node": "n9", "url": "u"}', 99, 99, 1, 0)
        return TxnResult(header, False, [RangeResult(header, [other], 1, False), RangeResult(header, [], 0, False)])

    def answer(self) -> None:
        self._answers.pop(0).set()


def _journal(etcd: HeldEtcd, committed: list[int]) -> EtcdJournal:
    return EtcdJournal(etcd, PartitionKeys("/rs/t/", 1), epoch=EPOCH, next_lsn=1,  # type: ignore[arg-type]
                       on_committed=lambda first, bodies: committed.append(first))


def _append(journal: EtcdJournal, told: list[Any], name: str) -> None:
    journal.append([{"type": "x", "n": name}], lambda error: told.append((name, error)))


async def test_closing_answers_the_batch_in_flight_truly_and_what_was_queued_as_not_recorded(autojump_clock: Any) -> None:
    etcd, committed, told = HeldEtcd(), [], []
    journal = _journal(etcd, committed)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.01)  # batch a is sent
        _append(journal, told, "b")  # queued behind it
        nursery.start_soon(lambda: journal.close(Fenced("stopped leading"), grace_s=1.0))
        await trio.sleep(0.1)
        assert [name for name, _ in told] == ["b"] and isinstance(told[0][1], Fenced)
        etcd.answer()  # a's answer comes within the grace: committed
        await trio.sleep(0.01)
        assert told[1] == ("a", None) and committed == [1]
        await journal.failed.wait()
        nursery.cancel_scope.cancel()
    assert etcd.sent == [1]


async def test_a_hand_off_writes_what_was_queued_before_it_stops(autojump_clock: Any) -> None:
    etcd, committed, told = HeldEtcd(), [], []
    journal = _journal(etcd, committed)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.01)
        _append(journal, told, "b")
        nursery.start_soon(lambda: journal.close(Fenced("handed over"), drain=True, grace_s=1.0))
        etcd.answer()
        await trio.sleep(0.01)
        etcd.answer()
        await journal.failed.wait()
        nursery.cancel_scope.cancel()
    assert told == [("a", None), ("b", None)] and committed == [1, 2]


async def test_a_batch_whose_answer_never_comes_is_unresolved_not_left_waiting(autojump_clock: Any) -> None:
    etcd, committed, told = HeldEtcd(), [], []
    journal = _journal(etcd, committed)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.01)
        started = trio.current_time()
        await journal.close(Fenced("session lost"), grace_s=2.0)
        assert trio.current_time() - started == pytest.approx(2.0)
        nursery.cancel_scope.cancel()
    assert len(told) == 1 and isinstance(told[0][1], Unresolved) and committed == []


async def test_a_batch_in_flight_when_the_writer_is_cancelled_is_answered(autojump_clock: Any) -> None:
    """(Before, its callers waited forever: it was neither queued nor answered.)"""
    etcd, committed, told = HeldEtcd(), [], []
    journal = _journal(etcd, committed)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert len(told) == 1 and isinstance(told[0][1], Unresolved)


async def test_a_fenced_batch_in_flight_is_answered_as_not_recorded(autojump_clock: Any) -> None:
    etcd, committed, told = HeldEtcd(), [], []
    journal = _journal(etcd, committed)
    etcd.fenced = True
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.01)
        etcd.answer()
        await journal.failed.wait()
        nursery.cancel_scope.cancel()
    assert len(told) == 1 and isinstance(told[0][1], Fenced) and "another node leads" in str(told[0][1])


class TimedEtcd(HeldEtcd):
    """Answers each txn `took_s` after it was sent, noting when each batch left."""

    def __init__(self, took_s: float) -> None:
        super().__init__()
        self.took_s = took_s
        self.at: list[float] = []

    async def txn(self, compare: Any, success: Any, failure: Any, *, repeatable: bool = False) -> TxnResult:
        self.at.append(trio.current_time())
        await trio.sleep(self.took_s)
        return TxnResult(Header(1, 1, 100 + len(self.at), 1), True, [])


async def test_under_load_the_callers_just_answered_join_the_next_batch_and_a_lone_caller_never_waits(autojump_clock: Any) -> None:
    """Two callers taking turns: the one answered comes back a moment later and goes in the same
    transaction as the one that waited (one transaction a round, not one each); a batch waits at
    most the last transaction's time for it, and never more than `LINGER_S_MAX`; a lone caller's
    change leaves at once."""
    etcd, committed, told = TimedEtcd(took_s=0.004), [], []
    journal = _journal(etcd, committed)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.001)
        _append(journal, told, "b")  # waits behind a
        await trio.sleep(0.0035)  # a is answered (4 ms): b waits for a's caller...
        _append(journal, told, "a2")  # ...which comes back 0.5 ms later
        await trio.sleep(0.02)
        assert committed == [1, 2] and etcd.at[1] == pytest.approx(0.0045)
        _append(journal, told, "c")
        _append(journal, told, "d")
        await trio.sleep(0.001)
        _append(journal, told, "e")  # the round had 2; e alone waits, for the last 4 ms, then leaves
        await trio.sleep(0.05)
        assert committed == [1, 2, 4, 6] and etcd.at[3] - etcd.at[2] == pytest.approx(0.004 + 0.004)
        quiet = trio.current_time()
        _append(journal, told, "f")  # the last round had 1: no wait
        await trio.sleep(0.05)
        assert committed == [1, 2, 4, 6, 7] and etcd.at[-1] == pytest.approx(quiet)
        etcd.took_s = 0.05  # a slow etcd: a batch waits for the callers just answered 10 ms at most
        _append(journal, told, "g")
        _append(journal, told, "h")
        await trio.sleep(0.001)
        _append(journal, told, "i")
        await trio.sleep(0.2)
        assert committed == [1, 2, 4, 6, 7, 8, 10]
        assert etcd.at[-1] - etcd.at[-2] == pytest.approx(0.05 + LINGER_S_MAX)
        nursery.cancel_scope.cancel()
    assert all(error is None for _, error in told) and len(told) == 10


async def test_a_hand_off_sends_what_is_queued_at_once_rather_than_waiting_for_callers(autojump_clock: Any) -> None:
    """A batch waiting for the callers just answered leaves at once when the partition is handed
    over (`close` with `drain`): they are not coming back to this leader."""
    etcd, committed, told = TimedEtcd(took_s=0.004), [], []
    journal = _journal(etcd, committed)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        _append(journal, told, "a")
        await trio.sleep(0.001)
        _append(journal, told, "b")  # waits behind a, then for a's caller (the round had 2)
        await trio.sleep(0.0035)  # a is answered; b's batch waits
        assert committed == [1] and len(etcd.at) == 1
        await trio.sleep(0.001)
        handed = trio.current_time()
        await journal.close(Fenced("handed over"), drain=True, grace_s=1.0)
        assert etcd.at[1] == pytest.approx(handed)
    assert told == [("a", None), ("b", None)] and committed == [1, 2]


class FlakyLeases:
    """A lease keepalive that etcd does not answer while `down`, then answers with the TTL, or
    says the lease is gone once `gone`."""

    attempt_s = 1.0
    endpoints = ["a", "b", "c"]

    def __init__(self) -> None:
        self.down = False
        self.gone = False

    async def lease_keepalive(self, lease_id: int) -> int:
        await trio.sleep(0.005)
        if self.gone:
            raise EtcdLeaseNotFound("a", 200, 5, "lease not found")
        if self.down:
            raise EtcdUnavailable(["a: etcdserver: no leader"])
        return 1


async def test_a_session_outlives_its_deadline_until_etcd_answers_again(autojump_clock: Any) -> None:
    """Past its deadline the holder may not act (`alive` is false), but only etcd's word ends the
    lease: answered again, it is alive from the new deadline; "not found", it is lost."""
    etcd = FlakyLeases()
    keeper = LeaseKeeper(etcd, 1, 1, trio.current_time() + 1, outlive_deadline=True)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeper.run)
        await trio.sleep(2)
        assert keeper.alive
        etcd.down = True  # etcd elects a new leader
        await trio.sleep(3)
        assert not keeper.alive and not keeper.lost.is_set() and keeper.lapses == 1
        etcd.down = False
        await trio.sleep(0.2)
        assert keeper.alive and keeper.deadline > trio.current_time()
        etcd.gone = True
        await keeper.lost.wait()
        assert "not found" in keeper.lost_reason and not keeper.alive
        nursery.cancel_scope.cancel()


async def test_a_session_without_outliving_is_lost_at_its_deadline(autojump_clock: Any) -> None:
    etcd = FlakyLeases()
    keeper = LeaseKeeper(etcd, 1, 1, trio.current_time() + 1)  # type: ignore[arg-type]
    etcd.down = True
    with trio.fail_after(5):
        await keeper.run()
    assert keeper.lost.is_set() and "deadline" in keeper.lost_reason and trio.current_time() == pytest.approx(1.0, abs=0.01)
