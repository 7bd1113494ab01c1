/**
 * consume() and deliveries against a real server: the drain on stop (handlers that finish within
 * shutdownTimeoutMs complete, the rest go back on the queue with their signal aborted), a throwing
 * handler's onError and retry, a delivery that settles once, the clean stop when the run is
 * cancelled, and the errors that end consume() instead of being waited out.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  AuthenticationError,
  RunstateError,
  NotFoundError,
  Runstate,
  type Delivery,
  type ScopeHandle,
} from 'runstate-sdk';

import { Server } from './support/server.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('consume and deliveries', { concurrency: true }, () => {
  let server: Server;
  let rs: Runstate;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'consume-test' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  async function queue(name: string): Promise<ScopeHandle> {
    await rs.mailboxes.ensure(name, { mode: 'WORK' });
    return rs.scopes.create({ name });
  }

  test('stop drains: a handler that finishes in time completes, one that does not is requeued', async () => {
    const run = await queue('drain');
    const quick = await run.mailbox('drain').submit({ job: 'quick' }, { key: 'quick' });
    const stuck = await run.mailbox('drain').submit({ job: 'stuck' }, { key: 'stuck' });
    const started = new Map<string, Delivery<{ job: string }>>();
    const controller = new AbortController();
    const events: string[] = [];
    const consuming = run.mailbox('drain').consume<{ job: string }>(
      async (data, delivery) => {
        started.set(data.job, delivery);
        if (data.job === 'quick') {
          await new Promise((resolve) => controller.signal.addEventListener('abort', resolve, { once: true }));
          await sleep(300); // finishes inside the shutdown window
          await delivery.complete({ payload: 'quick done' });
          return;
        }
        await new Promise((resolve) => delivery.signal.addEventListener('abort', resolve, { once: true }));
        events.push(`stuck handler saw its signal abort, settled=${delivery.settled}`);
        await sleep(100);
        events.push('stuck handler returned');
      },
      { concurrency: 2, leaseSeconds: 30, shutdownTimeoutMs: 1_200, signal: controller.signal },
    );
    await until('both handlers to start', () => started.size === 2);
    const stoppedAt = performance.now();
    controller.abort();
    await consuming;
    const drainMs = performance.now() - stoppedAt;
    assert.ok(drainMs >= 1_200 && drainMs < 3_000, `waited the shutdown window, not more: ${drainMs}`);
    assert.deepEqual(await quick.result({ timeoutMs: 2_000 }), { state: 'SUCCEEDED', outcome: 'quick done', reason: null });
    assert.equal(started.get('stuck')!.settled, true, 'the requeue is the settlement');
    await until('the stuck handler to return', () => events.length === 2, 2_000);
    assert.deepEqual(events, ['stuck handler saw its signal abort, settled=true', 'stuck handler returned']);
    const view = await stuck.status();
    assert.equal(view.state, 'QUEUED');
    // Back on the queue (after the server's retry backoff) as the next attempt.
    const again = await run.mailbox('drain').receive<{ job: string }>({ waitMs: 5_000 });
    assert.ok(again !== null);
    assert.deepEqual(again.data, { job: 'stuck' });
    assert.equal(again.attempt, 2);
    await again.reject();
    assert.equal((await stuck.result({ timeoutMs: 2_000 })).state, 'FAILED');
  });

  test('shutdownTimeoutMs: Infinity waits for the running handler, not 1 ms (a Node timer past 2^31 - 1 ms)', async () => {
    const run = await queue('drain-forever');
    const ticket = await run.mailbox('drain-forever').submit({ job: 'slow' }, { key: 'slow' });
    const controller = new AbortController();
    let handed: Delivery | undefined;
    const consuming = run.mailbox('drain-forever').consume(
      async (_data, delivery) => {
        handed = delivery;
        controller.abort();
        await sleep(300);
        await delivery.complete({ payload: 'done after the stop' });
      },
      { leaseSeconds: 30, shutdownTimeoutMs: Infinity, signal: controller.signal },
    );
    await consuming;
    assert.equal(handed?.signal.aborted, false, 'the handler was not given up on');
    assert.deepEqual(await ticket.result({ timeoutMs: 2_000 }), { state: 'SUCCEEDED', outcome: 'done after the stop', reason: null });
  });

  test('a throwing handler goes to onError and back on the queue; the next attempt completes', async () => {
    const run = await queue('flaky');
    const ticket = await run.mailbox('flaky').submit({ n: 1 }, { key: 'flaky-1' });
    const controller = new AbortController();
    const errors: string[] = [];
    const attempts: number[] = [];
    const consuming = run.mailbox('flaky').consume<{ n: number }>(
      async (_data, delivery) => {
        attempts.push(delivery.attempt);
        if (delivery.attempt === 1) throw new Error('first try fails');
        // Returning without settling: consume completes it (with no payload).
      },
      {
        signal: controller.signal,
        waitMs: 1_000,
        onError: (err, delivery) => {
          errors.push(`attempt ${delivery.attempt} failed: ${(err as Error).message}`);
        },
      },
    );
    const outcome = await ticket.result({ timeoutMs: 8_000 });
    controller.abort();
    await consuming;
    assert.deepEqual(outcome, { state: 'SUCCEEDED', outcome: null, reason: null });
    assert.deepEqual(attempts, [1, 2]);
    assert.deepEqual(errors, ['attempt 1 failed: first try fails']);
    assert.equal((await ticket.status()).attempt, 2);
  });

  test('a handler that returns a value is warned about once: the value is not recorded', async () => {
    // Two consume() calls run the same handler, which returns a value each time: each task ends
    // SUCCEEDED with no outcome (as the product page says), and one RunstateWarning says why.
    const run = await queue('returns');
    const tickets = [
      await run.mailbox('returns').submit({ n: 1 }, { key: 'r1' }),
      await run.mailbox('returns').submit({ n: 2 }, { key: 'r2' }),
    ];
    const told: Error[] = [];
    const listener = (warning: Error & { code?: string }) => {
      if (warning.name === 'RunstateWarning' && warning.code === 'RUNSTATE_RETURN_NOT_RECORDED' && /summarizeCompany/.test(warning.message)) {
        told.push(warning);
      }
    };
    process.on('warning', listener);
    try {
      let controller = new AbortController();
      const summarizeCompany = async (data: { n: number }) => {
        controller.abort();
        return `summary ${data.n}`;
      };
      for (const _ of [1, 2]) {
        controller = new AbortController();
        await run.mailbox('returns').consume(summarizeCompany, { signal: controller.signal, waitMs: 1_000 });
      }
      for (const ticket of tickets) {
        assert.deepEqual(await ticket.result({ timeoutMs: 2_000 }), { state: 'SUCCEEDED', outcome: null, reason: null });
      }
      await sleep(50); // process warnings are emitted on the next tick
    } finally {
      process.off('warning', listener);
    }
    assert.equal(told.length, 1, 'once per handler, not once per consume() or per delivery');
    assert.match(told[0]!.message, /consume\("returns"\): handler summarizeCompany returned a value \(string\), which is not recorded/);
    assert.match(told[0]!.message, /delivery\.complete\(\{ payload: value \}\)/);
  });

  test('a delivery settles once: later and concurrent settlements send nothing', async () => {
    const run = await queue('once');
    const ticket = await run.mailbox('once').submit({ n: 1 }, { key: 'once-1' });
    const delivery = await run.mailbox('once').receive();
    assert.ok(delivery !== null);
    assert.equal(delivery.settled, false);
    // Two at once share one request; had a second gone out, the server would answer it STALE_CLAIM.
    await Promise.all([delivery.complete({ payload: 'first' }), delivery.complete({ payload: 'second' })]);
    assert.equal(delivery.settled, true);
    await delivery.retry();
    await delivery.reject();
    await delivery.complete({ payload: 'third' });
    assert.deepEqual(await ticket.result({ timeoutMs: 2_000 }), { state: 'SUCCEEDED', outcome: 'first', reason: null });
    assert.equal(await run.mailbox('once').receive(), null);
  });

  test('a cancelled run stops consume() cleanly', async () => {
    const run = await queue('cancelled');
    const controller = new AbortController();
    const consuming = run.mailbox('cancelled').consume(async () => undefined, { waitMs: 300, pollMs: 50, signal: controller.signal });
    await sleep(200);
    await run.cancel();
    const stopped = await Promise.race([consuming.then(() => 'stopped'), sleep(5_000).then(() => 'still running')]);
    controller.abort();
    assert.equal(stopped, 'stopped');
  });

  test('a missing mailbox and a refused key end consume() with their error', async () => {
    const run = await rs.scopes.create({ name: 'errors' });
    await assert.rejects(run.mailbox('no-such-queue').consume(async () => undefined), NotFoundError);
    await queue('auth');
    const stranger = new Runstate({ apiKey: 'not-a-key', spaceId: server.spaceId, baseUrl: server.baseUrl });
    const refused = await stranger.scope(run.id).mailbox('auth').consume(async () => undefined).catch((err) => err);
    assert.ok(refused instanceof AuthenticationError);
    assert.equal(refused.code, 'UNAUTHENTICATED');
    assert.equal(refused.status, 401);
  });

  test('a receive the server refuses as invalid ends consume() with the refusal, as the Python SDK does', async () => {
    const run = await queue('invalid-lease');
    const warned: Error[] = [];
    const listener = (warning: Error) => {
      if (warning.name === 'RunstateWarning') warned.push(warning);
    };
    process.on('warning', listener);
    const stop = new AbortController();
    try {
      // A lease of 1 s is outside 5-600: every recv would be refused the same way again.
      const outcome = await Promise.race([
        run.mailbox('invalid-lease').consume(async () => undefined, { leaseSeconds: 1, signal: stop.signal }).then(
          () => 'resolved',
          (err: unknown) => err,
        ),
        sleep(3_000).then(() => 'still waiting'),
      ]);
      assert.ok(outcome instanceof RunstateError, `rejected with the refusal, not ${String(outcome)}`);
      assert.equal(outcome.code, 'VALIDATION_FAILED');
      assert.equal(outcome.status, 400);
      assert.match(outcome.message, /leaseSeconds/);
      assert.deepEqual(
        warned.filter((warning) => /invalid-lease/.test(warning.message) || /cannot get work/.test(warning.message)).map((w) => w.message),
        [],
        'no outage was waited out',
      );
    } finally {
      stop.abort();
      process.off('warning', listener);
    }
  });

  test('ensure() is create-or-verify; a different mode is refused by the server', async () => {
    const first = await rs.mailboxes.ensure('ensured', { mode: 'WORK' });
    const second = await rs.mailboxes.ensure('ensured', { mode: 'work' });
    assert.equal(first.id, second.id);
    const names = (await rs.mailboxes.list()).map((row) => row.name);
    assert.ok(names.includes('ensured'));
    const refused = await rs.mailboxes.ensure('fanout', { mode: 'BROADCAST' }).catch((err) => err);
    assert.ok(refused instanceof RunstateError);
    assert.equal(refused.code, 'VALIDATION_FAILED');
    assert.equal(refused.status, 400);
  });
});
