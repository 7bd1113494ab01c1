"""Mailboxes: the named work queues of a space.

A mailbox has a name unique in its space, a delivery `mode`, an optional `backlogLimit` and the
number of deliveries a message may have (`maxAttempts`). Only the `WORK` mode (competing
consumers: each message goes to one receiver at a time) is implemented; any other mode is refused
rather than silently given WORK semantics.

A mailbox made by a put by name that states nothing (`PUT /mailboxes/by-name/{name}` with `{}`,
what a 0.3.0 producer sends) has the default `maxAttempts` and no default requirements, and has
declared neither: the first put that states `maxAttempts` sets it, and so does the first one
that states `requirements` (a `mailbox.declared` record); from then on a put that states another
value is 409 `CONFLICT`. So a producer that starts before its workers does not fix the settings
the workers declare. A mailbox created by `POST /mailboxes` has declared its `maxAttempts`.

Default `requirements` (pools, quotas and budgets by name, as a task's, `admission.py`) are kept
resolved to ids. Admission takes them for a task of the mailbox that names none of its own, when
it is admitted (so a task submitted before the workers declared them takes them too); `recv`
never delivers a task of a mailbox that has them.

The mailbox also carries the counts its listing shows. They are kept by the message table at
every state change of a message (`messages.py`), so they are exact and replay keeps them exact.
Messages themselves live in one queue per (mailbox, scope): a mailbox is shared by every run of
the space, and each run sees only its own messages.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterator, NamedTuple

from .actor_keys import ActorKey, mailboxes_actor
from .caps import full
from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from .fields import INTEGER, JSON, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, operation, record_type
from .requirements import REQUIREMENTS, parse_requirements, requirements_record
from .shapes import EpochMs, Record

__all__ = [
    "Mailbox", "MailboxTable", "WORK", "MODES", "MAILBOX_CREATED", "MAILBOX_DECLARED", "MAILBOX_IMAGE",
    "CreateMailbox", "EnsureMailbox", "MAILBOXES", "MailboxView", "MailboxCountsView", "RequirementsView", "PoolNeed",
    "QuotaNeed", "BudgetNeed", "requirements_view", "MailboxesView",
]

# The record types this module decides and applies (the journal's spelling of each).
MAILBOX_CREATED = record_type("mailbox.created")
MAILBOX_DECLARED = record_type("mailbox.declared")
MAILBOX_IMAGE = record_type("mailbox.image")

WORK = "WORK"
MODES = (WORK,)

class Mailbox:
    __slots__ = (
        "id",
        "name",
        "mode",
        "backlog_limit",
        "max_attempts",
        "attempts_declared",  # whether max_attempts was stated (else it is the default, not fixed yet)
        "requirements",  # default requirements of its tasks, resolved to ids, or None
        "created_ms",
        # Counts of this mailbox's messages, all scopes together.
        "queued",  # waiting to be delivered, visible now
        "delayed",  # waiting out a retry backoff
        "leased",  # delivered, lease not yet settled
        "dead",  # dead letters still kept
    )

    def __init__(
        self,
        mailbox_id: str,
        name: str,
        mode: str,
        backlog_limit: int | None,
        max_attempts: int,
        created_ms: int,
        attempts_declared: bool = True,
        requirements: Record | None = None,
    ) -> None:
        self.id = mailbox_id
        self.name = name
        self.mode = mode
        self.backlog_limit = backlog_limit
        self.max_attempts = max_attempts
        self.attempts_declared = attempts_declared
        self.requirements = requirements
        self.created_ms = created_ms
        self.queued = 0
        self.delayed = 0
        self.leased = 0
        self.dead = 0

    @property
    def backlog(self) -> int:
        """Messages not yet settled: what `backlogLimit` bounds."""
        return self.queued + self.delayed + self.leased


# A mailbox's views are named tuples (read on every create and put of a mailbox, and listed).


class PoolNeed(NamedTuple):
    """Units of a pool (by id) a task of the mailbox needs by default."""

    permit_id: str
    units: int


class QuotaNeed(NamedTuple):
    """Units of a quota's allowance (by id) a task of the mailbox uses by default."""

    allowance_id: str
    units: int


class BudgetNeed(NamedTuple):
    """Minor units (a string of digits) a task of the mailbox reserves from a budget (by id) by default."""

    budget_id: str
    reserve_minor: str


