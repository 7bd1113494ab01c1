/**
 * Fewer requests per unit of work, against a real server: one client renews the leases it and its
 * views hold in one request per interval, answered per lease (one refused lease is lost alone);
 * calls made while a request of the client is on its way go out as one batch, each with its own
 * answer and error, in order per key, while a lone call goes out as it always did; `batchCalls:
 * false`, and a server without the batch route, get one request per call; `consume({ prefetch })`
 * takes many deliveries in one request, renews those waiting for the handler and puts them back
 * at once on stop; `withHolder()` views are holders of their own.
 *
 * Requests are counted by a wrapper around the global `fetch`, which the SDK sends every request
 * through; the same wrapper answers the batch route as an older server would, when a test asks.
 * The tests run one at a time, each with its own client, so what one sends is not counted by
 * another. No assertion depends on how long anything takes: the batches are made by calls
 * queued behind a request on its way, which no timing changes.
 */

import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';

import {
  ConfigError,
  ConflictError,
  LeaseLostError,
  NotFoundError,
  Runstate,
  RunstateError,
  TaskTicket,
  type ClaimLease,
  type Delivery,
  type ScopeHandle,
} from 'runstate-sdk';

import { Server } from './support/server.js';

interface Sent {
  method: string;
  path: string;
  body: any;
}

/** Every request sent through fetch by this process, oldest first. */
const sent: Sent[] = [];
/** When set, the batch route is answered as a server without it answers (404, or 405). */
let batchRouteMissing: 404 | 405 | null = null;

const realFetch = globalThis.fetch;
globalThis.fetch = (async (input: string | URL | Request, init?: RequestInit) => {
  const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
  const body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
  sent.push({ method: init?.method ?? 'GET', path: url.pathname, body });
  if (batchRouteMissing !== null && url.pathname.endsWith('/batch')) {
    const error =
      batchRouteMissing === 404
        ? { code: 'NOT_FOUND', message: `no such route: POST ${url.pathname}` }
        : { code: 'METHOD_NOT_ALLOWED', message: `POST is not allowed on ${url.pathname}; use GET` };
    return new Response(JSON.stringify({ error }), { status: batchRouteMissing, headers: { 'content-type': 'application/json' } });
  }
  return realFetch(input, init);
}) as typeof fetch;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The last segment of each request's path: `claims`, `batch`, `renew`... */
function routes(requests: Sent[]): string[] {
  return requests.map((request) => request.path.slice(request.path.lastIndexOf('/') + 1));
}

/** The paths (below the space) of one batch request's operations. */
function operationPaths(request: Sent): string[] {
  return request.body.operations.map((operation: { path: string }) => operation.path);
}

/** What each request renewed: the renewal paths it carried, alone or as operations of a batch. */
function renewalsIn(request: Sent): string[] {
  if (request.path.endsWith('/batch')) return operationPaths(request).filter((path) => path.endsWith('/renew'));
  if (request.path.endsWith('/renew')) return [request.path.slice(request.path.indexOf('/claims/'))];
  return [];
}

