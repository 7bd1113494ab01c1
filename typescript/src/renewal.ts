/**
 * Keeping a lease alive: the local clock of a lease, and the renewal loop of one lease (a once
 * key's). Claims, pool grants and consumed deliveries are renewed by their client's one loop
 * (`renewals.ts`), by the same rules.
 *
 * **The lease's end by this process's clock.** A lease granted or renewed for `leaseSeconds` by a
 * request sent at monotonic time `t` cannot end on the server before `t + leaseSeconds` (the
 * server counts from when it received the request, which is later). So `LeaseClock` keeps that
 * end, less a safety margin (a tenth of the lease, between 0.5 s and 3 s), as the lease's
 * *deadline*: until then the holder may act on it; from then on it counts as lost, whatever the
 * server would say, because another holder may get it soon after. The deadline is read from the
 * monotonic clock whenever it is asked for, so a process that was paused (SIGSTOP, a laptop lid, a
 * long garbage collection) past its lease sees the lease lost as soon as it runs again, before any
 * timer of its own has fired.
 *
 * **The loop** waits an interval, renews, and repeats; one renewal runs at a time, and the first
 * comes after the first interval, not at once. The interval is max(1 s, lease/3) times a random
 * factor in [0.9, 1.1], so a 30 s lease renews every 9-11 s and many workers do not renew in step.
 * It is counted from when the last grant or renewal was *sent* (`LeaseClock.fromMs`), the moment
 * the lease's end counts from, not from when its answer came: counted from the answer, a slow
 * answer (a loaded server, a long fsync) would push the next renewal as late as it was slow and
 * eat into the time left for it, and two slow answers in a row could lose a short lease that
 * each alone would not.
 *
 * **Riding through an outage.** A renewal that gets no answer, or a transient one (the server
 * unavailable or restarting, a rate limit, a 5xx: `isTransient`), is tried again with backoff
 * (0.25 s doubling to 2 s), each try bounded by the deadline, until one gets through or the
 * deadline passes. A server that restarts within the lease keeps it (it gives leases alive at the
 * crash a grace period), so the holder never notices. The lease is lost when the deadline passes
 * without a successful renewal (`LEASE_RENEWALS_EXHAUSTED`, with the last error as its cause), or at
 * once when the server says so (any other error: a stale token, the run cancelled, the lease
 * unknown). It never re-acquires: by then another holder may own the key, and only the server
 * knows. If in doubt, treat the lease as lost.
 *
 * The timers are unref'd: a lease does not keep a process alive by itself (the work holding it
 * does), just as an idle keep-alive socket does not.
 */

import { LeaseLostError, isTransient } from './errors.js';
import { newIdempotencyKey } from './request.js';
import { nowMs, pause, uniform, withTimeout } from './time.js';

export const INTERVAL_MIN_MS = 1000;
const JITTER_MIN = 0.9;
const JITTER_MAX = 1.1;
/** Pauses between two tries of a renewal that got no answer (doubling from min to max). */
export const RETRY_MIN_MS = 250;
export const RETRY_MAX_MS = 2000;
const MARGIN_FRACTION = 0.1;
const MARGIN_MIN_MS = 500;
const MARGIN_MAX_MS = 3000;

/** Milliseconds until the next renewal of a lease of `leaseSeconds`. */
export function renewalIntervalMs(leaseSeconds: number): number {
  return Math.max(INTERVAL_MIN_MS, (leaseSeconds * 1000) / 3) * uniform(JITTER_MIN, JITTER_MAX);
}

/** How long before a lease's end (by this process's clock) it already counts as lost. */
export function safetyMarginMs(leaseSeconds: number): number {
  return Math.min(MARGIN_MAX_MS, Math.max(MARGIN_MIN_MS, leaseSeconds * 1000 * MARGIN_FRACTION));
}

/** How long after granting a lease a server that held the request (a long poll) is taken to
 * have answered: the grant is counted from the answer less this, not from the send. */
export const HELD_ANSWER_MS = 1000;

/**
 * When a lease granted by a request sent at `sentMs` and answered at `answeredMs` started, on
 * this process's clock: the send for a plain request (the server counts from later), the answer
 * less `HELD_ANSWER_MS` for a request the server may have held (`held`): counting from the send
 * would take up to the whole hold off the lease.
 */
export function grantStartMs(sentMs: number, answeredMs: number, held: boolean): number {
  return held ? Math.max(sentMs, answeredMs - HELD_ANSWER_MS) : sentMs;
}

/** A lease's deadline on the monotonic clock: see the module comment. */
export class LeaseClock {
  #deadlineMs: number;
  #fromMs: number;

  /** `startedMs`: when the request that granted the lease was sent (monotonic ms). */
  constructor(startedMs: number, leaseSeconds: number) {
    this.#fromMs = startedMs;
    this.#deadlineMs = startedMs + leaseSeconds * 1000 - safetyMarginMs(leaseSeconds);
  }

  /** A renewal for `leaseSeconds`, sent at `sentMs`, was accepted: the server counts from then. */
  renewed(sentMs: number, leaseSeconds: number): void {
    this.#fromMs = sentMs;
    this.#deadlineMs = sentMs + leaseSeconds * 1000 - safetyMarginMs(leaseSeconds);
  }

  /** When (monotonic ms) the grant or renewal the deadline counts from was sent: the next
   * renewal is timed from here. */
  get fromMs(): number {
    return this.#fromMs;
  }

