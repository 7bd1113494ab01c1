"""A real server with `--partitions 8`: damage in one partition's journal leaves the other seven serving.

The server is killed; a record in the middle of one partition's WAL is damaged (a bad record
before the tail, which no start repairs by itself). `runstate check` names the partition, the file
and the offset and exits 1. The server starts anyway: that partition answers 503 UNAVAILABLE with
the reason for its spaces, reads and changes alike, and `/healthz` is 503 naming it, while every
other space is read and changed as before. The operator truncates the segment where check said;
the server sees the files change, opens the partition, and it serves again (what came after the
damage is gone, as it would be after any repair by hand).
"""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from runstate.actors.layout import Layout
from runstate.snapshots.datadir import partition_dir
from runstate.snapshots.recovery import list_segments, wal_dir

from ..durability.helpers import flip_byte, frames
from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

PARTITIONS = 8
ADMIN_KEY = "admin-key-for-the-partition-tests"
RUNSTATE = [sys.executable, "-c", "import sys; from runstate._cli import main; sys.exit(main())"]


def one_space_per_partition(count: int) -> dict[int, str]:
    layout, spaces, number = Layout(count), {}, 0
    while len(spaces) < count:
        spaces.setdefault(layout.of(f"team-{number}"), f"team-{number}")
        number += 1
    return spaces



def _repair(http, segment, offset: int) -> None:
    """Truncate `segment` at the damage (the repair `runstate check` points to), and wait (30 s at
    most) for the server to open the partition again and say it is healthy."""
    with open(segment, "r+b") as file:
        file.truncate(offset)
    deadline = time.monotonic() + 30
    while http.get("/healthz").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert http.get("/healthz").status_code == 200

