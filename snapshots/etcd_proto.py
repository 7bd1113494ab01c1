"""etcd's protobuf messages for a transaction (`KV/Txn`), encoded and decoded by hand, without IO.

Only what a txn carries: `TxnRequest` (its `Compare`s and `RequestOp`s: range, put, delete) one
way and `TxnResponse` (its header, `succeeded`, and the `ResponseOp`s of the branch that ran) the
other. Field numbers are those of etcd's `etcdserverpb/rpc.proto` and `mvccpb/kv.proto` (3.4 and
3.5 agree). Protobuf's wire format is small: a field is a key (its number shifted left by three,
or'ed with its wire type) and then a varint (type 0) or a length and that many bytes (type 2); a
message inside another is a length-delimited field; proto3 leaves out a field equal to its
default, so every decoder here reads "absent" as the default (0, false, empty) -- exactly as the
JSON gateway's answers must be read (`etcd_wire`). A field of a type or number not known here is
skipped, as protobuf requires, so that a newer etcd's additions do not break the decoder.

The decoder checks every length against the bytes left before slicing: a truncated or corrupt
answer raises `ProtoError`, never an `IndexError` or a result made of garbage. This module must not
be confused with `etcd_wire`'s JSON encoding: that one is the gateway's, this one gRPC's.
"""

from __future__ import annotations

from typing import Iterable

__all__ = [
    "ProtoError",
    "encode_varint",
    "encode_compare",
    "encode_range",
    "encode_put",
    "encode_delete",
    "encode_txn",
    "decode_txn_response",
    "ProtoKeyValue",
    "ProtoHeader",
    "ProtoOpResult",
    "ProtoTxnResponse",
]

# Wire types.
_VARINT = 0
_FIXED64 = 1
_LENGTH = 2
_FIXED32 = 5

# `Compare.CompareResult` and `Compare.CompareTarget`.
COMPARE_RESULTS = {"==": 0, ">": 1, "<": 2, "!=": 3}
COMPARE_TARGETS = {"VERSION": 0, "CREATE": 1, "MOD": 2, "VALUE": 3, "LEASE": 4}
# The field of `Compare.target_union` that holds the operand, by target.
_COMPARE_OPERAND_FIELDS = {"VERSION": 4, "CREATE": 5, "MOD": 6, "VALUE": 7, "LEASE": 8}
# `RangeRequest.SortOrder` and `RangeRequest.SortTarget`.
SORT_ORDERS = {"NONE": 0, "ASCEND": 1, "DESCEND": 2}
SORT_TARGETS = {"KEY": 0, "VERSION": 1, "CREATE": 2, "MOD": 3, "VALUE": 4}
# `RequestOp.request` / `ResponseOp.response`: which field holds which operation.
OP_FIELDS = {"range": 1, "put": 2, "delete": 3}


class ProtoError(ValueError):
    """Bytes that are not the protobuf message they were read as."""


# -- encoding -----------------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """A varint: seven bits a byte, least significant first. A negative int64 is sent as its
    two's complement in 64 bits (ten bytes), as protobuf does."""
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return encode_varint(number << 3 | wire_type)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _key(number, _LENGTH) + encode_varint(len(data)) + data


