/**
 * The request layer: one logical API call over Node's own `fetch` (or its `http`/`https` modules
 * where `fetch` cannot go: a CA bundle, a `.` or `..` path segment, see `nodehttp.ts`).
 *
 * What it does, in the wire contract's words (the Python SDK's `_request.py` does the same):
 *
 * - `authorization: Bearer <key>` on every request;
 * - one `idempotency-key` (24 lowercase hex characters) made per logical call, sent on every request
 *   that is not a GET and reused unchanged on each transport retry of that call. A new logical call,
 *   including each pass of a wait loop, gets a new key: the key says "this same call again", never
 *   "the same intent". That is what makes the retries safe: the server answers a replayed key with
 *   the original response instead of applying the mutation twice;
 * - a JSON body with top-level `undefined`/`null` values left out (nested ones inside user data stay
 *   `null`), and a top-level number that is not finite refused (`VALIDATION_FAILED`) rather than
 *   sent as `null`; no body at all for the bodyless POSTs;
 * - only transport failures (a refused connection, a reset, a per-attempt timeout) are retried,
 *   `retries` times, 25-100 ms apart; an HTTP answer, whatever its status, is never retried;
 * - 204 gives an empty reply; any status below 400 is parsed as JSON (`{}` when it is not JSON);
 *   400 and above throw the error for the envelope's code. Without one (an answer made by a proxy
 *   or a load balancer in front of the server) a 5xx is `UNAVAILABLE`, worth trying again, and a
 *   4xx the code its status names (`NOT_FOUND` for a 404, `VALIDATION_FAILED` for one that names
 *   none; `REQUEST_TIMEOUT` and `RATE_LIMITED` for 408 and 429, which alone stay worth trying
 *   again), with a message that quotes the status and the start of the body;
 * - `Retry-After` on an error answer becomes `retryAfterMs`.
 *
 * A caller's `signal` is not a transport failure: when it aborts, the call rejects with the
 * signal's reason at once and is not retried.
 *
 * In a cluster, a request of a space goes to its partition's leader once an answer said it was
 * passed on by another node (`cluster.ts`); when that leader cannot be reached or answers 503, it
 * goes again at once through the configured URL.
 */

import type { Coalescer } from './batch.js';
import { ClusterMap, FORWARDED_BY } from './cluster.js';
import { RunstateError, UnavailableError, detailsOf, mapError } from './errors.js';
import { NodeHttp, hasDotSegment } from './nodehttp.js';
import { pause, randomHex, uniform, withTimeout } from './time.js';

const RETRY_BACKOFF_MIN_MS = 25;
/** This package's version: the same as the Python SDK's `runstate.__version__` (CHANGELOG.md). */
export const VERSION = '0.3.0';
export const USER_AGENT = `runstate-sdk-typescript/${VERSION}`;
const RETRY_BACKOFF_MAX_MS = 100;

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface Reply {
  status: number;
  /** The parsed JSON body; `null` for a 204. */
  body: any;
}

export type Method = 'GET' | 'POST' | 'PUT';

export interface CallOptions {
  /** A JSON object; top-level `undefined` and `null` values are left out. No body when absent. */
  body?: Record<string, unknown>;
  /** Query parameters; `undefined` and `null` values are left out. */
  query?: Record<string, string | number | boolean | null | undefined>;
  /** The call's idempotency key, for a caller that repeats one logical call (a settlement riding
   * through an outage); by default each call makes its own. */
  idempotencyKey?: string;
  /** A long poll: the server may hold the request this long, so each attempt may take as much longer. */
  waitMs?: number;
  /** Abandons the call (the request is aborted and the call rejects with the signal's reason). */
  signal?: AbortSignal;
}

/** 24 lowercase hex characters (12 random bytes). */
export function newIdempotencyKey(): string {
  return randomHex(12);
}

/**
 * The body as it goes on the wire: its top-level `undefined` and `null` values left out. A
 * top-level number that is not finite (NaN, `Infinity`) is refused here, as the server refuses a
 * field out of range (`VALIDATION_FAILED`, status 400): JSON would send it as `null`, which the
 * server reads as "not given", so `leaseSeconds: NaN` would take the default lease while this
 * side counted and renewed a lease of NaN seconds (never, and never lost).
 */
