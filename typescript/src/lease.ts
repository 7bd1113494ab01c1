/**
 * What every lease this process holds has in common (claims and pool grants): the fencing token,
 * the renewal in the background, the loss, `renew()` and `release()`.
 *
 * A lease is lost when the server says so (a renewal refused: stale token, run cancelled, unknown
 * lease) or when its deadline by this process's clock passes with no renewal getting through (see
 * `renewal.ts`: renewals ride through an outage until then). Then `isLost` turns true and `signal`
 * aborts with a `LeaseLostError`, for good. `isLost` and `throwIfLost()` also read the clock
 * themselves, so a process paused past its lease sees the loss at its first check after waking,
 * before any timer has run. Its renewals go out with every other lease of the client
 * (`renewals.ts`: one request per space per interval), and its release with the client's other
 * calls of the moment (`batch.ts`).
 *
 * `runHeld(lease, fn)` is how `run()` holds one: a lost lease does **not** interrupt `fn` (a
 * JavaScript function cannot be cancelled from outside): `signal` aborts, `isLost` turns true, and
 * once `fn` returns normally `run()` throws `LeaseLostError` (`STALE_CLAIM`) rather than hand back a
 * result made without ownership; if `fn` throws, its own error goes up. The release after `fn` has
 * the last word: a lease taken away between two renewals (an operator's forced release, the run
 * ended) is learned when the server refuses the release as stale, and `run()` throws then too.
 */

import type { Context, Stoppable } from './context.js';
import { LeaseLostError, NotFoundError, ScopeCancelledError } from './errors.js';
import { LeaseClock, renewalsExhausted, rideThrough as sendThrough } from './renewal.js';
import { newIdempotencyKey } from './request.js';
import { Kept } from './renewals.js';

/** The server's `YYYY-MM-DDTHH:MM:SS.mmmZ`; a value that is not a timestamp is a malformed answer. */
export function parseTimestamp(value: unknown): Date {
  const parsed = typeof value === 'string' ? new Date(value) : new Date(Number.NaN);
  if (Number.isNaN(parsed.getTime())) throw new TypeError(`malformed answer: not a timestamp: ${String(value)}`);
  return parsed;
}

/** `body[field]`, or a `TypeError` naming the field: an answer without it is malformed. */
export function required(body: any, field: string): any {
  if (body === null || typeof body !== 'object' || !(field in body)) {
    throw new TypeError(`malformed answer: no ${field}`);
  }
  return body[field];
}

export abstract class HeldLease implements Stoppable {
  readonly leaseSeconds: number;
  /** When the lease runs out unless renewed, as the server last said. */
  expiresAt: Date;
  /** @internal */
  protected readonly ctx: Context;
  readonly #token: string;
  readonly #lost = new AbortController();
  readonly #clock: LeaseClock;
  #lostError: LeaseLostError | null = null;
  #released = false;
  #kept: Kept | null = null;

  /** `startedMs`: when the request that granted it was sent (monotonic). */
  protected constructor(ctx: Context, token: unknown, expiresAt: unknown, leaseSeconds: number, startedMs: number) {
    if (typeof token !== 'string') throw new TypeError('malformed answer: no token');
    this.ctx = ctx;
    this.#token = token;
    this.expiresAt = parseTimestamp(expiresAt);
    this.leaseSeconds = leaseSeconds;
    this.#clock = new LeaseClock(startedMs, leaseSeconds);
  }

  /** What the lease is, for messages: `claim "k"`, `grant gr_...`. */
  protected abstract describe(): string;
  /** The path (after the space) that renews it, and the one that releases it. */
  protected abstract path(action: 'renew' | 'release'): string;

