/**
 * Client configuration: options first, then the environment, then defaults.
 *
 * Building a client sends nothing; a missing API key or space id fails at once with `ConfigError`
 * rather than on the first request.
 */

import { ConfigError } from './errors.js';
import { randomHex } from './time.js';

export const ENV_API_KEY = 'RUNSTATE_API_KEY';
export const ENV_SPACE_ID = 'RUNSTATE_SPACE_ID';
export const ENV_BASE_URL = 'RUNSTATE_BASE_URL';
export const ENV_CA_BUNDLE = 'RUNSTATE_CA_BUNDLE';

export const DEFAULT_BASE_URL = 'http://localhost:8080';
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;
export const DEFAULT_RETRIES = 2;

export interface RunstateOptions {
  /** Else `RUNSTATE_API_KEY`. Required. */
  apiKey?: string;
  /** Else `RUNSTATE_SPACE_ID`. Required. */
  spaceId?: string;
  /** Else `RUNSTATE_BASE_URL`, else `http://localhost:8080`: an `http://` or `https://` URL
   * (`ConfigError` otherwise). One trailing `/` is dropped. */
  baseUrl?: string;
  /** The logical worker (stable across restarts); default `worker-` and 6 hex characters. */
  holder?: string;
  /** Per attempt of a request (a long poll gets its wait on top), more than 0; default 10 000 ms.
   * `Infinity` (or anything past a Node timer's 2^31 - 1 ms) waits for an answer without a bound. */
  requestTimeoutMs?: number;
  /** Transport retries of one call, with the same idempotency key; default 2 (3 attempts). */
  retries?: number;
  /**
   * Else `RUNSTATE_CA_BUNDLE`: the path of a PEM file of the certificates to trust for an `https`
   * server (one with a self-signed or private CA's certificate), instead of the system's.
   */
  caBundle?: string;
  /**
   * Calls made while another request of this client (and space) is on its way go out together as
   * one batch request when they come back (our extension; each keeps its own answer and error),
   * and the client's leases are renewed in one request per interval. Default true; false sends
   * every call and every renewal alone, as the official clients do.
   */
  batchCalls?: boolean;
}

export interface Config {
  apiKey: string;
  spaceId: string;
  baseUrl: string;
  holder: string;
  /** 12 hex characters, fresh for every client: two live clients never share a session. */
  session: string;
  requestTimeoutMs: number;
  retries: number;
  caBundle?: string;
}

function fromEnv(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : value;
}

/**
 * An `http://` or `https://` URL, or `ConfigError` now: `localhost:8080` (no scheme) parses as a URL
 * of the scheme `localhost:`, and would fail only at the first request, as a transport failure
 * (`UNAVAILABLE`) after its retries.
 */
function checkBaseUrl(baseUrl: string): void {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new ConfigError(`baseUrl ${JSON.stringify(baseUrl)} is not a URL: give one such as http://localhost:8080`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`baseUrl ${JSON.stringify(baseUrl)} must start with http:// or https://`);
  }
}

/** Merge the options over the environment and check that the required values are there. */
export function resolveConfig(options: RunstateOptions = {}): Config {
  const apiKey = options.apiKey || fromEnv(ENV_API_KEY);
  const spaceId = options.spaceId || fromEnv(ENV_SPACE_ID);
  const baseUrl = options.baseUrl || fromEnv(ENV_BASE_URL) || DEFAULT_BASE_URL;
  if (!apiKey) throw new ConfigError(`missing apiKey: pass { apiKey } or set ${ENV_API_KEY}`);
  if (!spaceId) throw new ConfigError(`missing spaceId: pass { spaceId } or set ${ENV_SPACE_ID}`);
  if (spaceId.includes('/')) throw new ConfigError(`spaceId must be a space's id, without '/', got ${JSON.stringify(spaceId)}`);
  checkBaseUrl(baseUrl);
  const retries = options.retries ?? DEFAULT_RETRIES;
  if (!Number.isInteger(retries) || retries < 0) throw new ConfigError('retries must be a whole number, 0 or more');
  const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  // A number only: a string would be added to a long poll's wait as text ('5000' + 20000).
  if (typeof requestTimeoutMs !== 'number' || !(requestTimeoutMs > 0)) {
    throw new ConfigError(`requestTimeoutMs must be a number of milliseconds, more than 0, got ${String(requestTimeoutMs)}`);
  }
  return {
    apiKey,
    spaceId,
    baseUrl: baseUrl.endsWith('/') ? baseUrl.slice(0, -1) : baseUrl,
    holder: options.holder || `worker-${randomHex(3)}`,
    session: randomHex(6),
    requestTimeoutMs,
    retries,
    caBundle: options.caBundle || fromEnv(ENV_CA_BUNDLE),
  };
}