class RequirementsView(NamedTuple):
    """A mailbox's default requirements, resolved to ids (for tasks that name none)."""

    pools: tuple[PoolNeed, ...]
    quotas: tuple[QuotaNeed, ...]
    budgets: tuple[BudgetNeed, ...]


class MailboxCountsView(NamedTuple):
    """A mailbox's messages by state: ready, backing off, leased, and its dead letters kept."""

    queued: int
    delayed: int
    leased: int
    dead_letters: int


class MailboxView(NamedTuple):
    """A mailbox as it is shown: its settings (`backlog_limit` None for the server's default), its
    default requirements (or None), its backlog (messages not yet settled) and counts."""

    id: str
    name: str
    mode: str  # WORK, the one mode served
    backlog_limit: int | None
    max_attempts: int
    requirements: RequirementsView | None
    backlog: int
    counts: MailboxCountsView
    created_ms: EpochMs


class MailboxesView(NamedTuple):
    """Every mailbox of a space, in creation order (the official client reads the list as complete)."""

    mailboxes: tuple[MailboxView, ...]


class MailboxTable:
    """The mailboxes of one space, by id and by name."""

    __slots__ = ("_by_id", "_by_name", "_limits")

    def __init__(self, limits: Limits) -> None:
        self._by_id: dict[str, Mailbox] = {}
        self._by_name: dict[str, Mailbox] = {}
        self._limits = limits

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, mailbox_id: str) -> Mailbox:
        mailbox = self._by_id.get(mailbox_id)
        if mailbox is None:
            raise KernelError(NOT_FOUND, f"mailbox {quote(mailbox_id)} not found")
        return mailbox

    def find(self, mailbox_id: str) -> Mailbox | None:
        return self._by_id.get(mailbox_id)

    def by_name(self, name: str) -> Mailbox | None:
        return self._by_name.get(name)

    def all(self) -> Iterator[Mailbox]:
        """In creation order."""
        return iter(self._by_id.values())

    @staticmethod
    def view(mailbox: Mailbox) -> MailboxView:
        counts = MailboxCountsView(mailbox.queued, mailbox.delayed, mailbox.leased, mailbox.dead)
        assert mailbox.backlog == counts.queued + counts.delayed + counts.leased, "the backlog is what is not settled"
        return MailboxView(
            mailbox.id, mailbox.name, mailbox.mode, mailbox.backlog_limit, mailbox.max_attempts,
            requirements_view(mailbox.requirements), mailbox.backlog, counts, mailbox.created_ms,
        )

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(
        self,
        mailbox_id: str,
        name: str,
        mode: str | None,
        backlog_limit: int | None,
        max_attempts: int | None,
        now_ms: int,
        *,
        declared: bool = True,
        requirements: Record | None = None,
    ) -> Record:
        """The `mailbox.created` record, or a refusal (`declared`: whether it states maxAttempts).

        A name that exists is CONFLICT whatever the settings: the official client's `ensure` then
        lists the mailboxes and compares the mode itself.
        """
        limits = self._limits
        # The mode, backlogLimit and maxAttempts were checked with the command (`CreateMailbox`).
        stored_mode = WORK if mode is None else mode.upper()
        assert stored_mode in MODES, stored_mode
        attempts = limits.attempts_max_default if max_attempts is None else max_attempts
        if name in self._by_name:
            raise KernelError(CONFLICT, f"a mailbox named {quote(name)} already exists")
        if len(self._by_id) >= limits.mailboxes_max:
            raise full(f"space holds {len(self._by_id)} mailboxes", "mailboxes_max")
        if mailbox_id in self._by_id:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"mailbox id {mailbox_id} is taken")
        record: Record = {
            "type": MAILBOX_CREATED,
            "id": mailbox_id,
            "name": name,
            "mode": stored_mode,
            "backlog_limit": backlog_limit,
            "max_attempts": attempts,
            "at_ms": now_ms,
        }
        if not declared:
            record["attempts_declared"] = False
        if requirements is not None:
            record["requirements"] = requirements
        return record

    @staticmethod
    def decide_declare(mailbox: Mailbox, max_attempts: int | None, requirements: Record | None, now_ms: int) -> Record | None:
        """What a put by name states, held to what the mailbox declared: a `mailbox.declared`
        record for a setting stated for the first time, CONFLICT for one that differs, nothing
        when every setting stated is the mailbox's already."""
        record: Record = {"type": MAILBOX_DECLARED, "id": mailbox.id, "at_ms": now_ms}
        if max_attempts is not None:
            if not mailbox.attempts_declared:
                record["max_attempts"] = max_attempts
            elif max_attempts != mailbox.max_attempts:
                raise KernelError(
                    CONFLICT, f"mailbox {mailbox.name!r} has maxAttempts {mailbox.max_attempts}, not {max_attempts}"
                )
        if requirements is not None:
            if mailbox.requirements is None:
                record["requirements"] = requirements
            elif _canonical(requirements) != _canonical(mailbox.requirements):
                raise KernelError(
                    CONFLICT,
                    f"mailbox {mailbox.name!r} has other default requirements: "
                    f"{_requirements_text(mailbox.requirements)}",
                )
        # Paired with `apply_declared`: a setting is declared once, and only one not declared yet.
        assert "max_attempts" not in record or not mailbox.attempts_declared
        return record if len(record) > 3 else None

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        """Records that rebuild this table through `apply_created`, in creation order.

        The counts are not imaged: the message table rebuilds them as its messages come back.
        """
        for mailbox in self._by_id.values():
            yield {
                "type": MAILBOX_IMAGE,
                "id": mailbox.id,
                "name": mailbox.name,
                "mode": mailbox.mode,
                "backlog_limit": mailbox.backlog_limit,
                "max_attempts": mailbox.max_attempts,
                "at_ms": mailbox.created_ms,
                "attempts_declared": mailbox.attempts_declared,
                "requirements": mailbox.requirements,
            }

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Mailbox:
        mailbox = Mailbox(
            record["id"],
            record["name"],
            record["mode"],
            record["backlog_limit"],
            record["max_attempts"],
            record["at_ms"],
            record.get("attempts_declared", True),
            record.get("requirements"),
        )
        self._by_id[mailbox.id] = mailbox
        self._by_name[mailbox.name] = mailbox
        return mailbox

    def apply_declared(self, record: Record) -> Mailbox:
        mailbox = self._by_id[record["id"]]
        if "max_attempts" in record:
            assert not mailbox.attempts_declared, f"mailbox {mailbox.id} declared its attempts twice"
            mailbox.max_attempts = record["max_attempts"]
            mailbox.attempts_declared = True
        if "requirements" in record:
            assert mailbox.requirements is None, f"mailbox {mailbox.id} declared its requirements twice"
            mailbox.requirements = record["requirements"]
        return mailbox


