"""Capacity in the simulation: agents that hold pool units, take quota units and spend budgets
through crashes, and the book that checks what they were told.

Invariants (each from what the server acknowledged to the agents, so they hold whatever the
server believes):
- `pool-units`: at no instant do the grants of a pool that their holders were surely holding add
  up to more than its capacity. A grant is surely held from its acquisition until the end its
  holder was last told, or until the holder started to let go (a release sent), whichever is first;
  grants whose answer was lost are unknown here, so the sum is a lower bound and the check sound.
- `quota-window`: the units of the consumptions acknowledged in one window (direct consumes and
  waiter grants, each counted once by its id), less those of the consumptions a refund was sent
  for (unless every refund sent for one was surely not applied: answered 0 or refused), never
  exceed the allowance's limit. (A refund sent may or may not have been applied; counting it as
  applied can only hide a violation, never invent one.)
- `quota-refund`: a consumption is refunded at most once (one acknowledged refund answering more
  than 0 units, however many were sent), and a refund gives back exactly the units it took.
- `fifo`: of two waiters of one allowance that were both granted, the one registered first (in an
  earlier millisecond) was not granted in a later window.
- `pool-fifo`: of two waiters in a pool's line that were both granted, the one that joined first
  (in an earlier millisecond, as the server dated it) did not get its turn after the other.
  Waiters' grants count in `pool-units` like any other grant.
- `budget-limit`: what was acknowledged as settled, plus what acknowledged reservations surely
  still held (until a settle or void was sent for them, or their settleBy passed), never exceeds
  the budget's limit at any reservation.
- `late-charge`: a released reservation is charged late (a reservation of one minor unit `lateOf`
  it, taken in its run even once that run ended) at most once; and in a run whose end was
  acknowledged no other reservation is ever acknowledged.
- `return-gives-back`: an admitted delivery whose return (unhandled) was acknowledged holds none of
  the budget reservations its admission made (they are voided with it; its quota consumptions are
  refunded where the server still can, so each counts as maybe refunded in `quota-window`).

Agents here use their own runs, which the manager never ends: a scope's end drops its grants,
which no holder is told of. Admitted tasks share the pool, the allowance and the budget with the
direct holders: their grants (bound to the delivery, surely held until the delivery's known lease
end or a settlement sent) and consumptions count in the same invariants.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import trio

from .cluster import now_ms

__all__ = [
    "CapacityBook", "pooler", "slot_waiter", "quota_taker", "spender", "admission_submitter", "admitter", "returner", "POOL_UNITS", "QUOTA_LIMIT",
    "BUDGET_LIMIT",
]

POOL_UNITS = 3
QUOTA_LIMIT, QUOTA_WINDOW_S = 4, 5
BUDGET_LIMIT = 1000


def wall_ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


@dataclass
class Held:
    grant_id: str
    owner: str
    units: int
    start_ms: int
    end_ms: int  # the latest end its holder was told, or when it let go


class CapacityBook:
    def __init__(self, oracle: Any) -> None:
        self.oracle = oracle
        self.grants: dict[str, Held] = {}
        self.consumptions: dict[str, tuple[str, int]] = {}  # consumption id -> (window start, units)
        self.waiters: dict[str, tuple[int, int]] = {}  # waiter id -> (registered at, granted window)
        # Consumption id -> [refunds sent, of them surely not applied, acknowledged as giving units back].
        self.refunds: dict[str, list[int]] = {}
        self.settled = 0
        self.reservations: dict[str, list] = {}  # id -> [amount still held, surely held until (ms)]
        self.admissions = 0
        self.pool_waiters: dict[str, tuple[int, int]] = {}  # granted waiter id -> (joined at, its turn began at)

    # -- pools ----------------------------------------------------------------------------------

    def granted(self, owner: str, view: dict, lease_s: int) -> None:
        oracle = self.oracle
        oracle.checks += 1
        if view["grantId"] in self.grants:
            return
        end = wall_ms(view["leaseExpiresAt"])
        held = Held(view["grantId"], owner, view["units"], end - lease_s * 1000, end)
        self.grants[held.grant_id] = held
        self._check_units_at(held.start_ms)

    def extended(self, grant_id: str, end_ms: int) -> None:
        held = self.grants.get(grant_id)
        if held is not None and end_ms > held.end_ms:
            held.end_ms = end_ms
            for other in self.grants.values():
                if held.start_ms <= other.start_ms < held.end_ms:
                    self._check_units_at(other.start_ms)

    def letting_go(self, grant_id: str) -> None:
        held = self.grants.get(grant_id)
        if held is not None:
            held.end_ms = min(held.end_ms, now_ms())

    def _check_units_at(self, at_ms: int) -> None:
        holding = [held for held in self.grants.values() if held.start_ms <= at_ms < held.end_ms]
        units = sum(held.units for held in holding)
        if units > POOL_UNITS:
            self.oracle.fail("pool-units", f"at {at_ms} {units} units of a {POOL_UNITS}-unit pool were held: "
                             + ", ".join(f"{h.owner} {h.units} ({h.start_ms}-{h.end_ms})" for h in holding))

    def pool_waiter_granted(self, waiter: dict) -> None:
        """A waiter of the pool's line was granted (its acquire with its waiter id succeeded)."""
        self.oracle.checks += 1
        joined, turn = wall_ms(waiter["createdAt"]), wall_ms(waiter["signaledAt"])
        self.pool_waiters[waiter["waiterId"]] = (joined, turn)
        for other, (other_joined, other_turn) in self.pool_waiters.items():
            first, second = ((other, other_joined, other_turn), (waiter["waiterId"], joined, turn))
            if other_joined > joined:
                first, second = second, first
            if first[1] < second[1] and first[2] > second[2]:
                self.oracle.fail("pool-fifo", f"pool waiter {second[0]} (joined {second[1]}) got its turn at {second[2]}, "
                                 f"before {first[0]} that joined first ({first[1]}) and got its turn at {first[2]}")

    # -- quotas ---------------------------------------------------------------------------------

    def consumed(self, consumption_id: str, window_start: str, units: int) -> None:
        self.oracle.checks += 1
        if consumption_id in self.consumptions:
            return
        self.consumptions[consumption_id] = (window_start, units)
        used = sum(u for c, (w, u) in self.consumptions.items() if w == window_start and not self._maybe_refunded(c))
        if used > QUOTA_LIMIT:
            self.oracle.fail("quota-window", f"{used} units were consumed in the window from {window_start} "
                             f"(less any refunded), limit {QUOTA_LIMIT}")

    def _maybe_refunded(self, consumption_id: str) -> bool:
        sent, surely_not, _ = self.refunds.get(consumption_id, (0, 0, 0))
        return sent > surely_not

    def refunding(self, consumption_id: str) -> None:
        """A refund of a consumption is about to be sent: from now on it may have been applied."""
        self.refunds.setdefault(consumption_id, [0, 0, 0])[0] += 1

    def refund_answered(self, consumption_id: str, refunded: int | None) -> None:
        """A refund's outcome: the units its answer gave back, or None when it was surely not
        applied (a refusal: CONFLICT, NOT_FOUND). Not called when the outcome is unknown."""
        self.oracle.checks += 1
        entry = self.refunds[consumption_id]
        if not refunded:
            entry[1] += 1
            return
        entry[2] += 1
        _, units = self.consumptions[consumption_id]
        if entry[2] > 1:
            self.oracle.fail("quota-refund", f"consumption {consumption_id} was refunded {entry[2]} times")
        if refunded != units:
            self.oracle.fail("quota-refund", f"a refund of consumption {consumption_id} gave back {refunded} units; it took {units}")

    def waiting(self, waiter_id: str, created_at: str) -> None:
        if waiter_id not in self.waiters:
            self.waiters[waiter_id] = (wall_ms(created_at), -1)

    def waiter_granted(self, waiter_id: str, window_start: str) -> None:
        order, _ = self.waiters.get(waiter_id, (0, -1))
        window_ms = wall_ms(window_start)
        self.waiters[waiter_id] = (order, window_ms)
        for other, (other_order, other_window) in self.waiters.items():
            if other != waiter_id and other_window >= 0 and other_order < order and other_window > window_ms:
                self.oracle.fail("fifo", f"waiter {waiter_id} was granted in the window of {window_ms}, "
                                 f"before {other} that registered first (granted at {other_window})")

    # -- budgets --------------------------------------------------------------------------------

    def reserved(self, reservation_id: str, amount: int, until_ms: int) -> None:
        if reservation_id not in self.reservations:
            self.reservations[reservation_id] = [amount, until_ms]
            self._check_budget()

    def _check_budget(self) -> None:
        self.oracle.checks += 1
        at = now_ms()
        held = sum(amount for amount, until in self.reservations.values() if at < until)
        if self.settled + held > BUDGET_LIMIT:
            self.oracle.fail("budget-limit", f"settled {self.settled} plus surely reserved {held} is over the limit {BUDGET_LIMIT}")

    def letting_go_reservation(self, reservation_id: str) -> None:
        entry = self.reservations.get(reservation_id)
        if entry is not None:
            entry[1] = min(entry[1], now_ms())

    def settled_amount(self, amount: int) -> None:
        self.settled += amount
        self._check_budget()


