/**
 * Scope handles. A scope (a "run") bounds everything created in it: cancelling it stops the
 * claims, tasks and deliveries of its whole subtree. The handle is local; each method is a request.
 */

import { BudgetRef, PoolRef, QuotaRef } from './capacity.js';
import { ClaimRef, checkId } from './claims.js';
import type { Context } from './context.js';
import { BarriersAPI, GroupsAPI, TimersAPI } from './coordination.js';
import { MailboxRef } from './mailboxes.js';
import { TaskTicket, type TaskView } from './tasks.js';

/** One claim held in a run, as `run.claims()` lists it (its token is never listed). */
export interface HeldClaim {
  key: string;
  scopeId: string;
  /** Grows with each new owner of the key. */
  generation: number;
  holder: string | null;
  holderSession: string | null;
  leaseSeconds: number;
  /** When its lease ends unless renewed. */
  leaseExpiresAt: string;
  acquiredAt: string;
  [field: string]: unknown;
}

/** A run (scope) as the server answers it: `status()`, `cancel()`, `complete()`. */
export interface ScopeView {
  id: string;
  name: string | null;
  /** null for a root run. */
  parentId: string | null;
  /** ISO 8601, or null. */
  deadline: string | null;
  childLimit: number | null;
  /** How many child runs it has. */
  children: number;
  /** Its own state: ACTIVE, CANCELLED, COMPLETED or EXPIRED. */
  storedState: string;
  /** The state it acts in, an ancestor's end or its deadline included. */
  effective: string;
  createdAt: string;
  endedAt: string | null;
  [field: string]: unknown;
}

/** `run.claims()`: a page of the claims held in the run now, in the order of their keys;
 * `nextCursor` reads the next page (null on the last), `truncated` is true exactly when it is not null. */
export interface ClaimsPage {
  scopeId: string;
  claims: HeldClaim[];
  truncated: boolean;
  nextCursor: string | null;
}

/** `run.tasks()`: a page of the run's tasks, newest first; `nextCursor` reads the next, older ones
 * (null on the last page), `truncated` is true exactly when it is not null. */
export interface TasksPage {
  scopeId: string;
  tasks: TaskView[];
  truncated: boolean;
  nextCursor: string | null;
}

export interface ListOptions {
  /** At most this many rows, 1 to 1000; default 100. */
  limit?: number;
  /** The `nextCursor` of the page before (none: the first page). */
  cursor?: string;
  signal?: AbortSignal;
}

export interface IterateOptions {
  /** Rows a page, 1 to 1000; default 100. */
  pageSize?: number;
  signal?: AbortSignal;
}

export interface CreateScopeOptions {
  /** A label: not unique, never used for lookup. */
  name?: string;
  parentId?: string;
  /** ISO 8601. */
  deadline?: string;
  childLimit?: number;
}

export class ScopeHandle {
  readonly #ctx: Context;
  readonly id: string;
  readonly barriers: BarriersAPI;
  readonly timers: TimersAPI;
  readonly groups: GroupsAPI;

  constructor(ctx: Context, scopeId: string) {
    this.#ctx = ctx;
    this.id = checkId('scopeId', scopeId);
    this.barriers = new BarriersAPI(ctx, scopeId);
    this.timers = new TimersAPI(ctx, scopeId);
    this.groups = new GroupsAPI(ctx);
  }

