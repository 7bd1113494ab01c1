/**
 * Crash takeover against a real server, as the product page tells it: a worker process killed in
 * the middle of a task stops renewing; when its 5 s lease runs out the task goes back on the queue
 * and the next worker receives it with `attempt` incremented. A worker that comes back after its
 * lease ran out has its completion rejected with `STALE_CLAIM` (`LeaseLostError`), and the task
 * keeps the result of the worker that completed it with a valid lease. Both cases share one 5 s
 * wait, side by side.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { LeaseLostError, Runstate, type ScopeHandle } from 'runstate-sdk';

import { startProgram } from './support/page.js';
import { Server } from './support/server.js';

const WORKER = fileURLToPath(new URL('./support/worker.js', import.meta.url));
const LEASE_SECONDS = 5;

describe('crash takeover', { concurrency: true }, () => {
  let server: Server;
  let rs: Runstate;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'worker-b' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  async function queue(name: string): Promise<ScopeHandle> {
    await rs.mailboxes.ensure(name, { mode: 'WORK' });
    return rs.scopes.create({ name });
  }

  test('a killed worker\'s task goes to the next worker with attempt + 1', async () => {
    const run = await queue('killed');
    const ticket = await run.mailbox('killed').submit({ company: 'acme' }, { key: 'research:acme' });
    const worker = startProgram(WORKER, server.clientEnv({ TEST_SCOPE_ID: run.id, TEST_MAILBOX: 'killed' }), 30_000);
    await worker.waitFor('HANDLING ');
    const handled = JSON.parse(worker.stdout.split('HANDLING ')[1]!.split('\n')[0]!);
    assert.equal(handled.attempt, 1);
    assert.equal((await ticket.status()).state, 'RUNNING');
    const killedAt = performance.now();
    worker.proc.kill('SIGKILL');
    assert.equal((await worker.done).signal, 'SIGKILL');

    // Nothing to take while the dead worker's lease lasts; then the same message, next attempt.
    assert.equal(await run.mailbox('killed').receive(), null);
    let delivery = null;
    while (delivery === null && performance.now() - killedAt < 3 * LEASE_SECONDS * 1000) {
      delivery = await run.mailbox('killed').receive<{ company: string }>({ waitMs: 2_000 });
    }
    const tookMs = performance.now() - killedAt;
    assert.ok(delivery !== null, 'the task came back');
    assert.equal(delivery.id, handled.id);
    assert.equal(delivery.attempt, 2);
    assert.deepEqual(delivery.data, { company: 'acme' });
    assert.ok(tookMs < (LEASE_SECONDS + 3) * 1000, `back within about a lease: ${tookMs} ms`);
    await delivery.complete({ payload: 'report from worker-b' });
    const view = await ticket.status();
    assert.equal(view.state, 'SUCCEEDED');
    assert.equal(view.attempt, 2);
    assert.equal(view.outcome, 'report from worker-b');
  });

  test('a worker that comes back after its lease ran out has its completion rejected', async () => {
    const run = await queue('late');
    const ticket = await run.mailbox('late').submit({ company: 'acme' }, { key: 'research:acme' });
    const old = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'worker-a' });
    const stale = await old.scope(run.id).mailbox('late').receive<{ company: string }>();
    assert.ok(stale !== null);
    await stale.renew(LEASE_SECONDS); // then silence, as from a paused process

    let current = null;
    const deadline = performance.now() + 3 * LEASE_SECONDS * 1000;
    while (current === null && performance.now() < deadline) {
      current = await run.mailbox('late').receive<{ company: string }>({ waitMs: 2_000 });
    }
    assert.ok(current !== null, 'taken over');
    assert.equal(current.attempt, stale.attempt + 1);
    await current.complete({ payload: 'report from worker-b' });

    const late = await stale.complete({ payload: 'late report from worker-a' }).catch((err) => err);
    assert.ok(late instanceof LeaseLostError);
    assert.equal(late.code, 'STALE_CLAIM');
    assert.equal(late.status, 409);
    assert.match(String(late.requestId), /\S/);
    assert.equal(stale.settled, false);
    assert.equal(stale.isLost, true);
    assert.equal(stale.signal.aborted, true);
    assert.equal(await stale.retry().catch((err) => err), late, 'no second try is sent for a rejected delivery');
    assert.deepEqual(await ticket.result({ timeoutMs: 2_000 }), {
      state: 'SUCCEEDED', outcome: 'report from worker-b', reason: null,
    });
  });
});
