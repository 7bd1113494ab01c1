/**
 * An operator's tools against a real server: a forced claim release (the holder's lease is lost at
 * its next renewal, the next holder gets the next generation), dead letters listed page by page,
 * requeued as new messages and deleted, a mailbox's purge; and claim keys `.` and `..`, which the
 * URL parser would drop from the path unless they are percent-encoded.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ConflictError, LeaseLostError, Runstate, encodeClaimKey, type ClaimLease, type ScopeHandle } from 'runstate-sdk';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

import { Server } from './support/server.js';

describe('operator tools', () => {
  let server: Server;
  let rs: Runstate;
  let run: ScopeHandle;

  before(async () => {
    server = await Server.start({ memory: true });
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'operator-test' });
    run = await rs.scopes.create({ name: 'operator' });
  });

  after(async () => {
    rs?.close();
    await server?.stop();
  });

  test('a forced release frees the key and fences the old holder', async () => {
    const lease = await run.claim('report').acquire({ leaseSeconds: 30 });
    const view = await run.claim('report').forceRelease('holder hung');
    assert.equal(view.token, null);
    assert.equal(view.forced, true);
    assert.equal(view.generation, lease.generation);
    assert.equal(view.reason, 'holder hung');
    await assert.rejects(lease.renew(), (err: any) => err.code === 'STALE_CLAIM');
    const next = await run.claim('report').acquire();
    assert.equal(next.generation, lease.generation + 1);
    await next.release();
    await assert.rejects(run.claim('report').forceRelease(), (err) => err instanceof ConflictError && err.code === 'CONFLICT');
  });

  test('a forced release inside run() throws LeaseLostError from run() and marks the lease lost', async () => {
    // The operator forces the key free half a second into fn, and fn returns half a second later,
    // long before the next renewal: the refused release is what tells run().
    let held: ClaimLease | undefined;
    const outcome = await run.claim('company:initech').run(async (lease) => {
      held = lease;
      await sleep(500);
      await run.claim('company:initech').forceRelease('hung');
      await sleep(500);
      return 'report';
    }, { leaseSeconds: 30 }).then(
      (value) => ({ value }),
      (err) => ({ err }),
    );
    assert.ok('err' in outcome && outcome.err instanceof LeaseLostError, `run() gave ${JSON.stringify(outcome)}`);
    assert.equal((outcome.err as LeaseLostError).code, 'STALE_CLAIM');
    assert.equal(held?.isLost, true);
    const next = await run.claim('company:initech').acquire();
    assert.equal(next.generation, held!.generation + 1);
    await next.release();
  });

  test('dead letters are listed, requeued as new messages and deleted', async () => {
    const mailbox = await rs.mailboxes.ensure('fragile-ts');
    const box = run.mailboxById(mailbox.id);
    for (const n of [1, 2, 3]) {
      await box.send({ n });
      const delivery = await box.receive();
      assert.ok(delivery);
      await delivery.reject();
    }
    const first = await rs.mailboxes.deadLetters(mailbox.id, { limit: 2 });
    assert.deepEqual(first.deadLetters.map((letter) => letter.payload), [{ n: 3 }, { n: 2 }]);
    assert.equal(first.total, 3);
    assert.ok(first.nextCursor);
    const all = [];
    for await (const letter of rs.mailboxes.iterDeadLetters(mailbox.id)) all.push(letter.id);
    assert.equal(all.length, 3);
    const dry = await rs.mailboxes.requeueDeadLetters(mailbox.id, { all: true, dryRun: true });
    assert.deepEqual([dry.matched, dry.requeued, dry.dryRun], [3, 3, true]);
    const done = await rs.mailboxes.requeueDeadLetters(mailbox.id, { messageIds: [all[0]!] });
    assert.equal(done.requeued, 1);
    const again = await box.receive();
    assert.ok(again);
    assert.equal(again.id, done.requeuedAs[all[0]!]);
    assert.equal(again.attempt, 1);
    assert.deepEqual(again.data, { n: 3 });
    await again.complete();
    const deleted = await rs.mailboxes.deleteDeadLetters(mailbox.id, { reason: 'rejected' });
    assert.equal(deleted.deleted, 2);
    assert.equal((await rs.mailboxes.deadLetters(mailbox.id)).total, 0);
  });

  test('a purge ends what waits', async () => {
    const mailbox = await rs.mailboxes.ensure('purged-ts');
    const box = run.mailboxById(mailbox.id);
    const ticket = await box.submit({ n: 1 }, { key: 'purge-me' });
    await box.send('plain');
    assert.deepEqual(await rs.mailboxes.purge(mailbox.id, { dryRun: true }), { matched: 2, purged: 2, remaining: 0, dryRun: true });
    const done = await rs.mailboxes.purge(mailbox.id, { scopeId: run.id, reason: 'drain' });
    assert.equal(done.purged, 2);
    const view = await ticket.status();
    assert.equal(view.state, 'CANCELLED');
    assert.equal(view.outcomeReason, 'purged: drain');
  });

  test('claim keys . and .. are renewed and released, not sent to another route', async () => {
    assert.equal(encodeClaimKey('.'), '%2E');
    assert.equal(encodeClaimKey('..'), '%2E%2E');
    assert.equal(encodeClaimKey('...'), '...');
    for (const key of ['.', '..']) {
      const lease = await run.claim(key).acquire({ leaseSeconds: 10 });
      await lease.renew();
      await lease.release();
      const next = await run.claim(key).acquire({ leaseSeconds: 10 });
      assert.equal(next.generation, lease.generation + 1);
      await next.release();
    }
  });
});

describe('a result past its retention', () => {
  test('says tombstoned, not an empty success', async () => {
    const server = await Server.start({ memory: true, args: ['--retention-s', '1'] });
    const rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl });
    try {
      const run = await rs.scopes.create();
      await rs.mailboxes.ensure('work');
      const ticket = await run.mailbox('work').submit({ n: 1 }, { key: 'k' });
      const delivery = await run.mailbox('work').receive();
      assert.ok(delivery);
      await delivery.complete({ payload: 'report' });
      assert.deepEqual(await ticket.result(), { state: 'SUCCEEDED', outcome: 'report', reason: null });
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      assert.deepEqual(await ticket.result(), { state: 'SUCCEEDED', outcome: null, reason: null, tombstoned: true });
    } finally {
      rs.close();
      await server.stop();
    }
  });
});
