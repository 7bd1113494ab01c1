/**
 * Riding through a server restart, against a real `runstate serve` killed with SIGKILL and started
 * again on the same data directory and port within the lease: a `claim().run()` with a 15 s lease
 * keeps its claim through a 6 s outage in which its renewals fall due (a longer lease and outage
 * where a start here is slow); a handler that finishes
 * during an outage has its completion accepted once the server is back. Then the end of a run:
 * `consume()` stops within a second of its run being cancelled, its handlers' signals abort and
 * their tasks end CANCELLED. And a process paused past its lease sees it lost as soon as it wakes.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Runstate, RunstateError, ScopeCancelledError, type Delivery } from 'runstate-sdk';

import { startProgram } from './support/page.js';
import { Server } from './support/server.js';

const HOLDER = fileURLToPath(new URL('./support/holder.js', import.meta.url));
const OUTAGE_MS = 6_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Collects the SDK's process warnings while a test runs. */
function warnings(): { seen: Error[]; stop(): void } {
  const seen: Error[] = [];
  const listener = (warning: Error) => {
    if (warning.name === 'RunstateWarning') seen.push(warning);
  };
  process.on('warning', listener);
  return { seen, stop: () => process.off('warning', listener) };
}

describe('a server restart within the lease', () => {
  let server: Server;
  let rs: Runstate;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'outage-test' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  test('claim().run() keeps its claim through an outage in which renewals fall due', async () => {
    // A 15 s lease through a 6 s outage where a start takes a second or two. The outage cannot be
    // shorter than the first renewal's due time (a third of the lease) plus a start, and a
    // renewal must get through before the lease's deadline (9/10 of it, at most 3 s short):
    // where a start is slow (a loaded machine), the lease is longer, so the outage still ends
    // well within it even if the restart takes twice as long as the first start did.
    const leaseSeconds = Math.max(15, Math.ceil((2 * server.startMs + 5_500) / 530));
    const dueMs = (leaseSeconds * 1000 * 1.1) / 3;
    console.log(`# a ${leaseSeconds} s lease (a start takes ${Math.round(server.startMs)} ms here)`);
    const run = await rs.scopes.create({ name: 'claim-outage' });
    const other = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'other' });
    let outageMs = 0;
    const outcome = await run.claim('company:acme').run(
      async (lease) => {
        const acquiredAt = performance.now();
        const firstExpiry = lease.expiresAt.getTime();
        await server.kill();
        const killedAt = performance.now();
        // Back 6 s after the kill (the restart begins as long before that as a start takes here),
        // and not before the first renewal (due 0.3-0.37 of the lease after the acquire) has fallen due.
        const dueAt = acquiredAt + dueMs + 100;
        await sleep(Math.max(dueAt - performance.now(), killedAt + OUTAGE_MS - server.startMs - performance.now(), 0));
        await server.restart();
        outageMs = performance.now() - killedAt;
        console.log(`# the server was away ${Math.round(outageMs)} ms (a start takes ${Math.round(server.startMs)} ms here)`);
        assert.equal(lease.isLost, false, 'not lost while its end by our clock has not passed');
        // A renewal fell due in the outage (every ~5 s); one gets through once the server is back.
        await until('a renewal after the restart', () => lease.expiresAt.getTime() > firstExpiry + 5_000, 8_000 + server.startMs);
        assert.equal(lease.isLost, false);
        assert.equal(lease.signal.aborted, false);
        const busy = await other.scope(run.id).claim('company:acme').tryAcquire();
        assert.equal(busy.kind, 'busy', 'still ours on the server');
        return `researched as generation ${lease.generation}`;
      },
      { leaseSeconds },
    );
    assert.equal(outcome, 'researched as generation 1');
    assert.ok(outageMs >= 5_500, `the server was away ${outageMs} ms`);
    const after = await other.scope(run.id).claim('company:acme').tryAcquire();
    assert.equal(after.kind, 'acquired', 'released by run()');
    if (after.kind === 'acquired') assert.equal(after.lease.generation, 2);
    other.close();
  });

  test('a handler that finishes during an outage has its completion accepted once the server is back', async () => {
    await rs.mailboxes.ensure('outage', { mode: 'WORK' });
    const run = await rs.scopes.create({ name: 'consume-outage' });
    const ticket = await run.mailbox('outage').submit({ company: 'acme' }, { key: 'research:acme' });
    const controller = new AbortController();
    const errors: unknown[] = [];
    const seen = warnings();
    let started = false;
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const consuming = run.mailbox('outage').consume<{ company: string }>(
      async (data, delivery) => {
        started = true;
        await finished;
        assert.equal(delivery.isLost, false);
        return `report on ${data.company}`;
      },
      { leaseSeconds: 30, waitMs: 1_000, signal: controller.signal, onError: (err) => void errors.push(err) },
    );
    try {
      await until('the handler to start', () => started);
      await server.kill();
      finish(); // the handler returns while nothing answers: consume() tries its completion again
      await sleep(3_000);
      await server.restart();
      await until('the task to succeed', async () => (await ticket.status()).state === 'SUCCEEDED', 20_000);
      const view = await ticket.status();
      assert.equal(view.attempt, 1, 'never delivered again');
      assert.deepEqual(errors, []);
      const codes = seen.seen.map((warning) => (warning as { code?: string }).code);
      assert.ok(!codes.includes('RUNSTATE_SETTLEMENT_FAILED') && !codes.includes('RUNSTATE_RESULT_DROPPED'), String(codes));
    } finally {
      controller.abort();
      await consuming;
      seen.stop();
    }
  });
});

