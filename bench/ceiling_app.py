"""The HTTP ceiling: the least an HTTP request can cost on our stack.

A bare ASGI app (no Quart, no router, no kernel) served by hypercorn's trio worker with the same
hypercorn configuration as `runstate serve`. It reads the request body, parses it with orjson and
answers a JSON body the size and shape of a claim view. Whatever the real server serves per second
is compared with what this serves in the same run: the gap is what the shell, the kernel and the
journal cost on top of the framework.

Run: python -m bench.ceiling_app --port 0  (prints "ceiling: serving on http://127.0.0.1:PORT")
"""

from __future__ import annotations

import argparse
import time

import orjson
import trio
from hypercorn.trio import serve

from runstate.server.serve import hypercorn_config
from runstate.server.settings import Settings

_HEADERS_JSON = (b"content-type", b"application/json")


def _claim_sized(body: dict) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    return {
        "key": body.get("key", "k"),
        "scopeId": body.get("scopeId", "sc_0123456789abcdef"),
        "token": "ct_" + "0" * 32,
        "generation": 1,
        "holder": body.get("holder", "h"),
        "holderSession": body.get("holderSession", "s"),
        "leaseSeconds": body.get("leaseSeconds", 30),
        "leaseExpiresAt": now,
        "acquiredAt": now,
    }


async def app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    raw = b"".join(chunks)
    body = orjson.loads(raw) if raw else {}
    answer = orjson.dumps(_claim_sized(body if isinstance(body, dict) else {}))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [_HEADERS_JSON, (b"content-length", b"%d" % len(answer))],
        }
    )
    await send({"type": "http.response.body", "body": answer})


async def main(host: str, port: int) -> None:
    config = hypercorn_config(Settings(host=host, port=port))

    class _Status:
        def started(self, binds: list[str]) -> None:
            for bind in binds:
                print(f"ceiling: serving on {bind}", flush=True)

    await serve(app, config, task_status=_Status())  # type: ignore[arg-type]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        trio.run(main, args.host, args.port)
    except KeyboardInterrupt:
        pass
