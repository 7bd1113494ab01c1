"""The plain request heads the doors read without h11 (`heads.plain_request`).

A head read there must mean exactly what h11 reads in it, and every head h11 would refuse must be
left to h11 (so its refusal, with the envelope, stays the one the server gives). The property test
builds heads out of good and bad pieces and holds the two readers to that.
"""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.server.heads import INLINE_BODY_MAX, plain_request as _plain_request

HEAD_MAX = 16 * 1024


def _h11_reads(data: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], int] | None:
    """What h11 makes of the request at the start of `data`: method, target, headers and body
    length, or None when it refuses it or needs more bytes."""
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_MAX)
    connection.receive_data(data)
    try:
        request = connection.next_event()
        if type(request) is not h11.Request:
            return None
        length = 0
        while True:
            event = connection.next_event()
            if type(event) is h11.Data:
                length += len(event.data)
            elif type(event) is h11.EndOfMessage:
                return request.method, request.target, list(request.headers), length
            else:
                return None
    except h11.RemoteProtocolError:
        return None


def _ours(data: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], int] | None:
    plain = _plain_request(data, HEAD_MAX)
    if plain is None:
        return None
    method, target, headers, body_at, length = plain
    if len(data) < body_at + length:  # the body is still on its way: the doors hand it to h11
        return None
    return method, target, headers, length


def test_the_usual_sdk_request_is_plain():
    data = (b"POST /v1/spaces/default/claims/k/claim HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
            b"Authorization: Bearer rs_abc\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    method, target, headers, body_at, length = _plain_request(data, HEAD_MAX)
    assert (method, target, length) == (b"POST", b"/v1/spaces/default/claims/k/claim", 2)
    assert data[body_at:body_at + length] == b"{}"
    assert headers == [(b"host", b"127.0.0.1:8080"), (b"authorization", b"Bearer rs_abc"),
                       (b"content-type", b"application/json"), (b"content-length", b"2")]
    assert _ours(data) == _h11_reads(data)


@pytest.mark.parametrize("data", [
    b"GET /v1/x HTTP/1.1\r\n\r\n",  # no Host
    b"GET /v1/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",  # two
    b"GET /v1/x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
    b"GET /v1/x HTTP/1.0\r\nHost: a\r\n\r\n",  # 1.0: its keep-alive rules are h11's
    b"GET /v1/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\nx",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % (INLINE_BODY_MAX + 1),
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
    b"GET /v1/x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",  # obs-fold
    b"GET /v1/x HTTP/1.1\r\nHost: a\nX: b\r\n\r\n",  # a bare LF
    b"GET /v1/x HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",  # a bare CR
    b"GET /v1/x HTTP/1.1\r\nHost : a\r\n\r\n",  # space before the colon
    b"GET /v1/x HTTP/1.1\r\nHost: a\x00\r\n\r\n",
    b"GET /v1/x\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",  # not the API
    b"HEAD /v1/x HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /v1/x HTTP/1.1\r\nHost: a\r\n",  # the head not whole yet
    b"\r\nGET /v1/x HTTP/1.1\r\nHost: a\r\n\r\n",
])
def test_what_is_not_plain_is_left_to_h11(data: bytes):
    assert _plain_request(data, HEAD_MAX) is None


def test_a_head_longer_than_the_bound_is_left_to_h11():
    data = b"GET /v1/x HTTP/1.1\r\nHost: a\r\nX: " + b"y" * HEAD_MAX + b"\r\n\r\n"
    assert _plain_request(data, HEAD_MAX) is None


def test_spaces_around_a_value_are_not_part_of_it():
    data = b"GET /v1/x HTTP/1.1\r\nHost: \t a b \t\r\nX-Empty:\r\n\r\n"
    assert _ours(data) == _h11_reads(data)
    assert _ours(data)[2] == [(b"host", b"a b"), (b"x-empty", b"")]


_NAMES = st.sampled_from([b"Host", b"host", b"Authorization", b"Content-Length", b"content-length", b"Connection",
                          b"X-Thing", b"Transfer-Encoding", b"Expect", b"Upgrade", b"Bad Name", b"", b"X\x00"])
_VALUES = st.one_of(
    st.sampled_from([b"a", b"Bearer k", b"0", b"2", b"02", b"-1", b"1 2", b"keep-alive", b"Keep-Alive", b"close",
                     b"chunked", b"100-continue", b" padded\t", b"", b"\x7f", b"a\rb", b"\xff"]),
    st.binary(max_size=6),
)
_LINES = st.sampled_from([b"GET /v1/x HTTP/1.1", b"POST /v1/a/b?c=d HTTP/1.1", b"DELETE /v1/%20 HTTP/1.1",
                          b"GET /v1/x HTTP/1.0", b"GET /v1/x HTTP/2.0", b"GET  /v1/x HTTP/1.1", b"GET /v2/x HTTP/1.1",
                          b"get /v1/x HTTP/1.1", b"PUT /v1/\xc3\xa9 HTTP/1.1", b"PATCH /v1/x HTTP/1.1"])


_SEPARATORS = st.sampled_from([b": ", b":", b":\t", b":  "])
_GOOD = st.one_of(
    st.tuples(st.sampled_from([b"Authorization", b"authorization"]), _SEPARATORS, st.sampled_from([b"Bearer k", b"Basic x"])),
    st.tuples(st.sampled_from([b"Content-Length", b"content-length"]), _SEPARATORS, st.sampled_from([b"0", b"1", b"2", b"007"])),
    st.tuples(st.sampled_from([b"Connection"]), _SEPARATORS, st.sampled_from([b"keep-alive", b"Keep-Alive"])),
    st.tuples(st.sampled_from([b"X-Thing", b"Content-Type", b"Idempotency-Key"]), _SEPARATORS,
              st.sampled_from([b"a", b"a b", b"", b"\xff", b"x\ty"])),
)
_ANY = st.tuples(_NAMES, st.sampled_from([b": ", b":", b" : ", b":\t"]), _VALUES)


@settings(max_examples=3000, deadline=None)
@given(line=_LINES, fields=st.lists(_GOOD, max_size=4), odd=st.lists(_ANY, max_size=1), at=st.integers(0, 4),
       host=st.sampled_from([1, 1, 1, 0, 2]), body=st.binary(max_size=4))
def test_a_plain_head_reads_as_h11_reads_it(line: bytes, fields: list, odd: list, at: int, host: int, body: bytes):
    """Whatever the doors read without h11, h11 reads the same way (method, target, headers in
    order, body length); and a head h11 refuses is never read without it. Heads are made of good
    fields, one Host most of the time, and at most one field drawn from anything."""
    fields = fields[:at] + odd + fields[at:] + [(b"Host", b": ", b"example")] * host
    data = line + b"\r\n" + b"".join(name + sep + value + b"\r\n" for name, sep, value in fields) + b"\r\n" + body
    ours = _ours(data)
    if ours is not None:
        assert ours == _h11_reads(data)
