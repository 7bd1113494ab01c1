"""A partition: the unit of state, journal and time. Its actors run its commands one key at a time.

Spaces map to partitions (`layout.py`); a partition owns everything of its spaces: their state
(with their stored Idempotency-Key answers and event logs), its own journal with its own LSNs, its
own supervisor of deadlines and its own actors. Partitions share nothing, so one can be opened,
replayed, served, stopped or dropped while the others go on serving; the kernel (`kernel.py`) only
routes each command to the partition of its space.

Each key (a claim key in a scope, a scope, a queue...) has an actor: a channel of calls and at most
one trio task draining it, given to the key when a call arrives and taken back a moment after the
channel is empty (the task then waits in the partition's pool of idle actor tasks for the next key
with no actor, so a key's actor costs a reschedule, not a task started and ended). A call
carries a command (`commands.py`: plain data, never a function); the command names its actor. A
turn takes one call, reads the clock once, runs the command's transition (`transitions.py`)
against the partition's state, journals the records, arms the timers and pokes the actors named in
the outcome. Turns never await, so one key's calls run strictly one after another, and an actor
never waits on another actor.

A caller parks once per call: the actor wakes it when the records are durable (ack after durable),
when everything it could have seen is durable if it changed nothing (nothing is shown before it is
durable: `_answer`), or later when it was waiting (a long poll) and a poke made its command succeed.
Callers own their timeouts: `submit(..., wait_ms=...)` is the only wait.

Rule for everything below: state changes only through transitions and `KernelState.apply`.

One exception, `restore()`: when the journal could not write, the state holds changes that are not
on disk. The journal refuses further changes (`failure`), rebuilds the state from disk, and hands it
to `restore()`, which swaps it in, re-arms every timer from it and fails the parked callers.

A partition is in one of three roles, and moves between them only through its own methods (a
cluster's node calls them; nothing outside sets a partition's fields):

    serving    runs commands, journals them, arms its timers          lead(journal)
    following  refuses commands with a reason; its state, which       follow(reason, state=None)
               holds committed changes only, may be read (a
               cluster's standby)
    refused    refuses commands and reads alike (it could not be      refuse(reason, state=None)
               opened; its state is being rebuilt or taken over)

A call goes through four phases, each entered once, in this order (a phase may be skipped):
QUEUED (posted to its actor) -> WAITING (parked among the actor's waiters, a long poll) ->
DECIDED (its answer is made and waits for the journal: its records, or what it saw, to be
durable) -> DONE (answered, or withdrawn by its caller). The assertions below pair each phase
with where it is entered and where it is relied on.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from contextvars import ContextVar
from typing import Any, Callable

import outcome as trio_outcome
import trio

from .clock import Clock
from .primitive import Command, FireTimer
from .errors import INTERNAL, UNAVAILABLE, KernelError
from .idempotency import IdempotencyTable
from .journal import Journal
from .outcome import ActorKey, TimerMarker, TimerTag
from .shapes import plain
from .state import KernelState
from .supervisor import Supervisor
from .transitions import TRANSITIONS

__all__ = ["Partition", "Idem", "EMPTY", "ON_PARK"]

log = logging.getLogger("runstate.kernel")

# What a waiting call returns when its wait ended with nothing (a long poll answered 204).
EMPTY = None

# Turns an actor runs before letting other tasks in.
TURNS_PER_SLICE = 64
# An actor out of calls lingers between one and two of these before it retires, so a key in use
# keeps its task instead of starting a new one for every call (a start costs about as much as a
# whole turn).
ACTOR_LINGER_S = 1.0
# At most this many actors linger at once in a partition; past it an actor retires as soon as it
# is idle, so a burst over a million keys leaves plain state behind, not a million parked tasks.
ACTORS_LINGERING_MAX = 1024
# A retired actor's task does not end: it waits in its partition's pool of idle actor tasks, and the
# next key with no actor takes it (a reschedule) instead of starting a task of its own (in trio
# alone a task started and ended costs about 5 µs, a pooled task handed a key and parked again
# about 2.5 µs). At most this many wait; past it a retired actor's task ends. One sweep period
# retires about as many actors as a second of keys used once starts, so the pool is as large as
# the lingering actors: a second's keys, up to the same bound.
ACTOR_TASKS_POOLED_MAX = ACTORS_LINGERING_MAX

_QUEUED, _WAITING, _DECIDED, _DONE = range(4)


class Idem:
    """An Idempotency-Key, the space it was sent to, and the fingerprint of its request."""

    __slots__ = ("space", "key", "fingerprint")

    def __init__(self, space: str, key: str, fingerprint: str) -> None:
        self.space = space
        self.key = key
        self.fingerprint = fingerprint


class _Call:
    __slots__ = ("command", "idem", "task", "phase", "waits", "parked", "answer", "entry", "result")

    def __init__(self, command: Command | None, idem: Idem | None, task: trio.lowlevel.Task | None, waits: bool) -> None:
        self.command = command  # None: a poke (re-run the waiters)
        self.idem = idem
        self.task = task  # None: nobody waits for the answer (a timer, a poke)
        self.phase = _QUEUED
        self.waits = waits
        # Whether `task` is parked on this call now; if not, an answer waits in `answer`.
        self.parked = False
        self.answer: trio_outcome.Outcome[Any] | None = None
        # The actor it was posted to, and the answer it gets once what it saw is durable.
        self.entry: _Actor | None = None
        self.result: trio_outcome.Outcome[Any] | None = None

    def durable(self, error: BaseException | None) -> None:
        """The journal's word on what this call changed or saw: the answer, or UNAVAILABLE."""
        assert self.phase == _DECIDED and self.result is not None, "the journal answers a decided call, once"
        # Decided, so not done: the call is answered here, straight (`_wake` less its check).
        self.phase = _DONE
        if error is None:
            Partition._hand_back(self, self.result)
        else:
            Partition._hand_back(self, trio_outcome.Error(KernelError(UNAVAILABLE, f"not recorded: {_what(error)}")))

    def abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        """The caller was cancelled while parked on this call. Not yet decided: withdraw it.
        Decided: the change is made and being written; the answer follows within one fsync, so
        the caller waits for it rather than losing it."""
        if self.phase == _DECIDED:
            return trio.lowlevel.Abort.FAILED
        assert self.phase in (_QUEUED, _WAITING) and self.parked, "only a parked call that is not done is cancelled"
        was_waiting = self.phase == _WAITING
        self.phase = _DONE
        self.parked = False
        entry = self.entry
        if was_waiting and entry is not None:
            del entry.waiters[self]
            entry.partition._retire_if_idle(entry)
        return trio.lowlevel.Abort.SUCCEEDED


