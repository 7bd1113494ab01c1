"""`runstate check` and `runstate serve --data-dir` as a user runs them, in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import runstate.actors
import runstate.snapshots
from runstate.snapshots.recovery import wal_dir

from .helpers import flip_byte, frames, numbered_batches, segments, write_log, write_server_log

RUNSTATE = [sys.executable, "-c", "import sys; from runstate._cli import main; sys.exit(main())"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNSTATE, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
def test_check_prints_what_a_good_directory_holds_and_exits_0(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(2, 3))
    result = run("check", "--data-dir", data)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout and "keys: 5" in result.stdout and "last LSN: 5" in result.stdout


@pytest.mark.e2e
def test_a_damaged_directory_fails_check_and_serve_with_file_and_offset(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1, 1))
    [path] = segments(data)
    offset = frames(path)[1].offset
    flip_byte(path, offset + 30)
    checked = run("check", "--data-dir", data)
    assert checked.returncode == 1 and "BAD" in checked.stdout and f"{path}: byte {offset}" in checked.stdout
    served = run("serve", "--port", "0", "--data-dir", data)
    assert served.returncode == 1
    assert f"cannot start: {path}: byte {offset}" in served.stderr


@pytest.mark.e2e
def test_serve_with_another_partition_count_than_the_directory_was_made_with_says_so(tmp_path):
    """The count is fixed when a directory is made: a start asking for another one stops with the reason, no traceback."""
    data = str(tmp_path / "data")
    made = subprocess.Popen([*RUNSTATE, "serve", "--port", "0", "--data-dir", data, "--partitions", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert made.stdout is not None
        assert any("serving on" in line for line in made.stdout)  # (ready: the directory is made)
    finally:
        made.terminate()
        made.wait(timeout=30)
    served = run("serve", "--port", "0", "--data-dir", data, "--partitions", "4")
    assert served.returncode == 1
    assert "Traceback" not in served.stderr
    assert served.stderr.strip().splitlines()[-1] == (
        f"runstate: cannot start: {data} was made with 2 partition(s); the count is fixed when a directory is made, "
        "so start it without --partitions (or with --partitions 2)"
    )


def test_check_names_a_segment_it_may_not_read_instead_of_a_traceback(tmp_path, monkeypatch, capsys):
    """A segment the checking user may not read (left by another user, or its mode changed) is the
    problem of its partition, with the file named, and `check` exits 1: no traceback. (Run in
    process, the read refused as the system refuses it: a test run as root reads any file.)"""
    import builtins

    from runstate.server.cli import main

    data = str(tmp_path / "data")
    folder = write_server_log(data, numbered_batches(1, 1), partitions=1, partition=1)
    [path] = segments(folder)
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if file == path:
            raise PermissionError(13, "Permission denied", path)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    assert main(["check", "--data-dir", data]) == 1
    assert f"problem: partition 1: {path}: cannot read it: Permission denied" in capsys.readouterr().out


@pytest.mark.e2e
def test_check_without_a_directory_says_so(tmp_path):
    assert run("check").returncode == 2
    missing = run("check", "--data-dir", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "not a directory" in missing.stdout


def test_public_names_are_exported_explicitly():
    exported = set(runstate.snapshots.__all__)
    assert {"open_store", "CheckReport", "Store", "StoreConfig", "RecoveryReport", "RecoveryError", "WalJournal",
            "FaultyDisk", "assert_same_state"} <= exported
    assert all(hasattr(runstate.snapshots, name) for name in exported)
    # A name of the package is a module or a function, never both (names are imported when read).
    assert callable(runstate.snapshots.check.check)
    # The journal seam belongs to its consumer, the kernel.
    assert {"MemoryJournal", "Journal"} <= set(runstate.actors.__all__)
    assert wal_dir("/d") == "/d/wal"


@pytest.mark.e2e
def test_healthz_answers_503_while_recovering_then_200(tmp_path):
    """The server listens first and recovers after: /healthz says 503 until the state is back."""
    import os
    import signal
    import time

    import httpx

    from ..ports import free_port

    data = str(tmp_path / "data")
    write_server_log(data, numbered_batches(*[2000] * 100))  # 200k records: most of a second to recover
    port = free_port()  # it answers /healthz before it prints where it serves (once recovered)
    process = subprocess.Popen(
        [*RUNSTATE, "serve", "--port", str(port), "--data-dir", data],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, RUNSTATE_SERVER_API_KEY="rs_k"),
    )
    seen = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not seen or seen[-1] != 200):
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code
                if not seen or seen[-1] != status:
                    seen.append(status)
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode()
    assert seen == [503, 200], output
    assert "200000 WAL records replayed" in output and "recovered" in output


def test_check_counts_the_bytes_of_a_bad_partitions_segments_as_of_a_good_ones(tmp_path):
    """A partition a start would leave out still has its segments counted with their bytes, in
    its own line's numbers and in the totals, as a good partition's are."""
    from .helpers import check, write_server_log

    data = str(tmp_path / "data")
    folder = write_server_log(data, numbered_batches(1, 1, 1), partitions=2, partition=1)
    [path] = segments(folder)
    flip_byte(path, frames(path)[0].offset + 30)
    report = check(data)
    [bad] = [part for part in report.partitions if part.partition == 1]
    assert not bad.ok and "byte" in (bad.problem or "")
    size = os.path.getsize(path)
    assert (bad.segments, bad.wal_bytes) == (1, size)
    good_bytes = sum(part.wal_bytes for part in report.partitions if part.ok)
    assert report.wal_bytes == good_bytes + size
    assert f"wal: {report.segments} segment(s), {report.wal_bytes} bytes" in report.format()
