/**
 * Every primitive beyond claims and queues, against a real server: pools (`run.pool(name).run()`
 * with `lease.signal` as for claims), quotas, budgets, work limits, admission, barriers, timers,
 * task groups, the event log as an async iterator with a cursor, and the diagnostics.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  BudgetExceededError,
  ConflictError,
  LeaseLostError,
  Runstate,
  RunstateError,
  WaitTimeoutError,
  type ScopeHandle,
  type WatchedEvent,
} from 'runstate-sdk';

import { Server } from './support/server.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('pools, quotas, budgets, work limits, admission, barriers, timers, groups, events', { concurrency: true }, () => {
  let server: Server;
  let rs: Runstate;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'primitives' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  const newRun = (name: string): Promise<ScopeHandle> => rs.scopes.create({ name });

  test('an empty name is VALIDATION_FAILED, as the server refuses it at create, not a NotFoundError of a route', async () => {
    const run = await newRun('empty-names');
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['pools', () => rs.pools.ensure('', { capacity: 1 })],
      ['quotas', () => rs.quotas.ensure('', { unitsPerWindow: 1, windowSeconds: 60 })],
      ['budgets', () => rs.budgets.ensure('', { limit: '1.00' })],
      ['runs', () => rs.scopes.ensure('')],
      ['barriers', () => run.barriers.ensure('', { target: 1 })],
    ];
    for (const [what, call] of calls) {
      const err: any = await call().catch((caught) => caught);
      assert.ok(err instanceof RunstateError && err.code === 'VALIDATION_FAILED' && err.status === 400, `${what}: ${err?.name} ${err?.code} ${err?.message}`);
      assert.equal(err.message, 'name must not be empty', what);
    }
  });

  test('pools: run() holds units under a renewed lease, a full pool waits or says so, a lost grant aborts lease.signal', async () => {
    const pool = await rs.pools.ensure('browser', { capacity: 2 });
    assert.equal(pool.name, 'browser');
    await assert.rejects(rs.pools.ensure('browser', { capacity: 3 }), (err: unknown) => err instanceof ConflictError && err.code === 'CONFLICT');
    const run = await newRun('pools');
    const held = await run.pool('browser').acquire({ units: 2, leaseSeconds: 5 });
    assert.equal(held.units, 2);
    assert.match(held.grantId, /\S/);
    assert.deepEqual(await run.pool('browser').tryAcquire(), { kind: 'capacity-unavailable' });
    const waited = await run.pool('browser').acquire({ timeoutMs: 600 }).catch((err) => err);
    assert.ok(waited instanceof WaitTimeoutError);
    await sleep(2_200); // past a renewal of the 5 s lease
    assert.equal(held.isLost, false);
    const status = await run.pool('browser').status();
    assert.equal(status?.unitsTotal, 2);
    // Freed by the release: a waiting run() gets its unit, and its value comes back.
    const waiting = run.pool('browser').run(async (lease) => `ran with ${lease.units} unit`, { timeoutMs: 5_000 });
    await sleep(300);
    await held.release();
    assert.equal(await waiting, 'ran with 1 unit');

    // Taken away on the server: the renewal is refused, the signal aborts, run() throws after fn.
    const outcome = await run.pool('browser').run(
      async (lease) => {
        const released = await server.api('POST', `/grants/${lease.grantId}/release`, { token: lease.token() });
        assert.equal(released.status, 200);
        await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }));
        assert.equal(lease.isLost, true);
        return 'made without the unit';
      },
      { leaseSeconds: 5 },
    ).catch((err) => err);
    assert.ok(outcome instanceof LeaseLostError);
    assert.equal(outcome.code, 'STALE_CLAIM');
  });

  test('quotas: units per window, tryTake says exhausted, take() waits in line for the next window', async () => {
    await rs.quotas.ensure('search-api', { unitsPerWindow: 2, windowSeconds: 2 });
    const run = await newRun('quotas');
    const quota = run.quota('search-api');
    assert.equal((await quota.tryTake()).kind, 'consumed');
    assert.equal((await quota.tryTake()).kind, 'consumed');
    assert.deepEqual(await quota.tryTake(), { kind: 'exhausted' });
    const started = performance.now();
    const consumption = await quota.take({ timeoutMs: 10_000 });
    assert.match(String(consumption.consumptionId), /\S/);
    assert.ok(performance.now() - started < 5_000);
    assert.equal((await quota.status())?.unitsLimit, 2);
    await assert.rejects(quota.take({ units: 2, wait: false }), WaitTimeoutError);
  });

  test('budgets: reserve, settle what was spent, void the rest; a reservation that does not fit is BudgetExceededError', async () => {
    const row = await rs.budgets.ensure('model-usd', { limit: '1.00' });
    assert.equal(row.limitMinor, '100');
    const run = await newRun('budgets');
    const reservation = await run.budget('model-usd').reserve({ amount: '0.60' });
    assert.equal(reservation.reserved, '0.60');
    const over = await run.budget('model-usd').reserve({ amount: '0.50' }).catch((err) => err);
    assert.ok(over instanceof BudgetExceededError);
    assert.ok(over instanceof ConflictError, 'still a ConflictError');
    assert.equal(over.code, 'INSUFFICIENT_BUDGET');
    await reservation.settle({ amount: '0.25', usageKey: 'call-1' });
    await reservation.settle({ amount: '0.25', usageKey: 'call-1' }); // the same usage key counts once
    await reservation.void({ usageKey: 'call-1-void' });
    const budget = await run.budget('model-usd').status();
    assert.equal(budget.spentMinor, '25');
  });

  test('work limits and admission: a task that needs a pool unit is admitted with it', async () => {
    await rs.pools.ensure('gpu', { capacity: 1 });
    await rs.mailboxes.ensure('render', { mode: 'WORK' });
    const run = await newRun('admission');
    await rs.workLimits.ensure('render-backlog', { scopeId: run.id, maxOutstanding: 1 });
    await rs.workLimits.ensure('render-backlog', { scopeId: run.id, maxOutstanding: 1 });
    const ticket = await run.mailbox('render').submit({ frame: 1 }, { key: 'frame-1', requirements: { pools: [{ name: 'gpu', units: 1 }] }, workLimit: 'render-backlog' });
    const full = await run.mailbox('render').submit({ frame: 2 }, { key: 'frame-2', workLimit: 'render-backlog' }).catch((err) => err);
    assert.ok(full instanceof ConflictError);
    assert.equal(full.code, 'BACKLOG_FULL');
    const work = await run.mailbox('render').admit<{ frame: number }>({ leaseSeconds: 10 });
    assert.ok(work !== null);
    assert.equal(work.task.id, ticket.id);
    assert.deepEqual(work.delivery.data, { frame: 1 });
    assert.equal(work.grants.length, 1);
    assert.deepEqual(await run.pool('gpu').tryAcquire(), { kind: 'capacity-unavailable' }, 'the unit goes with the delivery');
    await work.delivery.complete({ payload: 'rendered' });
    assert.equal((await ticket.result({ timeoutMs: 2_000 })).outcome, 'rendered');
    const freed = await run.pool('gpu').tryAcquire();
    assert.equal(freed.kind, 'acquired');
    if (freed.kind === 'acquired') await freed.lease.release();
    assert.equal(await run.mailbox('render').admit(), null);
  });

  test('barriers release at their target; timers fire and are acknowledged', async () => {
    const run = await newRun('barriers');
    const barrier = await run.barriers.create({ target: 2 });
    const waiting = barrier.wait({ timeoutMs: 5_000 });
    await barrier.arrive({ key: 'worker-1' });
    await barrier.arrive({ key: 'worker-1' }); // the same key counts once
    assert.equal((await barrier.status()).state, 'OPEN');
    await barrier.arrive({ key: 'worker-2' });
    assert.equal((await waiting).state, 'RELEASED');
    const late = await barrier.arrive({ key: 'worker-3' }).catch((err) => err);
    assert.equal(late.code, 'BARRIER_RELEASED');
    const named = await run.barriers.ensure('start', { target: 3 });
    assert.equal((await run.barriers.ensure('start', { target: 3 })).id, named.id);

    const timer = await run.timers.create({ afterSeconds: 1 });
    assert.ok(timer.fireAt.getTime() > Date.now());
    const started = performance.now();
    const fired = await timer.wait({ timeoutMs: 5_000 });
    assert.ok(fired.firedAt instanceof Date);
    assert.ok(performance.now() - started >= 500);
    assert.equal((await timer.status()).state, 'ACKED');
    const cancelled = await run.timers.create({ afterSeconds: 60 });
    await cancelled.cancel();
    await assert.rejects(cancelled.wait({ timeoutMs: 1_000 }), ConflictError);
  });

  test('task groups: N_ACCEPTED finalizes once enough members are accepted', async () => {
    await rs.mailboxes.ensure('drafts', { mode: 'WORK' });
    const run = await newRun('groups');
    const group = await run.groups.create({ mailbox: 'drafts', condition: 'N_ACCEPTED', threshold: 2, parentScopeId: run.id });
    assert.match(String(group.scopeId), /^sc_/);
    const tickets = [];
    for (const n of [1, 2, 3]) tickets.push(await group.submit({ n }, { key: `draft-${n}` }));
    await group.close();
    const gate = rs.scope(group.scopeId!);
    for (let i = 0; i < 2; i += 1) {
      const delivery = await gate.mailbox('drafts').receive<{ n: number }>();
      assert.ok(delivery !== null);
      await delivery.complete({ payload: `draft ${delivery.data.n}` });
      await group.accept(delivery.taskId!);
    }
    const done = await group.wait({ timeoutMs: 5_000 });
    assert.equal(done.outcome, 'SUCCEEDED');
    assert.equal((await rs.scope(run.id).groups.byId(group.id).status()).state, 'FINALIZED');
  });

  test('events: watch() is an async iterator over the log; each event carries the cursor to resume after it', async () => {
    const run = await newRun('events');
    const controller = new AbortController();
    const seen: WatchedEvent[] = [];
    const watching = (async () => {
      for await (const event of rs.events.watch({ scopeId: run.id, signal: controller.signal })) {
        seen.push(event);
        if (seen.length === 3) break;
      }
    })();
    await run.barriers.create({ target: 1 }).then((barrier) => barrier.arrive({ key: 'a' }));
    await watching;
    assert.deepEqual(seen.map((event) => event.type), ['scope.created', 'barrier.created', 'barrier.arrived']);
    assert.ok(seen.every((event) => /^\d+$/.test(event.cursor)));
    for (const [index, event] of seen.entries()) {
      const seq = Number(event.eventId.slice('ev_'.length));
      assert.ok(Number(event.cursor) >= seq, 'after the event');
      if (index < seen.length - 1) assert.ok(Number(event.cursor) < Number(seen[index + 1]!.eventId.slice('ev_'.length)), 'before the next');
    }
    // Resuming after the second event gives the third again, and nothing before it.
    const resumed: WatchedEvent[] = [];
    for await (const event of rs.events.watch({ scopeId: run.id, cursor: seen[1]!.cursor, waitSeconds: 0 })) {
      resumed.push(event);
      if (resumed.length === 1) break;
    }
    assert.equal(resumed[0]!.eventId, seen[2]!.eventId);
    const page = await rs.events.list({ limit: 2 });
    assert.equal(page.events.length, 2);
    assert.match(page.nextCursor, /^\d+$/);
    controller.abort();
    const ops = await rs.diagnostics.run(run.id);
    assert.ok(Array.isArray(ops.workers));
    assert.ok(Array.isArray((await rs.diagnostics.waits()).waits ?? []));
  });
});
