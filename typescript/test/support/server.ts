/**
 * A real `runstate serve` for the suites: the worktree's `.venv/bin/runstate` (or `RUNSTATE_BIN`)
 * on 127.0.0.1, port 0 (the server picks a free one and prints it), a fresh temporary data
 * directory, and a known API key for one space, as the Python end-to-end tests start it.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package folder (`typescript/`), from `build/test/support/`. */
export const PACKAGE_DIR = fileURLToPath(new URL('../../../', import.meta.url));
export const REPO_DIR = join(PACKAGE_DIR, '..');
const SERVING = /runstate: serving on (http:\/\/\S+)/;
const START_TIMEOUT_MS = 30_000;

export function runstateBin(): string {
  return process.env.RUNSTATE_BIN || join(REPO_DIR, '.venv', 'bin', 'runstate');
}

export interface StartOptions {
  apiKey?: string;
  spaceId?: string;
  args?: string[];
  /** Keep the state in memory only (no data directory, nothing fsynced). */
  memory?: boolean;
  /** Listen on this port (a restart takes the port it had); default 0, a free one. */
  port?: number;
  /** Use this data directory (a restart takes the one it had); default a fresh one. */
  dataDir?: string;
}

export class Server {
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly spaceId: string;
  readonly dataDir: string;
  readonly lines: string[];
  readonly #options: StartOptions;
  #proc: ChildProcess;
  /** How long the last start took, from spawning to healthy (ms). */
  startMs = 0;

  private constructor(proc: ChildProcess, baseUrl: string, apiKey: string, spaceId: string, dataDir: string, lines: string[], options: StartOptions) {
    this.#proc = proc;
    this.#options = options;
    this.baseUrl = baseUrl;
    this.apiKey = apiKey;
    this.spaceId = spaceId;
    this.dataDir = dataDir;
    this.lines = lines;
  }

  static async start(options: StartOptions = {}): Promise<Server> {
    const apiKey = options.apiKey ?? `ts-key-${Math.random().toString(16).slice(2)}`;
    const spaceId = options.spaceId ?? 'default';
    const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'runstate-ts-')));
    // Only the settings given here: an unknown RUNSTATE_* variable would stop the server.
    const env: Record<string, string> = {};
    for (const [name, value] of Object.entries(process.env)) {
      if (value !== undefined && !name.startsWith('RUNSTATE_')) env[name] = value;
    }
    Object.assign(env, { RUNSTATE_API_KEY: apiKey, RUNSTATE_SPACE_ID: spaceId, PYTHONUNBUFFERED: '1' });
    const spawnedAt = performance.now();
    const proc = spawn(
      runstateBin(),
      ['serve', '--host', '127.0.0.1', '--port', String(options.port ?? 0), ...(options.memory ? [] : ['--data-dir', dataDir]), ...(options.args ?? [])],
      { env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const lines: string[] = [];
    const baseUrl = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`server did not start:\n${lines.join('\n')}`)), START_TIMEOUT_MS);
      const onData = (chunk: Buffer) => {
        for (const line of chunk.toString('utf8').split('\n')) {
          if (line === '') continue;
          lines.push(line);
          const match = SERVING.exec(line);
          if (match) {
            clearTimeout(timer);
            resolve(match[1]!);
          }
        }
      };
      proc.stdout!.on('data', onData);
      proc.stderr!.on('data', onData);
      proc.once('error', (err) => {
        clearTimeout(timer);
        reject(new Error(`cannot start ${runstateBin()} (run \`make venv\` first): ${err.message}`));
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`server exited with ${code}:\n${lines.join('\n')}`));
      });
    });
    const server = new Server(proc, baseUrl, apiKey, spaceId, dataDir, lines, options);
    await server.#waitHealthy();
    server.startMs = performance.now() - spawnedAt;
    return server;
  }

  /** The port it listens on. */
  get port(): number {
    return Number(new URL(this.baseUrl).port);
  }

  /** Kill the process with SIGKILL, as a crash would: nothing is flushed or closed. */
  async kill(): Promise<void> {
    const proc = this.#proc;
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL');
    await exited;
  }

  /** Start it again on the same port, data directory, key and space; resolves once it is healthy. */
  async restart(): Promise<void> {
    const again = await Server.start({ ...this.#options, apiKey: this.apiKey, spaceId: this.spaceId, port: this.port, dataDir: this.dataDir });
    this.#proc = again.#proc;
    this.startMs = again.startMs;
    this.lines.push(...again.lines);
  }

  async #waitHealthy(): Promise<void> {
    const deadline = performance.now() + START_TIMEOUT_MS;
    while (performance.now() < deadline) {
      try {
        const response = await fetch(`${this.baseUrl}/healthz`);
        await response.arrayBuffer();
        if (response.status === 200) return;
      } catch {
        // not listening yet
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`server not healthy:\n${this.lines.join('\n')}`);
  }

  /** The variables a client process needs to reach this server. */
  clientEnv(extra: Record<string, string> = {}): Record<string, string> {
    return {
      ...(process.env as Record<string, string>),
      RUNSTATE_BASE_URL: this.baseUrl,
      RUNSTATE_API_KEY: this.apiKey,
      RUNSTATE_SPACE_ID: this.spaceId,
      ...extra,
    };
  }

  /** One raw API call, bypassing the SDK: `{ status, body }`. A dropped connection is tried once
   * more with the same idempotency key, so the retry cannot apply a mutation twice. */
  async api(method: 'GET' | 'POST', suffix: string, body?: unknown): Promise<{ status: number; body: any }> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.apiKey}`,
      'idempotency-key': Math.random().toString(16).slice(2).padEnd(24, '0').slice(0, 24),
    };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const request = () =>
      fetch(`${this.baseUrl}/v1/spaces/${this.spaceId}${suffix}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const response = await request().catch(() => request());
    const text = await response.text();
    return { status: response.status, body: text === '' ? null : JSON.parse(text) };
  }

  async stop(): Promise<void> {
    const proc = this.#proc;
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(this.dataDir, { recursive: true, force: true });
  }
}