export function compactBody(body: Record<string, unknown>): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new RunstateError('VALIDATION_FAILED', 400, `field '${key}' must be a finite number, got ${value}`);
    }
    if (value !== undefined && value !== null) kept[key] = value;
  }
  return kept;
}

/** Compact JSON with top-level `undefined` and `null` values left out. */
export function encodeBody(body: Record<string, unknown>): string {
  return JSON.stringify(compactBody(body));
}

/** Seconds (a decimal number, maybe with a fraction) to whole milliseconds; otherwise null. */
export function parseRetryAfter(value: string | null): number | null {
  if (value === null || value.trim() === '') return null;
  const text = value.trim();
  if (!/^\d+(\.\d+)?$/.test(text)) return null;
  return Math.round(Number(text) * 1000);
}

/** `?a=1&b=x` from the parameters that have a value; '' when none has. */
export function queryString(query: CallOptions['query']): string {
  if (query === undefined) return '';
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null) params.set(name, String(value));
  }
  const text = params.toString();
  return text === '' ? '' : `?${text}`;
}

function parseJson(text: string): any {
  if (text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
}

export class Requester {
  readonly baseUrl: string;
  readonly requestTimeoutMs: number;
  readonly retries: number;
  readonly #authorization: string;
  // Node's own http(s), for a CA bundle (every request) and for dot segments (`nodehttp.ts`).
  readonly #caBundle: string | undefined;
  #nodeHttp: NodeHttp | undefined;
  /** Which node leads each partition of a cluster, once an answer said it was passed on. */
  readonly cluster: ClusterMap;
  /** Sends the calls that may be batched (`batch.ts`); null: each goes alone (`batchCalls: false`). */
  coalescer: Coalescer | null = null;

  constructor(baseUrl: string, apiKey: string, requestTimeoutMs: number, retries: number, caBundle?: string) {
    this.baseUrl = baseUrl;
    this.requestTimeoutMs = requestTimeoutMs;
    this.retries = retries;
    this.#authorization = `Bearer ${apiKey}`;
    this.#caBundle = caBundle;
    if (caBundle !== undefined) this.#nodeHttp = new NodeHttp(baseUrl, caBundle);
    this.cluster = new ClusterMap(baseUrl, () => this.#readMap());
  }

  /** The cluster's map, from the configured URL (one try). */
  async #readMap(): Promise<unknown> {
    const attemptSignal = withTimeout(undefined, this.requestTimeoutMs);
    try {
      const headers = { authorization: this.#authorization, 'user-agent': USER_AGENT };
      const answer = await this.#exchange('GET', `${this.baseUrl}/v1/cluster`, '/v1/cluster', headers, undefined, attemptSignal.signal);
      return reply(answer.status, answer.headers, answer.text).body;
    } finally {
      attemptSignal.dispose();
    }
  }

  /** One exchange: `fetch`, unless a CA bundle or a dot segment needs Node's own http(s). */
  async #exchange(
    method: string,
    url: string,
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal,
  ): Promise<{ status: number; headers: Headers; text: string }> {
    if (this.#caBundle !== undefined || hasDotSegment(path)) {
      this.#nodeHttp ??= new NodeHttp(this.baseUrl);
      return this.#nodeHttp.request(url, { method, headers, body, signal });
    }
    const response = await fetch(url, { method, headers, body, signal, redirect: 'manual' });
    return { status: response.status, headers: response.headers, text: await response.text() };
  }

  /** Close the connections kept by Node's own http(s), if any were opened. */
  close(): void {
    this.#nodeHttp?.close();
    this.#nodeHttp = undefined;
  }

  /** One logical call to `path` (already prefixed with `/v1/spaces/{space}`). */
  async call(method: Method, path: string, options: CallOptions = {}): Promise<Reply> {
    const { body, waitMs = 0, signal } = options;
    const headers: Record<string, string> = { authorization: this.#authorization, 'user-agent': USER_AGENT };
    if (method !== 'GET') headers['idempotency-key'] = options.idempotencyKey ?? newIdempotencyKey();
    const url = this.baseUrl + path + queryString(options.query);
    let payload: string | undefined;
    if (body !== undefined) {
      payload = encodeBody(body);
      headers['content-type'] = 'application/json';
    }
    const attemptTimeoutMs = this.requestTimeoutMs + Math.max(waitMs, 0);
    const leader = this.cluster.leaderUrl(path);
    if (leader !== null) {
      // To the partition's leader; through the configured URL (below) if it fails to answer.
      const attemptSignal = withTimeout(signal, attemptTimeoutMs);
      try {
        const answer = await this.#exchange(method, leader + path + queryString(options.query), path, headers, payload, attemptSignal.signal);
        if (answer.status !== 503) {
          if (answer.headers.has(FORWARDED_BY)) this.cluster.learnSoon(); // it no longer leads
          return reply(answer.status, answer.headers, answer.text);
        }
        this.cluster.learnSoon(); // it cannot serve (it stopped leading, say): the map again
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        this.cluster.nodeDown(leader);
      } finally {
        attemptSignal.dispose();
      }
    }
    let last: unknown;
    for (let attempt = 0; attempt <= this.retries; attempt += 1) {
      if (attempt > 0) {
        await pause(uniform(RETRY_BACKOFF_MIN_MS, RETRY_BACKOFF_MAX_MS), { signal });
      }
      signal?.throwIfAborted();
      const attemptSignal = withTimeout(signal, attemptTimeoutMs);
      let status: number;
      let responseHeaders: Headers;
      let text: string;
      try {
        ({ status, headers: responseHeaders, text } = await this.#exchange(method, url, path, headers, payload, attemptSignal.signal));
      } catch (err) {
        // The caller's own abort is not a transport failure: no retry, its reason goes up as is.
        if (signal?.aborted) throw signal.reason;
        last = err;
        continue;
      } finally {
        attemptSignal.dispose();
      }
      if (responseHeaders.has(FORWARDED_BY)) this.cluster.learnSoon(); // passed on: learn the map
      return reply(status, responseHeaders, text);
    }
    throw new UnavailableError('UNAVAILABLE', 503, `transport failure after retries: ${describe(last)}`, {
      cause: last,
    });
  }
}

/**
 * The code an answer of 400-499 without an error envelope stands for, by its status (any other in
 * that range: `VALIDATION_FAILED`). Such an answer comes from something in front of the server (a
 * proxy's HTML 404, a load balancer's 405): sending it again gets it again, so it is thrown as the
 * code its status names, never as `UNAVAILABLE`, which loops and renewals would try again. A 408
 * or a 429 says "later" whoever sends it, and stays worth trying again.
 */
const BARE_4XX_CODES: Readonly<Record<number, string>> = Object.freeze({
  401: 'UNAUTHENTICATED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  408: 'REQUEST_TIMEOUT',
  409: 'CONFLICT',
  410: 'NOT_FOUND',
  429: 'RATE_LIMITED',
});
/** How much of a body without an envelope an error's message quotes. */
const BARE_BODY_QUOTED_CHARS_MAX = 200;

/** The start of a body, as one line of text, for a message. */
function bodyStart(text: string): string {
  let line = text.slice(0, BARE_BODY_QUOTED_CHARS_MAX * 4).split(/\s+/).filter((part) => part !== '').join(' ');
  if (line.length > BARE_BODY_QUOTED_CHARS_MAX) line = `${line.slice(0, BARE_BODY_QUOTED_CHARS_MAX)}...`;
  return line === '' ? 'an empty body' : JSON.stringify(line);
}

function reply(status: number, headers: Headers, text: string): Reply {
  if (status === 204) return { status, body: null };
  const parsed = parseJson(text);
  if (status < 400) return { status, body: parsed };
  const envelope =
    parsed !== null && typeof parsed === 'object' && parsed.error !== null && typeof parsed.error === 'object'
      ? parsed.error
      : {};
  const bare = !(typeof envelope.code === 'string' && envelope.code !== '');
  const code = !bare ? envelope.code : status < 500 ? (BARE_4XX_CODES[status] ?? 'VALIDATION_FAILED') : 'UNAVAILABLE';
  const message =
    typeof envelope.message === 'string' && envelope.message !== ''
      ? envelope.message
      : `HTTP ${status} without an error envelope (from a proxy in the way?): ${bodyStart(text)}`;
  const requestId = typeof envelope.requestId === 'string' ? envelope.requestId : null;
  const details = detailsOf(envelope.details);
  throw mapError(code, status, message, { requestId, retryAfterMs: parseRetryAfter(headers.get('retry-after')), details });
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
    return `${err.name}: ${err.message}${cause}`;
  }
  return String(err);
}
