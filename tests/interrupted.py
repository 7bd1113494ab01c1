"""A script run in a child process until it says it started, then interrupted as Ctrl-C in a
terminal would (SIGINT), for the tests of what the blocking client does on a KeyboardInterrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

__all__ = ["interrupt"]


def _as_in_a_terminal() -> None:
    """Ctrl-C does what it does in a terminal, however the tests were started: a shell without job
    control starts a background command with SIGINT ignored, and a child inherits that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(server, script: str, **env: str) -> tuple[str, str]:
    """Run `script` until it prints `started`, send SIGINT, wait for it to end; its first line and stderr."""
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}, "RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_API_KEY": server.api_key,
        "RUNSTATE_SPACE_ID": server.space_id, **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment, preexec_fn=_as_in_a_terminal,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("started"), first + proc.stderr.read() if proc.stderr else first
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr, stderr
    return first, stderr
