"""Every limit, window and default of the kernel, in one place, with units last.

The defaults are the product's published ones (the v1 API's documented limits and defaults).
All of them are settings: the server builds a `Limits` from its configuration, the state machines
only read it. A value outside a limit is a `VALIDATION_FAILED` (or `BACKLOG_FULL`), never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Limits", "backoff_ms"]


@dataclass(frozen=True, slots=True)
class Limits:
    # Claims and leases.
    lease_s_min: int = 5
    lease_s_max: int = 600
    lease_s_default: int = 30
    claim_key_len_max: int = 512
    holder_len_max: int = 256
    # A lease alive at a crash gets at least this long after recovery before it can expire
    # (at least one renew interval of the longest default lease).
    restart_grace_s: int = 15
    # The grace periods given at a restart end spread over this long after the grace, so that
    # leases which would all end at once do not all expire at one instant.
    restart_spread_s: int = 15

    # Scopes.
    name_len_max: int = 256
    scope_depth_max: int = 32
    child_limit_max: int = 1_000_000

    # Payloads (a message payload, a task input, a delivery result, a release observation).
    payload_bytes_max: int = 65_536
    # The whole request body; larger is 413.
    request_bytes_max: int = 1_048_576
    # Operations one batch request carries (its bytes are bounded as any body's, above).
    batch_operations_max: int = 1_000
    # Caller data nested deeper than this is refused (the journal must be able to write it back).
    json_depth_max: int = 64

    # Idempotency keys: replayed for this long, at most this many kept per space.
    idempotency_ttl_s: int = 86_400
    idempotency_keys_max: int = 1_000_000
    idempotency_key_len_max: int = 255

    # Queues and tasks.
    task_key_len_max: int = 512
    work_key_len_max: int = 512
    work_key_ttl_s: int = 7 * 86_400
    retention_s: int = 7 * 86_400
    # An ended run (a root scope), with its child runs and all they kept (task tombstones, finished
    # messages, once slots, barriers, timers, groups), is removed this long after its end; 0 keeps
    # ended runs for good (`runs.py`).
    ended_run_retention_s: int = 7 * 86_400
    attempts_max_default: int = 5
    attempts_max_max: int = 100
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    wait_ms_max: int = 30_000
    # Deliveries one receive of many (a prefetch) leases at most.
    receive_count_max: int = 100
    # The most unsettled messages one mailbox holds: the backlog of a mailbox that sets no
    # backlogLimit, and the largest backlogLimit one may set (a larger one is VALIDATION_FAILED).
    backlog_limit_max: int = 100_000
    subscribers_max: int = 1_000
    mailboxes_max: int = 10_000
    # A nack's error text and a cancel's reason are kept as `outcomeReason`; 0.3.0 sends up to 2000.
    reason_len_max: int = 2000

    # What the callers of one space can make it hold (`caps.py` says what counts); going past
    # one is BACKLOG_FULL. Nothing a space key does grows memory past these unless they are raised.
    space_scopes_max: int = 100_000
    space_claims_max: int = 100_000
    space_tasks_max: int = 100_000
    space_payload_bytes_max: int = 256 * 1_048_576
    # Every entity a space keeps, live or ended: runs, claim keys, messages, tasks, pool and
    # allowance waiters, and (in the room those leave) stored idempotent answers.
    space_entities_max: int = 1_000_000

    # Pools, allowances, budgets and work limits a space may hold, and their bounds.
    pools_max: int = 10_000
    pool_units_max: int = 1_000_000
    allowances_max: int = 10_000
    allowance_units_max: int = 1_000_000_000
    window_s_max: int = 31 * 86_400
    # Allowance waiters still waiting, per allowance; and their TTL (the client sends 5-3600).
    waiters_max: int = 10_000
    waiter_ttl_s_min: int = 5
    waiter_ttl_s_max: int = 3600
    # A signaled pool waiter holds its units back this long for its acquire (0.3.0 polls at most
    # every 1.2 s); a crashed one holds the line up no longer.
    pool_turn_s: int = 10
    cooldown_s_max: int = 86_400
    budgets_max: int = 10_000
    budget_scale_max: int = 18
    currency_len_max: int = 16
    # A reservation without `settleBy` is released after this long; a later `settleBy` is refused.
    settle_by_s_default: int = 3600
    settle_by_s_max: int = 30 * 86_400
    work_limits_max: int = 10_000

    # Barriers, timers and task groups kept per space (ended ones included), and their sizes.
    barriers_max: int = 100_000
    barrier_target_max: int = 10_000
    timers_per_scope_max: int = 10_000
    timer_after_s_max: int = 366 * 86_400
    # A fired timer nobody acknowledges becomes EXPIRED this long after it fired.
    timer_fired_ttl_s: int = 3_600
    # The most fired timers one poll lists (newest first).
    timers_listed_max: int = 1_000
    groups_max: int = 100_000
    group_members_max: int = 100
    # The event log of a space: at most this many events, none older than this.
    events_kept_max: int = 10_000
    events_kept_s: int = 86_400
    # How long an empty watch is held: without waitSeconds; at most for a client that does not say
    # it is 0.3.0 or newer (the 0.2.0 client gives up after 10 s and does not extend it); at most.
    watch_wait_s_default: int = 5
    watch_wait_s_legacy_max: int = 8
    watch_wait_s_max: int = 20

    def replace(self, **changes: object) -> "Limits":
        """A copy with some settings changed; unknown names are a `TypeError`."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise TypeError(f"unknown limit(s): {', '.join(sorted(unknown))}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Limits(**values)


def backoff_ms(limits: Limits, attempt: int, jitter: float) -> int:
    """The wait before redelivery after `attempt` asked for a retry: 1 s, 2 s, 4 s... capped.

    `jitter` is a factor drawn by the caller from the kernel's seeded source (0.8 to 1.0), so the
    wait never passes the cap and replay needs only the recorded result. Not to be confused with
    a lease that ran out, which requeues at once.
    """
    nominal_s: float = min(limits.backoff_max_s, limits.backoff_base_s * 2 ** min(max(attempt - 1, 0), 30))
    return max(0, round(nominal_s * 1000 * jitter))
