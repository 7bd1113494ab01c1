"""The MCP face of a holder session: tools, resources and a prompt, on the `mcp` package's MCPServer.

The tool names and their arguments are the contract (docs/mcp.md): `claim`, `release`, `held`,
`submit`, `take`, `complete`, `fail`, `result`, `status`. Every answer is one JSON object, as text
for the model and as structured content for programs. An answer the model must act on (a wrong
argument, a task it does not hold, a run that ended, a server it cannot reach) is `is_error` with
a sentence that says what happened and what to do; a traceback never reaches the model (it goes
to the log on stderr). Arguments that do not fit a tool's schema are refused by the `mcp` package
itself, also as an `is_error` answer naming the field.

Holdings lost since the previous answer (`_session.py`) ride on the next one, whatever the tool,
under `lost`.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Awaitable, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..claims import KEY_LEN_MAX, LEASE_SECONDS_MAX, LEASE_SECONDS_MIN
from ..errors import (
    AuthenticationError, ConflictError, LeaseLostError, NotFoundError, RateLimitError, RunstateError, StoppedError,
    UnavailableError, ValidationError,
)
from ._session import WAIT_SECONDS_MAX, HolderSession, Refusal
from ._status import run_status
from ..mailboxes import NAME_LEN_MAX, REASON_LEN_MAX

__all__ = ["build", "INSTRUCTIONS", "EDIT_PROMPT"]

log = logging.getLogger("runstate.mcp")

INSTRUCTIONS = """\
runstate coordinates you with other agents working in the same run: only one of you does a piece
of work, the others see who does it, and when one of you stops, another takes over.
- claim(key) before you work on something another agent might also touch (a file: "file:src/app.py",
  a company: "company:acme"). If it is held by another agent, work on something else or claim again
  with wait_seconds. Release it when you are done. You never renew anything: this server does it
  while your session lives, and if your session ends, what you hold goes to the next agent.
- submit(queue, input, key) shares a piece of work: one task per key, whoever submits it;
  result(key) reads its result. take(queue) gives you the next task; complete or fail it.
- Read `lost` in any answer: it names what you no longer hold. Stop working on it.
- status shows who holds what in the run and what waits."""

EDIT_PROMPT = """\
You share this repository with other agents. Before you change a file:

1. Call claim with key "file:<path relative to the repository root>" (one claim per file) and
   wait_seconds 0. If the answer says "acquired": true, the file is yours.
2. If it is held by another agent, do not edit it: pick another file or task, or call claim again
   with wait_seconds (up to 60) if you cannot go on without it.
3. When your change to the file is complete (written, and saved where the others can see it), call
   release with the same key.
4. If any answer lists the file under "lost", another agent may be editing it now: stop, read the
   file again, and claim it again before any further change.