  /** The scope view (`storedState`, `effective`, `deadline`, ...). */
  async status(): Promise<ScopeView> {
    return (await this.#ctx.call('GET', `/scopes/${this.id}`)).body;
  }

  /** Cancel the scope and its subtree (a POST with no body). */
  async cancel(): Promise<ScopeView> {
    return (await this.#ctx.call('POST', `/scopes/${this.id}/cancel`)).body;
  }

  /** Mark the scope completed (a POST with no body). */
  async complete(): Promise<ScopeView> {
    return (await this.#ctx.call('POST', `/scopes/${this.id}/complete`)).body;
  }

  /** Create a scope under this one. */
  child(options: Omit<CreateScopeOptions, 'parentId'> = {}): Promise<ScopeHandle> {
    return createScope(this.#ctx, { ...options, parentId: this.id });
  }

  claim(key: string): ClaimRef {
    return new ClaimRef(this.#ctx, this.id, key);
  }

  mailbox(name: string): MailboxRef {
    return new MailboxRef(this.#ctx, this.id, { name });
  }

  mailboxById(mailboxId: string): MailboxRef {
    return new MailboxRef(this.#ctx, this.id, { id: mailboxId });
  }

  /** A pool of units, by name: `acquire()`, `tryAcquire()`, `run(fn)`. */
  pool(name: string): PoolRef {
    return new PoolRef(this.#ctx, this.id, { name });
  }

  poolById(poolId: string): PoolRef {
    return new PoolRef(this.#ctx, this.id, { id: poolId });
  }

  /** A quota (units per window), by name: `tryTake()`, `take()`, `status()`, `cooldown()`. */
  quota(name: string): QuotaRef {
    return new QuotaRef(this.#ctx, this.id, { name });
  }

  quotaById(quotaId: string): QuotaRef {
    return new QuotaRef(this.#ctx, this.id, { id: quotaId });
  }

  /** A budget, by name: `reserve({ amount })`, `status()`. */
  budget(name: string): BudgetRef {
    return new BudgetRef(this.#ctx, this.id, { name });
  }

  budgetById(budgetId: string): BudgetRef {
    return new BudgetRef(this.#ctx, this.id, { id: budgetId });
  }

  /** Re-attach to a task by id; sends nothing. */
  task<Outcome = unknown>(taskId: string): TaskTicket<Outcome> {
    return new TaskTicket<Outcome>(this.#ctx, taskId, this.id);
  }

  /** A page of the claims held in this run now, in the order of their keys, who holds each and
   * until when (tokens are never listed); pass its `nextCursor` as `cursor` for the next page. A
   * snapshot for people and tooling: to own a key, acquire it (`claim(key)`). */
  async claims(options: ListOptions = {}): Promise<ClaimsPage> {
    const query = { limit: options.limit, cursor: options.cursor };
    return (await this.#ctx.call('GET', `/scopes/${this.id}/claims`, { query, signal: options.signal })).body;
  }

  /** Every claim held in this run, in the order of their keys, a page at a time: one taken or
   * released while it reads moves no other, so none is shown twice. */
  async *iterClaims(options: IterateOptions = {}): AsyncGenerator<HeldClaim> {
    for await (const page of pages((listing) => this.claims(listing), options)) yield* page.claims;
  }

  /** A page of the tasks of this run, newest first, each as `ticket.status()` gives it; pass its
   * `nextCursor` as `cursor` for the next, older ones. */
  async tasks(options: ListOptions = {}): Promise<TasksPage> {
    const query = { limit: options.limit, cursor: options.cursor };
    return (await this.#ctx.call('GET', `/scopes/${this.id}/tasks`, { query, signal: options.signal })).body;
  }

  /** Every task of this run, newest first, a page at a time: a task submitted while it reads is
   * newer than where it stands and left for the next reading; none is shown twice. */
  async *iterTasks(options: IterateOptions = {}): AsyncGenerator<TaskView> {
    for await (const page of pages((listing) => this.tasks(listing), options)) yield* page.tasks;
  }
}

export async function createScope(ctx: Context, options: CreateScopeOptions = {}): Promise<ScopeHandle> {
  const body = { name: options.name, parentId: options.parentId, deadline: options.deadline, childLimit: options.childLimit };
  const reply = await ctx.call('POST', '/scopes', { body });
  if (typeof reply.body?.id !== 'string') throw new TypeError('malformed answer: no scope id');
  return new ScopeHandle(ctx, reply.body.id);
}

/** Every page of a listing, `read({ limit, cursor, signal })` called with the last page's
 * `nextCursor` until a page has none (a server without paging writes none: its one page is all). */
async function* pages<Page extends { nextCursor?: string | null }>(
  read: (options: ListOptions) => Promise<Page>,
  options: IterateOptions,
): AsyncGenerator<Page> {
  let cursor: string | undefined;
  for (;;) {
    const page = await read({ limit: options.pageSize, cursor, signal: options.signal });
    yield page;
    if (page.nextCursor == null) return;
    cursor = page.nextCursor;
  }
}
