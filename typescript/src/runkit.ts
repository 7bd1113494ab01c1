/**
 * What the run API's parts share (`work.ts`, the verbs; `queue.ts`, the queues): the context of
 * the current call, signals linked for one call, the few checks and conversions, a call that
 * rides through an outage, and raw calls on the full client's request layer.
 */

import { AsyncLocalStorage } from 'node:async_hooks';

import { CONTEXT, type Runstate } from './client.js';
import type { Context } from './context.js';
import { ConfigError, RunstateError, isTransient } from './errors.js';
import type { LeaseClock } from './renewal.js';
export { rideThrough } from './renewal.js';
import { newIdempotencyKey, type Reply } from './request.js';
import { pause, uniform } from './time.js';
import { type Amount, type Per, parsePer, toMinor } from './units.js';
import { warn } from './warnings.js';

/** How long one waiting read (a once key, a job's result) asks the server to hold it. */
export const HOLD_MS = 25_000;
export const RESULT_BYTES_MAX = 65_536;
export const GATHER_MAX = 100;
export const ADMIT_WAIT_MS = 20_000;
export const SETTLE_WITHIN_MS = 3_600_000;
export const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED']);

/** What the current wrapped call or queue job runs under. */
export interface RunContext {
  run: { id: string; name: string };
  /** Aborts when the run stops or the hold behind this call is lost. */
  signal: AbortSignal;
  /** 1 for the first try; more after failed tries. */
  attempt: number;
  /** The work key for `once` and queue calls; null otherwise. */
  key: string | null;
}

export const current = new AsyncLocalStorage<RunContext>();

/** What the current wrapped call or queue job runs under; null outside one. */
export function context(): RunContext | null {
  return current.getStore() ?? null;
}

export type AnyFn = (...args: any[]) => any;
export type Wrapped<F extends AnyFn> = (...args: Parameters<F>) => Promise<Awaited<ReturnType<F>>>;

/** A signal that aborts when any of `signals` does; `dispose()` unhooks it from them (they may
 * live long, as a run's does, and must not gather a listener per call). */
export function linkSignals(signals: AbortSignal[]): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const hooked: Array<[AbortSignal, () => void]> = [];
  for (const signal of signals) {
    if (signal.aborted) {
      controller.abort(signal.reason);
      break;
    }
    const onAbort = () => controller.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    hooked.push([signal, onAbort]);
  }
  return {
    signal: controller.signal,
    dispose() {
      for (const [signal, onAbort] of hooked) signal.removeEventListener('abort', onAbort);
    },
  };
}

export function errorMessage(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return text.slice(0, 2000);
}

/** Wait between two polls: 0.15 s growing by half each time to 1 s, with jitter. */
export function pollDelay(attempt: number, signal?: AbortSignal): Promise<void> {
  return pause(Math.min(1000, 150 * 1.5 ** attempt) * uniform(0.8, 1.2), { signal });
}

export function positiveInt(value: unknown, what: string, high?: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || (high !== undefined && value > high)) {
    throw new ConfigError(high === undefined ? `${what} must be a whole number of 1 or more` : `${what} must be a whole number from 1 to ${high}`);
  }
  return value;
}

export function quotaSizes(options: { max?: number; per?: Per }): { unitsLimit: number; windowSeconds: number } | null {
  if (options.max === undefined && options.per === undefined) return null;
  if (options.max === undefined || options.per === undefined) throw new ConfigError('declare a limit with both max and per');
  return { unitsLimit: positiveInt(options.max, 'max'), windowSeconds: parsePer(options.per) };
}

export function budgetSizes(options: { limit?: Amount; currency?: string; scale?: number }): { limitMinor: string; currency: string; scale: number } | null {
  if (options.limit === undefined) {
    if (options.currency !== undefined || options.scale !== undefined) throw new ConfigError('currency and scale only apply when you declare the budget with limit');
    return null;
  }
  const scale = options.scale ?? 2;
  if (!Number.isInteger(scale) || scale < 0 || scale > 9) throw new ConfigError('scale must be a whole number from 0 to 9');
  const currency = (options.currency ?? 'USD').toUpperCase();
  if (!/^[A-Z]{3}$/.test(currency)) throw new ConfigError('currency must be a 3-letter code such as USD');
  const limitMinor = toMinor(options.limit, scale, 'limit');
  if (limitMinor === '0') throw new ConfigError('a budget limit must be more than 0');
  return { limitMinor, currency, scale };
}

