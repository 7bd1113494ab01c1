/**
 * The run API: wrap a function once where it is defined, call it as before, and the coordination
 * happens inside the call (the official 0.3.0 client's verbs, in TypeScript's idiom).
 *
 * ```ts
 * import { once, limit, slots, budget, queue, serve, stop } from 'runstate-sdk';
 *
 * const research = once(async (company: string) => ({ company }), { name: 'research' });
 * const search = limit('search-api', async (query: string) => [query], { max: 60, per: 'minute' });
 * const openPage = slots('browser', async (url: string) => url, { max: 5 });
 * const callModel = budget('model-usd', async (prompt: string) => ({ usd: 0.12 }), { reserve: 0.4, cost: (r) => r.usd, limit: 50 });
 * ```
 *
 * Every verb belongs to a run: by name (`RUNSTATE_RUN`, default `default`; one root scope per name
 * in the space, joined by every process that names it, made by the first), or the one picked with
 * `run(name)` / `child(name)`. The module functions use a default `RunClient` configured from the
 * environment (`RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID`, `RUNSTATE_BASE_URL`, `RUNSTATE_RUN`) on its
 * first call: importing never reads the environment or sends anything.
 *
 * Semantics, as the 0.3.0 client's:
 * - `once(fn)`: the first caller with given arguments in the run runs `fn`; every other caller, in
 *   any process, waits and gets the same result. A failure gives the work back for another try
 *   (`attempts`, default 3); the last one throws `OnceFailedError` to every caller. The hold is a
 *   lease renewed as a claim's is (through an outage, until its end by this process's clock).
 * - `limit(name, fn, { max, per })`: takes quota units (waiting in the server's fair line) before
 *   each call. `take(name)` takes them without a function.
 * - `slots(name, fn, { max })`: holds pool units while each call runs, at most `max` across every
 *   worker.
 * - `budget(name, fn, { reserve, cost })`: reserves money before each call, charges `cost(result)`
 *   after it and gives back the rest; nothing is charged when `fn` throws.
 * - `queue(name, handler?, options)`: work for worker processes. Calling it submits a job and waits
 *   for its result; `send()` submits only; `gather()` submits a group and returns once `need` results
 *   are accepted. `serve()` runs the handlers of every queue defined with one.
 * - `stop()` cancels the run: nothing new starts anywhere, and running work sees its signal abort.
 * - `sleep(name, duration)`: a durable sleep (a process that restarts waits only for what is left);
 *   `together(name, count)`: continue once `count` workers arrived.
 * - `context()`: what the current wrapped call or job runs under (`signal`, `attempt`, `key`, run).
 *
 * A wrapped function becomes async (it returns a promise), whatever it was.
 */

import { hostname } from 'node:os';

import { Runstate } from './client.js';
import { encodeClaimKey } from './claims.js';
import type { RunstateEvent } from './coordination.js';
import { ConfigError, LeaseLostError, OnceFailedError, RunstateError, ScopeCancelledError, waitTimeout } from './errors.js';
import { checkName, workKey } from './keys.js';
import { QUEUE_IMPL, QueueImpl, type GatherOptions, type Job, type Queue, type QueueOptions } from './queue.js';
import { releaseAfterWork } from './lease.js';
import { LeaseClock, Renewal } from './renewal.js';
import { runEnded } from './runwatch.js';
import {
  HOLD_MS,
  RESULT_BYTES_MAX,
  SETTLE_WITHIN_MS,
  type AnyFn,
  type RunContext,
  type Wrapped,
  budgetSizes,
  callGet,
  callPost,
  callPut,
  context,
  current,
  errorMessage,
  linkSignals,
  pollDelay,
  positiveInt,
  quotaSizes,
  rideThrough,
  settleReservation,
  voidReservation,
  warnBudget,
} from './runkit.js';
import type { ScopeHandle } from './scopes.js';
import { sleepNamed, timerBody, togetherNamed } from './timing.js';
import { nowMs } from './time.js';
import { warn } from './warnings.js';
import { type Amount, type Duration, type Per, leaseSeconds as toLeaseSeconds, parseDuration, toMinor } from './units.js';

export { context } from './runkit.js';
export type { RunContext } from './runkit.js';
export type { Queue, QueueOptions, Job, GatherOptions } from './queue.js';

export const ENV_RUN = 'RUNSTATE_RUN';
export const DEFAULT_RUN = 'default';
// -- options and context ---------------------------------------------------------------------------