def _canonical(requirements: Record) -> Record:
    """Requirements compared as sets: the order a caller listed them in does not matter."""
    return {kind: sorted(map(tuple, entries)) for kind, entries in requirements.items()}


def requirements_view(requirements: Record | None) -> RequirementsView | None:
    """Resolved requirements as a mailbox shows them (by id)."""
    if requirements is None:
        return None
    return RequirementsView(
        tuple(PoolNeed(pool_id, units) for pool_id, units in requirements["pools"]),
        tuple(QuotaNeed(allowance_id, units) for allowance_id, units in requirements["quotas"]),
        tuple(BudgetNeed(budget_id, amount) for budget_id, amount in requirements["budgets"]),
    )


def _requirements_text(requirements: Record) -> str:
    """Resolved requirements in a refusal's message, by id (the message's words: what it said
    before the views were typed, so that a client matching on it is not surprised)."""
    return str({
        "pools": [{"permitId": pool_id, "units": units} for pool_id, units in requirements["pools"]],
        "quotas": [{"allowanceId": allowance_id, "units": units} for allowance_id, units in requirements["quotas"]],
        "budgets": [{"budgetId": budget_id, "reserveMinor": amount} for budget_id, amount in requirements["budgets"]],
    })


# -- commands ----------------------------------------------------------------------------------


