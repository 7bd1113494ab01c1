"""Pools (permits): a named number of units, handed out in grants under a fenced lease.

A pool has `units_total` units. A grant holds `units` of them for a scope until its lease ends
(`expires_ms`), it is released, or its scope ends. Units in use are the sum over grants whose
lease has not ended, so they never exceed the total: an acquire that would go over is refused
with CAPACITY_UNAVAILABLE (and a Retry-After of when the soonest lease ends), and an acquire for
more units than the pool has at all is a 400, since it could never succeed.

Renew and release name the grant by its id and its token; a token that is not the grant's current
one, or a lease that has ended, is STALE_CLAIM, as for claims. A lease past its end counts as
ended in every decision even before its expiry is recorded, so nothing depends on when the
supervisor gets to run.

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Callable, Iterator

from .errors import CONFLICT, NOT_FOUND, STALE_CLAIM, VALIDATION_FAILED, KernelError
from .timestamps import format_ms

__all__ = ["Pool", "Grant", "PoolTable", "CAPACITY_UNAVAILABLE", "POOL_RECORDS"]

CAPACITY_UNAVAILABLE = "CAPACITY_UNAVAILABLE"

# The record types of this table and their fields (for the journal's registry).
POOL_RECORDS: dict[str, tuple[str, ...]] = {
    "pool.created": ("id", "name", "units", "at_ms"),
    # An admission's grant names the delivery whose lease it shares ("?": an optional field).
    "grant.acquired": ("id", "pool_id", "scope_id", "units", "token", "holder", "session", "lease_ms", "expires_ms", "at_ms", "message_id?"),
    "grant.renewed": ("id", "lease_ms", "expires_ms", "at_ms"),
    "grant.released": ("id", "at_ms"),
    "grant.expired": ("id", "at_ms"),
    "pool.image": ("id", "name", "units", "created_ms", "grants"),
}


class Grant:
    __slots__ = ("id", "pool_id", "scope_id", "units", "token", "holder", "session", "lease_ms", "expires_ms", "acquired_ms", "message_id")

    def __init__(self, record: dict) -> None:
        self.id: str = record["id"]
        self.pool_id: str = record["pool_id"]
        self.scope_id: str = record["scope_id"]
        self.units: int = record["units"]
        self.token: str = record["token"]
        self.holder: str = record["holder"]
        self.session: str = record["session"]
        self.lease_ms: int = record["lease_ms"]
        self.expires_ms: int = record["expires_ms"]
        self.acquired_ms: int = record["at_ms"]
        # Taken at admission: held exactly while that delivery's lease (this token) is.
        self.message_id: str | None = record.get("message_id")

    def image(self) -> dict:
        return {
            "id": self.id, "pool_id": self.pool_id, "scope_id": self.scope_id, "units": self.units,
            "token": self.token, "holder": self.holder, "session": self.session, "lease_ms": self.lease_ms,
            "expires_ms": self.expires_ms, "at_ms": self.acquired_ms, "message_id": self.message_id,
        }


class Pool:
    __slots__ = ("id", "name", "units_total", "created_ms", "grants")

    def __init__(self, pool_id: str, name: str, units_total: int, created_ms: int) -> None:
        self.id = pool_id
        self.name = name
        self.units_total = units_total
        self.created_ms = created_ms
        # Grants not yet released or recorded as expired (some may have ended unrecorded).
        self.grants: dict[str, Grant] = {}



class PoolTable:
    """The pools of one space, by id and by name, and their live grants by id."""

    __slots__ = ("_pools", "_by_name", "_grants", "pools_max", "delivery_held")

    def __init__(self, pools_max: int) -> None:
        self._pools: dict[str, Pool] = {}
        self._by_name: dict[str, Pool] = {}
        self._grants: dict[str, Grant] = {}
        self.pools_max = pools_max
        # Whether a delivery (message id, token) still holds its lease at a time; the space sets it.
        self.delivery_held: Callable[[str, str, int], bool] = lambda message_id, token, now_ms: False

    def held(self, grant: Grant, now_ms: int) -> bool:
        """A grant's units are in use: until its lease ends, or, taken at admission, while its delivery is leased."""
        if grant.message_id is not None:
            return self.delivery_held(grant.message_id, grant.token, now_ms)
        return now_ms < grant.expires_ms

    def in_use(self, pool: Pool, now_ms: int) -> int:
        return sum(grant.units for grant in pool.grants.values() if self.held(grant, now_ms))

    def find(self, name: str) -> Pool:
        pool = self._by_name.get(name)
        if pool is None:
            raise KernelError(NOT_FOUND, f"permit pool {name!r} not found")
        return pool

    # -- reading --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._pools)

    def all(self) -> Iterator[Pool]:
        return iter(self._pools.values())

    def get(self, pool_id: str) -> Pool:
        pool = self._pools.get(pool_id)
        if pool is None:
            raise KernelError(NOT_FOUND, f"permit pool {pool_id!r} not found")
        return pool

    def grant(self, grant_id: str) -> Grant | None:
        return self._grants.get(grant_id)

    def grants(self) -> Iterator[Grant]:
        return iter(self._grants.values())

    def view(self, pool: Pool, now_ms: int) -> dict:
        in_use = self.in_use(pool, now_ms)
        return {
            "id": pool.id,
            "name": pool.name,
            "unitsTotal": pool.units_total,
            "units": pool.units_total,  # 0.3.0's by-name answer calls the capacity `units`
            "unitsInUse": in_use,
            "unitsAvailable": pool.units_total - in_use,
            "createdAt": format_ms(pool.created_ms),
        }

    @staticmethod
    def grant_view(grant: Grant, pool: Pool) -> dict:
        return {
            "grantId": grant.id,
            "permitId": grant.pool_id,
            "name": pool.name,
            "scopeId": grant.scope_id,
            "units": grant.units,
            "token": grant.token,
            "holder": grant.holder,
            "holderSession": grant.session,
            "leaseSeconds": grant.lease_ms // 1000,
            "leaseExpiresAt": format_ms(grant.expires_ms),
            "acquiredAt": format_ms(grant.acquired_ms),
        }

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(self, pool_id: str, name: str, units: int, now_ms: int) -> dict:
        if name in self._by_name:
            raise KernelError(CONFLICT, f"a permit pool named {name!r} exists already", details={"id": self._by_name[name].id})
        if len(self._pools) >= self.pools_max:
            raise KernelError(CONFLICT, f"a space holds at most {self.pools_max} permit pools")
        return {"type": "pool.created", "id": pool_id, "name": name, "units": units, "at_ms": now_ms}

    def decide_acquire(
        self, pool_id: str, grant_id: str, scope_id: str, units: int, token: str, holder: str, session: str,
        lease_ms: int, now_ms: int,
    ) -> list[dict]:
        """Records of the grant (after recording the ends of leases that ran out unrecorded), or
        CAPACITY_UNAVAILABLE with the time until the soonest lease ends."""
        pool = self.get(pool_id)
        if units > pool.units_total:
            raise KernelError(
                VALIDATION_FAILED, f"units {units} is more than permit pool {pool.name!r} has ({pool.units_total})"
            )
        records = self.decide_ended(pool, now_ms)
        in_use = self.in_use(pool, now_ms)
        if in_use + units > pool.units_total:
            soonest = min(grant.expires_ms for grant in pool.grants.values() if self.held(grant, now_ms))
            raise KernelError(
                CAPACITY_UNAVAILABLE,
                f"permit pool {pool.name!r} has {pool.units_total - in_use} of {pool.units_total} units free, {units} asked",
                details={"unitsAvailable": pool.units_total - in_use, "unitsTotal": pool.units_total},
                retry_after_s=max(0.0, (soonest - now_ms) / 1000),
            )
        records.append({
            "type": "grant.acquired", "id": grant_id, "pool_id": pool_id, "scope_id": scope_id, "units": units,
            "token": token, "holder": holder, "session": session, "lease_ms": lease_ms,
            "expires_ms": now_ms + lease_ms, "at_ms": now_ms,
        })
        return records

    def decide_ended(self, pool: Pool, now_ms: int) -> list[dict]:
        """Expiry records for the grants of `pool` that ended unrecorded (a lease ran out, or the
        delivery a grant was taken with ended)."""
        return [self._ended("grant.expired", grant, now_ms) for grant in pool.grants.values() if not self.held(grant, now_ms)]

    def current(self, grant_id: str, token: str, now_ms: int) -> Grant:
        grant = self._grants.get(grant_id)
        if grant is None or grant.token != token:
            raise KernelError(STALE_CLAIM, f"token is not the current one for grant {grant_id!r}")
        if grant.message_id is not None:
            raise KernelError(
                CONFLICT, f"grant {grant_id!r} was taken with delivery {grant.message_id}: renew or settle the delivery"
            )
        if not self.held(grant, now_ms):
            raise KernelError(STALE_CLAIM, f"the lease on grant {grant_id!r} has ended")
        return grant

    def decide_renew(self, grant_id: str, token: str, lease_ms: int | None, now_ms: int) -> dict:
        grant = self.current(grant_id, token, now_ms)
        length = grant.lease_ms if lease_ms is None else lease_ms
        return {"type": "grant.renewed", "id": grant_id, "lease_ms": length, "expires_ms": now_ms + length, "at_ms": now_ms}

    def decide_release(self, grant_id: str, token: str, observation: object, now_ms: int) -> dict:
        grant = self.current(grant_id, token, now_ms)
        record = self._ended("grant.released", grant, now_ms)
        if observation is not None:
            record["observation"] = observation
        return record

    def decide_expire(self, grant_id: str, token: str, now_ms: int) -> dict | None:
        grant = self._grants.get(grant_id)
        if grant is None or grant.token != token or self.held(grant, now_ms):
            return None
        return self._ended("grant.expired", grant, now_ms)

    @staticmethod
    def _ended(kind: str, grant: Grant, now_ms: int) -> dict:
        return {"type": kind, "id": grant.id, "at_ms": now_ms}

    def decide_restart(self, newest_ms: int, now_ms: int, grace_ms: int) -> list[dict]:
        """After a recovery, the claims' rule: a lease that ended before the crash is expired; one
        that may have been alive gets at least `grace_ms` from now, as a renewal."""
        records: list[dict] = []
        for grant in sorted(self._grants.values(), key=lambda grant: (grant.expires_ms, grant.id)):
            if grant.message_id is not None:
                continue  # its delivery's lease has the restart rule
            if grant.expires_ms <= newest_ms:
                records.append(self._ended("grant.expired", grant, now_ms))
            elif grant.expires_ms < now_ms + grace_ms:
                records.append({
                    "type": "grant.renewed", "id": grant.id, "lease_ms": grant.lease_ms,
                    "expires_ms": now_ms + grace_ms, "at_ms": now_ms,
                })
        return records

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: dict) -> Pool:
        pool = Pool(record["id"], record["name"], record["units"], record["at_ms"])
        assert pool.id not in self._pools and pool.name not in self._by_name, "a pool id and name are made once"
        self._pools[pool.id] = self._by_name[pool.name] = pool
        return pool

    def apply_acquired(self, record: dict) -> Grant:
        grant = Grant(record)
        pool = self._pools[grant.pool_id]
        assert grant.id not in self._grants, "a grant id is handed out once"
        assert self.in_use(pool, grant.acquired_ms) + grant.units <= pool.units_total, "a grant never takes a pool over its units"
        pool.grants[grant.id] = self._grants[grant.id] = grant
        return grant

    def apply_renewed(self, record: dict) -> Grant:
        grant = self._grants[record["id"]]
        grant.lease_ms = record["lease_ms"]
        grant.expires_ms = record["expires_ms"]
        return grant

    def apply_ended(self, record: dict) -> Grant:
        """A release or an expiry: the grant's units go back to its pool, once."""
        grant = self._grants.pop(record["id"])
        del self._pools[grant.pool_id].grants[grant.id]
        return grant

    def drop_scopes(self, scope_ids: list[str]) -> list[Grant]:
        """Applied with a scope's end: the grants of its subtree are given back."""
        ended = set(scope_ids)
        dropped = [grant for grant in self._grants.values() if grant.scope_id in ended]
        for grant in dropped:
            del self._grants[grant.id]
            del self._pools[grant.pool_id].grants[grant.id]
        return dropped

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[dict]:
        for pool in self._pools.values():
            yield {
                "type": "pool.image", "id": pool.id, "name": pool.name, "units": pool.units_total,
                "created_ms": pool.created_ms, "grants": [grant.image() for grant in pool.grants.values()],
            }

    def apply_image(self, record: dict) -> None:
        pool = self.apply_created({"id": record["id"], "name": record["name"], "units": record["units"], "at_ms": record["created_ms"]})
        for item in record["grants"]:
            grant = Grant(item)
            pool.grants[grant.id] = self._grants[grant.id] = grant
