"""`AsyncRunstate`, the async client, and its space-wide APIs (`scopes`, `mailboxes`).

Building a client sends nothing. It holds one request layer (over one transport), the space id,
and the worker identity: `holder` (the logical worker, yours to choose, stable across restarts)
and `session` (12 hex characters, fresh for every client, so two live clients never look like
one). `with_space(id)` gives a view on another space that shares all of that.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Sequence
from urllib.parse import quote

from ._batch import Coalescer
from . import _checks
from ._checks import check_text
from ._config import Config, new_session, resolve_config
from ._context import Context, Holdings
from ._request import Requester
from .capacity import BudgetsAPI, PoolsAPI, QuotasAPI, WorkLimitsAPI  # -- capacity --
from .coordination import DiagnosticsAPI, EventsAPI
from .errors import ConflictError, RunstateError, ValidationError
from .scopes import ScopeHandle, create_scope
from .transport import Transport, cluster_transport
from .types import DeadLetter, DeadLetterPage, DeleteResult, MailboxRow, PurgeResult, RequeueResult

__all__ = ["AsyncRunstate", "ScopesAPI", "MailboxesAPI", "HOLDER_LEN_MAX"]

HOLDER_LEN_MAX = _checks.HOLDER_LEN_MAX
"""The longest `holder` (and holder session, subscriber id), in characters."""


class ScopesAPI:
    """`rs.scopes`: make runs (`create`) or join one by name (`ensure`)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def create(
        self,
        *,
        name: str | None = None,
        parent_id: str | None = None,
        deadline: str | None = None,
        child_limit: int | None = None,
    ) -> ScopeHandle:
        """Create a scope (a run); `name` is a label, not unique and never used for lookup."""
        return await create_scope(self._ctx, name=name, parent_id=parent_id, deadline=deadline, child_limit=child_limit)

    async def ensure(self, name: str, *, deadline: str | None = None) -> ScopeHandle:
        """The run named `name`: one root scope per name in the space, made by the first caller
        (with `deadline`, if given) and the same for every later one, in any process, as the
        official 0.3.0 client's runs by name are. A run that was stopped stays stopped: check
        `status()`; a new name starts a new run."""
        if not isinstance(name, str):
            raise ValidationError("VALIDATION_FAILED", 400, "field 'name' must be a string")
        if not name:
            # The server's words at a create: PUT /runs/ would name no route (NOT_FOUND).
            raise ValidationError("VALIDATION_FAILED", 400, "name must not be empty")
        body = {} if deadline is None else {"deadline": deadline}
        reply = await self._ctx.call("PUT", f"/runs/{quote(name, safe='')}", body=body)
        return ScopeHandle(self._ctx, reply.body["id"])


