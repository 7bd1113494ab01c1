"""One holder session of `runstate mcp`: what an agent holds, kept alive while the process lives.

The process is one holder (`--holder`) with one SDK session (fresh for the process, so two
processes never pass for one) in one run (`--run`, joined by name with `rs.scopes.ensure`).
Everything it holds is renewed by the SDK's own renewal loop, through its public handles only:
claims are `ClaimLease`s, taken tasks are deliveries kept renewed (`delivery.keep_renewed()`, as
`consume()` keeps a handler's: `_work.py`). The model never renews anything.

How a holding ends:

- the model gives it back (`release`, `complete`, `fail`);
- the session ends (the client closes stdin, or SIGTERM/SIGINT): claims are released and taken
  tasks put back at once, within `CLOSE_BOUND_S` (an MCP client waits about 2 s before it sends
  SIGTERM); whatever did not get through runs out with its lease;
- the process dies (SIGKILL, a crash, the machine): the renewals stop, each lease runs out on the
  server, and the key or task goes to the next agent with the next generation or attempt;
- it is lost: a renewal was refused (the key was force-released, the run ended), or its end by
  this process's clock passed during an outage. The next tool answer of the session names it
  under `lost`, once, and it is no longer held.

Every method answers a JSON-ready dict or raises: `Refusal` for an answer the model can act on,
a `RunstateError` for what the server said (`_answers.py` words both for the model).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import anyio

from ..claims import ClaimLease
from ..client import AsyncRunstate
from ..errors import ConflictError, RunstateError, WaitTimeoutError
from ..scopes import ScopeHandle

__all__ = [
    "HolderSession", "Refusal", "stamp", "check_seconds", "WAIT_SECONDS_MAX", "CLOSE_BOUND_S", "LIST_MAX", "LIST_READ_MAX",
]

# The longest a tool call waits (a claim, a take, a result): an MCP client gives up on a call
# after its own timeout (often 60 s), so longer waits belong in several calls.
WAIT_SECONDS_MAX = 600
# How long the end of a session may spend giving back what it holds.
CLOSE_BOUND_S = 1.5
# The most rows of one kind an answer lists (the model's context is not a log).
LIST_MAX = 50
# The most rows one read of the run's claims or tasks asks for (the server's maximum).
LIST_READ_MAX = 1000


class Refusal(Exception):
    """An answer the model can act on: what went wrong and what to do about it."""


def stamp(moment: datetime | None) -> str | None:
    """A moment as the server writes it: `2026-12-04T10:00:05.250Z`."""
    if moment is None:
        return None
    text = moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"


def check_seconds(name: str, value: float, high: float = WAIT_SECONDS_MAX) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
        raise Refusal(f"{name} must be a number of seconds from 0 to {high:g}, got {value!r}")
    return float(value)


class HolderSession:
    """The runstate side of one MCP server process: its client, its run, and what it holds."""

    def __init__(self, rs: AsyncRunstate, run_name: str, lease_seconds: int) -> None:
        self.rs = rs
        self.run_name = run_name
        self.lease_seconds = lease_seconds
        self.claims: dict[str, ClaimLease] = {}
        # Claim keys this session waits for now (a claim call with wait_seconds), and how many calls.
        self.waiting: dict[str, int] = {}
        self._run: ScopeHandle | None = None
        self._run_lock = anyio.Lock()
        # Holdings lost since the last answer: reported once, by the next one.
        self._lost: list[dict[str, Any]] = []
        self._closed = False
        from ._work import Work

        self.work = Work(self)

    @property
    def holder(self) -> str:
        return self.rs.holder

    async def run(self) -> ScopeHandle:
        """The run, joined by name on first use (a server that cannot be reached at start is asked
        again at the next call, instead of failing the whole session)."""
        async with self._run_lock:
            if self._run is None:
                self._run = await self.rs.scopes.ensure(self.run_name)
            return self._run

    # -- losses -----------------------------------------------------------------------------------

    async def take_losses(self) -> list[dict[str, Any]]:
        """What was lost since the last answer (each once), no longer held from now on."""
        for key, lease in list(self.claims.items()):
            if lease.is_lost:
                del self.claims[key]
                await lease.aclose()  # stop renewing: lost by the local clock, it may still be kept
                self._lost.append(_claim_loss(key, lease))
        self._lost.extend(await self.work.take_losses())
        lost, self._lost = self._lost, []
        return lost

    # -- claims -----------------------------------------------------------------------------------

    async def claim(self, key: str, lease_seconds: int | None, wait_seconds: float) -> dict[str, Any]:
        wait_s = check_seconds("wait_seconds", wait_seconds)
        lease_s = self.lease_seconds if lease_seconds is None else lease_seconds
        mine = self.claims.get(key)
        if mine is not None:
            if not mine.is_lost:
                return {**self._claim_view(mine), "acquired": True, "already_held": True,
                        "message": f"you already hold {key}; it stays yours until you release it"}
            del self.claims[key]
            await mine.aclose()
            self._lost.append(_claim_loss(key, mine))
        run = await self.run()
        self.waiting[key] = self.waiting.get(key, 0) + 1
        try:
            lease = await run.claim(key).acquire(lease_seconds=lease_s, wait=wait_s > 0, timeout_ms=round(wait_s * 1000))
        except ConflictError as err:
            if err.code != "CLAIM_HELD":
                raise
            return await self._busy(key, 0, err)
        except WaitTimeoutError as err:
            return await self._busy(key, wait_s, err)
        finally:
            self.waiting[key] -= 1
            if not self.waiting[key]:
                del self.waiting[key]
        self.claims[key] = lease
        return {
            **self._claim_view(lease), "acquired": True,
            "message": f"{key} is yours (generation {lease.generation}): it is renewed in the background "
            "until you release it or this session ends",
        }

    def _claim_view(self, lease: ClaimLease) -> dict[str, Any]:
        return {
            "key": lease.key, "generation": lease.generation, "token": lease.token(),
            "lease_seconds": lease.lease_seconds, "lease_ends_at": stamp(lease.expires_at),
        }

    async def _busy(self, key: str, waited_s: float, refusal: RunstateError) -> dict[str, Any]:
        """Who holds `key`, for a claim that did not get it: as the refusal said (its `details`: the
        holder, generation and lease end at the last try), else from the run's claims, read once."""
        mine = self.claims.get(key)
        if mine is not None and not mine.is_lost:  # another call of this session got it meanwhile
            return {**self._claim_view(mine), "acquired": True, "already_held": True,
                    "message": f"you already hold {key} (another of your calls claimed it)"}

        held: dict[str, Any] | None = dict(refusal.details) if refusal.details.get("holder") else None
        if held is None:  # (a wait whose last try was refused otherwise, or a server that does not say)
            rows = (await (await self.run()).claims(limit=LIST_READ_MAX))["claims"]
            held = next((dict(row) for row in rows if row["key"] == key), None)
        waited = f"after waiting {waited_s:g} s, " if waited_s else ""
        if held is None:  # released between the refusal and the read
            return {"acquired": False, "key": key, "held_by": None, "waited_seconds": waited_s,
                    "message": f"{refusal}; {waited}it is not among the claims held now: call claim again"}
        holder = held.get("holder")
        who = "another session of your own holder name" if holder == self.holder else holder
        return {
            "acquired": False, "key": key, "held_by": holder, "generation": held.get("generation"),
            "lease_ends_at": held.get("leaseExpiresAt"), "waited_seconds": waited_s,
            "message": f"{waited}{key} is held by {who} (generation {held.get('generation')}): its holder renews it "
            "while it works, and it frees when released or when its holder stops renewing. Work on something "
            "else, or call claim again with wait_seconds to wait for it.",
        }

    async def release(self, key: str) -> dict[str, Any]:
        lease = self.claims.pop(key, None)
        if lease is None:
            held = ", ".join(sorted(self.claims)) or "nothing"
            raise Refusal(f"you do not hold {key} (you hold {held}); nothing was released")
        if not lease.is_lost:
            try:
                await lease.release()
            except Exception as err:
                if not lease.is_lost:
                    raise Refusal(
                        f"{key} could not be released ({err}); it is no longer renewed, so it frees when its lease "
                        f"ends at {stamp(lease.expires_at)}"
                    ) from err
        if lease.is_lost:  # before this call, or found by it (the server refused the release's token)
            await lease.aclose()
            self._lost.append(_claim_loss(key, lease))
            raise Refusal(f"{key} was lost before this release: another agent may hold it now")
        return {"released": True, "key": key, "generation": lease.generation,
                "message": f"{key} is released: another agent may claim it now"}

    def held(self) -> dict[str, Any]:
        claims = [self._claim_view(lease) for lease in self.claims.values()]
        return {"holder": self.holder, "run": self.run_name, "claims": claims, "tasks": self.work.held()}

    # -- the end ----------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Give back what is held, within `CLOSE_BOUND_S`, then close the client (which stops
        every renewal: what was not given back runs out with its lease)."""
        if self._closed:
            return
        self._closed = True
        claims, self.claims = list(self.claims.values()), {}
        with anyio.move_on_after(CLOSE_BOUND_S, shield=True):
            async with anyio.create_task_group() as group:
                for lease in claims:
                    group.start_soon(_release_quietly, lease)
                self.work.give_back_all(group)
        with anyio.CancelScope(shield=True):
            await self.rs.aclose()


async def _release_quietly(lease: ClaimLease) -> None:
    try:
        await lease.release()
    except Exception:
        pass  # the lease runs out on its own


def _claim_loss(key: str, lease: ClaimLease) -> dict[str, Any]:
    error = lease.lost_error
    why = str(error) if error is not None else "its lease ran out before a renewal got through"
    return {
        "kind": "claim", "key": key, "generation": lease.generation, "why": why,
        "message": f"you no longer hold {key}: {why}. Another agent may hold it now: stop changing what it "
        "guards, and claim it again if you still need it.",
    }

