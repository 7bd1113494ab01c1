"""A thin etcd v3 client over its JSON gateway (`/v3/...`), under trio.

No etcd client library, no gRPC library: each call is one HTTP POST of a JSON body to one
member, so timeouts and member rotation stay under our control. (`EtcdClient(grpc=True)` sends
`txn` alone as a gRPC call instead, on `grpc2`'s HTTP/2 client with `etcd_proto`'s hand-written
protobuf; the same rotation, limits and errors apply. `bench/etcd_grpc.py` measures the two.) Unary calls go on connections to
the members kept open between calls (`http1.py`: each request in one write, a small answer read
by one pattern); a watch, one long stream per call, on a connection of its own, read line by
line. What it covers: `range`/`get`, `put`, `delete`, `txn` (compares on value, create/mod
revision, version and lease; success and failure branches), leases (`lease_grant`,
`lease_keepalive`, `lease_revoke`, `lease_time_to_live`, and `LeaseKeeper`, which keeps one
alive), `watch`, `compact`, `member_list` and `status`. The
encoding, the compares and operations, the answers and the errors are in `etcd_wire` (no IO),
and every public name of it is re-exported here.

Facts that bite (measured against 3.4.23 and 3.5.1; see SCALE-OUT.md), and what this module does:

- Keys and values are base64 in both directions; revisions, lease ids and TTLs travel as strings
  of digits. Callers pass `str` (UTF-8) or `bytes` and get `bytes` and `int` back.
- A field equal to its default is left out of the answer: a failed txn has no `succeeded`, a
  range that found nothing has no `kvs` and no `count`, a PUT event has no `type`. Every parser
  here reads "absent" as the default (false, 0, empty), never as an error.
- Keepalive is one POST per renewal, answered on a stream that ends after one message. Its
  answer has no `TTL` once the lease is gone: `lease_keepalive` raises `EtcdLeaseNotFound` then.
- A watch is a POST to `/v3/watch` whose answer streams newline-separated JSON, each line
  wrapped in `{"result": ...}`. The first message has `created: true` (`watch()` waits for it, so
  nothing after its header revision is missed). A start revision older than the last compaction
  answers `created` and then `canceled` with `compact_revision`: `WatchCanceled` is raised, and
  the caller must start again from a snapshot. The stream stays open after `canceled`.
- Every request but `status` carries `Grpc-Metadata-hasleader: true`. On a watch it is vital:
  without it a watch on a member cut off from the others hangs forever; with it the member ends
  the watch with "no leader" (after a few seconds) and this client moves on to another. A unary
  call is refused at once once the member knows it has no leader (a linearizable read caught
  just before that waits out its attempt). `status` goes without it: it must answer from a
  member without a leader too, since that is what it is asked to find out.
- A txn holds at most 128 operations and a request at most 1.5 MiB (etcd's defaults,
  `--max-txn-ops` and `--max-request-bytes`): both are checked before sending
  (`EtcdLimitExceeded`), since etcd's own refusal comes only after a round trip.
- A 1 s lease TTL is silently granted as 2 s under etcd's default timing (the minimum TTL is 1.5
  election timeouts); with `--heartbeat-interval 50 --election-timeout 500` it is granted as
  asked. Read the granted TTL from `LeaseGrant.ttl_s`, never assume the one asked for.
- etcd checks lease expiry every 0.5 s: a lease ends between its TTL and TTL + 0.5 s after the
  last keepalive.

Member rotation and timeouts. Callers own the timeout of a call (wrap it in `trio.fail_after` or
`move_on_after`); the client only bounds each attempt on one member by `attempt_s` (about 1 s),
so that a member that is dead or stopped gives way to the next. One call tries each member at most
once, starting with the one that answered last:

- a member that refuses the connection, or answers "no leader" or another refusal that proves
  nothing was applied, is skipped for the next at once;
- a member that does not answer within `attempt_s` (or breaks the connection, or answers
  "request timed out" / "leader changed") is skipped for reads; for writes this is ambiguous (the
  write may have been applied), so the call raises `EtcdIndeterminate` unless the caller said the
  write is `repeatable` (sending it twice is harmless);
- when every member failed, `EtcdUnavailable` says why each one did. The next call starts with
  the next member.

A fenced write is exactly the kind that is repeatable: its compares make a second copy fail. This
is how the cluster's journal writes a batch and how a candidate campaigns:

    fence = [Compare.create_revision(leader_key, "==", epoch), Compare.absent(log_key)]
    result = await etcd.txn(fence, [Op.put(log_key, batch)], [Op.get(leader_key), Op.get(log_key)],
                            repeatable=True)
    if not result.succeeded:
        leader, log = result.responses     # read back: was it our batch that got there first?

    keeper = await LeaseKeeper.grant(etcd, ttl_s=1)
    won = await etcd.txn([Compare.absent(leader_key)], [Op.put(leader_key, address, lease=keeper.lease_id)],
                         [Op.get(leader_key)])
    epoch = won.header.revision if won.succeeded else None

Lock recipes on etcd are not safe by themselves (Jepsen): fencing comes from compares against the
store, as above, never from holding a key.
"""

