"""What the etcd client sends and reads, without IO: compares and operations, the answers, errors.

The JSON gateway's encoding is handled here and only here: keys and values are base64, revisions,
lease ids and TTLs are strings of digits, and a field equal to its default is left out of an
answer (a failed txn has no `succeeded`), so every parser reads "absent" as the default (false, 0,
empty). Callers pass `str` (UTF-8) or `bytes` and get `bytes` and `int` back. `runstate.snapshots.etcd`
is the client that carries these over HTTP, and re-exports every public name of this module.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence, Union

from . import etcd_proto

__all__ = [
    "Compare",
    "CompareOperator",
    "DeleteResult",
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
    "WatchCanceled",
    "WatchEvent",
    "WatchResponse",
    "prefix_end",
]

# etcd's defaults for --max-txn-ops and --max-request-bytes.
TXN_OPS_MAX = 128
REQUEST_BYTES_MAX = 1_572_864
# A request's encoded size is estimated as its keys and values plus this much per field, so the
# check errs on the safe side of etcd's own (protobuf) count.
FIELD_OVERHEAD_BYTES = 16

# gRPC status codes the gateway reports (`code`).
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_NOT_FOUND = 5
CODE_FAILED_PRECONDITION = 9
CODE_OUT_OF_RANGE = 11
CODE_UNAVAILABLE = 14
# Refusals etcd sends before a request reaches Raft: such a write was surely not applied, so it
# is safe to send it to another member.
_NOT_APPLIED = ("no leader", "too many requests", "not capable", "unhealthy cluster", "proposal dropped")

Key = Union[str, bytes]
CompareOperator = Literal["==", "!=", ">", "<"]
_RESULTS = {"==": "EQUAL", "!=": "NOT_EQUAL", ">": "GREATER", "<": "LESS"}
SortOrder = Literal["NONE", "ASCEND", "DESCEND"]
SortTarget = Literal["KEY", "VERSION", "CREATE", "MOD", "VALUE"]


# -- errors -------------------------------------------------------------------------------------


class EtcdError(Exception):
    """Anything this client raises about etcd. Subclasses:

    EtcdError
    ├── EtcdUnavailable      no member answered (each one's reason in `failures`); nothing applied
    ├── EtcdIndeterminate    a write was sent and not answered: it may or may not have been applied
    ├── EtcdServerError      etcd answered with an error (`code`, `message`, `status`)
    │   ├── EtcdCompacted        the revision asked for has been compacted away
    │   ├── EtcdFutureRevision   the revision asked for is not there yet
    │   └── EtcdLeaseNotFound    the lease has expired or was revoked (or never existed)
    ├── EtcdLimitExceeded    refused before sending: over TXN_OPS_MAX or REQUEST_BYTES_MAX
    ├── EtcdProtocolError    an answer the gateway does not send (not JSON, wrong shape)
    └── WatchCanceled        the server ended a watch (`compact_revision` when compacted)
    """


class EtcdUnavailable(EtcdError):
    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = list(failures)
        super().__init__("no etcd member answered: " + "; ".join(self.failures))


class EtcdIndeterminate(EtcdError):
    """A write went to `endpoint` and no answer came back: read back before assuming either way."""

    def __init__(self, endpoint: str, reason: str) -> None:
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(f"etcd at {endpoint} did not answer a write ({reason}): it may or may not have been applied")


class EtcdServerError(EtcdError):
    def __init__(self, endpoint: str, status: int, code: int, message: str) -> None:
        self.endpoint = endpoint
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"etcd at {endpoint} answered {status} (code {code}): {message}")

    @property
    def unavailable(self) -> bool:
        """The member could not serve it now (no leader, timed out, ...): another one may."""
        return self.code in (CODE_UNAVAILABLE, CODE_DEADLINE_EXCEEDED) or self.status >= 500

    @property
    def not_applied(self) -> bool:
        """Refused before it reached Raft: a write that got this was surely not applied."""
        return any(marker in self.message for marker in _NOT_APPLIED)


class EtcdCompacted(EtcdServerError):
    pass


class EtcdFutureRevision(EtcdServerError):
    pass


class EtcdLeaseNotFound(EtcdServerError):
    pass


class EtcdLimitExceeded(EtcdError, ValueError):
    pass


class EtcdProtocolError(EtcdError):
    pass


class WatchCanceled(EtcdError):
    def __init__(self, compact_revision: int, reason: str) -> None:
        self.compact_revision = compact_revision
        self.reason = reason
        if compact_revision:
            text = f"etcd canceled the watch: revisions up to {compact_revision} have been compacted"
        else:
            text = f"etcd canceled the watch: {reason or 'no reason given'}"
        super().__init__(text)


def _server_error(endpoint: str, status: int, code: int, message: str) -> EtcdServerError:
    if "has been compacted" in message:
        return EtcdCompacted(endpoint, status, code, message)
    if "future revision" in message:
        return EtcdFutureRevision(endpoint, status, code, message)
    if "lease not found" in message:
        return EtcdLeaseNotFound(endpoint, status, code, message)
    return EtcdServerError(endpoint, status, code, message)


# -- what etcd answers --------------------------------------------------------------------------


def _int(document: dict[str, Any], name: str) -> int:
    value = document.get(name)
    return 0 if value is None else int(value)


def _bytes(document: dict[str, Any], name: str) -> bytes:
    value = document.get(name)
    return base64.b64decode(value) if value else b""


@dataclass(frozen=True, slots=True)
class Header:
    """The answering member and the store's revision when it answered."""

    cluster_id: int
    member_id: int
    revision: int
    raft_term: int

    @classmethod
    def parse(cls, document: dict[str, Any] | None) -> Header:
        document = document or {}
        return cls(_int(document, "cluster_id"), _int(document, "member_id"), _int(document, "revision"), _int(document, "raft_term"))


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def parse(cls, document: dict[str, Any]) -> KeyValue:
        return cls(
            _bytes(document, "key"), _bytes(document, "value"), _int(document, "create_revision"),
            _int(document, "mod_revision"), _int(document, "version"), _int(document, "lease"),
        )


@dataclass(frozen=True, slots=True)
class RangeResult:
    header: Header
    kvs: list[KeyValue]
    count: int
    more: bool

    @classmethod
    def parse(cls, document: dict[str, Any]) -> RangeResult:
        kvs = [KeyValue.parse(kv) for kv in document.get("kvs") or ()]
        return cls(Header.parse(document.get("header")), kvs, _int(document, "count"), bool(document.get("more", False)))


@dataclass(frozen=True, slots=True)
class PutResult:
    header: Header
    prev_kv: KeyValue | None

    @classmethod
    def parse(cls, document: dict[str, Any]) -> PutResult:
        prev = document.get("prev_kv")
        return cls(Header.parse(document.get("header")), None if prev is None else KeyValue.parse(prev))


@dataclass(frozen=True, slots=True)
class DeleteResult:
    header: Header
    deleted: int
    prev_kvs: list[KeyValue]

    @classmethod
    def parse(cls, document: dict[str, Any]) -> DeleteResult:
        prev = [KeyValue.parse(kv) for kv in document.get("prev_kvs") or ()]
        return cls(Header.parse(document.get("header")), _int(document, "deleted"), prev)


OpResult = Union[RangeResult, PutResult, DeleteResult]
_OP_RESULTS: dict[str, type[RangeResult] | type[PutResult] | type[DeleteResult]] = {
    "response_range": RangeResult, "response_put": PutResult, "response_delete_range": DeleteResult,
}


@dataclass(frozen=True, slots=True)
class TxnResult:
    """`responses` answer the branch that ran (success or failure), in order. The headers inside
    them carry only the revision."""

    header: Header
    succeeded: bool
    responses: list[OpResult]

    @classmethod
    def parse(cls, document: dict[str, Any]) -> TxnResult:
        responses: list[OpResult] = []
        for response in document.get("responses") or ():
            if not isinstance(response, dict) or len(response) != 1:
                raise EtcdProtocolError(f"a txn answer holds a response that is not one operation's: {response!r}")
            ((kind, body),) = response.items()
            parser = _OP_RESULTS.get(kind)
            if parser is None:
                raise EtcdProtocolError(f"a txn answer holds a response of unknown kind {kind!r}")
            responses.append(parser.parse(body or {}))
        return cls(Header.parse(document.get("header")), bool(document.get("succeeded", False)), responses)

    @classmethod
    def decode(cls, message: bytes) -> TxnResult:
        """From gRPC's answer (a protobuf `TxnResponse`); `EtcdProtocolError` if it is not one."""
        try:
            answer = etcd_proto.decode_txn_response(message)
        except etcd_proto.ProtoError as err:
            raise EtcdProtocolError(f"a txn answer is not a TxnResponse: {err}") from err
        responses: list[OpResult] = []
        for op in answer.responses:
            header = _header(op.header)
            kvs = [KeyValue(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease) for kv in op.kvs]
            if op.kind == "range":
                responses.append(RangeResult(header, kvs, op.count, op.more))
            elif op.kind == "put":
                responses.append(PutResult(header, kvs[0] if kvs else None))
            else:
                responses.append(DeleteResult(header, op.deleted, kvs))
        return cls(_header(answer.header), answer.succeeded, responses)


def _header(header: etcd_proto.ProtoHeader | None) -> Header:
    if header is None:
        return Header(0, 0, 0, 0)
    return Header(header.cluster_id, header.member_id, header.revision, header.raft_term)


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    header: Header
    lease_id: int
    ttl_s: int  # as granted, which may be longer than asked (see the module docstring)


@dataclass(frozen=True, slots=True)
class LeaseTimeToLive:
    header: Header
    lease_id: int
    ttl_s: int  # seconds left; -1 when the lease is gone
    granted_ttl_s: int  # 0 when the lease is gone
    keys: list[bytes]

    @property
    def alive(self) -> bool:
        return self.ttl_s >= 0


@dataclass(frozen=True, slots=True)
class Member:
    member_id: int
    name: str  # empty for a member added but not started yet
    peer_urls: list[str]
    client_urls: list[str]
    is_learner: bool


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """One member's own view (`status()`): which member it thinks leads, and its Raft position."""

    endpoint: str
    header: Header
    version: str
    db_size: int
    leader_id: int
    raft_index: int
    raft_term: int
    raft_applied_index: int
    errors: list[str]
    is_learner: bool

    @property
    def is_leader(self) -> bool:
        return self.leader_id != 0 and self.leader_id == self.header.member_id


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: Literal["PUT", "DELETE"]
    kv: KeyValue  # for a DELETE, only the key and the mod revision of the deletion
    prev_kv: KeyValue | None  # only when the watch asked for prev_kv


@dataclass(frozen=True, slots=True)
class WatchResponse:
    """One message of a watch: events of one or more revisions, or (no events) a progress note
    saying that everything up to `header.revision` has been sent."""

    header: Header
    events: list[WatchEvent]


# -- what we send -------------------------------------------------------------------------------


def _key_bytes(key: Key) -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"an etcd key or value is str or bytes, got {type(key).__name__}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: Key) -> bytes:
    """The range end that covers every key starting with `prefix` (etcd's `GetPrefixRangeEnd`):
    the prefix with its last byte below 0xff incremented and what follows dropped; `b"\\0"` (every
    key) for an empty prefix or one of only 0xff bytes."""
    data = bytearray(_key_bytes(prefix))
    for index in range(len(data) - 1, -1, -1):
        if data[index] < 0xFF:
            data[index] += 1
            return bytes(data[: index + 1])
    return b"\0"


def _range_end(key: bytes, range_end: Key | None, prefix: bool) -> bytes | None:
    if prefix:
        if range_end is not None:
            raise ValueError("give either prefix=True or range_end, not both")
        return prefix_end(key)
    return None if range_end is None else _key_bytes(range_end)


def _check_key(key: bytes) -> None:
    if not key:
        raise ValueError("an etcd key must not be empty")


def _revision(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer of 0 or more, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a txn. Build it with the class methods: `Compare.value(key, "==", b"x")`,
    `Compare.create_revision(key, "==", epoch)`, `Compare.absent(key)`, ... A key that does not
    exist compares as create revision, mod revision and version 0 and value empty."""

    key: bytes
    target: Literal["VALUE", "CREATE", "MOD", "VERSION", "LEASE"]
    operator: CompareOperator
    operand: bytes | int

    @classmethod
    def value(cls, key: Key, operator: CompareOperator, value: Key) -> Compare:
        return cls._make(key, "VALUE", operator, _key_bytes(value))

    @classmethod
    def create_revision(cls, key: Key, operator: CompareOperator, revision: int) -> Compare:
        return cls._make(key, "CREATE", operator, _revision("a create revision", revision))

    @classmethod
    def mod_revision(cls, key: Key, operator: CompareOperator, revision: int) -> Compare:
        return cls._make(key, "MOD", operator, _revision("a mod revision", revision))

    @classmethod
    def version(cls, key: Key, operator: CompareOperator, version: int) -> Compare:
        return cls._make(key, "VERSION", operator, _revision("a version", version))

    @classmethod
    def lease(cls, key: Key, operator: CompareOperator, lease_id: int) -> Compare:
        return cls._make(key, "LEASE", operator, _revision("a lease id", lease_id))

    @classmethod
    def absent(cls, key: Key) -> Compare:
        """The key does not exist (its create revision is 0)."""
        return cls.create_revision(key, "==", 0)

    @classmethod
    def present(cls, key: Key) -> Compare:
        return cls.create_revision(key, ">", 0)

    @classmethod
    def _make(cls, key: Key, target: Any, operator: CompareOperator, operand: bytes | int) -> Compare:
        if operator not in _RESULTS:
            raise ValueError(f"a compare operator is one of {', '.join(_RESULTS)}, got {operator!r}")
        data = _key_bytes(key)
        _check_key(data)
        return cls(data, target, operator, operand)

    def encode(self) -> dict[str, Any]:
        document: dict[str, Any] = {"key": _b64(self.key), "target": self.target, "result": _RESULTS[self.operator]}
        if self.target == "VALUE":
            assert isinstance(self.operand, bytes)
            document["value"] = _b64(self.operand)
        else:
            name = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version", "LEASE": "lease"}[self.target]
            document[name] = str(self.operand)
        return document

    def message(self) -> bytes:
        """This compare as gRPC sends it (a protobuf `Compare`)."""
        return etcd_proto.encode_compare(self.key, self.target, self.operator, self.operand)

    def size_bytes(self) -> int:
        return len(self.key) + (len(self.operand) if isinstance(self.operand, bytes) else 0) + FIELD_OVERHEAD_BYTES


def _no_message() -> bytes:
    raise ValueError("this operation was made without its gRPC form: make it with Op.range, get, put or delete")


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a txn's branch: `Op.get(key)`, `Op.range(...)`, `Op.put(...)`, `Op.delete(...)`."""

    kind: Literal["range", "put", "delete"]
    body: dict[str, Any]  # as the JSON gateway takes it
    size: int = field(default=0)
    # Makes the operation as gRPC takes it (`message`), only when asked: a client on the gateway
    # never pays for it.
    encoder: Callable[[], bytes] = field(default=_no_message, compare=False, repr=False)

    @property
    def message(self) -> bytes:
        """This operation as gRPC takes it (a protobuf `RangeRequest`, `PutRequest`, ...)."""
        return self.encoder()

    @classmethod
    def range(
        cls,
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
    ) -> Op:
        data = _key_bytes(key)
        _check_key(data)
        body: dict[str, Any] = {"key": _b64(data)}
        end = _range_end(data, range_end, prefix)
        if end is not None:
            body["range_end"] = _b64(end)
        if limit:
            body["limit"] = str(_revision("limit", limit))
        if revision:
            body["revision"] = str(_revision("revision", revision))
        for name, flag in (("serializable", serializable), ("keys_only", keys_only), ("count_only", count_only)):
            if flag:
                body[name] = True
        if sort_order is not None:
            body["sort_order"] = sort_order
        if sort_target is not None:
            body["sort_target"] = sort_target
        if sort_order is not None and sort_order not in etcd_proto.SORT_ORDERS:
            raise ValueError(f"a sort order is one of {', '.join(etcd_proto.SORT_ORDERS)}, got {sort_order!r}")
        if sort_target is not None and sort_target not in etcd_proto.SORT_TARGETS:
            raise ValueError(f"a sort target is one of {', '.join(etcd_proto.SORT_TARGETS)}, got {sort_target!r}")

        def encoder() -> bytes:
            return etcd_proto.encode_range(data, end, limit=limit, revision=revision, sort_order=sort_order,
                                           sort_target=sort_target, serializable=serializable, keys_only=keys_only,
                                           count_only=count_only)

        return cls("range", body, len(data) + len(end or b"") + FIELD_OVERHEAD_BYTES, encoder)

    @classmethod
    def get(cls, key: Key, *, revision: int = 0, serializable: bool = False) -> Op:
        return cls.range(key, revision=revision, serializable=serializable)

    @classmethod
    def put(cls, key: Key, value: Key, *, lease: int = 0, prev_kv: bool = False) -> Op:
        data, payload = _key_bytes(key), _key_bytes(value)
        _check_key(data)
        body: dict[str, Any] = {"key": _b64(data), "value": _b64(payload)}
        if lease:
            body["lease"] = str(_revision("a lease id", lease))
        if prev_kv:
            body["prev_kv"] = True
        return cls("put", body, len(data) + len(payload) + FIELD_OVERHEAD_BYTES,
                   lambda: etcd_proto.encode_put(data, payload, lease=lease, prev_kv=prev_kv))

    @classmethod
    def delete(cls, key: Key, range_end: Key | None = None, *, prefix: bool = False, prev_kv: bool = False) -> Op:
        data = _key_bytes(key)
        _check_key(data)
        body: dict[str, Any] = {"key": _b64(data)}
        end = _range_end(data, range_end, prefix)
        if end is not None:
            body["range_end"] = _b64(end)
        if prev_kv:
            body["prev_kv"] = True
        return cls("delete", body, len(data) + len(end or b"") + FIELD_OVERHEAD_BYTES,
                   lambda: etcd_proto.encode_delete(data, end, prev_kv=prev_kv))

    def encode(self) -> dict[str, Any]:
        name = {"range": "request_range", "put": "request_put", "delete": "request_delete_range"}[self.kind]
        return {name: self.body}
