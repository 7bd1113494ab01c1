/**
 * The request layer and configuration, against a small local HTTP server that answers what each
 * test needs (a dropped connection, a 503, an error envelope, a slow answer): what goes on the wire,
 * what is retried with the same idempotency key, and which error each answer becomes.
 */

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';

import {
  AuthenticationError,
  ConfigError,
  ConflictError,
  LeaseLostError,
  NotFoundError,
  RateLimitError,
  RunClient,
  Runstate,
  RunstateError,
  ScopeCancelledError,
  UnavailableError,
  WaitTimeoutError,
  encodeClaimKey,
  isTransient,
  mapError,
} from 'runstate-sdk';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

type Answer = (seen: Seen, res: ServerResponse, req: IncomingMessage) => void;

describe('request layer', () => {
  let http: HttpServer;
  let baseUrl: string;
  let seen: Seen[];
  let answers: Answer[];
  /** Answers by request, ahead of the queue, for tests whose requests interleave. */
  let route: ((seen: Seen) => Answer | undefined) | undefined;

  const json = (status: number, body: unknown, headers: Record<string, string> = {}): Answer => (_seen, res) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };
  const drop: Answer = (_seen, _res, req) => req.socket.destroy();

  before(async () => {
    http = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        const entry = { method: req.method!, url: req.url!, headers: req.headers, body };
        seen.push(entry);
        const answer = route?.(entry) ?? answers.shift() ?? json(500, { error: { code: 'UNEXPECTED', message: 'no answer queued' } });
        answer(entry, res, req);
      });
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}/`;
  });

  after(async () => {
    http.closeAllConnections();
    await new Promise((resolve) => http.close(resolve));
  });

  beforeEach(() => {
    seen = [];
    answers = [];
    route = undefined;
  });

  const client = (options: Record<string, unknown> = {}) =>
    new Runstate({ apiKey: 'k-1', spaceId: 'sp', baseUrl, holder: 'h-1', ...options });

  test('a POST carries the bearer key, a fresh 24-hex idempotency key and compact JSON without nulls', async () => {
    answers.push(json(201, { id: 'sc_1' }), json(201, { id: 'sc_2' }));
    const rs = client();
    const scope = await rs.scopes.create({ name: 'a' });
    await rs.scopes.create({ name: 'b' });
    assert.equal(scope.id, 'sc_1');
    assert.equal(seen[0]!.url, '/v1/spaces/sp/scopes', 'one trailing slash of the base URL is dropped');
    assert.equal(seen[0]!.headers.authorization, 'Bearer k-1');
    assert.match(String(seen[0]!.headers['idempotency-key']), /^[0-9a-f]{24}$/);
    assert.notEqual(seen[0]!.headers['idempotency-key'], seen[1]!.headers['idempotency-key'], 'each logical call has its own key');
    assert.equal(seen[0]!.headers['content-type'], 'application/json');
    assert.equal(seen[0]!.body, '{"name":"a"}');
  });

  test('iterClaims() and iterTasks() follow nextCursor, and stop after a page without one (a server that does not page)', async () => {
    answers.push(
      json(200, { scopeId: 'sc_1', claims: [{ key: 'a' }], truncated: true, nextCursor: 'Im0i' }),
      json(200, { scopeId: 'sc_1', claims: [{ key: 'b' }], truncated: false, nextCursor: null }),
      json(200, { scopeId: 'sc_1', tasks: [{ id: 'tk_1' }, { id: 'tk_2' }], truncated: false }),
    );
    const scope = client().scope('sc_1');
    const keys: string[] = [];
    for await (const claim of scope.iterClaims({ pageSize: 1 })) keys.push(claim.key);
    const tasks: string[] = [];
    for await (const task of scope.iterTasks()) tasks.push(task.id);
    assert.deepEqual([keys, tasks], [['a', 'b'], ['tk_1', 'tk_2']]);
    assert.deepEqual(seen.map((entry) => entry.url), [
      '/v1/spaces/sp/scopes/sc_1/claims?limit=1', '/v1/spaces/sp/scopes/sc_1/claims?limit=1&cursor=Im0i', '/v1/spaces/sp/scopes/sc_1/tasks',
    ]);
  });

  test('bodyless POSTs send no body and no content type; GETs send no idempotency key', async () => {
    answers.push(json(200, { state: 'CANCELLED' }), json(200, { id: 'sc_1' }));
    const scope = client().scope('sc_1');
    await scope.cancel();
    await scope.status();
    assert.equal(seen[0]!.body, '');
    assert.equal(seen[0]!.headers['content-type'], undefined);
    assert.equal(seen[0]!.headers['content-length'], '0');
    assert.equal(seen[1]!.method, 'GET');
    assert.equal(seen[1]!.headers['idempotency-key'], undefined);
  });

  test('a dropped connection is retried with the same idempotency key', async () => {
    answers.push(drop, drop, json(200, { id: 'sc_9' }));
    const scope = await client().scopes.create();
    assert.equal(scope.id, 'sc_9');
    assert.equal(seen.length, 3);
    const keys = new Set(seen.map((entry) => entry.headers['idempotency-key']));
    assert.equal(keys.size, 1, 'one logical call, one key on every attempt');
  });

  test('transport failures past the retries become UnavailableError with the cause kept', async () => {
    answers.push(drop, drop);
    const err = await client({ retries: 1 }).scopes.create().catch((caught) => caught);
    assert.ok(err instanceof UnavailableError);
    assert.equal(err.code, 'UNAVAILABLE');
    assert.equal(err.status, 503);
    assert.match(err.message, /^transport failure after retries/);
    assert.ok(err.cause instanceof Error);
    assert.equal(seen.length, 2);
  });

  test('a slow answer times out per attempt and is retried', async () => {
    const slow: Answer = (entry, res, req) => void setTimeout(() => json(200, { id: 'late' })(entry, res, req), 400);
    answers.push(slow, json(200, { id: 'sc_fast' }));
    const scope = await client({ requestTimeoutMs: 150 }).scopes.create();
    assert.equal(scope.id, 'sc_fast');
    assert.equal(seen[0]!.headers['idempotency-key'], seen[1]!.headers['idempotency-key']);
  });

  test('requestTimeoutMs past a Node timer (Infinity) waits for the answer; one that is not a number over 0 is ConfigError', async () => {
    const slow: Answer = (entry, res, req) => void setTimeout(() => json(200, { id: 'sc_slow' })(entry, res, req), 100);
    for (const requestTimeoutMs of [Infinity, 2 ** 31]) {
      seen = [];
      answers.push(slow);
      const scope = await client({ requestTimeoutMs }).scopes.create();
      assert.equal(scope.id, 'sc_slow', `${requestTimeoutMs}: answered, not cut after 1 ms`);
      assert.equal(seen.length, 1, `${requestTimeoutMs}: one attempt`);
    }
    for (const requestTimeoutMs of [0, -1, Number.NaN, '5000']) {
      assert.throws(
        () => client({ requestTimeoutMs }),
        (err: unknown) => err instanceof ConfigError && /requestTimeoutMs/.test(err.message),
        `requestTimeoutMs ${String(requestTimeoutMs)}`,
      );
    }
  });

  test('a wait option that is not a number of milliseconds is ConfigError before any request, not a busy loop or UNAVAILABLE', async () => {
    // Every read says the task still waits, the pool is full, the key held: a wait that never ends
    // would ask again and again until the test's own bound (below) stops it.
    route = (entry) => {
      if (entry.url.includes('/tasks/')) return json(200, { id: 'ta_1', state: 'QUEUED' });
      if (entry.url.endsWith('/claims')) return json(409, { error: { code: 'CLAIM_HELD', message: 'held' } });
      if (entry.url.endsWith('/mailboxes')) return json(200, { mailboxes: [{ id: 'mb_1', name: 'q' }] });
      if (entry.url.endsWith('/permits')) return json(200, { permits: [{ id: 'pe_1', name: 'p' }] });
      if (entry.url.endsWith('/acquire')) return json(409, { error: { code: 'CAPACITY_UNAVAILABLE', message: 'full' } });
      return json(200, { id: 'ba_1', state: 'OPEN', timers: [] });
    };
    const rs = client();
    const run = rs.scope('sc_1');
    const refused: Array<[string, () => Promise<unknown>]> = [
      ['result timeoutMs NaN', () => run.task('ta_1').result({ timeoutMs: Number.NaN, signal: AbortSignal.timeout(500) })],
      ['result pollMs 0', () => run.task('ta_1').result({ pollMs: 0, timeoutMs: 300 })],
      ['result timeoutMs -1', () => run.task('ta_1').result({ timeoutMs: -1 })],
      ['awaitAdmission timeoutMs "1000"', () => run.task('ta_1').awaitAdmission({ timeoutMs: '1000' as unknown as number })],
      ['claim timeoutMs NaN', () => run.claim('k').acquire({ wait: true, timeoutMs: Number.NaN, signal: AbortSignal.timeout(500) })],
      ['pool timeoutMs NaN', () => run.pool('p').acquire({ timeoutMs: Number.NaN, signal: AbortSignal.timeout(500) })],
      ['quota timeoutMs NaN', () => run.quota('q').take({ timeoutMs: Number.NaN, signal: AbortSignal.timeout(500) })],
      ['barrier pollMs NaN', () => run.barriers.get('ba_1').wait({ pollMs: Number.NaN, timeoutMs: 300 })],
      ['timer pollMs -5', () => run.timers.get('ti_1').wait({ pollMs: -5, timeoutMs: 300 })],
      ['receive waitMs NaN', () => run.mailbox('q').receive({ waitMs: Number.NaN })],
      ['admit waitMs Infinity', () => run.mailbox('q').admit({ waitMs: Infinity })],
      ['consume pollMs NaN', () => run.mailbox('q').consume(() => undefined, { pollMs: Number.NaN, waitMs: 0, signal: AbortSignal.timeout(500) })],
      ['consume waitMs -1', () => run.mailbox('q').consume(() => undefined, { waitMs: -1, signal: AbortSignal.timeout(500) })],
      ['consume shutdownTimeoutMs NaN', () => run.mailbox('q').consume(() => undefined, { shutdownTimeoutMs: Number.NaN, signal: AbortSignal.timeout(500) })],
    ];
    for (const [what, call] of refused) {
      seen = [];
      const err: any = await call().catch((caught) => caught);
      assert.ok(err instanceof ConfigError, `${what}: ${err?.name}: ${err?.message}`);
      assert.match(err.message, /must be a number of milliseconds/, what);
      assert.equal(seen.length, 0, `${what}: nothing sent`);
    }
    rs.close();
  });

  test('events.watch() with types that are not an array of names is ConfigError, not a TypeError from inside', async () => {
    const rs = client();
    for (const types of ['scope.cancelled', [1], { 0: 'x' }]) {
      const err = await rs.events.watch({ types: types as unknown as string[] }).next().catch((caught) => caught);
      assert.ok(err instanceof ConfigError && /types must be an array/.test(err.message), `${JSON.stringify(types)}: ${err?.name}: ${err?.message}`);
    }
    assert.equal(seen.length, 0);
    rs.close();
  });

  test('a bad concurrency or prefetch of consume() is ConfigError: a RunstateError, as every error thrown on purpose', async () => {
    const rs = client();
    const queue = rs.scope('sc_1').mailbox('q');
    for (const options of [{ concurrency: 0 }, { concurrency: 1.5 }, { prefetch: 0 }, { prefetch: 101 }, { concurrency: '2' as unknown as number }]) {
      const err = await queue.consume(() => undefined, options).catch((caught) => caught);
      assert.ok(err instanceof ConfigError && err instanceof RunstateError, `${JSON.stringify(options)}: ${err?.name}`);
    }
    assert.equal(seen.length, 0);
    rs.close();
  });

  test('an HTTP answer is never retried, not even a 503, and the envelope gives class, code, status, requestId', async () => {
    answers.push(json(503, { error: { code: 'UNAVAILABLE', message: 'draining', requestId: 'req_1' } }, { 'retry-after': '1.5' }));
    const err = await client().scopes.create().catch((caught) => caught);
    assert.ok(err instanceof UnavailableError);
    assert.equal(err.message, 'draining');
    assert.equal(err.requestId, 'req_1');
    assert.equal(err.retryAfterMs, 1500);
    assert.equal(seen.length, 1);
  });

  test('the envelope\'s details reach the error; details that are not an object are dropped', async () => {
    const details = { holder: 'agent-a', generation: 3, leaseExpiresAt: '2030-01-01T00:00:30.000Z' };
    answers.push(json(409, { error: { code: 'CLAIM_HELD', message: 'held', details } }));
    const held = await client().scope('sc_1').claim('k').acquire().catch((caught) => caught);
    assert.ok(held instanceof ConflictError);
    assert.deepEqual(held.details, details);
    assert.ok(Object.isFrozen(held.details));
    answers.push(json(409, { error: { code: 'CLAIM_HELD', message: 'held', details: [1, 2] } }));
    const odd = await client().scope('sc_1').claim('k').acquire().catch((caught) => caught);
    assert.deepEqual(odd.details, {});
    assert.deepEqual(mapError('CONFLICT', 409, 'taken', { details: { id: 'pp_1' } }).details, { id: 'pp_1' });
    assert.deepEqual(new RunstateError('X', 0, 'made here').details, {});
  });

  test('retry({ reason }) and reject({ reason }) send it as the nack\'s error; { error } is the same', async () => {
    const delivery = (n: number) => json(200, { message: { id: `msg_${n}`, scopeId: 'sc_1', attempt: 1, payload: null }, token: `t${n}` });
    const mailbox = client().scope('sc_1').mailboxById('mb_1');
    answers.push(delivery(1), json(200, {}), delivery(2), json(200, {}), delivery(3), json(200, {}));
    await (await mailbox.receive({ leaseSeconds: 45 }))!.retry({ reason: 'the upstream API answered 503' });
    await (await mailbox.receive())!.reject({ reason: 'the input names no company' });
    await (await mailbox.receive())!.retry({ error: 'said the old way' });
    assert.equal(JSON.parse(seen[0]!.body).leaseSeconds, 45);
    assert.equal(JSON.parse(seen[2]!.body).leaseSeconds, 30);
    assert.deepEqual([1, 3, 5].map((n) => JSON.parse(seen[n]!.body)), [
      { token: 't1', retry: true, error: 'the upstream API answered 503' },
      { token: 't2', retry: false, error: 'the input names no company' },
      { token: 't3', retry: true, error: 'said the old way' },
    ]);
  });

  test('a 4xx without an envelope is thrown once, as the code its status names, quoting the status and the body', async () => {
    const page = `<html>\n  <head><title>Not here</title></head>${'x'.repeat(500)}`;
    const cases: Array<[number, string, new (...args: any[]) => RunstateError]> = [
      [404, 'NOT_FOUND', NotFoundError],
      [405, 'METHOD_NOT_ALLOWED', RunstateError],
      [400, 'VALIDATION_FAILED', RunstateError],
      [418, 'VALIDATION_FAILED', RunstateError],
      [403, 'FORBIDDEN', AuthenticationError],
    ];
    for (const [status, code, cls] of cases) {
      seen = [];
      answers.push((_seen, res) => {
        res.writeHead(status, { 'content-type': 'text/html' });
        res.end(page);
      });
      const err: any = await client().scope('sc_x').status().catch((caught) => caught);
      assert.ok(err instanceof cls, `${status}: ${err?.name}`);
      assert.equal(err.code, code);
      assert.equal(err.status, status);
      assert.ok(err.message.startsWith(`HTTP ${status} without an error envelope`), err.message);
      assert.ok(err.message.includes('"<html> <head><title>Not here</title></head>xxx') && err.message.endsWith('..."'), err.message);
      assert.equal(isTransient(err), false, `${status} is not an outage`);
      assert.equal(seen.length, 1);
    }
  });

  test('a 502, 503 or 504 (or a 408, 429) without an envelope stays transient', async () => {
    for (const status of [502, 503, 504, 408, 429]) {
      answers.push((_seen, res) => {
        res.writeHead(status, { 'content-type': 'text/plain' });
        res.end('Bad Gateway');
      });
      const err: any = await client().scope('sc_x').status().catch((caught) => caught);
      assert.equal(err.status, status);
      assert.equal(isTransient(err), true, `${status} may pass`);
      assert.ok(err.message.includes('"Bad Gateway"'), err.message);
    }
  });

  test('a caller abort is not retried and rejects with the abort reason', async () => {
    const never: Answer = () => undefined;
    answers.push(never);
    const controller = new AbortController();
    const receiving = client().scope('sc_1').mailboxById('mb_1').receive({ waitMs: 10_000, signal: controller.signal });
    setTimeout(() => controller.abort(new Error('stop now')), 100);
    await assert.rejects(receiving, /stop now/);
    assert.equal(seen.length, 1);
  });

  test('an acquire let finish after its abort is cut 2 s after it when the server does not answer', async () => {
    const never: Answer = () => undefined;
    route = () => never;
    const controller = new AbortController();
    const acquiring = client({ requestTimeoutMs: 30_000, retries: 0 }).scope('sc_1').claim('k').acquire({ signal: controller.signal });
    setTimeout(() => controller.abort(new Error('stop now')), 100);
    const started = performance.now();
    await assert.rejects(acquiring, /stop now/);
    const tookMs = performance.now() - started;
    assert.ok(tookMs >= 1_900 && tookMs < 4_000, `cut 2 s after the abort, not at the request timeout: ${tookMs}`);
  });

  test('a wait: true acquire given a signal tries first without waitMs, and waits out CONCURRENCY_LIMITED there too', async () => {
    const limited = json(429, { error: { code: 'CONCURRENCY_LIMITED', message: 'too many' } });
    const held = json(409, { error: { code: 'CLAIM_HELD', message: 'held' } });
    answers.push(limited, held, json(200, { token: 't', generation: 3, leaseExpiresAt: '2030-01-01T00:00:00.000Z' }));
    const started = performance.now();
    const lease = await client().scope('sc_1').claim('k').acquire({ wait: true, timeoutMs: 5_000, signal: new AbortController().signal });
    assert.equal(lease.generation, 3);
    assert.ok(performance.now() - started >= 750, 'waited about a second after CONCURRENCY_LIMITED');
    assert.deepEqual(seen.map((entry) => JSON.parse(entry.body).waitMs === undefined), [true, false, false], 'no wait on the first try only');
    answers.push(json(200, { released: true }));
    await lease.release();
  });

  test('a wait: true acquire asks the server to park it (waitMs) and keeps its own loop as the fallback', async () => {
    const held = json(409, { error: { code: 'CLAIM_HELD', message: 'held' } });
    answers.push(held, held, json(200, { token: 't', generation: 7, leaseExpiresAt: '2030-01-01T00:00:00.000Z' }));
    const started = performance.now();
    const lease = await client().scope('sc_1').claim('a/b c').acquire({ wait: true, timeoutMs: 5_000, leaseSeconds: 60 });
    const tookMs = performance.now() - started;
    assert.equal(lease.generation, 7);
    assert.equal(seen.length, 3);
    const first = JSON.parse(seen[0]!.body);
    assert.deepEqual(Object.keys(first).sort(), ['holder', 'holderSession', 'key', 'leaseSeconds', 'scopeId', 'waitMs']);
    assert.equal(first.key, 'a/b c');
    assert.ok(first.waitMs > 4_000 && first.waitMs <= 5_000, `waitMs ${first.waitMs} is the time left`);
    assert.match(first.holderSession, /^[0-9a-f]{12}$/);
    assert.ok(tookMs >= 2 * 225 && tookMs < 2_000, `two pauses of ~300 ms, took ${tookMs}`);
    assert.equal(new Set(seen.map((entry) => entry.headers['idempotency-key'])).size, 3, 'each try is a new call');
    answers.push(json(200, { released: true }));
    await lease.release();
    assert.equal(seen[3]!.url, `/v1/spaces/sp/claims/${encodeClaimKey('a/b c')}/release`);
    assert.equal(seen[3]!.url, '/v1/spaces/sp/claims/a%2Fb%20c/release');
  });

  test('wait: false sends no waitMs and throws CLAIM_HELD at once; wait: true gives up with WaitTimeoutError', async () => {
    const held = json(409, { error: { code: 'CLAIM_HELD', message: 'held' } });
    answers.push(held);
    const claim = client().scope('sc_1').claim('k');
    const err = await claim.acquire().catch((caught) => caught);
    assert.ok(err instanceof ConflictError);
    assert.equal(err.code, 'CLAIM_HELD');
    assert.equal(JSON.parse(seen[0]!.body).waitMs, undefined);
    for (let i = 0; i < 10; i += 1) answers.push(held);
    const started = performance.now();
    const timeout = await claim.acquire({ wait: true, timeoutMs: 600 }).catch((caught) => caught);
    const tookMs = performance.now() - started;
    assert.ok(timeout instanceof WaitTimeoutError);
    assert.equal(timeout.code, 'WAIT_TIMEOUT');
    assert.equal(timeout.status, 0);
    assert.ok(tookMs >= 600 && tookMs < 1_200, `gave up at the deadline, took ${tookMs}`);
  });

  test('a settlement rides through transport failures with one idempotency key; a refusal is not tried again', async () => {
    answers.push(json(200, { mailboxes: [{ id: 'mb_1', name: 'q' }] }));
    answers.push(json(200, { token: 'd', message: { id: 'ms_7', payload: null, attempt: 1, scopeId: 'sc_1' } }));
    const mailbox = client({ retries: 1 }).scope('sc_1').mailbox('q');
    const delivery = (await mailbox.receive())!;
    answers.push(drop, drop, drop, json(200, {}));
    await delivery.complete({ payload: 1 });
    assert.equal(delivery.settled, true);
    await delivery.retry(); // settled: nothing more is sent
    const settlements = seen.filter((entry) => entry.url.startsWith('/v1/spaces/sp/messages/ms_7/'));
    assert.deepEqual(settlements.map((entry) => entry.url.split('/').pop()), ['complete', 'complete', 'complete', 'complete']);
    assert.equal(new Set(settlements.map((entry) => entry.headers['idempotency-key'])).size, 1, 'one logical settlement, one key');
    assert.deepEqual(JSON.parse(settlements[3]!.body), { token: 'd', result: { payload: 1 } });

    answers.push(json(200, { token: 'e', message: { id: 'ms_8', payload: null, attempt: 1, scopeId: 'sc_1' } }));
    const other = (await mailbox.receive())!;
    answers.push(json(400, { error: { code: 'VALIDATION_FAILED', message: 'result exceeds 65536 bytes' } }));
    const refused = await other.complete({ payload: 'x' }).catch((err) => err);
    assert.equal(refused.code, 'VALIDATION_FAILED');
    assert.equal(other.settled, false, 'a refused settlement leaves the delivery open');
    assert.equal(seen.filter((entry) => entry.url.startsWith('/v1/spaces/sp/messages/ms_8/')).length, 1);
  });

  test('a release rides through dropped connections and 503s with one idempotency key; a stale one is sent once', async () => {
    const grant = (token: string) => ({ token, generation: 1, leaseExpiresAt: '2030-01-01T00:00:00.000Z' });
    let releases = 0;
    route = ({ url, body }) => {
      if (url.endsWith('/batch')) return json(404, { error: { code: 'NOT_FOUND', message: `no such route: POST ${url}` } });
      if (url.endsWith('/claims')) return json(200, grant(JSON.parse(body).key));
      if (url.endsWith('/claims/k/release')) {
        releases += 1;
        if (releases <= 2) return drop;
        if (releases <= 4) return json(503, { error: { code: 'UNAVAILABLE', message: 'restarting' } });
        return json(200, {});
      }
      if (url.endsWith('/claims/stale/release')) return json(409, { error: { code: 'STALE_CLAIM', message: 'not yours' } });
      return undefined;
    };
    const run = client({ retries: 1 }).scope('sc_1');
    const lease = await run.claim('k').acquire({ leaseSeconds: 30 });
    await lease.release();
    const sent = seen.filter((entry) => entry.url.endsWith('/claims/k/release'));
    assert.equal(sent.length, 5);
    assert.equal(new Set(sent.map((entry) => entry.headers['idempotency-key'])).size, 1, 'one logical release, one key');
    assert.equal(lease.isLost, false);
    const stale = await run.claim('stale').acquire({ leaseSeconds: 30 });
    await stale.release();
    assert.equal(stale.isLost, true);
    assert.equal(seen.filter((entry) => entry.url.endsWith('/claims/stale/release')).length, 1);
  });

  test('once(): the failure recorded for a result over the limit rides through dropped connections with one key', async () => {
    let fails = 0;
    route = ({ method, url }) => {
      if (method === 'PUT' && url.includes('/runs/')) return json(200, { id: 'sc_run', name: 'once-outage' });
      if (url.endsWith('/once/acquire')) return json(200, { state: 'OPEN', token: 'hold', attempts: 0 });
      if (url.endsWith('/once/fail')) {
        fails += 1;
        return fails <= 2 ? drop : json(200, { state: 'OPEN', attempts: 1 });
      }
      return undefined;
    };
    const runs = new RunClient({ apiKey: 'k-1', spaceId: 'sp', baseUrl, run: 'once-outage', worker: 'w', retries: 0 });
    try {
      const huge = runs.once(async function huge(): Promise<string> {
        return 'x'.repeat(70_000);
      });
      const err: any = await huge().catch((caught) => caught);
      assert.equal(err.code, 'RESULT_TOO_LARGE');
      const sent = seen.filter((entry) => entry.url.endsWith('/once/fail'));
      assert.equal(sent.length, 3);
      assert.equal(new Set(sent.map((entry) => entry.headers['idempotency-key'])).size, 1, 'one logical failure, one key');
    } finally {
      runs.client.close();
    }
  });

  test('renewal rides through 503s and 429s until the lease ends by our clock, and stops at once on a refusal', async () => {
    const grant = (token: string) => ({ token, generation: 1, leaseExpiresAt: '2030-01-01T00:00:00.000Z' });
    let flakyRenewals = 0;
    route = ({ url, body }) => {
      // A server without the batch route, as the official one: every call and renewal goes alone.
      if (url.endsWith('/batch')) return json(404, { error: { code: 'NOT_FOUND', message: `no such route: POST ${url}` } });
      if (url.endsWith('/claims')) return json(200, grant(JSON.parse(body).key));
      if (url.endsWith('/claims/down/renew')) return json(503, { error: { code: 'UNAVAILABLE', message: 'restarting' } });
      if (url.endsWith('/claims/stolen/renew')) return json(409, { error: { code: 'STALE_CLAIM', message: 'not yours' } });
      if (url.endsWith('/claims/flaky/renew')) {
        flakyRenewals += 1;
        return flakyRenewals <= 2
          ? json(429, { error: { code: 'RATE_LIMITED', message: 'slow down' } })
          : json(200, { leaseExpiresAt: '2030-01-01T00:00:05.000Z' });
      }
      if (url.endsWith('/release')) return json(200, {});
      return undefined;
    };
    const run = client().scope('sc_1');
    const started = performance.now();
    const [down, stolen, flaky] = await Promise.all(
      ['down', 'stolen', 'flaky'].map((key) =>
        run.claim(key).run(
          async (lease) => {
            await Promise.race([
              new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true })),
              new Promise((resolve) => setTimeout(resolve, 5_500)),
            ]);
            return { lost: lease.isLost, afterMs: performance.now() - started };
          },
          { leaseSeconds: 5 },
        ).catch((err) => err),
      ),
    );
    // Unreachable until the end: lost 4.5 s in (5 s less the 0.5 s margin), the last 503 as the cause.
    assert.ok(down instanceof LeaseLostError);
    const exhausted = down.cause as LeaseLostError;
    assert.equal(exhausted.code, 'LEASE_RENEWALS_EXHAUSTED');
    assert.equal((exhausted.cause as RunstateError).code, 'UNAVAILABLE');
    const downTries = seen.filter((entry) => entry.url.endsWith('/claims/down/renew')).length;
    assert.ok(downTries >= 3, `tried again through the outage: ${downTries}`);
    // Refused by the server: lost at the first renewal, no second try.
    assert.ok(stolen instanceof LeaseLostError);
    assert.equal((stolen.cause as LeaseLostError).code, 'STALE_CLAIM');
    assert.equal(seen.filter((entry) => entry.url.endsWith('/claims/stolen/renew')).length, 1);
    // Two 429s, then through: never lost.
    assert.deepEqual(Object.keys(flaky).sort(), ['afterMs', 'lost']);
    assert.equal(flaky.lost, false);
    assert.ok(flakyRenewals >= 3);
    assert.deepEqual(JSON.parse(seen.find((entry) => entry.url.endsWith('/claims/flaky/renew'))!.body), { token: 'flaky', leaseSeconds: 5 });
  });

  test('consume(): a completion that cannot get through before the lease ends goes to onError and a warning', async () => {
    const delivery = { token: 'd', message: { id: 'ms_1', payload: { n: 1 }, attempt: 1, scopeId: 'sc_1' } };
    let delivered = false;
    route = ({ url }) => {
      if (url.endsWith('/mailboxes')) return json(200, { mailboxes: [{ id: 'mb_1', name: 'q' }] });
      if (url.endsWith('/recv')) {
        if (delivered) return (_entry, res) => void setTimeout(() => { res.writeHead(204); res.end(); }, 100);
        delivered = true;
        return json(200, delivery);
      }
      if (url.includes('/messages/ms_1/')) return json(503, { error: { code: 'UNAVAILABLE', message: 'down' } });
      if (url.includes('/scopes/') || url.includes('/watch')) return json(200, { effective: 'ACTIVE', events: [], nextCursor: '1' });
      return undefined;
    };
    const controller = new AbortController();
    const errors: Array<[unknown, string]> = [];
    const warnings: Array<{ code?: string }> = [];
    const onWarning = (warning: Error) => void warnings.push(warning as { code?: string });
    process.on('warning', onWarning);
    const started = performance.now();
    let reported!: () => void;
    const wasReported = new Promise<void>((resolve) => (reported = resolve));
    const consuming = client().scope('sc_1').mailbox('q').consume(async () => 'done', {
      leaseSeconds: 5,
      waitMs: 100,
      signal: controller.signal,
      onError: (err, handled) => {
        errors.push([err, handled.id]);
        reported();
      },
    });
    await wasReported;
    const tookMs = performance.now() - started;
    controller.abort();
    await consuming;
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    assert.equal(errors.length, 1);
    assert.ok(errors[0]![0] instanceof UnavailableError);
    assert.equal(errors[0]![1], 'ms_1');
    assert.ok(tookMs >= 4_000 && tookMs < 6_000, `tried until the lease's end: ${tookMs}`);
    const completes = seen.filter((entry) => entry.url.endsWith('/messages/ms_1/complete'));
    assert.ok(completes.length >= 3, `tried again: ${completes.length}`);
    assert.equal(new Set(completes.map((entry) => entry.headers['idempotency-key'])).size, 1);
    assert.ok(warnings.some((warning) => warning.code === 'RUNSTATE_SETTLEMENT_FAILED'));
  });
});

