"""runstate: the Python SDK for runstate-server.

`AsyncRunstate` is the client (asyncio or trio); `Runstate` is its blocking twin. Both take
`api_key`, `space_id` and `base_url`, or read `RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID` and
`RUNSTATE_BASE_URL`. `runstate.testing` runs a real kernel in-process for tests.
"""

from ._config import Config, resolve_config
from .blocking import Runstate
from .claims import ClaimLease, ClaimRef
from .client import AsyncRunstate, MailboxesAPI, ScopesAPI
from .coordination import (
    BarrierHandle, BarriersAPI, DiagnosticsAPI, EventsAPI, GroupHandle, GroupsAPI, TimerHandle, TimersAPI,
)
from .errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    CursorExpiredError,
    LeaseLostError,
    NotFoundError,
    RateLimitError,
    RunstateError,
    ScopeCancelledError,
    UnavailableError,
    WaitTimeoutError,
    map_error,
)
from .mailboxes import Delivery, MailboxRef
from .scopes import ScopeHandle
from .tasks import TaskTicket
from .transport import HTTPTransport, Transport, TransportError

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
    "RunstateError",
    "ConfigError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "ScopeCancelledError",
    "LeaseLostError",
    "WaitTimeoutError",
    "RateLimitError",
    "UnavailableError",
    "CursorExpiredError",
    "map_error",
    "BarrierHandle",
    "BarriersAPI",
    "TimerHandle",
    "TimersAPI",
    "GroupHandle",
    "GroupsAPI",
    "EventsAPI",
    "DiagnosticsAPI",
]