@command
class CreateMailbox(Command):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    mode: str | None = body("mode", required=False, description="WORK (the default) is the one mode served")
    backlog_limit: int | None = body("backlogLimit", INTEGER, required=False, minimum=1, maximum="backlog_limit_max")
    max_attempts: int | None = body("maxAttempts", INTEGER, required=False, minimum=1, maximum="attempts_max_max")
    mailbox_id: str = drawn("mb_")

    def actor(self, state: State) -> ActorKey:
        return mailboxes_actor(self.space)

    def check(self, limits: Limits) -> None:
        if self.mode is not None and self.mode.upper() not in MODES:
            raise KernelError(
                VALIDATION_FAILED, f"mode {quote(self.mode)} is not supported; supported modes: {', '.join(MODES)}"
            )


@command
class EnsureMailbox(Command):
    """Get or create the mailbox of this name; settings sent must match the mailbox's (else CONFLICT)."""

    # Requirements are resolved as a task's are (`requirements.requirements_record`), for no task.
    task_id: ClassVar[None] = None
    space: str = path("space")
    name: str = path("name")
    max_attempts: int | None = body("maxAttempts", INTEGER, required=False, minimum=1, maximum="attempts_max_max")
    requirements: Any = body(
        "requirements", JSON, required=False,
        description="default requirements of its tasks that name none: " + REQUIREMENTS,
    )
    mailbox_id: str = drawn("mb_")

    def actor(self, state: State) -> ActorKey:
        return mailboxes_actor(self.space)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        if self.requirements is not None:
            parse_requirements(self.requirements)


# -- transitions (of the space) -------------------------------------------------------------------


def create(space: Space, command: CreateMailbox, now_ms: int) -> Outcome:
    mailboxes: MailboxTable = space.mailboxes
    mailbox_id = command.mailbox_id
    record = mailboxes.decide_create(mailbox_id, command.name, command.mode, command.backlog_limit, command.max_attempts, now_ms)
    outcome = space.commit(Outcome(), record)
    outcome.reply = mailboxes.view(mailboxes.get(mailbox_id))
    return outcome


def ensure(space: Space, command: EnsureMailbox, now_ms: int) -> Outcome:
    """The mailbox of this name, created with what the put states (defaults for the rest) when
    missing; a setting stated for the first time is declared, one that differs is CONFLICT. Its
    default requirements are resolved to ids first, as a task's are."""
    mailboxes: MailboxTable = space.mailboxes
    needs = requirements_record(space, command, now_ms)
    requirements = None if needs is None else {kind: needs[kind] for kind in ("pools", "quotas", "budgets")}
    mailbox = mailboxes.by_name(command.name)
    if mailbox is None:
        record = mailboxes.decide_create(
            command.mailbox_id, command.name, None, None, command.max_attempts, now_ms,
            declared=command.max_attempts is not None, requirements=requirements,
        )
        outcome = space.commit(Outcome(), record)
        outcome.reply = mailboxes.view(mailboxes.get(command.mailbox_id))
        return outcome
    declared = mailboxes.decide_declare(mailbox, command.max_attempts, requirements, now_ms)
    outcome = Outcome() if declared is None else space.commit(Outcome(), declared)
    outcome.reply = mailboxes.view(mailbox)
    return outcome


def _make(space: Space) -> None:
    space.mailboxes = MailboxTable(space.limits)


MAILBOXES = Primitive(
    "mailboxes",
    make=_make,
    state=("mailboxes",),
    commands={CreateMailbox: ("", create), EnsureMailbox: ("", ensure)},
    # A record written before settings could be declared has neither optional field: it declared
    # its attempts.
    records={
        MAILBOX_CREATED: ("id", "name", "mode", "backlog_limit", "max_attempts", "at_ms", "attempts_declared?", "requirements?"),
        # A put by name that states a setting the mailbox has not declared yet.
        MAILBOX_DECLARED: ("id", "at_ms", "max_attempts?", "requirements?"),
        MAILBOX_IMAGE: ("id", "name", "mode", "backlog_limit", "max_attempts", "at_ms", "attempts_declared?", "requirements?"),
    },
    apply={
        MAILBOX_CREATED: ("mailboxes", "apply_created"),
        MAILBOX_DECLARED: ("mailboxes", "apply_declared"),
        MAILBOX_IMAGE: ("mailboxes", "apply_created"),
    },
    usage={MAILBOX_CREATED: operation("mailboxes.create"), MAILBOX_DECLARED: operation("mailboxes.declare"), MAILBOX_IMAGE: NOT_COUNTED},
    image=lambda space: space.mailboxes.image(),
    is_empty=lambda space: not len(space.mailboxes),
)