Claim several files one at a time in a fixed order (sorted by path) so that two agents never wait
for each other. Call status to see who holds which files."""

_KEY = "the key to own, unique within the run, e.g. file:src/app.py or company:acme"
_QUEUE = "the queue's name, e.g. research; made on first use"


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, default=str)


def words(err: RunstateError, session: HolderSession) -> str:
    """What the server said, for the model: what happened and what to do."""
    if isinstance(err, ValidationError):
        return f"invalid argument: {err}"
    if isinstance(err, StoppedError):
        return (f"run {session.run_name} has ended ({err}): nothing more can be claimed, taken or submitted in it; "
                "tell the user, who can start runstate mcp with another --run")
    if isinstance(err, AuthenticationError):
        return (f"the runstate server refused this session's API key ({err}): the MCP client's configuration must "
                f"set RUNSTATE_API_KEY to a key of space {session.rs.space_id}; tell the user")
    if isinstance(err, UnavailableError):
        return (f"the runstate server did not answer ({err}); what you hold is still renewed while it comes back: "
                "try again in a few seconds")
    if isinstance(err, RateLimitError):
        return f"{err}: the server is busy or a limit of the space is reached; try again in a few seconds"
    if isinstance(err, ConflictError) and err.code == "IDEMPOTENCY_CONFLICT":
        return f"{err} (read the task already there with result)"
    if isinstance(err, (NotFoundError, LeaseLostError, ConflictError)):
        return f"{err} ({err.code})"
    return f"{err.code}: {err}"


async def _losses(session: HolderSession) -> list[dict[str, Any]]:
    try:
        return await session.take_losses()
    except Exception:  # never let the report of a loss hide the answer itself
        log.exception("runstate mcp: could not look for lost holdings")
        return []


async def _answer(session: HolderSession, call: Callable[[], Awaitable[dict[str, Any]]]) -> CallToolResult:
    """Run one tool call and make its answer, with the losses since the last one: those found
    before the call (so that what it reads is current) and during it."""
    error = False
    lost = await _losses(session)
    try:
        body = await call()
    except Refusal as err:
        body, error = {"error": str(err)}, True
    except RunstateError as err:
        body, error = {"error": words(err, session), "code": err.code}, True
    except Exception as err:
        log.exception("runstate mcp: a tool call failed")
        body, error = {"error": f"runstate mcp failed on this call ({type(err).__name__}: {err}); try again"}, True
    lost += await _losses(session)
    if lost:
        body["lost"] = lost
    return CallToolResult(content=[TextContent(type="text", text=_json(body))], structured_content=body, is_error=error)


def build(session: HolderSession) -> MCPServer[Any]:
    """The MCP server of `session`."""
    from .. import __version__

    app: MCPServer[Any] = MCPServer(
        "runstate", title="runstate", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
    )
    _claim_tools(app, session)
    _task_tools(app, session)
    _views(app, session)
    return app


def _claim_tools(app: MCPServer[Any], session: HolderSession) -> None:
    @app.tool(
        name="claim",
        description="Own a key in the run so that no other agent works on it at the same time. Answers "
        "acquired with its generation and fencing token, or who holds it and until when. Held until you "
        "release it; renewed for you in the background; if your session ends, the next agent gets it.",
        annotations=ToolAnnotations(title="Claim a key", read_only_hint=False, destructive_hint=False, idempotent_hint=True),
    )
    async def claim(
        key: Annotated[str, Field(description=_KEY, min_length=1, max_length=KEY_LEN_MAX)],
        lease_seconds: Annotated[int | None, Field(
            description="how long the claim outlives a dead session (default: the server's --lease-seconds); "
            "shorter means a faster takeover", ge=LEASE_SECONDS_MIN, le=LEASE_SECONDS_MAX)] = None,
        wait_seconds: Annotated[float, Field(
            description="if another agent holds it, wait up to this long for it (0: answer at once)",
            ge=0, le=WAIT_SECONDS_MAX)] = 0,
    ) -> CallToolResult:
        return await _answer(session, lambda: session.claim(key, lease_seconds, wait_seconds))

    @app.tool(
        name="release",
        description="Give back a key you claimed, so that another agent may claim it now.",
        annotations=ToolAnnotations(title="Release a claim", read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def release(
        key: Annotated[str, Field(description="the key you claimed", min_length=1, max_length=KEY_LEN_MAX)],
    ) -> CallToolResult:
        return await _answer(session, lambda: session.release(key))

    @app.tool(
        name="held",
        description="What you hold now: your claims and taken tasks, with generations and lease ends.",
        annotations=ToolAnnotations(title="What I hold", read_only_hint=True),
    )
    async def held() -> CallToolResult:
        async def view() -> dict[str, Any]:
            return session.held()

        return await _answer(session, view)


def _task_tools(app: MCPServer[Any], session: HolderSession) -> None:
    work = session.work

    @app.tool(
        name="submit",
        description="Share a piece of work as a task on a queue: one task per key in the run, so submitting "
        "a key that exists (same input) joins its task instead of making another. Read its result with result.",
        annotations=ToolAnnotations(title="Submit a task", read_only_hint=False, destructive_hint=False, idempotent_hint=True),
    )
    async def submit(
        queue: Annotated[str, Field(description=_QUEUE, min_length=1, max_length=NAME_LEN_MAX)],
        input: Annotated[Any, Field(description="the task's input: any JSON value the worker needs")],
        key: Annotated[str, Field(description="the task's key, naming the work, e.g. research:acme",
                                  min_length=1, max_length=KEY_LEN_MAX)],
    ) -> CallToolResult:
        return await _answer(session, lambda: work.submit(queue, input, key))

    @app.tool(
        name="take",
        description="Take the next task from a queue to work on it. It is yours (renewed in the background) "
        "until you complete or fail it; if your session ends, it goes back to the queue for another worker.",
        annotations=ToolAnnotations(title="Take a task", read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def take(
        queue: Annotated[str, Field(description=_QUEUE, min_length=1, max_length=NAME_LEN_MAX)],
        wait_seconds: Annotated[float, Field(
            description="if the queue is empty, wait up to this long for a task (0: answer at once)",
            ge=0, le=WAIT_SECONDS_MAX)] = 0,
        lease_seconds: Annotated[int | None, Field(
            description="how long the task outlives a dead session before another worker gets it "
            "(default: the server's --lease-seconds)", ge=LEASE_SECONDS_MIN, le=LEASE_SECONDS_MAX)] = None,
    ) -> CallToolResult:
        return await _answer(session, lambda: work.take(queue, wait_seconds, lease_seconds))

    @app.tool(
        name="complete",
        description="Finish a task you took with its result: recorded once, and read by every caller of its key.",
        annotations=ToolAnnotations(title="Complete a task", read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def complete(
        task: Annotated[str, Field(description="the task id that take gave you", min_length=1, max_length=KEY_LEN_MAX)],
        result: Annotated[Any, Field(description="the result: any JSON value")] = None,
    ) -> CallToolResult:
        return await _answer(session, lambda: work.complete(task, result))

    @app.tool(
        name="fail",
        description="Give up a task you took: with retry it goes back to the queue for another attempt (until "
        "the queue's attempts are used up), without it the task ends FAILED with your reason.",
        annotations=ToolAnnotations(title="Fail a task", read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    async def fail(
        task: Annotated[str, Field(description="the task id that take gave you", min_length=1, max_length=KEY_LEN_MAX)],
        reason: Annotated[str, Field(description="why, in a sentence: recorded with the task",
                                     min_length=1, max_length=REASON_LEN_MAX)],
        retry: Annotated[bool, Field(description="true: try again later (another worker may take it); "
                                     "false: it cannot succeed, end it FAILED")] = True,
    ) -> CallToolResult:
        return await _answer(session, lambda: work.fail(task, reason, retry))

    @app.tool(
        name="result",
        description="A task's state and result, by its key: SUCCEEDED with its result, FAILED with the reason, "
        "or not finished yet.",
        annotations=ToolAnnotations(title="Read a task's result", read_only_hint=True),
    )
    async def result(
        key: Annotated[str, Field(description="the task's key", min_length=1, max_length=KEY_LEN_MAX)],
        wait_seconds: Annotated[float, Field(
            description="if it has not finished, wait up to this long for it (0: answer at once)",
            ge=0, le=WAIT_SECONDS_MAX)] = 0,
    ) -> CallToolResult:
        return await _answer(session, lambda: work.result(key, wait_seconds))


def _views(app: MCPServer[Any], session: HolderSession) -> None:
    @app.tool(
        name="status",
        description="The run as a whole: who holds which claims and tasks, which tasks wait or run, what "
        "waits and why, and what just happened.",
        annotations=ToolAnnotations(title="Run status", read_only_hint=True),
    )
    async def status() -> CallToolResult:
        return await _answer(session, lambda: run_status(session))

    @app.resource(
        "runstate://run/status", name="run-status", title="The run's status",
        description="The run as the status tool shows it: holders, claims, tasks, what waits.",
        mime_type="application/json",
    )
    async def status_resource() -> str:
        try:
            return _json(await run_status(session))
        except RunstateError as err:
            raise ResourceError(words(err, session)) from err

    @app.resource(
        "runstate://session/held", name="held", title="What this session holds",
        description="This session's claims and taken tasks.", mime_type="application/json",
    )
    async def held_resource() -> str:
        return _json(session.held())

    @app.prompt(
        name="claim-before-editing", title="Claim a file before editing it",
        description="How to share a repository with other agents without two of them editing one file at once.",
    )
    def claim_before_editing() -> str:
        return EDIT_PROMPT
