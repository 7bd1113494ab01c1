"""The shell's own typed views: the answers no kernel read makes, the error envelope, the
health probe's answer, a batch's results, history's answers (`history.py`, `history_views.py`), and the admin's and a key's answers the shell puts together (a new key's
secret, which the kernel never holds; the spaces' rows; the key of a request). Their wire is
declared in `wire/` (`errors.py`, `health.py`, `operations.py`, `history.py`, `keys.py`, `spaces.py`) like the kernel's views, so
the encoder and the OpenAPI components come from one declaration.

Named tuples: the envelope is made on every refusal, and a named tuple is the cheapest typed
value to make (orjson hands it to the wire's encoder like any view).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from ..actors.events import EventView
from ..actors.keys import Role
from ..actors.shapes import EpochMs, JsonObject

__all__ = [
    "ErrorView", "ErrorEnvelopeView", "HealthView", "CreatedKeyView", "RequestKeyView", "AdminKeyView", "SpaceRowView", "SpacesView",
    "BatchResultView", "BatchView", "PointView", "AsOfView", "KeptPointView", "KeptView", "HistoryView", "CountsView",
    "CursorsView", "DiffView",
]


class ErrorView(NamedTuple):
    """A refusal: its code (which picks the official client's exception), what happened, the
    request's id, and the facts a caller can act on (`details`: who holds a claim, until when),
    left out of the answer where there are none."""

    code: str
    message: str
    request_id: str
    details: JsonObject | None = None


class ErrorEnvelopeView(NamedTuple):
    """Every answer of 400 and above: `{"error": {...}}`."""

    error: ErrorView


class HealthView(NamedTuple):
    """`/healthz`'s answer: `ok` (ready, takes changes) or `live` (the liveness probe)."""

    status: Literal["ok", "live"]


class CreatedKeyView(NamedTuple):
    """A key just registered: its view (`ApiKeyView`'s fields), then its secret, shown in this
    answer only (never kept)."""

    id: str
    name: str | None
    spaces: tuple[str, ...]
    role: Role
    created_ms: EpochMs
    revoked_ms: EpochMs | None
    key: str


class RequestKeyView(NamedTuple):
    """The API key a request carries (`GET /v1/key`): its view (`ApiKeyView`'s fields), then
    `admin` (false)."""

    id: str
    name: str | None
    spaces: tuple[str, ...]
    role: Role
    created_ms: EpochMs
    revoked_ms: EpochMs | None
    admin: bool


class AdminKeyView(NamedTuple):
    """The admin key, as `GET /v1/key` answers it: no id, name, spaces, role or times of its own
    (None and empty: it opens every space), and `admin` true."""

    id: str | None
    name: str | None
    spaces: tuple[str, ...]
    created_ms: EpochMs | None
    revoked_ms: EpochMs | None
    admin: bool


class SpaceRowView(NamedTuple):
    """A space as the admin lists it: the keys that open it (not revoked), its runs, its claims
    held now and the operations counted for it."""

    id: str
    keys: int
    runs: int
    claims_live: int
    operations: int


class SpacesView(NamedTuple):
    """Every space the server knows (one a key opens, or one that holds runs), by id."""

    spaces: tuple[SpaceRowView, ...]


class BatchResultView(NamedTuple):
    """One operation of a batch: the status the route alone would answer, then its answer
    (`body`: the kernel's reply, none for a 204 or a refusal), or its refusal (`error`, the error
    envelope's) and, where the route alone would send `Retry-After`, its seconds."""

    status: int
    body: JsonObject | None = None
    error: ErrorView | None = None
    retry_after: float | None = None


class BatchView(NamedTuple):
    """A batch's answer: one result per operation, in order."""

    results: tuple[BatchResultView, ...]


class PointView(NamedTuple):
    """Where a past state stands, as an answer says it (`asOf`): the last record of the space's
    partition applied (`lsn`), the time the state is judged at (`now_ms`: leases, deadlines),
    `lsn:N` to ask for its records again (judged at `record_ms`), the partition, the time of the newest record up
    to `lsn` (None: none), the snapshot it was rebuilt from and the records applied on top of it."""

    lsn: int
    now_ms: EpochMs
    cursor: str
    partition: int
    record_ms: EpochMs | None
    snapshot_lsn: int
    records_replayed: int


class AsOfView(NamedTuple):
    """What a history read adds to the answer it twins: where its point stands."""

    as_of: PointView


class KeptPointView(NamedTuple):
    """A point kept: its LSN, and its time (None: the very beginning)."""

    lsn: int
    at_ms: EpochMs | None


class KeptView(NamedTuple):
    """What a space's partition keeps of its history: the oldest point, the newest, the retention
    and checkpoint settings, and the bytes of its snapshots and WAL on disk."""

    partition: int
    oldest: KeptPointView
    newest: KeptPointView
    retention_seconds: float
    checkpoint_every_records: int
    disk_bytes: int


class HistoryView(NamedTuple):
    """`GET .../history`: what is kept, and with `at`, where that point stands."""

    space_id: str
    kept: KeptView
    as_of: PointView | None = None


class CountsView(NamedTuple):
    """How many stood in one state at each of two points."""

    from_count: int
    to: int


class CursorsView(NamedTuple):
    """The event log's cursors at two points."""

    from_cursor: str
    to: str


class DiffView(NamedTuple):
    """`GET .../history/diff`: what changed in a space between two points. `changes` lists the
    events made between them, oldest first, at most CHANGES_MAX (`truncated`: more were made)."""

    space_id: str
    from_point: PointView
    to_point: PointView
    events: dict[str, int]
    causes: dict[str, dict[str, int]]
    records: dict[str, int]
    states: dict[str, dict[str, CountsView]]
    changes: tuple[EventView, ...]
    truncated: bool
    event_cursors: CursorsView
