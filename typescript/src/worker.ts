/**
 * The worker loop behind `MailboxRef.consume()` and the run API's `serve()`: `runWorker()`.
 *
 * Its rules (the Python SDK's `_consume.py`, rule for rule):
 *
 * - intake: while not stopped and while fewer than `concurrency` handlers run, long-poll `recv`
 *   (`waitMs`); aborting `signal` aborts the long poll at once. With `prefetch: N`, up to N
 *   deliveries come in one `recv-many`, and up to `max(concurrency, N)` are held: those waiting
 *   for a free handler are renewed with the others, start as handlers free up (oldest first; one
 *   lost meanwhile is told to `onError` and not run), and go back on the queue at once when intake
 *   ends (a stop, an error), not at their lease's end;
 * - each delivery's lease is renewed from its receipt until it is settled or given back, with every
 *   other lease of the client (`renewals.ts`: one request per interval), riding through an outage
 *   until its end by this process's clock. Each runs `handler(data, delivery)`: a return completes
 *   it (unless the handler settled it), a throw calls `onError(err, delivery)` and puts it back (the
 *   server's backoff decides when it is seen again). A completion or requeue that cannot reach the
 *   server is tried again until the lease's end, then goes to `onError` and a `RunstateWarning`
 *   process warning; so does a result that is dropped because the lease was lost first (the
 *   delivery's `signal` aborted then). Nothing is dropped without a word;
 * - the run is watched (`runwatch.ts`): when it is cancelled, completed or expired, `consume()`
 *   stops within a second: no new work, every running handler's `delivery.signal` aborts with a
 *   `ScopeCancelledError`, its delivery is put back (which ends its task `CANCELLED` on the
 *   server), and `consume()` resolves without waiting for the handlers. A JavaScript handler cannot
 *   be cancelled; one that settles later is refused by the server, and nothing more is sent;
 * - on stop: no new work, up to `shutdownTimeoutMs` for the running handlers, then whatever is still
 *   unfinished is put back and its `delivery.signal` aborted. One that finishes later finds its
 *   delivery settled and nothing more is sent;
 * - errors from `recv`: `ScopeCancelledError` ends it as a run end does (above); an error the same
 *   request would get again (`permanent()`: a refused argument, key or name, a configuration error)
 *   is thrown at once (the running handlers are abandoned, not drained: their leases expire); any
 *   other `RunstateError` (no answer, 503, 429, 5xx) is waited out, `pollMs` doubling up to 5 s,
 *   with a `RunstateWarning` when the server stops answering and again when it is back.
 */

import type { Context } from './context.js';
import { AuthenticationError, ConfigError, NotFoundError, RunstateError, ScopeCancelledError } from './errors.js';
import type { ConsumeOptions, Delivery } from './mailboxes.js';
import { watchRunEnd } from './runwatch.js';
import { checkMs, nowMs, pause, timerMs } from './time.js';
import { warn } from './warnings.js';

/** How long an idle `consume()` asks the server to hold an empty recv. */
export const DEFAULT_CONSUME_WAIT_MS = 20_000;
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 30_000;
/** The most deliveries one `recv-many` takes (the server's `maxMessages` maximum). */
export const PREFETCH_MAX = 100;
// An empty long-poll answer faster than this (or than waitMs) is followed by a pollMs pause.
const EARLY_EMPTY_MS = 1000;
// The longest pause between two tries of recv while the server cannot be reached or is busy.
const OUTAGE_PAUSE_MAX_MS = 5000;

/**
 * An error the same request would get again, which no wait cures: a configuration error, or an
 * answer of 4xx but 408 (a body held up on the way), 409 (a state that may change) and 429 (busy):
 * a refused argument (`VALIDATION_FAILED`), key (`AuthenticationError`) or name (`NotFoundError`).
 * The Python SDK's `is_permanent()`.
 */
function permanent(err: unknown): boolean {
  if (err instanceof ConfigError || err instanceof AuthenticationError || err instanceof NotFoundError) return true;
  return err instanceof RunstateError && err.status >= 400 && err.status < 500 && ![408, 409, 429].includes(err.status);
}

/** @internal What `runWorker()` needs besides `ConsumeOptions`: where work comes from and how it
 * is run and completed (`consume()` receives messages, `serve()` admits tasks). */
