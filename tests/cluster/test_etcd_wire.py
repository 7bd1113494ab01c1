"""The etcd client's encoding and parsing, without etcd: what the JSON gateway sends, field by field,
including the answers a healthy member never gives (errors inside a stream, a proxy's 502, a
malformed txn answer), which the tests against a real etcd cannot provoke."""

from __future__ import annotations

import base64

import orjson
import pytest

from runstate.snapshots import etcd as etcd_module
from runstate.snapshots.etcd import (
    Compare,
    EtcdCompacted,
    EtcdLeaseNotFound,
    EtcdProtocolError,
    EtcdServerError,
    Header,
    KeyValue,
    Op,
    RangeResult,
    TxnResult,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_absent_fields_read_as_their_defaults() -> None:
    """etcd leaves out every field equal to its default: false, 0 and empty are read for them."""
    failed = TxnResult.parse({"header": {"revision": "7"}})
    assert failed.succeeded is False and failed.responses == [] and failed.header == Header(0, 0, 7, 0)
    empty = RangeResult.parse({"header": {}})
    assert empty.kvs == [] and empty.count == 0 and empty.more is False
    kv = KeyValue.parse({"key": b64(b"k"), "mod_revision": "9"})  # a DELETE event's kv
    assert kv == KeyValue(b"k", b"", 0, 9, 0, 0)


def test_a_txn_answer_is_parsed_by_the_kind_of_each_response() -> None:
    """Each response of the branch that ran is parsed as what it answers; an unknown kind, or a
    response that is not one operation's, is a protocol error rather than a silent skip."""
    document = {
        "header": {"revision": "5", "member_id": "3"},
        "succeeded": True,
        "responses": [
            {"response_range": {"header": {"revision": "5"}, "kvs": [{"key": b64(b"a"), "value": b64(b"1"), "version": "1"}], "count": "1"}},
            {"response_put": {"header": {"revision": "5"}}},
            {"response_delete_range": {"header": {"revision": "5"}, "deleted": "2"}},
        ],
    }
    result = TxnResult.parse(document)
    assert result.succeeded and result.header.member_id == 3
    ranged, put, deleted = result.responses
    assert isinstance(ranged, RangeResult) and ranged.kvs[0].value == b"1" and ranged.count == 1
    assert put.header.revision == 5 and deleted.deleted == 2  # type: ignore[union-attr]
    with pytest.raises(EtcdProtocolError, match="unknown kind"):
        TxnResult.parse({"responses": [{"response_txn": {}}]})
    with pytest.raises(EtcdProtocolError, match="not one operation"):
        TxnResult.parse({"responses": [{"response_put": {}, "response_range": {}}]})


def test_compares_and_operations_encode_as_the_gateway_expects() -> None:
    """Keys and values in base64, numbers as strings, the target's own field name, and only the
    options asked for."""
    assert Compare.create_revision("l", "==", 12).encode() == {"key": b64(b"l"), "target": "CREATE", "result": "EQUAL", "create_revision": "12"}
    assert Compare.absent(b"x").encode()["create_revision"] == "0"
    assert Compare.value("k", "!=", b"\x00").encode() == {"key": b64(b"k"), "target": "VALUE", "result": "NOT_EQUAL", "value": b64(b"\x00")}
    assert Compare.mod_revision("k", "<", 3).encode()["mod_revision"] == "3"
    assert Compare.version("k", ">", 1).encode()["result"] == "GREATER"
    assert Compare.lease("k", "==", 99).encode()["lease"] == "99"
    assert Op.put("k", "v", lease=5).encode() == {"request_put": {"key": b64(b"k"), "value": b64(b"v"), "lease": "5"}}
    assert Op.get("k").encode() == {"request_range": {"key": b64(b"k")}}
    ranged = Op.range("p/", prefix=True, limit=1, sort_order="ASCEND", sort_target="CREATE").encode()["request_range"]
    assert ranged == {"key": b64(b"p/"), "range_end": b64(b"p0"), "limit": "1", "sort_order": "ASCEND", "sort_target": "CREATE"}
    assert Op.delete("p/", prefix=True, prev_kv=True).encode() == {
        "request_delete_range": {"key": b64(b"p/"), "range_end": b64(b"p0"), "prev_kv": True}}
    with pytest.raises(ValueError):
        Compare.create_revision("k", "==", -1)
    with pytest.raises(TypeError):
        Op.put("k", 5)  # type: ignore[arg-type]


def test_answers_map_to_errors_that_say_what_happened() -> None:
    """A unary error names etcd's code and message, typed where callers must tell it apart; an
    error inside a stream (`{"error": {...}}`) is read the same way; a proxy's or a dying member's
    non-JSON 5xx means no answer; any other non-JSON answer is a protocol error."""
    answer = etcd_module._answer
    body = orjson.dumps({"error": "etcdserver: mvcc: required revision has been compacted", "code": 11,
                         "message": "etcdserver: mvcc: required revision has been compacted"})
    with pytest.raises(EtcdCompacted) as compacted:
        answer("http://m1", 400, body)
    assert compacted.value.code == 11 and compacted.value.status == 400 and "m1" in str(compacted.value)
    lease = orjson.dumps({"error": "etcdserver: requested lease not found", "code": 5, "message": "etcdserver: requested lease not found"})
    with pytest.raises(EtcdLeaseNotFound):
        answer("http://m1", 404, lease)
    stream = orjson.dumps({"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader", "http_status": "Service Unavailable"}})
    with pytest.raises(EtcdServerError) as no_leader:
        answer("http://m1", 200, stream)
    assert no_leader.value.unavailable and no_leader.value.not_applied
    timed_out = orjson.dumps({"error": "etcdserver: request timed out", "code": 14, "message": "etcdserver: request timed out"})
    with pytest.raises(EtcdServerError) as ambiguous:
        answer("http://m1", 503, timed_out)
    assert ambiguous.value.unavailable and not ambiguous.value.not_applied
    with pytest.raises(etcd_module._NoAnswer):
        answer("http://m1", 502, b"<html>Bad Gateway</html>")
    with pytest.raises(EtcdProtocolError):
        answer("http://m1", 400, b"not json")
    keepalive = b'{"result":{"header":{"revision":"3"},"ID":"7","TTL":"2"}}\n\n'
    assert answer("http://m1", 200, keepalive) == {"result": {"header": {"revision": "3"}, "ID": "7", "TTL": "2"}}
