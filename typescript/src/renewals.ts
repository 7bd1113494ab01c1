/**
 * Every lease of a client renewed by one loop (the Python SDK's `Renewals`, rule for rule).
 *
 * A client and its views (`withSpace`, `withHolder`) keep their leases alive together: claims,
 * pool grants, and the deliveries `consume()` holds (those its handlers work on and those taken
 * ahead by a prefetch). When one lease is due, every other lease of the client due within half of
 * its own interval (`GATHER_SHARE`) goes with it: renewing early only moves a lease's end on, and
 * it gathers a client's renewals into one request per space per interval instead of one per
 * lease. That request is one `POST /v1/spaces/{space}/batch` (`batch.ts`), answered per lease, so
 * one lease refused (a stale token, its run ended) is lost alone and the others go on. A lone
 * lease, a client made with `batchCalls: false`, and a server without the batch route get one
 * request per lease, as before.
 *
 * Each lease keeps the rules of `renewal.ts` to the letter: its first renewal an interval after it
 * was taken, its next an interval after each accepted renewal was sent; through an outage (`isTransient`), tried again
 * after 0.25 s doubling to 2 s, until its end by this process's clock (less the margin), where it
 * is lost (`LEASE_RENEWALS_EXHAUSTED`); lost at once on any other refusal; never sent once past its
 * end, and an answer that comes after that end does not bring it back.
 *
 * The loop is one unref'd timer, set for the next moment something is due: it does not keep a
 * process alive by itself (the work holding a lease does).
 */

import { Operation, batchUnsupported, sendBatch, twin } from './batch.js';
import type { Context } from './context.js';
import { RunstateError, isTransient } from './errors.js';
import { INTERVAL_MIN_MS, RETRY_MAX_MS, RETRY_MIN_MS, renewalsExhausted, type LeaseClock } from './renewal.js';
import { newIdempotencyKey, type Reply } from './request.js';
import { nowMs, withTimeout } from './time.js';

/** A lease that is due is renewed with every other lease due within this share of its interval. */
export const GATHER_SHARE = 0.5;

/** The renewal of a lease as a request: its path below the space, and its body. */
export interface RenewalRequest {
  suffix: string;
  body: Record<string, unknown>;
}

/**
 * One lease a client keeps alive: how to renew it, its local clock, and what to do once it is lost.
 * `request(seconds)` gives the renewal's path and body; `onReply(body)` reads the answer (a
 * malformed one throws, which loses the lease as any other refusal would) and may give the seconds
 * the server granted; `onLost(err)` is called once, when the lease is lost.
 */
export class Kept {
  readonly ctx: Context;
  readonly clock: LeaseClock;
  readonly leaseSeconds: number;
  readonly what: string;
  readonly request: (leaseSeconds: number) => RenewalRequest;
  readonly onReply: (body: any) => number | void;
  readonly onLost: (err: unknown) => void;
  /** When it is next renewed (monotonic ms): an interval after the last answer, or after a pause. */
  due = 0;
  /** In an outage: `due` is the next try. */
  retrying = false;
  inFlight = false;
  backoffMs = RETRY_MIN_MS;
  /** The last failed try's error, the cause of a loss by the clock. */
  last: unknown = null;

  constructor(
    ctx: Context,
    clock: LeaseClock,
    leaseSeconds: number,
    what: string,
    request: (leaseSeconds: number) => RenewalRequest,
    onReply: (body: any) => number | void,
    onLost: (err: unknown) => void,
  ) {
    this.ctx = ctx;
    this.clock = clock;
    this.leaseSeconds = leaseSeconds;
    this.what = what;
    this.request = request;
    this.onReply = onReply;
    this.onLost = onLost;
  }
}

/** The leases one client (and its views) keeps alive: see the module comment. */
export class Renewals {
  readonly #kept = new Set<Kept>();
  // Aborts the renewals on their way when the client closes.
  #closing = new AbortController();
  #timer: NodeJS.Timeout | null = null;
  #timerAt = Infinity;
  /** Renewal requests sent, and leases renewed by them (for tests and the bench). */
  requests = 0;
  renewed = 0;

  get size(): number {
    return this.#kept.size;
  }

  /** Keep `kept` alive from now: its first renewal comes an interval from now. */
  add(kept: Kept): void {
    kept.due = kept.clock.nextRenewalMs(kept.leaseSeconds);
    this.#kept.add(kept);
    this.#schedule(kept.due);
  }

