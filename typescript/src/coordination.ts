/**
 * Barriers, timers, task groups, events and diagnostics (the Python SDK's `runstate.coordination`,
 * name for name):
 *
 *     run.barriers.create({ target: 3 })        -> BarrierHandle: arrive({ key }), status(), wait()
 *     run.timers.create({ afterSeconds: 60 })   -> TimerHandle: wait() (acknowledges it), cancel()
 *     run.groups.create({ mailbox, condition }) -> GroupHandle: submit, accept, reject, close, seal,
 *                                                  joinTask, status, wait
 *     rs.events.list(), rs.events.watch()       an async iterator over the event log, with a cursor
 *     rs.diagnostics.run(scopeId), .workers(scopeId), .waits()
 *
 * Where the server lets a wait park, it parks there: `TimerHandle.wait` holds its poll on the
 * server (`waitMs`, for its own timer only), and `events.watch` is a long poll. Barriers and groups
 * are read every `pollMs`, as the protocol gives them no held read. Every wait is bounded by the
 * caller's `timeoutMs` and throws `WaitTimeoutError` after it; the thing waited for carries on.
 */

import { checkId, nameSegment } from './claims.js';
import type { Context } from './context.js';
import { ConfigError, ConflictError, NotFoundError, isTransient, waitTimeout } from './errors.js';
import { parseTimestamp, required } from './lease.js';
import { TaskTicket } from './tasks.js';
import { checkMs, nowMs, pause } from './time.js';

export const POLL_MS = 250;
/** The longest hold one timer poll asks of the server (it caps it again itself). */
const TIMER_HOLD_MS_MAX = 20_000;
/** How long one watch asks the server to hold an empty page (it holds this client 20 s at most). */
export const WATCH_HOLD_S = 8;
// After a watch fails on the network, wait this long before asking again (doubling up to the max).
const WATCH_RETRY_MS = 250;
const WATCH_RETRY_MS_MAX = 5000;

export interface PollOptions {
  timeoutMs?: number;
  pollMs?: number;
  signal?: AbortSignal;
}

async function pollUntil<V>(read: () => Promise<V>, done: (view: V) => boolean, what: string, options: PollOptions, defaultTimeoutMs: number): Promise<V> {
  const { timeoutMs = defaultTimeoutMs, pollMs = POLL_MS, signal } = options;
  checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
  checkMs(options.pollMs, 'pollMs', { positive: true });
  const started = nowMs();
  for (;;) {
    const view = await read();
    if (done(view)) return view;
    const leftMs = timeoutMs - (nowMs() - started);
    if (leftMs <= 0) throw waitTimeout(`${what} within ${timeoutMs} ms`);
    await pause(Math.min(pollMs, leftMs), { signal });
    signal?.throwIfAborted();
  }
}

// -- barriers --------------------------------------------------------------------------------------

export class BarrierHandle {
  readonly #ctx: Context;
  readonly id: string;

  constructor(ctx: Context, barrierId: string) {
    this.#ctx = ctx;
    this.id = checkId('barrierId', barrierId);
  }

  /** Arrive once under `key` (again with the same key counts once); resolves to the barrier view.
   * After the release, `ConflictError` `BARRIER_RELEASED`; once its scope ended, `BARRIER_CANCELLED`. */
  async arrive(options: { key: string }): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', `/barriers/${this.id}/arrive`, { body: { arrivalKey: options.key } })).body;
  }

  async status(): Promise<Record<string, any>> {
    return (await this.#ctx.call('GET', `/barriers/${this.id}`)).body;
  }

  /** Until the barrier is released (or its epoch moves on); `ConflictError` `BARRIER_CANCELLED`
   * when its scope ended. It does not arrive for the caller. Default timeout 60 s. */
  async wait(options: PollOptions = {}): Promise<Record<string, any>> {
    checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
    checkMs(options.pollMs, 'pollMs', { positive: true });
    const pinned = await this.status();
    const view = await pollUntil(
      () => this.status(),
      (seen) => seen.state === 'CANCELLED' || seen.state === 'RELEASED' || seen.epoch !== pinned.epoch,
      `barrier ${this.id} did not release`,
      options,
      60_000,
    );
    if (view.state === 'CANCELLED') throw new ConflictError('BARRIER_CANCELLED', 409, `barrier ${this.id} was cancelled`);
    return view;
  }
}

export class BarriersAPI {
  readonly #ctx: Context;
  readonly scopeId: string;

  constructor(ctx: Context, scopeId: string) {
    this.#ctx = ctx;
    this.scopeId = scopeId;
  }

