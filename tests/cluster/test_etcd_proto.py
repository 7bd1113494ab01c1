"""etcd's protobuf messages for a txn (`runstate.snapshots.etcd_proto`), against bytes made by hand.

Each expected message is written out field by field (key byte: field number << 3 | wire type),
from etcd's `rpc.proto` and `kv.proto`, so that a wrong field number, wire type or default shows.
"""

from __future__ import annotations

import pytest

from runstate.snapshots import etcd_proto
from runstate.snapshots.etcd import Compare, DeleteResult, EtcdProtocolError, Op, PutResult, RangeResult, TxnResult
from runstate.snapshots.grpc2 import frame, unframe
from runstate.snapshots.http1 import LinkError


def test_varints_are_seven_bits_a_byte_least_significant_first_and_negatives_take_ten_bytes() -> None:
    """The varint encoding of protobuf's own examples: 1, 150, 300, and -1 as an int64."""
    assert etcd_proto.encode_varint(0) == b"\x00"
    assert etcd_proto.encode_varint(1) == b"\x01"
    assert etcd_proto.encode_varint(150) == b"\x96\x01"
    assert etcd_proto.encode_varint(300) == b"\xac\x02"
    assert etcd_proto.encode_varint(-1) == b"\xff" * 9 + b"\x01"


def test_a_compare_sends_its_operand_even_when_zero_and_leaves_out_default_enums() -> None:
    """result 1 (EQUAL is 0: left out), target 2, key 3, and the oneof's member (create_revision 5,
    value 7, version 4) sent even when 0 or empty."""
    assert Compare.absent("k").message() == b"\x10\x01" b"\x1a\x01k" b"\x28\x00"
    assert Compare.create_revision("k", "==", 300).message() == b"\x10\x01" b"\x1a\x01k" b"\x28\xac\x02"
    assert Compare.value("k", "!=", b"") .message() == b"\x08\x03" b"\x10\x03" b"\x1a\x01k" b"\x3a\x00"
    assert Compare.version("k", ">", 2).message() == b"\x08\x01" b"\x1a\x01k" b"\x20\x02"
    assert Compare.mod_revision("k", "<", 7).message() == b"\x08\x02" b"\x10\x02" b"\x1a\x01k" b"\x30\x07"
    assert Compare.lease("k", "==", 9).message() == b"\x10\x04" b"\x1a\x01k" b"\x40\x09"


def test_operations_encode_their_requests_field_by_field() -> None:
    """PutRequest (key 1, value 2, lease 3, prev_kv 4), RangeRequest (key 1, range_end 2, limit 3,
    revision 4, sort_order 5, sort_target 6, serializable 7, keys_only 8, count_only 9),
    DeleteRangeRequest (key 1, range_end 2, prev_kv 3); defaults left out."""
    assert Op.put("k", b"v").message == b"\x0a\x01k\x12\x01v"
    assert Op.put("k", b"", lease=300, prev_kv=True).message == b"\x0a\x01k\x12\x00\x18\xac\x02\x20\x01"
    assert Op.get("k").message == b"\x0a\x01k"
    assert Op.range("a", prefix=True, limit=2, revision=5, sort_order="DESCEND", sort_target="MOD", serializable=True,
                    keys_only=True, count_only=True).message == (
        b"\x0a\x01a\x12\x01b\x18\x02\x20\x05\x28\x02\x30\x03\x38\x01\x40\x01\x48\x01")
    assert Op.delete("a", "c", prev_kv=True).message == b"\x0a\x01a\x12\x01c\x18\x01"
    with pytest.raises(ValueError, match="sort order"):
        Op.range("a", sort_order="UP")  # type: ignore[arg-type]


