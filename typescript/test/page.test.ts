/**
 * Every TypeScript example of the product page (`seed-runstate-work-once.md`) runs as printed,
 * each in its own Node process, against a real `runstate serve`: the claim with `run()`, waiting
 * for a held key, `tryAcquire()` free and busy, the fencing-token loop, two planners sharing one
 * task, a `consume()` worker stopped by SIGTERM, re-attaching to the task by id, `send()` with a
 * work key (and its replay), and `receive()`.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { buildPrograms, readPage, runProgram, startProgram, PAGE_PATH } from './support/page.js';
import { Server } from './support/server.js';

const page = readPage();
// CI and `make test` run beside the page; elsewhere (a lone copy of this folder) say so and skip.
const skip = page === null ? `the product page is not at ${PAGE_PATH} (set RUNSTATE_PAGE)` : false;
if (page === null && process.env.CI) throw new Error(`the product page is missing: ${PAGE_PATH}`);

describe('the product page, verbatim', { skip }, () => {
  let server: Server;
  let programs: Map<string, string>;
  let env: Record<string, string>;
  let scopeId: string;
  let ticketId: string;

  before(async () => {
    programs = await buildPrograms(page!);
    server = await Server.start();
    scopeId = (await server.api('POST', '/scopes', { name: 'page' })).body.id;
    env = server.clientEnv({ RUNSTATE_SCOPE_ID: scopeId });
  });

  after(async () => {
    await server?.stop();
  });

  const program = (name: string) => programs.get(name)!;

  test('claim run(): the function runs under a fresh generation and its value comes back', async () => {
    const first = await runProgram(program('claim-run'), env);
    assert.match(first.stdout, /^researching acme as generation 1$/m);
    assert.deepEqual(first.result.report, { company: 'acme', summary: 'acme makes anvils' });
    const second = await runProgram(program('claim-run'), env);
    assert.match(second.stdout, /^researching acme as generation 2$/m, 'the key was released, and a new owner is a new generation');
  });

  test('claim run() with wait: true waits for the holder to let go', async () => {
    const held = await server.api('POST', '/claims', {
      key: 'company:acme', scopeId, holder: 'someone-else', holderSession: 'abcdefabcdef', leaseSeconds: 30,
    });
    assert.equal(held.status, 200);
    const waiting = startProgram(program('claim-run'), env);
    await new Promise((resolve) => setTimeout(resolve, 800));
    assert.equal(waiting.proc.exitCode, null, 'still waiting while the key is held');
    assert.doesNotMatch(waiting.stdout, /researching/);
    const released = await server.api('POST', `/claims/${encodeURIComponent('company:acme')}/release`, { token: held.body.token });
    assert.equal(released.status, 200);
    const run = await waiting.done;
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^researching acme as generation 4$/m);
  });

  test('tryAcquire(): acquires and releases a free key, reports busy without throwing', async () => {
    const free = await runProgram(program('try-acquire'), env);
    assert.equal(free.result.kind, 'acquired');
    assert.doesNotMatch(free.stdout, /another agent/);
    const held = await server.api('POST', '/claims', {
      key: 'company:acme', scopeId, holder: 'someone-else', holderSession: 'abcdefabcdef', leaseSeconds: 30,
    });
    assert.equal(held.status, 200, 'the example released its lease');
    const busy = await runProgram(program('try-acquire'), env);
    assert.equal(busy.result.kind, 'busy');
    assert.match(busy.stdout, /^another agent is already on acme$/m);
    await server.api('POST', `/claims/${encodeURIComponent('company:acme')}/release`, { token: held.body.token });
  });

  test('the fencing-token loop writes every section with the lease token', async () => {
    const run = await runProgram(program('lease-lost'), env);
    const written = run.result.written as Array<{ section: string; fencingToken: string; aborted: boolean }>;
    assert.deepEqual(written.map((entry) => entry.section), ['intro', 'findings', 'summary']);
    assert.equal(new Set(written.map((entry) => entry.fencingToken)).size, 1);
    assert.ok(written[0]!.fencingToken.length > 0);
    assert.ok(written.every((entry) => !entry.aborted));
  });

  test('two planners share one task; a consume() worker does it; SIGTERM drains and stops it', async () => {
    const planners = [startProgram(program('shared-task'), env), startProgram(program('shared-task'), env)];
    await new Promise((resolve) => setTimeout(resolve, 300));
    const worker = startProgram(program('consume'), env);
    const [one, two] = await Promise.all(planners.map((planner) => planner.done));
    for (const planner of [one!, two!]) {
      assert.equal(planner.code, 0, planner.stderr);
      assert.match(planner.stdout, /^report \{ company: 'acme', summary: 'acme makes anvils' \}$/m);
      assert.deepEqual(planner.result.outcome, {
        state: 'SUCCEEDED', outcome: { company: 'acme', summary: 'acme makes anvils' }, reason: null,
      });
    }
    assert.equal(one!.result.ticketId, two!.result.ticketId, 'the same key and input give one task');
    ticketId = one!.result.ticketId;
    assert.equal(worker.proc.exitCode, null, 'the worker keeps polling');
    worker.proc.kill('SIGTERM');
    const stopped = await worker.done;
    assert.equal(stopped.code, 0, stopped.stderr);
    assert.deepEqual(stopped.result, { stopped: true });
    assert.doesNotMatch(stopped.stderr, /failed/);
    const view = (await server.api('GET', `/tasks/${ticketId}`)).body;
    assert.deepEqual(view.subscribers, ['planner-7']);
  });

  test('a restarted planner re-attaches by task id and reads the recorded result', async () => {
    const run = await runProgram(program('restart'), { ...env, TEST_RUN_ID: scopeId, TEST_TASK_ID: ticketId });
    assert.match(run.stdout, /^SUCCEEDED 1 \{ company: 'acme', summary: 'acme makes anvils' \}$/m);
    assert.equal(run.result.view.id, ticketId);
    assert.equal(run.result.view.tombstoned, false);
  });

  test('send() with a work key, then its replay; receive() renews and completes it; then the queue is empty', async () => {
    const first = await runProgram(program('send'), env);
    assert.equal(first.result.sent.replay, false);
    assert.match(first.stdout, new RegExp(`^${first.result.sent.id} false$`, 'm'));
    const again = await runProgram(program('send'), env);
    assert.equal(again.result.sent.id, first.result.sent.id, 'a duplicate work key returns the original message');
    assert.match(again.stdout, new RegExp(`^${first.result.sent.id} true$`, 'm'));

    const received = await runProgram(program('receive'), env);
    assert.deepEqual(received.result.delivery, { id: first.result.sent.id, attempt: 1, data: { company: 'acme' }, settled: true });
    const empty = await runProgram(program('receive'), env);
    assert.equal(empty.result.delivery, null);
  });

  test("the package README's example runs too", async () => {
    const run = await runProgram(program('package-readme'), env);
    assert.match(run.stdout, /^researching acme as generation 1$/m);
    assert.deepEqual(run.result.report, { company: 'acme', summary: 'acme makes anvils' });
    assert.notEqual(run.result.scopeId, scopeId, 'in a run of its own');
  });
});
