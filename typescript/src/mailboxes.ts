/**
 * Mailboxes (work queues): submit tasks, send messages, receive and consume deliveries.
 *
 * A `MailboxRef` is a queue name bound to a scope; the name is turned into an id with one
 * `GET /mailboxes` the first time it is needed, then cached. A `Delivery` is one leased message.
 *
 * A delivery settles once (`complete`, `retry` or `reject`), and only when the server accepted
 * the settlement: a settlement in flight is shared by any other call made meanwhile (nothing is
 * sent twice), one the server accepted makes every later call a no-op, and one that failed for
 * the transport leaves the delivery unsettled, so a later call may try again. A `LeaseLostError`
 * answer (`STALE_CLAIM`: the lease had run out and the task went to another worker) marks the
 * delivery lost, and later settlements throw that error without sending anything.
 *
 * `consume()` is the worker loop (the Python SDK's, rule for rule):
 *
 * - intake: while not stopped and while fewer than `concurrency` handlers run, long-poll `recv`
 *   (`waitMs`); aborting `signal` aborts the long poll at once;
 * - each delivery runs `handler(data, delivery)` with its lease renewed in the background; a return
 *   completes it (unless the handler settled it), a throw calls `onError(err, delivery)` and puts it
 *   back (the server's backoff decides when it is seen again); a delivery whose renewal failed is
 *   lost and gets neither;
 * - on stop: no new work, up to `shutdownTimeoutMs` for the running handlers, then whatever is still
 *   unfinished is put back and its `delivery.signal` aborted. A JavaScript handler cannot be
 *   cancelled; one that finishes later finds its delivery settled and nothing more is sent;
 * - `ScopeCancelledError` from `recv` is a clean stop (with the drain); authentication,
 *   configuration and not-found errors are thrown at once (the running handlers are abandoned,
 *   not drained: their leases expire); any other `RunstateError` is waited out (`pollMs`) and the
 *   loop goes on.
 */

import type { Context } from './context.js';
import {
  AuthenticationError,
  ConfigError,
  LeaseLostError,
  NotFoundError,
  RunstateError,
  ScopeCancelledError,
} from './errors.js';
import { Renewal } from './renewal.js';
import { TaskTicket } from './tasks.js';
import { nowMs, pause } from './time.js';

/** How long an idle `consume()` asks the server to hold an empty recv. */
export const DEFAULT_CONSUME_WAIT_MS = 20_000;
/** The lease of a delivery from `receive()`; it is not renewed for the caller. */
export const RECEIVE_LEASE_SECONDS = 30;
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 30_000;
// An empty long-poll answer faster than this (or than waitMs) is followed by a pollMs pause.
const EARLY_EMPTY_MS = 1000;

export interface SubmitOptions {
  /** The task's identity in the scope: the same key and input give back the same task. */
  key: string;
  /** Who is interested in the task. */
  subscriberId?: string;
  /** ISO 8601: the task becomes `EXPIRED` if it has not finished by then. */
  deadline?: string;
  requirements?: Record<string, unknown>;
  workLimit?: string;
}

export interface SendOptions {
  /** Deduplicates sends to this queue and scope for 7 days. */
  workKey?: string;
  deadline?: string;
}

/** The message `send()` put on the queue (or the original one, with `replay: true`). */
export interface SentMessage {
  id: string;
  mailboxId: string;
  scopeId: string;
  /** True when `workKey` matched an earlier send: no new message was made. */
  replay: boolean;
  [field: string]: unknown;
}

export interface ReceiveOptions {
  /** Let the server hold the request up to this long for a message; default 0 (answer at once). */
  waitMs?: number;
  signal?: AbortSignal;
}

export interface CompleteResult {
  /** Becomes the task's recorded outcome. */
  payload?: unknown;
  [field: string]: unknown;
}

