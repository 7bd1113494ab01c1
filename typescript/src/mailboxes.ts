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
 * A delivery's lease has a deadline by this process's clock, as a claim's has (`renewal.ts`):
 * `isLost` turns true when it passes (`expiresAt` says the end as the server last gave it), and
 * settlements go out with the client's other calls made at the same time (`batch.ts`). A
 * settlement that cannot reach the server is tried again with backoff until then (with one
 * idempotency key, so a try whose answer was lost is answered by the server as the first one
 * was), and throws its last error after it.
 *
 * A delivery from `receive()` or `admit()` is renewed only when asked: `renew()` once, or
 * `keepRenewed()` in the background (with the client's other leases, as `consume()` keeps its
 * handlers') until it is settled, lost, `stopRenewing()` is called or the client closes.
 *
 * `consume()` is the worker loop of `worker.ts` (the Python SDK's, rule for rule): see there.
 */

import { checkId } from './claims.js';
import type { Context, Stoppable } from './context.js';
import {
  LeaseLostError,
  NotFoundError,
  RunstateError,
  ScopeCancelledError,
  isTransient,
} from './errors.js';
import { LeaseClock, RETRY_MAX_MS, RETRY_MIN_MS, grantStartMs, renewalsExhausted } from './renewal.js';
import { Kept, type RenewalRequest } from './renewals.js';
import { newIdempotencyKey } from './request.js';
import { TaskTicket } from './tasks.js';
import { checkMs, nowMs, pause, withGrace } from './time.js';
import { warn } from './warnings.js';
import { runWorker } from './worker.js';

/** The lease of a delivery from `receive()` unless it asks for another; it is not renewed for the
 * caller unless asked (`keepRenewed()`). */
export const RECEIVE_LEASE_SECONDS = 30;
/** The longest a server holds one recv (its wait_ms_max): `receive()` asks again for the rest. */
const RECV_WAIT_MS_MAX = 30_000;

/** The server's timestamp, or null when there is none (or it is not one). */
function timestampOrNull(value: unknown): Date | null {
  if (typeof value !== 'string') return null;
  const parsed = new Date(value);
  return Number.isNaN(parsed.getTime()) ? null : parsed;
}

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
  /** The same as `id`. */
  messageId: string;
  mailboxId: string;
  scopeId: string;
  workKey: string | null;
  /** Where the message is now (null once it is no longer kept). */
  state: string | null;
  /** True when `workKey` matched an earlier send: no new message was made. */
  replay: boolean;
  /** The same as `replay`. */
  deduplicated: boolean;
  [field: string]: unknown;
}

export interface ReceiveOptions {
  /** Let the server hold the request up to this long for a message; default 0 (answer at once). */
  waitMs?: number;
  /** The delivery's lease, 5 to 600; default 30. Not renewed for you (see `keepRenewed()`). */
  leaseSeconds?: number;
  /** Stops the receive (it rejects with the signal's reason). A first look that finds a message is
   * not cut, and a delivery it comes back with after the abort is put back at once; a wait on an
   * empty queue is cut. */
  signal?: AbortSignal;
}

/** How a delivery goes back (`retry()`) or is dead-lettered (`reject()`). */
export interface SettleOptions {
  /** Why (at most 2000 characters): a task this ends keeps it as its reason (`handler_error: <reason>`). */
  reason?: string;
  /** The same as `reason`, by the wire's name (0.3.0's first spelling); `reason` wins when both are given. */
  error?: string;
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
  /**
   * Take up to this many deliveries in one request (`recv-many`, our extension), and hold up to
   * `max(concurrency, prefetch)` at a time: those waiting for a free handler have their leases
   * renewed with the others, and go back on the queue at once when consume() stops. 1 to 100;
   * default 1 (one `recv` at a time, as the official clients do).
   */
  prefetch?: number;
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
  /** The lease's length, as granted. */
  readonly leaseSeconds: number;
  /** When the lease ends, as the server last said (on receipt, then at each renewal); null when the
   * answer did not say. Act on `isLost` and `signal`, which also count this process's clock. */
  expiresAt: Date | null;
  readonly #token: string;
  readonly #stopped = new AbortController();
  readonly #clock: LeaseClock;
  #settled = false;
  #settling: Promise<void> | null = null;
  #lost = false;
  #rejected: RunstateError | null = null;
  // Its place among the leases the client renews together, while it is kept renewed.
  #kept: Kept | null = null;
  // What the client's close stops: a kept delivery counts as lost from then on.
  readonly #closer: Stoppable = { abandon: (reason: Error) => this.markLost(reason) };

  /** @internal `startedMs`: when the lease began by this process's clock (see `grantStartMs`). */
  constructor(ctx: Context, raw: any, startedMs: number = nowMs(), leaseSeconds?: number) {
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
    this.leaseSeconds = leaseSeconds ?? (typeof raw.leaseSeconds === 'number' ? raw.leaseSeconds : RECEIVE_LEASE_SECONDS);
    this.expiresAt = timestampOrNull(raw.leaseExpiresAt);
    this.#clock = new LeaseClock(startedMs, this.leaseSeconds);
  }

  /** True once the server accepted `complete`, `retry` or `reject`. */
  get settled(): boolean {
    return this.#settled;
  }

  /** True once the lease is gone: a renewal or a settlement was refused (another worker may have
   * the task, or its run ended), or the lease's end by this process's clock passed unsettled. */
  get isLost(): boolean {
    this.#checkClock();
    return this.#lost;
  }

  /** Aborted when the delivery is lost (a `LeaseLostError`), when its run ends while `consume()`
   * runs it (a `ScopeCancelledError`), or when `consume()` gives up on it at shutdown. */
  get signal(): AbortSignal {
    this.#checkClock();
    return this.#stopped.signal;
  }

  /** Until when (monotonic ms, `performance.now()`) this process may act on the delivery. */
  get deadlineMs(): number {
    return this.#clock.deadlineMs;
  }

  /** The work is done: the task records `result.payload`. */
  complete(result?: CompleteResult): Promise<void> {
    return this.#settle('complete', { token: this.#token, result }, true);
  }

  /** Put it back on the queue (with backoff); the next delivery has `attempt + 1`. `reason` (at
   * most 2000 characters) says why. It is kept with the task: if this was its last attempt, the task
   * ends `FAILED` with `outcomeReason` `handler_error: <reason>` and the attempts used. */
  retry(options: SettleOptions = {}): Promise<void> {
    return this.#settle('nack', { token: this.#token, retry: true, error: options.reason ?? options.error }, true);
  }

  /** Dead-letter it without retry; its task becomes `FAILED`, with `outcomeReason`
   * `handler_error: <reason>` when `reason` (at most 2000 characters) is given. */
  reject(options: SettleOptions = {}): Promise<void> {
    return this.#settle('nack', { token: this.#token, retry: false, error: options.reason ?? options.error }, true);
  }

  /**
   * Renew the lease in the background from now on, as `consume()` renews a handler's: with the
   * client's other leases (every third of its length, all due at once in one request), riding
   * through an outage until its end by this process's clock, until it is settled (`complete`,
   * `retry`, `reject`), lost, `stopRenewing()` is called or the client closes (which counts it
   * lost). A renewal the server refuses (the lease went stale, the run ended), or the lease's end
   * passing without one, loses it: `isLost` turns true and `signal` aborts with the reason. A second
   * call does nothing; nor does a call on a delivery already settled or lost.
   */
  keepRenewed(): void {
    if (this.#kept !== null || this.#settled || this.isLost || this.#stopped.signal.aborted) return;
    const kept = new Kept(
      this.#ctx,
      this.#clock,
      this.leaseSeconds,
      `delivery ${this.id}`,
      (seconds) => this.renewalRequest(seconds),
      (body) => this.renewalReply(body),
      (err) => this.renewalLost(err),
    );
    this.#kept = kept;
    this.#ctx.holdings.renewals.add(kept);
    this.#ctx.live.add(this.#closer);
    // Lost, or given up on by consume(): stop renewing at once, the lease runs out by itself.
    this.#stopped.signal.addEventListener('abort', () => this.stopRenewing(), { once: true });
  }

  /** Stop the background renewal of `keepRenewed()` without settling: the delivery stays leased
   * until its lease runs out, and then the server hands it to another worker (as the next
   * attempt). Settling it stops the renewal by itself. */
  stopRenewing(): void {
    const kept = this.#kept;
    this.#kept = null;
    if (kept !== null) this.#ctx.holdings.renewals.remove(kept);
    this.#ctx.live.delete(this.#closer);
  }

  /** Extend the lease; without `leaseSeconds` by the lease's own length. */
  async renew(leaseSeconds?: number, options: { signal?: AbortSignal } = {}): Promise<void> {
    const sentMs = nowMs();
    const granted = await this.sendRenewal(leaseSeconds, options.signal);
    this.#clock.renewed(sentMs, granted);
  }

  /** @internal One renewal request (the clock is the caller's to move); resolves to the seconds
   * granted. A refusal that ends the lease marks the delivery lost. */
  async sendRenewal(leaseSeconds: number | undefined, signal?: AbortSignal): Promise<number> {
    try {
      const { suffix, body } = this.renewalRequest(leaseSeconds);
      const reply = await this.#ctx.call('POST', suffix, { body, signal });
      return this.renewalReply(reply.body) ?? leaseSeconds ?? this.leaseSeconds;
    } catch (err) {
      if (err instanceof LeaseLostError || err instanceof ScopeCancelledError) this.#markRejected(err);
      throw err;
    }
  }

  /** @internal The renewal's path and body (sent alone, or with the client's other renewals). */
  renewalRequest(leaseSeconds: number | undefined): RenewalRequest {
    return { suffix: `/messages/${this.id}/renew`, body: { token: this.#token, leaseSeconds } };
  }

  /** @internal A renewal's answer: the lease's new end; the seconds granted, when it says. */
  renewalReply(body: any): number | undefined {
    const expiresAt = timestampOrNull(body?.leaseExpiresAt);
    if (expiresAt !== null) this.expiresAt = expiresAt;
    return typeof body?.leaseSeconds === 'number' ? body.leaseSeconds : undefined;
  }

  /** @internal The client's renewals lost it: a refusal that ends the lease also refuses later
   * settlements (as a refused settlement does); the clock running out only marks it lost. */
  renewalLost(err: unknown): void {
    if (err instanceof LeaseLostError || err instanceof ScopeCancelledError) {
      if (err.code !== 'LEASE_RENEWALS_EXHAUSTED') {
        this.#markRejected(err);
        return;
      }
    }
    this.markLost(err);
  }

  /** @internal The lease's clock, which consume()'s renewal moves. */
  get clock(): LeaseClock {
    return this.#clock;
  }

  /** @internal Put it back with one try, not riding through: consume() giving up on it (the
   * lease running out puts it back anyway). */
  requeueOnce(): Promise<void> {
    return this.#settle('nack', { token: this.#token, retry: true }, false);
  }

  /** @internal Give it back unhandled, with one try (`/return`): queued again at once, in its
   * place, the attempt not counted against the mailbox's `maxAttempts`, so that work taken and
   * never handed to a handler (a receive cut by an abort, work taken ahead when consume() stops)
   * cannot use up a message's attempts. A server without that route (404) is asked to retry it
   * instead, the attempt then counted. */
  async returnOnce(): Promise<void> {
    try {
      await this.#settle('return', { token: this.#token }, false);
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
      await this.requeueOnce();
    }
  }

  #settle(action: 'complete' | 'nack' | 'return', body: Record<string, unknown>, rideThrough: boolean): Promise<void> {
    if (this.#rejected !== null) return Promise.reject(this.#rejected);
    if (this.#settled) return Promise.resolve();
    if (this.#settling !== null) return this.#settling;
    const settling = (async () => {
      // One key for every try: a try whose answer was lost is answered again, not applied twice.
      const idempotencyKey = newIdempotencyKey();
      let backoffMs = RETRY_MIN_MS;
      try {
        for (;;) {
          try {
            await this.#ctx.call('POST', `/messages/${this.id}/${action}`, { body, idempotencyKey, batch: true });
            this.#settled = true;
            this.stopRenewing(); // (kept renewed until now: an outage ridden through needed it)
            return;
          } catch (err) {
            if (err instanceof LeaseLostError || err instanceof ScopeCancelledError) this.#markRejected(err);
            const leftMs = this.#clock.remainingMs;
            if (!rideThrough || !isTransient(err) || leftMs <= 0) throw err;
            await pause(Math.min(backoffMs, leftMs));
            backoffMs = Math.min(backoffMs * 2, RETRY_MAX_MS);
          }
        }
      } finally {
        this.#settling = null;
      }
    })();
    this.#settling = settling;
    return settling;
  }

  /** @internal A renewal failed for good, or the lease's end passed: nothing more is sent for it by
   * consume(). */
  markLost(err: unknown): void {
    if (this.#lost) return;
    this.#lost = true;
    const reason =
      err instanceof LeaseLostError || err instanceof ScopeCancelledError
        ? err
        : new LeaseLostError('STALE_CLAIM', 409, `delivery ${this.id} was lost`, { cause: err });
    if (!this.#stopped.signal.aborted) this.#stopped.abort(reason);
  }

  /** @internal consume() stopped waiting for its handler (shutdown, or its run ended). With
   * `refuse`, later settlements throw `reason` instead of doing nothing (the run ended: the work
   * no longer counts, and the handler should hear so). */
  abandon(reason: Error, refuse = false): void {
    if (refuse && reason instanceof RunstateError && this.#rejected === null) this.#rejected = reason;
    if (!this.#stopped.signal.aborted) this.#stopped.abort(reason);
  }

  #checkClock(): void {
    if (!this.#lost && !this.#settled && this.#clock.passed) this.markLost(renewalsExhausted(`delivery ${this.id}`, null));
  }

  #markRejected(err: RunstateError): void {
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
    this.#id = 'id' in ref ? checkId('mailboxId', ref.id) : null;
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
    const reply = await this.#ctx.call('POST', '/tasks', { body, batch: true });
    if (typeof reply.body?.taskId !== 'string') throw new TypeError('malformed answer: no taskId');
    return new TaskTicket<Outcome>(this.#ctx, reply.body.taskId, this.scopeId);
  }

  /** Put a plain message on the queue; a repeated `workKey` returns the original (`replay: true`). */
  async send(payload: unknown, options: SendOptions = {}): Promise<SentMessage> {
    const mailboxId = await this.resolveId();
    const body = { scopeId: this.scopeId, payload, workKey: options.workKey, deadline: options.deadline };
    return (await this.#ctx.call('POST', `/mailboxes/${mailboxId}/messages`, { body, batch: true })).body;
  }

  // -- workers -----------------------------------------------------------------------------------

  /**
   * One delivery leased for `leaseSeconds` (30 by default, 5 to 600), or null when there is none.
   * Its lease is not renewed for you: `delivery.renew()` extends it once, and
   * `delivery.keepRenewed()` renews it in the background until it is settled. With `waitMs` the
   * server holds the request until a message comes or the wait ends. A server holds one request at
   * most 30 s (its `wait_ms_max`): a longer `waitMs` is made of as many long polls as it takes, so
   * null comes only once the whole wait has passed (or the server ended a wait early, as at
   * shutdown).
   */
  async receive<T = unknown>(options: ReceiveOptions = {}): Promise<Delivery<T> | null> {
    const { leaseSeconds = RECEIVE_LEASE_SECONDS, signal } = options;
    checkMs(options.waitMs, 'waitMs');
    const deadline = nowMs() + Math.max(options.waitMs ?? 0, 0);
    if (signal !== undefined) {
      // A first look without a wait, not cut by the signal: a message there is answered at once,
      // and the server leases it even to a request whose connection was cut (the message would
      // stay leased to no one until the lease ran out, its attempt spent). One that comes back
      // after the abort is put back at once. Only an empty queue is then waited on, in a request
      // the signal cuts (the server drops a held receive whose connection closed).
      signal.throwIfAborted();
      const sentMs = nowMs();
      const raw = await withGrace(signal, (grace) => this.#recv(leaseSeconds, 0, grace));
      if (raw !== null) {
        const delivery = new Delivery<T>(this.#ctx, raw, sentMs, leaseSeconds);
        if (signal.aborted) {
          await delivery.returnOnce().catch(() => undefined); // never handed to anyone: not an attempt
          throw signal.reason;
        }
        return delivery;
      }
      if (deadline <= nowMs()) return null;
    }
    for (;;) {
      const leftMs = Math.max(0, Math.round(deadline - nowMs()));
      const sentMs = nowMs();
      const raw = await this.#recv(leaseSeconds, leftMs, signal);
      if (raw !== null) {
        return new Delivery<T>(this.#ctx, raw, grantStartMs(sentMs, nowMs(), leftMs > 0), leaseSeconds);
      }
      const heldMs = nowMs() - sentMs;
      // Again only when the server held the request its whole capped wait and time is left.
      if (leftMs <= RECV_WAIT_MS_MAX || heldMs < RECV_WAIT_MS_MAX * 0.9 || nowMs() >= deadline) return null;
    }
  }

  /**
   * The oldest task delivery of this queue whose requirements (pools, quotas, budgets) all fit
   * now, leased with them taken in one step; null when nothing can be admitted within `waitMs` (a
   * long poll the server wakes when capacity frees). The grants share the delivery's lease: renew
   * the delivery and they stay held; settle it and they are given back.
   */
  async admit<T = unknown>(options: AdmitOptions = {}): Promise<AdmittedWork<T> | null> {
    const { leaseSeconds = 30, waitMs = 0, signal, includeDescendants } = options;
    checkMs(options.waitMs, 'waitMs');
    const body = {
      scopeId: this.scopeId,
      mailboxId: await this.resolveId(),
      holder: this.#ctx.holder,
      holderSession: this.#ctx.session,
      leaseSeconds,
      waitMs: waitMs > 0 ? waitMs : undefined,
      includeDescendants,
    };
    let sentMs = nowMs();
    let held = waitMs > 0;
    let reply;
    if (signal !== undefined) {
      // A first look without a wait, as receive() takes it: not cut by the signal (the server
      // admits even to a request whose connection was cut, its grants with it); what it admitted
      // after the abort is given back at once. Only a wait for work is cut.
      signal.throwIfAborted();
      reply = await withGrace(signal, (grace) => this.#ctx.call('POST', '/tasks/admit', { body: { ...body, waitMs: undefined }, signal: grace }));
      held = false;
      if (reply.status === 204 && waitMs > 0 && !signal.aborted) {
        sentMs = nowMs();
        held = true;
        reply = await this.#ctx.call('POST', '/tasks/admit', { body, waitMs, signal });
      }
    } else {
      reply = await this.#ctx.call('POST', '/tasks/admit', { body, waitMs: Math.max(waitMs, 0), signal });
    }
    if (reply.status === 204) return null;
    const admitted = reply.body;
    for (const field of ['messageId', 'taskId', 'token', 'attempt']) {
      if (admitted === null || typeof admitted !== 'object' || !(field in admitted)) {
        throw new TypeError(`malformed admission: no ${field}`);
      }
    }
    const raw = {
      message: {
        id: admitted.messageId,
        scopeId: admitted.scopeId ?? this.scopeId,
        payload: admitted.payload ?? null,
        attempt: admitted.attempt,
        deadline: null,
        taskId: admitted.taskId,
      },
      token: admitted.token,
      leaseExpiresAt: admitted.leaseExpiresAt,
    };
    const delivery = new Delivery<T>(this.#ctx, raw, grantStartMs(sentMs, nowMs(), held), leaseSeconds);
    if (signal?.aborted && !held) {
      await delivery.returnOnce().catch(() => undefined); // its grants go back with it, its attempt not counted
      throw signal.reason;
    }
    return {
      task: new TaskTicket(this.#ctx, admitted.taskId, this.scopeId),
      delivery,
      attempt: admitted.attempt,
      grants: Array.isArray(admitted.grants) ? admitted.grants : [],
      consumptions: Array.isArray(admitted.consumptions) ? admitted.consumptions : [],
      reservations: Array.isArray(admitted.reservations) ? admitted.reservations : [],
    };
  }

  /** The body of a receive: who receives, for how long a lease, and how long the server may hold it. */
  #receiving(leaseSeconds: number, waitMs: number): Record<string, unknown> {
    return {
      scopeId: this.scopeId,
      holder: this.#ctx.holder,
      holderSession: this.#ctx.session,
      leaseSeconds,
      waitMs: waitMs > 0 ? waitMs : undefined,
    };
  }

  async #recv(leaseSeconds: number, waitMs: number, signal?: AbortSignal): Promise<any> {
    const mailboxId = await this.resolveId();
    const body = this.#receiving(leaseSeconds, waitMs);
    const reply = await this.#ctx.call('POST', `/mailboxes/${mailboxId}/recv`, {
      body,
      waitMs: Math.max(waitMs, 0),
      signal,
    });
    return reply.status === 204 ? null : reply.body;
  }

  /** Up to `count` deliveries in one request (a long poll of `waitMs` for the first); null when there is none. */
  async #recvMany(count: number, leaseSeconds: number, waitMs: number, signal?: AbortSignal): Promise<any[] | null> {
    const mailboxId = await this.resolveId();
    const body = { ...this.#receiving(leaseSeconds, waitMs), maxMessages: count };
    const reply = await this.#ctx.call('POST', `/mailboxes/${mailboxId}/recv-many`, { body, waitMs: Math.max(waitMs, 0), signal });
    if (reply.status === 204) return null;
    const deliveries = reply.body?.deliveries;
    if (!Array.isArray(deliveries)) throw new TypeError('malformed answer: no deliveries');
    return deliveries;
  }

  /** Run `handler(data, delivery)` for each delivery until stopped (see the module comment).
   * Resolves once stopped and drained, or within a second of its run ending; rejects with an error
   * the same receive would get again (a refused argument such as a lease outside 5-600 s, a refused
   * key, a missing mailbox, a configuration error). */
  async consume<T = unknown>(handler: Handler<T>, options: ConsumeOptions<T> = {}): Promise<void> {
    const { leaseSeconds = 30 } = options;
    await runWorker<T>({
      ...options,
      ctx: this.#ctx,
      scopeId: this.scopeId,
      what: 'consume()',
      // Each intake looks first without a wait, which a stop does not cut: the server leases a
      // message even to a request whose connection was cut, and it would stay leased to no one
      // until its lease ran out (an attempt spent); taken, it is put back at once when intake
      // ends. Only a wait on an empty queue is cut by a stop.
      receive: async (waitMs, signal) => {
        let sentMs = nowMs();
        let raw = await withGrace(signal, (grace) => this.#recv(leaseSeconds, 0, grace));
        let held = false;
        if (raw === null && waitMs > 0 && !signal.aborted) {
          sentMs = nowMs();
          held = true;
          raw = await this.#recv(leaseSeconds, waitMs, signal);
        }
        return raw === null ? null : new Delivery<T>(this.#ctx, raw, grantStartMs(sentMs, nowMs(), held), leaseSeconds);
      },
      receiveMany: async (count, waitMs, signal) => {
        let sentMs = nowMs();
        let raws = await withGrace(signal, (grace) => this.#recvMany(count, leaseSeconds, 0, grace));
        let held = false;
        if ((raws === null || raws.length === 0) && waitMs > 0 && !signal.aborted) {
          sentMs = nowMs();
          held = true;
          raws = await this.#recvMany(count, leaseSeconds, waitMs, signal);
        }
        if (raws === null || raws.length === 0) return null;
        const startedMs = grantStartMs(sentMs, nowMs(), held);
        return raws.map((raw) => new Delivery<T>(this.#ctx, raw, startedMs, leaseSeconds));
      },
      invoke: (delivery) => handler(delivery.data, delivery),
      complete: (delivery, value) => {
        warnReturnedValue(handler, `consume(${JSON.stringify(this.name ?? this.#id)})`, value);
        return delivery.complete();
      },
    });
  }
}

// Handlers already told that a value they return is not recorded (held weakly): one warning per
// handler for the life of the process, however many consume() calls run it.
const toldReturns = new WeakSet<object>();

/**
 * `consume()` completes a delivery its handler did not settle with no payload, as the product
 * page says; a handler written as `return report` would otherwise see its tasks end `SUCCEEDED`
 * with `outcome` null and no word. Say so once per handler, as a `RunstateWarning`
 * (`RUNSTATE_RETURN_NOT_RECORDED`). A handler that settles its delivery itself is never warned
 * about: this is called only for a delivery about to be completed with no payload.
 */
function warnReturnedValue(handler: object, where: string, value: unknown): void {
  if (value === undefined || value === null || toldReturns.has(handler)) return;
  toldReturns.add(handler);
  const name = (handler as { name?: string }).name || 'anonymous';
  warn(
    'RUNSTATE_RETURN_NOT_RECORDED',
    `${where}: handler ${name} returned a value (${typeof value}), which is not recorded: consume() completes ` +
      'the delivery with no payload, so its task\'s outcome is null. To record a result, call ' +
      '`await delivery.complete({ payload: value })` in the handler (and return nothing). This is said once per handler.',
  );
}

export interface AdmitOptions {
  /** The delivery's lease (its grants share it); default 30. Not renewed for you. */
  leaseSeconds?: number;
  /** Let the server hold the request up to this long for something admissible; default 0. */
  waitMs?: number;
  /** Admit tasks of the scope's descendants too (oldest first). */
  includeDescendants?: boolean;
  signal?: AbortSignal;
}

/** An admitted task delivery and what was taken with it (lists as the server gives them). */
export interface AdmittedWork<T = unknown> {
  task: TaskTicket;
  delivery: Delivery<T>;
  attempt: number;
  grants: any[];
  consumptions: any[];
  reservations: any[];
}