# -- agents ------------------------------------------------------------------------------------------


async def _own_run(world: Any, name: str, rs: Any) -> Any:
    while True:
        ok, scope = await world.call(name, "create run", lambda: rs.scopes.create(name=f"{name}-run"))
        if ok:
            world.oracle.scopes.add(scope.id)
            return scope
        await trio.sleep(0.5)


async def _must(world: Any, name: str, what: str, step: Any) -> Any:
    while True:
        ok, value = await world.call(name, what, step)
        if ok:
            return value
        await trio.sleep(0.5)


async def pooler(world: Any, name: str) -> None:
    """Acquires 1-2 units of a 3-unit pool, holds (renewed), releases, abandons, or comes back as a
    zombie with a released or expired grant's token."""
    rng: random.Random = world.rng(name)
    book: CapacityBook = world.capacity
    rs = world.client(name)
    await world.ready.wait()
    await _must(world, name, "ensure pool", lambda: rs.pools.ensure("slots", capacity=POOL_UNITS))
    run = await _own_run(world, name, rs)
    pool = rs.scope(run.id).pool("slots")
    old: list[tuple[str, str]] = []
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.5))
        if old and rng.random() < 0.15:
            grant_id, token = rng.choice(old)
            action = rng.choice(["renew", "release"])
            book.letting_go(grant_id) if action == "release" else None
            ok, _ = await world.call(name, f"zombie {action} grant", lambda: rs._ctx.call("POST", f"/grants/{grant_id}/{action}", body={"token": token}))
            if ok:
                world.log(name, f"zombie {action} of {grant_id} accepted")
            continue
        units, lease_s = rng.choice([1, 1, 2]), rng.choice([5, 10])
        ok, lease = await world.call(name, "acquire", lambda: pool.acquire(units=units, lease_seconds=lease_s, wait=rng.random() < 0.5, timeout_ms=3_000))
        if not ok:
            continue
        view = {"grantId": lease.grant_id, "units": lease.units, "leaseExpiresAt": lease.expires_at.isoformat().replace("+00:00", "Z")}
        book.granted(name, view, lease_s)
        lease._when_lost(lambda grant_id=lease.grant_id: book.letting_go(grant_id))
        old.append((lease.grant_id, lease.token()))
        del old[:-10]
        world.log(name, f"holds {units} units {lease.grant_id}")
        until = trio.current_time() + rng.uniform(0, 2.5 * lease_s)
        while trio.current_time() < until and not lease.is_lost:
            await trio.sleep(min(1.0, until - trio.current_time()))
            book.extended(lease.grant_id, round(lease.expires_at.timestamp() * 1000))
        book.extended(lease.grant_id, round(lease.expires_at.timestamp() * 1000))
        if rng.random() < 0.2:
            await lease.aclose()  # vanish: the lease runs out on the server
            world.log(name, f"abandons {lease.grant_id}")
            continue
        book.letting_go(lease.grant_id)
        await world.call(name, "release", lease.release)
    await rs.aclose()


