/**
 * Claims: exclusive, leased, fenced ownership of a key inside a scope.
 *
 * `ClaimRef` names a key in a scope and sends nothing until asked. `acquire()` gives a `ClaimLease`
 * that renews itself in the background (see `renewal.ts`: through an outage, until the lease's end
 * by this process's clock) until `release()`. A lost lease is lost for good: `isLost` turns true
 * and `signal` aborts with a `LeaseLostError` (see `lease.ts`). The
 * server is the authority on ownership; the lease only reports what the client last learned, so
 * work that must not overlap another owner's should also carry `lease.token()` to the system it
 * writes to.
 *
 * `run(fn)` is the safe way to hold a claim: acquire, run `fn(lease)`, release in a `finally`.
 * Unlike the Python SDK, which cancels the coroutine, a lost lease does **not** interrupt `fn`: a
 * JavaScript function cannot be cancelled from outside, so `run()` aborts `lease.signal`, sets
 * `lease.isLost`, and lets `fn` run until it returns. If `fn` then returns normally, `run()` throws
 * `LeaseLostError` (`STALE_CLAIM`) rather than hand back a result made without ownership; if `fn`
 * throws, its own error goes up.
 */

import type { Context } from './context.js';
import { ConflictError, RateLimitError, RunstateError, waitTimeout } from './errors.js';
import { HeldLease, keepUnlessAborted, required, runHeld } from './lease.js';
import { grantStartMs } from './renewal.js';
import { checkMs, nowMs, pause, uniform, withGrace } from './time.js';

export { parseTimestamp } from './lease.js';

export const DEFAULT_LEASE_SECONDS = 30;
export const DEFAULT_CLAIM_TIMEOUT_MS = 30_000;
/**
 * The longest server-side wait asked for on one acquire. A server that parks claim waits holds the
 * request until the key is free or this passes; one that does not ignores the field and answers at
 * once, and the client loop below waits instead. Either way the caller sees the same behaviour.
 */
export const CLAIM_WAIT_MS_MAX = 30_000;
// Pause between two tries of a `wait: true` acquire (uniform, ms): a held key, then a plan limit.
const HELD_RETRY_MS: [number, number] = [225, 375];
const LIMITED_RETRY_MS: [number, number] = [750, 1250];

export interface AcquireOptions {
  /** 5 to 600; default 30. Renewed in the background at about a third of it. */
  leaseSeconds?: number;
  /** Retry a held key every ~300 ms until `timeoutMs`; default false (throw `CLAIM_HELD` at once). */
  wait?: boolean;
  /** How long `wait: true` keeps trying; default 30 000 ms, then `WaitTimeoutError`. */
  timeoutMs?: number;
  /** Stops a waiting acquire (it rejects with the signal's reason). A try the server answers at
   * once is not cut: its answer is awaited, and a claim it granted is released before the
   * rejection (the server applies a request whose connection was cut all the same). */
  signal?: AbortSignal;
}

export type RunOptions = AcquireOptions;

export type TryAcquireResult = { kind: 'acquired'; lease: ClaimLease } | { kind: 'busy' };

/**
 * Percent-encode a claim key for a path segment: only `A-Za-z0-9_.-~` stay as they are. A key that
 * is `.` or `..` goes as `%2E` or `%2E%2E`: as it is, the URL parser would take it for a dot
 * segment and drop it from the path (RFC 3986 5.2.4), and the request would reach another route.
 */
