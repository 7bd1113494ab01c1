"""A partition's journal on etcd: one fenced transaction per batch, written only by its leader.

The kernel's `Journal` (`actors/journal.py`), like the WAL's: `append` checks and encodes the
records a turn produced and queues them, never blocking; one writer task takes everything queued
as one batch (group commit) and writes it in one transaction:

    compare  create_revision(/rs/<cluster>/p/<n>/leader) == epoch     this node still leads
             create_revision(/rs/<cluster>/p/<n>/log/<first lsn>) == 0  nobody wrote this LSN yet
    success  put log/<first lsn> = the batch's frames                 (`frame.encode_frames`)
    failure  get leader, get log/<first lsn>                          read back, see below

The batch is the WAL's own framing (length, LSN, CRC chained within the batch from 0, orjson body
per record), so a standby applies it with the replay code recovery uses (`recovery.replay_batch`);
batches follow each other by the LSNs in their keys, which the fence keeps without gaps. `epoch` is the revision at which this node created the leader key:
the fence is exact because the log lives in the same store as the leader key (see the cluster's
design notes: a lock alone is not safe).

What an answer means:

- success: the batch is committed (etcd's Raft quorum has it, fsynced): every caller in it is
  answered, in LSN order; `on_committed` is told (the local copy).
- failure, and the log key holds exactly this batch: an earlier attempt got there and its answer
  was lost (a member died under it); it is ours: committed as above.
- failure otherwise: another node leads now, or wrote this LSN: this node was deposed. The
  journal fails with `Fenced` at once (every caller still waiting is answered that its change was
  not recorded, and the kernel refuses further changes); the partition is dropped and rebuilt as
  a standby from what was committed.
- no member answers: the same transaction is sent again (it is repeatable: its compares make a
  second copy fail) until it is answered or the journal is stopped (`fail`), which the node does
  when its etcd lease can no longer be relied on.

Stopping (`close`), when the node stops leading: what is queued and not yet sent is answered that
it was not recorded (or, with `drain`, a hand-off to another node, written first), and the batch
already sent gets a moment (`grace_s`) for its answer, so that its callers learn what happened to
it rather than a guess. Only a batch whose answer does not come within that moment (etcd
unreachable) is answered with `Unresolved`: it may or may not have been recorded, and the next
leader, which reads the log to its end first, knows (a change sent again with its
Idempotency-Key gets its first answer there).

A batch is at most `batch_bytes_max` of frames (etcd refuses requests over 1.5 MiB, and a value
travels as base64); a record that alone would be larger fails the journal, as a record the WAL
cannot encode does (the server keeps requests far below it).
"""

from __future__ import annotations

import logging
from typing import Callable

import orjson
import trio

from ..actors.journal import DurableWaits
from ..actors.shapes import Record
from .etcd import Compare, EtcdClient, EtcdError, Op, RangeResult
from .frame import encode_frames
from .model import Durable

__all__ = ["EtcdJournal", "Fenced", "Unresolved", "PartitionKeys", "BATCH_BYTES_MAX"]

log = logging.getLogger("runstate.cluster")

# Frames of one batch: 1 MiB, which base64 makes 1.33 MiB, under etcd's 1.5 MiB per request.
BATCH_BYTES_MAX = 1 << 20
# After no member answered: the pause before the same transaction is sent again.
RETRY_S = 0.05
# How long a batch may wait for the callers of the last one to come back (see `_linger`): this
# share of the last transaction's time, and never more than the cap.
LINGER_SHARE = 1.0
LINGER_S_MAX = 0.010


class Fenced(Exception):
    """This node no longer leads the partition: its appends are refused by the fence."""


class Unresolved(Exception):
    """The journal stopped while a batch was sent and not answered: it may or may not be recorded."""


class PartitionKeys:
    """The etcd keys of one partition of a cluster."""

    __slots__ = ("prefix", "leader", "handed", "log_prefix")

    def __init__(self, cluster_prefix: str, number: int) -> None:
        self.prefix = f"{cluster_prefix}p/{number:03d}/"
        self.leader = self.prefix + "leader"
        # Put with the leader key's deletion when a leader hands the partition over: {"epoch": its
        # epoch, "from", "to"} (what tells a hand-off from a failover; it sorts before "leader").
        self.handed = self.prefix + "handed"
        self.log_prefix = self.prefix + "log/"

    def log(self, first_lsn: int) -> str:
        return f"{self.log_prefix}{first_lsn:020d}"

    @staticmethod
    def lsn_of(key: bytes) -> int:
        return int(key.rsplit(b"/", 1)[1])