async def slot_waiter(world: Any, name: str) -> None:
    """0.3.0's slots(): acquires units of the 3-unit pool, or joins its line, polls the waiter,
    acquires with the waiter id when signaled; gives up (cancel), or walks away from its turn."""
    rng: random.Random = world.rng(name)
    book: CapacityBook = world.capacity
    rs = world.client(name)
    await world.ready.wait()
    row = await _must(world, name, "ensure pool", lambda: rs.pools.ensure("slots", capacity=POOL_UNITS))
    run = await _own_run(world, name, rs)
    path = f"/permits/{row['id']}"
    while world.running:
        await trio.sleep(rng.expovariate(1 / 2.0))
        units, lease_s = rng.choice([1, 1, 2, 3]), rng.choice([5, 10])
        acquire = {"scopeId": run.id, "units": units, "holder": name, "holderSession": rs.session, "leaseSeconds": lease_s}
        ok, reply = await world.call(name, "slots acquire", lambda: rs._ctx.call("POST", path + "/acquire", body=acquire))
        grant = reply.body if ok else None
        if grant is None:
            ok, reply = await world.call(name, "slots wait", lambda: rs._ctx.call("POST", path + "/wait", body={"scopeId": run.id, "units": units, "holder": name}))
            if not ok:
                continue
            waiter, walk_away = reply.body, rng.random() < 0.1
            give_up = trio.current_time() + rng.uniform(2, 20)
            while trio.current_time() < give_up and waiter["state"] in ("WAITING", "SIGNALED"):
                if waiter["state"] == "SIGNALED" and not walk_away:
                    ok, reply = await world.call(name, "slots turn", lambda: rs._ctx.call("POST", path + "/acquire", body={**acquire, "waiterId": waiter["waiterId"]}))
                    if ok:
                        grant = reply.body
                        book.pool_waiter_granted(waiter)
                        break
                await trio.sleep(rng.uniform(0.2, 1.0))
                ok, reply = await world.call(name, "slots poll", lambda: rs._ctx.call("GET", f"/permit-waiters/{waiter['waiterId']}"))
                if ok:
                    waiter = reply.body
            if grant is None:
                if not walk_away:
                    await world.call(name, "slots cancel", lambda: rs._ctx.call("POST", f"/permit-waiters/{waiter['waiterId']}/cancel", body={}))
                continue
        book.granted(name, grant, lease_s)
        world.log(name, f"holds {units} slot units {grant['grantId']}")
        await trio.sleep(rng.uniform(0, 0.8 * lease_s))
        book.letting_go(grant["grantId"])
        await world.call(name, "slots release", lambda: rs._ctx.call("POST", f"/grants/{grant['grantId']}/release", body={"token": grant["token"]}))
    await rs.aclose()