export interface WorkerLoop<T> extends ConsumeOptions<T> {
  ctx: Context;
  scopeId: string;
  /** Names the loop in warnings. */
  what: string;
  /** One long poll for work (its lease is the loop's `leaseSeconds`); null when there is none. */
  receive(waitMs: number, signal: AbortSignal): Promise<Delivery<T> | null>;
  /** Up to `count` deliveries in one long poll (a prefetch); null when there is none. Without it,
   * work is taken one delivery at a time whatever `prefetch` says. */
  receiveMany?(count: number, waitMs: number, signal: AbortSignal): Promise<Array<Delivery<T>> | null>;
  /** Runs the work of one delivery; its result goes to `complete`. */
  invoke(delivery: Delivery<T>): unknown;
  complete(delivery: Delivery<T>, result: unknown): Promise<void>;
  /** How a failed handler's delivery goes back; default `delivery.retry()`. */
  fail?(delivery: Delivery<T>, err: unknown): Promise<void>;
  /** Called once per delivery after its settlement was accepted, or given up on (`settled` false). */
  after?(delivery: Delivery<T>, result: { ok: boolean; value: unknown; settled: boolean }): Promise<void>;
}

/** @internal The worker loop behind `consume()` and `serve()` (see the module comment). */
export async function runWorker<T>(loop: WorkerLoop<T>): Promise<void> {
  const { concurrency = 1, prefetch = 1, shutdownTimeoutMs = DEFAULT_SHUTDOWN_TIMEOUT_MS, signal: stop } = loop;
  // ConfigError, a RunstateError as every error thrown on purpose (Python raises ValueError here).
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new ConfigError(`concurrency must be a whole number, 1 or more, got ${String(concurrency)}`);
  if (!Number.isInteger(prefetch) || prefetch < 1 || prefetch > PREFETCH_MAX) {
    throw new ConfigError(`prefetch must be a whole number from 1 to ${PREFETCH_MAX}, got ${String(prefetch)}`);
  }
  checkMs(loop.pollMs, 'pollMs', { positive: true });
  checkMs(loop.waitMs, 'waitMs');
  checkMs(loop.shutdownTimeoutMs, 'shutdownTimeoutMs', { infinite: true });
  const running = new Running<T>();
  // Deliveries taken ahead of a free handler (a prefetch), oldest first; their leases are renewed.
  const ahead: Array<Delivery<T>> = [];
  // Intake stops when the caller aborts `signal` or the run ends; the watch stops with the loop.
  const intake = new AbortController();
  const watching = new AbortController();
  const onStop = () => intake.abort(stop?.reason);
  if (stop?.aborted) onStop();
  else stop?.addEventListener('abort', onStop, { once: true });
  const run: { ended: ScopeCancelledError | null } = { ended: null };
  const endRun = (err: ScopeCancelledError) => {
    // A stop asked for first goes on as a stop (it drains); the run's end is seen only before.
    if (run.ended !== null || intake.signal.aborted) return;
    run.ended = err;
    intake.abort(err);
  };
  void watchRunEnd(loop.ctx, loop.scopeId, watching.signal).then((err) => {
    if (err !== null) endRun(err);
  });
  try {
    let failure: { error: unknown } | undefined;
    try {
      failure = await intakeLoop(loop, running, ahead, intake.signal, endRun);
    } finally {
      await giveBackAhead(ahead.splice(0), run.ended);
    }
    if (failure !== undefined) {
      running.abandonAll(new Error(`${loop.what} stopped on an error`));
      throw failure.error;
    }
    if (run.ended !== null) await running.abandonNow(run.ended, true);
    else await running.drain(shutdownTimeoutMs);
  } finally {
    watching.abort();
    stop?.removeEventListener('abort', onStop);
  }
}

