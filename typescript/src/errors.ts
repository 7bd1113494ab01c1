/**
 * The SDK's errors: one base class, one flat level of subclasses.
 *
 * ```
 * Error
 *  +-- RunstateError            code, status, message, requestId, retryAfterMs, details
 *       +-- ConfigError           CONFIG_ERROR (status 0): no API key or space id
 *       +-- AuthenticationError   UNAUTHENTICATED, FORBIDDEN, ENTITLEMENT_EXCEEDED, SPACE_SUSPENDED
 *       +-- NotFoundError         NOT_FOUND, HISTORY_NOT_KEPT (also a name that a lookup did not find)
 *       +-- ConflictError         CONFLICT, CLAIM_HELD, IDEMPOTENCY_CONFLICT, DEADLINE_EXCEEDED,
 *       |    |                    CAPACITY_UNAVAILABLE, BACKLOG_FULL, BARRIER_RELEASED,
 *       |    |                    BARRIER_CANCELLED
 *       |    +-- BudgetExceededError  INSUFFICIENT_BUDGET: a reservation does not fit in the budget
 *       +-- ScopeCancelledError   SCOPE_CANCELLED: also a run stopped (`stop()`), seen by this side
 *       +-- LeaseLostError        STALE_CLAIM, LEASE_RENEWALS_EXHAUSTED (no renewal got through
 *       |                         before the lease's end by this process's clock)
 *       +-- WaitTimeoutError      WAIT_TIMEOUT (status 0): a wait on this side ran out
 *       +-- RateLimitError        RATE_LIMITED, SERVICE_RATE_LIMITED, ALLOWANCE_EXHAUSTED,
 *       |                         ALLOWANCE_COOLDOWN, CONCURRENCY_LIMITED, OPERATIONS_EXHAUSTED
 *       +-- UnavailableError      UNAVAILABLE, REQUEST_TIMEOUT (the request's body did not reach
 *       |                         the server in time: nothing was applied): also a 5xx answer without
 *       |                         an error envelope, and transport failures once the retries are used up
 *       +-- CursorExpiredError    CURSOR_EXPIRED
 *       +-- OnceFailedError       ONCE_FAILED (status 0): a `once()` function failed its last attempt
 *       +-- TaskFailedError       TASK_FAILED (status 0): a queue job ended without a result
 * ```
 *
 * Every subclass derives directly from `RunstateError` but `BudgetExceededError`, which refines
 * `ConflictError` (code that catches a `ConflictError` still catches it): a `LeaseLostError` is
 * *not* a `ConflictError`, even though both arrive as HTTP 409. The class depends only on the error code;
 * `status` is the HTTP status the server really sent. A code this table does not know is kept on a
 * plain `RunstateError`, never collapsed into another code. Each class here is the Python SDK's of
 * the same name, for the same codes; the Python SDK has a few finer ones besides (`ValidationError`
 * for `VALIDATION_FAILED`, `DeadlineExceededError`, `BarrierCancelledError`, `InternalError`),
 * whose codes arrive here as a plain `RunstateError` or as the `ConflictError` above.
 *
 * `details` holds the facts the server gave beside the message, to act on without another read:
 * its error envelope's `details`, or `{}` when it gave none (as for the errors made on this side,
 * but the claim wait below). What they are, by code:
 *
 * - `CLAIM_HELD`: `holder`, `generation` and `leaseExpiresAt` of the claim that holds the key (a
 *   `WaitTimeoutError` of `acquire({ wait: true })` carries those of the last refusal it waited
 *   through);
 * - `CONFLICT` of a name taken (a pool, quota, budget or work limit of that name exists): its `id`,
 *   and when it was ensured with other settings, those it has (a pool's `units`, a quota's
 *   `unitsLimit` and `windowSeconds`, a budget's `limitMinor`, `currency` and `scale`);
 * - `CAPACITY_UNAVAILABLE`: the pool's `unitsAvailable`, `unitsTotal` and how many are `waiting`;
 * - `ALLOWANCE_EXHAUSTED`: the quota's `remaining` units, `windowStart` and how many are `waiting`;
 * - `INSUFFICIENT_BUDGET`: `availableMinor` and `requestedMinor`;
 * - `BACKLOG_FULL` of a work limit: `outstanding` and `maxOutstanding`;
 * - `BARRIER_RELEASED`: the barrier's `epoch`.
 */

