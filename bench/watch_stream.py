"""A standby's watch stream: the CPU to read one watch message, httpx's streamed lines against
`snapshots/http1.py`'s `Stream`, side by side in one run.

    .venv/bin/python -m bench.watch_stream [--messages 4000] [--pause-ms 1] [--rounds 4]

A child process plays an etcd member's JSON gateway: it answers a POST with a body in chunks, one
watch message (`{"result": ...}`, one event of a 180-byte value, as a journal's batch of a few
records) per chunk, pausing `--pause-ms` after each so that, as on a standby, each message comes
alone (0: as fast as it can write, several to a read). This process reads the stream both ways,
each line parsed with orjson as the watch does, in rounds that alternate which goes first, and
prints its own CPU (user + system) per message for each, and their ratio per round. httpx is what
the etcd client's watch used before; it stays here as the reference.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import httpx
import orjson
import trio

from runstate.snapshots.http1 import Connections

GATEWAY = r"""
import base64, json, socket, sys, time
messages, port_file, pause_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
value = base64.b64encode(b"x" * 180).decode()
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(8)
with open(port_file, "w") as out:
    out.write(str(server.getsockname()[1]))
while True:
    connection, _ = server.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int([line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0])
    while len(body) < length:
        body += connection.recv(65536)
    connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
    for n in range(messages):
        revision = str(100 + n)
        event = {"kv": {"key": base64.b64encode(b"/runstate/partitions/1/log/%020d" % n).decode(), "create_revision": revision,
                        "mod_revision": revision, "version": "1", "value": value}}
        message = json.dumps({"result": {"header": {"cluster_id": "1", "member_id": "2", "revision": revision, "raft_term": "3"},
                                         "events": [event]}}).encode() + b"\n"
        connection.sendall(b"%x\r\n%s\r\n" % (len(message), message))
        if pause_s:
            time.sleep(pause_s)
    connection.sendall(b"0\r\n\r\n")
    connection.close()
"""

HEADERS = {"content-type": "application/json"}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def read_httpx(url: str) -> int:
    async with httpx.AsyncClient(timeout=None) as http:
        request = http.build_request("POST", url + "/v3/watch", content=b"{}", headers=HEADERS)
        response = await http.send(request, stream=True)
        messages = 0
        async for line in response.aiter_lines():
            if line.strip():
                orjson.loads(line)
                messages += 1
        await response.aclose()
        return messages


async def read_http1(url: str) -> int:
    links = Connections()
    stream = await links.stream("POST", url, "/v3/watch", [(b"content-type", b"application/json")], b"{}")
    messages = 0
    while lines := await stream.read_lines():
        for line in lines:
            if line and not line.isspace():
                orjson.loads(line)
                messages += 1
    await stream.aclose()
    await links.aclose()
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--pause-ms", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        port_file = os.path.join(root, "port")
        gateway = subprocess.Popen([sys.executable, "-c", GATEWAY, str(args.messages), port_file, str(args.pause_ms / 1000)])
        try:
            while not (os.path.exists(port_file) and open(port_file).read()):
                time.sleep(0.02)
            url = "http://127.0.0.1:" + open(port_file).read()
            print(f"bench: load average before {open('/proc/loadavg').read().split()[0]}")
            per_message: dict[str, list[float]] = {"httpx": [], "http1": []}
            readers = [("httpx", read_httpx), ("http1", read_http1)]
            for round_ in range(args.rounds):
                for name, reader in readers if round_ % 2 == 0 else readers[::-1]:
                    before = cpu_s()
                    messages = trio.run(reader, url)
                    if messages != args.messages:
                        raise RuntimeError(f"{name} read {messages} messages of {args.messages}")
                    per_message[name].append((cpu_s() - before) / messages * 1e6)
            print(f"bench: load average after {open('/proc/loadavg').read().split()[0]}")
        finally:
            gateway.kill()
            gateway.wait()
    for name, values in per_message.items():
        print(f"{name}: " + ", ".join(f"{value:.1f}" for value in values) + " us of CPU per message")
    ratios = [new / old for new, old in zip(per_message["http1"], per_message["httpx"])]
    print("http1 / httpx, per round: " + ", ".join(f"{ratio:.2f}" for ratio in ratios))


if __name__ == "__main__":
    main()