describe('batches, prefetch and views', () => {
  let server: Server;
  let setup: Runstate;
  let mailboxId: string;
  let held: ScopeHandle;
  const clients: Runstate[] = [];

  before(async () => {
    server = await Server.start();
    setup = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'setup' });
    mailboxId = (await setup.mailboxes.ensure('jobs', { mode: 'WORK' })).id;
    held = await setup.scopes.create({ name: 'held' });
    // Held for the whole suite: its first renewal comes ~200 s from now, after the suite.
    await held.claim('held').acquire({ leaseSeconds: 600 });
  });

  after(async () => {
    setup?.close();
    await server?.stop();
  });

  beforeEach(() => {
    batchRouteMissing = null;
  });

  afterEach(() => {
    // A test that failed half way sends nothing more into the next one's count.
    for (const made of clients.splice(0)) made.close();
  });

  function client(holder: string, options: { batchCalls?: boolean } = {}): Runstate {
    const made = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder, ...options });
    clients.push(made);
    return made;
  }

  /**
   * A call that goes out alone at once and holds no lease (the setup client holds its key, so it
   * is refused `CLAIM_HELD`): the calls of the same client made right after it wait for it, and
   * go out together as one batch when it is answered.
   */
  function pilot(view: Runstate): Promise<unknown> {
    return view.scope(held.id).claim('held').tryAcquire();
  }

  test('one request renews the leases of a client and its views, each answered on its own', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'renewals' });
    const agents = [0, 1, 2].map((n) => swarm.withHolder(`agent-${n}`));
    sent.length = 0;
    const ahead = pilot(swarm);
    // Taken while the pilot is on its way: all six ride in one batch, and are due together.
    const leases = await Promise.all(
      [0, 1, 2, 3, 4, 5].map((n) => agents[n % 3]!.scope(run.id).claim(`renewed-${n}`).acquire({ leaseSeconds: 5 })),
    );
    await ahead;
    assert.deepEqual(routes(sent), ['claims', 'batch']);
    assert.deepEqual(operationPaths(sent[1]!), Array(6).fill('/claims'));
    const firstExpiries = leases.map((lease) => lease.expiresAt.getTime());
    await until('every lease renewed', () => leases.every((lease, n) => lease.expiresAt.getTime() > firstExpiries[n]!));
    assert.ok(leases.every((lease) => !lease.isLost));
    const carrying = sent.filter((request) => renewalsIn(request).length > 0);
    // The first request that renewed any of them renewed all six, as one batch.
    assert.equal(carrying[0]!.path, `/v1/spaces/${server.spaceId}/batch`);
    assert.deepEqual(renewalsIn(carrying[0]!).sort(), leases.map((lease) => `/claims/${lease.key}/renew`).sort());
    assert.ok(!sent.some((request) => request.path.endsWith('/renew')), 'no lease was renewed alone');
    for (const lease of leases) await lease.release();
    swarm.close();
  });

  test('one refused lease in a renewal batch is lost alone; the others are renewed and go on', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'refused' });
    const ahead = pilot(swarm);
    const leases = await Promise.all([0, 1, 2, 3].map((n) => swarm.scope(run.id).claim(`kept-${n}`).acquire({ leaseSeconds: 5 })));
    await ahead;
    const [doomed, ...kept] = leases as [ClaimLease, ...ClaimLease[]];
    sent.length = 0;
    // Another agent takes the first key behind the client's back: its token is stale from now on.
    assert.equal((await server.api('POST', `/claims/${doomed.key}/release`, { token: doomed.token() })).status, 200);
    const thief = await server.api('POST', '/claims', {
      key: doomed.key, scopeId: run.id, holder: 'thief', holderSession: '0123456789ab', leaseSeconds: 30,
    });
    assert.equal(thief.status, 200);
    const firstExpiries = kept.map((lease) => lease.expiresAt.getTime());
    await until('the stale lease lost', () => doomed.signal.aborted);
    assert.ok(doomed.lostError instanceof LeaseLostError);
    assert.equal(doomed.lostError.code, 'STALE_CLAIM');
    // It was refused in the same batch that renewed the three others (the last to carry it).
    const batch = [...sent].reverse().find((request) => renewalsIn(request).includes(`/claims/${doomed.key}/renew`))!;
    assert.ok(batch.path.endsWith('/batch'));
    assert.deepEqual(renewalsIn(batch).sort(), leases.map((lease) => `/claims/${lease.key}/renew`).sort());
    await until('the others renewed', () => kept.every((lease, n) => lease.expiresAt.getTime() > firstExpiries[n]!));
    assert.ok(kept.every((lease) => !lease.isLost));
    // They go on: renewed again, without the lost one.
    const renewedOnce = kept.map((lease) => lease.expiresAt.getTime());
    await until('the others renewed again', () => kept.every((lease, n) => lease.expiresAt.getTime() > renewedOnce[n]!));
    const later = sent.filter((request) => renewalsIn(request).length > 0).at(-1)!;
    assert.ok(!renewalsIn(later).includes(`/claims/${doomed.key}/renew`), 'a lost lease is not renewed again');
    for (const other of kept) {
      const taken = await server.api('POST', '/claims', { key: other.key, scopeId: run.id, holder: 'thief', holderSession: '0123456789ab', leaseSeconds: 5 });
      assert.equal(taken.body?.error?.code, 'CLAIM_HELD', `${other.key} is still held`);
      await other.release();
    }
    swarm.close();
  });

  test('calls made while a request is on its way go out as one batch, each with its own answer or error', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'coalesced' });
    await setup.scope(run.id).mailboxById(mailboxId).submit({ n: 'first' }, { key: 't7' });
    const views = Array.from({ length: 20 }, (_, n) => swarm.withHolder(`agent-${n}`));
    sent.length = 0;
    const outcomes = await Promise.all(
      views.map((view, n) =>
        view
          .scope(run.id)
          .mailboxById(n === 13 ? 'mb_no_such_mailbox' : mailboxId)
          .submit({ n }, { key: `t${n}` })
          .then((ticket) => ticket, (err: unknown) => err),
      ),
    );
    // The first goes out alone; the other nineteen wait for it and go out together.
    assert.deepEqual(routes(sent), ['tasks', 'batch']);
    const operations = sent[1]!.body.operations as Array<{ path: string; idempotencyKey: string; body: { taskKey: string } }>;
    assert.deepEqual(operations.map((operation) => operation.body.taskKey), views.slice(1).map((_, n) => `t${n + 1}`));
    assert.equal(new Set(operations.map((operation) => operation.idempotencyKey)).size, 19, 'each call keeps its own idempotency key');
    // Each keeps its own outcome: the key taken with another input, the missing mailbox, the rest.
    assert.ok(outcomes[7] instanceof ConflictError, String(outcomes[7]));
    assert.equal((outcomes[7] as ConflictError).code, 'IDEMPOTENCY_CONFLICT');
    assert.ok(outcomes[13] instanceof NotFoundError, String(outcomes[13]));
    assert.notEqual(outcomes[7], outcomes[13]);
    const tickets = outcomes.filter((outcome, n) => n !== 7 && n !== 13);
    assert.ok(tickets.every((ticket) => ticket instanceof TaskTicket));
    assert.equal(new Set(tickets.map((ticket) => (ticket as TaskTicket).id)).size, 18);
    swarm.close();
  });

  test('calls on one key keep their order in a batch: a release, then an acquire of the same key', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'ordered' });
    const first = swarm.withHolder('first');
    const second = swarm.withHolder('second');
    const lease = await first.scope(run.id).claim('k').acquire();
    const other = await first.scope(run.id).claim('other').acquire();
    sent.length = 0;
    const releasing = other.release(); // alone: the next two wait for it
    const releasingK = lease.release();
    const taking = second.scope(run.id).claim('k').tryAcquire();
    await Promise.all([releasing, releasingK]);
    const taken = await taking;
    assert.deepEqual(routes(sent), ['release', 'batch']);
    assert.deepEqual(operationPaths(sent[1]!), ['/claims/k/release', '/claims']);
    assert.equal(taken.kind, 'acquired');
    if (taken.kind === 'acquired') {
      assert.equal(taken.lease.generation, lease.generation + 1);
      await taken.lease.release();
    }
    swarm.close();
  });

  test('a lone call goes out as it always did, on its own route', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'alone' });
    sent.length = 0;
    const lease = await swarm.scope(run.id).claim('k').acquire();
    await lease.renew();
    await lease.release();
    const ticket = await swarm.scope(run.id).mailboxById(mailboxId).submit({ n: 1 }, { key: 'alone' });
    assert.ok(ticket instanceof TaskTicket);
    assert.deepEqual(routes(sent), ['claims', 'renew', 'release', 'tasks']);
    swarm.close();
  });

  test('batchCalls: false sends every call and every renewal alone', async () => {
    const plain = client('plain', { batchCalls: false });
    const run = await plain.scopes.create({ name: 'plain' });
    sent.length = 0;
    const [leases, tickets] = await Promise.all([
      Promise.all([0, 1, 2].map((n) => plain.scope(run.id).claim(`plain-${n}`).acquire({ leaseSeconds: 5 }))),
      Promise.all([0, 1, 2].map((n) => plain.scope(run.id).mailboxById(mailboxId).submit({ n }, { key: `plain-${n}` }))),
    ]);
    assert.ok(tickets.every((ticket) => ticket instanceof TaskTicket));
    const firstExpiries = leases.map((lease) => lease.expiresAt.getTime());
    await until('every lease renewed', () => leases.every((lease, n) => lease.expiresAt.getTime() > firstExpiries[n]!));
    assert.ok(!sent.some((request) => request.path.endsWith('/batch')), 'nothing went out in a batch');
    assert.equal(routes(sent).filter((route) => route === 'claims').length, 3);
    assert.equal(routes(sent).filter((route) => route === 'tasks').length, 3);
    assert.ok(routes(sent).filter((route) => route === 'renew').length >= 3);
    for (const lease of leases) await lease.release();
    plain.close();
  });

  test('a server without the batch route (404) is sent each call alone, and the client remembers it', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'older' });
    const mailbox = swarm.scope(run.id).mailboxById(mailboxId);
    batchRouteMissing = 404;
    sent.length = 0;
    const first = await Promise.all([0, 1, 2, 3].map((n) => mailbox.submit({ n }, { key: `older-${n}` })));
    assert.ok(first.every((ticket) => ticket instanceof TaskTicket));
    assert.deepEqual(routes(sent), ['tasks', 'batch', 'tasks', 'tasks', 'tasks']);
    sent.length = 0;
    const again = await Promise.all([4, 5, 6].map((n) => mailbox.submit({ n }, { key: `older-${n}` })));
    assert.ok(again.every((ticket) => ticket instanceof TaskTicket));
    assert.deepEqual(routes(sent), ['tasks', 'tasks', 'tasks'], 'no batch is tried again');
    swarm.close();
  });

  test('renewals fall back to one request per lease when the batch route is missing (405)', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'older-renewals' });
    const ahead = pilot(swarm);
    const leases = await Promise.all([0, 1, 2].map((n) => swarm.scope(run.id).claim(`older-${n}`).acquire({ leaseSeconds: 5 })));
    await ahead;
    batchRouteMissing = 405;
    sent.length = 0;
    const firstExpiries = leases.map((lease) => lease.expiresAt.getTime());
    await until('every lease renewed', () => leases.every((lease, n) => lease.expiresAt.getTime() > firstExpiries[n]!));
    assert.ok(leases.every((lease) => !lease.isLost), 'a missing route loses no lease');
    const ours = () => sent.filter((request) => renewalsIn(request).some((path) => path.includes('/older-')));
    assert.deepEqual(routes(ours()).slice(0, 4), ['batch', 'renew', 'renew', 'renew']);
    await until('renewed again', () => routes(ours()).filter((route) => route === 'renew').length >= 6);
    assert.equal(routes(ours()).filter((route) => route === 'batch').length, 1, 'the batch route is tried once');
    for (const lease of leases) await lease.release();
    swarm.close();
  });

  test('consume({ prefetch }) takes many deliveries in one request and renews those waiting for the handler', async () => {
    const worker = client('prefetcher');
    const run = await worker.scopes.create({ name: 'prefetch' });
    const mailbox = worker.scope(run.id).mailboxById(mailboxId);
    const tickets = await Promise.all([0, 1, 2].map((n) => mailbox.submit({ n }, { key: `prefetch-${n}` })));
    const controller = new AbortController();
    const done: Array<[number, number]> = [];
    const errors: unknown[] = [];
    // Each delivery's lease end (as the server last said) when its handler starts.
    const atStart: number[] = [];
    sent.length = 0;
    await mailbox.consume<{ n: number }>(
      async (data, delivery: Delivery<{ n: number }>) => {
        atStart.push(delivery.expiresAt!.getTime());
        // Longer than the 5 s lease, all told: the last one waits ~5 s for the only handler.
        await sleep(2_500);
        done.push([data.n, delivery.attempt]);
        if (done.length === 3) controller.abort();
      },
      {
        prefetch: 3,
        concurrency: 1,
        leaseSeconds: 5,
        waitMs: 1_000,
        signal: controller.signal,
        onError: (err) => {
          errors.push(err);
        },
      },
    );
    assert.deepEqual(errors, [], 'no delivery was lost');
    assert.deepEqual(done, [[0, 1], [1, 1], [2, 1]]);
    const takes = sent.filter((request) => request.path.endsWith('/recv-many') || request.path.endsWith('/recv'));
    assert.ok(takes.every((request) => request.path.endsWith('/recv-many')), 'never one at a time');
    assert.equal(takes[0]!.body.maxMessages, 3);
    // Each handler saw its lease's end; the last, which waited ~5 s (its lease's length), saw one
    // later than the first did: its lease was renewed while it waited.
    assert.ok(atStart.every((expiresAt) => Number.isFinite(expiresAt)));
    assert.ok(atStart[2]! > atStart[0]!, 'the waiting delivery was renewed');
    const renewed = sent.flatMap((request) =>
      request.path.endsWith('/batch') ? operationPaths(request) : [request.path.slice(request.path.indexOf('/messages/'))],
    );
    assert.ok(renewed.some((path) => path.endsWith('/renew')), 'renewals went out');
    for (const ticket of tickets) assert.equal((await ticket.status()).state, 'SUCCEEDED');
    worker.close();
  });

  test('consume({ prefetch }) puts the deliveries it did not start back at once when stopped', async () => {
    const worker = client('prefetcher');
    const run = await worker.scopes.create({ name: 'put-back' });
    const mailbox = worker.scope(run.id).mailboxById(mailboxId);
    const tickets = await Promise.all([0, 1, 2].map((n) => mailbox.submit({ n }, { key: `back-${n}` })));
    const controller = new AbortController();
    const seen: number[] = [];
    sent.length = 0;
    await mailbox.consume<{ n: number }>(
      async (data) => {
        seen.push(data.n);
        controller.abort(); // stop while the two others wait for the handler
      },
      { prefetch: 3, concurrency: 1, leaseSeconds: 30, waitMs: 1_000, signal: controller.signal },
    );
    assert.deepEqual(seen, [0]);
    assert.equal(sent.filter((request) => request.path.endsWith('/recv-many')).length, 1);
    const returned = sent.flatMap((request) =>
      request.path.endsWith('/batch') ? operationPaths(request).filter((path) => path.endsWith('/return')) : request.path.endsWith('/return') ? [request.path] : [],
    );
    assert.equal(returned.length, 2, 'both put back (returned unhandled), not left to their 30 s leases');
    // Another worker gets them at once, as their second delivery (the first not counted as an attempt).
    const other = client('other').scope(run.id).mailboxById(mailboxId);
    const again: Array<[number, number]> = [];
    for (let n = 0; n < 2; n += 1) {
      const delivery = await other.receive<{ n: number }>({ waitMs: 15_000 });
      assert.ok(delivery !== null, 'given back before its lease ran out');
      again.push([delivery.data.n, delivery.attempt]);
      await delivery.complete();
    }
    assert.deepEqual(again.sort(), [[1, 2], [2, 2]]);
    assert.equal((await tickets[0]!.status()).state, 'SUCCEEDED');
    for (const prefetch of [0, 101, 2.5]) {
      await assert.rejects(mailbox.consume(async () => undefined, { prefetch }), ConfigError);
    }
    worker.close();
  });

  test('withHolder() views are holders of their own, share their client, and close with it', async () => {
    const swarm = client('swarm');
    const run = await swarm.scopes.create({ name: 'views' });
    const a = swarm.withHolder('a');
    const b = swarm.withHolder('b');
    assert.deepEqual([a.holder, b.holder, swarm.holder], ['a', 'b', 'swarm']);
    assert.equal(new Set([a.session, b.session, swarm.session]).size, 3, 'each view has a session of its own');
    const lease = await a.scope(run.id).claim('k').acquire();
    // b is another holder: it can neither take a's claim nor give it back.
    const refused = await b.scope(run.id).claim('k').acquire().catch((err: unknown) => err);
    assert.ok(refused instanceof ConflictError && refused.code === 'CLAIM_HELD', String(refused));
    assert.match(refused.message, /held by a /);
    const theirs = await b.scope(run.id).claim('k2').acquire();
    await theirs.release();
    const held = await server.api('POST', '/claims', { key: 'k', scopeId: run.id, holder: 'thief', holderSession: '0123456789ab', leaseSeconds: 5 });
    assert.equal(held.body?.error?.code, 'CLAIM_HELD', 'b releasing its own claim leaves a\'s held');
    // Closing a view closes nothing; closing the client stops every view's renewals.
    a.close();
    b.close();
    assert.equal(lease.isLost, false);
    swarm.close();
    assert.equal(lease.isLost, true);
    assert.equal((lease.lostError!.cause as RunstateError).code, 'CLIENT_CLOSED');
    assert.throws(() => swarm.withHolder(''), ConfigError);
    assert.throws(() => swarm.withHolder('x'.repeat(257)), ConfigError);
  });
});
