/**
 * A request whose body is held up on the way: a real `runstate serve` with a short body timeout
 * answers it 408 `REQUEST_TIMEOUT` and closes the connection. Nothing was applied, so the same
 * request may well be answered otherwise a moment later: the SDK takes it as an `UnavailableError`
 * (as the Python SDK does), and a lease's renewal rides through it instead of losing the lease.
 *
 * Between the client and the server, a TCP relay that passes everything on at once, but for the
 * first request whose line names `stallPath`: its head goes on, its body only after the server gave
 * up on it.
 */

import assert from 'node:assert/strict';
import { createServer, connect, type Server as NetServer, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';

import { Runstate, UnavailableError, isTransient, mapError } from 'runstate-sdk';

import { Server } from './support/server.js';

const BODY_TIMEOUT_S = 0.5;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

class StallingRelay {
  readonly #server: NetServer;
  readonly #sockets = new Set<Socket>();
  /** A request line containing this has its body held back once. */
  stallPath: string | null = null;
  stalled = 0;

  private constructor(server: NetServer) {
    this.#server = server;
  }

  static async start(target: URL): Promise<StallingRelay> {
    const relay: StallingRelay = new StallingRelay(
      createServer((client) => {
        const upstream = connect(Number(target.port), target.hostname);
        relay.#sockets.add(client).add(upstream);
        upstream.on('data', (chunk) => client.write(chunk));
        upstream.on('close', () => client.destroy());
        client.on('close', () => upstream.destroy());
        upstream.on('error', () => client.destroy());
        client.on('error', () => upstream.destroy());
        client.on('data', (chunk: Buffer) => {
          const text = chunk.toString('latin1');
          const path = relay.stallPath;
          const headEnd = text.indexOf('\r\n\r\n');
          const line = text.slice(0, text.indexOf('\r\n'));
          if (path !== null && headEnd >= 0 && line.includes(path)) {
            relay.stallPath = null;
            relay.stalled += 1;
            upstream.write(chunk.subarray(0, headEnd + 4)); // the head now; the body never comes in time
            return;
          }
          upstream.write(chunk);
        });
      }),
    );
    await new Promise<void>((resolve) => relay.#server.listen(0, '127.0.0.1', resolve));
    return relay;
  }

  get baseUrl(): string {
    const address = this.#server.address();
    if (address === null || typeof address === 'string') throw new Error('not listening');
    return `http://127.0.0.1:${address.port}`;
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}

describe('a request body held up on the way (408 REQUEST_TIMEOUT)', () => {
  let server: Server;
  let relay: StallingRelay;
  let rs: Runstate;

  before(async () => {
    server = await Server.start({ memory: true, args: ['--body-timeout-s', String(BODY_TIMEOUT_S)] });
    relay = await StallingRelay.start(new URL(server.baseUrl));
    rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: relay.baseUrl, holder: 'stalled' });
  });

  after(async () => {
    rs?.close();
    await relay?.close();
    await server?.stop();
  });

  test('the answer is an UnavailableError, transient, with the status the server sent', async () => {
    const run = await rs.scopes.create({ name: 'stalled-answer' });
    relay.stalled = 0;
    relay.stallPath = '/claims';
    const err = await run.claim('k').acquire().catch((caught: unknown) => caught);
    assert.equal(relay.stalled, 1);
    assert.ok(err instanceof UnavailableError, `an UnavailableError, not ${String(err)}`);
    assert.equal(err.code, 'REQUEST_TIMEOUT');
    assert.equal(err.status, 408);
    assert.equal(isTransient(err), true);
    assert.equal(mapError('REQUEST_TIMEOUT', 0, 'x').status, 408, 'status 0 takes the code status');
    // Nothing was applied: the same claim is free to take.
    const lease = await run.claim('k').acquire();
    await lease.release();
  });

  test('a renewal answered 408 is tried again: the lease is kept', async () => {
    const run = await rs.scopes.create({ name: 'stalled-renewal' });
    relay.stalled = 0;
    relay.stallPath = '/claims/kept/renew';
    const outcome = await run.claim('kept').run(
      async (lease) => {
        // A 5 s lease renews every ~1.7 s: the first renewal stalls, the next try gets through.
        await sleep(3_500);
        return { lost: lease.isLost, reason: lease.signal.reason === undefined ? null : String(lease.signal.reason) };
      },
      { leaseSeconds: 5 },
    );
    assert.equal(relay.stalled, 1, 'a renewal was held up');
    assert.deepEqual(outcome, { lost: false, reason: null });
  });
});