def _int_field(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + encode_varint(value) if value else b""


def encode_compare(key: bytes, target: str, operator: str, operand: bytes | int) -> bytes:
    """A `Compare`. The operand is always sent, 0 or empty included: it is a member of a oneof,
    which protobuf sends whenever it is set, and it says which member is meant."""
    out = _int_field(1, COMPARE_RESULTS[operator]) + _int_field(2, COMPARE_TARGETS[target]) + _bytes_field(3, key)
    number = _COMPARE_OPERAND_FIELDS[target]
    if isinstance(operand, bytes):
        return out + _bytes_field(number, operand)
    return out + _key(number, _VARINT) + encode_varint(operand)


def encode_range(key: bytes, range_end: bytes | None, *, limit: int = 0, revision: int = 0, sort_order: str | None = None,
                 sort_target: str | None = None, serializable: bool = False, keys_only: bool = False,
                 count_only: bool = False) -> bytes:
    """A `RangeRequest`."""
    out = _bytes_field(1, key)
    if range_end is not None:
        out += _bytes_field(2, range_end)
    out += _int_field(3, limit) + _int_field(4, revision)
    if sort_order is not None:
        if sort_order not in SORT_ORDERS:
            raise ValueError(f"a sort order is one of {', '.join(SORT_ORDERS)}, got {sort_order!r}")
        out += _int_field(5, SORT_ORDERS[sort_order])
    if sort_target is not None:
        if sort_target not in SORT_TARGETS:
            raise ValueError(f"a sort target is one of {', '.join(SORT_TARGETS)}, got {sort_target!r}")
        out += _int_field(6, SORT_TARGETS[sort_target])
    return out + _int_field(7, serializable) + _int_field(8, keys_only) + _int_field(9, count_only)


def encode_put(key: bytes, value: bytes, *, lease: int = 0, prev_kv: bool = False) -> bytes:
    """A `PutRequest`."""
    return _bytes_field(1, key) + _bytes_field(2, value) + _int_field(3, lease) + _int_field(4, prev_kv)


def encode_delete(key: bytes, range_end: bytes | None, *, prev_kv: bool = False) -> bytes:
    """A `DeleteRangeRequest`."""
    out = _bytes_field(1, key)
    if range_end is not None:
        out += _bytes_field(2, range_end)
    return out + _int_field(3, prev_kv)


def encode_txn(compares: Iterable[bytes], success: Iterable[tuple[str, bytes]], failure: Iterable[tuple[str, bytes]]) -> bytes:
    """A `TxnRequest` of encoded `Compare`s and operations (each its kind and its encoded request)."""
    parts = [_bytes_field(1, compare) for compare in compares]
    for number, ops in ((2, success), (3, failure)):
        parts.extend(_bytes_field(number, _bytes_field(OP_FIELDS[kind], request)) for kind, request in ops)
    return b"".join(parts)


# -- decoding -----------------------------------------------------------------------------------

# One decoded field: its number, its wire type, and its value (an int, or the bytes it holds).
_Field = tuple[int, int, "int | bytes"]


def _fields(data: bytes) -> list[_Field]:
    """Every field of a message, in order."""
    fields: list[_Field] = []
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtoError(f"a field numbered 0 at byte {position}")
        if wire_type == _VARINT:
            value, position = _varint(data, position)
            fields.append((number, wire_type, value))
        elif wire_type == _LENGTH:
            length, position = _varint(data, position)
            if length > end - position:
                raise ProtoError(f"field {number} says {length} bytes, {end - position} are left")
            fields.append((number, wire_type, data[position:position + length]))
            position += length
        elif wire_type in (_FIXED64, _FIXED32):
            size = 8 if wire_type == _FIXED64 else 4
            if size > end - position:
                raise ProtoError(f"field {number} needs {size} bytes, {end - position} are left")
            fields.append((number, wire_type, int.from_bytes(data[position:position + size], "little")))
            position += size
        else:
            raise ProtoError(f"field {number} has wire type {wire_type}, which protobuf 3 does not send")
    return fields


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    end = len(data)
    while True:
        if position >= end:
            raise ProtoError("a varint runs past the end of the message")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift >= 70:
            raise ProtoError("a varint longer than ten bytes")


def _int64(value: int) -> int:
    """A varint read as int64 (a negative one came as its two's complement in 64 bits)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _as_int(number: int, wire_type: int, value: int | bytes) -> int:
    if wire_type != _VARINT or not isinstance(value, int):
        raise ProtoError(f"field {number} should be a varint, has wire type {wire_type}")
    return value


def _as_bytes(number: int, wire_type: int, value: int | bytes) -> bytes:
    if wire_type != _LENGTH or not isinstance(value, bytes):
        raise ProtoError(f"field {number} should be length-delimited, has wire type {wire_type}")
    return value


class ProtoHeader:
    """A `ResponseHeader`: cluster_id 1, member_id 2, revision 3, raft_term 4."""

    __slots__ = ("cluster_id", "member_id", "revision", "raft_term")

    def __init__(self, data: bytes) -> None:
        values = [0, 0, 0, 0]
        for number, wire_type, value in _fields(data):
            if 1 <= number <= 4:
                values[number - 1] = _as_int(number, wire_type, value)
        self.cluster_id, self.member_id, revision, self.raft_term = values
        self.revision = _int64(revision)


class ProtoKeyValue:
    """An `mvccpb.KeyValue`: key 1, create_revision 2, mod_revision 3, version 4, value 5, lease 6."""

    __slots__ = ("key", "create_revision", "mod_revision", "version", "value", "lease")

    def __init__(self, data: bytes) -> None:
        self.key = self.value = b""
        self.create_revision = self.mod_revision = self.version = self.lease = 0
        for number, wire_type, value in _fields(data):
            if number == 1:
                self.key = _as_bytes(number, wire_type, value)
            elif number == 5:
                self.value = _as_bytes(number, wire_type, value)
            elif number == 2:
                self.create_revision = _int64(_as_int(number, wire_type, value))
            elif number == 3:
                self.mod_revision = _int64(_as_int(number, wire_type, value))
            elif number == 4:
                self.version = _int64(_as_int(number, wire_type, value))
            elif number == 6:
                self.lease = _int64(_as_int(number, wire_type, value))


class ProtoOpResult:
    """One `ResponseOp`: its kind ("range", "put", "delete") and what it holds.

    range (`RangeResponse`): header 1, kvs 2, more 3, count 4; put (`PutResponse`): header 1,
    prev_kv 2; delete (`DeleteRangeResponse`): header 1, deleted 2, prev_kvs 3."""

    __slots__ = ("kind", "header", "kvs", "more", "count", "deleted")

    def __init__(self, kind: str, data: bytes) -> None:
        self.kind = kind
        self.header: ProtoHeader | None = None
        self.kvs: list[ProtoKeyValue] = []  # a range's kvs, a put's prev_kv, a delete's prev_kvs
        self.more = False
        self.count = self.deleted = 0
        kvs_field = {"range": 2, "put": 2, "delete": 3}[kind]
        for number, wire_type, value in _fields(data):
            if number == 1:
                self.header = ProtoHeader(_as_bytes(number, wire_type, value))
            elif number == kvs_field:
                self.kvs.append(ProtoKeyValue(_as_bytes(number, wire_type, value)))
            elif kind == "range" and number == 3:
                self.more = bool(_as_int(number, wire_type, value))
            elif kind == "range" and number == 4:
                self.count = _int64(_as_int(number, wire_type, value))
            elif kind == "delete" and number == 2:
                self.deleted = _int64(_as_int(number, wire_type, value))


class ProtoTxnResponse:
    """A `TxnResponse`: header 1, succeeded 2, responses 3 (each a `ResponseOp`)."""

    __slots__ = ("header", "succeeded", "responses")

    def __init__(self, header: ProtoHeader | None, succeeded: bool, responses: list[ProtoOpResult]) -> None:
        self.header = header
        self.succeeded = succeeded
        self.responses = responses


_OP_KINDS = {number: kind for kind, number in OP_FIELDS.items()}


def decode_txn_response(data: bytes) -> ProtoTxnResponse:
    header: ProtoHeader | None = None
    succeeded = False
    responses: list[ProtoOpResult] = []
    for number, wire_type, value in _fields(data):
        if number == 1:
            header = ProtoHeader(_as_bytes(number, wire_type, value))
        elif number == 2:
            succeeded = bool(_as_int(number, wire_type, value))
        elif number == 3:
            inner = _fields(_as_bytes(number, wire_type, value))
            if len(inner) != 1:
                raise ProtoError(f"a txn answer holds a response of {len(inner)} fields, not one operation's")
            ((kind_number, kind_type, body),) = inner
            kind = _OP_KINDS.get(kind_number)
            if kind is None:
                raise ProtoError(f"a txn answer holds a response of unknown kind (field {kind_number})")
            responses.append(ProtoOpResult(kind, _as_bytes(kind_number, kind_type, body)))
    return ProtoTxnResponse(header, succeeded, responses)
