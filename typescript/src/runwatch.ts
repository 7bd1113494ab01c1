/**
 * Noticing that a run ended while work runs in it, within a second: `watchRunEnd()`.
 *
 * A worker whose handlers fill all its slots sends no request that the server could refuse with
 * `SCOPE_CANCELLED`, and a renewal comes only every third of a lease; so `consume()` and `serve()`
 * watch their run. They hold one long poll on the space's event log (`GET /watch`) for the events
 * that end a scope (`scope.cancelled`, `scope.completed`, `scope.expired`), and read the run's own
 * view (`GET /scopes/{id}`, whose `effective` state counts its ancestors and its deadline) once
 * before each hold and after each page. A cancel anywhere in the space answers the held poll at
 * once; a run that ended by its deadline, which the log may not show, is seen at the next hold's
 * end (a few seconds).
 *
 * The watch only reports: it never throws. A failure it cannot see past (the key refused, the run
 * unknown) ends the watch quietly, since the worker's own requests meet the same error and report
 * it; a transient one (an outage) is waited out with backoff.
 */

import type { Context } from './context.js';
import { CursorExpiredError, ScopeCancelledError, isTransient } from './errors.js';
import { nowMs, pause } from './time.js';

export const SCOPE_END_EVENTS = 'scope.cancelled,scope.completed,scope.expired';
/** How long one watch asks the server to hold (it holds this client 20 s at most). */
export const RUN_WATCH_HOLD_S = 8;
const PAGE_LIMIT = 1000;
const RETRY_MIN_MS = 250;
const EARLY_EMPTY_MS = 1000;
const RETRY_MAX_MS = 5000;

/** The error a worker stops with when its run is no longer active, from the run's view. */
export function runEnded(scopeId: string, view: any): ScopeCancelledError {
  const state = String(view?.effective ?? 'ENDED').toLowerCase();
  return new ScopeCancelledError('SCOPE_CANCELLED', 409, `run ${scopeId} is ${state}`);
}

/**
 * Resolves with a `ScopeCancelledError` once the scope `scopeId` (or one of its ancestors) is no
 * longer active, or with null when `stop` aborts or the watch cannot go on (see above).
 */
export async function watchRunEnd(ctx: Context, scopeId: string, stop: AbortSignal): Promise<ScopeCancelledError | null> {
  let cursor: string | undefined;
  let caughtUp = false;
  let retryMs = RETRY_MIN_MS;
  while (!stop.aborted) {
    try {
      const view = (await ctx.call('GET', `/scopes/${scopeId}`, { signal: stop })).body;
      if (view?.effective !== undefined && view.effective !== 'ACTIVE') return runEnded(scopeId, view);
      // The log is read from its start up to its head first (pages answered at once), then held.
      const holdS = caughtUp ? RUN_WATCH_HOLD_S : 0;
      const query = { types: SCOPE_END_EVENTS, cursor, limit: PAGE_LIMIT, waitSeconds: holdS };
      const asked = nowMs();
      const page = (await ctx.call('GET', '/watch', { query, waitMs: holdS * 1000, signal: stop })).body;
      if (typeof page?.nextCursor === 'string' && page.nextCursor !== '') cursor = page.nextCursor;
      const count = Array.isArray(page?.events) ? page.events.length : 0;
      retryMs = RETRY_MIN_MS;
      // A server that does not hold the watch answers an empty page at once: then look every second.
      if (caughtUp && count === 0 && nowMs() - asked < EARLY_EMPTY_MS) await pause(EARLY_EMPTY_MS, { signal: stop, unref: true });
      if (!caughtUp && count < PAGE_LIMIT) caughtUp = true;
    } catch (err) {
      if (stop.aborted) return null;
      if (err instanceof CursorExpiredError) {
        cursor = undefined;
        caughtUp = false;
        continue;
      }
      if (!isTransient(err)) return null;
      await pause(retryMs, { signal: stop, unref: true });
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    }
  }
  return null;
}