export function warnBudget(name: string, what: string, err: unknown): void {
  warn('RUNSTATE_BUDGET_NOT_SETTLED', `budget ${name}: could not ${what} a reservation (the server releases it at its settle time): ${String(err)}`);
}

export async function voidReservation(client: Runstate, budgetId: string, reservationId: string): Promise<void> {
  try {
    await callPost(client, `/budgets/${budgetId}/void`, { reservationId, workKey: `void:${reservationId}` });
  } catch (err) {
    if (!(err instanceof RunstateError && err.code === 'CONFLICT')) throw err;
  }
}

/** Charge `costMinor` (more than reserved if the budget covers it) and give back the rest. A
 * reservation the server let go already (its settle time passed while the work ran: 409 CONFLICT)
 * is charged late instead (`chargeLate`), as 0.3.0 and the Python SDK do. */
export async function settleReservation(client: Runstate, budgetId: string, reservationId: string, costMinor: string): Promise<void> {
  if (costMinor === '0') return voidReservation(client, budgetId, reservationId);
  let settled: any;
  try {
    settled = (await callPost(client, `/budgets/${budgetId}/settle`, { reservationId, amountMinor: costMinor, workKey: `settle:${reservationId}`, allowOverrun: true })).body;
  } catch (err) {
    if (!(err instanceof RunstateError && err.code === 'CONFLICT')) throw err;
    return chargeLate(client, budgetId, reservationId, costMinor);
  }
  if (settled?.state === 'ACTIVE') await voidReservation(client, budgetId, reservationId);
}

/** Charge a reservation the server let go: reserve one minor unit `lateOf` it in its run (which
 * the server takes even once the run has ended, once per released reservation; the idempotency
 * key `late:<id>` is 0.3.0's) and settle the cost against it, overrun allowed. */
async function chargeLate(client: Runstate, budgetId: string, originalId: string, costMinor: string): Promise<void> {
  const view = (await callGet(client, `/budgets/${budgetId}`)).body;
  const scopeId = (Array.isArray(view?.reservations) ? view.reservations : []).find((row: any) => row?.id === originalId)?.scopeId;
  if (typeof scopeId !== 'string') {
    warn('RUNSTATE_BUDGET_NOT_SETTLED', `budget ${budgetId}: reservation ${originalId} is gone; its cost of ${costMinor} minor units was not charged`);
    return;
  }
  const body = { scopeId, holder: 'late-charge', amountMinor: '1', lateOf: originalId };
  const reserved = (await callPost(client, `/budgets/${budgetId}/reserve`, body, undefined, `late:${originalId}`)).body;
  const settle = { reservationId: reserved.reservationId, amountMinor: costMinor, workKey: `late:${originalId}`, allowOverrun: true };
  await callPost(client, `/budgets/${budgetId}/settle`, settle);
}

// -- raw calls on the full client's request layer --------------------------------------------------

export function ctxOf(client: Runstate): Context {
  return client[CONTEXT];
}

export function callPost(client: Runstate, suffix: string, body: Record<string, unknown>, signal?: AbortSignal, idempotencyKey?: string): Promise<Reply> {
  return ctxOf(client).call('POST', suffix, { body, signal, idempotencyKey });
}

export function callPut(client: Runstate, suffix: string, body: Record<string, unknown>): Promise<Reply> {
  return ctxOf(client).call('PUT', suffix, { body });
}

export function callGet(client: Runstate, suffix: string, query?: Record<string, string | number>, holdMs = 0, signal?: AbortSignal): Promise<Reply> {
  return ctxOf(client).call('GET', suffix, { query, waitMs: holdMs, signal });
}

