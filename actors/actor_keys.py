"""The names of actors: which key's actor serializes a command, as a tuple (its kind, the space, then
whatever identifies the key in it).

A leaf module: it imports nothing of the kernel, so every part (a command choosing its actor, a
transition poking another actor, a timer naming the actor it fires on) can name actors without
importing the commands or the space. Not to be confused with API keys (`keys.py`) or claim keys:
an actor key names a serializer, not a credential or a claimed resource.

Pure: no IO.
"""

from __future__ import annotations

__all__ = [
    "ActorKey", "KEYS_ACTOR", "claim_actor", "scope_actor", "queue_actor", "mailboxes_actor", "mailbox_ops_actor",
    "once_actor", "run_actor", "capacity_actor", "barrier_actor", "barrier_name_actor", "timers_actor", "events_actor",
]

# An actor is named by a tuple: its kind, the space, then whatever identifies the key in it,
# e.g. ("claim", space, scope_id, key) or ("scope", space, scope_id).
ActorKey = tuple[str, ...]

# The API keys are not in any space: one actor decides them all.
KEYS_ACTOR: ActorKey = ("keys",)


def claim_actor(space: str, scope_id: str, key: str) -> ActorKey:
    return ("claim", space, scope_id, key)


def scope_actor(space: str, scope_id: str) -> ActorKey:
    """A scope's end, and the creation of its children (so a childLimit counts exactly)."""
    return ("scope", space, scope_id)


def queue_actor(space: str, mailbox_id: str, scope_id: str) -> ActorKey:
    """Everything that touches one queue (a mailbox in a scope) runs here, its long polls included."""
    return ("queue", space, mailbox_id, scope_id)


def mailboxes_actor(space: str) -> ActorKey:
    """Mailbox creation: two creates of one name are decided one after the other."""
    return ("mailboxes", space)


def mailbox_ops_actor(space: str, mailbox_id: str) -> ActorKey:
    """An operator's actions on one mailbox's messages across its runs (its dead letters): decided
    one after another. They change queues that have actors of their own, as a run's end does, and
    poke those actors so parked receivers look again."""
    return ("mailbox-ops", space, mailbox_id)


def once_actor(space: str, scope_id: str, key: str) -> ActorKey:
    return ("once", space, scope_id, key)


def run_actor(space: str, name: str) -> ActorKey:
    """Ensures of one run name are decided one after the other."""
    return ("run", space, name)


def capacity_actor(space: str) -> ActorKey:
    """Every command on a pool, an allowance, a work limit or a budget of a space: one actor, so a
    name is created once and each decision sees every earlier one (docs/design-capacity.md)."""
    return ("capacity", space)


def barrier_actor(space: str, barrier_id: str) -> ActorKey:
    return ("barrier", space, barrier_id)


def barrier_name_actor(space: str, scope_id: str, name: str) -> ActorKey:
    """A barrier's name in a scope: two puts of one name are decided one after the other."""
    return ("barrier-name", space, scope_id, name)


def timers_actor(space: str, scope_id: str) -> ActorKey:
    """Every timer of one scope: its creation, firing, expiry, ack, cancel, and the polls that list them."""
    return ("timers", space, scope_id)


def events_actor(space: str) -> ActorKey:
    """Where watches of a space's events park; every turn that makes events pokes it."""
    return ("events", space)
