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

/** `run.claims()`: the claims held in the run now; `truncated` when more were left out. */
export interface ClaimsPage {
  scopeId: string;
  claims: HeldClaim[];
  truncated: boolean;
}

/** `run.tasks()`: the run's tasks, newest first; `truncated` when older ones were left out. */
export interface TasksPage {
  scopeId: string;
  tasks: TaskView[];
  truncated: boolean;
}

export interface ListOptions {
  /** At most this many rows, 1 to 1000; default 100. */
  limit?: number;
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

  /** The claims held in this run now, who holds each and until when (tokens are never listed). A
   * snapshot for people and tooling: to own a key, acquire it (`claim(key)`). */
  async claims(options: ListOptions = {}): Promise<ClaimsPage> {
    return (await this.#ctx.call('GET', `/scopes/${this.id}/claims`, { query: { limit: options.limit }, signal: options.signal })).body;
  }

  /** The tasks of this run, newest first, each as `ticket.status()` gives it. */
  async tasks(options: ListOptions = {}): Promise<TasksPage> {
    return (await this.#ctx.call('GET', `/scopes/${this.id}/tasks`, { query: { limit: options.limit }, signal: options.signal })).body;
  }
}

export async function createScope(ctx: Context, options: CreateScopeOptions = {}): Promise<ScopeHandle> {
  const body = { name: options.name, parentId: options.parentId, deadline: options.deadline, childLimit: options.childLimit };
  const reply = await ctx.call('POST', '/scopes', { body });
  if (typeof reply.body?.id !== 'string') throw new TypeError('malformed answer: no scope id');
  return new ScopeHandle(ctx, reply.body.id);
}