def test_damage_in_one_partition_leaves_the_other_seven_serving_until_it_is_repaired(tmp_path):
    spaces = one_space_per_partition(PARTITIONS)
    broken = 5
    data_dir = str(tmp_path / "data")
    flags = ("--data-dir", data_dir, "--partitions", str(PARTITIONS))
    env = {"RUNSTATE_ADMIN_KEY": ADMIN_KEY}
    first = ServerProcess(*flags, env=env).start()
    runs: dict[int, list[str]] = {}
    try:
        with first.client(ADMIN_KEY) as admin:
            made = admin.post("/v1/admin/keys", json={"spaces": list(spaces.values())})
            assert made.status_code == 201, made.text
            key = made.json()["key"]
        with first.client(key) as http:
            for number, space in spaces.items():
                runs[number] = [http.post(f"/v1/spaces/{space}/scopes", json={}).json()["id"] for _ in range(4)]
    finally:
        first.kill()

    [(_, segment)] = list_segments(wal_dir(partition_dir(data_dir, broken)))
    damaged = frames(segment)[3]  # a run's record, with later batches intact after it
    flip_byte(segment, damaged.offset + 30)
    checked = subprocess.run([*RUNSTATE, "check", "--data-dir", data_dir], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 1, checked.stdout
    assert f"problem: partition {broken}: {segment}: byte {damaged.offset}" in checked.stdout
    assert f"partition {broken}: BAD" in checked.stdout and "partition 4: OK" in checked.stdout

    again = ServerProcess(*flags, env=env)
    again.wait_healthy = lambda *args, **kwargs: None  # type: ignore[method-assign]  # it is not healthy: see below
    again.start()
    try:
        _wait_answering(again)
        with again.client(key) as http:
            # Nobody is told where the server keeps its files: not /healthz (no key needed), not a
            # space's answers. The log and `runstate check` (above) say where.
            health = httpx.get(again.base_url + "/healthz", timeout=10)
            said = health.json()["error"]["message"]
            assert health.status_code == 503 and f"partition {broken}:" in said and "damaged record" in said, said
            assert data_dir not in said and segment not in said and "byte" not in said, said
            assert any(segment in line and f"byte {damaged.offset}" in line for line in again.lines), "the log says where"
            # What the alerting rules read: recovered (ready), and a partition refusing changes.
            scraped = httpx.get(again.base_url + "/metrics", timeout=10).text
            assert "\nrunstate_ready 1.0\n" in scraped and "\nrunstate_journal_refusing 1.0\n" in scraped
            for number, space in spaces.items():
                read = http.get(f"/v1/spaces/{space}/scopes/{runs[number][0]}")
                change = http.post(f"/v1/spaces/{space}/scopes", json={})
                if number == broken:
                    for answer in (read, change):
                        assert answer.status_code == 503, answer.text
                        assert answer.json()["error"]["code"] == "UNAVAILABLE"
                        message = answer.json()["error"]["message"]
                        assert "damaged record" in message and "byte" not in message and data_dir not in message, message
                else:
                    assert read.status_code == 200 and change.status_code == 201, (number, read.text, change.text)

            _repair(http, segment, damaged.offset)
            space = spaces[broken]
            assert http.get(f"/v1/spaces/{space}/scopes/{runs[broken][0]}").status_code == 200  # before the damage
            assert http.post(f"/v1/spaces/{space}/scopes", json={}).status_code == 201
    finally:
        assert again.stop() == 0


def _wait_answering(process: ServerProcess, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(process.base_url + "/healthz?probe=live", timeout=2).status_code == 200:
                body = httpx.get(process.base_url + "/healthz", timeout=2)
                if body.status_code == 200 or "recovering" not in body.text:
                    return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("the server did not answer")


def test_damage_in_the_keys_partition_is_served_as_503_until_it_is_repaired(tmp_path):
    """The system partition (0, the API keys) damaged at a start, on a server with no configured
    API key: it starts (no traceback, no new key made in place of the ones it cannot read); an API
    key is answered 503 saying the keys cannot be checked, not 401; once the operator truncates
    where `runstate check` said, the keys recorded before the damage work again."""
    data_dir = str(tmp_path / "data")
    flags = ("--data-dir", data_dir)
    env = {"RUNSTATE_ADMIN_KEY": ADMIN_KEY, "RUNSTATE_SERVER_API_KEY": ""}  # (empty: unset)
    first = ServerProcess(*flags, env=env).start()
    try:
        with first.client(ADMIN_KEY) as admin:
            kept, lost, after = (admin.post("/v1/admin/keys", json={"spaces": ["team"]}).json()["key"] for _ in range(3))
    finally:
        first.kill()
    [(_, segment)] = list_segments(wal_dir(partition_dir(data_dir, 0)))
    damaged = frames(segment)[-2]  # `lost`'s record, with `after`'s intact behind it
    flip_byte(segment, damaged.offset + 30)

    again = ServerProcess(*flags, env=env)
    again.wait_healthy = lambda *args, **kwargs: None  # type: ignore[method-assign]  # it is not healthy: see below
    again.start()
    try:
        _wait_answering(again)
        health = httpx.get(again.base_url + "/healthz", timeout=10)
        assert health.status_code == 503 and "partition 0:" in health.json()["error"]["message"], health.text
        with again.client(kept) as http:
            answer = http.get("/v1/spaces/team/scopes")
            assert answer.status_code == 503, answer.text
            assert "the API keys cannot be checked: partition 0:" in answer.json()["error"]["message"]
            assert again.proc is not None and again.proc.poll() is None
            assert not any("Traceback" in line for line in again.lines), "\n".join(again.lines)
            assert any("no API key is registered or made until it does" in line for line in again.lines)

            _repair(http, segment, damaged.offset)
            assert http.post("/v1/spaces/team/scopes", json={}).status_code == 201
        with again.client(lost) as http:
            assert http.get("/v1/spaces/team/scopes").status_code == 401  # recorded after the damage: gone
        assert not any("export RUNSTATE_API_KEY" in line for line in again.lines), "no key is made in their place"
    finally:
        assert again.stop() == 0