  /** @internal Start the renewal (with the client's other leases); the client stops it on close. */
  protected startRenewal(): void {
    this.#kept = new Kept(
      this.ctx,
      this.#clock,
      this.leaseSeconds,
      this.describe(),
      (seconds) => ({ suffix: this.path('renew'), body: { token: this.#token, leaseSeconds: seconds } }),
      (body) => {
        this.expiresAt = parseTimestamp(required(body, 'leaseExpiresAt'));
      },
      (err) => this.#markLost(err),
    );
    this.ctx.holdings.renewals.add(this.#kept);
    this.ctx.live.add(this);
  }

  /** The fencing token: opaque, compare it for equality only. */
  token(): string {
    return this.#token;
  }

  /** Aborted (with a `LeaseLostError`) when the lease is lost; pass it to work that should stop then. */
  get signal(): AbortSignal {
    this.#checkClock();
    return this.#lost.signal;
  }

  get isLost(): boolean {
    this.#checkClock();
    return this.#lostError !== null;
  }

  /** Why the lease was lost, or null. */
  get lostError(): LeaseLostError | null {
    this.#checkClock();
    return this.#lostError;
  }

  /** Until when (monotonic ms, `performance.now()`) this process may act on the lease. */
  get deadlineMs(): number {
    return this.#clock.deadlineMs;
  }

  /** Throw `LeaseLostError` if the lease is lost; a cheap check for long loops. */
  throwIfLost(): void {
    this.#checkClock();
    if (this.#lostError !== null) throw this.#lostError;
  }

  /** Renew now. Without `leaseSeconds` the server extends by the lease's own length. A lease
   * already lost throws `LeaseLostError`; a stale answer marks it lost. */
  async renew(leaseSeconds?: number): Promise<void> {
    this.throwIfLost();
    const sentMs = performance.now();
    try {
      const reply = await this.ctx.call('POST', this.path('renew'), { body: { token: this.#token, leaseSeconds } });
      this.expiresAt = parseTimestamp(required(reply.body, 'leaseExpiresAt'));
    } catch (err) {
      if (err instanceof LeaseLostError) this.#markLost(err);
      throw err;
    }
    this.#clock.renewed(sentMs, leaseSeconds ?? this.leaseSeconds);
  }

  /** Stop renewing and give the lease back. A second call sends nothing. A `LeaseLostError` answer
   * (the lease had already gone: its token is stale) is not thrown, but marks the lease lost:
   * `isLost` is true from then on. Through an outage (no answer, a 503) the release is sent again,
   * with one idempotency key, until the lease's deadline by this process's clock; then the last
   * error is thrown (the lease runs out on the server by itself). */
  async release(observation?: unknown): Promise<void> {
    await this.releaseRefused(observation);
  }

  /**
   * @internal `release()`, resolving to the refusal that said the lease had gone before it (a
   * stale token), having marked the lease lost, or null. A run that ended or a lease the server no
   * longer knows also marks it lost, and is thrown; so is anything else (the server unreachable
   * until the lease's deadline). With `rideThrough` false, one call only (its request layer's
   * quick tries): for a caller that gave up and should not wait out a long lease.
   */
  async releaseRefused(observation?: unknown, rideThrough = true): Promise<LeaseLostError | null> {
    if (this.#released) return null;
    this.#released = true;
    this.#stopRenewal();
    const body = { token: this.#token, observation };
    const send = (idempotencyKey: string) => this.ctx.call('POST', this.path('release'), { body, idempotencyKey, batch: true });
    try {
      // Given up after the request layer's few quick tries, the key stayed held, renewed by no
      // one, for the whole lease: sent again (one key) until the lease's deadline, as a settlement.
      await (rideThrough ? sendThrough(this.#clock, send) : send(newIdempotencyKey()));
    } catch (err) {
      if (err instanceof LeaseLostError || err instanceof ScopeCancelledError || err instanceof NotFoundError) {
        this.#markLost(err);
      }
      if (err instanceof LeaseLostError) return err;
      throw err;
    }
    return null;
  }

  /** @internal The client is closing: the lease counts as lost from here on and will expire. */
  abandon(reason: Error): void {
    this.#stopRenewal();
    this.#markLost(reason);
  }

  #stopRenewal(): void {
    this.ctx.live.delete(this);
    const kept = this.#kept;
    this.#kept = null;
    if (kept !== null) this.ctx.holdings.renewals.remove(kept);
  }

  /** A held lease whose deadline passed is lost, timer or not (a paused process wakes up late). */
  #checkClock(): void {
    if (this.#lostError === null && !this.#released && this.#clock.passed) {
      this.#markLost(renewalsExhausted(this.describe(), null));
    }
  }

  #markLost(cause: unknown): void {
    if (this.#lostError !== null) return;
    this.#lostError =
      cause instanceof LeaseLostError
        ? cause
        : new LeaseLostError('STALE_CLAIM', 409, `${this.describe()} was lost`, { cause });
    this.#stopRenewal();
    this.#lost.abort(this.#lostError);
  }
}

/**
 * The lease a grant gave to a caller whose `signal` aborted while the request was on its way:
 * given back at once, and the abort's reason thrown. A request that does not wait on the server
 * (an acquire without `waitMs`) is not cut when the caller's signal aborts, because the server
 * applies it even when the connection is cut (the client would never learn of the grant, and the
 * key or the units would stay held, renewed by no one, until the lease ran out): its answer is
 * awaited (up to `ABORT_GRACE_MS` more, `withGrace`), and then this gives back what it granted. Resolves to the lease when the signal did not abort.
 */
export async function keepUnlessAborted<L extends HeldLease>(lease: L, signal: AbortSignal | undefined): Promise<L> {
  if (signal?.aborted) {
    await lease.releaseRefused(undefined, false).catch(() => undefined);
    throw signal.reason;
  }
  return lease;
}

/**
 * Release after work that ended normally: resolves to the reason the lease did not last until
 * then (lost before, or refused by the server at the release: a stale token, a run that ended, a
 * lease it no longer knows), or null. A release that cannot reach the server says nothing about
 * the lease: null, and the lease expires on its own.
 */
export async function releaseAfterWork(lease: HeldLease): Promise<LeaseLostError | null> {
  if (lease.isLost) {
    await lease.release().catch(() => undefined);
    return lease.lostError;
  }
  try {
    await lease.releaseRefused();
  } catch {
    // Unreachable, or refused in a way that marked the lease lost (read below).
  }
  return lease.isLost ? lease.lostError : null;
}

/**
 * Run `fn(lease)` while the lease is renewed, then release it. A lost lease does not interrupt
 * `fn`; once `fn` returns, `LeaseLostError` (`STALE_CLAIM`, the loss as its cause) is thrown
 * instead of its result, and so it is when the release is refused as stale. An error `fn` throws
 * goes up as it is; a release that cannot reach the server is ignored (the lease expires anyway).
 */
export async function runHeld<L extends HeldLease, T>(lease: L, fn: (lease: L) => T | PromiseLike<T>, what: string): Promise<T> {
  let result: T;
  try {
    result = await fn(lease);
  } catch (err) {
    await lease.release().catch(() => undefined);
    throw err;
  }
  const lost = await releaseAfterWork(lease);
  if (lost !== null) {
    throw new LeaseLostError('STALE_CLAIM', 409, `${what} was lost during run()`, { cause: lost });
  }
  return result;
}