def _what(error: BaseException) -> str:
    """A journal's failure as a space's answer says it: what failed, not where (an `OSError`
    names the server's file; the server's log has it)."""
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return str(error)


# What the actor hands back to a caller whose command found nothing yet and who may wait: the
# caller then parks again, inside its deadline. (A sentinel, never an answer.)
_WAIT = object()
# Called when a call made in this context parks among its actor's waiters (it waits for a change):
# the HTTP shell watches a long poll's client for going away only once it really waits.
ON_PARK: ContextVar[Callable[[], None] | None] = ContextVar("runstate_on_park", default=None)


class _Actor:
    __slots__ = ("key", "partition", "channel", "running", "waiters", "parked", "fresh")

    def __init__(self, key: ActorKey, partition: "Partition") -> None:
        self.key = key
        self.partition = partition
        self.channel: deque[_Call] = deque()
        self.running = False
        # The actor's task while it lingers for more calls, and whether it parked since the last sweep.
        self.parked: _ActorTask | None = None
        self.fresh = False
        # Calls parked until a poke: insertion-ordered (FIFO), removable in O(1).
        self.waiters: dict[_Call, None] = {}



class _ActorTask:
    """An actor task, made once per task: which key it lingers for (`lingers`), or None when it
    waits in its partition's pool for a key (or is running one). A task waits in one place at a
    time, parked with `abort`: lingering for its key, or idle in the pool, where the sweep puts
    it without waking it when its key's actor retires. (The abort function runs in the task that
    cancels, so it is told here which task it aborts and where that task waits.)"""

    __slots__ = ("partition", "task", "lingers")

    def __init__(self, partition: "Partition", task: trio.lowlevel.Task) -> None:
        self.partition = partition
        self.task = task
        self.lingers: _Actor | None = None

    def abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        """The task was cancelled (the partition is stopping): it stops lingering, or leaves the pool."""
        entry = self.lingers
        if entry is None:
            del self.partition._pool[self.task]
        else:
            entry.parked = None
            self.partition._lingering.pop(entry.key, None)
        return trio.lowlevel.Abort.SUCCEEDED


