"""Logs: one line per event, as JSON objects (default) or readable text, on standard error.

Two paths write lines, in the same format and to the same file descriptor:

- Lifecycle events (start, ready, recovery, snapshot, expiry storms, shutdown) and errors go
  through `logging`, so the journal's and hypercorn's messages come out the same way. `event()`
  logs a named event with fields: `{"ts", "level", "logger", "event", "msg", ...fields}`.
- Request lines (`AccessLog`) skip `logging`: building a `LogRecord` and formatting it costs about
  7 µs, a large share of a request here. A request line is one string format (its time stamp's
  second formatted once per second, its milliseconds a field of the format), about 0.9 µs, and
  the lines of a moment go out together in one `os.write` (`AccessLog.write_in_batches`); written
  only when request logging is on.

A line is written with a single `os.write`, so lines from both paths never interleave. Nothing
secret is ever logged: no bearer key, no admin key, no fencing token (key ids are fine).

JSON request line:

    {"ts":"2027-01-15T08:00:00.123Z","level":"info","logger":"runstate.access","event":"request",
     "method":"POST","route":"/v1/spaces/{space}/claims","status":409,"ms":0.412,
     "requestId":"req_1f0c2a9e5b7d4c31","code":"CLAIM_HELD"}

Text request line:

    2027-01-15T08:00:00.123Z INFO runstate.access request POST /v1/spaces/{space}/claims 409 0.412ms req_1f0c2a9e5b7d4c31 CLAIM_HELD
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable

import orjson

from ..actors.timestamps import format_ms

if TYPE_CHECKING:  # (for annotations only: the functions that run it import it where they run)
    import trio

__all__ = ["AccessLog", "setup", "event", "fd_writer"]

Write = Callable[[bytes], Any]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def fd_writer(fd: int = 2) -> Write:
    """Write whole lines to `fd` with one system call each."""

    def write(line: bytes) -> None:
        try:
            os.write(fd, line)
        except OSError:
            pass  # a closed stderr must not take requests down with it

    return write


# The wall clock of request lines, in nanoseconds (a name of its own: tests set it).
_wall_ns = time.time_ns


def _text_value(value: Any) -> str:
    if isinstance(value, dict):  # (each partition's LSN: 0:4,1:48)
        value = [f"{key}:{item}" for key, item in value.items()]
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text if text and " " not in text and "=" not in text else orjson.dumps(text).decode()


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": format_ms(int(record.created * 1000)),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        name = getattr(record, "event", None)
        if name is not None:
            line["event"] = name
        line["msg"] = record.getMessage()
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [format_ms(int(record.created * 1000)), record.levelname, record.name, record.getMessage()]
        for key, value in (getattr(record, "fields", None) or {}).items():
            parts.append(f"{key}={_text_value(value)}")
        text = " ".join(parts)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _LineHandler(logging.Handler):
    def __init__(self, write: Write) -> None:
        super().__init__()
        self._write = write

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write((self.format(record) + "\n").encode("utf-8", "replace"))
        except Exception:
            self.handleError(record)


def setup(log_format: str = "json", log_level: str = "info", write: Write | None = None, *, quiet_hypercorn: bool = True) -> Write:
    """Send every `logging` record through one handler in `log_format`; returns the line writer.

    `quiet_hypercorn=False` under a stock ASGI server, whose own lines (the address it bound) stay its own."""
    write = fd_writer(2) if write is None else write
    handler = _LineHandler(write)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_LEVELS[log_level])
    if quiet_hypercorn:  # hypercorn's own start lines repeat ours; its errors still come through.
        logging.getLogger("hypercorn.error").setLevel(max(_LEVELS[log_level], logging.WARNING))
    else:  # hypercorn's lines are written by its own handlers (which it sets up after this), once
        handler.addFilter(lambda record: not record.name.startswith("hypercorn."))
    # httpx logs a line per request at info: a cluster's node talks to etcd and its peers all the time.
    logging.getLogger("httpx").setLevel(max(_LEVELS[log_level], logging.WARNING))
    return write


def event(logger: logging.Logger, name: str, message: str | None = None, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log the lifecycle event `name` with `fields` (each a key of the JSON line)."""
    if logger.isEnabledFor(level):
        logger.log(level, message or name, extra={"event": name, "fields": fields})


