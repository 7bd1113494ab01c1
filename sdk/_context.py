"""What every handle shares: the request layer, the space, the worker identity, what it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import anyio

from ._request import Reply, Requester

if TYPE_CHECKING:
    from .claims import ClaimLease
    from .mailboxes import Delivery

__all__ = ["Context", "Holdings", "CrashedError"]


class CrashedError(RuntimeError):
    """A call on a client that `runstate.testing.crash()` has crashed: a dead process sends nothing."""


class Holdings:
    """What one client holds, shared by all its views: it stops or crashes them all at once."""

    __slots__ = ("leases", "deliveries", "consumers", "crashed", "renewals")

    def __init__(self) -> None:
        from ._renewal import Renewals

        # Every lease the client keeps alive, renewed together (`runstate._renewal.Renewals`).
        self.renewals = Renewals()
        # Claim leases whose renewal is running; the client stops them all on close.
        self.leases: set[ClaimLease] = set()
        # Deliveries renewed in the background (`keep_renewed()`, consume()) or that a consume()
        # handler is working on; the client stops them all on close.
        self.deliveries: set[Delivery] = set()
        # The cancel scopes of the consume() calls running now.
        self.consumers: set[anyio.CancelScope] = set()
        self.crashed = False


class Context:
    """One client's view of one space. `with_space()` views share everything but the space id."""

    __slots__ = ("requester", "space_id", "holder", "session", "holdings")

    def __init__(self, requester: Requester, space_id: str, holder: str, session: str, holdings: Holdings) -> None:
        self.requester = requester
        self.space_id = space_id
        self.holder = holder
        self.session = session
        self.holdings = holdings

    @property
    def leases(self) -> set[ClaimLease]:
        return self.holdings.leases

    def for_space(self, space_id: str) -> Context:
        return Context(self.requester, space_id, self.holder, self.session, self.holdings)

    def for_holder(self, holder: str, session: str) -> Context:
        return Context(self.requester, self.space_id, holder, session, self.holdings)

    def path(self, suffix: str) -> str:
        """`/v1/spaces/{space}` + suffix. Ids go in as they are: the wire contract encodes none."""
        return f"/v1/spaces/{self.space_id}{suffix}"

    def cleanup_bound_s(self) -> float:
        """How long a shielded clean-up call (a release, a give-back) may take before it is dropped:
        every attempt of one call at its timeout. Past that the lease simply runs out."""
        requester = self.requester
        return (requester.retries + 1) * (requester.request_timeout_ms / 1000 + 0.1)

    async def call(
        self,
        method: str,
        suffix: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        wait_ms: int = 0,
        idempotency_key: str | None = None,
        batch: bool = False,
    ) -> Reply:
        """One call. `batch`: a command of the space that may go out in a batch with other calls
        of this client made at the same time (`runstate._batch`); it never waits on the server."""
        if self.holdings.crashed:
            raise CrashedError(f"{method} {suffix}: this client was crashed by runstate.testing.crash()")
        requester = self.requester
        if batch and requester.coalescer is not None and not query and not wait_ms:
            return await requester.coalescer.call(self.path(""), method, suffix, body, idempotency_key)
        return await requester.call(
            method, self.path(suffix), body=body, query=query, wait_ms=wait_ms, idempotency_key=idempotency_key
        )
