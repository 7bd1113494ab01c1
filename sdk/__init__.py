"""runstate: the Python SDK for runstate-server.

`AsyncRunstate` is the client (asyncio or trio); `Runstate` is its blocking twin. Both take
`api_key`, `space_id` and `base_url`, or read `RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID` and
`RUNSTATE_BASE_URL`. `runstate.testing` runs a real kernel in-process for tests.

The package is typed (`py.typed`); the answers the server sends are `TypedDict`s in
`runstate.types`, and the exceptions, one per error family, are drawn in `runstate.errors`.
"""

from ._config import Config, resolve_config
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
from .transport import HTTPTransport, Transport, TransportError
from .types import AcquireAttempt, MailboxRow, MessageView, ScopeView, TaskResult, TaskView

__version__ = "0.1.0"

__all__ = [
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