from __future__ import annotations

import base64
import math
from collections import deque
from contextlib import asynccontextmanager
from urllib.parse import urlsplit
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Literal, Sequence, TypeVar

import orjson
import trio

from . import etcd_proto
from .etcd_wire import (
    CODE_NOT_FOUND,
    REQUEST_BYTES_MAX,
    TXN_OPS_MAX,
    Compare,
    CompareOperator,
    DeleteResult,
    EtcdCompacted,
    EtcdError,
    EtcdFutureRevision,
    EtcdIndeterminate,
    EtcdLeaseNotFound,
    EtcdLimitExceeded,
    EtcdProtocolError,
    EtcdServerError,
    EtcdUnavailable,
    Header,
    Key,
    KeyValue,
    LeaseGrant,
    LeaseTimeToLive,
    Member,
    MemberStatus,
    Op,
    OpResult,
    PutResult,
    RangeResult,
    SortOrder,
    SortTarget,
    TxnResult,
    WatchCanceled,
    WatchEvent,
    WatchResponse,
    _b64,
    _check_key,
    _int,
    _key_bytes,
    _range_end,
    _revision,
    _server_error,
    prefix_end,
)
from .grpc2 import STATUS_OK, Channels
from .http1 import Connections, Headers, LinkError, NotReached, Progress, Stream

__all__ = [
    "ATTEMPT_S",
    "CONNECTIONS_MAX",
    "Compare",
    "CompareOperator",
    "DeleteResult",
    "EtcdClient",
    "EtcdCompacted",
    "EtcdError",
    "EtcdFutureRevision",
    "EtcdIndeterminate",
    "EtcdLeaseNotFound",
    "EtcdLimitExceeded",
    "EtcdProtocolError",
    "EtcdServerError",
    "EtcdUnavailable",
    "Header",
    "Key",
    "KeyValue",
    "LeaseGrant",
    "LeaseKeeper",
    "LeaseTimeToLive",
    "Member",
    "MemberStatus",
    "Op",
    "OpResult",
    "PutResult",
    "RangeResult",
    "REQUEST_BYTES_MAX",
    "SortOrder",
    "SortTarget",
    "TXN_OPS_MAX",
    "TxnResult",
    "Watch",
    "WatchCanceled",
    "WatchEvent",
    "WatchResponse",
    "prefix_end",
]

# How long one attempt on one member may take before the call moves on (or, for a write that is
# not repeatable, gives up as indeterminate). etcd answers in milliseconds when healthy; a write
# caught in a Raft leader change is answered only after ~6-7 s, so waiting longer than this for
# one member costs more than trying the next.
ATTEMPT_S = 1.0
# Connections to all members together: unary calls on their way at once, and watch streams.
CONNECTIONS_MAX = 1024
# Idle connections kept per member for the next unary call (the journal's writers, reads and
# keepalives rarely have more on their way at once).
IDLE_PER_MEMBER_MAX = 32

# Sent on every request but `status` (see the module docstring); `status` must answer from a
# member that has no leader too, since finding that out is what it is for.
_HEADERS: Headers = [(b"content-type", b"application/json"), (b"grpc-metadata-hasleader", b"true")]
_STATUS_HEADERS: Headers = [(b"content-type", b"application/json")]
# The same requirement on a gRPC call (the gateway passes `Grpc-Metadata-hasleader` on as this).
_METADATA: Headers = [(b"hasleader", b"true")]
_TXN_METHOD = b"/etcdserverpb.KV/Txn"
# What a gRPC method is called in `on_attempt` (the metrics): the gateway's path for it, so that
# a request keeps its name whichever way it went.
_METHOD_PATHS = {_TXN_METHOD: "/v3/kv/txn"}
# The HTTP status the gateway answers for each gRPC status (grpc-gateway's `HTTPStatusFromCode`),
# so that an error is the same `EtcdServerError` whichever way the call went (`unavailable` reads
# a status of 500 or more as "another member may serve it").
_HTTP_STATUS = {1: 408, 2: 500, 3: 400, 4: 504, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 10: 409, 11: 400,
                12: 501, 13: 500, 14: 503, 15: 500, 16: 401}

_Answer = TypeVar("_Answer")

# -- the client ---------------------------------------------------------------------------------


class _NotDelivered(Exception):
    """The request never reached the member (no connection): safe to send elsewhere."""


class _NoAnswer(Exception):
    """The request may have reached the member, and no answer came back."""


