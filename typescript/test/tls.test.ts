/**
 * TLS: a server started with a self-signed certificate made here (`--certfile`/`--keyfile`); the
 * client trusts it through `caBundle` (or `RUNSTATE_CA_BUNDLE`), and without one the certificate is
 * refused.
 */

import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Runstate, UnavailableError } from 'runstate-sdk';

import { runstateBin } from './support/server.js';

describe('tls', () => {
  let folder: string;
  let proc: ChildProcess;
  let baseUrl: string;
  const apiKey = `ts-tls-${Math.random().toString(16).slice(2)}`;

  before(async () => {
    folder = await mkdtemp(join(tmpdir(), 'runstate-tls-'));
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', '/CN=runstate test',
      '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-keyout', join(folder, 'key.pem'), '-out', join(folder, 'cert.pem'),
    ], { stdio: 'ignore' });
    const env: Record<string, string> = {};
    for (const [name, value] of Object.entries(process.env)) {
      if (value !== undefined && !name.startsWith('RUNSTATE_')) env[name] = value;
    }
    Object.assign(env, { RUNSTATE_SERVER_API_KEY: apiKey, RUNSTATE_SERVER_SPACE_ID: 'default', PYTHONUNBUFFERED: '1' });
    proc = spawn(runstateBin(), ['serve', '--host', '127.0.0.1', '--port', '0', '--certfile', join(folder, 'cert.pem'),
      '--keyfile', join(folder, 'key.pem')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    baseUrl = await new Promise<string>((resolve, reject) => {
      const lines: string[] = [];
      const timer = setTimeout(() => reject(new Error(`server did not start:\n${lines.join('\n')}`)), 30_000);
      const onData = (chunk: Buffer) => {
        for (const line of chunk.toString('utf8').split('\n')) {
          lines.push(line);
          const match = /runstate: serving on (https:\/\/\S+)/.exec(line);
          if (match) {
            clearTimeout(timer);
            resolve(match[1]!);
          }
        }
      };
      proc.stdout!.on('data', onData);
      proc.stderr!.on('data', onData);
    });
  });

  after(async () => {
    if (proc && proc.exitCode === null) {
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      proc.kill('SIGTERM');
      await exited;
    }
    await rm(folder, { recursive: true, force: true });
  });

  test('the client trusts the server through caBundle', async () => {
    const rs = new Runstate({ apiKey, spaceId: 'default', baseUrl, caBundle: join(folder, 'cert.pem') });
    try {
      let run;
      for (let tries = 0; ; tries += 1) {
        try {
          run = await rs.scopes.create({ name: 'over-tls' });
          break;
        } catch (err) {
          if (tries > 50 || !(err instanceof UnavailableError)) throw err;  // still recovering
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
      const lease = await run.claim('.').acquire({ leaseSeconds: 10 });  // a dot key, over https too
      await lease.renew();
      await lease.release();
    } finally {
      rs.close();
    }
  });

  test('RUNSTATE_CA_BUNDLE gives the same trust', async () => {
    process.env.RUNSTATE_CA_BUNDLE = join(folder, 'cert.pem');
    const rs = new Runstate({ apiKey, spaceId: 'default', baseUrl });
    try {
      assert.match((await rs.scopes.create()).id, /^sc_/);
    } finally {
      delete process.env.RUNSTATE_CA_BUNDLE;
      rs.close();
    }
  });

  test('without a bundle the self-signed certificate is refused', async () => {
    const rs = new Runstate({ apiKey, spaceId: 'default', baseUrl, retries: 0 });
    try {
      await assert.rejects(rs.scopes.create(), (err) => err instanceof UnavailableError);
    } finally {
      rs.close();
    }
  });
});