/** The HTTP status each code is sent with; used only for errors made on this side (status 0). */
export const STATUS_BY_CODE: Readonly<Record<string, number>> = Object.freeze({
  VALIDATION_FAILED: 400,
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  ENTITLEMENT_EXCEEDED: 403,
  SPACE_SUSPENDED: 403,
  NOT_FOUND: 404,
  CONFLICT: 409,
  CLAIM_HELD: 409,
  IDEMPOTENCY_CONFLICT: 409,
  SCOPE_CANCELLED: 409,
  DEADLINE_EXCEEDED: 409,
  STALE_CLAIM: 409,
  CAPACITY_UNAVAILABLE: 409,
  BACKLOG_FULL: 409,
  BARRIER_RELEASED: 409,
  BARRIER_CANCELLED: 409,
  INSUFFICIENT_BUDGET: 409,
  LEASE_RENEWALS_EXHAUSTED: 409,
  REQUEST_TIMEOUT: 408,
  RATE_LIMITED: 429,
  SERVICE_RATE_LIMITED: 429,
  ALLOWANCE_EXHAUSTED: 429,
  ALLOWANCE_COOLDOWN: 429,
  CONCURRENCY_LIMITED: 429,
  OPERATIONS_EXHAUSTED: 429,
  UNAVAILABLE: 503,
});

export interface RunstateErrorOptions {
  requestId?: string | null;
  retryAfterMs?: number | null;
  /** The envelope's `details` (see the module comment). */
  details?: Readonly<Record<string, unknown>> | null;
  cause?: unknown;
}

/**
 * Base class of every error the SDK throws on purpose. `code` is the stable value to branch on;
 * `message` is for people. `retryAfterMs` comes from a `Retry-After` header on an error answer:
 * the SDK's own wait loops do not act on it, it is there for callers who want to. `details` is
 * what the server said beside the message (who holds a claim and until when, what is left of a
 * pool...: the module comment lists them by code), `{}` when it said nothing more.
 */
export class RunstateError extends Error {
  readonly code: string;
  readonly status: number;
  readonly requestId: string | null;
  readonly retryAfterMs: number | null;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: string, status: number, message: string, options: RunstateErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.requestId = options.requestId ?? null;
    this.retryAfterMs = options.retryAfterMs ?? null;
    this.details = Object.freeze({ ...(options.details ?? {}) });
  }
}

/** An envelope's `details`, when it is the JSON object it should be (anything else is dropped: the
 * code and message still say what happened). */