export function encodeClaimKey(key: string): string {
  if (key === '.' || key === '..') return '%2E'.repeat(key.length);
  return encodeURIComponent(key).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * A name as the last segment of a path that names a resource (`PUT .../by-name/{name}`, `PUT
 * .../runs/{name}`), encoded as a claim key. An empty name is refused here as the server refuses
 * one at create (`VALIDATION_FAILED`, "name must not be empty"): as a path it would end in `/`,
 * reach no route, and come back as a `NotFoundError` saying `no such route`.
 */
export function nameSegment(name: string): string {
  if (typeof name !== 'string') throw new RunstateError('VALIDATION_FAILED', 400, `field 'name' must be a string, got ${typeof name}`);
  if (name === '') throw new RunstateError('VALIDATION_FAILED', 400, 'name must not be empty');
  return encodeClaimKey(name);
}

/**
 * An id given to a handle (`rs.scope(scopeId)`, `run.task(taskId)`...), checked as the handle is made:
 * it stands in the request's path as it is, where an empty one, `.`, `..` or one holding `/`, `?`,
 * `#`, `%`, `\` or a space would name another route (`rs.scope('')` would read the list of scopes).
 * The server's ids are letters, digits and `_`.
 */
export function checkId(field: string, value: string): string {
  if (typeof value !== 'string') throw new RunstateError('VALIDATION_FAILED', 400, `field '${field}' must be a string, got ${typeof value}`);
  if (value === '' || value === '.' || value === '..' || /[\s/?#%\\]/.test(value)) {
    throw new RunstateError('VALIDATION_FAILED', 400, `${field} ${JSON.stringify(value)} is not an id (the server's ids are letters, digits and _)`);
  }
  return value;
}

/** What `forceRelease()` answers: the claim as it was, its token withheld. */
export interface ClaimView {
  key: string;
  scopeId: string;
  token: string | null;
  generation: number;
  holder: string | null;
  holderSession: string | null;
  leaseSeconds: number;
  leaseExpiresAt: string;
  acquiredAt: string;
  released?: boolean;
  releasedAt?: string;
  forced?: boolean;
  reason?: string | null;
  /** Who did it: the API key's id, or `admin`. */
  by?: string | null;
}

/** A claim key in a scope. Cheap to make; each method is one or more requests. */
export class ClaimRef {
  readonly #ctx: Context;
  readonly scopeId: string;
  readonly key: string;

  constructor(ctx: Context, scopeId: string, key: string) {
    this.#ctx = ctx;
    this.scopeId = scopeId;
    this.key = key;
  }

  /**
   * Take the claim. With `wait: false` a held key throws `ConflictError` (`CLAIM_HELD`) at once;
   * with `wait: true` it is tried again every ~300 ms (every ~1 s on `CONCURRENCY_LIMITED`) until
   * it is free or `timeoutMs` has passed, then `WaitTimeoutError` is thrown. Each try is a new
   * logical call with a new idempotency key. Either refusal says who holds the key: the
   * `ConflictError`'s `details` (and the `WaitTimeoutError`'s, from the last try) are the claim's
   * `holder`, `generation` and `leaseExpiresAt`.
   */
  async acquire(options: AcquireOptions = {}): Promise<ClaimLease> {
    const { leaseSeconds = DEFAULT_LEASE_SECONDS, wait = false, timeoutMs = DEFAULT_CLAIM_TIMEOUT_MS, signal } = options;
    checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
    const started = nowMs();
    const coalescer = this.#ctx.requester.coalescer;
    const batching = coalescer !== null && coalescer.busy(this.#ctx.path(''));
    if (wait && timeoutMs > 0 && (batching || signal !== undefined)) {
      // A try without a wait first, when the client's calls are going out in batches now (it rides
      // in the next one: most keys are free, and only a held key costs a request of its own), or
      // when a signal may abort the acquire: a free key is answered at once, so the try is not cut
      // and a grant it came back with after the abort is released; only a held key is then waited
      // for in a try the server holds, which the signal cuts.
      const body = { key: this.key, scopeId: this.scopeId, holder: this.#ctx.holder, holderSession: this.#ctx.session, leaseSeconds };
      const sentMs = nowMs();
      signal?.throwIfAborted();
      try {
        // Not cut by the signal: the server grants it all the same (see `keepUnlessAborted`).
        const reply = await withGrace(signal, (grace) => this.#ctx.call('POST', '/claims', { body, batch: true, signal: grace }));
        return await keepUnlessAborted(ClaimLease.start(this.#ctx, this.key, reply.body, leaseSeconds, sentMs), signal);
      } catch (err) {
        // A held key goes on to a try the server holds at once; a plan's limit first waits as the
        // loop below waits for it.
        if (err instanceof RateLimitError && err.code === 'CONCURRENCY_LIMITED') {
          await pause(Math.min(uniform(...LIMITED_RETRY_MS), Math.max(0, timeoutMs - (nowMs() - started))), { signal });
          signal?.throwIfAborted();
        } else if (!(err instanceof ConflictError && err.code === 'CLAIM_HELD')) {
          throw err;
        }
      }
    }
    for (;;) {
      const remainingMs = Math.floor(timeoutMs - (nowMs() - started));
      const waitMs = wait ? Math.min(CLAIM_WAIT_MS_MAX, Math.max(remainingMs, 0)) : 0;
      const body = {
        key: this.key,
        scopeId: this.scopeId,
        holder: this.#ctx.holder,
        holderSession: this.#ctx.session,
        leaseSeconds,
        waitMs: waitMs > 0 ? waitMs : undefined,
      };
      let reply;
      const sentMs = nowMs();
      signal?.throwIfAborted();
      try {
        // A try the server may hold (waitMs) is cut by the signal: the server gives up a held wait
        // whose connection closed. One it answers at once is not (see `keepUnlessAborted`).
        reply = await withGrace(signal, (grace) => this.#ctx.call('POST', '/claims', { body, waitMs, signal: waitMs > 0 ? signal : grace, batch: waitMs === 0 }));
      } catch (err) {
        const retryable =
          (err instanceof ConflictError && err.code === 'CLAIM_HELD') ||
          (err instanceof RateLimitError && err.code === 'CONCURRENCY_LIMITED');
        if (!wait || !retryable) throw err;
        const elapsedMs = nowMs() - started;
        if (elapsedMs >= timeoutMs) {
          // Who held it at the last try, so the caller need not read it again.
          const last = err as RunstateError;
          throw waitTimeout(`timed out waiting for claim ${JSON.stringify(this.key)} after ${timeoutMs} ms`, err, last.code === 'CLAIM_HELD' ? last.details : undefined);
        }
        const [low, high] = (err as RunstateError).code === 'CONCURRENCY_LIMITED' ? LIMITED_RETRY_MS : HELD_RETRY_MS;
        // Never sleep past the deadline: the last try comes when the time is up.
        await pause(Math.min(uniform(low, high), timeoutMs - elapsedMs), { signal });
        signal?.throwIfAborted();
        continue;
      }
      return keepUnlessAborted(ClaimLease.start(this.#ctx, this.key, reply.body, leaseSeconds, grantStartMs(sentMs, nowMs(), waitMs > 0)), signal);
    }
  }

  /** `{ kind: 'acquired', lease }`, or `{ kind: 'busy' }` when another holder has it. Other errors,
   * `CONCURRENCY_LIMITED` included, are thrown. */
  async tryAcquire(options: AcquireOptions = {}): Promise<TryAcquireResult> {
    try {
      return { kind: 'acquired', lease: await this.acquire(options) };
    } catch (err) {
      if (err instanceof ConflictError && err.code === 'CLAIM_HELD') return { kind: 'busy' };
      throw err;
    }
  }

  /**
   * Acquire, return `fn(lease)` while the lease is renewed, release in a `finally`. A lost lease
   * aborts `lease.signal` and sets `lease.isLost` but does not interrupt `fn`; once `fn` returns,
   * `run()` throws `LeaseLostError`, as it does when the release is refused as stale (the token
   * went stale while `fn` ran: an operator forced the key free, or the run ended); `isLost` is then
   * true. An error `fn` throws goes up as it is. A release that cannot reach the server is ignored:
   * the lease expires anyway.
   */
  async run<T>(fn: (lease: ClaimLease) => T | PromiseLike<T>, options: RunOptions = {}): Promise<T> {
    return runHeld(await this.acquire(options), fn, `lease for ${JSON.stringify(this.key)}`);
  }

  /**
   * An operator's release of whoever holds this key now, without their token: the key is free at
   * once, the holder's token is refused from then on (its SDK sees the lease lost at its next
   * renewal), and the next holder gets the next generation. Resolves to the claim as it was, with
   * `token: null`. A key not held throws `ConflictError` (`CONFLICT`); one never claimed here,
   * `NotFoundError`. The admin key may call it too.
   */
  async forceRelease(reason?: string): Promise<ClaimView> {
    const reply = await this.#ctx.call('POST', `/claims/${encodeClaimKey(this.key)}/force-release`, {
      body: { scopeId: this.scopeId, reason },
    });
    return reply.body as ClaimView;
  }
}

/** A held claim: `generation`, `token()`, loss reporting, `renew()` and `release()` (see `lease.ts`). */
export class ClaimLease extends HeldLease {
  readonly key: string;
  /** Grows with each new owner of the key; the value to compare, unlike the opaque token. */
  readonly generation: number;

  private constructor(ctx: Context, key: string, grant: any, leaseSeconds: number, startedMs: number) {
    super(ctx, required(grant, 'token'), required(grant, 'leaseExpiresAt'), leaseSeconds, startedMs);
    this.key = key;
    this.generation = required(grant, 'generation');
  }

  /** @internal */
  static start(ctx: Context, key: string, grant: any, leaseSeconds: number, startedMs: number): ClaimLease {
    const lease = new ClaimLease(ctx, key, grant, leaseSeconds, startedMs);
    lease.startRenewal();
    return lease;
  }

  protected describe(): string {
    return `lease for ${JSON.stringify(this.key)}`;
  }

  protected path(action: 'renew' | 'release'): string {
    return `/claims/${encodeClaimKey(this.key)}/${action}`;
  }
}