describe('the end of a run', () => {
  let server: Server;
  let rs: Runstate;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'cancel-test' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  test('a cancelled run stops consume() within a second; its handlers are told and their tasks end CANCELLED', async () => {
    await rs.mailboxes.ensure('cancelled', { mode: 'WORK' });
    const run = await rs.scopes.create({ name: 'cancelled' });
    const tickets = await Promise.all(
      ['a', 'b'].map((key) => run.mailbox('cancelled').submit({ key }, { key })),
    );
    const handling: Array<Delivery<{ key: string }>> = [];
    const reasons: unknown[] = [];
    const lateSettlements: unknown[] = [];
    const consuming = run.mailbox('cancelled').consume<{ key: string }>(
      async (_data, delivery) => {
        handling.push(delivery);
        // A 60 s handler that stops when told.
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, 60_000);
          delivery.signal.addEventListener('abort', () => (clearTimeout(timer), resolve(undefined)), { once: true });
        });
        reasons.push(delivery.signal.reason);
        lateSettlements.push(await delivery.complete({ payload: 'too late' }).then(() => 'accepted', (err) => err));
      },
      { concurrency: 2, leaseSeconds: 30, shutdownTimeoutMs: 60_000 },
    );
    await until('both handlers to start', () => handling.length === 2);
    const cancelledAt = performance.now();
    await rs.scope(run.id).cancel();
    await consuming;
    const tookMs = performance.now() - cancelledAt;
    assert.ok(tookMs < 1_000, `consume() stopped ${Math.round(tookMs)} ms after the cancel`);
    await until('the handlers to end', () => lateSettlements.length === 2, 2_000);
    for (const reason of reasons) {
      assert.ok(reason instanceof ScopeCancelledError, String(reason));
      assert.equal((reason as ScopeCancelledError).code, 'SCOPE_CANCELLED');
    }
    for (const late of lateSettlements) {
      assert.ok(late instanceof ScopeCancelledError, `a completion after the cancel is refused, not ${String(late)}`);
    }
    for (const ticket of tickets) {
      const view = await ticket.status();
      assert.equal(view.state, 'CANCELLED');
      assert.equal(view.outcomeReason, 'scope_cancelled');
    }
  });

  test('cancelling an ancestor of the run stops consume() too', async () => {
    await rs.mailboxes.ensure('nested', { mode: 'WORK' });
    const root = await rs.scopes.create({ name: 'root' });
    const run = await root.child({ name: 'child' });
    await run.mailbox('nested').submit({ n: 1 }, { key: 'n1' });
    let told: unknown;
    const consuming = run.mailbox('nested').consume(
      async (_data, delivery) => {
        await new Promise((resolve) => delivery.signal.addEventListener('abort', resolve, { once: true }));
        told = delivery.signal.reason;
      },
      { leaseSeconds: 30 },
    );
    await sleep(500);
    const cancelledAt = performance.now();
    await root.cancel();
    await consuming;
    assert.ok(performance.now() - cancelledAt < 1_000);
    await until('the handler to be told', () => told !== undefined, 1_000);
    assert.ok(told instanceof ScopeCancelledError);
  });

  test('a process paused past its lease sees it lost as soon as it wakes', async () => {
    const run = await rs.scopes.create({ name: 'paused' });
    const holder = startProgram(HOLDER, server.clientEnv({ TEST_SCOPE_ID: run.id, TEST_KEY: 'file:report.md' }), 30_000);
    try {
      await holder.waitFor('HELD ');
      await holder.waitFor('CHECK lost=false');
      holder.proc.kill('SIGSTOP');
      await sleep(6_000); // past the 5 s lease: the server lets it go
      const taken = await rs.scope(run.id).claim('file:report.md').tryAcquire();
      assert.equal(taken.kind, 'acquired', 'the server gave the key to another holder');
      const seenBefore = holder.stdout.length;
      holder.proc.kill('SIGCONT');
      await until('a check after waking', () => holder.stdout.slice(seenBefore).includes('CHECK '), 5_000);
      const first = holder.stdout.slice(seenBefore).split('\n').find((line) => line.startsWith('CHECK '))!;
      assert.equal(first, 'CHECK lost=true aborted=true code=LEASE_RENEWALS_EXHAUSTED');
      if (taken.kind === 'acquired') await taken.lease.release();
    } finally {
      holder.proc.kill('SIGKILL');
      await holder.done;
    }
  });
});

