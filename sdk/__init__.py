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

__version__ = "0.3.0"
"""This package's version (the TypeScript SDK's is the same; CHANGELOG.md tells both)."""

# The default client behind the module functions: nothing is read or sent before the first call.
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


def context() -> RunContext | None:
    """What the current wrapped call or queue job runs under; None outside one."""
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