export interface ConsumeOptions<T> {
  /** Handlers running at once in this process; default 1. */
  concurrency?: number;
  /** Each delivery's lease, renewed while its handler runs; default 30. */
  leaseSeconds?: number;
  /** Pause after an error or an early empty answer; default 250 ms. */
  pollMs?: number;
  /** Long-poll length of each recv; default 20 000 ms. 0 polls every `pollMs`. */
  waitMs?: number;
  /** How long a stop waits for running handlers before putting their work back; default 30 000 ms. */
  shutdownTimeoutMs?: number;
  /** Abort to stop taking work, drain, and requeue the rest. */
  signal?: AbortSignal;
  /** Called when a handler throws, before the delivery goes back on the queue. */
  onError?: (err: unknown, delivery: Delivery<T>) => void | Promise<void>;
}

export type Handler<T> = (data: T, delivery: Delivery<T>) => unknown;

/** One leased message: `id`, `data`, `attempt`, `scopeId`, and how it ends. */
export class Delivery<T = unknown> {
  readonly #ctx: Context;
  readonly id: string;
  readonly data: T;
  /** 1 for the first delivery of the message, 2 for the next... */
  readonly attempt: number;
  readonly scopeId: string;
  readonly taskId: string | null;
  readonly deadline: string | null;
  readonly #token: string;
  readonly #stopped = new AbortController();
  #settled = false;
  #settling: Promise<void> | null = null;
  #lost = false;
  #rejected: LeaseLostError | null = null;

  /** @internal */
  constructor(ctx: Context, raw: any) {
    const message = raw?.message;
    if (message === null || typeof message !== 'object' || typeof raw.token !== 'string') {
      throw new TypeError('malformed delivery: no message or token');
    }
    for (const field of ['id', 'attempt', 'scopeId']) {
      if (!(field in message)) throw new TypeError(`malformed delivery: no message.${field}`);
    }
    this.#ctx = ctx;
    this.id = message.id;
    this.data = message.payload ?? null;
    this.attempt = message.attempt;
    this.scopeId = message.scopeId;
    this.taskId = message.taskId ?? null;
    this.deadline = message.deadline ?? null;
    this.#token = raw.token;
  }

  /** True once the server accepted `complete`, `retry` or `reject`. */
  get settled(): boolean {
    return this.#settled;
  }

  /** True once a renewal failed or the server said the lease is gone: another worker may have it. */
  get isLost(): boolean {
    return this.#lost;
  }

  /** Aborted when the delivery is lost, or when `consume()` gives up on it at shutdown. */
  get signal(): AbortSignal {
    return this.#stopped.signal;
  }

  /** The work is done: the task records `result.payload`. */
  complete(result?: CompleteResult): Promise<void> {
    return this.#settle('complete', { token: this.#token, result });
  }

  /** Put it back on the queue (with backoff); the next delivery has `attempt + 1`. */
  retry(): Promise<void> {
    return this.#settle('nack', { token: this.#token, retry: true });
  }

  /** Dead-letter it without retry; its task becomes `FAILED`. */
  reject(): Promise<void> {
    return this.#settle('nack', { token: this.#token, retry: false });
  }

