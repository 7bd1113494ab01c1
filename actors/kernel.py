"""The kernel: partitions of state, each with its actors, journal and timers, and the commands the shell calls.

A command names the space it runs in; the kernel hands it to the partition that holds that space
(`layout.py`), whose actor for the command's key runs it in turn (`partition.py`: actors, turns,
ack after durable, and nothing shown before it is durable). Commands of no space (API keys) go to
the system partition. The kernel itself keeps only what every partition shares: the limits, the
clock, the seeded source of random values, and the parsers that make commands from requests.

The shell reads through the kernel too, never a partition's state directly: `space_view` (reading
never makes a space), `read`/`settled` (answer a view only once everything it could see is
durable), `keys`, `spaces`. A partition that cannot serve (it could not be opened; it was stopped)
refuses its commands and reads with UNAVAILABLE and its reason, while the others go on.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, Iterator, TypeVar

import outcome as trio_outcome
import trio

from .clock import Clock
from .commands import Command
from .errors import UNAVAILABLE, KernelError
from .fields import Parser, compile_parser
from .ids import IdSource
from .journal import Journal, MemoryJournal
from .keys import KeyTable
from .layout import SYSTEM, Layout
from .limits import Limits
from .outcome import ActorKey
from .partition import EMPTY, Idem, Partition
from .space import SpaceState
from .state import KernelState
from .shapes import Body, Record, plain

__all__ = ["Kernel", "Idem", "EMPTY", "JITTER_LOW", "JITTER_HIGH"]

T = TypeVar("T")

# Spaces whose partition number the kernel remembers (past it, it forgets them all and starts over).
SPACES_REMEMBERED_MAX = 65_536

# The retry backoff is the nominal wait (1 s, 2 s, 4 s...) times a factor drawn in this range.
JITTER_LOW = 0.8
JITTER_HIGH = 1.0


class Kernel:
    """Create inside trio, then `await nursery.start(kernel.run)` before calling commands.

    `Kernel(state=..., journal=...)` is one partition holding everything (the kernel's tests and
    benchmarks; `tests/single.py` reads its state, journal and supervisor); `Kernel.partitioned(...)`
    is the server's shape: a system partition and P data partitions.
    """

    def __init__(
        self,
        *,
        state: KernelState | None = None,
        journal: Journal | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        layout: Layout | None = None,
        partitions: Iterable[Partition] | None = None,
        limits: Limits | None = None,
        keep_reply: Callable[[Any], Any] = plain,
    ) -> None:
        self.clock = clock or Clock()
        self.ids = ids or IdSource()
        # How an answer is kept for an Idempotency-Key's retry (`Partition.keep_reply`): the
        # shell's wire form; the kernel's own plain form when there is no shell.
        self.keep_reply = keep_reply
        if partitions is None:
            state = state or KernelState(limits)
            partitions = [Partition(SYSTEM, state, journal if journal is not None else MemoryJournal(), self.clock, keep_reply)]
            layout = Layout.single_partition()
            limits = state.limits
        assert layout is not None and limits is not None
        self.layout = layout
        self.limits = limits
        self.partitions: list[Partition] = sorted(partitions, key=lambda partition: partition.number)
        assert [partition.number for partition in self.partitions] == list(layout.numbers()), "a partition per number"
        # Each command class's parser, generated for `limits` (`compile_parser`).
        self._parsers: dict[type, Parser] = {}
        self._numbers: dict[str | None, int] = {}  # space -> its partition's number, as looked up
        self._nursery: trio.Nursery | None = None

    @classmethod
    def partitioned(
        cls,
        states: dict[int, KernelState],
        journals: dict[int, Journal] | None = None,
        *,
        layout: Layout,
        limits: Limits,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        refusals: dict[int, str] | None = None,
        keep_reply: Callable[[Any], Any] = plain,
    ) -> "Kernel":
        """A kernel of `layout`'s partitions, each with its state and journal (memory if none given).

        A partition named in `refusals` serves nothing, with that reason (it could not be opened);
        its state is an empty one until it is reopened (`reopen`)."""
        clock = clock or Clock()
        partitions = []
        for number in layout.numbers():
            state = states.get(number) or KernelState(limits)
            journal = (journals or {}).get(number) or MemoryJournal()
            partition = Partition(number, state, journal, clock, keep_reply)
            refusal = (refusals or {}).get(number)
            if refusal is not None:
                partition.refuse(refusal)
            partitions.append(partition)
        return cls(clock=clock, ids=ids, layout=layout, partitions=partitions, limits=limits, keep_reply=keep_reply)

    # -- lifetime -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled: every partition's supervisor and actors live in this nursery."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for partition in self.partitions:
                await nursery.start(partition.run)
            task_status.started()

    def end_waits(self) -> int:
        """Answer every parked call `EMPTY` and park none from now on (`Partition.end_waits`)."""
        return sum(partition.end_waits() for partition in self.partitions)

    async def reopen(self, number: int, state: KernelState, journal: Journal) -> Partition:
        """Serve partition `number` again, with `state` and `journal` (it could not be opened
        before); the partition it replaces ends its tasks."""
        old = self.partitions[number]
        old.fail_waiters(KernelError(UNAVAILABLE, "the partition was reopened; try again"))
        partition = Partition(number, state, journal, self.clock, self.keep_reply)
        partition.waits_ended = old.waits_ended
        assert self._nursery is not None
        await self._nursery.start(partition.run)
        self.partitions[number] = partition
        old.stop()
        return partition

    # -- partitions -----------------------------------------------------------------------------

    def partition_of(self, space_id: str | None) -> Partition:
        """The partition that holds `space_id` (None: the system partition, which holds the keys)."""
        number = self._numbers.get(space_id)  # (every call looks it up: a hash per space, once)
        if number is None:
            number = self.layout.of(space_id)
            if len(self._numbers) >= SPACES_REMEMBERED_MAX:
                self._numbers.clear()
            self._numbers[space_id] = number
        return self.partitions[number]

    # -- counts for the metrics ------------------------------------------------------------------

    @property
    def actors(self) -> int:
        """Actors alive now (running or lingering, or holding waiters), in every partition."""
        return sum(partition.actors for partition in self.partitions)

    @property
    def actor_tasks_pooled(self) -> int:
        """Idle actor tasks waiting for a key, in every partition (not actors: they serve no key)."""
        return sum(partition.actor_tasks_pooled for partition in self.partitions)

    @property
    def turns(self) -> int:
        return sum(partition.turns for partition in self.partitions)

    @property
    def idempotent_replays(self) -> int:
        return sum(partition.idempotent_replays for partition in self.partitions)

    @property
    def waits_ended(self) -> bool:
        return all(partition.waits_ended for partition in self.partitions)

    def timers(self) -> tuple[int, int]:
        """Timers armed now, and timers fired so far, over every partition."""
        return (
            sum(len(partition.supervisor) for partition in self.partitions),
            sum(partition.supervisor.fired for partition in self.partitions),
        )

    def parked(self) -> list[tuple[ActorKey, int]]:
        """Actors with calls parked on them now (long polls, held watches), and how many each."""
        return [entry for partition in self.partitions for entry in partition.parked()]

    def parked_commands(self, key: ActorKey) -> list[Any]:
        """The commands of the calls parked on the actor `key` of a space, oldest first."""
        assert len(key) >= 2, "a space's actor names its space second"
        return self.partition_of(key[1]).parked_commands(key)

    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]:
        """Who the calls parked on the actor `key` of a space are for, oldest first, at most `count_max`."""
        assert len(key) >= 2, "a space's actor names its space second"
        return self.partition_of(key[1]).parked_holders(key, count_max)

    # -- reading --------------------------------------------------------------------------------

    @property
    def keys(self) -> KeyTable:
        """The API keys (in the system partition)."""
        return self.partitions[SYSTEM].state.keys

    def spaces(self) -> Iterator[SpaceState]:
        """Every space recorded in a partition that serves."""
        for partition in self.partitions:
            if partition.refusal is None or partition.readable:
                yield from partition.state.spaces.values()

    def space_known(self, space_id: str) -> bool:
        """Whether anything was recorded in `space_id` (reading it must not make it)."""
        return space_id in self.partition_of(space_id).state.spaces

    def space_view(self, space_id: str) -> SpaceState:
        """A space's state to read from (an empty one, not kept, if nothing was recorded there).

        What is read from it may include changes not yet durable: answer it only after
        `settled(space_id)` (or read through `read`). UNAVAILABLE while its partition cannot serve."""
        partition = self.partition_of(space_id)
        if partition.refusal is not None and not partition.readable:
            raise KernelError(UNAVAILABLE, partition.refusal)
        return partition.state.space_view(space_id)

    async def read(self, space_id: str, view: Callable[[SpaceState | None], T]) -> T:
        """`view(space)` of a space as it stands now, answered once all it could see is durable.

        `view` is given the space's state, or None when nothing was ever recorded in it (reading
        never makes a space), and must not change it. It runs at once, with no await, so it sees
        one consistent moment; its result is returned only when every record applied up to that
        moment is durable, so a read never shows a change that a crash could still take back
        (at most one group commit later, and at once when nothing is pending).
        """
        partition = self.partition_of(space_id)
        if partition.refusal is not None and not partition.readable:
            raise KernelError(UNAVAILABLE, partition.refusal)
        result = view(partition.state.spaces.get(space_id))
        await partition.settled()
        return result

    async def settled(self, space_id: str | None = None) -> None:
        """Return once every record applied so far (in `space_id`'s partition, or in all) is durable.

        The point is taken when this is called, before it first waits: a view made just before
        the call may be answered when this returns. UNAVAILABLE if a journal fails first.
        """
        if space_id is not None:
            partition = self.partition_of(space_id)
            if partition.refusal is None:  # (a follower's state holds committed changes only)
                await partition.settled()
            return
        for partition in self.partitions:  # a later partition's point is taken after the earlier
            if partition.refusal is None:  # waits: later than at the call, which is only safer
                await partition.settled()

    # -- calling --------------------------------------------------------------------------------

    def parse(self, command_class: type, body: Body, params: dict[str, str], query: Any = None) -> Any:
        """A command of `command_class` from a request's JSON body, path parameters and query
        (a function of a name), checked against the limits, with its random values drawn from this
        kernel's seeded source."""
        parser = self._parsers.get(command_class)
        if parser is None:
            parser = self._parsers[command_class] = compile_parser(command_class, self.limits)
        return parser(body, params, self.draw, query)

    def draw(self, what: str) -> Any:
        """A random value a command needs (see `fields.drawn`): drawn here, recorded with it."""
        if what == "token":
            return self.ids.token()
        if what == "delivery-token":
            return self.ids.make("dt_", 128)
        if what == "jitter":
            return self.ids.uniform(JITTER_LOW, JITTER_HIGH)
        return self.ids.make(what)

    def submit(self, command: Command, *, idem: Idem | None = None, wait_ms: int | None = None) -> Awaitable[Any]:
        """Run `command` in its actor's next turn and return (await) its reply once durable.

        With `wait_ms`, a command whose outcome is empty (a long poll's receive) parks until a
        poke makes it succeed or the wait (capped at `wait_ms_max`) ends; then the answer is
        `EMPTY`. Raises `KernelError` (UNAVAILABLE while the command's partition cannot serve).
        (A plain function handing back the partition's call: one coroutine a call, not two.)
        """
        wait_until = self.clock.deadline_after(min(wait_ms, self.limits.wait_ms_max)) if wait_ms else None
        return self.partition_of(getattr(command, "space", None)).submit(command, idem, wait_until)

    async def submit_all(self, space_id: str, commands: list[tuple[Command, Idem | None]]) -> list[trio_outcome.Outcome[Any]]:
        """Run commands of one space together (`Partition.submit_all`): each one's answer, a
        `Value` or an `Error`, in the order given. UNAVAILABLE while the partition cannot serve."""
        return await self.partition_of(space_id).submit_all(commands)

    def post(self, command: Command) -> None:
        """Run `command` in its actor's next turn; nobody waits for the answer."""
        self.partition_of(getattr(command, "space", None)).post(command)
