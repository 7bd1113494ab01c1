/**
 * Capacity: pools of units, quotas per window, work limits and budgets (the Python SDK's
 * `runstate.capacity`, name for name).
 *
 * - `rs.pools.ensure(name, { capacity })`, `rs.quotas.ensure(name, { unitsPerWindow, windowSeconds })`,
 *   `rs.budgets.ensure(name, { limit, currency, scale })`: create, or check what exists, in one
 *   request (`PUT .../by-name/{name}`; a different setting is `ConflictError` `CONFLICT`).
 *   `rs.workLimits.ensure(name, { scopeId, maxOutstanding })` creates, or lists and compares.
 * - `run.pool(name)`: `acquire()` / `tryAcquire()` / `run(fn)`. A `PoolLease` is held as a claim
 *   lease is (`lease.ts`): renewed in the background through an outage until its end by this
 *   process's clock, lost for good when the server refuses a renewal or that end passes, and
 *   `run(fn)` aborts `lease.signal` then and throws `LeaseLostError` once `fn` returns.
 * - `run.quota(name)`: `tryTake()` / `take()` (waiting in the server's durable first-come line when
 *   the window is used up) / `status()` / `cooldown()`.
 * - `run.budget(name)`: `reserve({ amount })` gives a `BudgetReservation`: `settle({ amount, usageKey })`
 *   or `void({ usageKey })`. Amounts are decimal strings in major units (`'2.50'`), turned into
 *   minor units with integer arithmetic only, never floats.
 *
 * Names are resolved to ids once per handle (one listing), then cached.
 */

import { checkId, nameSegment } from './claims.js';
import type { Context } from './context.js';
import { ConflictError, NotFoundError, RateLimitError, RunstateError, waitTimeout } from './errors.js';
import { HeldLease, keepUnlessAborted, required, runHeld } from './lease.js';
import { grantStartMs } from './renewal.js';
import { checkMs, nowMs, pause, uniform, withGrace } from './time.js';
import { warn } from './warnings.js';

export const POOL_TIMEOUT_MS = 60_000;
export const QUOTA_TIMEOUT_MS = 30_000;
// Pauses (uniform, ms): a full pool, a plan limit, between two looks at a quota waiter.
const CAPACITY_RETRY_MS: [number, number] = [225, 375];
const LIMITED_RETRY_MS: [number, number] = [750, 1250];
const WAITER_POLL_MS: [number, number] = [187.5, 312.5];
const WAITER_TTL_S: [number, number] = [5, 3600];
const EXHAUSTED = new Set(['ALLOWANCE_EXHAUSTED', 'ALLOWANCE_COOLDOWN']);
const AMOUNT = /^(\d+)(?:\.(\d+))?$/;

/** `'2.50'` in major units as a canonical digit string of minor units (`'250'` at scale 2). */
export function decimalToMinor(amount: string, scale: number): string {
  const match = AMOUNT.exec(typeof amount === 'string' ? amount : '');
  if (match === null) {
    throw new RunstateError('VALIDATION_FAILED', 400, `invalid amount ${JSON.stringify(amount)}: digits with an optional fraction`);
  }
  const whole = match[1]!;
  const fraction = (match[2] ?? '').replace(/0+$/, '');
  if (fraction.length > scale) {
    throw new RunstateError('VALIDATION_FAILED', 400, `amount ${JSON.stringify(amount)} has more fraction digits than scale ${scale}`);
  }
  return (whole + fraction.padEnd(scale, '0')).replace(/^0+/, '') || '0';
}

/** Minor units (`'250'`) back to major units (`'2.50'` at scale 2). */
export function minorToDecimal(minor: string, scale: number): string {
  const padded = minor.padStart(scale + 1, '0');
  const whole = padded.slice(0, padded.length - scale);
  return scale === 0 ? whole : `${whole}.${padded.slice(padded.length - scale)}`;
}

