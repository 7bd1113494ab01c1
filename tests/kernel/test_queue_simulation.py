"""A seeded simulation: random streams of queue and task commands, timers fired as the supervisor
would, the invariants checked after every step and replay compared at random points.

The seed alone reproduces a failure: `pytest -k simulation --seed` is not needed, the failing
parameter names it.
"""

from __future__ import annotations

import random

import pytest

from runstate.actors.errors import KernelError
from runstate.actors.limits import Limits
from runstate.actors.messages import LIVE

from .queue_world import T0, World, recount, snapshot

STEPS = 400


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.world = World(Limits().replace(retention_s=120, work_key_ttl_s=60))
        w = self.world
        self.mailboxes = [w.mailbox("a"), w.mailbox("b", max_attempts=2, backlog_limit=12)]
        root = w.scope()
        self.scopes = [root, w.scope(parent=root), w.scope()]
        self.deliveries: list[dict] = []  # every delivery ever handed out (tokens go stale)
        self.tasks: list[str] = []
        self.ended: dict[str, tuple] = {}  # task id -> (state, outcome, reason) once terminal
        self.armed: dict[tuple, object] = {}  # (actor, tag) -> the newest timer
        self.gone: set[str] = set()  # dead letters requeued (as new messages) or deleted: never seen again

    def step(self) -> None:
        w, rng = self.world, self.rng
        w.at(w.now - T0 + rng.choice([0, 0, 1, 50, 400, 1_000, 3_000, 7_000]))
        self.fire_due()
        mailbox, scope = rng.choice(self.mailboxes), rng.choice(self.scopes)
        action = rng.choices(
            ["send", "submit", "recv", "complete", "retry", "reject", "return", "renew", "cancel", "join", "end", "requeue",
             "delete", "purge"],
            weights=[10, 12, 20, 10, 6, 2, 4, 5, 3, 3, 0.3, 1, 0.5, 0.2],
        )[0]
        before = len(w.records)
        try:
            if action == "send":
                key = rng.choice([None, None, "w1", "w2"])
                deadline = rng.choice([None, None, w.now + rng.randint(1, 20_000)])
                w.send(mailbox, scope, rng.randint(0, 2), work_key=key, deadline_ms=deadline)
            elif action == "submit":
                deadline = rng.choice([None, None, None, w.now + rng.randint(1, 30_000)])
                reply = w.submit(mailbox, scope, f"k{rng.randint(0, 9)}", rng.randint(0, 1), deadline, f"p{rng.randint(0, 3)}")
                if reply["created"]:
                    self.tasks.append(reply["taskId"])
            elif action == "recv":
                delivery = w.recv(mailbox, scope, lease_s=rng.choice([5, 10, 30]))
                if delivery is not None:
                    self.deliveries.append(delivery)
            elif action in ("complete", "retry", "reject", "return", "renew") and self.deliveries:
                delivery = rng.choice(self.deliveries[-8:])
                message_id, token = delivery["message"]["id"], delivery["token"]
                if action == "complete":
                    w.do("complete_delivery", message_id, token, {"payload": rng.randint(0, 99)})
                elif action == "renew":
                    w.do("renew_delivery", message_id, token, rng.choice([None, 5_000, 20_000]))
                elif action == "return":
                    returned = w.space.messages.get(message_id).returned
                    w.do("return_delivery", message_id, token)
                    message = w.space.messages.get(message_id)
                    assert message.returned == returned + 1 or message.state not in LIVE, "a return counts as returned"
                    assert message.state != "DEAD", "a returned delivery is never dead-lettered for its attempts"
                else:
                    w.do("nack_delivery", message_id, token, action == "retry", None, rng.uniform(0.8, 1.0))
            elif action == "cancel" and self.tasks:
                w.do("cancel_task", rng.choice(self.tasks), rng.choice([None, "stop"]))
            elif action == "join" and self.tasks:
                task_id = rng.choice(self.tasks)
                if rng.random() < 0.5:
                    w.do("join_task", task_id, f"p{rng.randint(0, 3)}", scope)
                else:
                    w.do("detach_task", task_id, f"p{rng.randint(0, 3)}")
            elif action == "end":
                w.do("end_scope", scope, rng.choice(["CANCELLED", "COMPLETED"]))
            elif action in ("requeue", "delete"):
                self.act_on_dead_letters(action, mailbox)
            elif action == "purge":
                waiting = {m.id for m in w.space.messages.waiting_in_mailbox(mailbox, scope)}
                reply = w.purge(mailbox, scope_id=scope, dry_run=rng.random() < 0.2)
                assert reply["matched"] == len(waiting)
                if not reply["dryRun"]:
                    assert all(w.space.messages.get(m).state == "DROPPED" for m in waiting)
        except KernelError:
            assert len(w.records) == before, "a refusal wrote records"
        self.collect_timers()
        self.check()

    def act_on_dead_letters(self, action: str, mailbox: str) -> None:
        """An operator's requeue or delete, of some dead letters by id or of those a filter matches."""
        w, rng = self.world, self.rng
        letters = [m.id for m in w.space.messages.dead_letters(mailbox)]
        fields = rng.choice([
            {"every": True}, {"reason": "attempts_exhausted"}, {"older_than_s": 5}, {"newer_than_s": 5},
            {"message_ids": rng.sample(letters, min(len(letters), 2))} if letters else {"every": True},
        ])
        dry_run = rng.random() < 0.2
        before = len(w.records)
        reply = (w.requeue if action == "requeue" else w.delete)(mailbox, dry_run=dry_run, **fields)
        if dry_run:
            assert len(w.records) == before, "a dry run wrote records"
            return
        acted = list(reply["requeuedAs"]) if action == "requeue" else letters if fields.get("every") else None
        if acted is None:
            record = w.records[-1] if len(w.records) > before else None
            acted = [] if record is None else record["message_ids"]
        self.gone.update(acted)
        for new_id in reply.get("requeuedAs", {}).values():
            assert w.space.messages.get(new_id).attempts == 0

    def collect_timers(self) -> None:
        for timer in self.world.timers:
            self.armed[(timer.actor, timer.tag)] = timer
        self.world.timers.clear()

    def fire_due(self) -> None:
        """What the supervisor does: every armed timer due by now, earliest first."""
        while True:
            due = sorted((t for t in self.armed.values() if t.due_ms <= self.world.now), key=lambda t: t.due_ms)
            if not due:
                return
            for timer in due:
                del self.armed[(timer.actor, timer.tag)]
                self.world.do("on_timer", timer.actor, timer.tag, timer.marker)
            self.collect_timers()

    def check(self) -> None:
        space, now = self.world.space, self.world.now
        views = {m.id: space.mailboxes.view(m).counts._asdict() for m in space.mailboxes.all()}
        assert recount(space) == views
        for task in space.tasks.all():
            message = space.messages.find(task.message_id)
            if task.terminal:
                seen = (task.state, task.outcome if not task.tombstoned else None, task.reason)
                first = self.ended.setdefault(task.id, seen)
                assert first[0] == seen[0] and first[2] == seen[2], "a terminal task changed"
                if not task.tombstoned:
                    assert first[1] == seen[1], "an outcome changed"
                assert message is None or message.state not in LIVE
            else:
                assert message is not None
                expected = {"QUEUED": ("QUEUED", "DELAYED"), "RUNNING": ("LEASED",)}[task.state]
                assert message.state in expected, (task.state, message.state)
                assert task.attempt == message.attempts
        for message_id in self.gone:
            assert space.messages.find(message_id) is None, f"dead letter {message_id} came back"
        for message in space.messages.all():
            mailbox = space.mailboxes.get(message.mailbox_id)
            assert 0 <= message.returned <= message.attempts
            assert message.counted_attempts() <= mailbox.max_attempts
            if message.state == "LEASED":
                assert message.token is not None
            else:
                assert message.token is None


@pytest.mark.parametrize("seed", range(12))
def test_simulation_keeps_every_invariant_and_replays_exactly(seed):
    simulation = Simulation(seed)
    for step in range(STEPS):
        simulation.step()
        if simulation.rng.random() < 0.02:
            world = simulation.world
            assert snapshot(world.replayed(), world.now) == snapshot(world.space, world.now), f"step {step}"
    simulation.world.assert_replay_matches()
    # The run did something: deliveries, finished tasks and refusals all happened.
    assert simulation.deliveries and simulation.ended
