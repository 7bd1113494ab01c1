/**
 * runstate-sdk: the TypeScript client for runstate-server.
 *
 * `new Runstate({ holder })` reads `RUNSTATE_API_KEY`, `RUNSTATE_SPACE_ID` and `RUNSTATE_BASE_URL`
 * (default `http://localhost:8080`) unless given `apiKey`, `spaceId` and `baseUrl`. No runtime
 * dependencies: Node's own `fetch` and `AbortController`.
 */

export { Runstate, ScopesAPI, MailboxesAPI } from './client.js';
export type { MailboxRow, EnsureMailboxOptions } from './client.js';
export { resolveConfig, DEFAULT_BASE_URL } from './config.js';
export type { RunstateOptions, Config } from './config.js';
export { ScopeHandle } from './scopes.js';
export type { CreateScopeOptions } from './scopes.js';
export { ClaimRef, ClaimLease, encodeClaimKey } from './claims.js';
export type { AcquireOptions, RunOptions, TryAcquireResult } from './claims.js';
export { MailboxRef, Delivery } from './mailboxes.js';
export type {
  SubmitOptions,
  SendOptions,
  SentMessage,
  ReceiveOptions,
  CompleteResult,
  ConsumeOptions,
  Handler,
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
  mapError,
  STATUS_BY_CODE,
} from './errors.js';
export type { RunstateErrorOptions } from './errors.js';