async function putByName(ctx: Context, kind: string, name: string, body: Record<string, unknown>): Promise<any> {
  return (await ctx.call('PUT', `/${kind}/by-name/${nameSegment(name)}`, { body })).body;
}

// -- create or check -------------------------------------------------------------------------------

export class PoolsAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** The pool `name` with `capacity` units: created if missing, checked if not (`ConflictError`
   * `CONFLICT` when its capacity differs). Resolves to its row. */
  ensure(name: string, options: { capacity: number }): Promise<Record<string, any>> {
    return putByName(this.#ctx, 'permits', name, { units: options.capacity });
  }

  async list(): Promise<Array<Record<string, any>>> {
    return (await this.#ctx.call('GET', '/permits')).body.permits;
  }
}

export class QuotasAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** The quota (allowance) `name`: `unitsPerWindow` units per fixed window of `windowSeconds`. */
  ensure(name: string, options: { unitsPerWindow: number; windowSeconds: number }): Promise<Record<string, any>> {
    return putByName(this.#ctx, 'allowances', name, { unitsLimit: options.unitsPerWindow, windowSeconds: options.windowSeconds });
  }

  async list(): Promise<Array<Record<string, any>>> {
    return (await this.#ctx.call('GET', '/allowances')).body.allowances;
  }
}

export class BudgetsAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** The budget `name` with `limit` (major units, `'50.00'`), `currency` (default USD) and `scale`
   * (fraction digits, default 2): created if missing, checked if not. */
  ensure(name: string, options: { limit: string; currency?: string; scale?: number }): Promise<Record<string, any>> {
    const scale = options.scale ?? 2;
    return putByName(this.#ctx, 'budgets', name, {
      limitMinor: decimalToMinor(options.limit, scale),
      currency: options.currency ?? 'USD',
      scale,
    });
  }

  async list(): Promise<Array<Record<string, any>>> {
    return (await this.#ctx.call('GET', '/budgets')).body.budgets;
  }
}

export class WorkLimitsAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** The work limit `name` on `scopeId`: tasks submitted naming it (`submit(..., { workLimit })`)
   * get `BACKLOG_FULL` past `maxOutstanding` unfinished ones. Created, or listed and compared
   * (`maxOutstanding` only). */
  async ensure(name: string, options: { scopeId: string; maxOutstanding: number }): Promise<Record<string, any>> {
    try {
      return (await this.#ctx.call('POST', '/work-limits', { body: { name, ...options } })).body;
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err;
      const rows: Array<Record<string, any>> = (await this.#ctx.call('GET', '/work-limits')).body.workLimits;
      const row = rows.find((candidate) => candidate.name === name);
      if (row === undefined) throw err;
      if (row.maxOutstanding !== options.maxOutstanding) {
        throw new ConflictError('CONFLICT', 409, `work limit ${JSON.stringify(name)} exists with maxOutstanding ${row.maxOutstanding}`, { cause: err });
      }
      return row;
    }
  }
}

// -- names to ids ----------------------------------------------------------------------------------

/** A pool, quota or budget named in a scope, resolved to its id once (then cached). */
abstract class Named {
  protected readonly ctx: Context;
  readonly scopeId: string;
  readonly name: string | null;
  #id: string | null;
  protected abstract readonly kind: string;
  protected abstract readonly what: string;

  constructor(ctx: Context, scopeId: string, ref: { name: string } | { id: string }) {
    this.ctx = ctx;
    this.scopeId = scopeId;
    this.name = 'name' in ref ? ref.name : null;
    this.#id = 'id' in ref ? checkId('id', ref.id) : null;
  }

  protected async rows(): Promise<Array<Record<string, any>>> {
    return (await this.ctx.call('GET', `/${this.kind}`)).body[this.kind];
  }

  /** The id; the first call lists, later calls use the cached id. */
  async resolveId(): Promise<string> {
    if (this.#id !== null) return this.#id;
    const row = (await this.rows()).find((candidate) => candidate.name === this.name);
    if (row === undefined) {
      throw new NotFoundError('NOT_FOUND', 404, `${this.what} ${JSON.stringify(this.name)} not found in space ${this.ctx.spaceId}`);
    }
    this.#id = row.id as string;
    return this.#id;
  }
}

// -- pools -----------------------------------------------------------------------------------------

export interface PoolAcquireOptions {
  /** Units to take; default 1. */
  units?: number;
  /** 5 to 600; default 30. Renewed in the background at about a third of it. */
  leaseSeconds?: number;
  /** Try again every ~300 ms while the pool is full (the default); false throws
   * `CAPACITY_UNAVAILABLE` at once. */
  wait?: boolean;
  /** How long `wait` keeps trying; default 60 000 ms, then `WaitTimeoutError`. */
  timeoutMs?: number;
  /** Stops a waiting acquire (it rejects with the signal's reason); a grant that came back after
   * it aborted is released first, as a claim's. */
  signal?: AbortSignal;
}

export type PoolAttempt = { kind: 'acquired'; lease: PoolLease } | { kind: 'capacity-unavailable' };

export class PoolRef extends Named {
  protected readonly kind = 'permits';
  protected readonly what = 'pool';

  /** The pool's row (`unitsTotal`, `unitsHeld`...), or null once it is gone. */
  async status(): Promise<Record<string, any> | null> {
    const id = await this.resolveId();
    return (await this.rows()).find((row) => row.id === id) ?? null;
  }

  /** Take `units` under a renewed lease. With `wait` (the default) a full pool is tried again every
   * ~300 ms (~1 s on `CONCURRENCY_LIMITED`) until `timeoutMs`, then `WaitTimeoutError`. */
  async acquire(options: PoolAcquireOptions = {}): Promise<PoolLease> {
    const { units = 1, leaseSeconds = 30, wait = true, timeoutMs = POOL_TIMEOUT_MS, signal } = options;
    checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
    const poolId = await this.resolveId();
    const started = nowMs();
    const body = { scopeId: this.scopeId, units, holder: this.ctx.holder, holderSession: this.ctx.session, leaseSeconds };
    for (;;) {
      const sentMs = nowMs();
      signal?.throwIfAborted();
      let reply;
      try {
        // Not cut by the signal: the server grants it all the same (see `keepUnlessAborted`).
        reply = await withGrace(signal, (grace) => this.ctx.call('POST', `/permits/${poolId}/acquire`, { body, signal: grace }));
      } catch (err) {
        const retryable =
          (err instanceof ConflictError && err.code === 'CAPACITY_UNAVAILABLE') ||
          (err instanceof RateLimitError && err.code === 'CONCURRENCY_LIMITED');
        if (!wait || !retryable) throw err;
        const elapsedMs = nowMs() - started;
        if (elapsedMs >= timeoutMs) {
          throw waitTimeout(`timed out waiting for ${units} unit(s) of pool ${JSON.stringify(this.name ?? poolId)} after ${timeoutMs} ms`, err);
        }
        const [low, high] = (err as RunstateError).code === 'CONCURRENCY_LIMITED' ? LIMITED_RETRY_MS : CAPACITY_RETRY_MS;
        await pause(Math.min(uniform(low, high), timeoutMs - elapsedMs), { signal });
        signal?.throwIfAborted();
        continue;
      }
      return keepUnlessAborted(PoolLease.start(this.ctx, poolId, reply.body, leaseSeconds, grantStartMs(sentMs, nowMs(), false)), signal);
    }
  }

  /** `{ kind: 'acquired', lease }`, or `{ kind: 'capacity-unavailable' }` when the pool is full. */
  async tryAcquire(options: Omit<PoolAcquireOptions, 'wait' | 'timeoutMs'> = {}): Promise<PoolAttempt> {
    try {
      return { kind: 'acquired', lease: await this.acquire({ ...options, wait: false }) };
    } catch (err) {
      if (err instanceof ConflictError && err.code === 'CAPACITY_UNAVAILABLE') return { kind: 'capacity-unavailable' };
      throw err;
    }
  }

  /** Acquire, return `fn(lease)` while the lease is renewed, release in a `finally`. A lost lease
   * aborts `lease.signal` but does not interrupt `fn`; once `fn` returns, `LeaseLostError` is thrown. */
  async run<T>(fn: (lease: PoolLease) => T | PromiseLike<T>, options: PoolAcquireOptions = {}): Promise<T> {
    const lease = await this.acquire(options);
    return runHeld(lease, fn, `grant ${lease.grantId} of pool ${JSON.stringify(this.name ?? lease.poolId)}`);
  }
}

/** Units of a pool held under a lease: `grantId`, `units`, `token()`, loss reporting, `renew()`,
 * `release()`, exactly as a claim lease. */
export class PoolLease extends HeldLease {
  readonly grantId: string;
  readonly poolId: string;
  readonly units: number;

  private constructor(ctx: Context, poolId: string, grant: any, leaseSeconds: number, startedMs: number) {
    super(ctx, required(grant, 'token'), required(grant, 'leaseExpiresAt'), leaseSeconds, startedMs);
    this.grantId = required(grant, 'grantId');
    this.poolId = poolId;
    this.units = typeof grant.units === 'number' ? grant.units : 1;
  }

  /** @internal */
  static start(ctx: Context, poolId: string, grant: any, leaseSeconds: number, startedMs: number): PoolLease {
    const lease = new PoolLease(ctx, poolId, grant, leaseSeconds, startedMs);
    lease.startRenewal();
    return lease;
  }

  protected describe(): string {
    return `grant ${this.grantId}`;
  }

  protected path(action: 'renew' | 'release'): string {
    return `/grants/${this.grantId}/${action}`;
  }
}

// -- quotas ----------------------------------------------------------------------------------------

export type QuotaAttempt = { kind: 'consumed'; consumption: Record<string, any> } | { kind: 'exhausted' };

export interface TakeOptions {
  units?: number;
  /** Wait in the quota's line when the window is used up (the default); false throws
   * `WaitTimeoutError` at once. */
  wait?: boolean;
  /** Default 30 000 ms, then `WaitTimeoutError` (the place in line is given up; a grant that came
   * as the time ran out is returned, not left consumed for no one). */
  timeoutMs?: number;
  /** Stops a waiting take (it rejects with the signal's reason); its place in line is given up, as
   * at the timeout, and units its waiter was granted meanwhile are refunded. */
  signal?: AbortSignal;
}

export class QuotaRef extends Named {
  protected readonly kind = 'allowances';
  protected readonly what = 'quota';

  /** The quota and its current window (`remaining`, `windowStart`...), or null once it is gone. */
  async status(): Promise<Record<string, any> | null> {
    const id = await this.resolveId();
    try {
      return (await this.ctx.call('GET', `/allowances/${id}`)).body;
    } catch (err) {
      if (err instanceof NotFoundError) return null;
      throw err;
    }
  }

  /** `{ kind: 'consumed', consumption }`, or `{ kind: 'exhausted' }` (used up, or cooling down). */
  async tryTake(options: { units?: number } = {}): Promise<QuotaAttempt> {
    const id = await this.resolveId();
    const body = { scopeId: this.scopeId, units: options.units ?? 1, holder: this.ctx.holder };
    try {
      return { kind: 'consumed', consumption: (await this.ctx.call('POST', `/allowances/${id}/consume`, { body })).body };
    } catch (err) {
      if (err instanceof RateLimitError && EXHAUSTED.has(err.code)) return { kind: 'exhausted' };
      throw err;
    }
  }

  /** Consume `units`, waiting through one durable waiter (served first come, first served) when
   * the window is used up. Resolves to the consumption. */
  async take(options: TakeOptions = {}): Promise<Record<string, any>> {
    const { units = 1, wait = true, timeoutMs = QUOTA_TIMEOUT_MS, signal } = options;
    checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
    const started = nowMs();
    let waiterId: string | null = null;
    for (;;) {
      const attempt = await this.tryTake({ units });
      if (attempt.kind === 'consumed') return attempt.consumption;
      if (!wait) throw waitTimeout(`quota ${JSON.stringify(this.name)} is used up (${units} unit(s) asked, wait: false)`);
      const leftMs = timeoutMs - (nowMs() - started);
      if (leftMs <= 0) {
        await this.#cancelQuietly(waiterId);
        throw waitTimeout(`timed out waiting for ${units} unit(s) of quota ${JSON.stringify(this.name)} after ${timeoutMs} ms`);
      }
      if (waiterId === null) {
        const id = await this.resolveId();
        const ttlSeconds = Math.min(WAITER_TTL_S[1], Math.max(WAITER_TTL_S[0], Math.floor(leftMs / 1000) + 1));
        const body = { scopeId: this.scopeId, units, holder: this.ctx.holder, ttlSeconds };
        // Not cut by the signal: the server would make the waiter all the same, and it would stay in
        // line (and consume units for no one when served) with this side never knowing its id.
        signal?.throwIfAborted();
        const waiter = (await withGrace(signal, (grace) => this.ctx.call('POST', `/allowances/${id}/wait`, { body, signal: grace }))).body;
        if (waiter.state === 'GRANTED' && waiter.consumptionId) return this.#consumption(waiter.consumptionId, units);
        waiterId = required(waiter, 'waiterId') as string;
      }
      let waiter: Record<string, any>;
      try {
        signal?.throwIfAborted();
        waiter = await this.#poll(waiterId, started, timeoutMs, signal);
      } catch (err) {
        // Given up on: leave the line, so the waiter is not served (its units consumed) for no one.
        // Granted meanwhile (the cancel finds the grant standing), its units are refunded.
        if (signal?.aborted) {
          const left = await this.#cancelQuietly(waiterId);
          if (left?.state === 'GRANTED') await this.#refundQuietly(left.allowanceId, left.consumptionId);
        }
        throw err;
      }
      if (waiter.state === 'GRANTED' && waiter.consumptionId) return this.#consumption(waiter.consumptionId, waiter.units ?? units);
      waiterId = null; // EXPIRED or CANCELLED: start again
    }
  }

  /** Report a provider's back-off: nothing is consumed or granted until it ends. */
  async cooldown(seconds: number, reason?: string): Promise<Record<string, any>> {
    const id = await this.resolveId();
    return (await this.ctx.call('POST', `/allowances/${id}/cooldown`, { body: { seconds, reason } })).body;
  }

  async #consumption(consumptionId: string, units: number): Promise<Record<string, any>> {
    const status = await this.status();
    return { consumptionId, units, windowStart: status?.windowStart ?? '', remaining: status?.remaining ?? 0 };
  }

  async #poll(waiterId: string, started: number, timeoutMs: number, signal?: AbortSignal): Promise<Record<string, any>> {
    for (;;) {
      if (nowMs() - started >= timeoutMs) {
        const left = await this.#cancelQuietly(waiterId);
        // Granted as the time ran out: the units are the caller's, not left consumed for no one.
        if (left?.state === 'GRANTED') return left;
        throw waitTimeout(`timed out waiting in line for quota ${JSON.stringify(this.name)} after ${timeoutMs} ms`);
      }
      const waiter = (await this.ctx.call('GET', `/allowance-waiters/${waiterId}`, { signal })).body;
      if (waiter.state !== 'WAITING') return waiter;
      await pause(uniform(...WAITER_POLL_MS), { signal });
      signal?.throwIfAborted();
    }
  }

  /** The waiter as its cancel left it (GRANTED if a grant came first), or null when the server
   * could not be told. */
  async #cancelQuietly(waiterId: string | null): Promise<Record<string, any> | null> {
    if (waiterId === null) return null;
    // Best effort by design: the waiter's time to live ends it anyway.
    return this.ctx.call('POST', `/allowance-waiters/${waiterId}/cancel`).then((reply) => reply.body, () => null);
  }

  /** Give a consumption back to its window (`POST .../consumptions/{id}/refund`). Best effort: units
   * the server no longer keeps (409) or cannot be told of count until their window ends. */
  async #refundQuietly(allowanceId: string | undefined, consumptionId: string | undefined): Promise<void> {
    if (!allowanceId || !consumptionId) return;
    await this.ctx.call('POST', `/allowances/${allowanceId}/consumptions/${consumptionId}/refund`, { body: {} }).catch((err: unknown) => {
      warn('RUNSTATE_REFUND_FAILED', `quota ${JSON.stringify(this.name)}: could not give back consumption ${consumptionId} (its units count until their window ends): ${err instanceof Error ? err.message : String(err)}`);
    });
  }
}

