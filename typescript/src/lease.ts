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
 * result made without ownership; if `fn` throws, its own error goes up.
 */

import type { Context, Stoppable } from './context.js';
import { LeaseLostError } from './errors.js';
import { LeaseClock, renewalsExhausted } from './renewal.js';
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

  /** Stop renewing and give the lease back. A second call sends nothing; a `LeaseLostError`
   * answer (the lease had already gone) is ignored. */
  async release(observation?: unknown): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    this.#stopRenewal();
    try {
      await this.ctx.call('POST', this.path('release'), { body: { token: this.#token, observation }, batch: true });
    } catch (err) {
      if (!(err instanceof LeaseLostError)) throw err;
    }
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
 * Run `fn(lease)` while the lease is renewed, then release it (errors from the release are
 * ignored: the lease expires anyway). A lost lease does not interrupt `fn`; once `fn` returns,
 * `LeaseLostError` (`STALE_CLAIM`, the loss as its cause) is thrown instead of its result.
 */
export async function runHeld<L extends HeldLease, T>(lease: L, fn: (lease: L) => T | PromiseLike<T>, what: string): Promise<T> {
  try {
    const result = await fn(lease);
    if (lease.isLost) {
      throw new LeaseLostError('STALE_CLAIM', 409, `${what} was lost during run()`, { cause: lease.lostError });
    }
    return result;
  } finally {
    await lease.release().catch(() => undefined);
  }
}
