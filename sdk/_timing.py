"""`sleep(name, duration)`: a durable sleep; `together(name, count)`: go on once `count` arrived.

- **sleep** arms the run's timer of that name (`PUT /timers/by-name/{name}`, safe to repeat: a
  process that restarts and sleeps under the same name waits only for what is left, by the
  server's clock), sleeps until it fires (at most 30 s at a time, asking again), acknowledges it
  and returns. A timer already acknowledged or expired returns at once; a cancelled one (the run
  stopped) raises `StoppedError`.
- **together** arrives at the run's barrier of that name with this worker's name (arriving again
  counts once) and waits until `count` workers have: pauses growing from 0.15 s to 1 s between
  looks; a latecomer after the release goes on at once; `WaitTimeoutError` after `timeout`.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import anyio

from ._bound import RunBinding, check_count, deadline_after, enc, iso_time, parse_time, poll_pause, sleep_unless
from ._keys import check_name
from ._units import Duration, parse_duration
from .errors import ConfigError, RunstateError, StoppedError, WaitTimeoutError

__all__ = ["sleep_named", "together", "SLEEP_CHUNK_S"]

# The longest one sleep lasts before asking the server again.
SLEEP_CHUNK_S = 30.0


async def sleep_named(binding: RunBinding, name: str, duration: Duration | None = None, *, until: datetime | None = None) -> None:
    check_name(name, "sleep")
    body: dict[str, Any]
    if until is not None:
        if duration is not None:
            raise ConfigError("sleep() takes a duration or until=, not both")
        if not isinstance(until, datetime):
            raise ConfigError("until must be a datetime")
        body = {"at": iso_time(until)}
    elif duration is None:
        raise ConfigError("sleep() needs a duration or until=")
    else:
        body = {"afterSeconds": math.ceil(parse_duration(duration, "sleep"))}

    async def timer() -> None:
        run = await binding.run()
        due_polls = 0
        while True:
            view = await binding.call("PUT", f"/timers/by-name/{enc(name)}", body={"scopeId": run.id, **body})
            state = view["state"]
            if state in ("ACKED", "EXPIRED"):
                return
            if state == "CANCELLED":
                raise StoppedError("the run stopped while sleeping")
            if state == "FIRED":
                try:
                    await binding.call("POST", f"/timers/{view['id']}/ack", body={"token": view.get("token")})
                except RunstateError as err:
                    if err.code != "CONFLICT":  # acknowledged by another sleeper of the same name
                        raise
                return
            left_s = (parse_time(view["fireAt"]) - parse_time(view["now"])).total_seconds()
            if left_s > 0:
                due_polls = 0
                await sleep_unless(binding.signal, min(left_s, SLEEP_CHUNK_S))
            else:  # due: the server fires it within a moment
                await poll_pause(due_polls, binding.signal, binding.client()._ctx.requester.rng)
                due_polls += 1

    await binding.track(timer)


async def together(binding: RunBinding, name: str, count: int, *, timeout: Duration | None = None) -> None:
    check_name(name, "together")
    check_count(count, "count")
    deadline = deadline_after(timeout, None)

    async def wait() -> None:
        run = await binding.run()
        client = binding.client()
        barrier = await binding.call("PUT", f"/barriers/by-name/{enc(name)}", body={"scopeId": run.id, "target": count})
        try:
            arrived = await binding.call("POST", f"/barriers/{barrier['id']}/arrive", body={"arrivalKey": client.holder})
        except RunstateError as err:
            if err.code == "BARRIER_RELEASED":  # the group already went: a latecomer goes on
                return
            raise
        if arrived["state"] == "RELEASED":
            return
        polls = 0
        while True:
            if anyio.current_time() >= deadline:
                raise WaitTimeoutError(f"waited too long for {count} workers at {name}")
            await poll_pause(polls, binding.signal, binding.client()._ctx.requester.rng)
            polls += 1
            view = await binding.call("GET", f"/barriers/{barrier['id']}")
            if view["state"] == "RELEASED" or view.get("epoch") != barrier.get("epoch"):
                return
            if view["state"] == "CANCELLED":
                raise StoppedError("the run stopped while waiting")

    await binding.track(wait)
