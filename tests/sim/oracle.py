"""The invariants, checked against what clients were told (acknowledged answers) and what recovery kept.

Every check is phrased in the server's wall milliseconds, which the simulation shares with the
server (`cluster.now_ms`), so "at the same instant" means exactly that. A lease is an interval:
it starts when the server granted it (the end it answered minus its length) and ends at the
latest end the holder was told (renewals move it), or earlier, when the holder let go (a release
or a settlement: from the moment it was sent, since it may have been applied without the answer
arriving). Restart grace periods only lengthen leases on the server, never in these intervals,
so they cannot cause a false alarm.

Invariants:

1. **One holder.** Two acknowledged leases of one claim key (or one message) never overlap: a
   lease granted later starts at or after the end of every earlier one.
2. **Generations grow.** Acknowledged grants of one claim key have distinct generations that
   grow with the grant time, across recoveries too; delivery attempts of one message likewise.
3. **One outcome.** A task's terminal state and outcome, once seen (in a view or in the answer to
   a complete, nack or cancel), never change (a tombstone only drops the outcome); two different
   settlements of one task are never both acknowledged.
6. **No dirty read.** Nothing any answer showed is taken back: an outcome seen only in a view (a
   read, a join, a wait) must be there after every recovery exactly as an acknowledged one must,
   since no answer shows a change before it is durable (docs/durability.md). A recovery that
   forgets what a read showed breaks `dirty-read`.
4. **Nothing acknowledged is lost.** After each recovery, every acknowledged scope, mailbox, task
   (with its key), sent message, terminal outcome, claim generation and delivery attempt is in
   the recovered state (a dead letter an operator may have requeued or deleted excepted); a task
   key submitted again returns the task first acknowledged for it, and another input under that
   key is refused; a dead letter whose requeue or delete was acknowledged is not; a claim
   release's event still kept carries the observation its acknowledged release gave, and a
   succeeded task's input kept beside its result is the input it was submitted with.
5. **No stale token.** A renew, release, complete or nack whose token is stale for certain when it
   is sent (a later grant of that key or message was acknowledged before, or its own release was,
   or an operator's forced release of it was) is never accepted; no renewal made after a forced
   release of its claim was acknowledged is ever answered.
6. **Nothing recorded in an ended run.** A completion sent after the end of its task's run was
   acknowledged (a cancel or a complete of the run) is never acknowledged as SUCCEEDED: the run's
   end ended its tasks under way with it.
7. **Retention** (seeds whose server removes ended runs after `ended_run_retention_s`). A run is
   missing (from a recovered state, or a read of it answers 404) only once its retention has
   passed since the earliest it can have ended (an end sent, or its deadline), so nothing of a live
   run, nor of one ended too recently, is removed; what a removed run held (its acknowledged tasks
   and messages) may be missing with it, and nothing the state keeps names a removed run or its
   child runs (its image: scopes, claims, tasks, messages, work keys, once slots, barriers, timers,
   groups); and at the end of the seed every run whose end was acknowledged a retention and a
   sweep ago is gone.
8. **A returned delivery is not an attempt** (`returned-uncounted`). A delivery its holder gave
   back unhandled (`/return`) is never dead-lettered for its attempts: the acknowledged return
   shows its message queued again (or ended with its run or deadline), never DEAD nor its task
   FAILED.

A violation is recorded with its invariant, a message, and the trace excerpt around it; the run
goes on (one failure per invariant is enough to report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from runstate.actors.events import payload_of

__all__ = ["Oracle", "Lease", "Violation", "INVARIANTS"]

INVARIANTS = (
    "one-holder", "generations", "one-outcome", "durability", "stale-token", "dirty-read", "isolation", "ended-run",
    "server", "recovery", "replay", "hang", "sim",
)
INVARIANTS += ("retention",)
INVARIANTS += ("returned-uncounted",)
INVARIANTS += ("dead-letters",)  # an operator's scans of them (tests/sim/operator_agents.py)
INVARIANTS += ("pool-units", "quota-window", "fifo", "pool-fifo", "budget-limit", "late-charge")  # -- capacity -- (tests/sim/capacity.py)
INVARIANTS += ("quota-refund",)
INVARIANTS += ("return-gives-back",)  # an admitted delivery returned unhandled (tests/sim/capacity.py)


@dataclass
class Lease:
    """An acknowledged grant: of a claim (`generation`) or of a delivery (`generation` = attempt)."""

    subject: tuple  # ("claim", scope, key) or ("message", message id)
    owner: str
    token: str
    generation: int
    start_ms: int
    end_ms: int  # the latest end its holder was told, or when it let go
    released_ms: int | None = None  # set when a release was acknowledged
    # An operator's forced release (`tests/sim/operator_agents.py`): when it was sent (the lease
    # may end there, whether or not the answer comes back), and when it was acknowledged.
    forced_ms: int | None = None
    forced_acked_ms: int | None = None
    # Its length as granted: each renewal its holder makes asks for that length again.
    length_ms: int = 0


@dataclass
class Violation:
    invariant: str
    message: str
    at_ms: int
    trace: list[str] = field(default_factory=list)


class Oracle:
    def __init__(self, now_ms: Callable[[], int], trace: list[str]) -> None:
        self.now_ms = now_ms
        self.trace = trace
        self.violations: list[Violation] = []
        self.leases: dict[tuple, list[Lease]] = {}
        self.by_token: dict[str, Lease] = {}
        # Acknowledged facts that recovery must keep.
        self.scopes: set[str] = set()
        self.scopes_elsewhere: set[str] = set()  # runs of other spaces than SPACE (the neighbor's)
        self.mailboxes: set[str] = set()
        self.messages: set[str] = set()
        self.tasks: dict[str, tuple[str, str]] = {}  # task id -> (scope, key)
        self.task_keys: dict[tuple[str, str], tuple[str, Any]] = {}  # (scope, key) -> (task id, input)
        # task id -> [terminal state, outcome, acknowledged]: seen in a view only, or acknowledged
        # by a write. Either way recovery must keep it (invariants 4 and 6).
        self.outcomes: dict[str, list] = {}
        self.settled: dict[str, str] = {}  # task id -> the delivery token whose settlement was acknowledged
        self.run_ends: dict[str, int] = {}  # run -> when its end (cancel or complete) was acknowledged
        # Retention (invariant 7): ended runs are removed this long after their end (0: never; the
        # runner sets it from the server's limits); the earliest each run can have ended (an end
        # sent, or its deadline); the messages sent, by run; the runs seen removed.
        self.retention_ms = 0
        self.run_ending: dict[str, int] = {}
        self.message_scopes: dict[str, str] = {}
        self.removed: set[str] = set()
        # Dead letters an operator sent a requeue or delete of (they may be gone, answered or not),
        # and those whose requeue or delete was acknowledged (they must stay gone).
        self.maybe_gone: set[str] = set()
        self.gone: set[str] = set()
        # (claim subject, generation) -> the observation its acknowledged release gave.
        self.observations: dict[tuple, Any] = {}
        self.checks = 0

    # -- reporting ------------------------------------------------------------------------------

    def fail(self, invariant: str, message: str) -> None:
        if any(v.invariant == invariant for v in self.violations):
            return  # the first one of each kind is what matters
        try:
            at_ms = self.now_ms()
        except RuntimeError:  # after the run (the simulation itself broke): no clock any more
            at_ms = -1
        self.violations.append(Violation(invariant, message, at_ms, self.trace[-40:]))
        self.trace.append(f"VIOLATION {invariant}: {message}")

    # -- leases (claims and deliveries) ----------------------------------------------------------

    def granted(self, subject: tuple, owner: str, token: str, generation: int, start_ms: int, end_ms: int) -> Lease:
        """An acknowledged grant; checks invariants 1 and 2 against every other grant of `subject`."""
        self.checks += 1
        lease = Lease(subject, owner, token, generation, start_ms, end_ms, length_ms=end_ms - start_ms)
        others = self.leases.setdefault(subject, [])
        for other in others:
            if other.token == token:
                return other  # the same grant answered twice (an idempotent replay)
        for other in others:
            self._check_pair(other, lease)
            if other.generation == generation:
                self.fail("generations", f"{_name(subject)}: generation/attempt {generation} handed out twice "
                          f"({other.owner} at {other.start_ms}, {owner} at {start_ms})")
            elif (other.generation < generation) != (other.start_ms <= start_ms):
                self.fail("generations", f"{_name(subject)}: generation/attempt {generation} granted at {start_ms} "
                          f"but {other.generation} at {other.start_ms}")
        others.append(lease)
        self.by_token[token] = lease
        return lease

    def extended(self, token: str, end_ms: int) -> None:
        """A renewal was acknowledged with a new end."""
        self.checks += 1
        lease = self.by_token.get(token)
        if lease is None:
            return
        if lease.forced_ms is not None:
            # Renewals applied before the forced release count for nothing (its end is when it
            # was sent); one applied after its acknowledgement must never have been answered.
            renewed_ms = end_ms - lease.length_ms
            if lease.forced_acked_ms is not None and renewed_ms > lease.forced_acked_ms:
                self.fail("stale-token", f"{_name(lease.subject)}: a renewal at {renewed_ms} was accepted after a forced "
                          f"release was acknowledged at {lease.forced_acked_ms}")
            return
        if lease.released_ms is not None:
            self.fail("stale-token", f"{_name(lease.subject)}: a renewal was accepted after its release was acknowledged")
        lease.end_ms = max(lease.end_ms, end_ms) if lease.released_ms is None else lease.end_ms
        for other in self.leases[lease.subject]:
            if other is not lease:
                self._check_pair(other, lease) if other.start_ms <= lease.start_ms else self._check_pair(lease, other)

    def letting_go(self, token: str) -> None:
        """The holder sends a release or a settlement: from now on it no longer counts on the lease."""
        lease = self.by_token.get(token)
        if lease is not None:
            lease.end_ms = min(lease.end_ms, self.now_ms())

    def released(self, token: str, at_ms: int, observation: Any = None) -> None:
        lease = self.by_token.get(token)
        if lease is not None:
            lease.released_ms = at_ms
            lease.end_ms = min(lease.end_ms, at_ms)
            if observation is not None:
                self.observations[(lease.subject, lease.generation)] = observation

    def forcing(self, subject: tuple, generation: int, sent_ms: int) -> Lease | None:
        """An operator sends a forced release of the claim `subject` held at `generation`: from
        now on its holder may no longer count on it (the answer may be lost after it was applied)."""
        lease = next((lease for lease in self.leases.get(subject, ()) if lease.generation == generation), None)
        if lease is not None:
            lease.forced_ms = sent_ms if lease.forced_ms is None else min(lease.forced_ms, sent_ms)
            lease.end_ms = min(lease.end_ms, sent_ms)
        return lease

    def forced(self, subject: tuple, generation: int, acked_ms: int) -> None:
        """A forced release of `subject` at `generation` was acknowledged."""
        self.checks += 1
        for lease in self.leases.get(subject, ()):
            if lease.generation == generation and lease.forced_acked_ms is None:
                lease.forced_acked_ms = acked_ms

    def stale_for_certain(self, token: str) -> str | None:
        """Why `token` is stale for certain now, or None when it might still be current."""
        lease = self.by_token.get(token)
        if lease is None:
            return None
        if lease.released_ms is not None:
            return "its release was acknowledged"
        if lease.forced_acked_ms is not None:
            return "an operator's forced release of it was acknowledged"
        for other in self.leases[lease.subject]:
            if other.generation > lease.generation:
                return f"{other.owner} was granted generation/attempt {other.generation}"
        return None

    def accepted_stale(self, token: str, why: str, what: str) -> None:
        lease = self.by_token[token]
        self.fail("stale-token", f"{_name(lease.subject)}: {what} with the token of {lease.owner}'s "
                  f"generation/attempt {lease.generation} was accepted, though {why}")

    def _check_pair(self, earlier: Lease, later: Lease) -> None:
        if earlier.start_ms > later.start_ms:
            earlier, later = later, earlier
        if later.start_ms < earlier.end_ms:
            self.fail("one-holder", f"{_name(later.subject)}: {later.owner} was granted generation/attempt "
                      f"{later.generation} at {later.start_ms} while {earlier.owner}'s generation/attempt "
                      f"{earlier.generation} (from {earlier.start_ms}) ran until {earlier.end_ms}")

    # -- tasks -------------------------------------------------------------------------------------

    def submitted(self, scope: str, key: str, task_input: Any, task_id: str) -> None:
        self.checks += 1
        first = self.task_keys.get((scope, key))
        if first is None:
            self.task_keys[(scope, key)] = (task_id, task_input)
        else:
            first_id, first_input = first
            if first_id != task_id:
                self.fail("durability", f"task key {key!r} in {scope} answered {task_id}, first acknowledged as {first_id}")
            if first_input != task_input:
                self.fail("one-outcome", f"task key {key!r} in {scope} accepted input {task_input!r} after {first_input!r}")
        self.tasks[task_id] = (scope, key)

    def conflict_expected(self, scope: str, key: str, task_input: Any) -> bool:
        first = self.task_keys.get((scope, key))
        return first is not None and first[1] != task_input

    def task_seen(self, task_id: str, state: str, outcome: Any, tombstoned: bool = False, *, acked: bool = False) -> None:
        """A task view (`acked=False`) or an acknowledged change (`acked=True`) showed `state`."""
        self.checks += 1
        known = self.outcomes.get(task_id)
        if state not in ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"):
            if known is not None:
                self.fail("one-outcome", f"task {task_id} was {known[0]} and is now {state}")
            return
        if known is None:
            self.outcomes[task_id] = [state, None if tombstoned else outcome, acked]
            return
        if known[0] != state:
            self.fail("one-outcome", f"task {task_id} ended {known[0]} and is now {state}")
        elif not tombstoned and known[1] is not None and outcome != known[1]:
            self.fail("one-outcome", f"task {task_id} recorded {known[1]!r} and now shows {outcome!r}")
        else:
            if known[1] is None and outcome is not None and not tombstoned:
                known[1] = outcome
            known[2] = known[2] or acked

    def task_settled(self, task_id: str, token: str, state: str, outcome: Any) -> None:
        """A complete or nack of a task's delivery was acknowledged and ended the task in `state`."""
        other = self.settled.get(task_id)
        if other is not None and other != token:
            self.fail("one-outcome", f"task {task_id}: two deliveries' settlements were both acknowledged")
        self.settled[task_id] = token
        self.task_seen(task_id, state, outcome, acked=True)

    def run_ended(self, scope_id: str, at_ms: int) -> None:
        """The end of a run was acknowledged at `at_ms`."""
        self.run_ends.setdefault(scope_id, at_ms)

    def run_may_end(self, scope_id: str, at_ms: int) -> None:
        """The run may end from `at_ms` on: an end of it was sent, or its deadline is then."""
        self.run_ending[scope_id] = min(at_ms, self.run_ending.get(scope_id, at_ms))

    def removable(self, scope_id: str, now_ms: int) -> bool:
        """Whether the run may have been removed by `now_ms`: its retention has passed since the
        earliest it can have ended."""
        ended_ms = self.run_ending.get(scope_id)
        return bool(self.retention_ms) and ended_ms is not None and ended_ms + self.retention_ms <= now_ms

    def run_gone(self, scope_id: str, now_ms: int, how: str) -> None:
        """Invariant 7: the run is missing (`how`: a recovery, a read answering 404) at `now_ms`."""
        self.checks += 1
        if self.removable(scope_id, now_ms):
            self.removed.add(scope_id)
            return
        ended_ms = self.run_ending.get(scope_id)
        if ended_ms is None:
            self.fail("retention" if how == "read" else "durability", f"run {scope_id} never ended and is missing ({how})")
        else:
            self.fail("retention", f"run {scope_id}, which ended at {ended_ms} at the earliest, is missing at {now_ms} ({how}), "
                      f"before its retention of {self.retention_ms} ms passed")

    def check_removed(self, space: Any) -> None:
        """Invariant 7: nothing the space keeps names a removed run or one of its child runs."""
        if not self.removed:
            return
        self.checks += 1
        gone = set(self.removed)
        for record in space.image():
            kind = record["type"]
            if kind == "scope.image" and record["parent_id"] in gone:
                gone.add(record["id"])  # (a parent comes before its children)
            named = [record.get(field) for field in ("scope_id", "parent_scope_id", "parent_id", "id") if field in record]
            if kind in _NAMING_A_SCOPE and gone.intersection(value for value in named if isinstance(value, str)):
                self.fail("retention", f"the state keeps a {kind} record of removed run(s) {sorted(gone & set(named))}: {record}")
                return

    def completed(self, task_id: str, sent_ms: int) -> None:
        """Invariant 6: a completion sent at `sent_ms` was acknowledged as SUCCEEDED."""
        self.checks += 1
        scope_id = self.tasks.get(task_id, ("",))[0]
        ended_ms = self.run_ends.get(scope_id)
        if ended_ms is not None and ended_ms < sent_ms:
            self.fail("ended-run", f"task {task_id} recorded a result sent at {sent_ms}, after its run ended at {ended_ms}")

    # -- recovery ----------------------------------------------------------------------------------

    def _check_observations(self, space: Any) -> None:
        """A release's observation was acknowledged: the release's event still in the log after
        recovery says it (the event log is bounded, so one trimmed away is not looked for)."""
        for _, change, _ in space.events.scan():
            if change[0] != "claim.released":
                continue
            payload = payload_of(change[0], change[4])
            subject = ("claim", change[1], change[3])
            given = self.observations.get((subject, payload["generation"]))
            if given is not None and payload.get("observation") != given:
                self.fail("durability", f"{_name(subject)}: the release of generation {payload['generation']} was acknowledged "
                          f"with observation {given!r}; its event after recovery says {payload.get('observation')!r}")

    def _check_kept_input(self, space: Any, task_id: str, task: Any) -> None:
        """A succeeded task's input kept beside its result is the input it was submitted with."""
        message = space.messages.find(task.message_id)
        if message is None or message.payload is None or task.state != "SUCCEEDED":
            return
        first = self.task_keys.get(self.tasks[task_id])  # (its id, and what `submitted` was given: mailbox, input)
        submitted = None if first is None or first[0] != task_id else first[1]
        if submitted is not None and message.payload != submitted[1]:
            self.fail("durability", f"task {task_id} kept the input {message.payload!r} after recovery; "
                      f"it was submitted with {submitted[1]!r}")

    def check_recovered(self, state: Any, space_id: str) -> None:
        """Invariant 4 against a freshly recovered state."""
        self.checks += 1
        space = state.spaces.get(space_id)
        if space is None:
            if self.scopes or self.mailboxes:
                self.fail("durability", "the recovered state has no space at all")
            return
        now_ms = self.now_ms()
        for scope_id in self.scopes:
            if scope_id not in space.scopes:
                self.run_gone(scope_id, now_ms, "recovery")
        for mailbox_id in self.mailboxes:
            if space.mailboxes.find(mailbox_id) is None:
                self.fail("durability", f"acknowledged mailbox {mailbox_id} is missing after recovery")
        for message_id in self.messages:
            if space.messages.find(message_id) is None and message_id not in self.maybe_gone and self.message_scopes.get(message_id) not in self.removed:
                self.fail("durability", f"acknowledged message {message_id} is missing after recovery")
        for message_id in self.gone:
            if space.messages.find(message_id) is not None:
                self.fail("durability", f"dead letter {message_id} was acknowledged requeued or deleted, and is back after recovery")
        for task_id, (scope_id, key) in self.tasks.items():
            task = space.tasks.find(task_id)
            if task is None and scope_id in self.removed:
                continue  # removed with its run
            if task is None or task.key != key or task.scope_id != scope_id:
                self.fail("durability", f"acknowledged task {task_id} ({key!r}) is missing after recovery")
                continue
            self._check_kept_input(space, task_id, task)
            known = self.outcomes.get(task_id)
            if known is None:
                continue
            state_now, outcome_now = task.state, (None if task.tombstoned else task.outcome)
            same = state_now == known[0] and (known[1] is None or outcome_now is None or outcome_now == known[1])
            if same:
                continue
            if known[2]:
                self.fail("durability", f"task {task_id} was acknowledged {known[0]} ({known[1]!r}), "
                          f"recovered as {state_now} ({outcome_now!r})")
            else:  # only read, never acknowledged: a read showed a change that was not durable
                self.fail("dirty-read", f"task {task_id} was shown {known[0]} ({known[1]!r}) by a read, "
                          f"recovered as {state_now} ({outcome_now!r})")
        self._check_observations(space)
        for subject, leases in self.leases.items():
            top = max(lease.generation for lease in leases)
            if subject[0] == "claim":
                claim = space.claims.get(subject[1], subject[2])
                if claim is not None and claim.generation < top:
                    self.fail("generations", f"{_name(subject)}: generation {top} was acknowledged, "
                              f"the recovered counter is {claim.generation}")
            else:
                message = space.messages.find(subject[1])
                if message is not None and message.attempts < top:
                    self.fail("durability", f"{_name(subject)}: attempt {top} was acknowledged, "
                              f"recovered with {message.attempts}")
        self.check_removed(space)


# The image records that name a scope of a run (`scope_id`, or a scope's own `id` and `parent_id`,
# a group's `parent_scope_id`); capacity's waiters, reservations and work limits keep a run's id as
# a label and leave by their own rules, and the event log is bounded by its own.
_NAMING_A_SCOPE = frozenset({
    "scope.image", "claim.image", "task.image", "message.image", "workkey.image", "once.image", "barrier.image",
    "timer.image", "group.image", "run.named",
})


def _name(subject: tuple) -> str:
    if subject[0] == "claim":
        return f"claim {subject[2]!r} in {subject[1]}"
    return f"message {subject[1]}"