async def quota_taker(world: Any, name: str) -> None:
    """Consumes 1-3 units of a 4-per-5 s allowance, or registers a waiter and polls or cancels it."""
    rng: random.Random = world.rng(name)
    book: CapacityBook = world.capacity
    rs = world.client(name)
    await world.ready.wait()
    row = await _must(world, name, "ensure quota", lambda: rs.quotas.ensure("calls", units_per_window=QUOTA_LIMIT, window_seconds=QUOTA_WINDOW_S))
    run = await _own_run(world, name, rs)
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.0))
        units = rng.choice([1, 1, 2, 3])
        body = {"scopeId": run.id, "units": units, "holder": name}
        ok, reply = await world.call(name, "consume", lambda: rs._ctx.call("POST", f"/allowances/{row['id']}/consume", body=body))
        if ok:
            book.consumed(reply.body["consumptionId"], reply.body["windowStart"], units)
            if rng.random() < 0.3:
                await _refund(world, name, rs, rng, row["id"], reply.body["consumptionId"])
            continue
        if rng.random() < 0.5:
            continue
        ok, reply = await world.call(name, "wait", lambda: rs._ctx.call("POST", f"/allowances/{row['id']}/wait", body={**body, "ttlSeconds": rng.choice([5, 20])}))
        if not ok:
            continue
        waiter = reply.body
        book.waiting(waiter["waiterId"], waiter["createdAt"])
        give_up = trio.current_time() + rng.uniform(1, 15)
        while waiter["state"] == "WAITING" and trio.current_time() < give_up:
            await trio.sleep(rng.uniform(0.2, 0.5))
            ok, reply = await world.call(name, "poll", lambda: rs._ctx.call("GET", f"/allowance-waiters/{waiter['waiterId']}"))
            if ok:
                waiter = reply.body
        if waiter["state"] == "WAITING":
            ok, reply = await world.call(name, "cancel", lambda: rs._ctx.call("POST", f"/allowance-waiters/{waiter['waiterId']}/cancel"))
            if ok:
                waiter = reply.body
        if waiter["state"] == "GRANTED":
            book.consumed(waiter["consumptionId"], waiter["windowStart"], waiter["units"])
            book.waiter_granted(waiter["waiterId"], waiter["windowStart"])
            if rng.random() < 0.3:
                await _refund(world, name, rs, rng, row["id"], waiter["consumptionId"])
        world.log(name, f"waiter {waiter['waiterId']} {waiter['state']}")
    await rs.aclose()


