/**
 * A caller's AbortSignal that aborts while an acquire's request is on its way, against a real
 * server: the server applies a request whose connection was cut all the same, so a grant the
 * client never read would hold the key (or the pool's units) until its lease ran out, renewed by
 * no one. The abort is made to come exactly then, by a wrapper around the global `fetch` that
 * aborts the caller's signal as soon as the server's answer to that request arrived (a receive that
 * finds a message is the same: the message would stay leased to no one). A quota take
 * given up while it waits in line leaves the line, or its waiter would be served for no one.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Runstate, type ScopeHandle } from 'runstate-sdk';

import { Server } from './support/server.js';

/** Aborted, with its reason, when the answer to a request whose path ends so has arrived. */
let abortOnAnswer: { path: string; controller: AbortController } | null = null;
/** Aborted when a look at a quota waiter answers GRANTED (the grant came as the caller gave up). */
let abortOnGranted: AbortController | null = null;
/** A consumption given back (its refund's path) just before a waiter's cancel goes out: the waiter
 * at the head of the line is granted, and the cancel finds it GRANTED. */
let refundBeforeCancel: string | null = null;
const realFetch = globalThis.fetch;
globalThis.fetch = (async (input: string | URL | Request, init?: RequestInit) => {
  const url = String(input instanceof Request ? input.url : input);
  const refund = refundBeforeCancel;
  if (refund !== null && /\/allowance-waiters\/[^/]+\/cancel$/.test(new URL(url).pathname)) {
    refundBeforeCancel = null;
    const headers = new Headers(init?.headers);
    headers.delete('idempotency-key'); // (a call of its own)
    const freed = await realFetch(new URL(refund, url), { method: 'POST', headers, body: '{}' });
    assert.equal(freed.status, 200, await freed.text());
  }
  const response = await realFetch(input, init);
  const armed = abortOnAnswer;
  if (armed !== null && new URL(url).pathname.endsWith(armed.path)) {
    abortOnAnswer = null;
    armed.controller.abort(new Error('the caller gave up'));
  }
  const granted = abortOnGranted;
  if (granted !== null && new URL(url).pathname.includes('/allowance-waiters/') && (init?.method ?? 'GET') === 'GET') {
    if ((await response.clone().text()).includes('"GRANTED"')) {
      abortOnGranted = null;
      granted.abort(new Error('the caller gave up'));
    }
  }
  return response;
}) as typeof fetch;

