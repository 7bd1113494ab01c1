/**
 * Requests to their partition's leader (`cluster.ts`), against two small local HTTP servers: n0
 * (the configured URL) passes requests on and serves the map; n1 leads partition 2. The client
 * reads the map only when an answer says it was passed on, then sends each request of a space to
 * its leader, and back through the configured URL when the leader cannot be reached or answers 503.
 */

import assert from 'node:assert/strict';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';

import { Runstate, partitionOf } from 'runstate-sdk';

interface Node {
  server: HttpServer;
  url: string;
  seen: string[];
  answer: (path: string) => { status: number; body: unknown; headers?: Record<string, string> };
}

async function node(): Promise<Node> {
  const made: Node = { server: undefined as unknown as HttpServer, url: '', seen: [], answer: () => ({ status: 200, body: {} }) };
  made.server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      made.seen.push(`${req.method} ${req.url}`);
      const { status, body, headers = {} } = made.answer(req.url!);
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => made.server.listen(0, '127.0.0.1', resolve));
  made.url = `http://127.0.0.1:${(made.server.address() as AddressInfo).port}`;
  return made;
}

async function close(made: Node): Promise<void> {
  made.server.closeAllConnections();
  await new Promise((resolve) => made.server.close(resolve));
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('cluster routing', () => {
  let n0: Node;
  let n1: Node;
  let maps: number;
  // space-0 is in partition 2 of 4 (led by n1), space-1 in partition 4 (led by n0).
  const map = () => ({
    cluster: 'c', node: 'n0', partitions: 4, layout: 'crc32', nodes: [],
    map: [
      { partition: 1, leader: { node: 'n0', url: n0.url, epoch: 1 } },
      { partition: 2, leader: { node: 'n1', url: n1.url, epoch: 1 } },
      { partition: 4, leader: { node: 'n0', url: n0.url, epoch: 1 } },
    ],
  });

  before(async () => {
    n0 = await node();
    n1 = await node();
  });

  after(async () => {
    await close(n0);
    await close(n1);
  });

  beforeEach(() => {
    n0.seen = [];
    n1.seen = [];
    maps = 0;
    n0.answer = (path) => {
      if (path === '/v1/cluster') {
        maps += 1;
        return { status: 200, body: map() };
      }
      return { status: 200, body: { id: 'via-n0' }, headers: { 'x-runstate-forwarded-by': 'n0' } };
    };
    n1.answer = () => ({ status: 200, body: { id: 'via-n1' } });
  });

  test('the hash is the server’s: CRC-32 of the UTF-8 id, mod the partitions, plus one', () => {
    // As Python's `1 + zlib.crc32(id.encode()) % partitions`, for 1, 3, 4 and 16 partitions.
    const expected: Record<string, number[]> = {
      default: [1, 2, 4, 16], research: [1, 3, 3, 3], 'team-7': [1, 3, 1, 13], 'é': [1, 3, 3, 15],
      'space-0': [1, 1, 2, 2], 'space-1': [1, 1, 4, 8],
    };
    for (const [space, partitions] of Object.entries(expected)) {
      assert.deepEqual([1, 3, 4, 16].map((count) => partitionOf(space, count)), partitions, space);
    }
  });

  test('a single node is never asked for the map', async () => {
    n0.answer = () => ({ status: 200, body: { id: 'sc_1' } });
    const rs = new Runstate({ apiKey: 'k', spaceId: 'space-0', baseUrl: n0.url });
    await rs.scope('sc_1').status();
    await rs.scope('sc_1').status();
    await pause(20);
    assert.deepEqual(n0.seen, ['GET /v1/spaces/space-0/scopes/sc_1', 'GET /v1/spaces/space-0/scopes/sc_1']);
    await rs.close();
  });

  test('after a passed-on answer each space goes to its leader, and back through n0 when it is down', async () => {
    const rs = new Runstate({ apiKey: 'k', spaceId: 'space-0', baseUrl: n0.url });
    const other = rs.withSpace('space-1');
    assert.equal((await rs.scope('a').status()).id, 'via-n0'); // passed on by n0
    await pause(50);
    assert.equal(maps, 1);
    assert.equal((await rs.scope('b').status()).id, 'via-n1');
    await other.scope('c').status(); // partition 4: led by n0 itself
    assert.deepEqual(n1.seen, ['GET /v1/spaces/space-0/scopes/b']);
    assert.ok(n0.seen.includes('GET /v1/spaces/space-1/scopes/c'));
    // n1 answers 503 (it stopped leading): sent again at once through n0, the map read again.
    await pause(1000);
    n1.answer = () => ({ status: 503, body: { error: { code: 'UNAVAILABLE', message: 'not leading' } } });
    assert.equal((await rs.scope('d').status()).id, 'via-n0');
    await pause(50);
    assert.equal(maps, 2);
    // n1 cannot be reached: through n0 at once, and n1 is left alone for a while.
    const port = new URL(n1.url).port;
    await close(n1);
    assert.equal((await rs.scope('e').status()).id, 'via-n0');
    n1 = await node();
    await new Promise<void>((resolve) => n1.server.close(() => resolve()));
    await new Promise<void>((resolve) => n1.server.listen(Number(port), '127.0.0.1', resolve));
    n1.url = `http://127.0.0.1:${port}`;
    n1.answer = () => ({ status: 200, body: { id: 'via-n1' } });
    assert.equal((await rs.scope('f').status()).id, 'via-n0'); // (still left alone)
    assert.deepEqual(n1.seen, []);
    await pause(2100);
    assert.equal((await rs.scope('g').status()).id, 'via-n1');
    await rs.close();
  });
});