  /** When the next renewal of a lease of `leaseSeconds` is due: an interval after `fromMs`, not
   * before `now`, never after the deadline. */
  nextRenewalMs(leaseSeconds: number, now: number = nowMs()): number {
    return Math.min(Math.max(now, this.#fromMs + renewalIntervalMs(leaseSeconds)), this.#deadlineMs);
  }

  /** Until when (monotonic ms) the holder may act on the lease. */
  get deadlineMs(): number {
    return this.#deadlineMs;
  }

  get remainingMs(): number {
    return this.#deadlineMs - nowMs();
  }

  get passed(): boolean {
    return nowMs() >= this.#deadlineMs;
  }
}

/** The error of a lease whose deadline passed with no renewal getting through. */
export function renewalsExhausted(what: string, cause: unknown): LeaseLostError {
  return new LeaseLostError(
    'LEASE_RENEWALS_EXHAUSTED',
    409,
    `${what}: no renewal got through before the lease's end by this process's clock`,
    { cause },
  );
}

export type RenewFn = (leaseSeconds: number, signal: AbortSignal) => Promise<unknown>;

export class Renewal {
  readonly #stop = new AbortController();
  readonly #done: Promise<void>;
  readonly #clock: LeaseClock;
  readonly #what: string;
  readonly #onLost: (err: unknown) => void;
  #watchdog: NodeJS.Timeout | null = null;
  #lastError: unknown = null;
  #lost = false;
  /** When the last renewal was accepted (monotonic ms); the start counts as one. */
  lastRenewedAt = nowMs();

  /** `what` names the lease in errors ("claim \"k\""); `onLost` is called at most once. */
  constructor(renew: RenewFn, leaseSeconds: number, clock: LeaseClock, what: string, onLost: (err: unknown) => void) {
    this.#clock = clock;
    this.#what = what;
    this.#onLost = onLost;
    this.#arm();
    this.#done = this.#loop(renew, leaseSeconds);
  }

  async #loop(renew: RenewFn, leaseSeconds: number): Promise<void> {
    const stop = this.#stop.signal;
    while (!stop.aborted && !this.#lost) {
      await pause(this.#clock.nextRenewalMs(leaseSeconds) - nowMs(), { signal: stop, unref: true });
      let backoffMs = RETRY_MIN_MS;
      for (;;) {
        if (stop.aborted || this.#lost) return;
        const leftMs = this.#clock.remainingMs;
        if (leftMs <= 0) return this.#lose(renewalsExhausted(this.#what, this.#lastError));
        // Each try ends at the deadline at the latest: an answer after it could not be used.
        const attempt = withTimeout(stop, leftMs);
        const sentMs = nowMs();
        try {
          await renew(leaseSeconds, attempt.signal);
        } catch (err) {
          // Stopping aborts a renewal in flight; that is the holder letting go, not a loss.
          if (stop.aborted || this.#lost) return;
          if (attempt.signal.aborted) return this.#lose(renewalsExhausted(this.#what, this.#lastError ?? err));
          if (!isTransient(err)) return this.#lose(err);
          this.#lastError = err;
          await pause(Math.min(backoffMs, Math.max(this.#clock.remainingMs, 0)), { signal: stop, unref: true });
          backoffMs = Math.min(backoffMs * 2, RETRY_MAX_MS);
          continue;
        } finally {
          attempt.dispose();
        }
        if (this.#lost) return;
        this.#clock.renewed(sentMs, leaseSeconds);
        this.#lastError = null;
        this.lastRenewedAt = nowMs();
        this.#arm();
        break;
      }
    }
  }

  /** A timer at the deadline, so the loss is reported then even while a renewal hangs. */
  #arm(): void {
    if (this.#watchdog !== null) clearTimeout(this.#watchdog);
    this.#watchdog = setTimeout(() => {
      this.#watchdog = null;
      if (this.#stop.signal.aborted || this.#lost) return;
      if (this.#clock.passed) this.#lose(renewalsExhausted(this.#what, this.#lastError));
      else this.#arm();
    }, Math.max(0, this.#clock.remainingMs) + 1);
    this.#watchdog.unref();
  }

  #lose(err: unknown): void {
    if (this.#lost) return;
    this.#lost = true;
    if (this.#watchdog !== null) clearTimeout(this.#watchdog);
    this.#onLost(err);
  }

  /** Stop renewing; resolves once no renewal is in flight any more. */
  stop(): Promise<void> {
    this.#stop.abort();
    if (this.#watchdog !== null) clearTimeout(this.#watchdog);
    return this.#done;
  }
}

/**
 * A call about a lease (a settlement, a release) that cannot reach the server, or finds it
 * unavailable (`isTransient`), is tried again with one idempotency key until `clock`'s deadline:
 * a try that did reach the server is answered as it was then, never applied twice. Anything else,
 * or the deadline passing, throws.
 */
export async function rideThrough<T>(clock: { readonly remainingMs: number }, send: (key: string) => Promise<T>): Promise<T> {
  const key = newIdempotencyKey();
  let backoffMs = RETRY_MIN_MS;
  for (;;) {
    try {
      return await send(key);
    } catch (err) {
      const leftMs = clock.remainingMs;
      if (!isTransient(err) || leftMs <= 0) throw err;
      await pause(Math.min(backoffMs, leftMs));
      backoffMs = Math.min(backoffMs * 2, RETRY_MAX_MS);
    }
  }
}