async def _refund(world: Any, name: str, rs: Any, rng: random.Random, allowance_id: str, consumption_id: str) -> None:
    """Give a consumption back, as a caller cancelled as its answer came does: at once or a little
    later (sometimes after its window ended, or too late to be kept), once or twice."""
    book: CapacityBook = world.capacity
    await trio.sleep(rng.choice([0.0, 0.0, rng.uniform(0, 6), rng.uniform(25, 35)]))
    for _ in range(rng.choice([1, 1, 2])):
        book.refunding(consumption_id)
        path = f"/allowances/{allowance_id}/consumptions/{consumption_id}/refund"
        ok, reply = await world.call(name, "refund", lambda: rs._ctx.call("POST", path, body={}))
        if ok:
            book.refund_answered(consumption_id, reply.body["refunded"])
            world.log(name, f"refunded {reply.body['refunded']} of {consumption_id}")
        elif reply.code in ("CONFLICT", "NOT_FOUND"):
            book.refund_answered(consumption_id, None)


async def spender(world: Any, name: str) -> None:
    """Reserves from a 10.00 budget, then settles part (sometimes twice with one key), voids,
    leaves the reservation to its settleBy, or charges it late once its settleBy released it
    (sometimes after ending its run, which it then replaces)."""
    rng: random.Random = world.rng(name)
    book: CapacityBook = world.capacity
    rs = world.client(name)
    await world.ready.wait()
    await _must(world, name, "ensure budget", lambda: rs.budgets.ensure("spend", currency="USD", scale=2, limit="10.00"))
    run = await _own_run(world, name, rs)
    budget = rs.scope(run.id).budget("spend")
    number = 0
    while world.running:
        await trio.sleep(rng.expovariate(1 / 2.0))
        settle_by = datetime.fromtimestamp((now_ms() + rng.choice([5_000, 30_000])) / 1000, tz=timezone.utc).isoformat()
        amount = f"{rng.randint(0, 3)}.{rng.randint(0, 99):02d}"
        ok, reservation = await world.call(name, "reserve", lambda: budget.reserve(amount=amount, settle_by=settle_by))
        if not ok:
            continue
        book.reserved(reservation.id, int(reservation.reserved_minor), round(datetime.fromisoformat(settle_by).timestamp() * 1000))
        await trio.sleep(rng.uniform(0, 8))
        number += 1
        choice = rng.choice(["settle", "settle", "void", "leave", "late"])
        if choice == "leave":
            continue
        if choice == "late":
            until_ms = round(datetime.fromisoformat(settle_by).timestamp() * 1000)
            if await _charge_late(world, name, rs, rng, reservation, run.id, until_ms):
                run = await _own_run(world, name, rs)  # it ended the run: a new one for what follows
                budget = rs.scope(run.id).budget("spend")
            continue
        book.letting_go_reservation(reservation.id)
        if choice == "void":
            await world.call(name, "void", lambda: reservation.void(usage_key=f"{name}-{number}-void"))
            continue
        spent = rng.randint(0, int(reservation.reserved_minor))
        text = f"{spent // 100}.{spent % 100:02d}"
        for _ in range(rng.choice([1, 1, 2])):
            ok, answer = await world.call(name, "settle", lambda: reservation.settle(amount=text, usage_key=f"{name}-{number}"))
            if ok and answer["settledMinor"] == str(spent):
                book.settled_amount(spent)
                break
        await world.call(name, "void rest", lambda: reservation.void(usage_key=f"{name}-{number}-rest"))
    await rs.aclose()