class Partition:
    """One partition's state, journal, supervisor and actors. Create inside trio, then
    `await nursery.start(partition.run)` before submitting to it (the kernel does both)."""

    def __init__(
        self, number: int, state: KernelState, journal: Journal, clock: Clock, keep_reply: Callable[[Any], Any] = plain
    ) -> None:
        self.number = number
        self.state = state
        self.journal = journal
        self.clock = clock
        self.supervisor = Supervisor(clock, self._on_timer)
        self._actors: dict[ActorKey, _Actor] = {}
        self._lingering: dict[ActorKey, _Actor] = {}
        # Idle actor tasks, each waiting for a key to serve (`_serve`); the last in is the first out.
        self._pool: dict[trio.lowlevel.Task, _ActorTask] = {}
        self._sweeper: trio.lowlevel.Task | None = None  # the sweep task while it waits for an actor to linger
        self._nursery: trio.Nursery | None = None
        self.turns = 0
        # Calls answered from a stored Idempotency-Key answer instead of being run again.
        self.idempotent_replays = 0
        # How an answer is kept for a retry with its Idempotency-Key: as JSON, in the form the
        # retry must be answered in. The shell gives its wire form (`server/wire/`), so a retry,
        # even after a restart, answers the same bytes as the first try; the journal keeps it so.
        self.keep_reply = keep_reply
        # Set by `end_waits()` at shutdown: no call parks any more, a long poll answers EMPTY.
        self.waits_ended = False
        # Why the partition takes no command now (None: it serves): it could not be opened, or
        # it was stopped, or another node of a cluster leads it. Its reads answer UNAVAILABLE
        # with the same reason, unless `readable` (a cluster's follower: its state holds
        # committed changes only, a little behind the leader's).
        self.refusal: str | None = None
        self.readable = False
        # The last LSN this partition appended to its journal: LSNs only grow (reset with a new journal).
        self._appended_lsn = journal.appended_lsn
        # The journal failure whose state rebuilt from disk `restore()` swapped in: while it lasts,
        # the state holds recorded changes only, so a read of it waits for nothing.
        self._restored_from: BaseException | None = None

    def __repr__(self) -> str:
        return f"<Partition {self.number}>"

    # -- lifetime -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled: the supervisor and every actor live in this nursery."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.refusal is None:  # (one that does not serve arms its timers when it starts to)
                self.supervisor.arm_all(self.state.timers())
            await nursery.start(self.supervisor.run)
            nursery.start_soon(self._sweep_lingering)
            task_status.started()

    def stop(self) -> None:
        """End this partition's tasks for good (it was replaced by a reopened one): its supervisor,
        its sweep and its idle actor tasks; `run` then returns. Only for a partition that takes no
        command (`refusal` set), so no caller waits on any of its actors."""
        assert self.refusal is not None, "only a partition that takes no command is stopped"
        self.fail_waiters(KernelError(UNAVAILABLE, self.refusal))
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def end_waits(self) -> int:
        """Answer every parked call `EMPTY` (a long poll's 204) and park none from now on.

        For shutdown: a receiver parked for up to 30 s would otherwise hold the drain back, and
        an empty answer is one it already handles (it simply asks again, of the next server).
        Calls being run or written are not touched; they finish normally. Returns how many ended.
        """
        self.waits_ended = True
        ended = 0
        for entry in list(self._actors.values()):
            parked = list(entry.waiters)
            entry.waiters.clear()
            for call in parked:
                self._wake(call, trio_outcome.Value(EMPTY))
                ended += 1
            self._retire_if_idle(entry)
        return ended

    def restore(self, state: KernelState) -> None:
        """Replace the whole state with one rebuilt from the journal.

        Used after the journal failed to write: the in-memory state may hold changes that were
        never recorded, and must not keep them. Call it while `journal.failure` is still set (so
        no turn changes the state meanwhile). Timers are re-armed from the new state; callers
        parked in a long poll are answered UNAVAILABLE, since what they waited on may be gone.
        Calls already decided were answered by the journal; queued calls run against the new
        state (and are refused while the failure lasts).
        """
        assert self.journal.failure is not None or self.refusal is not None, "restored only while no turn can change it"
        self.state = state
        self._appended_lsn = self.journal.appended_lsn
        self._restored_from = self.journal.failure
        self.supervisor.reset()
        self.supervisor.arm_all(state.timers())
        self.fail_waiters(KernelError(UNAVAILABLE, "the state was rebuilt from the journal; try again"))

    # -- roles (see the module docstring) ---------------------------------------------------------

    def lead(self, journal: Journal) -> None:
        """Serve from now on, journaling to `journal` (this node won the partition): commands run
        and the state's timers are armed. The state is the one it followed, caught up and with
        the new leader's first batch applied; `journal` has that batch durable and nothing else."""
        assert self.refusal is not None, "only a partition that does not serve starts to"
        assert journal.failure is None and journal.appended_lsn == journal.durable_lsn, "a new journal holds nothing pending"
        assert not self.parked(), "nobody waits in a partition that did not serve"
        self.journal = journal
        self._appended_lsn = journal.appended_lsn
        self.refusal = None
        self.readable = True
        self.supervisor.reset()
        self.supervisor.arm_all(self.state.timers())

    def follow(self, reason: str, state: KernelState | None = None) -> None:
        """Stop serving (or stay stopped) as a standby: commands are refused with `reason` and the
        state, `state` if given (rebuilt from committed records), may be read."""
        self._stop(reason, state)
        self.readable = True

    def refuse(self, reason: str, state: KernelState | None = None) -> None:
        """Stop serving (or stay stopped) and let nothing read the state either, which may hold
        changes never committed or is being rebuilt or taken over: both answer `reason`."""
        self._stop(reason, state)
        self.readable = False

    def _stop(self, reason: str, state: KernelState | None) -> None:
        assert reason, "a partition that does not serve says why"
        self.refusal = reason
        # A call parked in a long poll found nothing and waits: nothing was done for it, so it is
        # answered `reason` (a cluster may then ask the new leader instead).
        self.fail_waiters(KernelError(UNAVAILABLE, reason))
        self.supervisor.reset()  # no timer fires where nothing serves; `lead` arms them again
        if state is not None:
            self.state = state
        assert self.refusal is not None and not self.parked()

    def fail_waiters(self, error: KernelError) -> None:
        """Answer every call parked in a long poll with `error`."""
        for entry in list(self._actors.values()):
            parked = list(entry.waiters)
            entry.waiters.clear()
            for call in parked:
                self._wake(call, trio_outcome.Error(error))
            self._retire_if_idle(entry)

    def parked(self) -> list[tuple[ActorKey, int]]:
        """Actors with calls parked on them now (long polls, held watches), and how many each."""
        return [(key, len(entry.waiters)) for key, entry in self._actors.items() if entry.waiters]

    def parked_commands(self, key: ActorKey) -> list[Any]:
        """The commands of the calls parked on `key`, oldest first: what each waits for (a queue's
        actor holds receives and reads waiting for a task's end alike)."""
        entry = self._actors.get(key)
        return [] if entry is None else [call.command for call in entry.waiters]

    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]:
        """Who the calls parked on `key` are for (their commands' `holder`), oldest first, at most
        `count_max`: the names an operator looks for behind a count of waiting calls."""
        entry = self._actors.get(key)
        if entry is None:
            return []
        holders = (getattr(call.command, "holder", None) for call in entry.waiters)
        return list(itertools.islice((holder for holder in holders if holder is not None), count_max))

    @property
    def actors(self) -> int:
        """Actors alive now (running or lingering, or holding waiters). The idle tasks in the pool
        serve no key and are not actors: `actor_tasks_pooled` counts them."""
        return len(self._actors)

    @property
    def actor_tasks_pooled(self) -> int:
        """Idle actor tasks waiting in the pool for a key (at most `ACTOR_TASKS_POOLED_MAX`)."""
        return len(self._pool)

    # -- durable points ---------------------------------------------------------------------------

    def _recorded_only(self) -> bool:
        """True while the journal refuses changes and the state is the one rebuilt from disk after
        its failure (`restore`): no turn changes it then, and all it shows is recorded, though the
        journal still counts the failed batch as appended."""
        failure = self.journal.failure
        return failure is not None and failure is self._restored_from

    async def settled(self) -> None:
        """Return once every record appended so far is durable (UNAVAILABLE if the journal fails).

        The point is taken when this is called, before it first waits."""
        journal = self.journal
        lsn = journal.appended_lsn
        assert journal.durable_lsn <= lsn, "nothing is durable before it is appended"
        if lsn <= journal.durable_lsn or self._recorded_only():
            return
        failure: list[BaseException | None] = []
        done = trio.Event()

        def durable(error: BaseException | None) -> None:
            failure.append(error)
            done.set()

        journal.after(lsn, durable)
        await done.wait()
        if failure[0] is not None:
            raise KernelError(UNAVAILABLE, f"what this read shows is not recorded: {_what(failure[0])}")

    # -- calling --------------------------------------------------------------------------------

    async def submit(self, command: Command, idem: Idem | None, wait_until: float | None) -> Any:
        """Run `command` in its actor's next turn and return its reply once durable (see `Kernel.submit`)."""
        if self.refusal is not None:
            raise KernelError(UNAVAILABLE, self.refusal)
        actor = command.actor(self.state)
        call = _Call(command, idem, trio.lowlevel.current_task(), wait_until is not None)
        self._post(actor, call)
        # The first park written out (`_park`'s, without a coroutine of its own to make and to
        # pass through both ways, on every command): posting only queues the call and wakes its
        # actor, so no answer can be waiting for it yet.
        assert call.answer is None and not call.parked and call.phase == _QUEUED, "a call just posted is not answered"
        call.parked = True
        answer = await trio.lowlevel.wait_task_rescheduled(call.abort)
        if answer is not _WAIT:
            return answer
        # Nothing to answer yet: wait among the actor's waiters for a poke that makes the command
        # succeed. Only a call that really waits pays for a cancel scope.
        parked = ON_PARK.get()
        if parked is not None:
            parked()
        assert wait_until is not None, "only a call that may wait is told to wait"
        with trio.move_on_at(wait_until):
            return await self._park(call)
        return EMPTY

    async def submit_all(self, commands: list[tuple[Command, Idem | None]]) -> list[trio_outcome.Outcome[Any]]:
        """Run every command in its actor's next turn and return each one's answer (a `Value`, or
        an `Error` with its `KernelError`) once durable, in the order given.

        Every call is posted before any of them runs (no await in between), so commands on one
        actor run in the order given, and the turns of all of them run in one pass of the
        scheduler: their records reach the journal together and go out in one group commit
        (unless the writer was already on its way, when they may take two). Nothing parks: a
        command that would wait (a long poll) is answered as without a wait. A command whose
        actor cannot be found (a token that is not current) is refused on its own; the others
        run. Cancelled while waiting, the calls not yet run are withdrawn; those decided are
        recorded and their answers dropped, as for a caller of `submit` that went away."""
        if self.refusal is not None:
            raise KernelError(UNAVAILABLE, self.refusal)
        task = trio.lowlevel.current_task()
        posted: list[Any] = []
        for command, idem in commands:
            try:
                actor = command.actor(self.state)
            except KernelError as error:
                posted.append(trio_outcome.Error(error))
                continue
            call = _Call(command, idem, task, False)
            self._post(actor, call)
            posted.append(call)
        answers: list[trio_outcome.Outcome[Any]] = []
        try:
            for item in posted:
                if not isinstance(item, _Call):
                    answers.append(item)
                    continue
                try:
                    answers.append(trio_outcome.Value(await self._park(item)))
                except KernelError as error:
                    answers.append(trio_outcome.Error(error))
        except BaseException:
            for item in posted:
                if isinstance(item, _Call) and item.phase == _QUEUED:
                    item.phase = _DONE  # withdrawn: its actor skips it
            raise
        return answers

    async def _park(self, call: _Call) -> Any:
        """Wait for the call's answer (returned at once if it came while the caller was away)."""
        if call.answer is not None:
            answer, call.answer = call.answer, None
            return answer.unwrap()
        assert not call.parked and call.phase != _DONE, "a call is parked on once at a time, and not once answered"
        call.parked = True
        return await trio.lowlevel.wait_task_rescheduled(call.abort)

    def post(self, command: Command) -> None:
        """Run `command` in its actor's next turn; nobody waits for the answer."""
        self._post(command.actor(self.state), _Call(command, None, None, False))

    def _on_timer(self, actor: ActorKey, tag: TimerTag, marker: TimerMarker) -> None:
        self._post(actor, _Call(FireTimer(on=actor, tag=tag, marker=marker), None, None, False))

    def _post(self, key: ActorKey, call: _Call) -> None:
        assert call.phase == _QUEUED and call.entry is None, "a call is posted once"
        entry = self._actors.get(key)
        if entry is None:
            entry = self._actors[key] = _Actor(key, self)
        call.entry = entry
        entry.channel.append(call)
        if entry.parked is not None:
            lingering, entry.parked = entry.parked, None
            del self._lingering[key]
            trio.lowlevel.reschedule(lingering.task, trio_outcome.Value(True))
        elif not entry.running:
            entry.running = True
            if self._pool:
                # An idle task from the pool becomes this key's actor.
                _, pooled = self._pool.popitem()
                trio.lowlevel.reschedule(pooled.task, trio_outcome.Value(entry))
            else:
                assert self._nursery is not None, "calls are posted only while the partition runs"
                self._nursery.start_soon(self._serve, entry)

    # -- the actor ------------------------------------------------------------------------------

    async def _serve(self, entry: _Actor) -> None:
        """An actor task: serve `entry`'s key (run every queued call, linger for more, retire),
        then serve the next key that has no actor, taken from the pool, until the pool is full."""
        me = _ActorTask(self, trio.lowlevel.current_task())
        lingering = self._lingering
        while True:
            channel = entry.channel
            # What woke the task from lingering: True (a call came), or, once the sweep
            # retired its actor (and did the retiring), the next key's actor, or False (to end).
            woken: Any = True
            try:
                turns = 0
                while woken is True:
                    while channel:
                        call = channel.popleft()
                        if call.phase != _QUEUED:
                            assert call.phase == _DONE, "a call leaves its channel only to be run"
                            continue  # withdrawn by its caller
                        if call.command is None or self._turn(entry, call):
                            self._rerun_waiters(entry)
                        turns += 1
                        if turns % TURNS_PER_SLICE == 0:
                            await trio.lowlevel.checkpoint()
                    if len(lingering) >= ACTORS_LINGERING_MAX:
                        break  # retires at once
                    # Linger for another call, or for the sweep to retire the actor.
                    me.lingers = entry
                    entry.parked = me
                    entry.fresh = True
                    lingering[entry.key] = entry
                    if self._sweeper is not None:
                        sweeper, self._sweeper = self._sweeper, None
                        trio.lowlevel.reschedule(sweeper)
                    woken = await trio.lowlevel.wait_task_rescheduled(me.abort)
            finally:
                if woken is True:  # (not retired by the sweep, which did it then)
                    entry.running = False
                    self._retire_if_idle(entry)
            if woken is True:
                # Retired at once: this task is no key's actor now. It waits in the pool for one, or ends.
                if len(self._pool) >= ACTOR_TASKS_POOLED_MAX:
                    return
                me.lingers = None
                self._pool[me.task] = me
                woken = await trio.lowlevel.wait_task_rescheduled(me.abort)
            if woken is False:
                return
            entry = woken
            assert entry.running and entry.parked is None and entry.channel, "a pooled task is handed a key with calls and no actor"

    async def _sweep_lingering(self) -> None:
        """Retire actors that lingered a whole sweep period without a call. A retired actor's task
        goes to the pool as it is, parked (it wakes only when handed a key), or ends if it is full."""
        while True:
            if not self._lingering:
                self._sweeper = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._abort_sweeper)
            await trio.sleep(ACTOR_LINGER_S)
            pool = self._pool
            for key, entry in list(self._lingering.items()):
                if entry.fresh:
                    entry.fresh = False
                    continue
                del self._lingering[key]
                parked, entry.parked = entry.parked, None
                assert parked is not None and parked.lingers is entry, "an actor lingers parked"
                entry.running = False
                self._retire_if_idle(entry)
                if len(pool) < ACTOR_TASKS_POOLED_MAX:
                    parked.lingers = None
                    pool[parked.task] = parked
                else:
                    trio.lowlevel.reschedule(parked.task, trio_outcome.Value(False))

    def _abort_sweeper(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self._sweeper = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _retire_if_idle(self, entry: _Actor) -> None:
        if not entry.running and not entry.waiters and not entry.channel:
            if self._actors.get(entry.key) is entry:
                del self._actors[entry.key]

    def _rerun_waiters(self, entry: _Actor) -> None:
        """Run the actor's parked calls again, oldest first (the first that can go gets what the
        change freed). A parked call that still finds nothing changes nothing, so the ones after
        it waiting for the same thing (`Command.wait_key`) would find nothing too: they are not
        run until something changes, which keeps a release or a send with a hundred parked
        callers from costing a hundred turns."""
        if not entry.waiters:
            return
        nothing: set[Any] = set()
        for call in list(entry.waiters):
            if call.phase != _WAITING:  # answered by a turn of this loop (a journal that answers at once)
                assert call not in entry.waiters, "a waiter that is no longer waiting has left the waiters"
                continue
            assert call.command is not None, "a waiter is a command (pokes never wait)"
            key = call.command.wait_key()
            if key is not None and key in nothing:
                continue
            if self._turn(entry, call):
                nothing.clear()  # the state changed: what found nothing may find something now
            elif key is not None and call.phase == _WAITING:
                nothing.add(key)

    def _turn(self, entry: _Actor, call: _Call) -> bool:
        """Run one call; returns True when it changed state (waiters may now succeed)."""
        assert call.phase in (_QUEUED, _WAITING) and call.command is not None, "only a call not yet decided runs"
        self.turns += 1
        now_ms = self.clock.now_ms()
        state = self.state
        idem = call.idem
        try:
            if self.journal.failure is not None or self.refusal is not None:
                raise KernelError(UNAVAILABLE, self.refusal or "the journal cannot write; changes are refused until it recovers")
            if idem is not None:
                space = state.spaces.get(idem.space)
                stored = None if space is None else space.idempotency.lookup(idem.key, idem.fingerprint, now_ms)
                if stored is not None:
                    self.idempotent_replays += 1
                    self._leave_waiters(entry, call)
                    # The first answer was recorded in an earlier turn, so it is durable once
                    # everything appended so far is.
                    self._answer(call, trio_outcome.Value(stored.body))
                    return False
            command = call.command
            result = TRANSITIONS[type(command)](state, command, now_ms)
        except KernelError as error:
            self._leave_waiters(entry, call)
            self._answer(call, trio_outcome.Error(error))
            return False
        except Exception as error:  # a bug: answer INTERNAL, keep the actor alive
            log.exception("turn failed in %r", entry.key)
            self._leave_waiters(entry, call)
            self._answer(call, trio_outcome.Error(KernelError(INTERNAL, f"internal error: {type(error).__name__}")))
            return False

        if result.empty and not result.records and call.waits and not self.waits_ended:
            for timer in result.timers:  # a parked call may ask to be looked at again at a time (admission)
                self.supervisor.arm(timer)
            if call.phase == _QUEUED:
                call.phase = _WAITING
                entry.waiters[call] = None
                self._hand_back(call, trio_outcome.Value(_WAIT))
            assert call in entry.waiters
            return False
        self._leave_waiters(entry, call)
        for timer in result.timers:
            self.supervisor.arm(timer)
        # The actors named run their waiters again, those that have any: most turns name the
        # space's event log, whose actor rarely has a watch parked, so the look is made here and
        # not in a call per actor. The turn's own actor runs its waiters after the turn.
        actors = self._actors
        for actor in result.pokes:
            poked = actors.get(actor)
            if poked is not None and poked.waiters and actor != entry.key:
                self._post(actor, _Call(None, None, None, False))
        records = result.records
        if not records:
            self._answer(call, trio_outcome.Value(EMPTY if result.empty else result.reply))
            return False
        reply = result.reply
        if idem is not None:
            # Answered in the form kept for its retries (encoded once, not again by the shell).
            reply = self.keep_reply(reply)
            idem_record = IdempotencyTable.record(idem.space, idem.key, idem.fingerprint, reply, now_ms)
            state.apply(idem_record)
            records.append(idem_record)
        call.phase = _DECIDED
        call.result = trio_outcome.Value(reply)
        lsn = self.journal.append(records, call.durable)
        assert lsn >= self._appended_lsn, "LSNs only grow"
        self._appended_lsn = lsn
        return True

    def _answer(self, call: _Call, result: trio_outcome.Outcome[Any]) -> None:
        """Answer a call that changed nothing, once everything it could have seen is durable.

        Its answer (a view, a refusal such as CLAIM_HELD, an empty long poll's wake-up, a stored
        answer) may reflect records other turns appended that are not durable yet: a crash could
        still take those back, so the answer waits for them (at most one group commit). With
        nothing pending, which is the usual case, it goes at once.
        """
        journal = self.journal
        appended = journal.appended_lsn
        assert journal.durable_lsn <= appended, "nothing is durable before it is appended"
        if call.task is None or appended <= journal.durable_lsn or (journal.failure is not None and self._recorded_only()):
            self._wake(call, result)
            return
        assert call.phase in (_QUEUED, _WAITING), "a call is decided once"
        call.phase = _DECIDED
        call.result = result
        journal.after(appended, call.durable)

    def _leave_waiters(self, entry: _Actor, call: _Call) -> None:
        if call.phase == _WAITING:
            del entry.waiters[call]
        assert call not in entry.waiters

    @classmethod
    def _wake(cls, call: _Call, result: trio_outcome.Outcome[Any]) -> None:
        if call.phase == _DONE:
            return
        call.phase = _DONE
        cls._hand_back(call, result)

    @staticmethod
    def _hand_back(call: _Call, result: trio_outcome.Outcome[Any]) -> None:
        """Give `result` to the caller: now if it is parked on the call, else when it parks again."""
        if call.task is None:
            return
        if call.parked:
            call.parked = False
            trio.lowlevel.reschedule(call.task, result)
        else:
            # At most one answer waits for its caller: the wait (`_WAIT`) is handed back once, on
            # entering WAITING, and the final answer once, on entering DONE; the caller takes the
            # first before it parks for the second.
            assert call.answer is None, "one answer at a time waits for a caller"
            call.answer = result
