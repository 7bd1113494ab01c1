/**
 * A delivery taken by hand, and what a client reads about a run and a refusal, against a real
 * server: `receive({ leaseSeconds })` kept renewed in the background (`keepRenewed()`,
 * `stopRenewing()`), `retry`/`reject` with a reason, the run's `claims()` and `tasks()`, the
 * space's newest events (`events.list({ latest })`), and a refusal's `details` (who holds a claim
 * and until when), alone and inside a batch.
 *
 * Renewals are counted by a wrapper around the global `fetch`, which the SDK sends every request
 * through (each test its own message ids, so the tests may run side by side).
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ConfigError, ConflictError, LeaseLostError, Runstate, WaitTimeoutError, type ScopeHandle } from 'runstate-sdk';

import { Server } from './support/server.js';

/** The paths of every request sent through fetch by this process (a batch's operations included), oldest first. */
const sent: string[] = [];
const realFetch = globalThis.fetch;
globalThis.fetch = (async (input: string | URL | Request, init?: RequestInit) => {
  const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
  sent.push(url.pathname);
  if (url.pathname.endsWith('/batch') && typeof init?.body === 'string') {
    for (const operation of JSON.parse(init.body).operations) sent.push(operation.path);
  }
  return realFetch(input, init);
}) as typeof fetch;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function renewalsOf(messageId: string): number {
  return sent.filter((path) => path.endsWith(`/messages/${messageId}/renew`)).length;
}