async def _charge_late(world: Any, name: str, rs: Any, rng: random.Random, reservation: Any, run_id: str, until_ms: int) -> bool:
    """Charge a reservation late, once its settleBy released it, as 0.3.0 does (one minor unit
    reserved `lateOf` it in its run, the cost settled against it with allowOverrun), half the time
    after ending the run; sometimes twice, which must be refused. Returns whether the run ended."""
    book: CapacityBook = world.capacity
    oracle = world.oracle
    await trio.sleep(max(0.0, (until_ms - now_ms()) / 1000) + rng.uniform(0.1, 2.0))
    ended = rng.random() < 0.5
    budget_id = reservation._budget_id
    if ended:
        oracle.run_may_end(run_id, now_ms())
        ok, _ = await world.call(name, "cancel run", lambda: rs.scope(run_id).cancel())
        if ok:
            oracle.run_ended(run_id, now_ms())
            plain = {"scopeId": run_id, "holder": name, "amountMinor": "1"}
            ok, _ = await world.call(name, "reserve in ended run", lambda: rs._ctx.call("POST", f"/budgets/{budget_id}/reserve", body=plain))
            if ok:
                oracle.fail("late-charge", f"a reservation in run {run_id} was acknowledged after its end was")
    late = {"scopeId": run_id, "holder": "late-charge", "amountMinor": "1", "lateOf": reservation.id}
    taken = 0
    for attempt in range(rng.choice([1, 1, 2])):
        ok, reply = await world.call(name, "late reserve", lambda: rs._ctx.call("POST", f"/budgets/{budget_id}/reserve", body=late))
        if not ok:
            continue
        taken += 1
        if taken > 1:
            oracle.fail("late-charge", f"reservation {reservation.id} was charged late twice")
        vehicle = reply.body["reservationId"]
        book.reserved(vehicle, 1, now_ms() + 3_600_000)
        book.letting_go_reservation(vehicle)
        cost = rng.randint(1, 300)
        settle = {"reservationId": vehicle, "amountMinor": str(cost), "workKey": f"late:{reservation.id}", "allowOverrun": True}
        ok, answer = await world.call(name, "late settle", lambda: rs._ctx.call("POST", f"/budgets/{budget_id}/settle", body=settle))
        if ok:
            book.settled_amount(int(answer.body["settledMinor"]))
    return ended