class EtcdClient:
    """A client of one etcd cluster, through any of its members' client URLs.

    `attempt_s` bounds one attempt on one member (see the module docstring); the timeout of a
    whole call is the caller's. `requests` counts the HTTP requests sent (attempts included), for
    metrics and benchmarks, and `connects` the connections made for them. Use as
    `async with EtcdClient([...]) as etcd:` or call `aclose()`.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        attempt_s: float = ATTEMPT_S,
        txn_ops_max: int = TXN_OPS_MAX,
        request_bytes_max: int = REQUEST_BYTES_MAX,
        connections_max: int = CONNECTIONS_MAX,
        grpc: bool = False,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        cleaned = [endpoint.strip().rstrip("/") for endpoint in endpoints if endpoint.strip()]
        if not cleaned:
            raise ValueError("an etcd client needs at least one endpoint (http://host:port)")
        for endpoint in cleaned:
            try:
                url = urlsplit(endpoint)
                url.port  # (a port that is not a number raises ValueError)
            except ValueError:
                raise ValueError(f"an etcd endpoint is http(s)://host:port with no path, got {endpoint!r}") from None
            if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/") or url.query or url.fragment:
                raise ValueError(f"an etcd endpoint is http(s)://host:port with no path, got {endpoint!r}")
        if not (attempt_s > 0 and math.isfinite(attempt_s)):
            raise ValueError(f"attempt_s must be a positive number of seconds, got {attempt_s!r}")
        self.endpoints = cleaned
        self.attempt_s = attempt_s
        self.txn_ops_max = txn_ops_max
        self.request_bytes_max = request_bytes_max
        self.requests = 0
        # Told the path and the seconds of every attempt that got an answer (the server's metrics).
        self.on_attempt: Callable[[str, float], None] | None = None
        # Each member's last failed attempt (trio time, what it said), until it answers again.
        self.failures: dict[str, tuple[float, str]] = {}
        self._preferred = 0
        # Unary calls and watches: the attempt's cancel scope bounds each (a watch's until it is
        # created), and whether it had a connection in hand when the scope struck tells a member
        # never reached from one that did not answer. A watch holds a connection of its own, and
        # one of the `connections_max`, for as long as it lasts.
        self._links = Connections(connections_max, IDLE_PER_MEMBER_MAX)
        # With `grpc=True`, `txn` speaks gRPC to the members (`grpc2`, `etcd_proto`): one HTTP/2
        # connection per member carries every txn on its way to it. Off by default: the members
        # spend about a fifth to a quarter less CPU on a journal's txn that way, and this process
        # about twice as much (`bench/etcd_grpc.py`, bench/README.md), which leaves the two
        # together within about a tenth of the gateway's cost; and the tests' fault-injecting
        # relay (`tests/cluster/etcd_proxy.py`) reads HTTP/1.1 only.
        self.grpc = grpc
        self._channels = Channels()

    def __repr__(self) -> str:
        return f"EtcdClient({self.endpoints!r})"

    @property
    def connects(self) -> int:
        """Connections made for unary calls so far (a call on a kept connection makes none)."""
        return self._links.connects + self._channels.connects

    @property
    def connections_busy(self) -> int:
        """Connections in use now: unary calls on their way and watches open (a txn on its way
        over gRPC counts as one, though it shares its member's connection)."""
        return self._links.busy + self._channels.busy

    async def aclose(self) -> None:
        await self._channels.aclose()
        await self._links.aclose()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- key-value ------------------------------------------------------------------------------

    async def range(
        self,
        key: Key,
        range_end: Key | None = None,
        *,
        prefix: bool = False,
        limit: int = 0,
        revision: int = 0,
        serializable: bool = False,
        keys_only: bool = False,
        count_only: bool = False,
        sort_order: SortOrder | None = None,
        sort_target: SortTarget | None = None,
    ) -> RangeResult:
        """The keys in [key, range_end), or `key` alone. `serializable` reads the answering
        member's own copy (may be stale) instead of a linearizable read through the leader."""
        op = Op.range(key, range_end, prefix=prefix, limit=limit, revision=revision, serializable=serializable,
                      keys_only=keys_only, count_only=count_only, sort_order=sort_order, sort_target=sort_target)
        return RangeResult.parse(await self._call("/v3/kv/range", op.body, repeatable=True))

    async def get(self, key: Key, *, revision: int = 0, serializable: bool = False) -> KeyValue | None:
        result = await self.range(key, revision=revision, serializable=serializable)
        return result.kvs[0] if result.kvs else None

    async def put(self, key: Key, value: Key, *, lease: int = 0, prev_kv: bool = False, repeatable: bool = False) -> PutResult:
        op = Op.put(key, value, lease=lease, prev_kv=prev_kv)
        self._check_size(op.size)
        return PutResult.parse(await self._call("/v3/kv/put", op.body, repeatable=repeatable))

    async def delete(
        self, key: Key, range_end: Key | None = None, *, prefix: bool = False, prev_kv: bool = False, repeatable: bool = False,
    ) -> DeleteResult:
        op = Op.delete(key, range_end, prefix=prefix, prev_kv=prev_kv)
        return DeleteResult.parse(await self._call("/v3/kv/deleterange", op.body, repeatable=repeatable))

    async def txn(
        self, compare: Iterable[Compare], success: Iterable[Op] = (), failure: Iterable[Op] = (), *, repeatable: bool = False,
    ) -> TxnResult:
        """If every compare holds, run `success`, else `failure`, atomically, in one revision.

        `repeatable=True` says that sending it twice is harmless (its compares make the second
        copy fail, say): then a member that does not answer gives way to the next instead of
        raising `EtcdIndeterminate`. A txn of reads only is always repeatable."""
        compares, then, otherwise = list(compare), list(success), list(failure)
        ops = len(then) + len(otherwise)
        if max(len(then), len(otherwise)) > self.txn_ops_max or len(compares) > self.txn_ops_max:
            raise EtcdLimitExceeded(
                f"a txn holds at most {self.txn_ops_max} operations and compares a branch "
                f"(got {len(compares)} compares, {len(then)} and {len(otherwise)} operations)"
            )
        self._check_size(sum(c.size_bytes() for c in compares) + sum(op.size for op in then + otherwise))
        reads_only = all(op.kind == "range" for op in then + otherwise)
        repeatable = repeatable or reads_only or ops == 0
        if not self.grpc:
            body = {
                "compare": [c.encode() for c in compares],
                "success": [op.encode() for op in then],
                "failure": [op.encode() for op in otherwise],
            }
            return TxnResult.parse(await self._call("/v3/kv/txn", body, repeatable=repeatable))
        message = etcd_proto.encode_txn([c.message() for c in compares], [(op.kind, op.message) for op in then],
                                        [(op.kind, op.message) for op in otherwise])
        answer, _ = await self._rotate(lambda endpoint: self._attempt_grpc(endpoint, _TXN_METHOD, message), repeatable)
        return TxnResult.decode(answer)

    async def compact(self, revision: int, *, physical: bool = False) -> Header:
        """Drop the history before `revision`. `physical` waits until it is gone from disk too.
        Compacting at or below an earlier compaction raises `EtcdCompacted`."""
        body: dict[str, Any] = {"revision": str(_revision("revision", revision))}
        if physical:
            body["physical"] = True
        return Header.parse((await self._call("/v3/kv/compaction", body, repeatable=True)).get("header"))

    # -- leases ---------------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int, *, lease_id: int = 0) -> LeaseGrant:
        """A new lease of `ttl_s` seconds (etcd may grant more: read `ttl_s` of the answer)."""
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
            raise ValueError(f"a lease TTL is a whole number of seconds, at least 1, got {ttl_s!r}")
        body: dict[str, Any] = {"TTL": str(ttl_s)}
        if lease_id:
            body["ID"] = str(_revision("a lease id", lease_id))
        document = await self._call("/v3/lease/grant", body, repeatable=False)
        if document.get("error"):
            raise EtcdServerError(self.endpoints[self._preferred], 200, 0, str(document["error"]))
        return LeaseGrant(Header.parse(document.get("header")), _int(document, "ID"), _int(document, "TTL"))

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew the lease once; its TTL from now, in seconds. `EtcdLeaseNotFound` once it is gone."""
        body = {"ID": str(_revision("a lease id", lease_id))}
        document = await self._call("/v3/lease/keepalive", body, repeatable=True)
        result = document.get("result")
        if not isinstance(result, dict):
            raise EtcdProtocolError(f"a keepalive answer holds no result: {document!r}")
        ttl = _int(result, "TTL")
        if ttl <= 0:
            raise EtcdLeaseNotFound(self.endpoints[self._preferred], 200, CODE_NOT_FOUND, f"lease {lease_id} is gone (keepalive answered no TTL)")
        return ttl

    async def lease_revoke(self, lease_id: int) -> bool:
        """End the lease now and delete its keys. False when it was already gone."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(_revision("a lease id", lease_id))}, repeatable=True)
        except EtcdLeaseNotFound:
            return False
        return True

    async def lease_time_to_live(self, lease_id: int, *, keys: bool = False) -> LeaseTimeToLive:
        body: dict[str, Any] = {"ID": str(_revision("a lease id", lease_id))}
        if keys:
            body["keys"] = True
        document = await self._call("/v3/lease/timetolive", body, repeatable=True)
        return LeaseTimeToLive(
            Header.parse(document.get("header")), _int(document, "ID"), _int(document, "TTL"),
            _int(document, "grantedTTL"), [base64.b64decode(k) for k in document.get("keys") or ()],
        )

    # -- cluster --------------------------------------------------------------------------------

    async def member_list(self) -> list[Member]:
        document = await self._call("/v3/cluster/member/list", {}, repeatable=True)
        return [
            Member(_int(m, "ID"), m.get("name", ""), list(m.get("peerURLs") or ()), list(m.get("clientURLs") or ()),
                   bool(m.get("isLearner", False)))
            for m in document.get("members") or ()
        ]

    async def status(self, endpoint: str | None = None) -> MemberStatus:
        """The status of `endpoint` (one of the members' client URLs, asked alone), or of any member."""
        if endpoint is None:
            document, endpoint = await self._call_any("/v3/maintenance/status", {}, repeatable=True, headers=_STATUS_HEADERS)
        else:
            endpoint = endpoint.rstrip("/")
            try:
                document = await self._attempt(endpoint, "/v3/maintenance/status", b"{}", _STATUS_HEADERS)
            except (_NotDelivered, _NoAnswer) as err:
                raise EtcdUnavailable([str(err)]) from err
        return MemberStatus(
            endpoint, Header.parse(document.get("header")), document.get("version", ""), _int(document, "dbSize"),
            _int(document, "leader"), _int(document, "raftIndex"), _int(document, "raftTerm"),
            _int(document, "raftAppliedIndex"), list(document.get("errors") or ()), bool(document.get("isLearner", False)),
        )

    # -- watch ----------------------------------------------------------------------------------

    @asynccontextmanager
    async def watch(
        self,
        key: Key,
        range_end: Key | None = None,
        *,
        prefix: bool = False,
        start_revision: int = 0,
        prev_kv: bool = False,
        progress_notify: bool = False,
        no_put: bool = False,
        no_delete: bool = False,
    ) -> AsyncIterator[Watch]:
        """Watch `key` (or a range, or a prefix) from `start_revision` (0: from now on).

        Returns once etcd has confirmed the watch (`created`); iterate the `Watch` for its
        messages. If the member's stream breaks, the watch resumes on the next member from
        `Watch.next_revision`, so no event is lost or repeated; `EtcdUnavailable` when no member
        takes it back, `WatchCanceled` when etcd ends it (a compacted start revision)."""
        data = _key_bytes(key)
        _check_key(data)
        request: dict[str, Any] = {"key": _b64(data)}
        end = _range_end(data, range_end, prefix)
        if end is not None:
            request["range_end"] = _b64(end)
        for name, flag in (("prev_kv", prev_kv), ("progress_notify", progress_notify)):
            if flag:
                request[name] = True
        filters = [name for name, flag in (("NOPUT", no_put), ("NODELETE", no_delete)) if flag]
        if filters:
            request["filters"] = filters
        watch = Watch(self, request, _revision("start_revision", start_revision))
        try:
            await watch._connect()
            yield watch
        finally:
            await watch.aclose()

    # -- requests -------------------------------------------------------------------------------

    def _check_size(self, size: int) -> None:
        if size > self.request_bytes_max:
            raise EtcdLimitExceeded(f"an etcd request holds at most {self.request_bytes_max} bytes; this one about {size}")

    async def _call(self, path: str, body: dict[str, Any], *, repeatable: bool) -> dict[str, Any]:
        document, _ = await self._call_any(path, body, repeatable=repeatable)
        return document

    async def _call_any(
        self, path: str, body: dict[str, Any], *, repeatable: bool, headers: Headers = _HEADERS,
    ) -> tuple[dict[str, Any], str]:
        """Send to each member in turn until one answers (see the module docstring for when a
        member is skipped); returns the answer and who gave it."""
        payload = orjson.dumps(body)
        return await self._rotate(lambda endpoint: self._attempt(endpoint, path, payload, headers), repeatable)

    async def _rotate(self, attempt: Callable[[str], Awaitable[_Answer]], repeatable: bool) -> tuple[_Answer, str]:
        """`attempt` on each member in turn until one answers (see the module docstring for when
        a member is skipped); returns the answer and who gave it."""
        failures: list[str] = []
        count = len(self.endpoints)
        first = self._preferred
        for step in range(count):
            index = (first + step) % count
            endpoint = self.endpoints[index]
            try:
                document = await attempt(endpoint)
            except _NotDelivered as err:
                failures.append(self._failed(endpoint, str(err)))
                continue
            except _NoAnswer as err:
                failures.append(self._failed(endpoint, str(err)))
                if not repeatable:
                    self._preferred = (index + 1) % count
                    raise EtcdIndeterminate(endpoint, str(err)) from err
                continue
            except EtcdServerError as err:
                if not err.unavailable:
                    self._preferred = index
                    raise
                failures.append(self._failed(endpoint, f"{endpoint}: {err.message}"))
                if not (repeatable or err.not_applied):
                    self._preferred = (index + 1) % count
                    raise EtcdIndeterminate(endpoint, err.message) from err
                continue
            self._preferred = index
            self.failures.pop(endpoint, None)
            return document, endpoint
        self._preferred = (first + 1) % count
        raise EtcdUnavailable(failures)

    def _failed(self, endpoint: str, reason: str) -> str:
        self.failures[endpoint] = (trio.current_time(), reason)
        return reason

    def trouble(self, within_s: float) -> list[str]:
        """What the members that failed an attempt in the last `within_s` seconds said, and
        answered nothing since (a member's "no leader": etcd lost its quorum)."""
        now = trio.current_time()
        return [reason for at, reason in self.failures.values() if now - at <= within_s]

    async def _attempt(self, endpoint: str, path: str, payload: bytes, headers: Headers = _HEADERS) -> dict[str, Any]:
        self.requests += 1
        started = trio.current_time()
        progress = Progress()
        with trio.move_on_after(self.attempt_s) as scope:
            try:
                answer = await self._links.request("POST", endpoint, path, headers, payload, progress)
            except NotReached as err:
                raise _NotDelivered(f"{endpoint}: cannot connect ({err})") from err
            except LinkError as err:  # broken off after the request began to go out, or an answer not HTTP/1.1
                raise _NoAnswer(f"{endpoint}: {type(err).__name__}: {err}") from err
        if scope.cancelled_caught:
            if not progress.connected:  # (waiting for a free connection, or connecting)
                raise _NotDelivered(f"{endpoint}: cannot connect within {self.attempt_s:g} s")
            raise _NoAnswer(f"{endpoint}: no answer within {self.attempt_s:g} s")
        if self.on_attempt is not None:
            self.on_attempt(path, trio.current_time() - started)
        return _answer(endpoint, answer.status, answer.body)


    async def _attempt_grpc(self, endpoint: str, method: bytes, message: bytes) -> bytes:
        """One gRPC call to `endpoint`; the answer's message, or the error it carries, raised."""
        self.requests += 1
        started = trio.current_time()
        progress = Progress()
        with trio.move_on_after(self.attempt_s) as scope:
            try:
                reply = await self._channels.unary(endpoint, method, _METADATA, message, progress)
            except NotReached as err:
                raise _NotDelivered(f"{endpoint}: cannot call ({err})") from err
            except LinkError as err:  # broken off after the call began to go out, or an answer not gRPC
                raise _NoAnswer(f"{endpoint}: {type(err).__name__}: {err}") from err
        if scope.cancelled_caught:
            if not progress.connected:  # (connecting)
                raise _NotDelivered(f"{endpoint}: cannot connect within {self.attempt_s:g} s")
            raise _NoAnswer(f"{endpoint}: no answer within {self.attempt_s:g} s")
        if self.on_attempt is not None:
            self.on_attempt(_METHOD_PATHS[method], trio.current_time() - started)
        if reply.status != STATUS_OK:
            raise _server_error(endpoint, _HTTP_STATUS.get(reply.status, 500), reply.status, reply.message)
        return reply.payload


def _answer(endpoint: str, status: int, content: bytes) -> dict[str, Any]:
    """The JSON document of a unary answer, or the error it carries, raised."""
    try:
        # A streamed answer (keepalive) is one JSON document per line: the first is the one.
        document = orjson.loads(content.split(b"\n", 1)[0] if content.startswith(b'{"result"') else content)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        raise _stream_error(endpoint, document["error"])  # the gateway's error inside a stream
    if status == 200 and isinstance(document, dict):
        return document
    if isinstance(document, dict) and ("code" in document or "error" in document):
        message = document.get("message") or document.get("error") or ""
        raise _server_error(endpoint, status, int(document.get("code") or 0), str(message))
    if status >= 500 or status == 200:
        # Not the gateway speaking (a proxy, a member shutting down): as if it had not answered.
        raise _NoAnswer(f"{endpoint}: answered {status} with {content[:200]!r}")
    raise EtcdProtocolError(f"etcd at {endpoint} answered {status} with {content[:200]!r}")


def _stream_error(endpoint: str, error: dict[str, Any]) -> EtcdServerError:
    """An error sent inside a stream: `{"error": {"grpc_code", "http_code", "message"}}`."""
    message = str(error.get("message", ""))
    return _server_error(endpoint, int(error.get("http_code") or 500), int(error.get("grpc_code") or 0), message)


class Watch:
    """One watch, made by `EtcdClient.watch()`: `async for response in watch` gives its messages.

    `header` is the header of the `created` message; `next_revision` the first revision not yet
    delivered (where a new watch would resume). The stream is read on a connection of its own
    (`http1.Connections.stream`), line by line: every message that came whole is delivered,
    in order, before a break of the stream is noticed."""

    def __init__(self, client: EtcdClient, request: dict[str, Any], start_revision: int) -> None:
        self._client = client
        self._request = request
        self.next_revision = start_revision
        self.header = Header(0, 0, 0, 0)
        self.endpoint = ""
        self.resumed = 0  # how many times the stream was taken up again on another member
        self._stream: Stream | None = None
        self._lines: deque[bytes] = deque()  # messages read and not yet delivered

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchResponse:
        lines = self._lines
        while True:
            if self._stream is None:
                await self._connect()
                self.resumed += 1
            if not lines:
                assert self._stream is not None
                try:
                    more = await self._stream.read_lines()
                except LinkError as err:
                    await self._drop(f"{type(err).__name__}: {err}")
                    continue
                if not more:
                    await self._drop("the stream ended")
                    continue
                lines.extend(more)
            line = lines.popleft()
            if not line or line.isspace():
                continue
            try:
                result = self._result(line)
            except EtcdServerError as err:
                if not err.unavailable:
                    raise
                await self._drop(err.message)
                continue
            if result.get("created"):
                continue  # taken up again on another member: its own `created` says nothing new
            return self._deliver(result)

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        self._lines.clear()
        if stream is not None:
            await stream.aclose()

    def _deliver(self, result: dict[str, Any]) -> WatchResponse:
        header = Header.parse(result.get("header"))
        events = []
        for raw in result.get("events") or ():
            prev = raw.get("prev_kv")
            kind: Literal["PUT", "DELETE"] = "DELETE" if raw.get("type") == "DELETE" else "PUT"
            events.append(WatchEvent(kind, KeyValue.parse(raw.get("kv") or {}), None if prev is None else KeyValue.parse(prev)))
        if events:
            self.next_revision = max(self.next_revision, events[-1].kv.mod_revision + 1)
        elif header.revision:
            self.next_revision = max(self.next_revision, header.revision + 1)
        return WatchResponse(header, events)

    def _result(self, line: bytes) -> dict[str, Any]:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as err:
            raise EtcdProtocolError(f"a watch message is not JSON: {line[:200]!r}") from err
        if not isinstance(message, dict):
            raise EtcdProtocolError(f"a watch message is not a JSON object: {line[:200]!r}")
        error = message.get("error")
        if isinstance(error, dict):
            raise _stream_error(self.endpoint, error)
        result = message.get("result")
        if not isinstance(result, dict):
            raise EtcdProtocolError(f"a watch message holds no result: {line[:200]!r}")
        if result.get("canceled"):
            raise WatchCanceled(_int(result, "compact_revision"), str(result.get("cancel_reason", "")))
        return result

    async def _drop(self, reason: str) -> None:
        """The stream broke: close it; the next read takes the watch up on the next member."""
        client = self._client
        failed = client.endpoints.index(self.endpoint) if self.endpoint in client.endpoints else client._preferred
        client._preferred = (failed + 1) % len(client.endpoints)
        await self.aclose()

    async def _connect(self) -> None:
        """Open the stream on the first member that confirms the watch (`created`)."""
        client = self._client
        failures: list[str] = []
        count = len(client.endpoints)
        first = client._preferred
        for step in range(count):
            index = (first + step) % count
            endpoint = client.endpoints[index]
            try:
                await self._open(endpoint)
            except (_NotDelivered, _NoAnswer) as err:
                failures.append(str(err))
                await self.aclose()
                continue
            except EtcdServerError as err:
                await self.aclose()
                if not err.unavailable:
                    raise
                failures.append(f"{endpoint}: {err.message}")
                continue
            except BaseException:
                await self.aclose()
                raise
            client._preferred = index
            return
        client._preferred = (first + 1) % count
        raise EtcdUnavailable(failures)

    async def _open(self, endpoint: str) -> None:
        """Open the stream on `endpoint` and wait, within one attempt, for its `created`; the
        messages that came with it wait in `_lines` for the first read."""
        client = self._client
        request = dict(self._request)
        if self.next_revision:
            request["start_revision"] = str(self.next_revision)
        payload = orjson.dumps({"create_request": request})
        self.endpoint = endpoint
        client.requests += 1
        progress = Progress()
        created: dict[str, Any] | None = None
        lines = self._lines
        lines.clear()
        with trio.move_on_after(client.attempt_s) as scope:
            try:
                self._stream = stream = await client._links.stream("POST", endpoint, "/v3/watch", _HEADERS, payload, progress)
                if stream.status != 200:
                    _answer(endpoint, stream.status, await stream.read_body())  # raises the error it carries
                    raise EtcdProtocolError(f"etcd at {endpoint} refused a watch with {stream.status}")
                while created is None:
                    if not lines:
                        more = await stream.read_lines()
                        if not more:
                            raise _NoAnswer(f"{endpoint}: the watch stream ended before it was created")
                        lines.extend(more)
                    line = lines.popleft()
                    if line and not line.isspace():
                        created = self._result(line)
            except NotReached as err:
                raise _NotDelivered(f"{endpoint}: cannot connect ({err})") from err
            except LinkError as err:
                raise _NoAnswer(f"{endpoint}: {type(err).__name__}: {err}") from err
        if scope.cancelled_caught:
            if not progress.connected:  # (waiting for a free connection, or connecting)
                raise _NotDelivered(f"{endpoint}: cannot connect within {client.attempt_s:g} s")
            raise _NoAnswer(f"{endpoint}: the watch was not created within {client.attempt_s:g} s")
        assert created is not None
        if not created.get("created"):
            raise EtcdProtocolError(f"the first message of a watch is not `created`: {created!r}")
        self.header = Header.parse(created.get("header"))
        if not self.next_revision:
            self.next_revision = self.header.revision + 1


class LeaseKeeper:
    """Keeps one lease alive with a keepalive every `ttl_s / 3`, and says until when it surely is.

    `deadline` (trio's clock) is the moment before which etcd cannot have ended the lease: each
    keepalive's TTL counts from the moment the keepalive was *sent*, never from its answer, so a
    slow answer shortens it rather than stretching it. A holder that must not act without the
    lease (a leader) stops at `deadline`, whatever it has heard (`alive` is false past it).

    A keepalive goes out every `interval_s` whether or not the one before was answered, as etcd's
    own client sends them on its stream: an answer that comes late or never costs nothing while a
    later one gets through, and etcd, which renews the lease when a keepalive *arrives*, sees it
    renewed on time. (Waiting for each answer before the next, a lost answer would hold the next
    keepalive back for a whole attempt, 1 s, which with a 1 s TTL lets etcd end the lease.) At most
    `IN_FLIGHT_MAX` are on their way at once; one that fails at once (no member answered) is sent
    again after `RETRY_S`. When the lease is gone, `lost` is set, `lost_reason` says why and
    `run()` returns.

    Past the deadline, by default the lease counts as lost too. With `outlive_deadline`, the
    keeper goes on asking instead, and only etcd's word ends it: a keepalive answered with a TTL
    proves the lease was never ended (an ended lease cannot be renewed), so the holder may act
    again from the new deadline (`wait_alive` returns then); "lease not found" sets `lost`. This
    is what rides through an election of etcd's own Raft leader (0.5-2 s in which no keepalive is
    answered, and after which etcd's new leader extends every lease) without giving up what the
    lease holds; `lapses` counts the deadlines that passed so.

        keeper = await LeaseKeeper.grant(etcd, ttl_s=1)
        nursery.start_soon(keeper.run)
    """

    # The pause before a keepalive that failed at once is sent again.
    RETRY_S = 0.05
    # Keepalives on their way at once (each bounded by one attempt per member).
    IN_FLIGHT_MAX = 4

    def __init__(self, client: EtcdClient, lease_id: int, ttl_s: int, deadline: float, *, outlive_deadline: bool = False) -> None:
        self.client = client
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self.deadline = deadline
        self.interval_s = max(ttl_s / 3, 0.1)
        self.outlive_deadline = outlive_deadline
        self.lost = trio.Event()
        self.lost_reason = ""
        self.last_error: BaseException | None = None  # of the last keepalive that failed
        self.keepalives = 0
        self.lapses = 0  # deadlines that passed before etcd answered again (with `outlive_deadline`)
        # Set by each keepalive answered (then made anew), and when the lease is lost: what a
        # waiter for the lease to be alive again waits on (`wait_alive`).
        self.answered = trio.Event()
        self._again = trio.Event()  # a keepalive failed at once (or the lease was lost): look again now
        self._in_flight = 0
        self._failed_sent = -math.inf  # when the keepalive whose failure `last_error` is was sent

    @classmethod
    async def grant(cls, client: EtcdClient, ttl_s: int, *, outlive_deadline: bool = False) -> LeaseKeeper:
        """Grant a lease and make its keeper; the deadline counts from before the grant was sent."""
        sent = trio.current_time()
        grant = await client.lease_grant(ttl_s)
        return cls(client, grant.lease_id, grant.ttl_s, sent + grant.ttl_s, outlive_deadline=outlive_deadline)

    @property
    def alive(self) -> bool:
        return not self.lost.is_set() and trio.current_time() < self.deadline

    async def wait_alive(self) -> None:
        """Return once the lease is alive (at once if it is), or lost: after a lapse, as soon as a
        keepalive is answered, not at the next poll of `alive`. Callers own the timeout."""
        while not self.alive and not self.lost.is_set():
            await self.answered.wait()

    async def run(self) -> None:
        """Keep the lease alive until cancelled or lost (then return, with `lost` set)."""
        next_at = self.deadline - self.ttl_s + self.interval_s
        lapsed = False
        async with trio.open_nursery() as nursery:
            while not self.lost.is_set():
                with trio.move_on_at(next_at if lapsed else min(next_at, self.deadline)):
                    await self._again.wait()
                if self.lost.is_set():
                    break
                now = trio.current_time()
                if now < self.deadline:
                    lapsed = False
                elif not lapsed:
                    reason = (f"no keepalive was answered before the lease's deadline ({self.ttl_s} s TTL); "
                              f"the last failure: {self.last_error}")
                    if not self.outlive_deadline:
                        self._lose(reason)
                        break
                    lapsed = True
                    self.lapses += 1
                    self.lost_reason = reason
                if self._again.is_set() or now >= next_at:
                    self._again = trio.Event()
                    if self._in_flight < self.IN_FLIGHT_MAX:
                        nursery.start_soon(self._renew, now)
                    next_at = now + self.interval_s
            nursery.cancel_scope.cancel()

    async def _renew(self, sent: float) -> None:
        """One keepalive, sent at `sent`: the deadline moves to `sent` + the TTL etcd answers."""
        self._in_flight += 1
        try:
            # Past every member's attempt, so that the client's own account of each (a member
            # that says it has no leader, one that does not answer) is what `last_error` keeps.
            bound_s = self.client.attempt_s * len(self.client.endpoints) + 1.0
            with trio.move_on_after(bound_s):
                ttl = await self.client.lease_keepalive(self.lease_id)
                self.keepalives += 1
                self.deadline = max(self.deadline, sent + ttl)
                self._tell()
                return
            self._failed(sent, EtcdUnavailable([f"no keepalive answer within {bound_s:g} s"]))
        except EtcdLeaseNotFound as err:
            self._lose(str(err))
        except EtcdError as err:  # no member answered, or not as expected: ask again soon
            self._failed(sent, err)
            await trio.sleep(self.RETRY_S)
            self._again.set()
        finally:
            self._in_flight -= 1

    def _failed(self, sent: float, error: BaseException) -> None:
        """Keep the failure of the newest keepalive sent (several may be on their way, and an older
        one that ends later says less about now)."""
        if sent >= self._failed_sent:
            self._failed_sent = sent
            self.last_error = error

    async def revoke(self) -> bool:
        """End the lease now (its keys go with it); False when it was already gone."""
        self._lose("revoked")
        return await self.client.lease_revoke(self.lease_id)

    def _tell(self) -> None:
        self.answered.set()
        self.answered = trio.Event()

    def _lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()
            self._tell()
            self._again.set()
