"""What every handle shares: the request layer, the space, the worker identity, live leases."""

from __future__ import annotations

from typing import Any, Mapping

from ._request import Reply, Requester

__all__ = ["Context"]


class Context:
    """One client's view of one space. `with_space()` views share everything but the space id."""

    __slots__ = ("requester", "space_id", "holder", "session", "leases")

    def __init__(self, requester: Requester, space_id: str, holder: str, session: str, leases: set) -> None:
        self.requester = requester
        self.space_id = space_id
        self.holder = holder
        self.session = session
        # Claim leases whose renewal is running; the client stops them all on close.
        self.leases = leases

    def for_space(self, space_id: str) -> "Context":
        return Context(self.requester, space_id, self.holder, self.session, self.leases)

    def path(self, suffix: str) -> str:
        """`/v1/spaces/{space}` + suffix. Ids go in as they are: the wire contract encodes none."""
        return f"/v1/spaces/{self.space_id}{suffix}"

    async def call(
        self,
        method: str,
        suffix: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        wait_ms: int = 0,
    ) -> Reply:
        return await self.requester.call(method, self.path(suffix), body=body, query=query, wait_ms=wait_ms)
