"""Runs by name: `PUT /runs/{name}` gets or creates a named root scope, the same one for every caller.

A name, once given to a run, keeps naming that run: a PUT of a run that has since been cancelled,
completed or expired answers that run as it is (`effective` not ACTIVE), and callers treat it as
stopped. That is what makes a stop reach every worker of the run, including those that join later;
work that should start afresh takes a new run name. A deadline sent with the PUT applies only when
the run is created.

Records: `run.named` {name, scope_id, at_ms}, written in the turn that writes the run's
`scope.created`; snapshots carry it as is (it is its own image).

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Callable, Iterator

from .actor_keys import ActorKey, run_actor
from .fields import TIMESTAMP, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Timer, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, record_type
from .scopes import ScopeTree, deadline_timer
from .shapes import Record

__all__ = ["RunNames", "RunCommands", "run_actor", "RUN_NAMED", "EnsureRun", "RUNS"]

# The record types this module decides and applies (the journal's spelling of each).
RUN_NAMED = record_type("run.named")


class RunNames:
    __slots__ = ("_by_name",)

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_name)

    def scope_of(self, name: str) -> str | None:
        return self._by_name.get(name)

    def apply_named(self, record: Record) -> None:
        assert record["name"] not in self._by_name, "a run name names one run"
        self._by_name[record["name"]] = record["scope_id"]

    def image(self) -> Iterator[Record]:
        for name, scope_id in self._by_name.items():
            yield {"type": RUN_NAMED, "name": name, "scope_id": scope_id, "at_ms": 0}


@command
class EnsureRun(Command):
    """Get or create the run (a root scope) of this name (see above for what a stopped run answers)."""

    space: str = path("space")
    name: str = path("name")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    scope_id: str = drawn("sc_")

    def actor(self, state: State) -> ActorKey:
        return run_actor(self.space, self.name)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


class RunCommands:
    __slots__ = ("_space_id", "_scopes", "_names", "_commit", "_deadline_timer")

    def __init__(
        self,
        space_id: str,
        scopes: ScopeTree,
        names: RunNames,
        commit: Callable[..., Outcome],
        deadline_timer: Callable[[str, int], Timer],
    ) -> None:
        self._space_id = space_id
        self._scopes = scopes
        self._names = names
        self._commit = commit
        self._deadline_timer = deadline_timer

    def ensure(self, command: EnsureRun, now_ms: int) -> Outcome:
        scopes = self._scopes
        existing = self._names.scope_of(command.name)
        if existing is not None:
            return Outcome(reply=scopes.view(scopes.get(existing), now_ms))
        scope_id = command.scope_id
        created = scopes.decide_create(scope_id, command.name, None, command.deadline_ms, None, now_ms)
        named = {"type": RUN_NAMED, "name": command.name, "scope_id": scope_id, "at_ms": now_ms}
        outcome = self._commit(Outcome(), created, named)
        if command.deadline_ms is not None:
            outcome.timers.append(self._deadline_timer(scope_id, command.deadline_ms))
        outcome.reply = scopes.view(scopes.get(scope_id), now_ms)
        return outcome


def _make(space: Space) -> None:
    space.run_names = RunNames()
    deadline = lambda scope_id, deadline_ms: deadline_timer(space.id, scope_id, deadline_ms)  # noqa: E731
    space.runs = RunCommands(space.id, space.scopes, space.run_names, space.commit, deadline)


RUNS = Primitive(
    "runs",
    make=_make,
    state=("run_names",),
    parts=("runs",),
    commands={EnsureRun: ("runs", RunCommands.ensure)},
    # Written in the turn that writes the run's `scope.created`; its own image.
    records={RUN_NAMED: ("name", "scope_id", "at_ms")},
    apply={RUN_NAMED: ("run_names", "apply_named")},
    usage={RUN_NAMED: NOT_COUNTED},  # the run's `scope.created` is the operation
    image=lambda space: space.run_names.image(),
)
