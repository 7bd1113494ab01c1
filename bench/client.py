"""A small HTTP/1.1 keep-alive client on asyncio streams, for the Python harness.

The harness measures latency distributions and drives the peer (Redis) from the same event loop and
concurrency, so it needs a client that costs little per request: no pools, no redirects, no header
objects, one connection per worker. It speaks only what our server answers: a status line, headers
with Content-Length (or none for 204), and a body; it reconnects when the server closes.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import orjson


class HttpError(Exception):
    pass


class Connection:
    __slots__ = ("host", "port", "_head", "reader", "writer")

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        auth = f"authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = f"host: {self.host}:{self.port}\r\n{auth}content-type: application/json\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> "Connection":
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self.writer = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, dict[str, str]]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(
            f"{method} {path} HTTP/1.1\r\n{self._head}content-length: {len(body)}\r\n\r\n".encode() + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        payload = await self.reader.readexactly(length) if length else b""
        if headers.get("connection", "").lower() == "close":
            # hypercorn closes a keep-alive connection after `keep_alive_max_requests` requests
            # (1000 by default); like any HTTP client, open a new one for the next request.
            await self.close()
            await self.open()
        return status, payload, headers

    async def post_json(self, path: str, document: object) -> tuple[int, object, dict[str, str]]:
        status, payload, headers = await self.request("POST", path, orjson.dumps(document))
        return status, (orjson.loads(payload) if payload else None), headers

    async def get(self, path: str) -> tuple[int, object]:
        status, payload, _ = await self.request("GET", path)
        return status, (orjson.loads(payload) if payload else None)