async function intakeLoop<T>(
  loop: WorkerLoop<T>,
  running: Running<T>,
  ahead: Array<Delivery<T>>,
  stop: AbortSignal,
  endRun: (err: ScopeCancelledError) => void,
): Promise<{ error: unknown } | undefined> {
  const { concurrency = 1, prefetch = 1, pollMs = 250, waitMs = DEFAULT_CONSUME_WAIT_MS } = loop;
  // Deliveries held at once: those in handlers, and those taken ahead of a free handler.
  const capacity = Math.max(concurrency, prefetch);
  let outage: RunstateError | null = null;
  let pauseMs = pollMs;
  while (!stop.aborted) {
    if (ahead.length > 0 && running.size < concurrency) {
      const next = ahead.shift()!;
      running.start(next, handle(next, loop, running));
      continue;
    }
    if (ahead.length > 0 || running.size >= capacity) {
      await running.waitForChange(stop);
      continue;
    }
    const started = nowMs();
    const count = Math.min(prefetch, capacity - running.size);
    let taken: Array<Delivery<T>> | null;
    try {
      if (count > 1 && loop.receiveMany !== undefined) {
        taken = await loop.receiveMany(count, waitMs, stop);
      } else {
        const delivery = await loop.receive(waitMs, stop);
        taken = delivery === null ? null : [delivery];
      }
    } catch (err) {
      if (stop.aborted) return undefined;
      if (permanent(err)) return { error: err };
      if (err instanceof ScopeCancelledError) {
        endRun(err);
        return undefined;
      }
      if (err instanceof RunstateError) {
        if (outage === null) {
          outage = err;
          warn('RUNSTATE_WORKER_WAITING', `${loop.what} cannot get work from ${loop.ctx.requester.baseUrl}, trying again: ${err.message}`);
        }
        await pause(pauseMs, { signal: stop });
        pauseMs = Math.min(pauseMs * 2, OUTAGE_PAUSE_MAX_MS);
        continue;
      }
      return { error: err }; // a malformed answer or a bug: not ours to hide
    }
    if (outage !== null) {
      warn('RUNSTATE_WORKER_RESUMED', `${loop.what} gets work from ${loop.ctx.requester.baseUrl} again`);
      outage = null;
      pauseMs = pollMs;
    }
    if (taken === null || taken.length === 0) {
      // After a real long poll, ask again at once; an early empty answer gets a pause.
      if (waitMs <= 0 || nowMs() - started < Math.min(waitMs, EARLY_EMPTY_MS)) await pause(pollMs, { signal: stop });
      continue;
    }
    // Renewed from now on (with the client's other leases), in a handler or waiting for one, until
    // it is settled, given back or lost (abandoned at shutdown: its lease runs out by itself).
    for (const delivery of taken) delivery.keepRenewed();
    ahead.push(...taken);
  }
  return undefined;
}


/**
 * The deliveries taken ahead and never handed to a handler, when intake ends: put back at once
 * (a stop, a failure), not at their lease's end, and unhandled (`returnOnce`: their attempts not
 * counted); told as lost when the run ended (the server ended their tasks with it, so nothing is
 * sent for them).
 */
async function giveBackAhead<T>(ahead: Array<Delivery<T>>, ended: ScopeCancelledError | null): Promise<void> {
  for (const delivery of ahead) delivery.stopRenewing();
  if (ended !== null) {
    for (const delivery of ahead) delivery.abandon(ended, true);
    return;
  }
  // One try each (they go out together, as one batch): a lease that runs out puts it back anyway.
  await Promise.all(ahead.map((delivery) => (delivery.isLost ? undefined : delivery.returnOnce().catch(() => undefined))));
}

/** The handlers in flight of one consume() call. */
class Running<T> {
  readonly #handlers = new Map<Delivery<T>, Promise<void>>();
  readonly #abandoned = new Set<Delivery<T>>();
  #wake: (() => void) | null = null;

  get size(): number {
    return this.#handlers.size;
  }

  start(delivery: Delivery<T>, done: Promise<void>): void {
    this.#handlers.set(delivery, done);
    void done.finally(() => {
      this.#handlers.delete(delivery);
      this.#wake?.();
    });
  }

  isAbandoned(delivery: Delivery<T>): boolean {
    return this.#abandoned.has(delivery);
  }

