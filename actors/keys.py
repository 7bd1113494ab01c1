"""API keys: which spaces a bearer key opens, and what it may do there (its role). The kernel's
own primitive: keys are in no space.

Only a SHA-256 digest of a key is kept, in memory and in the journal; the key itself is shown once
when it is made and never again. A key opens exactly the spaces it was issued for. A revoked key
opens nothing, at once. Keys are decided by one actor (`KEYS_ACTOR`) in the system partition.

A key has one of two roles. `editor` (the default) does everything inside its spaces, the
operator's actions included; `viewer` reads everything there and changes nothing. The role is
written into `key.registered` only when it is not the default, so a record without one, as every
data directory made before roles wrote it, is an editor's: the format grew an optional field and
nothing else (`KEYS.records`, below).

Pure: no IO, no clock reads.
"""

from __future__ import annotations

import functools
import hmac
from typing import Final, Iterator, Literal, NamedTuple

from .actor_keys import KEYS_ACTOR, ActorKey
from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from .fields import body, check_space_id, drawn, path
from .key_secrets import digest, new_secret
from .limits import Limits
from .outcome import Outcome, State
from .primitive import NOT_COUNTED, Command, Primitive, command, record_type
from .shapes import EpochMs, Record

__all__ = [
    "ApiKey", "KeyTable", "digest", "new_secret", "KEY_REGISTERED", "KEY_REVOKED", "RegisterKey", "RevokeKey", "KEYS",
    "key_view", "ApiKeyView", "ApiKeysView", "Role", "KEY_SPACES_MAX", "ROLES", "EDITOR", "VIEWER",
]

# The record types this module decides and applies (the journal's spelling of each).
KEY_REGISTERED = record_type("key.registered")
KEY_REVOKED = record_type("key.revoked")

# A key's spaces are recorded with it; a key for every space is the admin key's job.
KEY_SPACES_MAX = 100

# The roles: an editor reads and changes everything in its spaces; a viewer only reads there.
Role = Literal["editor", "viewer"]
EDITOR: Final = "editor"
VIEWER: Final = "viewer"
ROLES = (EDITOR, VIEWER)


class ApiKeyView(NamedTuple):
    """A key as registering, revoking and listing keys answer (never its secret, nor its digest):
    its spaces in order, its role, and when it was made and revoked (None while it is valid)."""

    id: str
    name: str | None
    spaces: tuple[str, ...]
    role: Role
    created_ms: EpochMs
    revoked_ms: EpochMs | None



class ApiKeysView(NamedTuple):
    """API keys as the admin lists them (all, or those opening one space)."""

    keys: tuple[ApiKeyView, ...]

# A request's key is looked up a few times on its way in (the doors, the router, the space), and a
# client sends the same key each time: the last keys' digests are kept.
_digest_of = functools.lru_cache(maxsize=256)(digest)


class ApiKey:
    __slots__ = ("id", "digest", "name", "spaces", "created_ms", "revoked_ms", "role")

    def __init__(self, key_id: str, key_digest: str, name: str | None, spaces: frozenset[str], created_ms: int,
                 role: str = EDITOR) -> None:
        assert role in ROLES, role
        self.id = key_id
        self.digest = key_digest
        self.name = name
        self.spaces = spaces
        self.created_ms = created_ms
        self.revoked_ms: int | None = None
        self.role = role

    @property
    def reads_only(self) -> bool:
        return self.role == VIEWER


class KeyTable:
    __slots__ = ("_by_digest", "_by_id")

    def __init__(self) -> None:
        self._by_digest: dict[str, ApiKey] = {}
        self._by_id: dict[str, ApiKey] = {}

    def spaces_for(self, secret: str) -> frozenset[str]:
        """The spaces `secret` opens; empty when it is unknown or revoked."""
        wanted = _digest_of(secret)
        key = self._by_digest.get(wanted)
        if key is None or key.revoked_ms is not None or not hmac.compare_digest(key.digest, wanted):
            return frozenset()
        return key.spaces

    def active(self, secret: str) -> ApiKey | None:
        """The key `secret` is, when it is known and not revoked."""
        wanted = _digest_of(secret)
        key = self._by_digest.get(wanted)
        if key is None or key.revoked_ms is not None or not hmac.compare_digest(key.digest, wanted):
            return None
        return key

    def by_digest(self, key_digest: str) -> ApiKey | None:
        return self._by_digest.get(key_digest)

    def by_id(self, key_id: str) -> ApiKey | None:
        return self._by_id.get(key_id)

    def all(self) -> Iterator[ApiKey]:
        return iter(self._by_id.values())

    def spaces(self) -> set[str]:
        return {space for key in self._by_id.values() if key.revoked_ms is None for space in key.spaces}

    def __len__(self) -> int:
        return len(self._by_id)

    def decide_register(
        self, key_id: str, key_digest: str, name: str | None, spaces: frozenset[str], now_ms: int, role: str = EDITOR
    ) -> Record | None:
        """Register a key for `spaces` with `role`; None when it already opens exactly those, so."""
        if role not in ROLES:
            raise KernelError(VALIDATION_FAILED, f"no role {quote(role)}: a key's role is one of {', '.join(ROLES)}")
        existing = self._by_digest.get(key_digest)
        if existing is not None:
            if existing.revoked_ms is not None:
                raise KernelError(CONFLICT, f"key {existing.id} was revoked; make a new one")
            if existing.spaces == spaces and existing.role == role:
                return None
            key_id = existing.id
        assert spaces and len(key_digest) == 64, "a key opens some spaces, and only its SHA-256 digest is kept"
        return _registered(key_id, key_digest, name, spaces, now_ms, role)

    def decide_revoke(self, key_id: str, now_ms: int) -> Record | None:
        key = self._by_id.get(key_id)
        if key is None:
            raise KernelError(NOT_FOUND, f"key {quote(key_id)} not found")
        if key.revoked_ms is not None:
            return None
        assert self._by_digest.get(key.digest) is key, "a key is found by its digest until it is revoked"
        return {"type": KEY_REVOKED, "id": key_id, "at_ms": now_ms}

    def image(self) -> Iterator[Record]:
        """Records that rebuild this table exactly: each key as registered, then its revocation."""
        for key in self._by_id.values():
            yield _registered(key.id, key.digest, key.name, key.spaces, key.created_ms, key.role)
            if key.revoked_ms is not None:
                yield {"type": KEY_REVOKED, "id": key.id, "at_ms": key.revoked_ms}

    def apply_registered(self, record: Record) -> None:
        key = self._by_id.get(record["id"])
        role = record.get("role", EDITOR)  # (a record without one, as before roles, is an editor's)
        if key is None:
            key = ApiKey(record["id"], record["digest"], record["name"], frozenset(record["spaces"]), record["at_ms"], role)
            self._by_id[key.id] = key
            self._by_digest[key.digest] = key
        else:
            key.spaces = frozenset(record["spaces"])
            key.role = role

    def apply_revoked(self, record: Record) -> None:
        self._by_id[record["id"]].revoked_ms = record["at_ms"]


