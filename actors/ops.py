"""The kernel's operations on keys, scopes and claims, as the HTTP shell calls them.

Each operation checks its arguments against the limits, names the actor that owns the key, and
sends it a command; reads answer straight from the state without a turn (they never wait for the
disk). Arguments arrive already typed (the shell parsed the JSON); times are wall milliseconds.
"""

from __future__ import annotations

from typing import Any

from .errors import STALE_CLAIM, VALIDATION_FAILED, KernelError
from .kernel import Idem, Kernel
from .keys import digest
from .limits import Limits
from .space import claim_actor, scope_actor
from .scopes import CANCELLED, COMPLETED

__all__ = ["KeyOps", "ScopeOps", "ClaimOps", "check_text", "check_lease_s", "check_space_id"]

KEYS_ACTOR = ("keys",)


def check_text(field: str, value: str, length_max: int) -> str:
    """A non-empty string of at most `length_max` characters."""
    if not value:
        raise KernelError(VALIDATION_FAILED, f"{field} must not be empty")
    if len(value) > length_max:
        raise KernelError(VALIDATION_FAILED, f"{field} is longer than {length_max} characters")
    return value


def check_lease_s(limits: Limits, lease_s: int, field: str = "leaseSeconds") -> int:
    if not limits.lease_s_min <= lease_s <= limits.lease_s_max:
        raise KernelError(
            VALIDATION_FAILED,
            f"{field} must be between {limits.lease_s_min} and {limits.lease_s_max}, got {lease_s}",
        )
    return lease_s


class KeyOps:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def spaces_for(self, secret: str) -> frozenset[str]:
        return self._kernel.state.keys.spaces_for(secret)

    async def register(self, secret: str, spaces: frozenset[str], name: str | None = None) -> dict:
        """Let `secret` open `spaces`. Only its digest is kept."""
        limits = self._kernel.limits
        for space in spaces:
            check_space_id(space)
        if name is not None:
            check_text("name", name, limits.name_len_max)
        key_id = self._kernel.ids.make("ak_")
        key_digest = digest(secret)
        return await self._kernel.call(
            KEYS_ACTOR, lambda state, now_ms: state.register_key(key_id, key_digest, name, spaces, now_ms)
        )

    async def revoke(self, key_id: str) -> dict:
        return await self._kernel.call(KEYS_ACTOR, lambda state, now_ms: state.revoke_key(key_id, now_ms))


def check_space_id(space: str) -> str:
    if not space or len(space) > 64 or not all(c.isalnum() or c in "-_" for c in space) or not space.isascii():
        raise KernelError(VALIDATION_FAILED, f"space id {space!r} must be 1-64 characters of A-Z a-z 0-9 - _")
    return space


class ScopeOps:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def create(
        self,
        space: str,
        *,
        name: str | None = None,
        parent_id: str | None = None,
        deadline_ms: int | None = None,
        child_limit: int | None = None,
        idem: Idem | None = None,
    ) -> dict:
        limits = self._kernel.limits
        if name is not None:
            check_text("name", name, limits.name_len_max)
        if child_limit is not None and not 0 <= child_limit <= limits.child_limit_max:
            raise KernelError(
                VALIDATION_FAILED, f"childLimit must be between 0 and {limits.child_limit_max}"
            )
        scope_id = self._kernel.ids.make("sc_")
        # A child is created in its parent's turn, so childLimit counts exactly.
        actor = scope_actor(space, parent_id if parent_id is not None else scope_id)
        return await self._kernel.call(
            actor,
            lambda state, now_ms: state.space(space).create_scope(
                scope_id, name, parent_id, deadline_ms, child_limit, now_ms
            ),
            idem=idem,
        )

    def view(self, space: str, scope_id: str) -> dict:
        state = self._kernel.state.space(space)
        return state.scopes.view(state.scopes.get(scope_id), self._kernel.clock.now_ms())

    async def cancel(self, space: str, scope_id: str, *, idem: Idem | None = None) -> dict:
        return await self._end(space, scope_id, CANCELLED, idem)

    async def complete(self, space: str, scope_id: str, *, idem: Idem | None = None) -> dict:
        return await self._end(space, scope_id, COMPLETED, idem)

    async def _end(self, space: str, scope_id: str, end: str, idem: Idem | None) -> dict:
        return await self._kernel.call(
            scope_actor(space, scope_id),
            lambda state, now_ms: state.space(space).end_scope(scope_id, end, now_ms),
            idem=idem,
        )


class ClaimOps:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def acquire(
        self,
        space: str,
        *,
        scope_id: str,
        key: str,
        holder: str,
        session: str,
        lease_s: int,
        idem: Idem | None = None,
    ) -> dict:
        limits = self._kernel.limits
        check_text("key", key, limits.claim_key_len_max)
        check_text("holder", holder, limits.holder_len_max)
        check_text("holderSession", session, limits.holder_len_max)
        lease_ms = check_lease_s(limits, lease_s) * 1000
        token = self._kernel.ids.token()
        return await self._kernel.call(
            claim_actor(space, scope_id, key),
            lambda state, now_ms: state.space(space).acquire_claim(
                scope_id, key, holder, session, lease_ms, token, now_ms
            ),
            idem=idem,
        )

    async def renew(
        self, space: str, *, key: str, token: str, lease_s: int | None = None, idem: Idem | None = None
    ) -> dict:
        lease_ms = None if lease_s is None else check_lease_s(self._kernel.limits, lease_s) * 1000
        return await self._kernel.call(
            self._actor_of(space, key, token),
            lambda state, now_ms: state.space(space).renew_claim(key, token, lease_ms, now_ms),
            idem=idem,
        )

    async def release(
        self, space: str, *, key: str, token: str, observation: Any = None, idem: Idem | None = None
    ) -> dict:
        return await self._kernel.call(
            self._actor_of(space, key, token),
            lambda state, now_ms: state.space(space).release_claim(key, token, observation, now_ms),
            idem=idem,
        )

    def _actor_of(self, space: str, key: str, token: str) -> tuple:
        """The actor of the claim `token` names; the turn checks again that it is still current."""
        claim = self._kernel.state.space(space).claims.by_token(token)
        if claim is None or claim.key != key:
            raise KernelError(STALE_CLAIM, f"token is not the current one for claim {key!r}")
        return claim_actor(space, claim.scope_id, key)

    def in_scope(self, space: str, scope_id: str) -> list[dict]:
        """The claims of a scope whose leases have not ended (for inspection)."""
        state = self._kernel.state.space(space)
        state.scopes.get(scope_id)
        now_ms = self._kernel.clock.now_ms()
        return [state.claims.view(c) for c in state.claims.in_scope(scope_id) if c.held_at(now_ms)]