class MailboxesAPI:
    """`rs.mailboxes`: the space's queues (`ensure`, `list`) and an operator's tools on them
    (dead letters, purges). A queue is made once per space, before any run uses it."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def ensure(self, name: str, *, mode: str | None = None, backlog_limit: int | None = None) -> MailboxRow:
        """Get the mailbox `name`, creating it if it is missing; returns its row.

        It lists first and creates only when the name is missing. If the create loses a race
        (`ConflictError`), it lists again. A mailbox that exists with another `mode` (compared
        without regard to case) raises `ConflictError` (`CONFLICT`); `backlog_limit` is not compared.
        """
        row = await self._find(name)
        if row is None:
            body = {"name": name, "mode": mode, "backlogLimit": backlog_limit}
            try:
                created: MailboxRow = (await self._ctx.call("POST", "/mailboxes", body=body)).body
                return created
            except ConflictError:
                row = await self._find(name)
                if row is None:
                    raise
        _check_mode(row, mode)
        return row

    async def list(self) -> list[MailboxRow]:
        """Every mailbox row in the space."""
        rows: list[MailboxRow] = (await self._ctx.call("GET", "/mailboxes")).body["mailboxes"]
        return rows

    # -- an operator's tools: dead letters and purges (docs/operations.md, "Operator actions") ---

    async def dead_letters(
        self,
        mailbox_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        reason: str | None = None,
        older_than_s: int | None = None,
        newer_than_s: int | None = None,
    ) -> DeadLetterPage:
        """One page of the mailbox's dead letters, newest first, with their payloads: those whose
        reason contains `reason`, that died at least `older_than_s` / at most `newer_than_s`
        seconds ago. Pass the page's `nextCursor` as `cursor` for the next one."""
        query = {"limit": limit, "cursor": cursor, "reason": reason, "olderThanSeconds": older_than_s, "newerThanSeconds": newer_than_s}
        page: DeadLetterPage = (await self._ctx.call("GET", f"/mailboxes/{mailbox_id}/dead-letters", query=query)).body
        return page

    async def iter_dead_letters(
        self, mailbox_id: str, *, reason: str | None = None, older_than_s: int | None = None,
        newer_than_s: int | None = None, page_size: int = 100,
    ) -> AsyncIterator[DeadLetter]:
        """Every dead letter that matches, newest first, a page at a time."""
        cursor = None
        while True:
            page = await self.dead_letters(
                mailbox_id, limit=page_size, cursor=cursor, reason=reason, older_than_s=older_than_s, newer_than_s=newer_than_s
            )
            for letter in page["deadLetters"]:
                yield letter
            cursor = page["nextCursor"]
            if cursor is None:
                return

    async def requeue_dead_letters(
        self,
        mailbox_id: str,
        *,
        message_ids: Sequence[str] | None = None,
        reason: str | None = None,
        older_than_s: int | None = None,
        newer_than_s: int | None = None,
        all: bool = False,
        dry_run: bool = False,
    ) -> RequeueResult:
        """Put dead letters back at the end of their queues, as new messages (`requeuedAs` maps
        each old id to its new one), with attempts counted from zero. Name them one way:
        `message_ids`, a filter, or `all=True`. One call acts on at most 1000, oldest first:
        call again while `remaining` is more than 0. `dry_run=True` only counts. A task's dead
        letter is never requeued (`skipped["task"]`): its FAILED outcome stands."""
        body = _dead_letter_body(message_ids, reason, older_than_s, newer_than_s, all, dry_run)
        result: RequeueResult = (await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/dead-letters/requeue", body=body)).body
        return result

    async def delete_dead_letters(
        self,
        mailbox_id: str,
        *,
        message_ids: Sequence[str] | None = None,
        reason: str | None = None,
        older_than_s: int | None = None,
        newer_than_s: int | None = None,
        all: bool = False,
        dry_run: bool = False,
    ) -> DeleteResult:
        """Forget dead letters now, named as for `requeue_dead_letters`; at most 1000 a call."""
        body = _dead_letter_body(message_ids, reason, older_than_s, newer_than_s, all, dry_run)
        result: DeleteResult = (await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/dead-letters/delete", body=body)).body
        return result

    async def purge(
        self, mailbox_id: str, *, scope_id: str | None = None, reason: str | None = None, dry_run: bool = False
    ) -> PurgeResult:
        """End what waits in the mailbox (in every run, or `scope_id`'s): tasks CANCELLED with the
        reason `purged`, plain messages dropped; deliveries under way finish. At most 1000 a call."""
        body = {"scopeId": scope_id, "reason": reason, "dryRun": dry_run or None}
        result: PurgeResult = (await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/purge", body=body)).body
        return result

    async def _find(self, name: str) -> MailboxRow | None:
        for row in await self.list():
            if row["name"] == name:
                return row
        return None


def _dead_letter_body(
    message_ids: Sequence[str] | None, reason: str | None, older_than_s: int | None, newer_than_s: int | None,
    every: bool, dry_run: bool,
) -> dict[str, Any]:
    """The body of a requeue or a delete (the server checks that it names the letters one way)."""
    return {
        "messageIds": None if message_ids is None else list(message_ids), "reason": reason,
        "olderThanSeconds": older_than_s, "newerThanSeconds": newer_than_s, "all": every or None, "dryRun": dry_run or None,
    }


def _check_mode(row: MailboxRow, mode: str | None) -> None:
    stored = row.get("mode")
    if mode and stored and str(stored).upper() != mode.upper():
        raise ConflictError("CONFLICT", 409, f"mailbox {row['name']!r} exists with mode {stored}, not {mode}")


class AsyncRunstate:
    """The async client (asyncio or trio). Use `async with AsyncRunstate(...) as rs:` or call
    `aclose()`.

    Its settings come from the arguments, else `RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID` and
    `RUNSTATE_BASE_URL` (default `http://localhost:8080`). Runs are reached through `scopes`
    (`await rs.scopes.create()`, `ensure(name)`) or `scope(run_id)`; the space's queues through
    `mailboxes` (`await rs.mailboxes.ensure("research", mode="WORK")`); capacity through `pools`,
    `quotas`, `work_limits` and `budgets`; the event log through `events`; why work waits through
    `diagnostics`."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        space_id: str | None = None,
        base_url: str | None = None,
        request_timeout_ms: int | None = None,
        retries: int | None = None,
        holder: str | None = None,
        transport: Transport | None = None,
        ca_bundle: str | None = None,
        batch_calls: bool = True,
    ) -> None:
        """`ca_bundle` (else RUNSTATE_CA_BUNDLE): a PEM file of the certificates to trust for an
        https server with a self-signed or private CA's certificate. `batch_calls` (default on):
        calls made at the same moment by this client and its views go out as one batch request;
        off, each call is a request of its own."""
        config = resolve_config(
            api_key=api_key,
            space_id=space_id,
            base_url=base_url,
            request_timeout_ms=request_timeout_ms,
            retries=retries,
            holder=holder,
            ca_bundle=ca_bundle,
        )
        # A transport the client makes is the client's to close; one passed in stays the caller's.
        self._owns_transport = transport is None
        if transport is None:
            transport = cluster_transport(config.base_url, ca_bundle=config.ca_bundle)
        requester = Requester(
            transport,
            config.api_key,
            config.request_timeout_ms,
            config.retries,
            base_url=config.base_url,
            api_key_source=config.api_key_source,
        )
        if batch_calls:
            requester.coalescer = Coalescer(requester)
        self._setup(Context(requester, config.space_id, config.holder, config.session, Holdings()), config, is_view=False)

    def _setup(self, ctx: Context, config: Config, *, is_view: bool) -> None:
        self._ctx = ctx
        self._config = config
        self._is_view = is_view
        self._closed = False
        self.scopes = ScopesAPI(ctx)
        self.mailboxes = MailboxesAPI(ctx)
        # -- capacity --
        self.pools, self.quotas = PoolsAPI(ctx), QuotasAPI(ctx)
        self.work_limits, self.budgets = WorkLimitsAPI(ctx), BudgetsAPI(ctx)
        self.events = EventsAPI(ctx)
        self.diagnostics = DiagnosticsAPI(ctx)

    @property
    def space_id(self) -> str:
        """The space every call of this client (or view) goes to."""
        return self._ctx.space_id

    @property
    def holder(self) -> str:
        """The name this client's claims and deliveries are held under (`holder=`)."""
        return self._ctx.holder

    @property
    def session(self) -> str:
        """Fresh for every client and view: two live clients never share one, so the server tells
        their holdings apart even under the same holder name."""
        return self._ctx.session

    @property
    def transport(self) -> Transport:
        """The transport requests go through (made by the client unless one was passed in)."""
        return self._ctx.requester.transport

    def __repr__(self) -> str:
        return f"AsyncRunstate(space_id={self.space_id!r}, holder={self.holder!r})"

    def scope(self, scope_id: str) -> ScopeHandle:
        """A handle on an existing scope; sends nothing."""
        return ScopeHandle(self._ctx, scope_id)

    def with_space(self, space_id: str) -> AsyncRunstate:
        """A view bound to another space, sharing the transport, holder and session."""
        view = object.__new__(type(self))
        view._owns_transport = False
        view._setup(self._ctx.for_space(space_id), self._config, is_view=True)
        return view

    def with_holder(self, holder: str) -> AsyncRunstate:
        """A view for another worker of this process: its own `holder` and a fresh `session`, so
        its claims and deliveries are its own (one agent of a swarm, say), sharing with this
        client everything else: the transport and its connections, the batching of calls made
        at the same time, and the one renewal loop that renews every lease together. Closing
        the client closes its views; closing a view closes nothing."""
        check_text("holder", holder, HOLDER_LEN_MAX)
        view = object.__new__(type(self))
        view._owns_transport = False
        view._setup(self._ctx.for_holder(holder, new_session()), self._config, is_view=True)
        return view

    async def aclose(self) -> None:
        """Stop every lease renewal this client runs (those leases count as lost from here on:
        they will expire) and close the transport if the client made it. Views close nothing."""
        if self._is_view or self._closed:
            return
        self._closed = True
        closing = RunstateError("CLIENT_CLOSED", 0, "the client was closed")
        for lease in list(self._ctx.leases):
            lease._mark_lost(closing)
            await lease.aclose()
        for delivery in list(self._ctx.holdings.deliveries):
            if delivery._kept is not None:  # kept renewed until now: no longer
                delivery._mark_lost(closing)
        self._ctx.holdings.renewals.close()
        coalescer = self._ctx.requester.coalescer
        if coalescer is not None:
            coalescer.close()
        if self._owns_transport:
            aclose = getattr(self._ctx.requester.transport, "aclose", None)
            if aclose is not None:
                await aclose()

    async def __aenter__(self) -> AsyncRunstate:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
