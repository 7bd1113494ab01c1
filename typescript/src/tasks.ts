/**
 * Task tickets: a handle on one shared task, by id.
 *
 * A ticket is only a task id (and the scope it was submitted in): a process that restarts gets it
 * back with `rs.scope(runId).task(taskId)` and reads the recorded outcome; nothing runs again.
 * `result()` waits on this side only: when it times out the task carries on, and stopping it takes
 * an explicit `cancel()`.
 */

import type { Context } from './context.js';
import { checkId } from './claims.js';
import { waitTimeout } from './errors.js';
import { checkMs, nowMs, pause } from './time.js';

export const TERMINAL_STATES: ReadonlySet<string> = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED']);
export const DEFAULT_RESULT_TIMEOUT_MS = 30_000;
export const DEFAULT_POLL_MS = 250;

export type TerminalState = 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'EXPIRED';
export type TaskState = 'QUEUED' | 'RUNNING' | TerminalState;

/** `GET /tasks/{id}`: the task as the server records it. */
export interface TaskView<Outcome = unknown> {
  id: string;
  /** The same as `id` (what a submit's answer names it). */
  taskId: string;
  taskKey: string;
  scopeId: string;
  mailboxId: string;
  /** The message that carries the task to its workers. */
  messageId: string;
  state: TaskState;
  /** Deliveries so far (1 for the first). */
  attempt: number;
  /** The payload the worker completed the task with; null until then, and once tombstoned. */
  outcome: Outcome | null;
  /** Why a task did not succeed, or null. */
  outcomeReason: string | null;
  deadline: string | null;
  subscribers: string[];
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
  /** True once the retention window has passed: state and reason stay, the outcome is gone. */
  tombstoned: boolean;
  [field: string]: unknown;
}

/**
 * What `result()` gives once the task is terminal. `tombstoned: true` is there once the result's
 * retention ran out: `outcome` is then null because the result is no longer kept, not because there
 * was none.
 */
export interface TaskResult<Outcome = unknown> {
  state: TerminalState;
  outcome: Outcome | null;
  reason: string | null;
  tombstoned?: true;
}

export interface WaitOptions {
  /** Default 30 000 ms, then `WaitTimeoutError` (the task keeps going). */
  timeoutMs?: number;
  /** Default 250 ms between two reads of the task. */
  pollMs?: number;
  signal?: AbortSignal;
}

export class TaskTicket<Outcome = unknown> {
  readonly #ctx: Context;
  readonly id: string;
  readonly scopeId: string | null;

  constructor(ctx: Context, taskId: string, scopeId: string | null = null) {
    this.#ctx = ctx;
    this.id = checkId('taskId', taskId);
    this.scopeId = scopeId;
  }

  /** The task view: `state`, `attempt`, `outcome`, `outcomeReason`, `subscribers`... */
  async status(options: { signal?: AbortSignal } = {}): Promise<TaskView<Outcome>> {
    return (await this.#ctx.call('GET', `/tasks/${this.id}`, { signal: options.signal })).body;
  }

  /** Poll until the task is terminal: `{ state, outcome, reason }`. Throws `WaitTimeoutError` after
   * `timeoutMs`; the task keeps going. */
  async result(options: WaitOptions = {}): Promise<TaskResult<Outcome>> {
    const view = await this.#poll(TERMINAL_STATES, options, 'finish');
    const result: TaskResult<Outcome> = {
      state: view.state as TerminalState,
      outcome: view.outcome ?? null,
      reason: view.outcomeReason ?? null,
    };
    if (view.tombstoned === true) result.tombstoned = true;
    return result;
  }

  /** Poll until the task is `RUNNING` or terminal; returns the whole view. */
  async awaitAdmission(options: WaitOptions = {}): Promise<TaskView<Outcome>> {
    return this.#poll(new Set([...TERMINAL_STATES, 'RUNNING']), options, 'start');
  }

  async #poll(states: ReadonlySet<string>, options: WaitOptions, what: string): Promise<TaskView<Outcome>> {
    const { timeoutMs = DEFAULT_RESULT_TIMEOUT_MS, pollMs = DEFAULT_POLL_MS, signal } = options;
    checkMs(options.timeoutMs, 'timeoutMs', { infinite: true });
    checkMs(options.pollMs, 'pollMs', { positive: true });
    const started = nowMs();
    for (;;) {
      const view = await this.status({ signal });
      if (states.has(view.state)) return view;
      const elapsedMs = nowMs() - started;
      if (elapsedMs >= timeoutMs) throw waitTimeout(`task ${this.id} did not ${what} within ${timeoutMs} ms`);
      await pause(Math.min(pollMs, timeoutMs - elapsedMs), { signal });
      signal?.throwIfAborted();
    }
  }

  /** Cancel the task; without a reason the body is `{}`. */
  async cancel(reason?: string): Promise<TaskView<Outcome>> {
    return (await this.#ctx.call('POST', `/tasks/${this.id}/cancel`, { body: { reason } })).body;
  }

  /** Subscribe to the task (harmless to repeat). `scopeId` defaults to the ticket's scope. */
  async join(subscriberId: string, scopeId?: string): Promise<Record<string, unknown>> {
    const scope = scopeId ?? this.scopeId;
    if (!scope) throw new TypeError('join() needs a scopeId: this ticket does not know its scope');
    return (await this.#ctx.call('POST', `/tasks/${this.id}/join`, { body: { subscriberId, scopeId: scope } })).body;
  }

  /** Unsubscribe. A task left with no subscribers is not cancelled. */
  async detach(subscriberId: string): Promise<Record<string, unknown>> {
    return (await this.#ctx.call('POST', `/tasks/${this.id}/detach`, { body: { subscriberId } })).body;
  }
}