  /** Extend the lease; without `leaseSeconds` by the lease's own length. */
  async renew(leaseSeconds?: number, options: { signal?: AbortSignal } = {}): Promise<void> {
    try {
      await this.#ctx.call('POST', `/messages/${this.id}/renew`, {
        body: { token: this.#token, leaseSeconds },
        signal: options.signal,
      });
    } catch (err) {
      if (err instanceof LeaseLostError) this.#markRejected(err);
      throw err;
    }
  }

  #settle(action: 'complete' | 'nack', body: Record<string, unknown>): Promise<void> {
    if (this.#settled) return Promise.resolve();
    if (this.#rejected !== null) return Promise.reject(this.#rejected);
    if (this.#settling !== null) return this.#settling;
    const settling = (async () => {
      try {
        await this.#ctx.call('POST', `/messages/${this.id}/${action}`, { body });
        this.#settled = true;
      } catch (err) {
        if (err instanceof LeaseLostError) this.#markRejected(err);
        throw err;
      } finally {
        this.#settling = null;
      }
    })();
    this.#settling = settling;
    return settling;
  }

  /** @internal A renewal failed: consume() will send nothing more for it. */
  markLost(err: unknown): void {
    if (this.#lost) return;
    this.#lost = true;
    this.#stopped.abort(
      err instanceof LeaseLostError ? err : new LeaseLostError('STALE_CLAIM', 409, `delivery ${this.id} was lost`, { cause: err }),
    );
  }

  /** @internal consume() stopped waiting for its handler. */
  abandon(reason: Error): void {
    if (!this.#stopped.signal.aborted) this.#stopped.abort(reason);
  }

  #markRejected(err: LeaseLostError): void {
    this.#rejected = err;
    this.markLost(err);
  }
}

/** A queue bound to a scope, by name (resolved once) or by id. */
export class MailboxRef {
  readonly #ctx: Context;
  readonly scopeId: string;
  readonly name: string | null;
  #id: string | null;

  constructor(ctx: Context, scopeId: string, ref: { name: string } | { id: string }) {
    this.#ctx = ctx;
    this.scopeId = scopeId;
    this.name = 'name' in ref ? ref.name : null;
    this.#id = 'id' in ref ? ref.id : null;
  }

  /** The mailbox id; the first call lists the mailboxes, later calls use the cached id. */
  async resolveId(): Promise<string> {
    if (this.#id !== null) return this.#id;
    const rows: Array<{ id: string; name: string }> = (await this.#ctx.call('GET', '/mailboxes')).body.mailboxes;
    const row = rows.find((candidate) => candidate.name === this.name);
    if (row === undefined) {
      throw new NotFoundError('NOT_FOUND', 404, `mailbox ${JSON.stringify(this.name)} not found in space ${this.#ctx.spaceId}`);
    }
    this.#id = row.id;
    return row.id;
  }

  // -- producers ---------------------------------------------------------------------------------

  /** Create the task `key` in this scope, or get the existing one (same input). A different input
   * under the same key throws `ConflictError` (`IDEMPOTENCY_CONFLICT`). */
  async submit<Outcome = unknown>(input: unknown, options: SubmitOptions): Promise<TaskTicket<Outcome>> {
    const body = {
      scopeId: this.scopeId,
      mailboxId: await this.resolveId(),
      taskKey: options.key,
      input,
      deadline: options.deadline,
      subscriberId: options.subscriberId,
      requirements: options.requirements,
      workLimit: options.workLimit,
    };
    const reply = await this.#ctx.call('POST', '/tasks', { body });
    if (typeof reply.body?.taskId !== 'string') throw new TypeError('malformed answer: no taskId');
    return new TaskTicket<Outcome>(this.#ctx, reply.body.taskId, this.scopeId);
  }

  /** Put a plain message on the queue; a repeated `workKey` returns the original (`replay: true`). */
  async send(payload: unknown, options: SendOptions = {}): Promise<SentMessage> {
    const mailboxId = await this.resolveId();
    const body = { scopeId: this.scopeId, payload, workKey: options.workKey, deadline: options.deadline };
    return (await this.#ctx.call('POST', `/mailboxes/${mailboxId}/messages`, { body })).body;
  }

  // -- workers -----------------------------------------------------------------------------------

  /** One delivery leased for 30 s (not renewed for you), or null when there is none. With `waitMs`
   * the server holds the request until a message comes or the wait ends. */
  async receive<T = unknown>(options: ReceiveOptions = {}): Promise<Delivery<T> | null> {
    const raw = await this.#recv(RECEIVE_LEASE_SECONDS, options.waitMs ?? 0, options.signal);
    return raw === null ? null : new Delivery<T>(this.#ctx, raw);
  }

  async #recv(leaseSeconds: number, waitMs: number, signal?: AbortSignal): Promise<any> {
    const mailboxId = await this.resolveId();
    const body = {
      scopeId: this.scopeId,
      holder: this.#ctx.holder,
      holderSession: this.#ctx.session,
      leaseSeconds,
      waitMs: waitMs > 0 ? waitMs : undefined,
    };
    const reply = await this.#ctx.call('POST', `/mailboxes/${mailboxId}/recv`, {
      body,
      waitMs: Math.max(waitMs, 0),
      signal,
    });
    return reply.status === 204 ? null : reply.body;
  }

  /** Run `handler(data, delivery)` for each delivery until stopped (see the module comment).
   * Resolves once stopped and drained; rejects with an authentication, configuration or
   * not-found error. */
  async consume<T = unknown>(handler: Handler<T>, options: ConsumeOptions<T> = {}): Promise<void> {
    const {
      concurrency = 1,
      leaseSeconds = 30,
      pollMs = 250,
      waitMs = DEFAULT_CONSUME_WAIT_MS,
      shutdownTimeoutMs = DEFAULT_SHUTDOWN_TIMEOUT_MS,
      signal: stop,
      onError,
    } = options;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError('concurrency must be a whole number, 1 or more');
    const running = new Running<T>();
    const failure = await this.#intake(running, handler, onError, stop, concurrency, leaseSeconds, pollMs, waitMs);
    if (failure !== undefined) {
      running.abandonAll(new Error('consume() stopped on an error'));
      throw failure.error;
    }
    await running.drain(shutdownTimeoutMs);
  }

  async #intake<T>(
    running: Running<T>,
    handler: Handler<T>,
    onError: ConsumeOptions<T>['onError'],
    stop: AbortSignal | undefined,
    concurrency: number,
    leaseSeconds: number,
    pollMs: number,
    waitMs: number,
  ): Promise<{ error: unknown } | undefined> {
    while (!stop?.aborted) {
      if (running.size >= concurrency) {
        await running.waitForChange(stop);
        continue;
      }
      const started = nowMs();
      let raw: any;
      try {
        raw = await this.#recv(leaseSeconds, waitMs, stop);
      } catch (err) {
        if (stop?.aborted) return undefined;
        if (err instanceof AuthenticationError || err instanceof ConfigError || err instanceof NotFoundError) {
          return { error: err };
        }
        if (err instanceof ScopeCancelledError) return undefined;
        if (err instanceof RunstateError) {
          await pause(pollMs, { signal: stop });
          continue;
        }
        return { error: err }; // a malformed answer or a bug: not ours to hide
      }
      if (raw === null) {
        // After a real long poll, ask again at once; an early empty answer gets a pause.
        if (waitMs <= 0 || nowMs() - started < Math.min(waitMs, EARLY_EMPTY_MS)) await pause(pollMs, { signal: stop });
        continue;
      }
      let delivery: Delivery<T>;
      try {
        delivery = new Delivery<T>(this.#ctx, raw);
      } catch (err) {
        return { error: err };
      }
      running.start(delivery, handle(delivery, handler, onError, leaseSeconds, running));
    }
    return undefined;
  }
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
    const timer = setTimeout(() => deadline.abort(), timeoutMs);
    try {
      while (this.#handlers.size > 0 && !deadline.signal.aborted) await this.waitForChange(deadline.signal);
    } finally {
      clearTimeout(timer);
    }
    const unfinished = [...this.#handlers.keys()];
    await Promise.all(
      unfinished.map(async (delivery) => {
        this.#abandoned.add(delivery);
        if (!delivery.settled && !delivery.isLost) await delivery.retry().catch(() => undefined);
        delivery.abandon(new Error(`consume() stopped before the handler of delivery ${delivery.id} finished`));
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

/** Run one handler with its lease renewed, and settle its delivery; never rejects. */
async function handle<T>(
  delivery: Delivery<T>,
  handler: Handler<T>,
  onError: ConsumeOptions<T>['onError'],
  leaseSeconds: number,
  running: Running<T>,
): Promise<void> {
  const renewal = new Renewal(
    (seconds, signal) => delivery.renew(seconds, { signal }),
    leaseSeconds,
    (err) => delivery.markLost(err),
  );
  // Abandoned at shutdown or on a failure: stop renewing at once, the lease runs out by itself.
  const stopRenewal = () => void renewal.stop();
  delivery.signal.addEventListener('abort', stopRenewal, { once: true });
  let failed = false;
  let error: unknown;
  try {
    await handler(delivery.data, delivery);
  } catch (err) {
    failed = true;
    error = err;
  }
  await renewal.stop();
  delivery.signal.removeEventListener('abort', stopRenewal);
  if (failed && onError !== undefined) {
    try {
      await onError(error, delivery);
    } catch (err) {
      process.emitWarning(`onError failed for delivery ${delivery.id}: ${String(err)}`);
    }
  }
  if (delivery.settled || delivery.isLost || running.isAbandoned(delivery)) return;
  await (failed ? delivery.retry() : delivery.complete()).catch(() => undefined);
}
