/**
 * Keeping a lease alive: the renewal loop shared by claims and consumed deliveries.
 *
 * The loop waits an interval, renews, and repeats; one renewal runs at a time, and the first one
 * comes after the first interval, not at once. The interval is max(1 s, lease/3) times a random
 * factor in [0.9, 1.1], so a 30 s lease renews every 9-11 s and many workers do not renew in step.
 *
 * It fails closed: the first error of any kind (a stale token, a 429, a transport failure after the
 * retries, a malformed answer) ends the loop for good and reports the lease lost. It never
 * re-acquires: by then another holder may own the key, and only the server knows. If in doubt,
 * treat the lease as lost.
 *
 * The timer is unref'd: a lease does not keep a process alive by itself (the work holding it does),
 * just as an idle keep-alive socket does not.
 */

import { nowMs, pause, uniform } from './time.js';

export const INTERVAL_MIN_MS = 1000;
const JITTER_MIN = 0.9;
const JITTER_MAX = 1.1;

/** Milliseconds until the next renewal of a lease of `leaseSeconds`. */
export function renewalIntervalMs(leaseSeconds: number): number {
  return Math.max(INTERVAL_MIN_MS, (leaseSeconds * 1000) / 3) * uniform(JITTER_MIN, JITTER_MAX);
}

export type RenewFn = (leaseSeconds: number, signal: AbortSignal) => Promise<unknown>;

export class Renewal {
  readonly #stop = new AbortController();
  readonly #done: Promise<void>;
  /** When the last renewal was accepted (monotonic ms); the start counts as one. */
  lastRenewedAt = nowMs();

  constructor(renew: RenewFn, leaseSeconds: number, onLost: (err: unknown) => void) {
    this.#done = this.#loop(renew, leaseSeconds, onLost);
  }

  async #loop(renew: RenewFn, leaseSeconds: number, onLost: (err: unknown) => void): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      await pause(renewalIntervalMs(leaseSeconds), { signal, unref: true });
      if (signal.aborted) return;
      try {
        await renew(leaseSeconds, signal);
      } catch (err) {
        // Stopping aborts a renewal in flight; that is the holder letting go, not a loss.
        if (!signal.aborted) onLost(err);
        return;
      }
      this.lastRenewedAt = nowMs();
    }
  }

  /** Stop renewing; resolves once no renewal is in flight any more. */
  stop(): Promise<void> {
    this.#stop.abort();
    return this.#done;
  }
}
