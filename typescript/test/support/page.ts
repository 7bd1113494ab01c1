/**
 * The product page's TypeScript examples, taken from the page itself at test time and turned into
 * programs that run against a real server.
 *
 * Each program is: a prelude defining what the page leaves to the reader (`researchCompany`,
 * `sections`, `writeSection`, `runId`, `taskId`), the page's setup example, one example exactly as
 * the page prints it, and an epilogue that prints one `RESULT {json}` line for the test to check.
 * The examples are pasted, never edited; the programs are type-checked against the built package
 * (imported by its name, `runstate-sdk`) and compiled with the TypeScript compiler, then run with
 * `node`, each in its own process.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import ts from 'typescript';

import { PACKAGE_DIR, REPO_DIR } from './server.js';

export const PAGE_PATH = process.env.RUNSTATE_PAGE || join(REPO_DIR, '..', 'shared', 'seed-runstate-work-once.md');
export const PROGRAMS_DIR = join(PACKAGE_DIR, 'build', 'page');

/** Every fenced `ts` block of a markdown page, in order, exactly as written (without the fences). */
export function typescriptBlocks(markdown: string): string[] {
  const blocks: string[] = [];
  const fence = /^```ts\n([\s\S]*?)^```$/gm;
  for (let match = fence.exec(markdown); match !== null; match = fence.exec(markdown)) blocks.push(match[1]!);
  return blocks;
}

export function readPage(): string | null {
  return existsSync(PAGE_PATH) ? readFileSync(PAGE_PATH, 'utf8') : null;
}

const PRELUDE = `// Stand-ins for the agent's own work, which the page leaves to the reader.
const researchCompany = async (company: string, options: { signal?: AbortSignal } = {}) => {
  await new Promise<void>((resolve) => setTimeout(resolve, Number(process.env.TEST_WORK_MS ?? '20')));
  options.signal?.throwIfAborted();
  return { company, summary: \`\${company} makes anvils\` };
};
const sections: string[] = ['intro', 'findings', 'summary'];
const written: Array<{ section: string; fencingToken: string; aborted: boolean }> = [];
const writeSection = async (section: string, options: { fencingToken: string; signal: AbortSignal }) => {
  await new Promise<void>((resolve) => setTimeout(resolve, 10));
  written.push({ section, fencingToken: options.fencingToken, aborted: options.signal.aborted });
};
const runId = process.env.TEST_RUN_ID ?? '';
const taskId = process.env.TEST_TASK_ID ?? '';
const emit = (fields: Record<string, unknown>) => console.log('RESULT ' + JSON.stringify(fields));
`;

/** The stand-ins the examples expect, and the `emit` of the epilogues. */
export function pagePrelude(): string {
  return PRELUDE;
}

/** How to recognise each example on the page, and what its program prints at the end. */
export const EXAMPLES: Array<{ name: string; marker: string; epilogue: string }> = [
  { name: 'setup', marker: "const rs = new Runstate({ holder: 'researcher-1' });", epilogue: '' },
  { name: 'claim-run', marker: "const report = await run.claim('company:acme').run(", epilogue: 'emit({ report });' },
  { name: 'try-acquire', marker: '.tryAcquire();', epilogue: 'emit({ kind: attempt.kind });' },
  { name: 'lease-lost', marker: "run.claim('file:report.md')", epilogue: 'emit({ written });' },
  { name: 'shared-task', marker: "await rs.mailboxes.ensure('research'", epilogue: 'emit({ ticketId: ticket.id, outcome });' },
  { name: 'restart', marker: '.task(taskId);', epilogue: 'emit({ view });' },
  { name: 'consume', marker: '.consume<{ company: string }>(', epilogue: "emit({ stopped: controller.signal.aborted });" },
  {
    name: 'receive',
    marker: '.receive<{ company: string }>();',
    epilogue:
      'emit({ delivery: delivery === null ? null : { id: delivery.id, attempt: delivery.attempt, data: delivery.data, settled: delivery.settled } });',
  },
  { name: 'send', marker: '.send(', epilogue: 'emit({ sent });' },
];

/** The page's examples by name; throws if one is missing or an example matches no name. */
export function examplesByName(markdown: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const block of typescriptBlocks(markdown)) {
    const matches = EXAMPLES.filter((example) => block.includes(example.marker));
    if (matches.length !== 1) {
      throw new Error(`the page's TypeScript example matches ${matches.length} known examples:\n${block}`);
    }
    const name = matches[0]!.name;
    if (found.has(name)) throw new Error(`two TypeScript examples on the page match ${name}`);
    found.set(name, block);
  }
  for (const example of EXAMPLES) {
    if (!found.has(example.name)) throw new Error(`the page has no TypeScript example for ${example.name}`);
  }
  return found;
}