def test_a_txn_request_nests_compares_and_each_branch_s_operations() -> None:
    """TxnRequest: compare 1, success 2, failure 3, each operation a RequestOp (range 1, put 2,
    delete_range 3) holding its request."""
    compare = Compare.absent("k").message()
    message = etcd_proto.encode_txn([compare], [("put", Op.put("k", b"v").message)],
                                    [("range", Op.get("k").message), ("delete", Op.delete("k").message)])
    assert message == (b"\x0a\x07" + compare
                       + b"\x12\x08" + b"\x12\x06" + b"\x0a\x01k\x12\x01v"
                       + b"\x1a\x05" + b"\x0a\x03" + b"\x0a\x01k"
                       + b"\x1a\x05" + b"\x1a\x03" + b"\x0a\x01k")


def _field(number: int, data: bytes) -> bytes:
    return etcd_proto.encode_varint(number << 3 | 2) + etcd_proto.encode_varint(len(data)) + data


def test_a_txn_response_decodes_to_the_same_results_the_gateway_s_json_gives() -> None:
    """TxnResponse (header 1, succeeded 2, responses 3) with a ResponseOp of each kind; absent
    fields read as defaults, a negative int64 comes back negative, unknown fields are skipped."""
    header = b"\x08\x07\x10\x03\x18\xac\x02\x20\x02"  # cluster 7, member 3, revision 300, term 2
    kv = _field(1, b"k") + b"\x10\x05\x18\x06\x20\x01" + _field(5, b"v") + b"\x30" + b"\xff" * 9 + b"\x01"
    range_answer = _field(1, b"\x18\xac\x02") + _field(2, kv) + b"\x18\x01\x20\x02"
    put_answer = _field(1, b"") + _field(2, kv)
    delete_answer = b"\x10\x04" + _field(3, kv)
    message = (_field(1, header) + b"\x10\x01" + _field(3, _field(1, range_answer)) + _field(3, _field(2, put_answer))
               + _field(3, _field(3, delete_answer)) + _field(99, b"later etcd") + b"\xa0\x06\x05")
    result = TxnResult.decode(message)
    kv_expected = (b"k", b"v", 5, 6, 1, -1)
    assert (result.header.cluster_id, result.header.member_id, result.header.revision, result.header.raft_term) == (7, 3, 300, 2)
    assert result.succeeded
    ranged, put, deleted = result.responses
    assert isinstance(ranged, RangeResult) and ranged.header.revision == 300 and ranged.more and ranged.count == 2
    assert [(k.key, k.value, k.create_revision, k.mod_revision, k.version, k.lease) for k in ranged.kvs] == [kv_expected]
    assert isinstance(put, PutResult) and put.prev_kv is not None and put.prev_kv.value == b"v"
    assert isinstance(deleted, DeleteResult) and deleted.deleted == 4 and len(deleted.prev_kvs) == 1
    empty = TxnResult.decode(b"")
    assert not empty.succeeded and empty.responses == [] and empty.header.revision == 0


@pytest.mark.parametrize("message", [
    b"\x0a\x05\x08",                       # a header that says 5 bytes, 1 is left
    b"\x10",                               # a varint cut off
    b"\x1a\x02\x08\x01",                   # a response holding a field that is no operation
    b"\x1a\x02\x2a\x00",                   # a response of an unknown kind (field 5)
    b"\x0b",                               # wire type 3 (groups), never sent by protobuf 3
    b"\x08" + b"\xff" * 11,                # a varint longer than ten bytes
])
def test_a_corrupt_txn_response_is_a_protocol_error_not_garbage(message: bytes) -> None:
    """Every length is checked against the bytes left; a malformed answer raises EtcdProtocolError."""
    with pytest.raises(EtcdProtocolError):
        TxnResult.decode(message)


def test_grpc_frames_a_message_behind_its_flag_and_big_endian_length() -> None:
    """One message: flag 0, length in four bytes big-endian; anything else is refused."""
    assert frame(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert unframe(b"\x00\x00\x00\x00\x03abc") == b"abc"
    for bad in (b"\x00\x00\x00", b"\x01\x00\x00\x00\x01a", b"\x00\x00\x00\x00\x02a", b"\x00\x00\x00\x00\x01ab"):
        with pytest.raises(LinkError):
            unframe(bad)