export interface RunClientOptions {
  /** Else `RUNSTATE_API_KEY`. */
  apiKey?: string;
  /** Else `RUNSTATE_SPACE_ID`. */
  spaceId?: string;
  /** Else `RUNSTATE_BASE_URL`, else `http://localhost:8080`. */
  baseUrl?: string;
  /** The run every call joins, by name; else `RUNSTATE_RUN`, else `default`. */
  run?: string;
  /** This worker's name on leases and waits; default `<hostname>-<pid>`. */
  worker?: string;
  requestTimeoutMs?: number;
  retries?: number;
}

// -- the run client --------------------------------------------------------------------------------

interface Shared {
  options: RunClientOptions;
  client: Runstate | null;
  worker: string;
  queues: Map<string, QueueImpl>;
  resources: Map<string, Promise<any>>;
}

type RunSpec = { kind: 'named'; name?: string; deadline?: Duration } | { kind: 'child'; name?: string; deadline?: Duration; parent: RunClient };

/** Set only by `run()` and `child()`: the settings shared, and the run bound. Not exported. */
const BOUND: unique symbol = Symbol('runstate.bound');

interface InternalRunOptions extends RunClientOptions {
  [BOUND]?: { shared: Shared; spec: RunSpec };
}

export interface ServeOptions {
  /** Jobs running at once per queue (instead of each queue's own `concurrency`). */
  concurrency?: number;
  /** Only these queues (each defined with a handler); default every one defined on this client. */
  queues?: Array<Queue<any, any>>;
  /** Abort to stop taking work, wait up to 30 s for running jobs, and put the rest back. */
  signal?: AbortSignal;
  /** Stop the same way on SIGTERM and SIGINT (a second SIGINT exits at once); default true. */
  handleSignals?: boolean;
}

export interface RunEvent {
  id: string;
  type: string;
  at: Date;
  data: Record<string, any>;
  /** Resume after this event with `events({ cursor })`. */
  cursor: string;
}

export interface RunStatus {
  run: { id: string; name: string; state: 'running' | 'stopped' | 'finished' | 'expired'; deadline: Date | null };
  workers: Array<{ worker: string; holding: number; leaseExpiresAt: Date | null }>;
  waiting: Array<{ kind: string; name: string; units: number }>;
}

/**
 * A client bound to one run. `new RunClient(options)` joins the run `options.run` (else
 * `RUNSTATE_RUN`, else `default`); `run(name)` and `child(name)` bind others, sharing the settings.
 * Nothing is read or sent until the first call.
 */
export class RunClient {
  readonly #shared: Shared;
  readonly #spec: RunSpec;
  #resolved: Promise<{ id: string; name: string }> | null = null;
  #stopped: ScopeCancelledError | null = null;
  readonly #stop = new AbortController();

  constructor(options: RunClientOptions = {}) {
    const bound = (options as InternalRunOptions)[BOUND];
    if (bound !== undefined) {
      this.#shared = bound.shared;
      this.#spec = bound.spec;
    } else {
      const worker = options.worker ?? `${hostname()}-${process.pid}`;
      this.#shared = { options: { ...options }, client: null, worker, queues: new Map(), resources: new Map() };
      this.#spec = { kind: 'named', name: options.run };
    }
  }

