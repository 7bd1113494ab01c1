/**
 * Claims against a real server: renewal keeps a short lease alive past its length, a lost lease
 * aborts `lease.signal` and sets `lease.isLost` without interrupting the function (and `run()`
 * then throws `LeaseLostError`), the SDK never re-acquires a lost key, and the errors a held key
 * gives. The 5 s tests (the shortest lease the server allows) run side by side.
 */

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';

import { ConflictError, LeaseLostError, Runstate, RunstateError, WaitTimeoutError, encodeClaimKey, type ScopeHandle } from 'runstate-sdk';

import { Server } from './support/server.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Resolves when `signal` aborts; rejects after `ms` so a broken renewal cannot hang the suite. */
async function abortedWithin(signal: AbortSignal, ms: number): Promise<void> {
  if (signal.aborted) return;
  const timer = AbortSignal.timeout(ms);
  await Promise.race([
    once(signal, 'abort'),
    once(timer, 'abort').then(() => {
      throw new Error(`signal not aborted within ${ms} ms`);
    }),
  ]);
}

describe('claims', { concurrency: true }, () => {
  let server: Server;
  let rs: Runstate;
  let run: ScopeHandle;

  before(async () => {
    server = await Server.start();
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'claims-test' });
    run = await rs.scopes.create({ name: 'claims' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  /** Take `key` away from its holder on the server: release its token, then let another agent in. */
  async function stealFrom(key: string, token: string): Promise<{ token: string; generation: number }> {
    const released = await server.api('POST', `/claims/${encodeClaimKey(key)}/release`, { token });
    assert.equal(released.status, 200);
    const taken = await server.api('POST', '/claims', {
      key, scopeId: run.id, holder: 'agent-2', holderSession: '0123456789ab', leaseSeconds: 30,
    });
    assert.equal(taken.status, 200);
    return taken.body;
  }

  test('a lost lease aborts lease.signal and sets isLost, the function runs on, and run() then throws', async () => {
    const key = 'file:lost.md';
    const steps: string[] = [];
    let thief: { token: string; generation: number } | undefined;
    let generation = 0;
    const outcome = await run
      .claim(key)
      .run(
        async (lease) => {
          generation = lease.generation;
          thief = await stealFrom(key, lease.token());
          steps.push(`lost before renewal: ${lease.isLost}`);
          await abortedWithin(lease.signal, 4_000); // the first renewal of a 5 s lease comes after ~1.7 s
          steps.push(`lost: ${lease.isLost}`);
          assert.ok(lease.signal.reason instanceof LeaseLostError);
          assert.equal(lease.signal.reason.code, 'STALE_CLAIM');
          assert.throws(() => lease.throwIfLost(), LeaseLostError);
          await sleep(50);
          steps.push('still running after the loss');
          return 'report written';
        },
        { leaseSeconds: 5 },
      )
      .then((value) => ({ value }), (error) => ({ error }));
    assert.deepEqual(steps, ['lost before renewal: false', 'lost: true', 'still running after the loss']);
    assert.ok('error' in outcome && outcome.error instanceof LeaseLostError, 'no result made without ownership');
    assert.equal((outcome.error as LeaseLostError).code, 'STALE_CLAIM');
    assert.equal((outcome.error as LeaseLostError).status, 409);
    // Never re-acquired: the other agent still owns the key, at a later generation.
    assert.ok(thief!.generation > generation);
    const attempt = await run.claim(key).tryAcquire();
    assert.equal(attempt.kind, 'busy');
  });

  test('when the function itself stops on isLost, its own error comes out of run()', async () => {
    const key = 'file:report.md';
    const written: string[] = [];
    const failure = await run
      .claim(key)
      .run(
        async (lease) => {
          await stealFrom(key, lease.token());
          for (const section of ['intro', 'findings', 'summary', 'appendix']) {
            if (lease.isLost) throw new Error('lost ownership of report.md, stopping');
            written.push(section);
            await sleep(900);
          }
        },
        { leaseSeconds: 5 },
      )
      .catch((err: Error) => err);
    assert.ok(failure instanceof Error);
    assert.equal(failure.message, 'lost ownership of report.md, stopping');
    assert.ok(written.length >= 2 && written.length <= 3, `stopped after the loss: ${written}`);
  });

  test('renewal at about a third of the lease keeps a 5 s claim past its length', async () => {
    const lease = await run.claim('company:long').acquire({ leaseSeconds: 5 });
    const firstExpiry = lease.expiresAt.getTime();
    // Past the lease's own length, then until the next renewal lands, and look at once. Not at a
    // fixed moment: one renewal alone carries the lease's end by this process's clock to 6.0-6.3 s
    // after the acquire, so a look at 6.2 s passed only if the second had landed, which a loaded
    // machine can delay past it though nothing is wrong. Without renewals the lease is lost at
    // 4.5 s by its clock, and the wait below ends on that.
    await sleep(5_500);
    const before = lease.expiresAt.getTime();
    await until('the next renewal', () => lease.isLost || lease.expiresAt.getTime() > before, 10_000);
    assert.equal(lease.isLost, false);
    assert.ok(lease.expiresAt.getTime() >= firstExpiry + 3_000, 'renewed at least twice');
    const other = await server.api('POST', '/claims', {
      key: 'company:long', scopeId: run.id, holder: 'agent-2', holderSession: '0123456789ab', leaseSeconds: 5,
    });
    assert.equal(other.status, 409);
    assert.equal(other.body.error.code, 'CLAIM_HELD');
    await lease.release();
    await lease.release(); // a second release sends nothing
    const after = await run.claim('company:long').tryAcquire();
    assert.equal(after.kind, 'acquired');
    if (after.kind === 'acquired') await after.lease.release();
  });

  test('a held key: ConflictError CLAIM_HELD at once, WaitTimeoutError after timeoutMs with wait: true', async () => {
    const lease = await run.claim('company:held').acquire();
    try {
      const conflict = await run.claim('company:held').acquire().catch((err) => err);
      assert.ok(conflict instanceof ConflictError);
      assert.equal(conflict.code, 'CLAIM_HELD');
      assert.equal(conflict.status, 409);
      assert.match(String(conflict.requestId), /\S/);
      const started = performance.now();
      const timeout = await run.claim('company:held').run(() => 'never', { wait: true, timeoutMs: 800 }).catch((err) => err);
      const tookMs = performance.now() - started;
      assert.ok(timeout instanceof WaitTimeoutError);
      assert.ok(tookMs >= 800 && tookMs < 3_000, `took ${tookMs} ms`);
      const generations = await Promise.all([run.claim('company:held').tryAcquire(), run.claim('company:held').tryAcquire()]);
      assert.deepEqual(generations.map((attempt) => attempt.kind), ['busy', 'busy']);
    } finally {
      await lease.release();
    }
  });

  test('a lease of NaN or Infinity seconds is refused as VALIDATION_FAILED, not sent as null and taken for the default', async () => {
    const refused = (err: unknown) => err instanceof RunstateError && err.code === 'VALIDATION_FAILED' && err.status === 400 && /leaseSeconds/.test(err.message);
    for (const leaseSeconds of [Number.NaN, Infinity]) {
      await assert.rejects(run.claim('nan-lease').acquire({ leaseSeconds }), refused, `claim, ${leaseSeconds}`);
      await assert.rejects(run.claim('nan-lease').run(() => 'ran', { leaseSeconds }), refused, `claim run(), ${leaseSeconds}`);
    }
    // Nothing was taken: another holder gets the key at once.
    const other = await rs.withHolder('nan-other').scope(run.id).claim('nan-lease').tryAcquire();
    assert.equal(other.kind, 'acquired');
    if (other.kind === 'acquired') await other.lease.release();
    await rs.pools.ensure('nan-pool', { capacity: 1 });
    await assert.rejects(run.pool('nan-pool').acquire({ leaseSeconds: Number.NaN }), refused, 'pool');
    await assert.rejects(rs.pools.ensure('nan-pool-2', { capacity: Number.NaN }), (err: unknown) => err instanceof RunstateError && err.code === 'VALIDATION_FAILED', 'ensure: not NOT_FOUND');
    await rs.mailboxes.ensure('nan-queue');
    await assert.rejects(run.mailbox('nan-queue').consume(() => undefined, { leaseSeconds: Number.NaN, waitMs: 0 }), refused, 'consume');
  });

  test('closing the client stops its renewals and marks its leases lost', async () => {
    const other = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl });
    const lease = await other.scope(run.id).claim('company:closing').acquire();
    other.close();
    assert.equal(lease.isLost, true);
    assert.equal(lease.signal.aborted, true);
    assert.ok(lease.lostError instanceof LeaseLostError);
    assert.equal((lease.lostError.cause as { code?: string }).code, 'CLIENT_CLOSED');
  });
});