// -- budgets ---------------------------------------------------------------------------------------

export class BudgetReservation {
  readonly #ctx: Context;
  readonly budgetId: string;
  readonly scale: number;
  readonly id: string;
  /** What is still reserved, in minor units, as the server last said. */
  reservedMinor: string;
  state: string;

  /** @internal */
  constructor(ctx: Context, budgetId: string, scale: number, view: any) {
    this.#ctx = ctx;
    this.budgetId = budgetId;
    this.scale = scale;
    this.id = required(view, 'reservationId');
    this.reservedMinor = required(view, 'reservedMinor');
    this.state = required(view, 'state');
  }

  /** What is still reserved, in major units. */
  get reserved(): string {
    return minorToDecimal(this.reservedMinor, this.scale);
  }

  /** Charge what was spent (at most what is reserved); repeating a `usageKey` changes nothing. */
  async settle(options: { amount: string; usageKey: string }): Promise<Record<string, any>> {
    const body = { reservationId: this.id, amountMinor: decimalToMinor(options.amount, this.scale), workKey: options.usageKey };
    return this.#update((await this.#ctx.call('POST', `/budgets/${this.budgetId}/settle`, { body })).body);
  }

  /** Give back what is still reserved. */
  async void(options: { usageKey: string }): Promise<Record<string, any>> {
    const body = { reservationId: this.id, workKey: options.usageKey };
    return this.#update((await this.#ctx.call('POST', `/budgets/${this.budgetId}/void`, { body })).body);
  }

  #update(view: any): Record<string, any> {
    if (typeof view?.reservedMinor === 'string') this.reservedMinor = view.reservedMinor;
    if (typeof view?.state === 'string') this.state = view.state;
    return view;
  }
}

export class BudgetRef extends Named {
  protected readonly kind = 'budgets';
  protected readonly what = 'budget';

  /** The budget with its active reservations. */
  async status(): Promise<Record<string, any>> {
    const id = await this.resolveId();
    return (await this.ctx.call('GET', `/budgets/${id}`)).body;
  }

  /** Reserve `amount` (major units) until settled, voided, or `settleBy` (ISO 8601) passes. A
   * reservation that does not fit throws `BudgetExceededError` (`INSUFFICIENT_BUDGET`). */
  async reserve(options: { amount: string; settleBy?: string }): Promise<BudgetReservation> {
    const budget = await this.status();
    const body = {
      scopeId: this.scopeId,
      holder: this.ctx.holder,
      amountMinor: decimalToMinor(options.amount, budget.scale),
      settleBy: options.settleBy,
    };
    const view = (await this.ctx.call('POST', `/budgets/${budget.id}/reserve`, { body })).body;
    return new BudgetReservation(this.ctx, budget.id, budget.scale, view);
  }
}