describe('an acquire, a receive or an admission aborted while its request is on its way', () => {
  let server: Server;
  let rs: Runstate;
  let run: ScopeHandle;

  before(async () => {
    server = await Server.start({ memory: true });
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'aborter' });
    run = await rs.scopes.create({ name: 'abort' });
  });

  after(async () => {
    rs?.close();
    globalThis.fetch = realFetch;
    await server?.stop();
  });

  const gaveUp = (err: unknown) => err instanceof Error && err.message === 'the caller gave up';

  test('a claim acquire rejects with the abort and leaves the key free, alone or in a batch', async () => {
    const other = rs.withHolder('other').scope(run.id);
    for (const batchCalls of [false, true]) {
      const client = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'aborter', batchCalls });
      const scope = client.scope(run.id);
      const key = `abort-${batchCalls}`;
      const controller = new AbortController();
      abortOnAnswer = { path: batchCalls ? '/batch' : '/claims', controller };
      // With batches, a call on its way makes the next two wait for it and go out in one batch.
      const first = batchCalls ? scope.claim(`${key}-first`).acquire() : null;
      const aborted = scope.claim(key).acquire({ signal: controller.signal });
      const beside = batchCalls ? scope.claim(`${key}-beside`).acquire() : null;
      await assert.rejects(aborted, gaveUp, `batchCalls ${batchCalls}`);
      for (const held of [first, beside]) if (held !== null) await (await held).release();
      const probe = await other.claim(key).tryAcquire();
      assert.equal(probe.kind, 'acquired', `batchCalls ${batchCalls}: the aborted grant was given back`);
      if (probe.kind === 'acquired') await probe.lease.release();
      client.close();
    }
  });

  test('a wait: true acquire of a free key rejects with the abort and leaves the key free', async () => {
    const controller = new AbortController();
    abortOnAnswer = { path: '/claims', controller };
    await assert.rejects(run.claim('abort-wait').acquire({ wait: true, timeoutMs: 10_000, signal: controller.signal }), gaveUp);
    const probe = await rs.withHolder('other').scope(run.id).claim('abort-wait').tryAcquire();
    assert.equal(probe.kind, 'acquired', 'the aborted grant was given back');
    if (probe.kind === 'acquired') await probe.lease.release();
  });

  test('a wait: true acquire of a held key is cut by the abort while the server holds it', async () => {
    const holder = await rs.withHolder('holder').scope(run.id).claim('abort-held').acquire();
    const controller = new AbortController();
    const waiting = run.claim('abort-held').acquire({ wait: true, timeoutMs: 20_000, signal: controller.signal });
    setTimeout(() => controller.abort(new Error('the caller gave up')), 300);
    const started = performance.now();
    await assert.rejects(waiting, gaveUp);
    assert.ok(performance.now() - started < 2_000, 'at once, not at the end of the held wait');
    await holder.release();
    const probe = await rs.withHolder('other').scope(run.id).claim('abort-held').tryAcquire();
    assert.equal(probe.kind, 'acquired', 'the dropped wait took nothing');
    if (probe.kind === 'acquired') await probe.lease.release();
  });

  test('a receive that finds a message rejects with the abort and puts the message back, not leased to no one', async () => {
    await rs.mailboxes.ensure('abort-queue');
    const scope = await rs.scopes.create({ name: 'abort-receive' });
    for (const [index, waitMs] of [0, 5_000].entries()) {
      await scope.mailbox('abort-queue').send({ n: index });
      const controller = new AbortController();
      abortOnAnswer = { path: '/recv', controller };
      await assert.rejects(scope.mailbox('abort-queue').receive({ waitMs, signal: controller.signal }), gaveUp, `waitMs ${waitMs}`);
      const counts = (await rs.diagnostics.run(scope.id)).counts.messages;
      assert.equal(counts.LEASED ?? 0, 0, `waitMs ${waitMs}: not leased (${JSON.stringify(counts)})`);
      assert.equal((counts.QUEUED ?? 0) + (counts.DELAYED ?? 0), index + 1, `waitMs ${waitMs}: back on the queue`);
    }
  });

  test('consume() stopped while a receive answers with a message puts the message back, not leased to no one', async () => {
    await rs.mailboxes.ensure('abort-consume');
    const scope = await rs.scopes.create({ name: 'abort-consume' });
    await scope.mailbox('abort-consume').send({ n: 1 });
    const controller = new AbortController();
    abortOnAnswer = { path: '/recv', controller };
    let handled = 0;
    await scope.mailbox('abort-consume').consume(() => void (handled += 1), { signal: controller.signal, waitMs: 5_000 });
    assert.equal(handled, 0, 'stopped before its handler ran');
    const counts = (await rs.diagnostics.run(scope.id)).counts.messages;
    assert.equal(counts.LEASED ?? 0, 0, `not leased (${JSON.stringify(counts)})`);
  });

  test('an admit() that admits a task after the abort gives it back, with what it took', async () => {
    await rs.mailboxes.ensure('abort-admit', { mode: 'WORK' });
    const scope = await rs.scopes.create({ name: 'abort-admit' });
    const ticket = await scope.mailbox('abort-admit').submit({ n: 1 }, { key: 'admitted' });
    const controller = new AbortController();
    abortOnAnswer = { path: '/tasks/admit', controller };
    await assert.rejects(scope.mailbox('abort-admit').admit({ waitMs: 5_000, signal: controller.signal }), gaveUp);
    const counts = (await rs.diagnostics.run(scope.id)).counts.messages;
    assert.equal(counts.LEASED ?? 0, 0, `not leased (${JSON.stringify(counts)})`);
    assert.equal((await ticket.status()).state, 'QUEUED');
  });

  /** A mailbox whose messages have `maxAttempts` deliveries (the SDK's ensure does not declare it). */
  async function mailboxWithAttempts(name: string, maxAttempts: number): Promise<void> {
    const response = await realFetch(`${server.baseUrl}/v1/spaces/${server.spaceId}/mailboxes/by-name/${name}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${server.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ maxAttempts }),
    });
    assert.equal(response.status, 200, await response.text());
  }

  test('a message put back after aborted receives is not dead-lettered by them: their attempts do not count', async () => {
    // maxAttempts 2: put back as retries, the two receives used up both attempts (after a backoff
    // between them) and dead-lettered a message no handler ever saw.
    await mailboxWithAttempts('abort-fragile', 2);
    const scope = await rs.scopes.create({ name: 'abort-fragile' });
    await scope.mailbox('abort-fragile').send({ n: 1 });
    for (let cut = 0; cut < 2; cut += 1) {
      const controller = new AbortController();
      abortOnAnswer = { path: '/recv', controller };
      await assert.rejects(scope.mailbox('abort-fragile').receive({ signal: controller.signal }), gaveUp);
    }
    const counts = (await rs.diagnostics.run(scope.id)).counts.messages;
    assert.deepEqual([counts.QUEUED ?? 0, counts.DELAYED ?? 0, counts.DEAD ?? 0], [1, 0, 0], JSON.stringify(counts));
    const delivery = await scope.mailbox('abort-fragile').receive();
    assert.equal(delivery?.attempt, 3, 'delivered again, not dead-lettered');
    await delivery?.complete();
  });

  test('consume() stopped with work taken ahead puts it back without counting its attempts', async () => {
    // maxAttempts 1, prefetch 3, one handler at a time: put back as retries, the two taken ahead
    // (which no handler saw) used up their one attempt and were dead-lettered.
    await mailboxWithAttempts('abort-ahead', 1);
    const scope = await rs.scopes.create({ name: 'abort-ahead' });
    for (let n = 0; n < 3; n += 1) await scope.mailbox('abort-ahead').send({ n });
    const controller = new AbortController();
    const handled: unknown[] = [];
    await scope.mailbox('abort-ahead').consume(
      (data) => {
        handled.push(data);
        controller.abort(new Error('enough'));
      },
      { signal: controller.signal, prefetch: 3, concurrency: 1 },
    );
    assert.equal(handled.length, 1);
    const counts = (await rs.diagnostics.run(scope.id)).counts.messages;
    assert.deepEqual([counts.QUEUED ?? 0, counts.DEAD ?? 0, counts.LEASED ?? 0], [2, 0, 0], JSON.stringify(counts));
  });

  test('a pool acquire rejects with the abort and gives its units back', async () => {
    await rs.pools.ensure('abort-pool', { capacity: 1 });
    const controller = new AbortController();
    abortOnAnswer = { path: '/acquire', controller };
    await assert.rejects(run.pool('abort-pool').acquire({ signal: controller.signal }), gaveUp);
    const probe = await rs.withHolder('other').scope(run.id).pool('abort-pool').tryAcquire();
    assert.equal(probe.kind, 'acquired', 'the unit is free');
    if (probe.kind === 'acquired') await probe.lease.release();
  });

  test('a quota take given up while it waits in line leaves the line: the waiter is not served for no one', async () => {
    await rs.quotas.ensure('abort-quota', { unitsPerWindow: 1, windowSeconds: 60 });
    const quota = run.quota('abort-quota');
    await quota.take();
    const controller = new AbortController();
    const taking = quota.take({ signal: controller.signal, timeoutMs: 30_000 });
    for (let i = 0; i < 100 && (await quota.status())?.waiting !== 1; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal((await quota.status())?.waiting, 1, 'in line');
    controller.abort(new Error('the caller gave up'));
    await assert.rejects(taking, gaveUp);
    assert.equal((await quota.status())?.waiting, 0, 'out of the line');
  });

  test('a quota take given up as its waiter turns out granted refunds the units: they are not used by no one', async () => {
    await rs.quotas.ensure('abort-granted', { unitsPerWindow: 1, windowSeconds: 2 });
    const quota = run.quota('abort-granted');
    await quota.take(); // the window's one unit
    const controller = new AbortController();
    abortOnGranted = controller;
    await assert.rejects(quota.take({ signal: controller.signal, timeoutMs: 30_000 }), gaveUp);
    assert.equal(abortOnGranted, null, 'given up as the grant came');
    const status = await quota.status();
    assert.equal(status?.used, 0, 'the grant that came as the take was given up was left standing');
  });

  test('a quota take out of time whose waiter was granted just before returns the grant: the units are not used by no one', async () => {
    const allowance = await rs.quotas.ensure('late-grant', { unitsPerWindow: 1, windowSeconds: 3600 });
    const quota = run.quota('late-grant');
    const first = await quota.take(); // the window's one unit
    refundBeforeCancel = `/v1/spaces/${server.spaceId}/allowances/${allowance.id}/consumptions/${first.consumptionId}/refund`;
    const late = await quota.take({ timeoutMs: 1_500 });
    assert.equal(refundBeforeCancel, null, 'the waiter was cancelled when the time ran out');
    assert.equal(late.units, 1);
    assert.notEqual(late.consumptionId, first.consumptionId);
    assert.equal((await quota.status())?.used, 1, 'the late grant is the caller\'s');
  });
});
