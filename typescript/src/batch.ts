/**
 * Many calls in one request: the batch route, and the coalescing of calls made at the same time
 * (the Python SDK's `_batch.py`, rule for rule).
 *
 * The server's `POST /v1/spaces/{space}/batch` (our extension) runs commands of one space as
 * independent operations: each is answered as the same request alone would be (its status and
 * body, or its error), in order per key, and their records go out in one group commit. Two users
 * of it here:
 *
 * - the **renewals** of a client (`renewals.ts`) send every lease that is due in one batch
 *   (`sendBatch`);
 * - the **coalescer** (`Coalescer`): calls of one client that may be batched (releases,
 *   settlements, submits, sends, acquires without a wait) go out at once when nothing else of that
 *   client (and space) is on its way, exactly as before; calls made while a request is on its way
 *   wait for it and then go out together, as one batch. Sequential code sends what it always
 *   sent; a swarm of agents sharing one client sends a few large requests instead of many small
 *   ones, with no timer and no delay added to a lone call (group commit, on this side of the wire).
 *
 * Each call keeps its own answer and its own error, its own idempotency key (an operation's key
 * replays its first answer in a batch, as a request's does alone), and its own abort signal: a
 * call aborted while it waits to be sent is taken out of the queue and never sent; one aborted
 * while its batch is on the way rejects at once, as an aborted request does (the server may still
 * apply it). A call sent again with the same idempotency key (a settlement riding through an
 * outage) goes out in the form it first went out in, alone or in a batch, so the server compares
 * like with like. A server without the batch route (an older one, or another implementation:
 * it answers the route 404 `no such route`, or 405) is sent each call alone, and the client
 * remembers that.
 *
 * A batch is not a transaction: one operation refused changes nothing for the others, and each
 * answer must be read. Do not confuse coalescing with a delay: nothing here waits for company.
 */

import { NotFoundError, RunstateError, UnavailableError, detailsOf, mapError } from './errors.js';
import { compactBody, newIdempotencyKey, parseRetryAfter, type Method, type Reply, type Requester } from './request.js';

/** At most this many operations go in one batch (the server takes 1,000 by default). */
export const BATCH_OPERATIONS_MAX = 500;
/** About this many bytes of operations go in one batch (the server takes 1 MiB a request). */
export const BATCH_BYTES_MAX = 512 * 1024;
/** How many idempotency keys the coalescer remembers the form of (alone or in a batch). */
export const FORMS_REMEMBERED_MAX = 4096;
// What the server answers for a route it does not have.
const NO_ROUTE = 'no such route';
// What an operation costs in a batch besides its path and body (its method, key and framing).
const OPERATION_OVERHEAD_BYTES = 64;

/** One call as an operation of a batch: its method, its path below the space, its body (top-level
 * `undefined` and `null` left out, as alone), and its idempotency key. */
export class Operation {
  readonly method: Method;
  readonly suffix: string;
  readonly body: Record<string, unknown> | undefined;
  readonly key: string;
  #size = 0;

  constructor(method: Method, suffix: string, body: Record<string, unknown> | undefined, key: string) {
    this.method = method;
    this.suffix = suffix;
    this.body = body === undefined ? undefined : compactBody(body);
    this.key = key;
  }

  /** About how many bytes it takes in a batch. */
  get size(): number {
    if (this.#size === 0) {
      this.#size = OPERATION_OVERHEAD_BYTES + this.suffix.length + (this.body === undefined ? 0 : JSON.stringify(this.body).length);
    }
    return this.#size;
  }

  wire(): Record<string, unknown> {
    const operation: Record<string, unknown> = { method: this.method, path: this.suffix, idempotencyKey: this.key };
    if (this.body !== undefined) operation.body = this.body;
    return operation;
  }
}

/** The server has no batch route: it answered the route itself as unknown (404), or refused its method (405). */
export function batchUnsupported(err: unknown): boolean {
  if (err instanceof NotFoundError) return err.message.startsWith(NO_ROUTE);
  return err instanceof RunstateError && err.status === 405;
}

/**
 * One batch request: each operation's `Reply`, or the error it was answered with (an `Error`, not
 * thrown), in order. An error of the whole request (the server unreachable, a bad key, a server
 * without the route, `signal` aborted) is thrown.
 */
export async function sendBatch(
  requester: Requester,
  spacePath: string,
  operations: readonly Operation[],
  signal?: AbortSignal,
): Promise<Array<Reply | Error>> {
  const reply = await requester.call('POST', `${spacePath}/batch`, { body: { operations: operations.map((op) => op.wire()) }, signal });
  const results: unknown = reply.body?.results;
  if (!Array.isArray(results) || results.length !== operations.length) {
    throw new UnavailableError('UNAVAILABLE', reply.status, `the batch answer holds no result per operation: ${preview(reply.body)}`);
  }
  return results.map((result) => answerOf(result, reply.status));
}

