/**
 * The run API shares work with the official Python client 0.3.0, against a real server: a job a
 * Python producer submits to `queue("review")` is done by a TypeScript `serve()` and its result
 * comes back to Python; a `once` result recorded by TypeScript is what a Python `@runstate.once`
 * of the same name and arguments returns, without running. The official client is installed
 * once into the folder the Python suite uses (`tests/servers.py`, `official_client_dir`), never
 * into the virtual environment, and run in its own process.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { RunClient } from 'runstate-sdk';

import { startProgram } from './support/page.js';
import { REPO_DIR, Server } from './support/server.js';

const run = promisify(execFile);
const WORKER = fileURLToPath(new URL('./support/queue-worker.js', import.meta.url));
const VENV_PYTHON = join(REPO_DIR, '.venv', 'bin', 'python');
const CACHE = join(REPO_DIR, '.pytest_cache', 'd', 'official-client');

/** The official 0.3.0 client's folder and the interpreter to run it with (not the venv's). */
async function officialClient(): Promise<{ dir: string; python: string }> {
  const script = [
    'import sys, pathlib',
    'from tests.servers import OFFICIAL_SDK_030, official_client_dir',
    `cache = pathlib.Path(${JSON.stringify(CACHE)}); cache.mkdir(parents=True, exist_ok=True)`,
    'print(official_client_dir(cache, OFFICIAL_SDK_030))',
    "print(getattr(sys, '_base_executable', None) or sys.executable)",
  ].join('\n');
  const { stdout } = await run(VENV_PYTHON, ['-c', script], { cwd: REPO_DIR, timeout: 300_000 });
  const [dir, python] = stdout.trim().split('\n') as [string, string];
  return { dir, python };
}

describe('sharing work with the official Python client 0.3.0', () => {
  let server: Server;
  let official: { dir: string; python: string };

  before(async () => {
    official = await officialClient();
    server = await Server.start();
  });

  after(async () => {
    await server?.stop();
  });

  async function python(script: string, runName: string): Promise<any> {
    const preamble = `import json, runstate\nassert runstate.__file__.startswith(${JSON.stringify(official.dir)}), runstate.__file__\n`;
    const env = { PATH: process.env.PATH ?? '', PYTHONPATH: official.dir, RUNSTATE_API_KEY: server.apiKey, RUNSTATE_SPACE_ID: server.spaceId, RUNSTATE_BASE_URL: server.baseUrl, RUNSTATE_RUN: runName };
    const { stdout } = await run(official.python, ['-c', preamble + script], { env, timeout: 120_000 });
    return JSON.parse(stdout.trim().split('\n').pop()!);
  }

  test('the official client is the one installed for the suites', () => {
    assert.ok(existsSync(join(official.dir, 'runstate', '__init__.py')));
  });

  test('a Python producer\'s job is done by a TypeScript serve(), and its result goes back', async () => {
    const worker = startProgram(WORKER, server.clientEnv({ RUNSTATE_RUN: 'crosslang-queue' }), 120_000);
    try {
      const result = await python('review = runstate.queue("review")\nprint(json.dumps(review({"doc": "py-1", "score": 0.7})))', 'crosslang-queue');
      assert.deepEqual(result, { doc: 'py-1', score: 0.7, attempt: 1 });
      assert.match(worker.stdout, /^JOB py-1 attempt=1$/m);
    } finally {
      worker.proc.kill('SIGTERM');
      await worker.done;
    }
  });

  test('a once result recorded by TypeScript is what Python\'s @runstate.once returns, without running', async () => {
    const client = new RunClient({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, run: 'crosslang-once' });
    try {
      const research = client.once(async (company: string) => ({ company, by: 'typescript' }), { name: 'research' });
      assert.deepEqual(await research('acme'), { company: 'acme', by: 'typescript' });
      const script = [
        '@runstate.once',
        'def research(company):',
        '    raise RuntimeError("ran again")',
        'print(json.dumps(research("acme")))',
      ].join('\n');
      assert.deepEqual(await python(script, 'crosslang-once'), { company: 'acme', by: 'typescript' });
    } finally {
      client.client.close();
    }
  });
});
