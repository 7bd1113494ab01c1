"""Request heads: the plain shape the connection reads itself, and the shapes it refuses.

A connection (`connection.py`) reads every request head once it has all come. When the head has
the plainest shape (`plain_request`: an API method and path, HTTP/1.1, well-formed header lines,
one Host, a small body of declared length: what every SDK sends) it is read here, by one pattern
over the block, and never reaches h11; anything else is h11's to read. So a head read here must
mean exactly what h11 reads in it, and every head h11 would refuse must be left to h11, so that
its refusal stays the one the server gives (`tests/server/test_plain_heads.py` holds the two
readers to that with generated heads).

The refusals made below the router are said in words of our own, never with the request's own
bytes (h11's message repeats the bad line, a bearer key included).
"""

from __future__ import annotations

import re
import time
from email.utils import formatdate
from typing import Iterable

import h11

__all__ = [
    "HEAD_BYTES_MAX", "INLINE_BODY_MAX", "plain_request", "first_line_refusal", "head_refusal", "protocol_refusal",
    "bearer_of", "server_headers", "head_end",
]

# The longest request line and headers (h11's bound on an incomplete event): 431 above.
HEAD_BYTES_MAX = 16 * 1024
# The largest body of a plain request: a larger one is read by h11, as it comes.
INLINE_BODY_MAX = 64 * 1024
# How much of a request's first line is looked at for HTTP/0.9.
_FIRST_LINE_BYTES_MAX = HEAD_BYTES_MAX
# The first byte of a TLS handshake record (content type 22).
_TLS_RECORD = 0x16
# Where a head ends as h11 reads one: an empty line, after CRLF or a bare LF.
_HEAD_END = re.compile(rb"\n\r?\n")

_PLAIN_METHODS = (b"DELETE", b"GET", b"PATCH", b"POST", b"PUT")
# Headers that keep a request off the plain path: a body in chunks, an upgrade, a client waiting
# for 100 Continue (h11 reads these and the connection answers them through it).
_NOT_PLAIN = frozenset({b"transfer-encoding", b"upgrade", b"expect"})
# The plainest request head: an API method and path, in HTTP/1.1; header names are tokens and
# values visible characters, spaces and tabs (RFC 9110 5.1 and 5.5, as h11 reads them).
_PLAIN_LINE = re.compile(rb"(%s) (/v1/[!-~]*) HTTP/1\.1\r\n" % b"|".join(_PLAIN_METHODS))
_PLAIN_FIELDS = re.compile(rb"(?:[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[\t\x20-\x7e\x80-\xff]*\r\n)+")
_DIGITS_MAX = len(str(INLINE_BODY_MAX))

Headers = list[tuple[bytes, bytes]]


def head_end(data: bytes | bytearray, start: int = 0) -> int:
    """Where the body begins if `data` holds a whole head (the index after its empty line), else -1."""
    found = _HEAD_END.search(data, start)
    return -1 if found is None else found.end()


def plain_request(data: bytes | bytearray, head_max: int = HEAD_BYTES_MAX) -> tuple[bytes, bytes, Headers, int, int] | None:
    """The request at the start of `data` if its head is whole and of the plainest shape, as
    (method, target, headers with names in lower case, where its body begins, its length); None
    otherwise, and h11 reads it. Plain: a request line `_PLAIN_LINE`, header lines `_PLAIN_FIELDS`
    (a token, a colon, visible characters, spaces and tabs, CRLF), one Host, at most one
    Authorization and one Content-Length (digits, at most INLINE_BODY_MAX), no Transfer-Encoding,
    Upgrade or Expect, and no Connection but keep-alive."""
    end = data.find(b"\r\n\r\n", 0, head_max)
    if end < 0:
        return None
    first = _PLAIN_LINE.match(data)
    if first is None:
        return None
    at = first.end()
    if _PLAIN_FIELDS.fullmatch(data, at, end + 2) is None:
        return None
    headers = []
    length = -1
    hosts = authorizations = 0
    for line in bytes(data[at:end]).split(b"\r\n"):
        name, _, value = line.partition(b":")
        name = name.lower()
        value = value.strip(b" \t")
        if name == b"content-length":
            if length >= 0 or not value.isdigit() or len(value) > _DIGITS_MAX:
                return None
            length = int(value)
            if length > INLINE_BODY_MAX:
                return None
        elif name == b"host":
            hosts += 1
        elif name == b"authorization":
            authorizations += 1
        elif name in _NOT_PLAIN or name == b"connection" and value.lower() != b"keep-alive":
            return None
        headers.append((name, value))
    if hosts != 1 or authorizations > 1:
        return None
    return bytes(first[1]), bytes(first[2]), headers, end + 4, max(length, 0)


def first_line_refusal(data: bytes | bytearray, secure: bool) -> str | None:
    """What is wrong with a request's first bytes before h11 reads them, or None (also when the
    first line has not all come yet): TLS on the plain port, an HTTP/0.9 request line."""
    if not data:
        return None
    if data[0] == _TLS_RECORD and not secure:
        return "this port speaks plain HTTP/1.1, not TLS: use http:// (or put a TLS proxy in front)"
    end = data.find(b"\n", 0, _FIRST_LINE_BYTES_MAX)
    if end >= 0 and len(bytes(data[:end]).split()) == 2:
        return "HTTP/0.9 requests are not served: send HTTP/1.1 (a request line ends with HTTP/1.1)"
    return None


def head_refusal(request: h11.Request) -> tuple[int, str] | None:
    """Shapes of a request head that h11 lets through and this server refuses before anything else
    (status, message), or None. Each closes the connection: what follows cannot be trusted."""
    if request.http_version not in (b"1.1", b"1.0"):
        return 505, f"HTTP/{request.http_version.decode('ascii', 'replace')} is not served here: send HTTP/1.1"
    names = [name for name, _ in request.headers]
    if b"transfer-encoding" in names and b"content-length" in names:
        return 400, "a request with both Content-Length and Transfer-Encoding is refused (RFC 9112 6.3): send one"
    if names.count(b"authorization") > 1:
        return 400, "more than one Authorization header: send one"
    return None


def protocol_refusal(status: int, error: BaseException | None) -> str:
    """What is wrong with a request h11 refused, in words of our own: never the request's own
    bytes (h11's message repeats the bad line, a bearer key included)."""
    if status == 431:
        return f"the request line and headers exceed {HEAD_BYTES_MAX} bytes"
    said = str(error).lower() if error is not None else ""
    for words, meaning in (
        ("header line", "a header line is malformed (its content is not repeated here)"),
        ("request line", "the request line is malformed (METHOD /path HTTP/1.1)"),
        ("content-length", "the Content-Length header is malformed or given twice with different values"),
        ("transfer-encoding", "the Transfer-Encoding is not one this server reads"),
        ("chunk", "the chunked body is malformed"),
    ):
        if words in said:
            return f"the request is not valid HTTP/1.1: {meaning}"
    return "the request is not valid HTTP/1.1"


def bearer_of(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The bearer key of a request's headers (names in lower case), or None."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            return secret.strip() if scheme.lower() == "bearer" and secret.strip() else None
    return None


class _Stamp:
    """The Date and Server headers of the current second: made once a second, not per answer."""

    second = -1
    headers: Headers = []


SERVER_NAME = b"runstate"


def server_headers() -> Headers:
    """The Date and Server headers every answer carries (the Date of this second)."""
    now = int(time.time())
    if now != _Stamp.second:
        _Stamp.headers = [(b"date", formatdate(now, usegmt=True).encode("ascii")), (b"server", SERVER_NAME)]
        _Stamp.second = now
    return _Stamp.headers
