/**
 * Queues of the run API: work handed to worker processes. One definition serves both sides:
 * producers call it (or `send()` / `gather()`), workers run `serve()`, which admits each job with
 * the pools, quotas and budget it needs taken in the same step (`MailboxRef.admit`), runs its
 * handler under the job's renewed lease (the worker loop of `consume()`, `mailboxes.ts`), records
 * its result, and charges its budget reservation what the job cost.
 */

import { encodeClaimKey } from './claims.js';
import type { Runstate } from './client.js';
import { ConfigError, ScopeCancelledError, TaskFailedError, waitTimeout } from './errors.js';
import { checkName, workKey } from './keys.js';
import type { Delivery } from './mailboxes.js';
import { runWorker } from './worker.js';
import {
  ADMIT_WAIT_MS,
  GATHER_MAX,
  HOLD_MS,
  TERMINAL,
  type RunContext,
  callGet,
  callPost,
  callPut,
  ctxOf,
  current,
  errorMessage,
  linkSignals,
  positiveInt,
  settleReservation,
  voidReservation,
} from './runkit.js';
import { nowMs } from './time.js';
import { type Amount, type Duration, leaseSeconds as toLeaseSeconds, parseDuration, toMinor } from './units.js';
import { warn } from './warnings.js';
import type { RunClient } from './work.js';

export const QUEUE_IMPL: unique symbol = Symbol('runstate.queue');


export interface QueueOptions<I> {
  /** Pool units each job holds while it runs: a pool name, or `{ name, units }`. */
  slots?: string | { name: string; units?: number };
  /** Quota units each job takes before it runs. */
  limit?: string | { name: string; units?: number };
  /** Money each job reserves before it runs, charged `cost(result)` after it. */
  budget?: { name: string; reserve: Amount; cost?: (result: any) => Amount };
  /** Tries per job before it fails for good; default 5. */
  attempts?: number;
  /** Each job's lease while its handler runs (renewed); default 30 s. */
  lease?: Duration;
  /** Jobs of this queue running at once in one `serve()`; default 1. */
  concurrency?: number;
  /** Names a job (default: a hash of its input); the same key in the run is the same job. */
  key?: (input: I) => string;
}

/** A submitted job: `id`, and `result()` to wait for it. */
export interface Job<O> {
  readonly id: string;
  /** Wait until it ends: its result, or `TaskFailedError` (`ScopeCancelledError` if the run stopped).
   * Without `timeout`, waits until it does. */
  result(options?: { timeout?: Duration }): Promise<O>;
}

export interface GatherOptions<I, O> {
  /** `'all'` (the default), or how many accepted results are enough. */
  need?: 'all' | number;
  /** Whether a result counts (default: every result does). */
  accept?: (result: O, input: I) => boolean | Promise<boolean>;
  timeout?: Duration;
}

/** A queue of work for worker processes; call it to submit a job and wait for its result. */
export interface Queue<I, O> {
  (input: I): Promise<O>;
  readonly queueName: string;
  /** Submit only; resolves to the job. */
  send(input: I): Promise<Job<O>>;
  /** Submit every input as one group; resolve to the accepted results once `need` are in. */
  gather(inputs: readonly I[], options?: GatherOptions<I, O>): Promise<O[]>;
}

export function resourceRef(ref: string | { name: string; units?: number } | undefined): { name: string; units: number } | undefined {
  if (ref === undefined) return undefined;
  const resolved = typeof ref === 'string' ? { name: ref, units: 1 } : { name: ref.name, units: ref.units ?? 1 };
  checkName(resolved.name, 'resource');
  positiveInt(resolved.units, 'units');
  return resolved;
}

export class QueueImpl {
  readonly owner: RunClient;
  readonly name: string;
  readonly handler: ((input: any) => unknown) | null;
  readonly attempts: number;
  readonly declaresAttempts: boolean;
  readonly lease: number;
  readonly concurrency: number;
  readonly slots: { name: string; units: number } | undefined;
  readonly limit: { name: string; units: number } | undefined;
  readonly budget: QueueOptions<any>['budget'];
  readonly key: ((input: any) => string) | undefined;

