"""All kernel state: spaces, API keys and stored idempotent answers, and the one `apply`.

`KernelState.apply(record)` is how both the live kernel (inside a turn) and recovery (reading the
journal) change state, so replaying the journal reproduces the state exactly, generation counters
included. The state is plain objects in dicts: a million idle claims cost their memory, not a
million tasks.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Iterator

from .idempotency import IdempotencyTable
from .keys import ApiKey, KeyTable
from .limits import Limits
from .outcome import Outcome, Timer
from .timestamps import format_ms
from .space import SpaceState

__all__ = ["KernelState"]


class KernelState:
    __slots__ = ("limits", "spaces", "keys", "idempotency")

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.spaces: dict[str, SpaceState] = {}
        self.keys = KeyTable()
        self.idempotency = IdempotencyTable(self.limits)

    def space(self, space_id: str) -> SpaceState:
        """The state of a space, made empty on first use (a space exists once a key opens it)."""
        space = self.spaces.get(space_id)
        if space is None:
            space = self.spaces[space_id] = SpaceState(space_id, self.limits)
        return space

    def apply(self, record: dict) -> None:
        kind = record["type"]
        if kind == "idem.stored":
            self.idempotency.apply_stored(record)
        elif kind == "key.registered":
            self.keys.apply_registered(record)
        elif kind == "key.revoked":
            self.keys.apply_revoked(record)
        else:
            self.space(record["space"]).apply(record)

    # -- keys (not in any space: a key names the spaces it opens) ---------------------------------

    def register_key(
        self, key_id: str, key_digest: str, name: str | None, spaces: frozenset[str], now_ms: int
    ) -> Outcome:
        record = self.keys.decide_register(key_id, key_digest, name, spaces, now_ms)
        outcome = Outcome()
        if record is not None:
            self.apply(record)
            outcome.records.append(record)
        outcome.reply = self.key_view(self.keys.by_digest(key_digest))
        return outcome

    def revoke_key(self, key_id: str, now_ms: int) -> Outcome:
        record = self.keys.decide_revoke(key_id, now_ms)
        outcome = Outcome()
        if record is not None:
            self.apply(record)
            outcome.records.append(record)
        outcome.reply = self.key_view(self.keys.by_id(key_id))
        return outcome

    @staticmethod
    def key_view(key: ApiKey | None) -> dict:
        assert key is not None
        return {
            "id": key.id,
            "name": key.name,
            "spaces": sorted(key.spaces),
            "createdAt": format_ms(key.created_ms),
            "revokedAt": None if key.revoked_ms is None else format_ms(key.revoked_ms),
        }

    def timers(self) -> Iterator[Timer]:
        for space in self.spaces.values():
            yield from space.timers()