  /** Resolves when a handler finishes or `stop` aborts. */
  waitForChange(stop?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const onAbort = () => finish();
      const finish = () => {
        this.#wake = null;
        stop?.removeEventListener('abort', onAbort);
        resolve();
      };
      if (stop?.aborted) return finish();
      this.#wake = finish;
      stop?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Up to `timeoutMs` for the handlers, then put back what is unfinished. */
  async drain(timeoutMs: number): Promise<void> {
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(), timerMs(timeoutMs));
    try {
      while (this.#handlers.size > 0 && !deadline.signal.aborted) await this.waitForChange(deadline.signal);
    } finally {
      clearTimeout(timer);
    }
    await this.abandonNow(new Error('consume() stopped before the handler finished'));
  }

  /**
   * Give up on every handler still running: put its delivery back (one try: if the server cannot
   * be reached, the lease running out puts it back anyway; after a run ended, the server ends the
   * task `CANCELLED` instead) and abort its signal with `reason`.
   */
  async abandonNow(reason: Error, refuseLater = false): Promise<void> {
    const unfinished = [...this.#handlers.keys()];
    for (const delivery of unfinished) this.#abandoned.add(delivery);
    await Promise.all(
      unfinished.map(async (delivery) => {
        // Best effort by design: a refusal means the server has already ended the delivery. Put
        // back first, so a handler told to stop finds its delivery settled.
        if (!delivery.settled && !delivery.isLost) await delivery.requeueOnce().catch(() => undefined);
        delivery.abandon(reason, refuseLater);
      }),
    );
  }

  abandonAll(reason: Error): void {
    for (const delivery of this.#handlers.keys()) {
      this.#abandoned.add(delivery);
      delivery.abandon(reason);
    }
  }
}

/** `onError(err, delivery)`, whose own failure becomes a warning. */
async function report<T>(onError: ConsumeOptions<T>['onError'], err: unknown, delivery: Delivery<T>): Promise<void> {
  if (onError === undefined) return;
  try {
    await onError(err, delivery);
  } catch (failure) {
    warn('RUNSTATE_ON_ERROR_FAILED', `onError failed for delivery ${delivery.id}: ${String(failure)}`);
  }
}

/** Run one handler with its lease renewed, and settle its delivery; never rejects. */
async function handle<T>(delivery: Delivery<T>, loop: WorkerLoop<T>, running: Running<T>): Promise<void> {
  const { onError } = loop;
  if (delivery.isLost) {
    // Lost while it waited for a free handler (a prefetch): its handler is not run.
    delivery.stopRenewing();
    const lost = delivery.signal.reason;
    if (!(lost instanceof ScopeCancelledError)) {
      await report(onError, lost, delivery);
      warn('RUNSTATE_DELIVERY_LOST', `delivery ${delivery.id} (attempt ${delivery.attempt}) was lost before its handler ran: ${String(lost?.message ?? lost)}; nothing was sent for it`);
    }
    await after(loop, delivery, { ok: false, value: lost, settled: false });
    return;
  }
  let failed = false;
  let value: unknown;
  try {
    value = await loop.invoke(delivery);
  } catch (err) {
    failed = true;
    value = err;
  }
  let settled = false;
  try {
    if (failed) await report(onError, value, delivery);
    if (delivery.settled || running.isAbandoned(delivery)) return;
    if (delivery.isLost) {
      // The lease went while the handler ran: the task goes to another worker, whose result counts.
      if (!failed) {
        const lost = delivery.signal.reason;
        await report(onError, lost, delivery);
        warn('RUNSTATE_RESULT_DROPPED', `delivery ${delivery.id}: its handler returned after the lease was lost, so its result was not sent: ${String(lost?.message ?? lost)}`);
      }
      return;
    }
    // The renewal goes on while the settlement rides through an outage.
    try {
      if (failed) await (loop.fail ? loop.fail(delivery, value) : delivery.retry());
      else await loop.complete(delivery, value);
      settled = true;
    } catch (err) {
      if (running.isAbandoned(delivery) || delivery.settled) return;
      await report(onError, err, delivery);
      const what = failed ? 'putting it back' : 'its completion';
      warn('RUNSTATE_SETTLEMENT_FAILED', `delivery ${delivery.id}: ${what} did not reach the server before the lease ended: ${(err as Error)?.message ?? String(err)}`);
    }
  } finally {
    delivery.stopRenewing();
    await after(loop, delivery, { ok: !failed, value, settled: settled || delivery.settled });
  }
}

/** The loop's `after` hook, whose own failure becomes a warning. */
async function after<T>(loop: WorkerLoop<T>, delivery: Delivery<T>, outcome: { ok: boolean; value: unknown; settled: boolean }): Promise<void> {
  if (loop.after === undefined) return;
  await loop.after(delivery, outcome).catch((err) => {
    warn('RUNSTATE_WORKER_HOOK_FAILED', `${loop.what}: delivery ${delivery.id}: ${String(err)}`);
  });
}
