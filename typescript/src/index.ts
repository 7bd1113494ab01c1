/**
 * runstate-sdk: the TypeScript client for runstate-server.
 *
 * Two ways in. The run API wraps a function where it is defined (`once`, `limit`, `slots`,
 * `budget`, `queue` / `serve` / `gather`, `stop`, `sleep`, `together`: see `work.ts`). The client,
 * `new Runstate({ holder })`, hands out every primitive (claims, tasks, queues, pools, quotas,
 * budgets, groups, barriers, timers, events).
 *
 * `new Runstate({ holder })` reads `RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID` and `RUNSTATE_BASE_URL`
 * (default `http://localhost:8080`) unless given `apiKey`, `spaceId` and `baseUrl`. No runtime
 * dependencies: Node's own `fetch` and `AbortController`.
 */

export { Runstate, ScopesAPI, MailboxesAPI } from './client.js';
export { VERSION } from './request.js';
export type {
  MailboxRow,
  MailboxCounts,
  MailboxRequirements,
  EnsureMailboxOptions,
  DeadLetter,
  DeadLetterPage,
  DeadLetterFilter,
  DeadLetterPageOptions,
  DeadLetterActionOptions,
  RequeueResult,
  DeleteResult,
  PurgeOptions,
  PurgeResult,
} from './client.js';
export { resolveConfig, DEFAULT_BASE_URL } from './config.js';
export type { RunstateOptions, Config } from './config.js';
export { ScopeHandle } from './scopes.js';
export type { CreateScopeOptions, HeldClaim, ClaimsPage, TasksPage, ListOptions, IterateOptions, ScopeView } from './scopes.js';
export { ClaimRef, ClaimLease, encodeClaimKey } from './claims.js';
export { HeldLease } from './lease.js';
export {
  PoolsAPI,
  QuotasAPI,
  BudgetsAPI,
  WorkLimitsAPI,
  PoolRef,
  PoolLease,
  QuotaRef,
  BudgetRef,
  BudgetReservation,
  decimalToMinor,
  minorToDecimal,
} from './capacity.js';
export type { PoolAcquireOptions, PoolAttempt, QuotaAttempt, TakeOptions } from './capacity.js';
export {
  BarriersAPI,
  BarrierHandle,
  TimersAPI,
  TimerHandle,
  GroupsAPI,
  GroupHandle,
  EventsAPI,
  DiagnosticsAPI,
} from './coordination.js';
export type {
  PollOptions,
  CreateGroupOptions,
  GroupCondition,
  RunstateEvent,
  WatchedEvent,
  EventsPage,
  WatchOptions,
} from './coordination.js';
export type { AcquireOptions, RunOptions, TryAcquireResult, ClaimView } from './claims.js';
export { MailboxRef, Delivery } from './mailboxes.js';
export type {
  SubmitOptions,
  SendOptions,
  SentMessage,
  ReceiveOptions,
  SettleOptions,
  CompleteResult,
  ConsumeOptions,
  Handler,
  AdmitOptions,
  AdmittedWork,
} from './mailboxes.js';
export { TaskTicket, TERMINAL_STATES } from './tasks.js';
export type { TaskView, TaskResult, TaskState, TerminalState, WaitOptions } from './tasks.js';
export {
  RunstateError,
  ConfigError,
  AuthenticationError,
  NotFoundError,
  ConflictError,
  ScopeCancelledError,
  LeaseLostError,
  WaitTimeoutError,
  RateLimitError,
  UnavailableError,
  CursorExpiredError,
  BudgetExceededError,
  OnceFailedError,
  TaskFailedError,
  isTransient,
  mapError,
  STATUS_BY_CODE,
} from './errors.js';
export type { RunstateErrorOptions } from './errors.js';
export { WARNING_TYPE } from './warnings.js';
export { partitionOf } from './cluster.js';
export {
  RunClient,
  defaultRun,
  configure,
  run,
  child,
  runId,
  context,
  once,
  limit,
  take,
  slots,
  budget,
  queue,
  serve,
  stop,
  finish,
  sleep,
  together,
  setup,
  events,
  status,
} from './work.js';
export type {
  RunClientOptions,
  RunContext,
  OnceOptions,
  LimitOptions,
  SlotsOptions,
  BudgetOptions,
  QueueOptions,
  Queue,
  Job,
  GatherOptions,
  ServeOptions,
  RunEvent,
  RunStatus,
} from './work.js';
export { canonicalJson, workKey } from './keys.js';
export { parseDuration, parsePer, toMinor } from './units.js';
export type { Duration, Per, Amount } from './units.js';
