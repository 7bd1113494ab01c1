"""Each primitive declares itself once (`actors/primitive.py`), and the kernel's tables are built from
the declarations at import (`actors/primitives.py`): a record type, a command or a timer kind that
no primitive declares, or that two declare, stops the kernel from importing at all, rather than
failing the first request or replay that meets it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runstate.actors import commands as c
from runstate.actors.outcome import Outcome
from runstate.actors.primitive import NOT_COUNTED, Command, Primitive, operation
from runstate.actors.primitives import PRIMITIVES, TABLES, DeclarationError, build
from runstate.actors.records import FIELDS
from runstate.actors.space import RECORD_TYPES
from runstate.actors.transitions import TRANSITIONS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nothing(*_: object) -> Outcome:
    return Outcome()


def test_every_command_record_type_and_timer_kind_is_declared_once():
    """The catalogue's commands all have a transition, every record type has its fields, an applier
    and a usage class, and every primitive that makes state says which attributes it makes."""
    concrete = {cls for cls in vars(c).values() if isinstance(cls, type) and issubclass(cls, Command) and cls is not Command and not cls.base}
    assert concrete == set(TRANSITIONS)
    assert set(FIELDS) == set(TABLES.space_apply) | set(TABLES.kernel_apply) == TABLES.classified
    assert RECORD_TYPES == set(TABLES.space_apply)
    assert len({primitive.name for primitive in PRIMITIVES}) == len(PRIMITIVES)
    made = [name for primitive in PRIMITIVES for name in (*primitive.state, *primitive.parts)]
    assert len(made) == len(set(made)), "each attribute of a space is made by one primitive"


def _record(name: str = "thing.made", **changes: object) -> Primitive:
    declared = {
        "records": {name: ("id", "at_ms")}, "apply": {name: ("", _nothing)}, "usage": {name: operation("things.make")},
    }
    declared.update(changes)
    return Primitive(name.split(".")[0], **declared)  # type: ignore[arg-type]


@pytest.mark.parametrize("broken, says", [
    ((_record(apply={}),), "unevenly"),
    ((_record(usage={}),), "unevenly"),
    ((_record(records={}),), "unevenly"),
    ((_record(), Primitive("other", records={"thing.made": ("id",)}, apply={"thing.made": ("", _nothing)},
                            usage={"thing.made": NOT_COUNTED})), "declared by 'thing' and by 'other'"),
    ((_record(), _record()), "a primitive is declared twice"),
    ((Primitive("a", timers={"tick": ("", _nothing)}), Primitive("b", timers={"tick": ("", _nothing)})), "timer kind 'tick'"),
    ((Primitive("a", derive={"thing.gone": _nothing}),), "which no primitive declares"),
    ((Primitive("a", events={"thing.made": None}), Primitive("b", events={"thing.made": None})), "event type 'thing.made'"),
    # A hook after commits is called only after a turn that applied a type it names: one that
    # names none would never be called, types without a hook name nothing to call.
    ((_record(committed=_nothing),), "without the record types it reacts to"),
    ((_record(committed_on=frozenset({"thing.made"})),), "or those without the hook"),
    ((_record(committed=_nothing, committed_on=frozenset({"thing.lost"})),), "reacts to record type 'thing.lost', which no primitive"),
])
def test_a_declaration_twice_or_half_made_is_refused(broken, says):
    with pytest.raises(DeclarationError, match=says):
        build(broken)


def test_a_command_record_type_or_timer_kind_declared_nowhere_is_refused():
    class MakeNothing(Command):  # (not made with `@command`: that would name it for the real kernel)
        pass

    with pytest.raises(DeclarationError, match="command.*declared by no primitive: MakeNothing"):
        build((), commands=[MakeNothing])
    with pytest.raises(DeclarationError, match="declared by 'a' and by 'b'"):
        build((Primitive("a", commands={MakeNothing: _nothing}), Primitive("b", commands={MakeNothing: _nothing})))
    with pytest.raises(DeclarationError, match="record type.*declared by no primitive: thing.lost"):
        build((_record(),), record_types=["thing.made", "thing.lost"])
    with pytest.raises(DeclarationError, match="timer kind.*declared by no primitive: tock"):
        build((Primitive("a", timers={"tick": ("", _nothing)}),), timer_kinds=["tick", "tock"])
    build((Primitive("a", commands={MakeNothing: _nothing}), _record()), [MakeNothing], ["thing.made"], [])


@pytest.mark.parametrize("made", [
    "primitive.record_type('thing.forgotten')",
    "primitive.timer_kind('forgotten-timer')",
    "primitive.command(type('ForgottenCommand', (primitive.Command,), {}))",
])
def test_the_kernel_does_not_import_with_something_declared_nowhere(made):
    """Named (a record type, a timer kind, a command) and declared by no primitive: building the
    tables, as importing the kernel does, fails, naming what is missing."""
    code = (
        "import importlib, runstate.actors.primitive as primitive, runstate.actors.primitives as primitives\n"
        f"{made}\n"
        "primitives.events.PAYLOAD_NAMES.clear(); primitives.events.EVENT_TYPES.clear()\n"
        "primitives.usage.PLAN.clear(); primitives.usage.CLASSIFIED.clear()\n"
        "try:\n"
        "    importlib.reload(primitives)\n"
        "except primitives.DeclarationError as error:\n"
        "    print('refused:', error)\n"
        "else:\n"
        "    print('imported')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.startswith("refused:") and "declared by no primitive" in result.stdout, result.stdout + result.stderr


@pytest.mark.trio
async def test_a_hook_after_commits_is_called_only_after_a_turn_that_applied_a_type_it_names(nursery, monkeypatch):
    """A claim's turns apply no type any hook names (no hook is called); a task's submit applies
    `task.created`, which admission's hook names: the hooks are called, once, with its records."""
    from runstate.actors import Clock, IdSource, Kernel, KernelState
    from runstate.actors import space as space_module

    from ..ops import ClaimOps, MailboxOps, ScopeOps, TaskOps

    called: list[list[str]] = []
    monkeypatch.setattr(space_module, "_COMMITTED", (lambda space, outcome, records: called.append([r["type"] for r in records]),))
    kernel = Kernel(state=KernelState(), clock=Clock(), ids=IdSource(seed=1))
    await nursery.start(kernel.run)
    scope_id = (await ScopeOps(kernel).create("s"))["id"]
    mailbox_id = (await MailboxOps(kernel).create("s", name="q"))["id"]
    await ClaimOps(kernel).acquire("s", scope_id=scope_id, key="k", holder="h", session="x", lease_s=30)
    assert called == []
    await TaskOps(kernel).submit("s", scope_id=scope_id, mailbox_id=mailbox_id, key="t")
    assert called == [["task.created"]]
    assert "task.created" in TABLES.committed_on and not TABLES.committed_on & {"claim.acquired", "claim.released"}