export function detailsOf(value: unknown): Record<string, unknown> | null {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

/** The client cannot be built: the API key or the space id is missing, or an option is invalid. */
export class ConfigError extends RunstateError {
  constructor(message: string) {
    super('CONFIG_ERROR', 0, message);
  }
}

/** The API key was refused, or it may not do this. */
export class AuthenticationError extends RunstateError {}

/** The space, scope, task or named resource does not exist. */
export class NotFoundError extends RunstateError {}

/** The request conflicts with the current state (a held claim, a duplicate name...). */
export class ConflictError extends RunstateError {}

/** The scope, or one of its ancestors, is no longer active. */
export class ScopeCancelledError extends RunstateError {}

/** The lease's token is no longer current: another holder may own the key now. */
export class LeaseLostError extends RunstateError {}

/** A reservation does not fit in what is left of the budget (`INSUFFICIENT_BUDGET`). */
export class BudgetExceededError extends ConflictError {}

/** A wait on the client side (claim, task result) ran out; nothing changed on the server. */
export class WaitTimeoutError extends RunstateError {}

/** Too many requests or too much concurrency for now; see `retryAfterMs`. */
export class RateLimitError extends RunstateError {}

/** The server could not be reached, could not serve the request now (`UNAVAILABLE`), did not get
 * its body in time (`REQUEST_TIMEOUT`, nothing applied), or a 5xx came without a usable error
 * envelope (a proxy's 502, 503 or 504). A 4xx without an envelope is thrown as the code its status
 * names (`NotFoundError` for a 404, a `RunstateError` `METHOD_NOT_ALLOWED` for a 405...), not as this. */
export class UnavailableError extends RunstateError {}

/** An events cursor points before the oldest event still kept. */
export class CursorExpiredError extends RunstateError {}

/** A `once()` function failed as many times as it may (`attempts`); `message` is its last error. */
export class OnceFailedError extends RunstateError {
  readonly attempts: number;

  constructor(message: string, attempts: number) {
    super('ONCE_FAILED', 0, message);
    this.attempts = attempts;
  }
}

/** A queue job ended without a result (FAILED, CANCELLED, EXPIRED), or `gather()` can no longer
 * get the results it needs. `reason` is the task's recorded reason. */
export class TaskFailedError extends RunstateError {
  readonly taskId: string | null;
  readonly reason: string;

  constructor(message: string, options: { taskId?: string | null; reason?: string } = {}) {
    super('TASK_FAILED', 0, message);
    this.taskId = options.taskId ?? null;
    this.reason = options.reason ?? message;
  }
}

type ErrorClass = new (code: string, status: number, message: string, options?: RunstateErrorOptions) => RunstateError;

const CLASS_BY_CODE = new Map<string, ErrorClass>();
const FAMILIES: Array<[ErrorClass, string[]]> = [
  [AuthenticationError, ['UNAUTHENTICATED', 'FORBIDDEN', 'ENTITLEMENT_EXCEEDED', 'SPACE_SUSPENDED']],
  [NotFoundError, ['NOT_FOUND', 'HISTORY_NOT_KEPT']],
  [
    ConflictError,
    [
      'CONFLICT',
      'CLAIM_HELD',
      'IDEMPOTENCY_CONFLICT',
      'DEADLINE_EXCEEDED',
      'CAPACITY_UNAVAILABLE',
      'BACKLOG_FULL',
      'BARRIER_RELEASED',
      'BARRIER_CANCELLED',
    ],
  ],
  [BudgetExceededError, ['INSUFFICIENT_BUDGET']],
  [ScopeCancelledError, ['SCOPE_CANCELLED']],
  [LeaseLostError, ['STALE_CLAIM', 'LEASE_RENEWALS_EXHAUSTED']],
  [WaitTimeoutError, ['WAIT_TIMEOUT']],
  [
    RateLimitError,
    [
      'RATE_LIMITED',
      'SERVICE_RATE_LIMITED',
      'ALLOWANCE_EXHAUSTED',
      'ALLOWANCE_COOLDOWN',
      'CONCURRENCY_LIMITED',
      'OPERATIONS_EXHAUSTED',
    ],
  ],
  [UnavailableError, ['UNAVAILABLE', 'REQUEST_TIMEOUT']],
  [CursorExpiredError, ['CURSOR_EXPIRED']],
];
for (const [cls, codes] of FAMILIES) {
  for (const code of codes) CLASS_BY_CODE.set(code, cls);
}

/**
 * The error for a code; an unknown code gives a plain `RunstateError` that keeps it. `status` is
 * kept as given: only 0 (an error made on this side) is replaced by the code's usual status, or 503.
 */
export function mapError(code: string, status: number, message: string, options: RunstateErrorOptions = {}): RunstateError {
  const cls = CLASS_BY_CODE.get(code) ?? RunstateError;
  const resolved = status || STATUS_BY_CODE[code] || 503;
  return new cls(code, resolved, message, options);
}

/**
 * True for an error that the same request may well not get again: no answer at all (the
 * transport failed), the server unavailable or busy (`UNAVAILABLE`, a rate limit), the request's
 * body held up on the way (`REQUEST_TIMEOUT`), or a server error (5xx). A loop that rides through
 * an outage (lease renewal, a settlement) tries again on these and gives up on anything else: the
 * server has decided.
 */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof RunstateError)) return false;
  if (err instanceof UnavailableError || err instanceof RateLimitError) return true;
  return err.status >= 500;
}

/** A client-side wait ran out (status 0, like the Python SDK); `details`: what the last refusal said. */
export function waitTimeout(message: string, cause?: unknown, details?: Readonly<Record<string, unknown>>): WaitTimeoutError {
  return new WaitTimeoutError('WAIT_TIMEOUT', 0, message, { cause, details });
}
