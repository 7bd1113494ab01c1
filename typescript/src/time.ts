/**
 * Clock, randomness and pauses: the few primitives every wait loop uses.
 *
 * Deadlines are measured on `performance.now()` (monotonic), never on `Date.now()`, which jumps
 * when the wall clock is set. Pauses take an optional `AbortSignal` and resolve early (never reject)
 * when it aborts, so a loop checks its own stop condition afterwards instead of catching errors.
 */

import { randomBytes } from 'node:crypto';

import { ConfigError } from './errors.js';

/** The longest delay a Node timer takes (2^31 - 1 ms, about 24.8 days): a longer one, `Infinity`
 * included, would fire after 1 ms. A wait as long as this is as good as none. */
export const TIMER_MAX_MS = 2 ** 31 - 1;

/** `ms` as a timer's delay: 0 to `TIMER_MAX_MS`. */
export function timerMs(ms: number): number {
  return Math.min(Math.max(0, ms), TIMER_MAX_MS);
}

/**
 * A wait option in milliseconds, checked on this side (the server never sees it, or would see a
 * NaN as `null`): `undefined` passes (the default applies); anything else must be a number of 0 or
 * more (`Infinity` only where `infinite`: a timeout that never runs out), or more than 0 where
 * `positive` (a pause between two polls, which 0 would turn into a busy loop). `ConfigError`
 * otherwise, naming the option.
 */
export function checkMs(value: unknown, what: string, rule: { infinite?: boolean; positive?: boolean } = {}): void {
  if (value === undefined) return;
  const ok =
    typeof value === 'number' &&
    !Number.isNaN(value) &&
    (rule.positive ? value > 0 : value >= 0) &&
    (rule.infinite === true || Number.isFinite(value));
  if (!ok) {
    const range = rule.positive ? 'more than 0' : '0 or more';
    throw new ConfigError(`${what} must be a number of milliseconds, ${range}${rule.infinite ? '' : ' and finite'}, got ${describeValue(value)}`);
  }
}

function describeValue(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}

/** Monotonic milliseconds. */
export function nowMs(): number {
  return performance.now();
}

/** A uniform random number in [low, high). */
export function uniform(low: number, high: number): number {
  return low + Math.random() * (high - low);
}

/** `bytes` random bytes as lowercase hex (2 characters each). */
export function randomHex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}

export interface PauseOptions {
  signal?: AbortSignal;
  /** An unref'd pause does not keep the process alive on its own (background renewal). */
  unref?: boolean;
}

/** Wait `ms` milliseconds, or less if `signal` aborts first. Never rejects. */
export function pause(ms: number, options: PauseOptions = {}): Promise<void> {
  const { signal, unref = false } = options;
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, timerMs(ms));
    if (unref) timer.unref();
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** How long a request that the server answers at once is still awaited after the caller's signal
 * aborted (`graceAfter`): an answer comes well within it; a server that hangs does not hold the
 * caller longer. */
export const ABORT_GRACE_MS = 2000;

/**
 * A signal that aborts `graceMs` after `outer` does (with its reason), for a request the server
 * applies even when its connection is cut: it is let finish, so that what it did can be undone,
 * unless it takes that much longer. `dispose()` when done with it.
 */
export function graceAfter(outer: AbortSignal | undefined, graceMs: number = ABORT_GRACE_MS): TimedSignal {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | null = null;
  const onAbort = () => {
    timer = setTimeout(() => controller.abort(outer?.reason), timerMs(graceMs));
    timer.unref();
  };
  if (outer?.aborted) onAbort();
  else outer?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    dispose() {
      if (timer !== null) clearTimeout(timer);
      outer?.removeEventListener('abort', onAbort);
    },
  };
}

/** `send(signal)` with `graceAfter(outer)`'s signal, disposed of once it settles. */
export async function withGrace<T>(outer: AbortSignal | undefined, send: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const grace = graceAfter(outer);
  try {
    return await send(grace.signal);
  } finally {
    grace.dispose();
  }
}

export interface TimedSignal {
  signal: AbortSignal;
  /** Clears the timer and the link to the outer signal. */
  dispose(): void;
}

/** A signal that aborts when `outer` does (with its reason) or after `timeoutMs` (with an `Error`
 * saying so); `dispose()` when done with it. The timer is unref'd. */
export function withTimeout(outer: AbortSignal | undefined, timeoutMs: number): TimedSignal {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error(`no answer within ${Math.round(timeoutMs)} ms`)), timerMs(timeoutMs));
  timer.unref();
  const onAbort = () => controller.abort(outer?.reason);
  if (outer?.aborted) onAbort();
  else outer?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    dispose() {
      clearTimeout(timer);
      outer?.removeEventListener('abort', onAbort);
    },
  };
}
