/**
 * The run API's timing: `sleep(name, duration)`, a durable timer of the run (a process that
 * restarts and sleeps with the same name waits only for what is left), and `together(name,
 * count)`, a barrier of the run that releases once `count` workers arrived. Both wait with backoff
 * on this side and stop with `ScopeCancelledError` when the run does (`signal` aborts).
 */

import { encodeClaimKey } from './claims.js';
import type { Runstate } from './client.js';
import { RunstateError, ScopeCancelledError, waitTimeout } from './errors.js';
import { callGet, callPost, callPut, pollDelay } from './runkit.js';
import { nowMs, pause } from './time.js';
import { type Duration, parseDuration } from './units.js';

/** The longest one look at a sleeping timer waits before asking the server again. */
const SLEEP_LOOK_MS_MAX = 30_000;

function stopped(signal: AbortSignal, what: string): ScopeCancelledError {
  const reason = signal.reason;
  return reason instanceof ScopeCancelledError ? reason : new ScopeCancelledError('SCOPE_CANCELLED', 409, `the run stopped while ${what}`);
}

/** The timer's arming: `{ afterSeconds }` for a duration, `{ at }` for `{ until }`. */
export function timerBody(duration: Duration | { until: Date }): Record<string, unknown> {
  if (typeof duration === 'object' && duration !== null && 'until' in duration) return { at: duration.until.toISOString() };
  return { afterSeconds: Math.ceil(parseDuration(duration as Duration, 'sleep')) };
}

export async function sleepNamed(client: Runstate, runId: string, name: string, body: Record<string, unknown>, signal: AbortSignal): Promise<void> {
  for (let early = 0; ; ) {
    const timer = (await callPut(client, `/timers/by-name/${encodeClaimKey(name)}`, { scopeId: runId, ...body })).body;
    if (timer.state === 'ACKED' || timer.state === 'EXPIRED') return;
    if (timer.state === 'CANCELLED') throw new ScopeCancelledError('SCOPE_CANCELLED', 409, 'the run stopped while sleeping');
    if (timer.state === 'FIRED') {
      await callPost(client, `/timers/${timer.id}/ack`, { token: timer.token }).catch((err) => {
        // Acknowledged by another sleeper of the same name first: the sleep is over all the same.
        if (!(err instanceof RunstateError) || (err.code !== 'CONFLICT' && err.code !== 'STALE_CLAIM')) throw err;
      });
      return;
    }
    const remainingMs = new Date(timer.fireAt).getTime() - new Date(timer.now).getTime();
    if (remainingMs > 0) {
      early = 0;
      await pause(Math.min(remainingMs, SLEEP_LOOK_MS_MAX), { signal });
    } else {
      await pollDelay(early, signal); // due: the server fires it within a moment
      early += 1;
    }
    if (signal.aborted) throw stopped(signal, 'sleeping');
  }
}

export async function togetherNamed(
  client: Runstate,
  runId: string,
  worker: string,
  name: string,
  count: number,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<void> {
  const barrier = (await callPut(client, `/barriers/by-name/${encodeClaimKey(name)}`, { scopeId: runId, target: count })).body;
  try {
    const arrived = (await callPost(client, `/barriers/${barrier.id}/arrive`, { arrivalKey: worker })).body;
    if (arrived.state === 'RELEASED') return;
  } catch (err) {
    if (err instanceof RunstateError && err.code === 'BARRIER_RELEASED') return; // a latecomer carries on
    if (err instanceof RunstateError && err.code === 'BARRIER_CANCELLED') throw new ScopeCancelledError('SCOPE_CANCELLED', 409, 'the run stopped while waiting');
    throw err;
  }
  const started = nowMs();
  for (let polls = 0; ; polls += 1) {
    if (nowMs() - started >= timeoutMs) throw waitTimeout(`waited too long for ${count} workers at ${name}`);
    await pollDelay(polls, signal);
    if (signal.aborted) throw stopped(signal, 'waiting');
    const view = (await callGet(client, `/barriers/${barrier.id}`)).body;
    if (view.state === 'RELEASED' || view.epoch !== barrier.epoch) return;
    if (view.state === 'CANCELLED') throw new ScopeCancelledError('SCOPE_CANCELLED', 409, 'the run stopped while waiting');
  }
}
