/**
 * The published shape: `npm pack` gives a tarball that installs offline into an empty project (the
 * package has no runtime dependencies), holds the compiled code, its type declarations and the
 * README and nothing else, and runs the product page's claim example unchanged there, type-checked
 * against the installed declarations.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import { EXAMPLES, PAGE_PATH, compileIn, examplesByName, pagePrelude, readPage, runProgram } from './support/page.js';
import { PACKAGE_DIR, Server } from './support/server.js';

const run = promisify(execFile);
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const page = readPage();
const skip = page === null ? `the product page is not at ${PAGE_PATH} (set RUNSTATE_PAGE)` : false;

describe('npm pack', () => {
  let project: string;
  let tarball: string;

  before(async () => {
    project = await mkdtemp(join(tmpdir(), 'runstate-ts-consumer-'));
    const packed = await run(NPM, ['pack', '--json', '--pack-destination', project], { cwd: PACKAGE_DIR });
    const [info] = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
    tarball = join(project, info!.filename);
    await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    await run(NPM, ['install', '--offline', '--no-audit', '--no-fund', tarball], { cwd: project });
  });

  after(async () => {
    await rm(project, { recursive: true, force: true });
  });

  test('the tarball installs offline and holds the built ESM code, its declarations and the README only', async () => {
    const installed = join(project, 'node_modules', 'runstate-sdk');
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
    assert.equal(manifest.name, 'runstate-sdk');
    assert.equal(manifest.type, 'module');
    assert.deepEqual(manifest.exports['.'], { types: './dist/index.d.ts', import: './dist/index.js' });
    assert.equal(manifest.dependencies, undefined, 'no runtime dependencies');
    assert.ok(existsSync(join(installed, 'dist', 'index.js')));
    assert.ok(existsSync(join(installed, 'dist', 'index.d.ts')));
    assert.ok(existsSync(join(installed, 'README.md')));
    const top = (await readdir(installed)).sort();
    assert.deepEqual(top, ['README.md', 'dist', 'package.json']);
    assert.deepEqual(await readdir(join(project, 'node_modules')), ['.package-lock.json', 'runstate-sdk']);
  });

  describe('the page\'s claim example in the empty project', { skip }, () => {
    let server: Server;

    before(async () => {
      // Compiled first: the compiler blocks the event loop for seconds, which idle sockets dislike.
      const examples = examplesByName(page!);
      const source = join(project, 'claim.ts');
      const epilogue = EXAMPLES.find((example) => example.name === 'claim-run')!.epilogue;
      await writeFile(source, `${pagePrelude()}\n${examples.get('setup')!}\n${examples.get('claim-run')!}\n${epilogue}\n`);
      compileIn([source], project);
      server = await Server.start();
    });

    after(async () => {
      await server?.stop();
    });

    test('type-checks against the installed package and runs unchanged', async () => {
      const scopeId = (await server.api('POST', '/scopes', { name: 'packed' })).body.id;
      const result = await runProgram(join(project, 'claim.js'), server.clientEnv({ RUNSTATE_SCOPE_ID: scopeId }));
      assert.match(result.stdout, /^researching acme as generation 1$/m);
      assert.deepEqual(result.result.report, { company: 'acme', summary: 'acme makes anvils' });
    });
  });
});