async def admission_submitter(world: Any, name: str) -> None:
    """Submits tasks that need pool units, and sometimes quota units and a budget amount, to its own run."""
    rng: random.Random = world.rng(name)
    rs = world.client(name)
    await world.ready.wait()
    await _must(world, name, "ensure pool", lambda: rs.pools.ensure("slots", capacity=POOL_UNITS))
    await _must(world, name, "ensure quota", lambda: rs.quotas.ensure("calls", units_per_window=QUOTA_LIMIT, window_seconds=QUOTA_WINDOW_S))
    await _must(world, name, "ensure budget", lambda: rs.budgets.ensure("spend", currency="USD", scale=2, limit="10.00"))
    run = await _own_run(world, name, rs)
    world.admission_runs.append(run.id)
    box = rs.scope(run.id).mailbox_by_id(world.mailboxes["work"])
    number = 0
    while world.running:
        await trio.sleep(rng.expovariate(1 / 3.0))
        number += 1
        needs: dict = {"pools": [{"name": "slots", "units": rng.choice([1, 1, 2, 3])}]}
        if rng.random() < 0.5:
            needs["quotas"] = [{"name": "calls", "units": rng.choice([1, 2])}]
        if rng.random() < 0.3:
            needs["budgets"] = [{"name": "spend", "reserveMinor": str(rng.randint(1, 200))}]
        ok, ticket = await world.call(name, "submit admission task", lambda: box.submit({"n": number}, key=f"{name}-{number}", requirements=needs))
        if ok:
            world.log(name, f"submitted {ticket.id} needing {needs}")
    await rs.aclose()


async def admitter(world: Any, name: str) -> None:
    """Admits tasks (long polls included) and completes, retries, renews past the lease, or vanishes;
    settles or voids what was reserved for them."""
    rng: random.Random = world.rng(name)
    book: CapacityBook = world.capacity
    rs = world.client(name)
    await world.ready.wait()
    budget = await _must(world, name, "ensure budget", lambda: rs.budgets.ensure("spend", currency="USD", scale=2, limit="10.00"))
    while world.running:
        if not world.admission_runs:
            await trio.sleep(0.5)
            continue
        run_id = rng.choice(world.admission_runs)
        lease_s, wait_ms = rng.choice([5, 10]), rng.choice([0, 2_000, 10_000])
        body = {"scopeId": run_id, "mailboxId": world.mailboxes["work"], "holder": name, "holderSession": rs.session,
                "leaseSeconds": lease_s, "waitMs": wait_ms or None}
        ok, reply = await world.call(name, "admit", lambda: rs._ctx.call("POST", "/tasks/admit", body=body, wait_ms=wait_ms))
        if not ok or reply.status == 204:
            await trio.sleep(rng.uniform(0.1, 1.0))
            continue
        admitted = reply.body
        message_id, token = admitted["messageId"], admitted["token"]
        for grant in admitted["grants"]:
            book.granted(name, {**grant, "leaseExpiresAt": admitted["leaseExpiresAt"]}, lease_s)
        for consumption in admitted["consumptions"]:
            book.consumed(consumption["consumptionId"], consumption["windowStart"], consumption["units"])
        for reservation_id in admitted["reservations"]:
            book.reserved(reservation_id, 0, now_ms())  # its amount is not in the answer: counted as spent when settled
        book.admissions += 1
        world.log(name, f"admitted {message_id} with {[g['units'] for g in admitted['grants']]} units")
        mode = rng.choices(["complete", "slow", "retry", "vanish"], [6, 2, 2, 1])[0]
        if mode == "vanish":
            await rs.aclose()
            rs = world.client(name)
            continue
        if mode == "slow":
            for _ in range(rng.randint(2, 3)):
                await trio.sleep(lease_s / 3)
                ok, renewed = await world.call(name, "renew", lambda: rs._ctx.call("POST", f"/messages/{message_id}/renew", body={"token": token, "leaseSeconds": lease_s}))
                if not ok:
                    break
                for grant in admitted["grants"]:
                    book.extended(grant["grantId"], wall_ms(renewed.body["leaseExpiresAt"]))
        else:
            await trio.sleep(rng.uniform(0, 0.8 * lease_s))
        for grant in admitted["grants"]:
            book.letting_go(grant["grantId"])
        action, settle = ("nack", {"token": token, "retry": True}) if mode == "retry" else ("complete", {"token": token})
        await world.call(name, action, lambda: rs._ctx.call("POST", f"/messages/{message_id}/{action}", body=settle))
        for reservation_id in admitted["reservations"]:  # what was reserved for it: spend some, give the rest back
            spent = rng.randint(0, 5)
            ok, view = await world.call(name, "settle", lambda: rs._ctx.call("POST", f"/budgets/{budget['id']}/settle", body={"reservationId": reservation_id, "amountMinor": str(spent), "workKey": f"{reservation_id}-s"}))
            if ok and view.body["settledMinor"] == str(spent):
                book.settled_amount(spent)
            await world.call(name, "void", lambda: rs._ctx.call("POST", f"/budgets/{budget['id']}/void", body={"reservationId": reservation_id, "workKey": f"{reservation_id}-v"}))
    await rs.aclose()