describe('errors and configuration', () => {
  test('the public surface is exactly these names', async () => {
    const sdk = await import('runstate-sdk');
    assert.deepEqual(Object.keys(sdk).sort(), [
      'AuthenticationError', 'BarrierHandle', 'BarriersAPI', 'BudgetExceededError', 'BudgetRef', 'BudgetReservation',
      'BudgetsAPI', 'ClaimLease', 'ClaimRef', 'ConfigError', 'ConflictError', 'CursorExpiredError', 'DEFAULT_BASE_URL',
      'Delivery', 'DiagnosticsAPI', 'EventsAPI', 'GroupHandle', 'GroupsAPI', 'HeldLease', 'LeaseLostError', 'MailboxRef',
      'MailboxesAPI', 'NotFoundError', 'OnceFailedError', 'PoolLease', 'PoolRef', 'PoolsAPI', 'QuotaRef', 'QuotasAPI',
      'RateLimitError', 'RunClient', 'Runstate', 'RunstateError', 'STATUS_BY_CODE', 'ScopeCancelledError', 'ScopeHandle',
      'ScopesAPI', 'TERMINAL_STATES', 'TaskFailedError', 'TaskTicket', 'TimerHandle', 'TimersAPI', 'UnavailableError',
      'VERSION', 'WARNING_TYPE', 'WaitTimeoutError', 'WorkLimitsAPI', 'budget', 'canonicalJson', 'child', 'configure', 'context',
      'decimalToMinor', 'defaultRun', 'encodeClaimKey', 'events', 'finish', 'isTransient', 'limit', 'mapError',
      'minorToDecimal', 'once', 'parseDuration', 'parsePer', 'partitionOf', 'queue', 'resolveConfig', 'run', 'runId', 'serve', 'setup',
      'sleep', 'slots', 'status', 'stop', 'take', 'toMinor', 'together', 'workKey',
]);
  });

  test('each code maps to its class; every class derives directly from RunstateError but BudgetExceededError', () => {
    const cases: Array<[string, Function]> = [
      ['UNAUTHENTICATED', AuthenticationError],
      ['FORBIDDEN', AuthenticationError],
      ['NOT_FOUND', NotFoundError],
      ['CLAIM_HELD', ConflictError],
      ['IDEMPOTENCY_CONFLICT', ConflictError],
      ['SCOPE_CANCELLED', ScopeCancelledError],
      ['STALE_CLAIM', LeaseLostError],
      ['LEASE_RENEWALS_EXHAUSTED', LeaseLostError],
      ['CONCURRENCY_LIMITED', RateLimitError],
      ['UNAVAILABLE', UnavailableError],
    ];
    for (const [code, cls] of cases) {
      const err = mapError(code, 0, 'x');
      assert.ok(err instanceof cls, code);
      assert.equal(Object.getPrototypeOf(cls.prototype), RunstateError.prototype, `${cls.name} is one level down`);
      assert.equal(err.name, cls.name);
    }
    assert.ok(!(mapError('STALE_CLAIM', 409, 'x') instanceof ConflictError));
    const budget = mapError('INSUFFICIENT_BUDGET', 409, 'x');
    assert.equal(budget.name, 'BudgetExceededError');
    assert.ok(budget instanceof ConflictError, 'a ConflictError too, as it was');
    assert.equal(isTransient(mapError('UNAVAILABLE', 503, 'x')), true);
    assert.equal(isTransient(mapError('RATE_LIMITED', 429, 'x')), true);
    assert.equal(isTransient(mapError('INTERNAL', 500, 'x')), true);
    assert.equal(isTransient(mapError('STALE_CLAIM', 409, 'x')), false);
    assert.equal(isTransient(mapError('SCOPE_CANCELLED', 409, 'x')), false);
    const unknown = mapError('SOMETHING_NEW', 418, 'x');
    assert.equal(unknown.constructor, RunstateError);
    assert.equal(unknown.code, 'SOMETHING_NEW');
    assert.equal(unknown.status, 418);
    assert.equal(mapError('CLAIM_HELD', 0, 'x').status, 409, 'status 0 takes the code status');
  });

  test('a handle made with an id that cannot stand in a path is VALIDATION_FAILED at once, before anything is sent', () => {
    // The id stands in the path as it is: rs.scope('') read GET /scopes/, the list of scopes, and an id
    // with a / named another route.
    const rs = new Runstate({ baseUrl: 'http://127.0.0.1:9', apiKey: 'k', spaceId: 's' });
    const run = rs.scope('sc_1');
    const makers: Record<string, (id: string) => unknown> = {
      scope: (id) => rs.scope(id),
      mailboxById: (id) => run.mailboxById(id),
      poolById: (id) => run.poolById(id),
      quotaById: (id) => run.quotaById(id),
      budgetById: (id) => run.budgetById(id),
      barrier: (id) => run.barriers.get(id),
      timer: (id) => run.timers.get(id),
      group: (id) => run.groups.byId(id),
    };
    for (const [kind, make] of Object.entries(makers)) {
      for (const bad of ['', '.', '..', 'a/b', 'sc_1?x=1', 'sc_1#x', 'sc 1', 'sc_1%2F', 'a\\b', '\n']) {
        assert.throws(
          () => make(bad),
          (err: unknown) => err instanceof RunstateError && err.code === 'VALIDATION_FAILED' && /is not an id/.test(err.message),
          `${kind}(${JSON.stringify(bad)})`,
        );
      }
      assert.doesNotThrow(() => make('ab_0123456789abcdef'), kind);
    }
  });

  test('configuration comes from the options, then RUNSTATE_*; a missing key or space is ConfigError', () => {
    const saved = { ...process.env };
    try {
      process.env.RUNSTATE_API_KEY = 'env-key';
      process.env.RUNSTATE_SPACE_ID = 'env-space';
      delete process.env.RUNSTATE_BASE_URL;
      const fromEnv = new Runstate();
      assert.equal(fromEnv.spaceId, 'env-space');
      assert.equal(fromEnv.baseUrl, 'http://localhost:8080');
      assert.match(fromEnv.holder, /^worker-[0-9a-f]{6}$/);
      assert.notEqual(new Runstate().session, fromEnv.session);
      process.env.RUNSTATE_BASE_URL = 'http://example.test:9/';
      assert.equal(new Runstate({ spaceId: 'mine' }).spaceId, 'mine');
      assert.equal(new Runstate().baseUrl, 'http://example.test:9');
      const view = fromEnv.withSpace('other');
      assert.equal(view.spaceId, 'other');
      assert.throws(() => new Runstate({ spaceId: 'a/b' }), ConfigError, 'a space id with a / in the options');
      for (const spaceId of ['', 'a/b', undefined]) {
        assert.throws(() => fromEnv.withSpace(spaceId as unknown as string), ConfigError, `withSpace(${JSON.stringify(spaceId)})`);
      }
      assert.equal(view.session, fromEnv.session);
      delete process.env.RUNSTATE_API_KEY;
      assert.throws(() => new Runstate(), (err: unknown) => err instanceof ConfigError && err.code === 'CONFIG_ERROR' && err.status === 0);
      process.env.RUNSTATE_API_KEY = 'k';
      delete process.env.RUNSTATE_SPACE_ID;
      assert.throws(() => new Runstate(), /RUNSTATE_SPACE_ID/);
      process.env.RUNSTATE_SPACE_ID = 'sp';
      for (const baseUrl of ['localhost:8080', 'not a url', 'ftp://example.test/']) {
        assert.throws(() => new Runstate({ baseUrl }), (err: unknown) => err instanceof ConfigError && /baseUrl/.test(err.message), baseUrl);
      }
      process.env.RUNSTATE_BASE_URL = '127.0.0.1:8080';
      assert.throws(() => new Runstate(), ConfigError, 'from the environment too');
    } finally {
      for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
      Object.assign(process.env, saved);
    }
  });

  test('claim keys are percent-encoded with only unreserved characters left as they are', () => {
    assert.equal(encodeClaimKey('company:acme'), 'company%3Aacme');
    assert.equal(encodeClaimKey("a/b c%!'()*~._-"), "a%2Fb%20c%25%21%27%28%29%2A~._-");
    assert.equal(encodeClaimKey('é'), '%C3%A9');
  });
});
