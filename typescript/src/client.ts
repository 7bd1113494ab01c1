/**
 * `Runstate`, the client, and its space-wide APIs (`scopes`, `mailboxes`).
 *
 * Building a client sends nothing. It holds one request layer, the space id, and the worker
 * identity: `holder` (the logical worker, yours to choose, stable across restarts) and `session`
 * (12 hex characters, fresh for every client, so two live clients never look like one).
 * `withSpace(id)` gives a view on another space that shares all of that; `withHolder(name)` a view
 * for another worker of the process (its own holder and session) that shares the rest: the
 * connections, the batching of calls made at the same time, and the one loop that renews every
 * lease of the client (`batch.ts`, `renewals.ts`).
 */

import { Coalescer } from './batch.js';
import { BudgetsAPI, PoolsAPI, QuotasAPI, WorkLimitsAPI } from './capacity.js';
import { nameSegment } from './claims.js';
import { resolveConfig, type Config, type RunstateOptions } from './config.js';
import { DiagnosticsAPI, EventsAPI } from './coordination.js';
import { Context, Holdings } from './context.js';
import { ConfigError, ConflictError, RunstateError } from './errors.js';
import { Requester } from './request.js';
import { ScopeHandle, createScope, type CreateScopeOptions } from './scopes.js';
import { randomHex } from './time.js';

/** A queue's messages by state (`deadLetters`: its dead letters kept). */
export interface MailboxCounts {
  queued: number;
  delayed: number;
  leased: number;
  deadLetters: number;
}

/** A queue's default requirements, by id, for its tasks that name none. */
export interface MailboxRequirements {
  pools: { permitId: string; units: number }[];
  quotas: { allowanceId: string; units: number }[];
  /** `reserveMinor`: minor units, a string of digits. */
  budgets: { budgetId: string; reserveMinor: string }[];
}

export interface MailboxRow {
  id: string;
  name: string;
  /** `WORK`, the one mode served. */
  mode: string;
  /** The most messages waiting; null for the server's default. */
  backlogLimit: number | null;
  /** Deliveries before a task fails. */
  maxAttempts: number;
  requirements: MailboxRequirements | null;
  /** Messages not yet settled. */
  backlog: number;
  counts: MailboxCounts;
  createdAt: string;
  [field: string]: unknown;
}

export interface EnsureMailboxOptions {
  /** `WORK` (competing consumers) is the mode the server implements. */
  mode?: string;
  backlogLimit?: number;
}

/** One dead letter: a message whose deliveries ended without a completion, with its payload. */
export interface DeadLetter {
  id: string;
  mailboxId: string;
  scopeId: string;
  taskId: string | null;
  state: string;
  attempt: number;
  workKey: string | null;
  deadline: string | null;
  createdAt: string;
  finishedAt: string | null;
  reason: string | null;
  payload: unknown;
}

/** A page of dead letters, newest first; `nextCursor` is null on the last page. */
export interface DeadLetterPage {
  deadLetters: DeadLetter[];
  total: number;
  matched: number;
  truncated: boolean;
  nextCursor: string | null;
}

/** Which dead letters: their reason contains `reason`; they died at least / at most that long ago. */
export interface DeadLetterFilter {
  reason?: string;
  olderThanSeconds?: number;
  newerThanSeconds?: number;
}

export interface DeadLetterPageOptions extends DeadLetterFilter {
  /** 1 to 1000; default 100. */
  limit?: number;
  /** The `nextCursor` of the page before. */
  cursor?: string;
}

/** Name the dead letters one way: `messageIds`, a filter, or `all: true`. */
export interface DeadLetterActionOptions extends DeadLetterFilter {
  messageIds?: string[];
  all?: boolean;
  /** Change nothing; answer the counts it would. */
  dryRun?: boolean;
}

export interface RequeueResult {
  matched: number;
  requeued: number;
  /** Matched but not requeued, by why: `task`, `runEnded`, `deadlinePassed`. */
  skipped: Record<string, number>;
  /** Still to requeue: call again. */
  remaining: number;
  dryRun: boolean;
  /** Each old id's new message id. */
  requeuedAs: Record<string, string>;
}

export interface DeleteResult {
  matched: number;
  deleted: number;
  remaining: number;
  dryRun: boolean;
  deletedIds: string[];
}

export interface PurgeOptions {
  /** Only this run's waiting messages; default every run's. */
  scopeId?: string;
  reason?: string;
  dryRun?: boolean;
}

export interface PurgeResult {
  matched: number;
  purged: number;
  remaining: number;
  dryRun: boolean;
}

function actionBody(options: DeadLetterActionOptions): Record<string, unknown> {
  return {
    messageIds: options.messageIds,
    reason: options.reason,
    olderThanSeconds: options.olderThanSeconds,
    newerThanSeconds: options.newerThanSeconds,
    all: options.all || undefined,
    dryRun: options.dryRun || undefined,
  };
}