async def returner(world: Any, name: str) -> None:
    """Submits to its own run tasks whose admission reserves a budget amount, admits each and
    returns it unhandled (a worker cancelled as it took it), checks that the return gave the
    reservation back (`return-gives-back`), then admits it again and completes it, settling nothing."""
    rng: random.Random = world.rng(name)
    book: CapacityBook = world.capacity
    rs = world.client(name)
    await world.ready.wait()
    budget = await _must(world, name, "ensure budget", lambda: rs.budgets.ensure("spend", currency="USD", scale=2, limit="10.00"))
    run = await _own_run(world, name, rs)
    box = rs.scope(run.id).mailbox_by_id(world.mailboxes["work"])
    body = {"scopeId": run.id, "mailboxId": world.mailboxes["work"], "holder": name, "holderSession": rs.session, "leaseSeconds": 10}
    number = 0
    while world.running:
        await trio.sleep(rng.uniform(0.5, 2.0))
        number += 1
        needs = {"budgets": [{"name": "spend", "reserveMinor": str(rng.randint(1, 50))}]}
        ok, _ = await world.call(name, "submit", lambda: box.submit({"n": number}, key=f"{name}-{number}", requirements=needs))
        if not ok:
            continue
        for turn in ("return", "complete"):
            ok, reply = await world.call(name, "admit", lambda: rs._ctx.call("POST", "/tasks/admit", body=body))
            if not ok or reply.status == 204:
                break
            admitted = reply.body
            message_id, token, reservations = admitted["messageId"], admitted["token"], admitted["reservations"]
            for reservation_id in reservations:
                book.reserved(reservation_id, 0, now_ms())
            settle = {"token": token}
            done, _ = await world.call(name, turn, lambda: rs._ctx.call("POST", f"/messages/{message_id}/{turn}", body=settle))
            if turn == "return" and done:
                ok, seen = await world.call(name, "budget", lambda: rs._ctx.call("GET", f"/budgets/{budget['id']}"))
                held = {r["id"] for r in seen.body["reservations"] if r["state"] == "ACTIVE"} & set(reservations) if ok else set()
                if held:
                    book.oracle.fail("return-gives-back", f"{message_id} was returned unhandled and its reservations {sorted(held)} are still held")
            for reservation_id in reservations:  # (a returned one's is voided already: this finds it ended)
                await world.call(name, "void", lambda: rs._ctx.call("POST", f"/budgets/{budget['id']}/void", body={"reservationId": reservation_id, "workKey": f"{reservation_id}-v"}))
    await rs.aclose()