  /** Stop renewing `kept` (released, settled, given back): an answer on its way is ignored. */
  remove(kept: Kept): void {
    this.#kept.delete(kept);
    if (this.#kept.size === 0) this.#clearTimer();
  }

  /** Stop every renewal (the client closes); renewals on their way are abandoned. */
  close(): void {
    this.#kept.clear();
    this.#clearTimer();
    this.#closing.abort(new RunstateError('CLIENT_CLOSED', 0, 'the client was closed'));
    this.#closing = new AbortController();
  }

  #schedule(at: number): void {
    if (at >= this.#timerAt) return;
    this.#clearTimer();
    this.#timerAt = at;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#timerAt = Infinity;
      this.#tick();
    }, Math.max(0, at - nowMs()));
    this.#timer.unref();
  }

  #clearTimer(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerAt = Infinity;
  }

  #lose(kept: Kept, err: unknown): void {
    if (!this.#kept.delete(kept)) return;
    kept.onLost(err);
  }

  /** Lose what ran out, send what is due, and set the timer for the next thing to do. */
  #tick(): void {
    const now = nowMs();
    const due: Kept[] = [];
    let wakeAt = Infinity;
    for (const kept of [...this.#kept]) {
      const clock = kept.clock;
      if (kept.inFlight || kept.retrying) {
        if (now >= clock.deadlineMs) {
          // The try on its way, or the pause after a failed one, reached the end.
          this.#lose(kept, renewalsExhausted(kept.what, kept.last));
          continue;
        }
        if (kept.inFlight) {
          wakeAt = Math.min(wakeAt, clock.deadlineMs);
          continue;
        }
      }
      if (now >= kept.due) {
        if (!kept.retrying && clock.passed) {
          // Paused, or starved, past the end: nothing may be sent as its holder now.
          this.#lose(kept, renewalsExhausted(kept.what, null));
          continue;
        }
        due.push(kept);
      } else {
        wakeAt = Math.min(wakeAt, kept.due, clock.deadlineMs);
      }
    }
    if (due.length > 0) {
      const chosen = new Set(due);
      for (const kept of this.#kept) {
        if (chosen.has(kept) || kept.inFlight || kept.retrying || kept.clock.passed) continue;
        if (kept.due - now <= Math.max(INTERVAL_MIN_MS, (kept.leaseSeconds * 1000) / 3) * GATHER_SHARE) due.push(kept);
      }
      const bySpace = new Map<string, Kept[]>();
      for (const kept of due) {
        kept.inFlight = true;
        wakeAt = Math.min(wakeAt, kept.clock.deadlineMs);
        const group = bySpace.get(kept.ctx.spaceId);
        if (group === undefined) bySpace.set(kept.ctx.spaceId, [kept]);
        else group.push(kept);
      }
      for (const group of bySpace.values()) void this.#send(group);
    }
    if (wakeAt < Infinity) this.#schedule(wakeAt);
  }

  /** One request for the group (one lease alone, or a batch), then each lease's answer. */
  async #send(group: Kept[]): Promise<void> {
    const sentMs = nowMs();
    const closing = this.#closing.signal;
    const ctx = group[0]!.ctx;
    const coalescer = ctx.requester.coalescer;
    let answers: Array<Reply | unknown>;
    if (group.length > 1 && coalescer !== null && !coalescer.unsupported) {
      // An answer is of use only until the last of its leases' ends.
      const bound = withTimeout(closing, Math.max(...group.map((kept) => kept.clock.remainingMs)));
      try {
        const operations = group.map((kept) => {
          const { suffix, body } = kept.request(kept.leaseSeconds);
          return new Operation('POST', suffix, body, newIdempotencyKey());
        });
        this.requests += 1;
        answers = await sendBatch(ctx.requester, ctx.path(''), operations, bound.signal);
      } catch (err) {
        if (batchUnsupported(err)) {
          coalescer.unsupported = true;
          answers = await this.#oneByOne(group);
        } else if (ranOut(bound.signal, closing)) {
          answers = group.map((kept) => renewalsExhausted(kept.what, kept.last ?? err));
        } else {
          answers = group.map(() => twin(err));
        }
      } finally {
        bound.dispose();
      }
    } else {
      answers = await this.#oneByOne(group);
    }
    const now = nowMs();
    group.forEach((kept, index) => this.#answered(kept, answers[index], sentMs, now));
    this.#tick();
  }

  /** Each lease's renewal as its own request, all at once. */
  async #oneByOne(group: Kept[]): Promise<Array<Reply | unknown>> {
    this.requests += group.length;
    const closing = this.#closing.signal;
    return Promise.all(
      group.map(async (kept) => {
        const bound = withTimeout(closing, kept.clock.remainingMs);
        try {
          const { suffix, body } = kept.request(kept.leaseSeconds);
          return await kept.ctx.call('POST', suffix, { body, signal: bound.signal });
        } catch (err) {
          if (ranOut(bound.signal, closing)) return renewalsExhausted(kept.what, kept.last ?? err);
          return err instanceof Error ? err : new Error(String(err));
        } finally {
          bound.dispose();
        }
      }),
    );
  }

  #answered(kept: Kept, answer: Reply | unknown, sentMs: number, now: number): void {
    kept.inFlight = false;
    if (!this.#kept.has(kept)) return; // released, settled, lost or closed meanwhile
    if (now >= kept.clock.deadlineMs) {
      // Its end passed while the request was on its way: lost, whatever the answer says.
      this.#lose(kept, renewalsExhausted(kept.what, answer instanceof Error ? answer : kept.last));
      return;
    }
    let error: unknown = answer instanceof Error ? answer : null;
    let granted: number | void = undefined;
    if (error === null) {
      try {
        granted = kept.onReply((answer as Reply).body);
      } catch (err) {
        error = err;
      }
    }
    if (error !== null) {
      if (!isTransient(error)) {
        this.#lose(kept, error);
        return;
      }
      kept.last = error;
      kept.retrying = true;
      kept.due = now + Math.min(kept.backoffMs, Math.max(kept.clock.remainingMs, 0));
      kept.backoffMs = Math.min(kept.backoffMs * 2, RETRY_MAX_MS);
      return;
    }
    kept.clock.renewed(sentMs, typeof granted === 'number' ? granted : kept.leaseSeconds);
    kept.retrying = false;
    kept.backoffMs = RETRY_MIN_MS;
    kept.last = null;
    kept.due = kept.clock.nextRenewalMs(kept.leaseSeconds, now);
    this.renewed += 1;
  }
}

/** The request was abandoned at its leases' end (its bound ran out), not by the client closing. */
function ranOut(bound: AbortSignal, closing: AbortSignal): boolean {
  return bound.aborted && !closing.aborted;
}
