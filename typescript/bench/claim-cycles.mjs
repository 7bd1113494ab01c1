// Claim cycles per second (acquire + release, each caller on its own key, so no contention) of the
// TypeScript client against a real `runstate serve`, next to the Python SDK's measured the same
// way against the same server.
//
//   npm run build && node bench/claim-cycles.mjs [--seconds 10] [--warmup 2] [--callers 1,16] [--rounds 3]
//                                                [--memory] [-- serve flags]
//
// The legs alternate (TypeScript, Python, TypeScript, ...) for --rounds rounds and the median of
// each is reported, with each client's own CPU time per cycle, which a busy machine disturbs far
// less than the rate does.
//
// The server is the worktree's .venv/bin/runstate (or RUNSTATE_BIN) on 127.0.0.1, a random port,
// a fresh temporary data directory (none with --memory), and its default fsync policy (always)
// unless serve flags after `--` say otherwise. One client per SDK, shared by its callers.

import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { Runstate } from 'runstate-sdk';

import { REPO_DIR, Server } from '../build/test/support/server.js';

const { values, positionals } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    callers: { type: 'string', default: '1,16' },
    memory: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '3' },
  },
  allowPositionals: true,
});
const seconds = Number(values.seconds);
const warmupS = Number(values.warmup);
const callerCounts = values.callers.split(',').map(Number);

async function tsCycles(run, prefix, callers, durationS) {
  const deadline = performance.now() + durationS * 1000;
  const counts = new Array(callers).fill(0);
  await Promise.all(
    counts.map(async (_, index) => {
      const claim = run.claim(`${prefix}:${index}`);
      while (performance.now() < deadline) {
        const lease = await claim.acquire();
        await lease.release();
        counts[index] += 1;
      }
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

function pyCycles(server, scopeId, callers) {
  const python = process.env.PYTHON || join(REPO_DIR, '.venv', 'bin', 'python');
  const script = new URL('./claim_cycles.py', import.meta.url).pathname;
  const args = [script, server.baseUrl, server.apiKey, server.spaceId, scopeId, String(callers), String(seconds), String(warmupS)];
  return new Promise((resolve, reject) => {
    const proc = spawn(python, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.on('data', (chunk) => (out += chunk));
    proc.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop())) : reject(new Error(`python leg exited ${code}`))));
  });
}

const server = await Server.start({ args: positionals, memory: values.memory });
try {
  const rs = new Runstate({ apiKey: server.apiKey, spaceId: server.spaceId, baseUrl: server.baseUrl, holder: 'bench-ts' });
  const run = await rs.scopes.create({ name: 'bench' });
  const rows = [];
  for (const callers of callerCounts) {
    await tsCycles(run, `ts-warmup-${callers}`, callers, warmupS);
    for (let round = 0; round < Number(values.rounds); round += 1) {
      const started = performance.now();
      const cpuStarted = process.cpuUsage();
      const count = await tsCycles(run, `ts-${callers}-${round}`, callers, seconds);
      const elapsedS = (performance.now() - started) / 1000;
      const cpu = process.cpuUsage(cpuStarted);
      rows.push({
        sdk: 'typescript', callers, cycles: count, seconds: +elapsedS.toFixed(3), per_s: +(count / elapsedS).toFixed(1),
        client_cpu_ms_per_cycle: +((cpu.user + cpu.system) / 1000 / Math.max(count, 1)).toFixed(3),
      });
      rows.push({ sdk: 'python', round, ...(await pyCycles(server, run.id, callers)) });
    }
  }
  const median = (numbers) => [...numbers].sort((a, b) => a - b)[Math.floor(numbers.length / 2)];
  console.log(`claim cycles (acquire + release) per second, ${values.rounds} x ${seconds} s per leg, serve ${[values.memory ? '(in memory)' : '--data-dir TMP', ...positionals].join(' ')}, load ${loadavg()[0].toFixed(2)}`);
  console.log('sdk         callers   cycles/s (median; all rounds)        client CPU ms/cycle (median)');
  for (const callers of callerCounts) {
    for (const sdk of ['typescript', 'python']) {
      const legs = rows.filter((row) => row.sdk === sdk && row.callers === callers);
      const rates = legs.map((row) => row.per_s);
      console.log(
        `${sdk.padEnd(12)}${String(callers).padStart(7)}${String(median(rates)).padStart(11)}   ${rates.join(', ').padEnd(26)}${String(median(legs.map((row) => row.client_cpu_ms_per_cycle))).padStart(10)}`,
      );
    }
  }
  console.log(JSON.stringify(rows));
} finally {
  await server.stop();
}