describe('deliveries by hand, run reads and refusal details', { concurrency: true }, () => {
  let server: Server;
  let rs: Runstate;
  let other: Runstate;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'agent-a' });
    other = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'agent-b' });
  });

  after(async () => {
    rs?.close();
    other?.close();
    await server?.stop();
  });

  async function queue(name: string): Promise<ScopeHandle> {
    await rs.mailboxes.ensure(name, { mode: 'WORK' });
    return rs.scopes.create({ name });
  }

  test('a delivery kept renewed outlives its lease until it is settled, and is renewed no more after', async () => {
    const run = await queue('kept');
    const ticket = await run.mailbox('kept').submit({ company: 'acme' }, { key: 'research:acme' });
    const delivery = await run.mailbox('kept').receive({ leaseSeconds: 5 });
    assert.ok(delivery !== null && delivery.taskId === ticket.id && delivery.leaseSeconds === 5);
    delivery.keepRenewed();
    delivery.keepRenewed(); // a second call changes nothing
    await sleep(7_000); // longer than the lease: only the renewals keep it
    assert.equal(await other.scope(run.id).mailbox('kept').receive(), null);
    assert.equal(delivery.isLost, false);
    assert.ok(renewalsOf(delivery.id) >= 3, `renewed every ~1.7 s: ${renewalsOf(delivery.id)}`);
    await delivery.complete({ payload: 'report' });
    const renewed = renewalsOf(delivery.id);
    await sleep(2_500);
    assert.equal(renewalsOf(delivery.id), renewed, 'a settled delivery is not renewed');
    assert.deepEqual(await ticket.result({ timeoutMs: 2_000 }), { state: 'SUCCEEDED', outcome: 'report', reason: null });
  });

  test('stopRenewing() lets the lease run out: the task goes to another worker as attempt 2', async () => {
    const run = await queue('let-go');
    const ticket = await run.mailbox('let-go').submit({ company: 'globex' }, { key: 'research:globex' });
    const delivery = await run.mailbox('let-go').receive({ leaseSeconds: 5 });
    assert.ok(delivery !== null);
    delivery.keepRenewed();
    delivery.stopRenewing();
    const taken = await other.scope(run.id).mailbox('let-go').receive({ waitMs: 10_000 });
    assert.ok(taken !== null && taken.taskId === ticket.id && taken.attempt === 2);
    assert.equal(renewalsOf(delivery.id), 0);
    await assert.rejects(delivery.complete({ payload: 'late' }), LeaseLostError);
    await taken.complete({ payload: 'on time' });
    assert.equal((await ticket.result({ timeoutMs: 2_000 })).outcome, 'on time');
  });

  test('closing the client counts a kept delivery lost', async () => {
    const run = await queue('closed');
    await run.mailbox('closed').submit({}, { key: 'closed' });
    const closing = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'closing' });
    const delivery = await closing.scope(run.id).mailbox('closed').receive();
    assert.ok(delivery !== null);
    delivery.keepRenewed();
    closing.close();
    assert.equal(delivery.isLost, true);
    assert.ok(delivery.signal.aborted);
  });

  test('reject({ reason }) ends the task FAILED with the reason; retry({ reason }) keeps it for the last attempt', async () => {
    const run = await queue('reasons');
    const rejected = await run.mailbox('reasons').submit({ company: '' }, { key: 'research:nobody' });
    const first = await run.mailbox('reasons').receive();
    assert.ok(first !== null);
    await first.reject({ reason: 'the input names no company' });
    const outcome = await rejected.result({ timeoutMs: 2_000 });
    assert.equal(outcome.state, 'FAILED');
    assert.equal(outcome.reason, 'handler_error: the input names no company');
  });

  test('claims() lists who holds each key of the run, without tokens; tasks() the run\'s tasks, newest first', async () => {
    const run = await queue('reads');
    const mine = await run.claim('file:a.ts').acquire({ leaseSeconds: 30 });
    await other.scope(run.id).claim('file:b.ts').acquire({ leaseSeconds: 60 });
    const page = await run.claims();
    assert.equal(page.scopeId, run.id);
    assert.equal(page.truncated, false);
    const rows = [...page.claims].sort((x, y) => x.key.localeCompare(y.key));
    assert.deepEqual(rows.map((row) => [row.key, row.holder, row.generation, row.leaseSeconds]), [
      ['file:a.ts', 'agent-a', 1, 30],
      ['file:b.ts', 'agent-b', 1, 60],
    ]);
    assert.ok(rows.every((row) => !('token' in row)));
    assert.equal(new Date(rows[0]!.leaseExpiresAt).getTime(), mine.expiresAt.getTime());
    const short = await run.claims({ limit: 1 });
    assert.equal(short.claims.length, 1);
    assert.equal(short.truncated, true);

    for (const company of ['acme', 'globex']) {
      await run.mailbox('reads').submit({ company }, { key: `research:${company}` });
      await sleep(2); // (newest first by creation, to the millisecond)
    }
    const tasks = await run.tasks();
    assert.deepEqual(tasks.tasks.map((task) => [task.taskKey, task.state]), [['research:globex', 'QUEUED'], ['research:acme', 'QUEUED']]);
    assert.equal((await run.tasks({ limit: 1 })).truncated, true);
  });

  test('iterClaims() and iterTasks() read every page, as claims come and go between pages', async () => {
    const run = await queue('pages');
    const leases = new Map<string, Awaited<ReturnType<ReturnType<ScopeHandle['claim']>['acquire']>>>();
    for (const key of ['k4', 'k2', 'k6', 'k1', 'k5', 'k3', 'k7']) leases.set(key, await run.claim(key).acquire({ leaseSeconds: 60 }));
    const seen: string[] = [];
    for await (const claim of run.iterClaims({ pageSize: 2 })) {
      seen.push(claim.key);
      if (claim.key === 'k2') {
        // Between pages: one shown already and one not yet reached are released.
        await leases.get('k1')!.release();
        await leases.get('k5')!.release();
      }
    }
    assert.deepEqual(seen, ['k1', 'k2', 'k3', 'k4', 'k6', 'k7']);
    const first = await run.claims({ limit: 2 });
    assert.equal(first.truncated, true);
    assert.deepEqual((await run.claims({ limit: 2, cursor: first.nextCursor! })).claims.map((c) => c.key), ['k4', 'k6']);

    const made: string[] = [];
    for (let n = 0; n < 5; n++) made.push((await run.mailbox('pages').submit({ n }, { key: `t${n}` })).id);
    const listed: { id: string; createdAt: string }[] = [];
    for await (const task of run.iterTasks({ pageSize: 2 })) {
      listed.push({ id: task.id, createdAt: task.createdAt });
      if (listed.length === 3) await run.mailbox('pages').submit({ n: 'late' }, { key: 'late' });
    }
    assert.deepEqual(listed.map((task) => task.id).sort(), [...made].sort());
    const places = listed.map((task) => `${task.createdAt} ${task.id}`);
    assert.deepEqual(places, [...places].sort().reverse());
    assert.equal((await run.tasks({ limit: 1000 })).nextCursor, null);
  });

  test('events.list({ latest }) gives the newest events and the cursor after them', async () => {
    const run = await rs.scopes.create({ name: 'latest' });
    await (await run.claim('latest-key').acquire()).release();
    // The space's newest (other tests write events meanwhile): this key's two among them, in order.
    const page = await rs.events.list({ latest: 50 });
    assert.ok(page.events.length <= 50);
    const ids = page.events.map((event) => Number(event.eventId.replace('ev_', '')));
    assert.deepEqual(ids, [...ids].sort((x, y) => x - y), 'oldest first');
    assert.deepEqual(page.events.filter((event) => event.aggregate?.id === 'latest-key').map((event) => event.type), [
      'claim.acquired',
      'claim.released',
    ]);
    const cursorOnly = await rs.events.list({ latest: 0 });
    assert.deepEqual(cursorOnly.events, []);
    assert.ok(Number(cursorOnly.nextCursor) >= Number(page.nextCursor));
    await assert.rejects(rs.events.list({ latest: 1, cursor: page.nextCursor }), ConfigError);
    await assert.rejects(rs.events.list({ latest: 1, limit: 5 }), /give limit without it/);
  });

  test('CLAIM_HELD says who holds the key and until when, alone, inside a batch, and after a wait ran out', async () => {
    const run = await rs.scopes.create({ name: 'held' });
    const held = await other.scope(run.id).claim('file:app.ts').acquire({ leaseSeconds: 60 });
    const expected = { holder: 'agent-b', generation: 1, leaseExpiresAt: held.expiresAt.toISOString() };
    const refused = await run.claim('file:app.ts').acquire().catch((err: unknown) => err);
    assert.ok(refused instanceof ConflictError && refused.code === 'CLAIM_HELD', String(refused));
    assert.deepEqual(refused.details, expected);

    // Views claiming at once: the first goes alone, the others wait for it and go out as one batch.
    const views = Array.from({ length: 4 }, (_, n) => rs.withHolder(`view-${n}`));
    const before = sent.length;
    const outcomes = await Promise.all(views.map((view) => view.scope(run.id).claim('file:app.ts').acquire().catch((err: unknown) => err)));
    assert.ok(sent.slice(before).some((path) => path.endsWith('/batch')), 'some went out in a batch');
    for (const outcome of outcomes) {
      assert.ok(outcome instanceof ConflictError, String(outcome));
      assert.deepEqual(outcome.details, expected);
    }

    const timedOut = await run.claim('file:app.ts').acquire({ wait: true, timeoutMs: 1_000 }).catch((err: unknown) => err);
    assert.ok(timedOut instanceof WaitTimeoutError, String(timedOut));
    assert.equal(timedOut.details.holder, 'agent-b');
    assert.equal(timedOut.details.generation, 1);
  });
});