/** One operation's result as the same request alone would have been answered. */
function answerOf(result: any, batchStatus: number): Reply | Error {
  const status = result !== null && typeof result === 'object' ? result.status : undefined;
  if (typeof status !== 'number' || !Number.isInteger(status)) {
    return new UnavailableError('UNAVAILABLE', batchStatus, `a batch result without a status: ${preview(result)}`);
  }
  if (status < 400) return { status, body: status === 204 ? null : (result.body ?? {}) };
  const envelope = result.error !== null && typeof result.error === 'object' ? result.error : {};
  const code = typeof envelope.code === 'string' && envelope.code !== '' ? envelope.code : 'UNAVAILABLE';
  const message = typeof envelope.message === 'string' && envelope.message !== '' ? envelope.message : `refused with ${status}`;
  const requestId = typeof envelope.requestId === 'string' ? envelope.requestId : null;
  const retryAfterMs = typeof result.retryAfter === 'number' ? parseRetryAfter(String(result.retryAfter)) : null;
  return mapError(code, status, message, { requestId, retryAfterMs, details: detailsOf(envelope.details) });
}

function preview(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.slice(0, 200);
}

/**
 * A twin of `err` for another caller: the same class and fields, so each caller of a failed batch
 * holds an error of its own (one may add to it without the others seeing).
 */
export function twin(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  const copy = Object.create(Object.getPrototypeOf(err)) as Error;
  for (const name of Object.getOwnPropertyNames(err)) {
    Object.defineProperty(copy, name, Object.getOwnPropertyDescriptor(err, name)!);
  }
  return copy;
}

/** A call in a lane: its operation, its caller's signal, and how to answer it (once). */
class Waiting {
  readonly operation: Operation;
  readonly signal: AbortSignal | undefined;
  /** Taken out of the queue for a request: an abort no longer removes it. */
  taken = false;
  #answer: ((outcome: { reply: Reply } | { error: unknown }) => void) | null;

  constructor(operation: Operation, signal: AbortSignal | undefined, answer: (outcome: { reply: Reply } | { error: unknown }) => void) {
    this.operation = operation;
    this.signal = signal;
    this.#answer = answer;
  }

  get settled(): boolean {
    return this.#answer === null;
  }

  resolve(reply: Reply): void {
    this.#settle({ reply });
  }

  reject(error: unknown): void {
    this.#settle({ error });
  }

  #settle(outcome: { reply: Reply } | { error: unknown }): void {
    const answer = this.#answer;
    this.#answer = null;
    answer?.(outcome);
  }
}

/** The calls of one client to one space: at most one request of them on its way at a time. */
class Lane {
  readonly spacePath: string;
  readonly queue: Waiting[] = [];
  /** Requests of this lane on their way (a lone call, or a batch). */
  busy = 0;
  /** The sender is running (it sends what waits until the queue is empty). */
  sending = false;

  constructor(spacePath: string) {
    this.spacePath = spacePath;
  }
}

/** The lanes of one client (one `Requester`, shared by its views): see the module comment. */
export class Coalescer {
  readonly #requester: Requester;
  readonly #lanes = new Map<string, Lane>();
  // Idempotency key -> whether its call went out in a batch, for the calls sent again (oldest first).
  readonly #forms = new Map<string, boolean>();
  /** The server has no batch route: every call goes alone from now on. */
  unsupported = false;
  /** The client is closing: calls go alone from now on. */
  closed = false;
  /** What went out, for a look from tests and the bench: batch requests, and calls in them. */
  batches = 0;
  batchedCalls = 0;

  constructor(requester: Requester) {
    this.#requester = requester;
  }

  /** Whether a call to this space now would wait for a request on its way (and so go out in a
   * batch with others): a caller with a choice of requests picks the batched one then. */
  busy(spacePath: string): boolean {
    const lane = this.#lanes.get(spacePath);
    return lane !== undefined && (lane.busy > 0 || lane.queue.length > 0) && !this.unsupported && !this.closed;
  }