  static #bound(shared: Shared, spec: RunSpec): RunClient {
    const options: InternalRunOptions = { [BOUND]: { shared, spec } };
    return new RunClient(options);
  }

  /** Change settings: options given replace the current ones, the rest stay. */
  configure(options: RunClientOptions): void {
    const shared = this.#shared;
    shared.options = { ...shared.options, ...Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) };
    if (options.worker !== undefined) shared.worker = options.worker;
    shared.client?.close();
    shared.client = null;
    shared.resources.clear();
    this.#resolved = null;
  }

  /** A client bound to the named root run (joined, or made, on first use). */
  run(name: string, options: { deadline?: Duration } = {}): RunClient {
    checkName(name, 'run');
    return RunClient.#bound(this.#shared, { kind: 'named', name, deadline: options.deadline });
  }

  /** A client bound to a new child run of this client's run. */
  child(name?: string, options: { deadline?: Duration } = {}): RunClient {
    if (name !== undefined) checkName(name, 'run');
    return RunClient.#bound(this.#shared, { kind: 'child', name, deadline: options.deadline, parent: this });
  }

  /** @internal The full client underneath (built from the settings on first use). */
  get client(): Runstate {
    const shared = this.#shared;
    if (shared.client === null) {
      const { apiKey, spaceId, baseUrl, requestTimeoutMs, retries } = shared.options;
      shared.client = new Runstate({ apiKey, spaceId, baseUrl, requestTimeoutMs, retries, holder: shared.worker });
    }
    return shared.client;
  }

  get #worker(): string {
    return this.#shared.worker;
  }

  /** Aborts when this client sees its run stop. */
  get signal(): AbortSignal {
    return this.#stop.signal;
  }

  /** The run: its id and name, joining or making it on first use. Throws `ScopeCancelledError`
   * once this client has seen the run stop. */
  async info(): Promise<{ id: string; name: string }> {
    if (this.#stopped !== null) throw this.#stopped;
    if (this.#resolved === null) {
      this.#resolved = this.#resolve();
      this.#resolved.catch(() => (this.#resolved = null));
    }
    return this.#resolved;
  }

  /** The id of this client's run, joining or making it if needed. */
  async runId(): Promise<string> {
    return (await this.info()).id;
  }

  async #resolve(): Promise<{ id: string; name: string }> {
    const spec = this.#spec;
    const deadline = spec.deadline === undefined ? undefined : new Date(Date.now() + parseDuration(spec.deadline, 'deadline') * 1000).toISOString();
    if (spec.kind === 'named') {
      const name = spec.name ?? this.#shared.options.run ?? (process.env[ENV_RUN] || DEFAULT_RUN);
      checkName(name, 'run');
      const scope = await this.client.scopes.ensure(name, { deadline });
      return { id: scope.id, name };
    }
    const parentId = await spec.parent.runId();
    const scope = await this.client.scope(parentId).child({ name: spec.name, deadline });
    return { id: scope.id, name: spec.name ?? '(child run)' };
  }

  async #scope(): Promise<ScopeHandle> {
    return this.client.scope(await this.runId());
  }

  /** @internal A `ScopeCancelledError` from a call made in this run means the run has ended. */
  noteError(err: unknown): void {
    if (err instanceof ScopeCancelledError) this.#markStopped(err);
  }

  #markStopped(err: ScopeCancelledError): void {
    if (this.#stopped !== null) return;
    this.#stopped = err;
    this.#stop.abort(err);
  }

  async #track<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      this.noteError(err);
      throw err;
    }
  }

  /**
   * Run `work` in a context of this run: its signal aborts when the run stops, an enclosing call's
   * signal aborts, or one of `extra` does (a hold is lost). `attempt` and `key` come from `own`,
   * else from the enclosing call.
   */
  async #within<T>(extra: AbortSignal[], work: (ctx: RunContext) => T | PromiseLike<T>, own: { attempt?: number; key?: string } = {}): Promise<T> {
    const outer = context();
    const run = await this.info();
    const linked = linkSignals([this.signal, ...(outer ? [outer.signal] : []), ...extra]);
    const runContext: RunContext = { run, signal: linked.signal, attempt: own.attempt ?? outer?.attempt ?? 1, key: own.key ?? outer?.key ?? null };
    try {
      return await current.run(runContext, () => work(runContext));
    } finally {
      linked.dispose();
    }
  }

  /** A named resource, created or checked with `sizes` (`{}` looks it up), once per client. */
  async #resource(kind: 'allowances' | 'permits' | 'budgets', name: string, sizes: Record<string, unknown>): Promise<any> {
    const cacheKey = `${kind} ${name} ${JSON.stringify(sizes)}`;
    const resources = this.#shared.resources;
    let found = resources.get(cacheKey);
    if (found === undefined) {
      const made: Promise<any> = callPut(this.client, `/${kind}/by-name/${encodeClaimKey(name)}`, sizes).then((reply) => reply.body);
      resources.set(cacheKey, made);
      made.catch(() => resources.delete(cacheKey));
      found = made;
    }
    return found;
  }

  // -- stop and finish -----------------------------------------------------------------------------

  /** Stop the run: nothing new starts anywhere, and running work sees its signal abort. */
  async stop(): Promise<void> {
    await this.#end('cancel');
  }

  /** Mark the run finished. */
  async finish(): Promise<void> {
    await this.#end('complete');
  }

  async #end(action: 'cancel' | 'complete'): Promise<void> {
    if (this.#stopped !== null) return;
    const scope = await this.#scope();
    const view = action === 'cancel' ? await scope.cancel() : await scope.complete();
    this.#markStopped(runEnded(scope.id, view));
  }

  // -- once ----------------------------------------------------------------------------------------

  /** `fn` once per run for the same arguments; every caller gets its result. */
  once<F extends AnyFn>(fn: F, options: OnceOptions<Parameters<F>> = {}): Wrapped<F> {
    if (typeof fn !== 'function') throw new ConfigError('once() needs a function');
    if (options.name === undefined && !fn.name) throw new ConfigError("once() needs a named function or a name option, e.g. once(fn, { name: 'research' })");
    const name = checkName(options.name ?? fn.name, 'once');
    const attempts = positiveInt(options.attempts ?? 3, 'attempts', 100);
    const lease = toLeaseSeconds(options.lease);
    return (async (...args: Parameters<F>) => {
      const key = workKey(name, args, options.key as ((...a: any[]) => string) | undefined);
      return this.#track(() => this.#once(fn, args, name, key, attempts, lease));
    }) as Wrapped<F>;
  }

  async #once(fn: AnyFn, args: unknown[], name: string, key: string, attempts: number, lease: number): Promise<any> {
    const run = await this.info();
    const ctx = this.client;
    const ids = { scopeId: run.id, key };
    for (;;) {
      if (this.#stopped !== null) throw this.#stopped;
      const sentMs = nowMs();
      const got = (await callPost(ctx, '/once/acquire', { ...ids, holder: this.#worker, holderSession: ctx.session, leaseSeconds: lease })).body;
      if (got.state === 'DONE') return got.result ?? null;
      if (got.state === 'FAILED') throw new OnceFailedError(got.lastError ?? '', got.attempts ?? 0);
      if (got.state === 'HELD') {
        const view = (await callGet(ctx, '/once', { ...ids, waitMs: HOLD_MS }, HOLD_MS, this.signal)).body;
        if (view.state === 'DONE') return view.result ?? null;
        if (view.state === 'FAILED') throw new OnceFailedError(view.lastError ?? '', view.attempts ?? 0);
        continue; // OPEN (try it ourselves) or still HELD
      }
      // We hold it: run fn under a renewed lease and record the outcome.
      const token: string = got.token;
      const clock = new LeaseClock(sentMs, lease);
      const lost = new AbortController();
      const renewal = new Renewal(
        (seconds, signal) => callPost(ctx, '/once/renew', { ...ids, token, leaseSeconds: seconds }, signal),
        lease,
        clock,
        `once key ${JSON.stringify(key)}`,
        (err) => {
          this.noteError(err);
          lost.abort(err instanceof LeaseLostError || err instanceof ScopeCancelledError ? err : new LeaseLostError('STALE_CLAIM', 409, `lost the hold on ${name}`, { cause: err }));
        },
      );
      let ok = true;
      let value: unknown;
      try {
        value = await this.#within([lost.signal], () => fn(...args), { attempt: (got.attempts ?? 0) + 1, key });
      } catch (err) {
        ok = false;
        value = err;
      }
      await renewal.stop();
      if (lost.signal.aborted || clock.passed) {
        const reason = lost.signal.reason ?? new LeaseLostError('LEASE_RENEWALS_EXHAUSTED', 409, `the hold on ${name} ran out`);
        if (reason instanceof ScopeCancelledError) throw reason;
        throw new LeaseLostError('LEASE_LOST', 409, `lost the hold on ${name} before it finished; another worker may have taken it over`, { cause: reason });
      }
      if (!ok) {
        const failed = await rideThrough(clock, (idempotencyKey) =>
          callPost(ctx, '/once/fail', { ...ids, token, error: errorMessage(value), maxAttempts: attempts }, undefined, idempotencyKey),
        ).then((reply) => reply.body, (err) => {
          warn('RUNSTATE_ONCE_FAIL_LOST', `${name}: the failure could not be recorded (${String(err)}); its lease will run out instead`);
          return null;
        });
        if (failed?.state === 'FAILED') throw new OnceFailedError(errorMessage(value), failed.attempts ?? attempts);
        throw value;
      }
      const text = JSON.stringify(value ?? null);
      if (Buffer.byteLength(text, 'utf8') > RESULT_BYTES_MAX) {
        const message = `${name} returned ${Buffer.byteLength(text, 'utf8')} bytes; once results are at most ${RESULT_BYTES_MAX} bytes. Store it elsewhere and return a reference.`;
        await rideThrough(clock, (idempotencyKey) =>
          callPost(ctx, '/once/fail', { ...ids, token, error: message, maxAttempts: attempts }, undefined, idempotencyKey),
        ).catch(() => undefined);
        throw new RunstateError('RESULT_TOO_LARGE', 0, message);
      }
      try {
        await rideThrough(clock, (idempotencyKey) => callPost(ctx, '/once/complete', { ...ids, token, result: value ?? null }, undefined, idempotencyKey));
      } catch (err) {
        if (err instanceof LeaseLostError) throw new LeaseLostError('LEASE_LOST', 409, `lost the hold on ${name} before its result was recorded`, { cause: err });
        throw err;
      }
      return value;
    }
  }

  // -- capacity ------------------------------------------------------------------------------------

  /** Take quota units of `name` before each call of `fn`: `limit('search', fn, { max: 60, per: 'minute' })`. */
  limit<F extends AnyFn>(name: string, fn: F, options: LimitOptions = {}): Wrapped<F> {
    checkName(name, 'limit');
    if (typeof fn !== 'function') throw new ConfigError('limit() needs a function; use take() to take units without one');
    quotaSizes(options);
    positiveInt(options.units ?? 1, 'units');
    return (async (...args: Parameters<F>) => {
      await this.take(name, options);
      return this.#within([], () => fn(...args));
    }) as Wrapped<F>;
  }

  /** Take quota units of `name` without wrapping a function, waiting in line when the window is
   * used up (`timeout` default 60 s, then `WaitTimeoutError`). */
  async take(name: string, options: LimitOptions = {}): Promise<void> {
    checkName(name, 'limit');
    const units = positiveInt(options.units ?? 1, 'units');
    const sizes = quotaSizes(options);
    const timeoutMs = parseDuration(options.timeout ?? 60, 'timeout') * 1000;
    await this.#track(async () => {
      const run = await this.info();
      const quota = await this.#resource('allowances', name, sizes ?? {});
      const started = nowMs();
      for (;;) {
        const leftMs = timeoutMs - (nowMs() - started);
        if (leftMs <= 0) throw waitTimeout(`waited too long for ${units} unit(s) of limit ${name}`);
        const ttlSeconds = Math.min(3600, Math.max(5, Math.ceil(leftMs / 1000)));
        const waiter = (await callPost(this.client, `/allowances/${quota.id}/wait`, { scopeId: run.id, units, holder: this.#worker, ttlSeconds })).body;
        if (waiter.state === 'GRANTED') return;
        for (let polls = 0; ; polls += 1) {
          if (nowMs() - started >= timeoutMs) {
            await callPost(this.client, `/allowance-waiters/${waiter.waiterId}/cancel`, {}).catch(() => undefined);
            throw waitTimeout(`waited too long for ${units} unit(s) of limit ${name}`);
          }
          await pollDelay(polls, this.signal);
          if (this.#stopped !== null) throw this.#stopped;
          const view = (await callGet(this.client, `/allowance-waiters/${waiter.waiterId}`)).body;
          if (view.state === 'GRANTED') return;
          if (view.state !== 'WAITING') break; // expired or cancelled: join the line again
        }
      }
    });
  }

  /** Hold `units` of the pool `name` while each call of `fn` runs: at most `max` at once across
   * every worker. Without `fn`, a holder whose `run(fn)` does the same for one call. */
  slots<F extends AnyFn>(name: string, fn: F, options?: SlotsOptions): Wrapped<F>;
  slots(name: string, options?: SlotsOptions): { run<T>(fn: (ctx: RunContext) => T | PromiseLike<T>): Promise<T> };
  slots(name: string, fnOrOptions?: AnyFn | SlotsOptions, maybeOptions: SlotsOptions = {}): any {
    checkName(name, 'slots');
    const fn = typeof fnOrOptions === 'function' ? fnOrOptions : undefined;
    const options = (typeof fnOrOptions === 'function' ? maybeOptions : fnOrOptions) ?? {};
    const units = positiveInt(options.units ?? 1, 'units');
    if (options.max !== undefined) positiveInt(options.max, 'max');
    const lease = toLeaseSeconds(options.lease);
    const timeoutMs = parseDuration(options.timeout ?? 60, 'timeout') * 1000;
    const hold = <T>(work: (ctx: RunContext) => T | PromiseLike<T>): Promise<T> =>
      this.#track(async () => {
        const pool = await this.#resource('permits', name, options.max === undefined ? {} : { units: options.max });
        const lease_ = await (await this.#scope()).poolById(pool.id).acquire({ units, leaseSeconds: lease, timeoutMs, signal: this.signal });
        let result: T;
        try {
          result = await this.#within([lease_.signal], work);
        } catch (err) {
          await lease_.release().catch(() => undefined);
          throw err;
        }
        const lostBefore = lease_.isLost;
        // The release has the last word: a grant taken away between two renewals (its run ended
        // elsewhere) is learned when the release is refused. A run this client saw stop says so
        // itself, and its result stands.
        const cause = await releaseAfterWork(lease_);
        if (cause !== null && (lostBefore || this.#stopped === null)) {
          if (cause.cause instanceof ScopeCancelledError) throw cause.cause;
          const how = lostBefore ? '' : ' (its release was refused)';
          throw new LeaseLostError('LEASE_LOST', 409, `lost the ${name} slot while the function ran${how}`, { cause });
        }
        return result;
      });
    if (fn === undefined) return { run: hold };
    return (...args: unknown[]) => hold(() => fn(...args));
  }

  /** Reserve money from the budget `name` before each call of `fn`, charge `cost(result)` after it
   * (the whole reserve without `cost`), and give back the rest; nothing is charged when `fn` throws. */
  budget<F extends AnyFn>(name: string, fn: F, options: BudgetOptions<Awaited<ReturnType<F>>>): Wrapped<F> {
    checkName(name, 'budget');
    if (typeof fn !== 'function') throw new ConfigError('budget() needs a function');
    if (options?.reserve === undefined) throw new ConfigError('budget() needs a reserve amount');
    const sizes = budgetSizes(options);
    return (async (...args: Parameters<F>) =>
      this.#track(async () => {
        const run = await this.info();
        const info = await this.#resource('budgets', name, sizes ?? {});
        const reserveMinor = toMinor(options.reserve, info.scale, 'reserve');
        if (reserveMinor === '0') throw new ConfigError('reserve must be more than 0');
        const settleBy = new Date(Date.now() + SETTLE_WITHIN_MS).toISOString();
        const reservation = (await callPost(this.client, `/budgets/${info.id}/reserve`, { scopeId: run.id, holder: this.#worker, amountMinor: reserveMinor, settleBy })).body;
        const reservationId: string = reservation.reservationId;
        let result: Awaited<ReturnType<F>>;
        try {
          result = await this.#within([], () => fn(...args));
        } catch (err) {
          await voidReservation(this.client, info.id, reservationId).catch((failure) => warnBudget(name, 'give back', failure));
          throw err;
        }
        let costMinor = reserveMinor;
        let costError: unknown = null;
        try {
          if (options.cost !== undefined) costMinor = toMinor(options.cost(result), info.scale, 'cost');
        } catch (err) {
          costError = err; // the work happened: the reserve is charged, then the cost function's failure is told
        }
        await settleReservation(this.client, info.id, reservationId, costMinor).catch((failure) => warnBudget(name, 'charge', failure));
        if (costError !== null) {
          throw costError instanceof ConfigError ? costError : new ConfigError(`cost() failed for budget ${name}: ${errorMessage(costError)}`);
        }
        return result;
      })) as Wrapped<F>;
  }

  /** Create or check resources without calling anything or spending units. */
  async setup(resources: { limits?: Record<string, { max: number; per: Per }>; slots?: Record<string, { max: number }>; budgets?: Record<string, { limit: Amount; currency?: string; scale?: number }> }): Promise<void> {
    const wanted: Array<() => Promise<unknown>> = [];
    for (const [name, sizes] of Object.entries(resources.limits ?? {})) {
      const body = quotaSizes(sizes)!;
      wanted.push(() => this.#resource('allowances', checkName(name, 'limit'), body));
    }
    for (const [name, sizes] of Object.entries(resources.slots ?? {})) {
      const body = { units: positiveInt(sizes.max, 'max') };
      wanted.push(() => this.#resource('permits', checkName(name, 'slots'), body));
    }
    for (const [name, sizes] of Object.entries(resources.budgets ?? {})) {
      const body = budgetSizes(sizes)!;
      wanted.push(() => this.#resource('budgets', checkName(name, 'budget'), body));
    }
    await Promise.all(wanted.map((ensure) => ensure()));
  }

  // -- queues --------------------------------------------------------------------------------------

  /** A queue of work: `queue(name)` submits only; `queue(name, handler, options)` also registers
   * `handler` for `serve()`. */
  queue<I = unknown, O = unknown>(name: string, handler?: ((input: I) => O | PromiseLike<O>) | null, options: QueueOptions<I> = {}): Queue<I, Awaited<O>> {
    if (handler !== undefined && handler !== null && typeof handler !== 'function') throw new ConfigError('queue() takes a handler function');
    const impl = new QueueImpl(this, name, handler ?? null, options);
    if (impl.handler !== null) this.#shared.queues.set(name, impl);
    const call = ((input: I) => impl.call(input)) as Queue<I, Awaited<O>>;
    Object.defineProperty(call, 'queueName', { value: impl.name });
    Object.defineProperty(call, QUEUE_IMPL, { value: impl });
    call.send = (input: I) => impl.send(input) as Promise<Job<Awaited<O>>>;
    call.gather = (inputs, gatherOptions) => impl.gather(inputs, gatherOptions as GatherOptions<any, any>) as Promise<Array<Awaited<O>>>;
    return call;
  }

  /** Run the handlers of the queues defined on this client until the run stops, `signal` aborts, or
   * the process gets SIGTERM/SIGINT; then wait up to 30 s for running jobs. */
  async serve(options: ServeOptions = {}): Promise<void> {
    const chosen: QueueImpl[] = [];
    if (options.queues === undefined) chosen.push(...this.#shared.queues.values());
    else {
      for (const queue of options.queues) {
        const impl = (queue as any)?.[QUEUE_IMPL] as QueueImpl | undefined;
        if (impl === undefined || impl.handler === null) throw new ConfigError('serve() was given a queue without a handler');
        chosen.push(impl);
      }
    }
    if (chosen.length === 0) throw new ConfigError("serve() found no queues with handlers; define one with queue(name, handler)");
    if (options.concurrency !== undefined) positiveInt(options.concurrency, 'concurrency');
    if (this.#stopped !== null) throw this.#stopped;
    const stop = new AbortController();
    const cleanups: Array<() => void> = [];
    if (options.signal !== undefined) {
      const onAbort = () => stop.abort(options.signal!.reason);
      if (options.signal.aborted) onAbort();
      else options.signal.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => options.signal!.removeEventListener('abort', onAbort));
    }
    if (options.handleSignals ?? true) {
      const onSignal = (name: NodeJS.Signals) => {
        if (stop.signal.aborted && name === 'SIGINT') process.exit(130); // a second Ctrl-C stops waiting
        stop.abort(new Error(`serve() was asked to stop (${name})`));
      };
      for (const name of ['SIGTERM', 'SIGINT'] as const) {
        process.on(name, onSignal);
        cleanups.push(() => process.off(name, onSignal));
      }
    }
    try {
      await Promise.all(chosen.map((impl) => impl.serve(options.concurrency ?? impl.concurrency, stop.signal)));
    } finally {
      for (const cleanup of cleanups) cleanup();
    }
  }

  // -- timing --------------------------------------------------------------------------------------

  /** A durable sleep: a process that restarts and sleeps with the same name waits only for what
   * is left. Give a duration, or `{ until }` a time. */
  async sleep(name: string, duration: Duration | { until: Date }): Promise<void> {
    checkName(name, 'sleep');
    const body = timerBody(duration);
    await this.#track(async () => sleepNamed(this.client, (await this.info()).id, name, body, this.signal));
  }

  /** Continue once `count` workers have called `together()` with this name (a latecomer after the
   * release carries on at once). */
  async together(name: string, count: number, options: { timeout?: Duration } = {}): Promise<void> {
    checkName(name, 'together');
    positiveInt(count, 'count');
    const timeoutMs = options.timeout === undefined ? Infinity : parseDuration(options.timeout, 'timeout') * 1000;
    await this.#track(async () => togetherNamed(this.client, (await this.info()).id, this.#worker, name, count, timeoutMs, this.signal));
  }

  // -- watching ------------------------------------------------------------------------------------

  /** The run's events as they happen (an async iterator that resumes after network errors); pass
   * an event's `cursor` to start after it. */
  async *events(options: { types?: string[]; cursor?: string; signal?: AbortSignal } = {}): AsyncGenerator<RunEvent, void, undefined> {
    const run = await this.#knownRun();
    for await (const event of this.client.events.watch({ scopeId: run.id, types: options.types, cursor: options.cursor, signal: options.signal })) {
      yield toRunEvent(event);
    }
  }

  /** The run's state, the workers holding work in it, and what waits for capacity. */
  async status(): Promise<RunStatus> {
    const run = await this.#knownRun();
    const scope = await this.client.scope(run.id).status();
    const states: Record<string, RunStatus['run']['state']> = { ACTIVE: 'running', CANCELLED: 'stopped', COMPLETED: 'finished', EXPIRED: 'expired' };
    let state = states[String(scope.storedState)] ?? 'stopped';
    const deadline = typeof scope.deadline === 'string' ? new Date(scope.deadline) : null;
    if (state === 'running' && scope.effective !== 'ACTIVE') state = scope.effective === 'EXPIRED' ? 'expired' : 'stopped';
    const ops = await this.client.diagnostics.run(run.id);
    return {
      run: { id: run.id, name: typeof scope.name === 'string' ? scope.name : run.name, state, deadline },
      workers: (ops.workers ?? []).map((worker: any) => ({
        worker: worker.holder,
        holding: (worker.keys ?? []).length,
        leaseExpiresAt: worker.earliestLeaseExpiry ? new Date(worker.earliestLeaseExpiry) : null,
      })),
      waiting: (ops.waiting ?? []).map((waiter: any) => ({ kind: 'slots', name: waiter.permit, units: waiter.units })),
    };
  }

  /** The run, even after it stopped (status and events read it then too). */
  async #knownRun(): Promise<{ id: string; name: string }> {
    if (this.#stopped !== null && this.#resolved !== null) return this.#resolved;
    return this.info();
  }
}

export interface OnceOptions<A extends unknown[] = unknown[]> {
  /** The work's name in the run; default the function's name. */
  name?: string;
  /** Names one piece of work from the arguments (default: a hash of them). */
  key?: (...args: A) => string;
  /** Tries before it fails for good; default 3. */
  attempts?: number;
  /** The hold's lease while `fn` runs (renewed); default 30 s. */
  lease?: Duration;
}

export interface LimitOptions {
  /** Declare the quota: `max` units `per` window (created if missing, checked if not). */
  max?: number;
  per?: Per;
  /** Units each call takes; default 1. */
  units?: number;
  /** How long a call may wait in line; default 60 s, then `WaitTimeoutError`. */
  timeout?: Duration;
}

export interface SlotsOptions {
  /** Declare the pool: `max` units (created if missing, checked if not). */
  max?: number;
  units?: number;
  timeout?: Duration;
  lease?: Duration;
}

export interface BudgetOptions<R> {
  /** Reserved before each call, in major units (`0.40` or `'0.40'`). */
  reserve: Amount;
  /** What the call really cost, from its result; default the whole reserve. */
  cost?: (result: R) => Amount;
  /** Declare the budget: its limit (created if missing, checked if not), currency and scale. */
  limit?: Amount;
  currency?: string;
  scale?: number;
}

function toRunEvent(event: RunstateEvent & { cursor: string }): RunEvent {
  return { id: event.eventId, type: event.type, at: new Date(event.createdAt), data: event.payload ?? {}, cursor: event.cursor };
}

// -- the default client and the module functions ---------------------------------------------------

let defaultClient: RunClient | null = null;

/** The client behind the module functions, configured from the environment on first use. */
export function defaultRun(): RunClient {
  defaultClient ??= new RunClient();
  return defaultClient;
}

export const configure = (options: RunClientOptions): void => defaultRun().configure(options);
export const run = (name: string, options?: { deadline?: Duration }): RunClient => defaultRun().run(name, options);
export const child = (name?: string, options?: { deadline?: Duration }): RunClient => defaultRun().child(name, options);
export const runId = (): Promise<string> => defaultRun().runId();
export function once<F extends AnyFn>(fn: F, options?: OnceOptions<Parameters<F>>): Wrapped<F> {
  return defaultRun().once(fn, options);
}
export function limit<F extends AnyFn>(name: string, fn: F, options?: LimitOptions): Wrapped<F> {
  return defaultRun().limit(name, fn, options);
}
export const take = (name: string, options?: LimitOptions): Promise<void> => defaultRun().take(name, options);
export function slots<F extends AnyFn>(name: string, fn: F, options?: SlotsOptions): Wrapped<F>;
export function slots(name: string, options?: SlotsOptions): { run<T>(fn: (ctx: RunContext) => T | PromiseLike<T>): Promise<T> };
export function slots(name: string, fnOrOptions?: any, options?: SlotsOptions): any {
  return defaultRun().slots(name, fnOrOptions, options);
}
export function budget<F extends AnyFn>(name: string, fn: F, options: BudgetOptions<Awaited<ReturnType<F>>>): Wrapped<F> {
  return defaultRun().budget(name, fn, options);
}
export function queue<I = unknown, O = unknown>(name: string, handler?: ((input: I) => O | PromiseLike<O>) | null, options?: QueueOptions<I>): Queue<I, Awaited<O>> {
  return defaultRun().queue(name, handler, options);
}
export const serve = (options?: ServeOptions): Promise<void> => defaultRun().serve(options);
export const stop = (): Promise<void> => defaultRun().stop();
export const finish = (): Promise<void> => defaultRun().finish();
export const sleep = (name: string, duration: Duration | { until: Date }): Promise<void> => defaultRun().sleep(name, duration);
export const together = (name: string, count: number, options?: { timeout?: Duration }): Promise<void> => defaultRun().together(name, count, options);
export const setup = (resources: Parameters<RunClient['setup']>[0]): Promise<void> => defaultRun().setup(resources);
export const events = (options?: { types?: string[]; cursor?: string; signal?: AbortSignal }): AsyncGenerator<RunEvent, void, undefined> => defaultRun().events(options);
export const status = (): Promise<RunStatus> => defaultRun().status();