  constructor(owner: RunClient, name: string, handler: ((input: any) => unknown) | null, options: QueueOptions<any>) {
    this.owner = owner;
    this.name = checkName(name, 'queue');
    this.handler = handler;
    this.attempts = positiveInt(options.attempts ?? 5, 'attempts', 100);
    this.declaresAttempts = handler !== null || options.attempts !== undefined;
    this.lease = toLeaseSeconds(options.lease);
    this.concurrency = positiveInt(options.concurrency ?? 1, 'concurrency');
    this.slots = resourceRef(options.slots);
    this.limit = resourceRef(options.limit);
    if (options.budget !== undefined) {
      if (options.budget.reserve === undefined) throw new ConfigError('budget takes { name, reserve, cost }');
      checkName(options.budget.name, 'budget');
    }
    this.budget = options.budget;
    this.key = options.key;
  }

  get #client(): Runstate {
    return this.owner.client;
  }

  #budgetRow: Promise<any> | null = null;
  #mailboxRow: Promise<string> | null = null;

  /** Looked up once (a failure is not remembered). */
  async #budgetInfo(): Promise<any | null> {
    if (this.budget === undefined) return null;
    if (this.#budgetRow === null) {
      this.#budgetRow = callPut(this.#client, `/budgets/by-name/${encodeClaimKey(this.budget.name)}`, {}).then((reply: any) => reply.body);
      this.#budgetRow.catch(() => (this.#budgetRow = null));
    }
    return this.#budgetRow;
  }

  async requirements(): Promise<Record<string, unknown> | undefined> {
    const budget = await this.#budgetInfo();
    if (this.slots === undefined && this.limit === undefined && budget === null) return undefined;
    return {
      pools: this.slots === undefined ? undefined : [this.slots],
      quotas: this.limit === undefined ? undefined : [this.limit],
      budgets: budget === null ? undefined : [{ name: budget.name, reserveMinor: toMinor(this.budget!.reserve, budget.scale, 'reserve') }],
    };
  }

  /** Workers declare the queue (its attempts, what its jobs need); producers only look it up.
   * Once per queue (a failure is not remembered). */
  mailboxId(): Promise<string> {
    if (this.#mailboxRow === null) {
      this.#mailboxRow = this.#declare();
      this.#mailboxRow.catch(() => (this.#mailboxRow = null));
    }
    return this.#mailboxRow;
  }

  async #declare(): Promise<string> {
    const settings: Record<string, unknown> = {};
    if (this.declaresAttempts) settings.maxAttempts = this.attempts;
    if (this.handler !== null) {
      const requirements = await this.requirements();
      if (requirements !== undefined) settings.requirements = JSON.parse(JSON.stringify(requirements));
    }
    return (await callPut(this.#client, `/mailboxes/by-name/${encodeClaimKey(this.name)}`, settings)).body.id;
  }

  taskKey(input: unknown): string {
    return workKey(this.name, [input], this.key);
  }

  async send(input: unknown): Promise<Job<unknown>> {
    const run = await this.owner.info();
    const body = {
      scopeId: run.id,
      mailboxId: await this.mailboxId(),
      taskKey: this.taskKey(input),
      input: input ?? null,
      requirements: await this.requirements(),
    };
    try {
      const reply = await callPost(this.#client, '/tasks', body);
      return this.#job(reply.body.taskId);
    } catch (err) {
      this.owner.noteError(err);
      throw err;
    }
  }

  #job(id: string): Job<unknown> {
    return { id, result: (options = {}) => this.result(id, options.timeout) };
  }

  async call(input: unknown): Promise<unknown> {
    return (await this.send(input)).result();
  }

  async waitTerminal(id: string, deadlineMs: number): Promise<any> {
    for (;;) {
      const leftMs = deadlineMs - nowMs();
      if (leftMs <= 0) throw waitTimeout(`job ${id} is still running`);
      const holdMs = Number.isFinite(leftMs) ? Math.min(HOLD_MS, Math.floor(leftMs)) : HOLD_MS;
      const task = (await callGet(this.#client, `/tasks/${id}`, { waitMs: holdMs }, holdMs, this.owner.signal)).body;
      if (TERMINAL.has(task.state)) return task;
    }
  }

  async result(id: string, timeout?: Duration): Promise<unknown> {
    const deadlineMs = timeout === undefined ? Infinity : nowMs() + parseDuration(timeout, 'timeout') * 1000;
    try {
      return outcomeOf(await this.waitTerminal(id, deadlineMs));
    } catch (err) {
      this.owner.noteError(err);
      throw err;
    }
  }

  async gather(inputs: readonly unknown[], options: GatherOptions<unknown, unknown> = {}): Promise<unknown[]> {
    const items = [...inputs];
    if (items.length === 0) return [];
    if (items.length > GATHER_MAX) throw new ConfigError(`gather takes at most ${GATHER_MAX} inputs at a time`);
    const need = options.need ?? 'all';
    if (need !== 'all' && (!Number.isInteger(need) || need < 1 || need > items.length)) {
      throw new ConfigError(`need must be 'all' or a whole number from 1 to ${items.length}`);
    }
    const deadlineMs = options.timeout === undefined ? Infinity : nowMs() + parseDuration(options.timeout, 'timeout') * 1000;
    const run = await this.owner.info();
    const condition = need === 'all' ? 'ALL_TERMINAL' : need === 1 ? 'FIRST_ACCEPTED' : 'N_ACCEPTED';
    const requirements = await this.requirements();
    const group = (
      await callPost(this.#client, '/task-groups', {
        parentScopeId: run.id,
        mailboxId: await this.mailboxId(),
        condition,
        threshold: condition === 'N_ACCEPTED' ? need : undefined,
        expectedMembers: items.length,
      })
    ).body;
    try {
      const members: Array<[string, unknown]> = [];
      for (const item of items) {
        const reply = await callPost(this.#client, `/task-groups/${group.groupId}/tasks`, { taskKey: this.taskKey(item), input: item ?? null, requirements });
        members.push([reply.body.taskId, item]);
      }
      return await this.#collect(group.groupId, members, need, options.accept, deadlineMs);
    } catch (err) {
      this.owner.noteError(err);
      throw err;
    } finally {
      // The group's own scope ends with the gather: members still queued or running stop.
      await callPost(this.#client, `/scopes/${group.scopeId}/cancel`, {}).catch(() => undefined);
    }
  }

  async #collect(groupId: string, members: Array<[string, unknown]>, need: 'all' | number, accept: GatherOptions<unknown, unknown>['accept'], deadlineMs: number): Promise<unknown[]> {
    const accepted: unknown[] = [];
    const failures: string[] = [];
    const target = need === 'all' ? members.length : need;
    let decided = 0;
    const stop = new AbortController();
    return new Promise<unknown[]>((resolve, reject) => {
      const finish = (err?: unknown) => {
        if (stop.signal.aborted) return;
        stop.abort();
        if (err === undefined) resolve(need === 'all' ? accepted : accepted.slice(0, target));
        else reject(err);
      };
      for (const [memberId, item] of members) {
        void (async () => {
          const task = await this.waitTerminal(memberId, deadlineMs);
          if (stop.signal.aborted) return;
          let ok = false;
          if (task.state === 'SUCCEEDED') {
            const result = task.outcome ?? null;
            ok = accept === undefined ? true : Boolean(await accept(result, item));
            if (ok && !stop.signal.aborted) accepted.push(result);
          } else {
            failures.push(task.outcomeReason ?? String(task.state).toLowerCase());
          }
          await callPost(this.#client, `/task-groups/${groupId}/tasks/${memberId}/${ok ? 'accept' : 'reject'}`, {}).catch(() => undefined);
          decided += 1;
          if (need !== 'all' && accepted.length >= target) finish();
          else if (decided === members.length) {
            if (need === 'all' || accepted.length >= target) finish();
            else finish(new TaskFailedError(`gather got ${accepted.length} of the ${target} results it needed`, { reason: failures[0] ?? 'not enough results were accepted' }));
          } else if (need !== 'all' && accepted.length + (members.length - decided) < target) {
            finish(new TaskFailedError(`gather can no longer reach ${target} accepted results`, { reason: failures[0] ?? 'too many results were rejected' }));
          }
        })().catch(finish);
      }
    });
  }

  /** Admit this queue's jobs (in the run and its descendants, so a gather's group too) until stopped. */
  async serve(concurrency: number, signal: AbortSignal): Promise<void> {
    const run = await this.owner.info();
    const mailboxId = await this.mailboxId();
    const scope = this.#client.scope(run.id);
    const mailbox = scope.mailboxById(mailboxId);
    const budget = this.budget === undefined ? null : await this.#budgetInfo();
    const admitted = new Map<Delivery<unknown>, any[]>();
    try {
      await runWorker<unknown>({
        ctx: ctxOf(this.#client),
        scopeId: run.id,
        what: `serve() of queue ${this.name}`,
        concurrency,
        leaseSeconds: this.lease,
        waitMs: ADMIT_WAIT_MS,
        shutdownTimeoutMs: 30_000,
        signal,
        receive: async (waitMs, stop) => {
          const work = await mailbox.admit({ leaseSeconds: this.lease, waitMs, includeDescendants: true, signal: stop });
          if (work === null) return null;
          admitted.set(work.delivery, work.reservations);
          return work.delivery;
        },
        invoke: async (delivery) => {
          const linked = linkSignals([delivery.signal, this.owner.signal]);
          const runContext: RunContext = { run, signal: linked.signal, attempt: delivery.attempt, key: null };
          try {
            return await current.run(runContext, () => this.handler!(delivery.data));
          } finally {
            linked.dispose();
          }
        },
        complete: (delivery, result) => delivery.complete({ payload: result ?? null }),
        fail: (delivery, err) => delivery.retry({ reason: errorMessage(err) }),
        onError: (err, delivery) => {
          warn('RUNSTATE_JOB_FAILED', `queue ${this.name}: job ${delivery.taskId ?? delivery.id} (attempt ${delivery.attempt}) failed: ${errorMessage(err)}`);
        },
        after: async (delivery, outcome) => {
          const reservations = admitted.get(delivery) ?? [];
          admitted.delete(delivery);
          if (budget === null || this.budget === undefined) return;
          for (const reservation of reservations) {
            const reservationId = typeof reservation === 'string' ? reservation : reservation?.reservationId ?? reservation?.id;
            if (typeof reservationId !== 'string') continue;
            if (!outcome.ok || !outcome.settled) {
              await voidReservation(this.#client, budget.id, reservationId);
              continue;
            }
            let costMinor = toMinor(this.budget.reserve, budget.scale, 'reserve');
            try {
              if (this.budget.cost !== undefined) costMinor = toMinor(this.budget.cost(outcome.value), budget.scale, 'cost');
            } catch (err) {
              warn('RUNSTATE_BUDGET_COST_FAILED', `queue ${this.name}: cost() failed, the whole reserve is charged: ${errorMessage(err)}`);
            }
            await settleReservation(this.#client, budget.id, reservationId, costMinor);
          }
        },
      });
    } catch (err) {
      this.owner.noteError(err);
      throw err;
    }
  }
}

export function outcomeOf(task: any): unknown {
  const reason: string | null = task.outcomeReason ?? null;
  if (task.state === 'SUCCEEDED') return task.outcome ?? null;
  if (task.state === 'CANCELLED') {
    if (reason === 'scope_cancelled') throw new ScopeCancelledError('SCOPE_CANCELLED', 409, 'the run stopped before the job finished');
    throw new TaskFailedError(`job ${task.id} was cancelled`, { taskId: task.id, reason: reason ?? 'cancelled' });
  }
  if (task.state === 'EXPIRED') throw new TaskFailedError(`job ${task.id} passed its deadline`, { taskId: task.id, reason: reason ?? 'expired' });
  const full = reason ?? 'failed';
  const prefix = 'handler_error: ';
  throw new TaskFailedError(full.startsWith(prefix) ? full.slice(prefix.length) : full, { taskId: task.id, reason: full });
}

