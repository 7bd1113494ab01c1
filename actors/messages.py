"""Messages and their deliveries: one FIFO queue per (mailbox, scope), leases, dead letters.

A message is put on the queue of its mailbox and scope (a plain `send`, or the one message of a
task) and then moves through these states:

    QUEUED --lease--> LEASED --complete--> COMPLETED
       ^                |  \\--reject, or attempts used up--> DEAD (a dead letter)
       |   (backoff)    |
    DELAYED <--retry----+--lease ran out, or returned: QUEUED at once
       any live state --deadline, task ended, scope ended--> DROPPED

`recv` leases the oldest deliverable message of exactly one queue: QUEUED, or DELAYED whose
backoff has run out, and not past its deadline. Each lease has a fresh opaque token and the
delivery's `attempt` (1 for the first delivery). Complete, nack and renew must carry the current
token while the lease runs; anything else is STALE_CLAIM and changes nothing. `attempts` counts the
deliveries (it is the delivery's generation, which only grows); `returned` counts those given back
unhandled by their holder (`/return`), which do not count against the mailbox's `maxAttempts`.

The queue order is the order of enqueue (`seq`), which a retried message keeps: it comes back
ahead of younger messages once its backoff ends. Two lazy heaps index a queue: `ready` by `seq`
for messages deliverable now, `delayed` by the end of their backoff. An entry carries the message's
`gen` (bumped at every requeue) and counts only while it matches, so nothing is ever removed from
the middle of a heap. Reading the head may drop stale entries and move ended backoffs from
`delayed` to `ready`: upkeep of the index only, never a change any record has to carry.

What is forgotten, and when, is decided from the records' own times, so a replay keeps exactly
what the live server kept: work keys `work_key_ttl_s` after their send, finished messages
(dead letters included) `retention_s` after they finished.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Final, Iterator

from .caps import value_bytes
from .errors import CONFLICT, NOT_FOUND, STALE_CLAIM, KernelError, quote
from .limits import Limits, backoff_ms
from .leases import hold, release, restore, renewed
from .primitive import record_type
from .mailboxes import Mailbox, MailboxTable
from .message_views import DeadLetterView, DelayedMessageView, LeasedMessageView, MessageState, MessageView
from .shapes import EpochMs, Record

__all__ = [
    "Message", "MessageTable", "Queue", "MessageState", "MessageView", "LeasedMessageView", "DelayedMessageView",
    "DeadLetterView", "QUEUED", "DELAYED", "LEASED", "COMPLETED", "DEAD", "DROPPED", "LIVE",
    "backoff_ms", "RETURNED", "DELIVERY_COMPLETED", "DELIVERY_DEAD", "DELIVERY_LEASED", "DELIVERY_RENEWED", "DELIVERY_REQUEUED",
    "MESSAGE_DROPPED", "MESSAGE_IMAGE", "MESSAGE_SENT", "MESSAGE_VISIBLE", "MESSAGES_IMAGE", "WORKKEY_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
DELIVERY_COMPLETED = record_type("delivery.completed")
DELIVERY_DEAD = record_type("delivery.dead")
DELIVERY_LEASED = record_type("delivery.leased")
DELIVERY_RENEWED = record_type("delivery.renewed")
DELIVERY_REQUEUED = record_type("delivery.requeued")
MESSAGE_DROPPED = record_type("message.dropped")
MESSAGE_IMAGE = record_type("message.image")
MESSAGE_SENT = record_type("message.sent")
MESSAGE_VISIBLE = record_type("message.visible")
MESSAGES_IMAGE = record_type("messages.image")
WORKKEY_IMAGE = record_type("workkey.image")

QUEUED: Final = "QUEUED"
DELAYED: Final = "DELAYED"
LEASED: Final = "LEASED"
COMPLETED: Final = "COMPLETED"
DEAD: Final = "DEAD"
DROPPED: Final = "DROPPED"
# The cause of a requeue its holder asked for without handling the delivery (`/return`): not an attempt.
RETURNED: Final = "returned"
LIVE: frozenset[MessageState] = frozenset({QUEUED, DELAYED, LEASED})

# Everything a message holds, as an image record carries it (the slot names are the keys).
_IMAGED = (
    "id", "mailbox_id", "scope_id", "seq", "payload", "payload_hash", "work_key", "deadline_ms",
    "task_id", "state", "attempts", "gen", "visible_ms", "token", "holder", "session", "lease_ms",
    "expires_ms", "created_ms", "finished_ms", "reason",
)

# Of those, what a message holds besides its lease (which `leases.py` sets, graced included).
_IMAGED_STATE = tuple(slot for slot in _IMAGED if slot not in ("token", "holder", "session", "lease_ms", "expires_ms"))

# How each state is counted on the mailbox (the listing's counts and the backlog).
_COUNTER = {QUEUED: "queued", DELAYED: "delayed", LEASED: "leased", DEAD: "dead"}
# Stale queue-heap entries tolerated beyond two per live message before a queue is compacted.
QUEUE_HEAP_SLACK = 64


class Message:
    __slots__ = (
        "id",
        "mailbox_id",
        "scope_id",
        "seq",
        "payload",
        "payload_hash",
        "work_key",
        "deadline_ms",
        "task_id",
        "state",
        "attempts",  # deliveries so far; the current (or last) delivery's `attempt`
        "returned",  # of those, the ones given back unhandled: not counted against maxAttempts
        "gen",
        "visible_ms",
        "token",
        "holder",
        "session",
        "lease_ms",
        "expires_ms",
        "created_ms",
        "finished_ms",
        "reason",
        "graced",  # a restart gave the current lease its grace; its holder has not renewed since
    )

    def __init__(
        self,
        message_id: str,
        mailbox_id: str,
        scope_id: str,
        seq: int,
        payload: Any,
        payload_hash: str | None,
        work_key: str | None,
        deadline_ms: int | None,
        task_id: str | None,
        created_ms: int,
    ) -> None:
        self.id = message_id
        self.mailbox_id = mailbox_id
        self.scope_id = scope_id
        self.seq = seq
        self.payload = payload
        self.payload_hash = payload_hash
        self.work_key = work_key
        self.deadline_ms = deadline_ms
        self.task_id = task_id
        self.state: MessageState = QUEUED
        self.attempts = 0
        self.returned = 0
        self.gen = 0
        self.visible_ms = created_ms
        self.token: str | None = None
        self.holder: str | None = None
        self.session: str | None = None
        self.lease_ms = 0
        self.expires_ms = 0
        self.created_ms = created_ms
        self.finished_ms: int | None = None
        self.reason: str | None = None
        self.graced = False

    def past_deadline(self, now_ms: int) -> bool:
        return self.deadline_ms is not None and now_ms >= self.deadline_ms

    def counted_attempts(self) -> int:
        """The deliveries that count against the mailbox's `maxAttempts`: all but those returned."""
        assert 0 <= self.returned <= self.attempts, "only deliveries are returned"
        return self.attempts - self.returned


