"""runstate: the Python SDK for runstate-server.

`AsyncRunstate` is the client (asyncio or trio); `Runstate` is its blocking twin. Both take
`api_key`, `space_id` and `base_url`, or read `RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID` and
`RUNSTATE_BASE_URL`. `runstate.testing` runs a real kernel in-process for tests.

The run-bound API of the official 0.3.0 client is here too, under its names, as module functions
of a default client configured from the environment on first use (importing never touches the
network):

    import runstate

    @runstate.once
    def research_company(name: str) -> dict: ...

    research_company("acme")   # once per run, whoever calls it, in any process
    runstate.stop()            # every worker stops taking new work

The package is typed (`py.typed`); the answers the server sends are `TypedDict`s in
`runstate.types`, and the exceptions, one per error family, are drawn in `runstate.errors`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ._lazy import import_name

__version__ = "0.3.0"
"""This package's version (the TypeScript SDK's is the same; CHANGELOG.md tells both)."""

# Importing `runstate` imports none of the SDK's modules (nor httpx): each name is imported when it
# is first read (`__getattr__`), so `runstate.actors` and `runstate.snapshots`, which share the
# package, load without the client. The checker reads the names from these imports, which never
# run; a test checks that `__all__`, `_EXPORTS` and `_DEFAULT_FUNCTIONS` name the same things.
if TYPE_CHECKING:
    from ._bound import RunContext, RunInfo, current_context
    from ._config import Config, resolve_config
    from ._observe import RunEvent, RunState, RunStatus, Waiting, WorkerStatus
    from ._queues import Job, Queue
    from ._signal import Signal
    from ._units import Amount, Duration, Per
    from .blocking import Runstate
    from .claims import ClaimLease, ClaimRef
    from .client import AsyncRunstate, MailboxesAPI, ScopesAPI
    from .coordination import (
        BarrierHandle, BarriersAPI, DiagnosticsAPI, EventsAPI, GroupHandle, GroupsAPI, TimerHandle, TimersAPI,
    )
    from .errors import (
        ERRORS,
        AuthenticationError,
        AuthError,
        BarrierCancelledError,
        BudgetExceededError,
        ConfigError,
        ConflictError,
        CursorExpiredError,
        DeadlineExceededError,
        InternalError,
        LeaseLostError,
        NotFoundError,
        OnceFailedError,
        RateLimitError,
        ResultTooLargeError,
        RunstateError,
        ScopeCancelledError,
        StoppedError,
        TaskFailedError,
        TimeoutError,
        UnavailableError,
        UnreachableError,
        ValidationError,
        WaitTimeoutError,
        is_permanent,
        is_runstate_error,
        map_error,
    )
    from .mailboxes import Delivery, MailboxRef
    from .capacity import BudgetRef, BudgetReservation, PoolLease, PoolRef, QuotaRef  # -- capacity --
    from .scopes import ScopeHandle
    from .tasks import TaskTicket
    from .transport import HTTPTransport, SocketTransport, Transport, TransportError
    from .types import AcquireAttempt, MailboxRow, MessageView, ScopeView, TaskResult, TaskView

    _default = Runstate()
    configure = _default.configure
    run = _default.run
    child = _default.child
    run_id = _default.run_id
    arun_id = _default.arun_id
    once = _default.once
    limit = _default.limit
    take = _default.take
    atake = _default.atake
    slots = _default.slots
    budget = _default.budget
    queue = _default.queue
    serve = _default.serve
    aserve = _default.aserve
    sleep = _default.sleep
    asleep = _default.asleep
    together = _default.together
    atogether = _default.atogether
    setup = _default.setup
    asetup = _default.asetup
    stop = _default.stop
    astop = _default.astop
    finish = _default.finish
    afinish = _default.afinish
    events = _default.events
    aevents = _default.aevents
    status = _default.status
    astatus = _default.astatus

# The module of the package that defines each public name.
_MODULES: dict[str, tuple[str, ...]] = {
    "._bound": ("RunContext", "RunInfo", "current_context"),
    "._config": ("Config", "resolve_config"),
    "._observe": ("RunEvent", "RunState", "RunStatus", "Waiting", "WorkerStatus"),
    "._queues": ("Job", "Queue"),
    "._signal": ("Signal",),
    "._units": ("Amount", "Duration", "Per"),
    ".blocking": ("Runstate",),
    ".claims": ("ClaimLease", "ClaimRef"),
    ".client": ("AsyncRunstate", "MailboxesAPI", "ScopesAPI"),
    ".coordination": (
        "BarrierHandle", "BarriersAPI", "DiagnosticsAPI", "EventsAPI", "GroupHandle", "GroupsAPI",
        "TimerHandle", "TimersAPI",
    ),
    ".errors": (
        "ERRORS", "AuthenticationError", "AuthError", "BarrierCancelledError", "BudgetExceededError",
        "ConfigError", "ConflictError", "CursorExpiredError", "DeadlineExceededError", "InternalError",
        "LeaseLostError", "NotFoundError", "OnceFailedError", "RateLimitError", "ResultTooLargeError",
        "RunstateError", "ScopeCancelledError", "StoppedError", "TaskFailedError", "TimeoutError",
        "UnavailableError", "UnreachableError", "ValidationError", "WaitTimeoutError", "is_permanent",
        "is_runstate_error", "map_error",
    ),
    ".mailboxes": ("Delivery", "MailboxRef"),
    ".capacity": ("BudgetRef", "BudgetReservation", "PoolLease", "PoolRef", "QuotaRef"),
    ".scopes": ("ScopeHandle",),
    ".tasks": ("TaskTicket",),
    ".transport": ("HTTPTransport", "SocketTransport", "Transport", "TransportError"),
    ".types": ("AcquireAttempt", "MailboxRow", "MessageView", "ScopeView", "TaskResult", "TaskView"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

# The run-bound functions of the default client (0.3.0's names), made on first use.
_DEFAULT_FUNCTIONS = (
    "configure", "run", "child", "run_id", "arun_id", "once", "limit", "take", "atake", "slots", "budget",
    "queue", "serve", "aserve", "sleep", "asleep", "together", "atogether", "setup", "asetup", "stop",
    "astop", "finish", "afinish", "events", "aevents", "status", "astatus",
)
_default_lock = threading.Lock()
_made: "Runstate | None" = None


def _default_client() -> "Runstate":
    """The default client behind the module functions: nothing is read or sent before the first call."""
    global _made
    with _default_lock:
        if _made is None:
            from .blocking import Runstate

            _made = Runstate()
        return _made


def __getattr__(name: str) -> Any:
    """A public name, a function of the default client, or a module of the package, imported now
    (and kept, so this runs once a name)."""
    if name in _DEFAULT_FUNCTIONS:
        value = globals()[name] = getattr(_default_client(), name)
        return value
    if name == "_default":
        value = globals()[name] = _default_client()
        return value
    return import_name(__name__, globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    """The public names too, before they are first read (for completion and `dir()`)."""
    return sorted({*globals(), *__all__})


def context() -> RunContext | None:
    """What the current wrapped call or queue job runs under; None outside one."""
    from ._bound import current_context

    return current_context()


__all__ = [
    "__version__",
    # the run-bound API (0.3.0's names)
    "configure", "run", "child", "run_id", "arun_id", "context", "once", "limit", "take", "atake", "slots",
    "budget", "queue", "serve", "aserve", "sleep", "asleep", "together", "atogether", "setup", "asetup",
    "stop", "astop", "finish", "afinish", "events", "aevents", "status", "astatus",
    "RunContext", "RunInfo", "Signal", "Queue", "Job", "RunEvent", "RunStatus", "RunState", "WorkerStatus",
    "Waiting", "Amount", "Duration", "Per",
    # the clients and their handles
    "AsyncRunstate",
    "Runstate",
    "Config",
    "resolve_config",
    "ScopesAPI",
    "MailboxesAPI",
    "ScopeHandle",
    "ClaimRef",
    "ClaimLease",
    "MailboxRef",
    "Delivery",
    "TaskTicket",
    "Transport",
    "TransportError",
    "HTTPTransport",
    "SocketTransport",
    "TaskView",
    "TaskResult",
    "ScopeView",
    "MailboxRow",
    "MessageView",
    "AcquireAttempt",
    "RunstateError",
    "ConfigError",
    "ValidationError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "ScopeCancelledError",
    "LeaseLostError",
    "WaitTimeoutError",
    "RateLimitError",
    "UnavailableError",
    "UnreachableError",
    "InternalError",
    "CursorExpiredError",
    "StoppedError",
    "DeadlineExceededError",
    "BarrierCancelledError",
    "BudgetExceededError",
    "ResultTooLargeError",
    "OnceFailedError",
    "TaskFailedError",
    "AuthError",
    "TimeoutError",
    "ERRORS",
    "map_error",
    "is_permanent",
    "is_runstate_error",
    # -- capacity --
    "PoolRef",
    "PoolLease",
    "QuotaRef",
    "BudgetRef",
    "BudgetReservation",
    "BarrierHandle",
    "BarriersAPI",
    "TimerHandle",
    "TimersAPI",
    "GroupHandle",
    "GroupsAPI",
    "EventsAPI",
    "DiagnosticsAPI",
]