# How long the first request line after a write waits for others to go out with it (`AccessLog.write_in_batches`).
FLUSH_S = 0.05


class AccessLog:
    """Request lines. `enabled` is False when none would be written: then it costs one check."""

    __slots__ = ("enabled", "errors_only", "_write", "_line", "_line_code", "_second_ms", "_second_text", "_pending", "_writer")

    def __init__(self, write: Write | None = None, *, log_format: str = "json", log_level: str = "info", log_requests: str = "all") -> None:
        self._write = write
        self._line, self._line_code = (_JSON_LINE, _JSON_LINE_CODE) if log_format == "json" else (_TEXT_LINE, _TEXT_LINE_CODE)
        self.errors_only = log_requests == "errors"
        self.enabled = write is not None and log_requests != "off" and _LEVELS[log_level] <= logging.INFO
        # The second of the last line's time stamp: where it begins (Unix ms) and its text, so a
        # line formats only its milliseconds (a second later, or a clock stepped back: made again).
        self._second_ms = -1000
        self._second_text = ""
        # While `write_in_batches` runs: the lines not written yet, and its task when it waits for one.
        self._pending: list[str] | None = None
        self._writer: trio.lowlevel.Task | None = None

    async def write_in_batches(self) -> None:
        """Until cancelled, write the request lines together: the first line after a write waits
        `FLUSH_S` for the others, then all go out in one write. With requests spread out (ten
        thousand agents renewing once every ten seconds is one request per round of trio's
        scheduler), a write and a wake-up of this task per line cost more than the line itself.
        The lines still waiting are written on the way out (a graceful stop); a process killed
        loses at most the last `FLUSH_S` of them. Without this task running, each line is written
        as it comes."""
        import trio

        pending: list[str] = []
        self._pending = pending
        try:
            while True:
                if pending:
                    await trio.sleep(FLUSH_S)
                    self._flush()
                self._writer = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._stop_waiting)
        finally:
            self._writer = None
            self._flush()
            self._pending = None

    def _stop_waiting(self, _: object) -> trio.lowlevel.Abort:
        import trio

        self._writer = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _flush(self) -> None:
        pending = self._pending
        if pending:
            data = "".join(pending).encode()
            pending.clear()
            write = self._write
            assert write is not None, "lines are kept only while they are written (`enabled`)"
            write(data)

    def line(self, method: str, route: str, status: int, seconds: float, request_id: str, code: str | None) -> None:
        """Write one request line. Every value comes from the server itself (a route pattern, a known
        method, an error code, a hex id), so nothing needs escaping and the line is formatted directly."""
        if self.errors_only and status < 400:
            return
        ms = _wall_ns() // 1_000_000
        millis = ms - self._second_ms
        if not 0 <= millis < 1000:
            second = ms // 1000
            self._second_ms = second * 1000
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            millis = ms - self._second_ms
        if code is None:
            text = self._line % (self._second_text, millis, method, route, status, seconds * 1000, request_id)
        else:
            text = self._line_code % (self._second_text, millis, method, route, status, seconds * 1000, request_id, code)
        pending = self._pending
        if pending is None:
            write = self._write
            assert write is not None, "a line is made only when it is written (`enabled`)"
            write(text.encode())
            return
        pending.append(text)
        writer = self._writer
        if writer is not None:
            self._writer = None
            import trio

            trio.lowlevel.reschedule(writer)


# The four forms of a request line: (the second, its milliseconds, method, route, status, ms, request id[, code]).
_JSON_LINE = (
    '{"ts":"%s.%03dZ","level":"info","logger":"runstate.access","event":"request","method":"%s","route":"%s",'
    '"status":%d,"ms":%.3f,"requestId":"%s"}\n'
)
_JSON_LINE_CODE = _JSON_LINE[:-2] + ',"code":"%s"}\n'
_TEXT_LINE = "%s.%03dZ INFO runstate.access request %s %s %d %.3fms %s\n"
_TEXT_LINE_CODE = _TEXT_LINE[:-1] + " %s\n"