class Queue:
    """The messages of one mailbox in one scope that are not finished, and their two heaps."""

    __slots__ = ("mailbox_id", "scope_id", "live", "ready", "delayed")
    # Indexes rebuilt from the messages: a replay lays them out differently (no stale entries).
    _DERIVED = ("ready", "delayed")

    def __init__(self, mailbox_id: str, scope_id: str) -> None:
        self.mailbox_id = mailbox_id
        self.scope_id = scope_id
        self.live: dict[str, None] = {}  # insertion-ordered set of message ids
        self.ready: list[tuple[int, int, str]] = []  # (seq, gen, id)
        self.delayed: list[tuple[int, int, int, str]] = []  # (visible_ms, seq, gen, id)


class _WorkKey:
    __slots__ = ("message_id", "payload_hash", "at_ms")

    def __init__(self, message_id: str, payload_hash: str, at_ms: int) -> None:
        self.message_id = message_id
        self.payload_hash = payload_hash
        self.at_ms = at_ms


class MessageTable:
    """The messages of one space: by id, in queues by (mailbox, scope), work keys, dead letters."""

    __slots__ = (
        "_limits",
        "_mailboxes",
        "_messages",
        "_queues",
        "_queues_by_scope",
        "_work_keys",
        "_work_key_order",
        "_finished",
        "_dead",
        "seq",
        "payload_bytes",
    )

    def __init__(self, limits: Limits, mailboxes: MailboxTable) -> None:
        self._limits = limits
        self._mailboxes = mailboxes
        self._messages: dict[str, Message] = {}
        self._queues: dict[tuple[str, str], Queue] = {}
        self._queues_by_scope: dict[str, dict[str, None]] = {}  # scope -> mailbox ids
        self._work_keys: dict[tuple[str, str, str], _WorkKey] = {}
        self._work_key_order: deque[tuple[int, tuple[str, str, str]]] = deque()
        self._finished: deque[tuple[int, str]] = deque()  # (finished_ms, id), oldest first
        self._dead: dict[str, dict[str, None]] = {}  # mailbox -> dead letter ids, oldest first
        self.seq = 0  # enqueue counter: the FIFO order, rebuilt identically by replay
        # Bytes of the payloads kept (live messages, task inputs, dead letters): `caps.py`.
        self.payload_bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    # -- reading --------------------------------------------------------------------------------

    def get(self, message_id: str) -> Message:
        message = self._messages.get(message_id)
        if message is None:
            raise KernelError(NOT_FOUND, f"message {quote(message_id)} not found")
        return message

    def find(self, message_id: str) -> Message | None:
        return self._messages.get(message_id)

    def all(self) -> Iterator[Message]:
        return iter(self._messages.values())

    def live(self) -> Iterator[Message]:
        """Every message not finished, queue by queue."""
        for queue in self._queues.values():
            for message_id in queue.live:
                yield self._messages[message_id]

    def waiting_in_scopes(self, scope_ids: list[str]) -> list[Message]:
        """Messages of these scopes not delivered and not being delivered (QUEUED or DELAYED)."""
        found = []
        for scope_id in scope_ids:
            for mailbox_id in self._queues_by_scope.get(scope_id, ()):
                queue = self._queues[(mailbox_id, scope_id)]
                for message_id in queue.live:
                    message = self._messages[message_id]
                    if message.state != LEASED:
                        found.append(message)
        return found

    def leased_in_scopes(self, scope_ids: list[str]) -> list[Message]:
        """Messages of these scopes being delivered now (LEASED)."""
        found: list[Message] = []
        for scope_id in scope_ids:
            for mailbox_id in self._queues_by_scope.get(scope_id, ()):
                queue = self._queues[(mailbox_id, scope_id)]
                found.extend(message for message_id in queue.live if (message := self._messages[message_id]).state == LEASED)
        return found

    def waiting_in_mailbox(self, mailbox_id: str, scope_id: str | None = None) -> list[Message]:
        """The mailbox's messages not delivered and not being delivered (QUEUED or DELAYED), in
        every run or in `scope_id`'s, oldest first (by enqueue order)."""
        found = []
        for (queue_mailbox, queue_scope), queue in self._queues.items():
            if queue_mailbox != mailbox_id or (scope_id is not None and queue_scope != scope_id):
                continue
            for message_id in queue.live:
                message = self._messages[message_id]
                if message.state != LEASED:
                    found.append(message)
        found.sort(key=lambda message: message.seq)
        return found

    def oldest_waiting_ms(self) -> dict[str, int]:
        """By mailbox, when its oldest message waiting for a worker (QUEUED or DELAYED) was enqueued.

        A queue lists its messages in enqueue order, so each queue's first one not under a lease
        is its oldest waiting (for the metrics, read when scraped)."""
        oldest: dict[str, int] = {}
        messages = self._messages
        for (mailbox_id, _), queue in self._queues.items():
            for message_id in queue.live:
                message = messages[message_id]
                if message.state != LEASED:
                    if message.created_ms < oldest.get(mailbox_id, message.created_ms + 1):
                        oldest[mailbox_id] = message.created_ms
                    break
        return oldest

    def dead_letters(self, mailbox_id: str) -> list[Message]:
        """The mailbox's dead letters still kept, oldest first."""
        return [self._messages[m] for m in self._dead.get(mailbox_id, ())]

    def work_key(self, mailbox_id: str, scope_id: str, work_key: str, now_ms: int) -> _WorkKey | None:
        """The send a work key still remembers (for `work_key_ttl_s` after it), or None."""
        entry = self._work_keys.get((mailbox_id, scope_id, work_key))
        if entry is None or now_ms - entry.at_ms >= self._limits.work_key_ttl_s * 1000:
            return None
        return entry

    def next_deliverable(self, mailbox_id: str, scope_id: str, now_ms: int) -> Message | None:
        """The oldest message of this queue that can be delivered at `now_ms`, or None."""
        queue = self._queues.get((mailbox_id, scope_id))
        if queue is None:
            return None
        messages = self._messages
        delayed, ready = queue.delayed, queue.ready
        while delayed and delayed[0][0] <= now_ms:
            _, seq, gen, message_id = heapq.heappop(delayed)
            message = messages.get(message_id)
            if message is not None and message.gen == gen and message.state == DELAYED:
                heapq.heappush(ready, (seq, gen, message_id))
        while ready:
            _, gen, message_id = ready[0]
            message = messages.get(message_id)
            if message is None or message.gen != gen or message.state not in (QUEUED, DELAYED):
                heapq.heappop(ready)
                continue
            if message.past_deadline(now_ms):
                # Never deliverable again; its deadline timer records how it ended.
                heapq.heappop(ready)
                continue
            return message
        return None

    def deliverable(self, mailbox_id: str, scope_id: str, now_ms: int) -> Iterator[Message]:
        """Every message of this queue that can be delivered at `now_ms`, oldest first (admission
        looks past the head for the oldest whose requirements fit)."""
        if self.next_deliverable(mailbox_id, scope_id, now_ms) is None:  # promotes what became ready
            return
        messages = self._messages
        for _, gen, message_id in sorted(self._queues[(mailbox_id, scope_id)].ready):
            message = messages.get(message_id)
            if message is not None and message.gen == gen and message.state in (QUEUED, DELAYED) and not message.past_deadline(now_ms):
                yield message

    def current(self, message_id: str, token: str, now_ms: int) -> Message:
        """The message `token` holds a running lease on, else STALE_CLAIM (NOT_FOUND if unknown)."""
        message = self.get(message_id)
        if message.token != token or message.state != LEASED:
            if message.state == LEASED:
                # (Whether the token is an earlier delivery's or was never this message's.)
                why = f"it is leased under another token (attempt {message.attempts})"
            elif message.state in (QUEUED, DELAYED):
                why = "its lease ended and it is back on the queue"
            else:
                why = f"it is {message.state.lower()}"
                if message.reason:
                    why += f" ({message.reason})"
            raise KernelError(
                STALE_CLAIM, f"token is not the current one for message {message_id}: {why}"
            )
        if now_ms >= message.expires_ms:
            raise KernelError(STALE_CLAIM, f"the lease on message {message_id} has ended")
        return message

    @staticmethod
    def view(message: Message) -> MessageView:
        """A message as a reader is shown it: a leased one with its lease's end and holder, a
        delayed one with when it is visible again."""
        fields = (
            message.id, message.mailbox_id, message.scope_id, message.task_id, message.state, message.attempts,
            message.work_key, message.deadline_ms, message.created_ms, message.finished_ms, message.reason,
        )
        if message.state == LEASED:
            assert message.holder is not None, "a leased message has a holder"
            return LeasedMessageView(*fields, message.expires_ms, message.holder)
        if message.state == DELAYED:
            return DelayedMessageView(*fields, message.visible_ms)
        return MessageView(*fields)

    @staticmethod
    def dead_letter_view(message: Message) -> DeadLetterView:
        """A dead letter as its mailbox lists it: the message's view and its payload."""
        assert message.state == DEAD, "a dead letter is a DEAD message"
        return DeadLetterView(
            message.id, message.mailbox_id, message.scope_id, message.task_id, message.state, message.attempts,
            message.work_key, message.deadline_ms, message.created_ms, message.finished_ms, message.reason, message.payload,
        )

    # -- deciding -------------------------------------------------------------------------------
    # Each returns one record; the checks that need other tables are the queue part's (`work.py`),
    # and a delivery's records are made by the deliveries (`deliveries.py`).

    def check_new_id(self, message_id: str) -> None:
        if message_id in self._messages:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"message id {message_id} is taken")

    @staticmethod
    def decide_drop(message: Message, reason: str, now_ms: int) -> Record:
        # Paired with `apply_finished`: a message finishes once.
        assert message.state in LIVE, f"message {message.id} is {message.state}: it finished already"
        return {"type": MESSAGE_DROPPED, "message_id": message.id, "reason": reason, "at_ms": now_ms}

    @staticmethod
    def decide_visible(message: Message, now_ms: int) -> Record | None:
        """The end of a backoff, if `message` is still waiting it out."""
        if message.state != DELAYED or now_ms < message.visible_ms:
            return None
        assert message.token is None, "a message waiting out a backoff is held by nobody"
        return {"type": MESSAGE_VISIBLE, "message_id": message.id, "gen": message.gen, "at_ms": now_ms}

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        """Records that rebuild this table exactly through the `apply_image_*` methods.

        Order matters and is kept: the enqueue counter first; then the finished messages in the
        order they finished (what retention forgets first, and the dead letters' order); then the
        unfinished ones in enqueue order (each queue's order); then the work keys oldest first.
        """
        yield {"type": MESSAGES_IMAGE, "seq": self.seq}
        finished = (self._messages.get(message_id) for _, message_id in self._finished)
        live = (message for message in self._messages.values() if message.state in LIVE)
        for message in (*finished, *live):
            if message is None:
                continue  # already forgotten
            record = {
                "type": MESSAGE_IMAGE,
                **{slot: getattr(message, slot) for slot in _IMAGED},
                "at_ms": message.created_ms,
            }
            if message.graced:
                record["graced"] = True
            if message.returned:
                record["returned"] = message.returned
            yield record
        for at_ms, key in self._work_key_order:
            entry = self._work_keys.get(key)
            if entry is not None and entry.at_ms == at_ms:
                mailbox_id, scope_id, work_key = key
                yield {
                    "type": WORKKEY_IMAGE,
                    "mailbox_id": mailbox_id,
                    "scope_id": scope_id,
                    "work_key": work_key,
                    "message_id": entry.message_id,
                    "payload_hash": entry.payload_hash,
                    "at_ms": at_ms,
                }

    def apply_image_counter(self, record: Record) -> None:
        self.seq = record["seq"]

    def apply_image_message(self, record: Record) -> Message:
        message = Message(
            record["id"],
            record["mailbox_id"],
            record["scope_id"],
            record["seq"],
            record["payload"],
            record["payload_hash"],
            record["work_key"],
            record["deadline_ms"],
            record["task_id"],
            record["created_ms"],
        )
        for slot in _IMAGED_STATE:
            setattr(message, slot, record[slot])
        message.returned = record.get("returned", 0)
        restore(message, record)
        self._messages[message.id] = message
        self._count(message, +1)
        self.payload_bytes += value_bytes(message.payload)
        if message.state in LIVE:
            queue = self._queue(message.mailbox_id, message.scope_id)
            queue.live[message.id] = None
            if message.state == QUEUED:
                heapq.heappush(queue.ready, (message.seq, message.gen, message.id))
            elif message.state == DELAYED:
                heapq.heappush(queue.delayed, (message.visible_ms, message.seq, message.gen, message.id))
        else:
            assert message.finished_ms is not None
            self._finished.append((message.finished_ms, message.id))
            if message.state == DEAD:
                self._dead.setdefault(message.mailbox_id, {})[message.id] = None
        return message

    def apply_image_work_key(self, record: Record) -> None:
        key = (record["mailbox_id"], record["scope_id"], record["work_key"])
        self._work_keys[key] = _WorkKey(record["message_id"], record["payload_hash"], record["at_ms"])
        self._work_key_order.append((record["at_ms"], key))

    # -- applying -------------------------------------------------------------------------------

    def apply_enqueued(
        self,
        message_id: str,
        mailbox_id: str,
        scope_id: str,
        payload: Any,
        payload_hash: str | None,
        work_key: str | None,
        deadline_ms: int | None,
        task_id: str | None,
        at_ms: int,
    ) -> Message:
        """A new message at the back of its queue (a `message.sent` or a task's creation)."""
        self._evict(at_ms)
        self.seq += 1
        message = Message(
            message_id, mailbox_id, scope_id, self.seq, payload, payload_hash, work_key, deadline_ms, task_id, at_ms
        )
        self._messages[message_id] = message
        queue = self._queue(mailbox_id, scope_id)
        queue.live[message_id] = None
        heapq.heappush(queue.ready, (message.seq, message.gen, message_id))
        self._count(message, +1)
        self.payload_bytes += value_bytes(payload)
        if work_key is not None and payload_hash is not None:
            key = (mailbox_id, scope_id, work_key)
            self._work_keys[key] = _WorkKey(message_id, payload_hash, at_ms)
            self._work_key_order.append((at_ms, key))
        return message

    def apply_leased(self, record: Record) -> Message:
        message = self._messages[record["message_id"]]
        assert record["attempt"] == message.attempts + 1, "each delivery of a message is its next attempt"
        self._move(message, LEASED)
        message.attempts = record["attempt"]
        hold(message, record)
        return message

    def apply_renewed(self, record: Record) -> Message:
        message = self._messages[record["message_id"]]
        assert message.state == LEASED and message.token == record["token"], "only the current delivery is renewed"
        renewed(message, record)
        return message

    def apply_requeued(self, record: Record) -> Message:
        message = self._messages[record["message_id"]]
        assert message.state == LEASED and message.token == record["token"], "only the current delivery is requeued"
        self._end_lease(message)
        if record["cause"] == RETURNED:
            message.returned += 1
            assert message.returned <= message.attempts, "only a delivery is given back"
        message.gen += 1
        message.visible_ms = record["visible_ms"]
        queue = self._queues[(message.mailbox_id, message.scope_id)]
        if message.visible_ms <= record["at_ms"]:
            self._move(message, QUEUED)
            heapq.heappush(queue.ready, (message.seq, message.gen, message.id))
        else:
            self._move(message, DELAYED)
            heapq.heappush(queue.delayed, (message.visible_ms, message.seq, message.gen, message.id))
        self._compact(queue)
        return message

    def apply_visible(self, record: Record) -> Message:
        message = self._messages[record["message_id"]]
        if message.state == DELAYED and message.gen == record["gen"]:
            self._move(message, QUEUED)
            queue = self._queues[(message.mailbox_id, message.scope_id)]
            heapq.heappush(queue.ready, (message.seq, message.gen, message.id))
        return message

    def apply_finished(self, message_id: str, state: MessageState, reason: str | None, at_ms: int, keep_payload: bool = False) -> Message:
        """The message's last change: COMPLETED, DEAD or DROPPED. Its lease, if any, ends.

        Its payload is let go, but where someone may still read it: a dead letter's, and a
        succeeded task's input when its completion kept it (`keep_payload`, `deliveries.complete`)
        until its task is tombstoned (`let_payload_go`) or retention forgets the message."""
        message = self._messages[message_id]
        assert message.state in LIVE, f"message {message_id} finished twice"
        assert not keep_payload or (state == COMPLETED and message.task_id is not None), "only a succeeded task keeps its input"
        self._end_lease(message)
        self._move(message, state)
        message.finished_ms = at_ms
        message.reason = reason
        if state != DEAD and not keep_payload:
            self.let_payload_go(message)
        key = (message.mailbox_id, message.scope_id)
        queue = self._queues[key]
        del queue.live[message_id]
        if not queue.live:
            del self._queues[key]
            scopes = self._queues_by_scope[message.scope_id]
            del scopes[message.mailbox_id]
            if not scopes:
                del self._queues_by_scope[message.scope_id]
        if state == DEAD:
            self._dead.setdefault(message.mailbox_id, {})[message_id] = None
        self._finished.append((at_ms, message_id))
        self._evict(at_ms)
        return message

    def apply_dead_requeued(self, record: Record) -> list[Message]:
        """Dead letters put back at the end of their queues as new messages (`dead_letters.py`):
        the same run, payload, work key and deadline, a fresh count of attempts. A work key that
        still names the old message names the new one from now on (its window is not restarted)."""
        at_ms = record["at_ms"]
        made = []
        for old, new_id in zip(self._forget_dead(record["mailbox_id"], record["message_ids"]), record["new_ids"]):
            message = self.apply_enqueued(
                new_id, old.mailbox_id, old.scope_id, old.payload, None, old.work_key, old.deadline_ms, None, at_ms
            )
            message.payload_hash = old.payload_hash
            if old.work_key is not None:
                entry = self._work_keys.get((old.mailbox_id, old.scope_id, old.work_key))
                if entry is not None and entry.message_id == old.id:
                    entry.message_id = new_id
            made.append(message)
        return made

    def apply_dead_deleted(self, record: Record) -> None:
        """Dead letters forgotten at once, as retention would forget them later."""
        self._forget_dead(record["mailbox_id"], record["message_ids"])

    def let_payload_go(self, message: Message) -> None:
        """A finished message's payload is no longer kept (its bytes given back)."""
        assert message.state != DEAD, "a dead letter keeps its payload until it is forgotten"
        self.payload_bytes -= value_bytes(message.payload)
        message.payload = None

    def _forget_dead(self, mailbox_id: str, message_ids: list[str]) -> list[Message]:
        """Drop these dead letters of one mailbox (their payload bytes given back), in order."""
        dead = self._dead[mailbox_id]
        gone = []
        for message_id in message_ids:
            message = self._messages.pop(message_id)
            assert message.state == DEAD and message.mailbox_id == mailbox_id, f"{message_id} is not a dead letter here"
            self.payload_bytes -= value_bytes(message.payload)
            self._count(message, -1)
            del dead[message_id]
            gone.append(message)
        if not dead:
            del self._dead[mailbox_id]
        # Retention's queue keeps no entry for a message that is gone: one pass, once per action.
        ids = {message.id for message in gone}
        self._finished = deque(entry for entry in self._finished if entry[1] not in ids)
        return gone

    def live_scopes(self, scope_ids: frozenset[str]) -> set[str]:
        """Those of `scope_ids` with a message not finished (a removal keeps them, `runs.py`)."""
        return {scope_id for scope_id in scope_ids if scope_id in self._queues_by_scope}

    def drop_scopes(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed (`runs.py`): their finished messages and dead letters, and the work
        keys they sent, leave with them (one pass each)."""
        gone = [message for message in self._messages.values() if message.scope_id in scope_ids]
        for message in gone:
            assert message.state not in LIVE, f"message {message.id} of a removed run is live"
            del self._messages[message.id]
            self.payload_bytes -= value_bytes(message.payload)  # (a dead letter's, or a succeeded task's input)
            if message.state == DEAD:
                self._count(message, -1)
                dead = self._dead[message.mailbox_id]
                del dead[message.id]
                if not dead:
                    del self._dead[message.mailbox_id]
        if gone:
            self._finished = deque(entry for entry in self._finished if entry[1] in self._messages)
        gone_keys = [key for key in self._work_keys if key[1] in scope_ids]
        for key in gone_keys:
            del self._work_keys[key]
        if gone_keys:
            self._work_key_order = deque(entry for entry in self._work_key_order if entry[1][1] not in scope_ids)

    # -- upkeep ---------------------------------------------------------------------------------

    def _queue(self, mailbox_id: str, scope_id: str) -> Queue:
        key = (mailbox_id, scope_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = Queue(mailbox_id, scope_id)
            self._queues_by_scope.setdefault(scope_id, {})[mailbox_id] = None
        return queue

    def _move(self, message: Message, state: MessageState) -> None:
        """Change state and keep the mailbox's counts exact."""
        self._count(message, -1)
        message.state = state
        self._count(message, +1)

    def _count(self, message: Message, step: int) -> None:
        counter = _COUNTER.get(message.state)
        if counter is not None:
            mailbox: Mailbox = self._mailboxes.get(message.mailbox_id)
            setattr(mailbox, counter, getattr(mailbox, counter) + step)

    @staticmethod
    def _end_lease(message: Message) -> None:
        if message.token is not None:  # (a message that was waiting had no lease to end)
            release(message)

    def _compact(self, queue: Queue) -> None:
        """Rebuild a queue's heaps when stale entries outnumber live ones (lazy deletion's bill)."""
        if len(queue.ready) + len(queue.delayed) <= 2 * len(queue.live) + QUEUE_HEAP_SLACK:
            return
        ready, delayed = [], []
        for message_id in queue.live:
            message = self._messages[message_id]
            if message.state == QUEUED:
                ready.append((message.seq, message.gen, message_id))
            elif message.state == DELAYED:
                delayed.append((message.visible_ms, message.seq, message.gen, message_id))
        heapq.heapify(ready)
        heapq.heapify(delayed)
        queue.ready, queue.delayed = ready, delayed

    def _evict(self, now_ms: int) -> None:
        """Forget work keys past their window and finished messages past retention."""
        horizon = now_ms - self._limits.work_key_ttl_s * 1000
        order, keys = self._work_key_order, self._work_keys
        while order and order[0][0] <= horizon:
            at_ms, key = order.popleft()
            entry = keys.get(key)
            if entry is not None and entry.at_ms == at_ms:
                del keys[key]
        horizon = now_ms - self._limits.retention_s * 1000
        finished, messages = self._finished, self._messages
        while finished and finished[0][0] <= horizon:
            _, message_id = finished.popleft()
            message = messages.pop(message_id, None)
            if message is not None:
                self.payload_bytes -= value_bytes(message.payload)  # (a dead letter's, or a succeeded task's input)
            if message is not None and message.state == DEAD:
                self._count(message, -1)
                dead = self._dead[message.mailbox_id]
                del dead[message_id]
                if not dead:
                    del self._dead[message.mailbox_id]