class EtcdJournal:
    """The kernel's journal for one partition this node leads. Create inside trio; run `run`."""

    def __init__(
        self,
        etcd: EtcdClient,
        keys: PartitionKeys,
        *,
        epoch: int,
        next_lsn: int,
        check: Callable[[Record], None] | None = None,
        on_committed: Callable[[int, list[bytes]], None] | None = None,
        batch_bytes_max: int = BATCH_BYTES_MAX,
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.epoch = epoch
        self.check = check
        self.on_committed = on_committed
        self.batch_bytes_max = batch_bytes_max
        self.failure: BaseException | None = None
        self.failed = trio.Event()
        self.appended_lsn = next_lsn - 1
        self.durable_lsn = next_lsn - 1
        self.batches = 0
        self.retries = 0
        self.commit_seconds: list[float] = []  # the last few transactions' times (for the metrics)
        self._pending: list[tuple[int, list[bytes], Durable]] = []
        self._pending_bytes = 0
        # The batch sent and not answered yet (None between transactions), and set after each answer.
        self._writing: list[tuple[int, list[bytes], Durable]] | None = None
        self._answered = trio.Event()
        self._closing = False
        self._draining = False
        # Appends the last round had: the batch answered, and those waiting when it was (`_linger`).
        self._expected = 1
        self._after = DurableWaits()
        self._wakeup = trio.Event()

    # -- the Journal protocol ----------------------------------------------------------------------

    def append(self, records: list[Record], on_durable: Durable) -> int:
        if self.failure is not None:
            on_durable(self.failure)
            return self.appended_lsn
        try:
            if self.check is not None:
                for record in records:
                    self.check(record)
            bodies = [orjson.dumps(record) for record in records]
            size = sum(len(body) + 24 for body in bodies)
            if size > self.batch_bytes_max:
                raise ValueError(f"a change of {size} bytes is over the {self.batch_bytes_max} bytes of one batch")
        except (TypeError, ValueError) as error:  # a bug upstream; the state holds an unrecorded change
            log.error("cannot encode a record: %s", error)
            self.fail(error, [(self.appended_lsn + 1, [], on_durable)])
            return self.appended_lsn
        first_lsn = self.appended_lsn + 1
        self.appended_lsn += len(bodies)
        assert self.durable_lsn <= self.appended_lsn, "nothing is durable before it is appended"
        self._pending.append((first_lsn, bodies, on_durable))
        self._pending_bytes += size
        self._wakeup.set()
        return self.appended_lsn

    def after(self, lsn: int, on_durable: Durable) -> None:
        self._after.add(lsn, self.durable_lsn, self.failure, on_durable)

    # -- writing ----------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write what is appended, a batch per transaction, until cancelled or failed."""
        task_status.started()
        try:
            while self.failure is None:
                if not self._pending or self._closing:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    continue
                if await self._linger():
                    await self._commit(self._take())
        finally:
            if self._pending or self._after or self._writing:
                self.fail(self.failure or OSError("the journal stopped before this change was written"), [])

    async def close(self, error: BaseException, *, drain: bool = False, grace_s: float = 1.0) -> None:
        """Stop writing (this node stops leading), while `run` still runs; then `fail` with `error`.

        With `drain` (a hand-off: this node is still the leader), everything queued is written
        first, for at most `grace_s`. Otherwise what is queued and not yet sent is answered
        `error` at once (it is surely not recorded), and the batch already sent gets `grace_s` for
        its answer: committed, its callers are told so; fenced off, that it was not. One still
        unanswered after that is answered `Unresolved`."""
        with trio.move_on_after(grace_s):
            if drain:
                self._draining = True  # what is queued leaves at once (see `_linger`)
                self._wakeup.set()
                while self.failure is None and (self._pending or self._writing is not None):
                    await self._answered.wait()
            self._closing = True
            if self.failure is None:
                pending, self._pending, self._pending_bytes = self._pending, [], 0
                self._answer(pending, error)
            while self.failure is None and self._writing is not None:
                await self._answered.wait()
        self._closing = True
        writing, self._writing = self._writing, None
        if writing is not None:
            self._answer(writing, Unresolved(
                f"{error}; a change was being written when it stopped and may or may not have been recorded"))
        self.fail(error)

    async def write_now(self, records: list[Record]) -> None:
        """Commit `records` at once (a new leader's boot and restart decisions, before it serves).

        Only while nothing else is queued. Raises `Fenced` if the node was deposed meanwhile."""
        assert not self._pending
        done: list[BaseException | None] = []
        self.append(records, done.append)
        if self._pending:
            await self._commit(self._take())
        if self.failure is not None:
            raise self.failure
        assert done == [None]

    async def _linger(self) -> bool:
        """Under load, give the callers just answered a moment to join the next batch.

        Each transaction costs etcd and this node about the same whatever its size (etcd's CPU
        per transaction is about four fifths fixed: `bench/etcd_txn.py`), and the callers a batch
        answered usually send their next change a moment later: sent at once, the next batch
        leaves without them, and the callers split into two halves that take turns, each with its
        own transaction. So when the last round had more appends than are waiting now, the batch
        waits until as many are, for at most `LINGER_SHARE` (all) of the last transaction's time
        and `LINGER_S_MAX` at most. Up to one transaction's time costs the callers it waits for
        nothing (one that misses this batch waits for its answer anyway, one transaction being in
        flight at a time, and then for its own), the others at most that time, and saves a
        transaction. A change passed on by another node comes back later than one sent straight
        to the leader (two more hops), and a shorter wait (half, 3 ms at most) split those callers
        again. A lone caller never waits: its round had one; nor does a hand-off's last batch
        (`close` with `drain`): the partition is being handed over.
        Returns whether the batch is still to be sent (not when the journal stopped meanwhile)."""
        target = self._expected
        if len(self._pending) >= target or not self.commit_seconds or self._draining:
            return True
        with trio.move_on_after(min(self.commit_seconds[-1] * LINGER_SHARE, LINGER_S_MAX)):
            while (len(self._pending) < target and self._pending_bytes < self.batch_bytes_max
                   and not self._closing and not self._draining):
                await self._wakeup.wait()
                self._wakeup = trio.Event()
        return bool(self._pending) and not self._closing and self.failure is None

    def _take(self) -> list[tuple[int, list[bytes], Durable]]:
        batch: list[tuple[int, list[bytes], Durable]] = []
        size = 0
        while self._pending:
            _, bodies, _ = self._pending[0]
            part = sum(len(body) + 24 for body in bodies)
            if batch and size + part > self.batch_bytes_max:
                break
            taken = self._pending.pop(0)
            assert not batch or taken[0] == batch[-1][0] + len(batch[-1][1]), "a batch's appends follow each other"
            batch.append(taken)
            size += part
        self._pending_bytes -= size
        return batch

    async def _commit(self, batch: list[tuple[int, list[bytes], Durable]]) -> None:
        self._writing = batch
        try:
            await self._send(batch)
        finally:
            if self._writing is batch:  # cancelled with no answer: never leave its callers waiting
                self._writing = None
                self._answer(batch, Unresolved("the journal stopped while a change was being written; "
                                               "it may or may not have been recorded"))
            self._answered.set()
            self._answered = trio.Event()

    async def _send(self, batch: list[tuple[int, list[bytes], Durable]]) -> None:
        first_lsn = batch[0][0]
        # The LSN given at `append` is the key the batch is written under: batches are committed
        # in order, each right after the last (the fence's second compare refuses a gap's twin).
        assert first_lsn == self.durable_lsn + 1, f"batch at LSN {first_lsn} after {self.durable_lsn}"
        bodies = [body for _, part, _ in batch for body in part]
        data, _ = encode_frames(first_lsn, 0, bodies)
        log_key = self.keys.log(first_lsn)
        fence = [Compare.create_revision(self.keys.leader, "==", self.epoch), Compare.absent(log_key)]
        while True:
            if self._writing is not batch:  # stopped while waiting for an answer: its callers were told
                return
            started = trio.current_time()
            try:
                result = await self.etcd.txn(
                    fence, [Op.put(log_key, data)], [Op.get(self.keys.leader), Op.get(log_key)], repeatable=True
                )
            except EtcdError as error:  # no member answered: the same transaction again
                self.retries += 1
                log.warning("partition %s: a batch at LSN %d is not committed yet (%s); sending it again",
                            self.keys.prefix, first_lsn, error)
                await trio.sleep(RETRY_S)
                continue
            break
        self.commit_seconds = [*self.commit_seconds[-63:], trio.current_time() - started]
        if self._writing is not batch:  # answered meanwhile (`close` gave up on it): the next leader knows
            return
        self._writing = None  # answered below
        self._expected = len(batch) + len(self._pending)
        if not result.succeeded:
            reads = [response for response in result.responses if isinstance(response, RangeResult)]
            assert len(reads) == 2, "the failure branch is two reads: the leader's key and the log's"
            leader, written = reads[0].kvs, reads[1].kvs
            if not (written and written[0].value == data):
                who = "nobody" if not leader else leader[0].value.decode("utf-8", "replace")
                reason = (f"LSN {first_lsn} was written by another leader" if written
                          else f"another node leads the partition now (leader: {who})")
                self.fail(Fenced(f"deposed: {reason}"), batch)
                return
        self.batches += 1
        self.durable_lsn = first_lsn + len(bodies) - 1
        assert self.durable_lsn <= self.appended_lsn, "nothing is durable before it is appended"
        if self.on_committed is not None:
            self.on_committed(first_lsn, bodies)
        self._answer(batch, None)
        self._after.reached(self.durable_lsn)

    @staticmethod
    def _answer(batch: list[tuple[int, list[bytes], Durable]], error: BaseException | None) -> None:
        for _, _, on_durable in batch:
            on_durable(error)

    def fail(self, error: BaseException, batch: list[tuple[int, list[bytes], Durable]] | None = None) -> None:
        """Stop: answer every waiting caller with `error` and refuse every change from now on."""
        if self.failure is None:
            self.failure = error
        writing, self._writing = self._writing, None
        if writing is not None and writing is not batch:
            self._answer(writing, Unresolved(f"{error}; a change was being written and may or may not have been recorded"))
        waiting = (batch or []) + self._pending
        self._pending, self._pending_bytes = [], 0
        self._answer(waiting, self.failure)
        self._after.fail(self.failure)
        self.failed.set()
        self._wakeup.set()