/** Write, type-check and compile one program per example (but the setup); returns their .js paths. */
export async function buildPrograms(markdown: string): Promise<Map<string, string>> {
  const examples = examplesByName(markdown);
  const setup = examples.get('setup')!;
  await rm(PROGRAMS_DIR, { recursive: true, force: true });
  await mkdir(PROGRAMS_DIR, { recursive: true });
  const sources: string[] = [];
  const outputs = new Map<string, string>();
  for (const example of EXAMPLES) {
    if (example.name === 'setup') continue;
    const source = join(PROGRAMS_DIR, `${example.name}.ts`);
    await writeFile(source, `${PRELUDE}\n${setup}\n${examples.get(example.name)!}\n${example.epilogue}\n`);
    sources.push(source);
    outputs.set(example.name, join(PROGRAMS_DIR, `${example.name}.js`));
  }
  // The package README's own example, built the same way (it brings its own setup).
  const readme = typescriptBlocks(readFileSync(join(PACKAGE_DIR, 'README.md'), 'utf8'))[0];
  if (readme === undefined) throw new Error('the package README has no TypeScript example');
  const readmeSource = join(PROGRAMS_DIR, 'package-readme.ts');
  await writeFile(readmeSource, `${PRELUDE}\n${readme}\nemit({ report, scopeId: run.id });\n`);
  sources.push(readmeSource);
  outputs.set('package-readme', join(PROGRAMS_DIR, 'package-readme.js'));
  // The README's other examples are type-checked against the package (compiled, not run).
  for (const [index, block] of typescriptBlocks(readFileSync(join(PACKAGE_DIR, 'README.md'), 'utf8')).slice(1).entries()) {
    const source = join(PROGRAMS_DIR, `package-readme-${index + 2}.ts`);
    await writeFile(source, `${block}\nexport {};\n`);
    sources.push(source);
  }
  compileIn(sources, PROGRAMS_DIR);
  return outputs;
}

/** Type-check and emit `sources` into `outDir` with the package's own compiler settings; `runstate-sdk`
 * resolves from `outDir` as any import would (the package itself, or an installed copy). */
export function compileIn(sources: string[], outDir: string): void {
  const configPath = join(PACKAGE_DIR, 'tsconfig.json');
  const config = ts.readConfigFile(configPath, ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, PACKAGE_DIR);
  const options: ts.CompilerOptions = {
    ...parsed.options,
    rootDir: outDir,
    outDir,
    // The Node types come from this package's dev dependencies, wherever the programs are.
    typeRoots: [join(PACKAGE_DIR, 'node_modules', '@types')],
    declaration: false,
    sourceMap: false,
    noEmitOnError: true,
  };
  const program = ts.createProgram(sources, options);
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...program.emit().diagnostics];
  if (diagnostics.length > 0) {
    const host: ts.FormatDiagnosticsHost = {
      getCanonicalFileName: (name) => name,
      getCurrentDirectory: () => PACKAGE_DIR,
      getNewLine: () => '\n',
    };
    throw new Error(ts.formatDiagnostics(diagnostics, host));
  }
}

export interface ProgramRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  result: any;
}

/** A program running in its own process: its output so far, a way to wait for a line, its end. */
export class RunningProgram {
  readonly proc: ChildProcess;
  stdout = '';
  stderr = '';
  readonly done: Promise<ProgramRun>;

  constructor(file: string, env: Record<string, string>, timeoutMs: number) {
    this.proc = spawn(process.execPath, [file], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc.stdout!.on('data', (chunk: Buffer) => (this.stdout += chunk.toString('utf8')));
    this.proc.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString('utf8')));
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    this.done = new Promise((resolve) => {
      this.proc.once('exit', (code, signal) => {
        clearTimeout(timer);
        // 'exit' can come before the pipes are drained; 'close' comes after.
        this.proc.once('close', () => resolve({ code, signal, stdout: this.stdout, stderr: this.stderr, result: resultOf(this.stdout) }));
      });
    });
  }

  /** Resolves once stdout has a line containing `text`; rejects after `timeoutMs`. */
  async waitFor(text: string, timeoutMs = 15_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!this.stdout.includes(text)) {
      if (performance.now() > deadline || this.proc.exitCode !== null) {
        throw new Error(`no ${JSON.stringify(text)} from the program:\n${this.stdout}\n${this.stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

function resultOf(stdout: string): any {
  const line = stdout.split('\n').find((candidate) => candidate.startsWith('RESULT '));
  return line === undefined ? undefined : JSON.parse(line.slice('RESULT '.length));
}

export function startProgram(file: string, env: Record<string, string>, timeoutMs = 60_000): RunningProgram {
  return new RunningProgram(file, env, timeoutMs);
}

/** Run a program to its end and insist that it exited 0. */
export async function runProgram(file: string, env: Record<string, string>, timeoutMs = 60_000): Promise<ProgramRun> {
  const run = await startProgram(file, env, timeoutMs).done;
  if (run.code !== 0) throw new Error(`${file} exited ${run.code ?? run.signal}:\n${run.stdout}\n${run.stderr}`);
  return run;
}