  /** A barrier that releases at `target` distinct arrivals. */
  async create(options: { target: number }): Promise<BarrierHandle> {
    const reply = await this.#ctx.call('POST', '/barriers', { body: { scopeId: this.scopeId, target: options.target } });
    return new BarrierHandle(this.#ctx, required(reply.body, 'id'));
  }

  /** The scope's barrier of this name, made by the first caller (safe to repeat; another target
   * is `ConflictError` `CONFLICT`). */
  async ensure(name: string, options: { target: number }): Promise<BarrierHandle> {
    const body = { scopeId: this.scopeId, target: options.target };
    const reply = await this.#ctx.call('PUT', `/barriers/by-name/${nameSegment(name)}`, { body });
    return new BarrierHandle(this.#ctx, required(reply.body, 'id'));
  }

  /** A handle on a barrier by id; sends nothing. */
  get(barrierId: string): BarrierHandle {
    return new BarrierHandle(this.#ctx, barrierId);
  }
}

// -- timers ----------------------------------------------------------------------------------------

export class TimerHandle {
  readonly #ctx: Context;
  readonly scopeId: string;
  readonly id: string;
  /** When it fires, as the server said (the epoch for a handle made with `get()`). */
  readonly fireAt: Date;

  constructor(ctx: Context, scopeId: string, timerId: string, fireAt: Date) {
    this.#ctx = ctx;
    this.scopeId = scopeId;
    this.id = checkId('timerId', timerId);
    this.fireAt = fireAt;
  }

  async status(): Promise<Record<string, any>> {
    return (await this.#ctx.call('GET', `/timers/${this.id}`)).body;
  }

  /** Until the timer fires; acknowledges it and resolves to `{ firedAt }`. `ConflictError` when it
   * was cancelled or expired unacknowledged. Default timeout 30 s. */
  async wait(options: PollOptions = {}): Promise<{ firedAt: Date }> {
    const { timeoutMs = 30_000, pollMs = POLL_MS, signal } = options;
    checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
    checkMs(options.pollMs, 'pollMs', { positive: true });
    const started = nowMs();
    for (;;) {
      const holdMs = Math.max(0, Math.min(Math.floor(timeoutMs - (nowMs() - started)), TIMER_HOLD_MS_MAX));
      const asked = nowMs();
      const body = { scopeId: this.scopeId, timerId: this.id, waitMs: holdMs };
      const listing = (await this.#ctx.call('POST', '/timers/poll', { body, waitMs: holdMs, signal })).body;
      const mine = (listing.timers as Array<Record<string, any>>).find((entry) => entry.id === this.id);
      if (mine !== undefined) {
        await this.#ctx.call('POST', `/timers/${this.id}/ack`, { body: { token: mine.token } });
        return { firedAt: parseTimestamp(mine.firedAt) };
      }
      const state = listing.timer?.state;
      if (state === 'ACKED') return { firedAt: parseTimestamp(listing.timer.firedAt) }; // by another handle
      if (state === 'CANCELLED' || state === 'EXPIRED') throw new ConflictError('CONFLICT', 409, `timer ${this.id} is ${state.toLowerCase()}`);
      const leftMs = timeoutMs - (nowMs() - started);
      if (leftMs <= 0) throw waitTimeout(`timer ${this.id} did not fire within ${timeoutMs} ms`);
      // A server that does not hold polls answers at once: fall back to polling.
      if (nowMs() - asked < pollMs) await pause(Math.min(pollMs, leftMs), { signal });
      signal?.throwIfAborted();
    }
  }

  async cancel(): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', `/timers/${this.id}/cancel`)).body;
  }
}

export class TimersAPI {
  readonly #ctx: Context;
  readonly scopeId: string;

  constructor(ctx: Context, scopeId: string) {
    this.#ctx = ctx;
    this.scopeId = scopeId;
  }

  /** Arm a timer `afterSeconds` from now, or `at` a timestamp (give exactly one). */
  async create(options: { afterSeconds?: number; at?: string }): Promise<TimerHandle> {
    const body = { scopeId: this.scopeId, afterSeconds: options.afterSeconds, at: options.at };
    const reply = (await this.#ctx.call('POST', '/timers', { body })).body;
    return new TimerHandle(this.#ctx, this.scopeId, required(reply, 'id'), parseTimestamp(reply.fireAt));
  }

  /** A handle on a timer by id; sends nothing (its fire time is not known: the epoch). */
  get(timerId: string): TimerHandle {
    return new TimerHandle(this.#ctx, this.scopeId, timerId, new Date(0));
  }
}

// -- task groups -----------------------------------------------------------------------------------

export type GroupCondition = 'ALL_TERMINAL' | 'N_ACCEPTED' | 'FIRST_ACCEPTED';

export interface CreateGroupOptions {
  /** The name of the mailbox its member tasks are delivered through. */
  mailbox: string;
  condition: GroupCondition;
  /** How many accepted members `N_ACCEPTED` needs. */
  threshold?: number;
  /** The group closes itself once this many have joined. */
  expectedMembers?: number;
  deadline?: string;
  /** Not taken from the scope handle: a group without it is a root of its own (as the official
   * client has it). */
  parentScopeId?: string;
}

export class GroupHandle {
  readonly #ctx: Context;
  readonly id: string;
  /** The group's gate scope, when known. */
  readonly scopeId: string | null;

  constructor(ctx: Context, groupId: string, scopeId: string | null = null) {
    this.#ctx = ctx;
    this.id = checkId('groupId', groupId);
    this.scopeId = scopeId;
  }

  #path(suffix = ''): string {
    return `/task-groups/${this.id}${suffix}`;
  }

  async status(): Promise<Record<string, any>> {
    return (await this.#ctx.call('GET', this.#path())).body;
  }

  /** Submit a member task, delivered through the group's mailbox in its gate scope. */
  async submit<Outcome = unknown>(input: unknown, options: { key: string; deadline?: string; requirements?: Record<string, unknown> }): Promise<TaskTicket<Outcome>> {
    const body = { taskKey: options.key, input, deadline: options.deadline, requirements: options.requirements };
    const reply = (await this.#ctx.call('POST', this.#path('/tasks'), { body })).body;
    return new TaskTicket<Outcome>(this.#ctx, required(reply, 'taskId'), reply.scopeId ?? null);
  }

  /** No more members (SEALED); harmless to repeat. `{ state, outcome, outcomeReason }`. */
  async close(): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', this.#path('/close'))).body;
  }

  /** As `close()`, but `ConflictError` once the group is finalized. */
  async seal(): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', this.#path('/seal'))).body;
  }

  async accept(taskId: string): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', this.#path(`/tasks/${taskId}/accept`))).body;
  }

  async reject(taskId: string): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', this.#path(`/tasks/${taskId}/reject`))).body;
  }

  /** Make an outside task a member (only while the group is open). */
  async joinTask(taskId: string): Promise<Record<string, any>> {
    return (await this.#ctx.call('POST', this.#path('/join-task'), { body: { taskId } })).body;
  }

  /** Until the group is FINALIZED: `{ outcome, outcomeReason }`. Default timeout 30 s. */
  async wait(options: PollOptions = {}): Promise<{ outcome: unknown; outcomeReason: unknown }> {
    const view = await pollUntil(() => this.status(), (seen) => seen.state === 'FINALIZED', `group ${this.id} was not finalized`, options, 30_000);
    return { outcome: view.outcome ?? null, outcomeReason: view.outcomeReason ?? null };
  }
}

export class GroupsAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** A group with its own gate scope, delivering through the mailbox named `mailbox`. */
  async create(options: CreateGroupOptions): Promise<GroupHandle> {
    const rows: Array<Record<string, any>> = (await this.#ctx.call('GET', '/mailboxes')).body.mailboxes;
    const mailbox = rows.find((row) => row.name === options.mailbox);
    if (mailbox === undefined) {
      throw new NotFoundError('NOT_FOUND', 404, `mailbox ${JSON.stringify(options.mailbox)} not found in space ${this.#ctx.spaceId}`);
    }
    const body = {
      mailboxId: mailbox.id,
      condition: options.condition,
      threshold: options.threshold,
      expectedMembers: options.expectedMembers,
      deadline: options.deadline,
      parentScopeId: options.parentScopeId,
    };
    const reply = (await this.#ctx.call('POST', '/task-groups', { body })).body;
    return new GroupHandle(this.#ctx, required(reply, 'groupId'), reply.scopeId ?? null);
  }

  /** Re-attach to a group by id; sends nothing. */
  byId(groupId: string): GroupHandle {
    return new GroupHandle(this.#ctx, groupId);
  }
}

// -- events ----------------------------------------------------------------------------------------

/** One event of the log, as the server records it. */
export interface RunstateEvent {
  eventId: string;
  type: string;
  createdAt: string;
  scopeId: string | null;
  aggregate: { type: string; id: string };
  payload: Record<string, any>;
  [field: string]: unknown;
}

/** An event as `watch()` yields it: with the cursor to resume after it. */
export type WatchedEvent = RunstateEvent & { cursor: string };

export interface EventsPage {
  events: RunstateEvent[];
  nextCursor: string;
}

export interface WatchOptions {
  /** Resume after this cursor (an event's `cursor`, or a page's `nextCursor`); default: from the
   * oldest event kept. */
  cursor?: string;
  /** Only these event types (`task.succeeded`, `scope.cancelled`...). */
  types?: string[];
  /** Only the events of one thing: `{ type: 'task', id }`. */
  aggregate?: { type: string; id: string };
  /** Only the events of this scope and its descendants. */
  scopeId?: string;
  /** Events per page; default 100. */
  limit?: number;
  /** How long the server holds an empty page, in whole seconds (0-20; the server holds this
   * client 20 s at most, whatever it asks); default 8. */
  waitSeconds?: number;
  /** Ends the iteration (after the page in flight is abandoned). */
  signal?: AbortSignal;
}

/**
 * The cursor to resume just after `event`: this server numbers its events (`ev_N`, whose cursor
 * is `N`), so a reader that stops in the middle of a page misses nothing when it resumes. An event
 * id of another form gets the page's cursor (`pageCursor`), and the reader dedupes by `eventId`.
 */
function cursorAfter(event: RunstateEvent, pageCursor: string): string {
  const match = /^ev_(\d+)$/.exec(String(event.eventId));
  return match === null ? pageCursor : match[1]!;
}

export class EventsAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** One page: `{ events, nextCursor }` (events strictly after `cursor`). A cursor older than the
   * log keeps throws `CursorExpiredError`. `latest: N` instead (0 to 1000; not with `cursor` nor `limit`): the
   * space's newest N events, oldest of them first, and the cursor after the newest (what just
   * happened, and where to follow from; `latest: 0` gives that cursor alone). */
  async list(options: { cursor?: string; limit?: number; latest?: number; signal?: AbortSignal } = {}): Promise<EventsPage> {
    if (options.latest !== undefined && options.cursor) {
      throw new ConfigError('give either cursor (the events after it) or latest (the newest ones), not both');
    }
    if (options.latest !== undefined && options.limit !== undefined) {
      throw new ConfigError('latest says how many events already: give limit without it');
    }
    const query = { cursor: options.cursor || undefined, limit: options.limit, latest: options.latest };
    return (await this.#ctx.call('GET', '/events', { query, signal: options.signal })).body;
  }

  /**
   * Every event after `cursor`, as it happens, each with the `cursor` to resume just after it (the
   * last of a page carries the page's `nextCursor`, which also moves past the events the filters
   * skipped): an async iterator that ends when `signal` aborts (or the caller breaks out of its
   * loop).
   *
   * A request that gets no answer or a transient one is tried again with the same cursor (so
   * nothing is skipped or repeated), 0.25 s doubling to 5 s apart; errors the server decided,
   * `CursorExpiredError` among them, are thrown.
   */
  async *watch(options: WatchOptions = {}): AsyncGenerator<WatchedEvent, void, undefined> {
    const { types, aggregate, scopeId, limit, signal } = options;
    if (types !== undefined && !(Array.isArray(types) && types.every((type) => typeof type === 'string'))) {
      throw new ConfigError(`types must be an array of event types, such as ['scope.cancelled'], got ${JSON.stringify(types)}`);
    }
    const holdS = options.waitSeconds ?? WATCH_HOLD_S;
    let current = options.cursor || undefined;
    let retryMs = WATCH_RETRY_MS;
    while (!signal?.aborted) {
      const query = {
        cursor: current,
        types: types && types.length > 0 ? types.join(',') : undefined,
        aggregate: aggregate ? `${aggregate.type}:${aggregate.id}` : undefined,
        scopeId,
        limit,
        waitSeconds: holdS,
      };
      let page: EventsPage;
      const asked = nowMs();
      try {
        page = (await this.#ctx.call('GET', '/watch', { query, waitMs: holdS * 1000, signal })).body;
      } catch (err) {
        if (signal?.aborted) return;
        if (!isTransient(err)) throw err;
        await pause(retryMs, { signal });
        retryMs = Math.min(retryMs * 2, WATCH_RETRY_MS_MAX);
        continue;
      }
      retryMs = WATCH_RETRY_MS;
      const resume = page.nextCursor || current || '';
      const events = page.events ?? [];
      for (const [index, event] of events.entries()) {
        yield { ...event, cursor: index === events.length - 1 ? resume : cursorAfter(event, resume) };
      }
      if (page.nextCursor) current = page.nextCursor;
      // A server that does not hold an empty watch answers at once: do not ask again at once.
      if (events.length === 0 && nowMs() - asked < POLL_MS) await pause(POLL_MS, { signal });
    }
  }
}

// -- diagnostics -----------------------------------------------------------------------------------

/** Read-only views for people and tooling; never a source of authority. */
export class DiagnosticsAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** A run's subtree: its workers with their keys and earliest lease end, what waits, counts. */
  async run(scopeId: string): Promise<Record<string, any>> {
    return (await this.#ctx.call('GET', `/ops/runs/${scopeId}`)).body;
  }

  /** The calls waiting in the space now (held receives, timer polls, watches). */
  async waits(): Promise<Record<string, any>> {
    return (await this.#ctx.call('GET', '/ops/waits')).body;
  }

  async workers(scopeId: string): Promise<Array<Record<string, any>>> {
    return (await this.run(scopeId)).workers ?? [];
  }
}