export class ScopesAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** Create a scope (a run). */
  create(options: CreateScopeOptions = {}): Promise<ScopeHandle> {
    return createScope(this.#ctx, options);
  }

  /** The run named `name`: one root scope per name in the space, made by the first caller (with
   * `deadline`, if given) and the same for every later one, in any process. A run that was
   * stopped stays stopped (check `status()`); a new name starts a new run. */
  async ensure(name: string, options: { deadline?: string } = {}): Promise<ScopeHandle> {
    const reply = await this.#ctx.call('PUT', `/runs/${nameSegment(name)}`, { body: { deadline: options.deadline } });
    if (typeof reply.body?.id !== 'string') throw new TypeError('malformed answer: no scope id');
    return new ScopeHandle(this.#ctx, reply.body.id);
  }
}

export class MailboxesAPI {
  readonly #ctx: Context;

  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /**
   * Get the mailbox `name`, creating it if it is missing; resolves to its row. It lists first and
   * creates only when the name is missing; a create that loses a race (`ConflictError`) lists
   * again. A mailbox that exists with another `mode` (compared without regard to case) throws
   * `ConflictError` (`CONFLICT`); `backlogLimit` is not compared.
   */
  async ensure(name: string, options: EnsureMailboxOptions = {}): Promise<MailboxRow> {
    let row = await this.#find(name);
    if (row === undefined) {
      try {
        return (await this.#ctx.call('POST', '/mailboxes', { body: { name, mode: options.mode, backlogLimit: options.backlogLimit } }))
          .body;
      } catch (err) {
        if (!(err instanceof ConflictError)) throw err;
        row = await this.#find(name);
        if (row === undefined) throw err;
      }
    }
    const stored = row.mode;
    if (options.mode && stored && String(stored).toUpperCase() !== options.mode.toUpperCase()) {
      throw new ConflictError('CONFLICT', 409, `mailbox ${JSON.stringify(name)} exists with mode ${stored}, not ${options.mode}`);
    }
    return row;
  }

  /** Every mailbox row in the space. */
  async list(): Promise<MailboxRow[]> {
    return (await this.#ctx.call('GET', '/mailboxes')).body.mailboxes;
  }

  // -- an operator's tools: dead letters and purges ------------------------------------------

  /** One page of the mailbox's dead letters, newest first, with their payloads. */
  async deadLetters(mailboxId: string, options: DeadLetterPageOptions = {}): Promise<DeadLetterPage> {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(options)) {
      if (value !== undefined && value !== null) query.set(name, String(value));
    }
    const text = query.toString();
    return (await this.#ctx.call('GET', `/mailboxes/${mailboxId}/dead-letters${text ? `?${text}` : ''}`)).body;
  }

  /** Every dead letter that matches, newest first, a page at a time. */
  async *iterDeadLetters(mailboxId: string, filter: DeadLetterFilter = {}): AsyncGenerator<DeadLetter> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.deadLetters(mailboxId, { ...filter, cursor });
      yield* page.deadLetters;
      if (page.nextCursor === null) return;
      cursor = page.nextCursor;
    }
  }

  /**
   * Put dead letters back at the end of their queues as new messages (`requeuedAs` maps each old id
   * to its new one), attempts counted from zero. At most 1000 a call, oldest first: call again while
   * `remaining` is more than 0. A task's dead letter is never requeued (`skipped.task`).
   */
  async requeueDeadLetters(mailboxId: string, options: DeadLetterActionOptions): Promise<RequeueResult> {
    return (await this.#ctx.call('POST', `/mailboxes/${mailboxId}/dead-letters/requeue`, { body: actionBody(options) })).body;
  }

  /** Forget dead letters now, named as for `requeueDeadLetters`; at most 1000 a call. */
  async deleteDeadLetters(mailboxId: string, options: DeadLetterActionOptions): Promise<DeleteResult> {
    return (await this.#ctx.call('POST', `/mailboxes/${mailboxId}/dead-letters/delete`, { body: actionBody(options) })).body;
  }

  /**
   * End what waits in the mailbox (every run's, or `scopeId`'s): tasks CANCELLED with the reason
   * `purged`, plain messages dropped; deliveries under way finish. At most 1000 a call.
   */
  async purge(mailboxId: string, options: PurgeOptions = {}): Promise<PurgeResult> {
    const body = { scopeId: options.scopeId, reason: options.reason, dryRun: options.dryRun || undefined };
    return (await this.#ctx.call('POST', `/mailboxes/${mailboxId}/purge`, { body })).body;
  }

  async #find(name: string): Promise<MailboxRow | undefined> {
    return (await this.list()).find((row) => row.name === name);
  }
}

/** The longest holder name the server takes. */
const HOLDER_LENGTH_MAX = 256;

/** @internal The client's context, for the run API built on it (`work.ts`). */
export const CONTEXT: unique symbol = Symbol('runstate.context');

/** Set only by `withSpace()` and `withHolder()`: the view's context. Not exported, so not part
 * of the options. */
const VIEW_OF: unique symbol = Symbol('runstate.viewOf');

interface InternalOptions extends RunstateOptions {
  [VIEW_OF]?: Context;
}

export class Runstate {
  readonly scopes: ScopesAPI;
  readonly mailboxes: MailboxesAPI;
  readonly pools: PoolsAPI;
  readonly quotas: QuotasAPI;
  readonly budgets: BudgetsAPI;
  readonly workLimits: WorkLimitsAPI;
  readonly events: EventsAPI;
  readonly diagnostics: DiagnosticsAPI;
  readonly #ctx: Context;
  readonly #isView: boolean;
  #closed = false;

  constructor(options: RunstateOptions = {}) {
    const view = (options as InternalOptions)[VIEW_OF];
    if (view !== undefined) {
      this.#ctx = view;
      this.#isView = true;
    } else {
      const config: Config = resolveConfig(options);
      const requester = new Requester(config.baseUrl, config.apiKey, config.requestTimeoutMs, config.retries, config.caBundle);
      if (options.batchCalls !== false) requester.coalescer = new Coalescer(requester);
      this.#ctx = new Context(requester, config.spaceId, config.holder, config.session, new Holdings());
      this.#isView = false;
    }
    this.scopes = new ScopesAPI(this.#ctx);
    this.mailboxes = new MailboxesAPI(this.#ctx);
    this.pools = new PoolsAPI(this.#ctx);
    this.quotas = new QuotasAPI(this.#ctx);
    this.budgets = new BudgetsAPI(this.#ctx);
    this.workLimits = new WorkLimitsAPI(this.#ctx);
    this.events = new EventsAPI(this.#ctx);
    this.diagnostics = new DiagnosticsAPI(this.#ctx);
  }

  get spaceId(): string {
    return this.#ctx.spaceId;
  }

  /** @internal */
  get [CONTEXT](): Context {
    return this.#ctx;
  }

  get holder(): string {
    return this.#ctx.holder;
  }

  get session(): string {
    return this.#ctx.session;
  }

  get baseUrl(): string {
    return this.#ctx.requester.baseUrl;
  }

  /** A handle on an existing scope; sends nothing. */
  scope(scopeId: string): ScopeHandle {
    return new ScopeHandle(this.#ctx, scopeId);
  }

  /** A view bound to another space, sharing the request layer, holder and session. `spaceId` is a
   * space's id or name, not empty and without a `/` (`ConfigError` otherwise: it is a segment of
   * every path, and would reach another route). */
  withSpace(spaceId: string): Runstate {
    if (typeof spaceId !== 'string' || spaceId === '' || spaceId.includes('/')) {
      throw new ConfigError(`spaceId must be a space's id, not empty and without '/', got ${JSON.stringify(spaceId)}`);
    }
    const options: InternalOptions = { [VIEW_OF]: this.#ctx.forSpace(spaceId) };
    return new Runstate(options);
  }

  /**
   * A view for another worker of this process (one agent of a swarm, say): its own `holder` and a
   * fresh `session`, so its claims and deliveries are its own, sharing with this client everything
   * else: the connections, the batching of calls made at the same time, and the one loop that
   * renews every lease together. Closing the client closes its views; closing a view closes
   * nothing. `holder` is 1 to 256 characters (`ConfigError` otherwise).
   */
  withHolder(holder: string): Runstate {
    if (typeof holder !== 'string' || holder.length < 1 || holder.length > HOLDER_LENGTH_MAX) {
      throw new ConfigError(`holder must be 1 to ${HOLDER_LENGTH_MAX} characters, got ${JSON.stringify(holder)}`);
    }
    const options: InternalOptions = { [VIEW_OF]: this.#ctx.forHolder(holder, randomHex(6)) };
    return new Runstate(options);
  }

  /**
   * Stop every lease renewal this client and its views run; those leases count as lost from here
   * on (their signals abort) and expire on the server. Calls made after it go out alone. Views
   * close nothing. Idempotent.
   */
  close(): void {
    if (this.#isView || this.#closed) return;
    this.#closed = true;
    const closing = new RunstateError('CLIENT_CLOSED', 0, 'the client was closed');
    for (const live of [...this.#ctx.live]) live.abandon(closing);
    this.#ctx.holdings.renewals.close();
    this.#ctx.requester.coalescer?.close();
    this.#ctx.requester.close();
  }
}