  /**
   * One call, alone or in a batch. `key` is the caller's idempotency key when it may send the call
   * again (then its form is remembered); undefined for a fresh one.
   */
  call(
    spacePath: string,
    method: Method,
    suffix: string,
    body: Record<string, unknown> | undefined,
    key: string | undefined,
    signal?: AbortSignal,
  ): Promise<Reply> {
    const form = key === undefined ? undefined : this.#forms.get(key);
    if (key === undefined) key = newIdempotencyKey();
    else this.#remember(key, form === true);
    if (this.unsupported || this.closed || form === false) return this.#alone(spacePath, method, suffix, body, key, signal);
    let lane = this.#lanes.get(spacePath);
    if (lane === undefined) {
      lane = new Lane(spacePath);
      this.#lanes.set(spacePath, lane);
    }
    if (form === undefined && lane.busy === 0 && lane.queue.length === 0) {
      const idle = lane;
      idle.busy += 1;
      return this.#alone(spacePath, method, suffix, body, key, signal).finally(() => {
        idle.busy -= 1;
        this.#wake(idle);
      });
    }
    const queued = lane;
    const operation = new Operation(method, suffix, body, key);
    return new Promise<Reply>((resolve, reject) => {
      signal?.throwIfAborted();
      const onAbort = () => {
        if (!waiting.taken) {
          const at = queued.queue.indexOf(waiting);
          if (at >= 0) queued.queue.splice(at, 1);
        }
        waiting.reject(signal!.reason);
      };
      const waiting = new Waiting(operation, signal, (outcome) => {
        signal?.removeEventListener('abort', onAbort);
        if ('reply' in outcome) resolve(outcome.reply);
        else reject(outcome.error);
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      queued.queue.push(waiting);
      this.#wake(queued);
    });
  }

  /** Send nothing more in batches (the client is closing): what waits goes out alone. */
  close(): void {
    this.closed = true;
  }

  #alone(spacePath: string, method: Method, suffix: string, body: Record<string, unknown> | undefined, key: string, signal?: AbortSignal): Promise<Reply> {
    return this.#requester.call(method, spacePath + suffix, { body, idempotencyKey: key, signal });
  }

  #remember(key: string, batched: boolean): void {
    const forms = this.#forms;
    forms.delete(key);
    forms.set(key, batched);
    if (forms.size > FORMS_REMEMBERED_MAX) forms.delete(forms.keys().next().value!);
  }

  /** Start the lane's sender when calls wait and nothing of the lane is on its way. */
  #wake(lane: Lane): void {
    if (lane.queue.length > 0 && lane.busy === 0 && !lane.sending) {
      lane.sending = true;
      void this.#sendQueued(lane);
    }
  }

  async #sendQueued(lane: Lane): Promise<void> {
    try {
      while (lane.queue.length > 0 && lane.busy === 0) {
        const taken = this.#take(lane);
        lane.busy += 1;
        try {
          await this.#send(lane.spacePath, taken);
        } catch (err) {
          // #send answers every call itself; anything left unanswered gets what went wrong.
          for (const waiting of taken) if (!waiting.settled) waiting.reject(err);
        } finally {
          lane.busy -= 1;
        }
      }
    } finally {
      lane.sending = false;
    }
  }

  /** The oldest calls that fit in one batch. */
  #take(lane: Lane): Waiting[] {
    const queue = lane.queue;
    let count = 0;
    let size = 0;
    while (count < queue.length && count < BATCH_OPERATIONS_MAX) {
      const cost = queue[count]!.operation.size;
      if (count > 0 && size + cost > BATCH_BYTES_MAX) break;
      size += cost;
      count += 1;
    }
    const taken = queue.splice(0, count);
    for (const waiting of taken) waiting.taken = true;
    return taken;
  }

  async #send(spacePath: string, taken: Waiting[]): Promise<void> {
    const live = taken.filter((waiting) => !waiting.settled); // (an abort answered it already)
    if (live.length === 0) return;
    if (this.unsupported || this.closed) return this.#oneByOne(spacePath, live);
    if (live.length === 1 && this.#forms.get(live[0]!.operation.key) !== true) return this.#oneByOne(spacePath, live);
    const operations = live.map((waiting) => waiting.operation);
    for (const operation of operations) {
      if (this.#forms.has(operation.key)) this.#forms.set(operation.key, true);
    }
    let answers: Array<Reply | Error>;
    try {
      answers = await sendBatch(this.#requester, spacePath, operations);
    } catch (err) {
      if (batchUnsupported(err)) {
        this.unsupported = true;
        for (const operation of operations) {
          if (this.#forms.has(operation.key)) this.#forms.set(operation.key, false);
        }
        return this.#oneByOne(spacePath, live);
      }
      for (const waiting of live) waiting.reject(twin(err));
      return;
    }
    this.batches += 1;
    this.batchedCalls += live.length;
    live.forEach((waiting, index) => {
      const answer = answers[index]!;
      if (answer instanceof Error) waiting.reject(answer);
      else waiting.resolve(answer);
    });
  }

  /** Each call as its own request, all at once. */
  async #oneByOne(spacePath: string, taken: Waiting[]): Promise<void> {
    await Promise.all(
      taken.map(async (waiting) => {
        const { method, suffix, body, key } = waiting.operation;
        try {
          waiting.resolve(await this.#alone(spacePath, method, suffix, body, key, waiting.signal));
        } catch (err) {
          waiting.reject(err);
        }
      }),
    );
  }
}