def key_view(key: ApiKey | None) -> ApiKeyView:
    assert key is not None and key.role in ROLES
    role: Role = VIEWER if key.role == VIEWER else EDITOR
    return ApiKeyView(key.id, key.name, tuple(sorted(key.spaces)), role, key.created_ms, key.revoked_ms)


# -- commands ----------------------------------------------------------------------------------


@command
class RegisterKey(Command):
    """Let the secret whose digest this is open `spaces`; only the digest is recorded."""

    key_digest: str
    spaces: frozenset[str]
    name: str | None = body("name", required=False, length_max="name_len_max")
    key_id: str = drawn("ak_")
    # What the key may do in its spaces (`ROLES`): everything, or only read.
    role: str = EDITOR

    def actor(self, state: State) -> ActorKey:
        return KEYS_ACTOR

    def check(self, limits: Limits) -> None:
        if not self.spaces:
            raise KernelError(VALIDATION_FAILED, "a key opens at least one space")
        if len(self.spaces) > KEY_SPACES_MAX:
            raise KernelError(VALIDATION_FAILED, f"a key opens at most {KEY_SPACES_MAX} spaces")
        for space in self.spaces:
            check_space_id(space)
        if self.role not in ROLES:
            raise KernelError(VALIDATION_FAILED, f"no role {self.role!r}: a key's role is one of {', '.join(ROLES)}")


@command
class RevokeKey(Command):
    key_id: str = path("key_id")

    def actor(self, state: State) -> ActorKey:
        return KEYS_ACTOR


def register(state: State, command: RegisterKey, now_ms: int) -> Outcome:
    """The transition of `RegisterKey`, on the kernel's state."""
    keys: KeyTable = state.keys
    record = keys.decide_register(command.key_id, command.key_digest, command.name, command.spaces, now_ms, command.role)
    outcome = Outcome()
    if record is not None:
        state.apply(record)
        outcome.records.append(record)
    outcome.reply = key_view(keys.by_digest(command.key_digest))
    return outcome


def revoke(state: State, command: RevokeKey, now_ms: int) -> Outcome:
    keys: KeyTable = state.keys
    record = keys.decide_revoke(command.key_id, now_ms)
    outcome = Outcome()
    if record is not None:
        state.apply(record)
        outcome.records.append(record)
    outcome.reply = key_view(keys.by_id(command.key_id))
    return outcome


KEYS = Primitive(
    "keys",
    kernel=True,
    commands={RegisterKey: register, RevokeKey: revoke},
    records={
        KEY_REGISTERED: ("id", "digest", "name", "spaces", "at_ms", "role?"),
        KEY_REVOKED: ("id", "at_ms"),
    },
    apply={KEY_REGISTERED: ("keys", "apply_registered"), KEY_REVOKED: ("keys", "apply_revoked")},
    usage={KEY_REGISTERED: NOT_COUNTED, KEY_REVOKED: NOT_COUNTED},
    image=lambda state: state.keys.image(),
)


def _registered(key_id: str, key_digest: str, name: str | None, spaces: frozenset[str], at_ms: int, role: str) -> Record:
    """A `key.registered` record; `role` only when it is not the default, so that an editor's
    record is the same bytes it was before keys had roles."""
    record: Record = {"type": KEY_REGISTERED, "id": key_id, "digest": key_digest, "name": name, "spaces": sorted(spaces), "at_ms": at_ms}
    if role != EDITOR:
        record["role"] = role
    return record
