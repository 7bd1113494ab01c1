/**
 * One HTTP exchange over Node's own `http`/`https` modules, for the two cases `fetch` cannot serve:
 *
 * - a CA bundle (`caBundle`): Node's `fetch` trusts only the system's roots and takes no CA of its
 *   own without a dependency; `https` takes one per agent;
 * - a path with a `.` or `..` segment sent percent-encoded (`%2E`, a claim key `.`): the WHATWG
 *   URL parser behind `fetch` treats `%2E` as a dot segment too and drops it, so the request would
 *   reach another route; `http.request` sends the path as it is given.
 *
 * It answers what the request layer reads of a `fetch` response: the status, the headers and the
 * body as text. A failure to exchange (refused, reset, aborted) rejects, as `fetch` does.
 */

import { readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';

export interface Exchange {
  status: number;
  headers: Headers;
  text: string;
}

export interface ExchangeOptions {
  method: string;
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
}

/** Whether `path` has a segment that a URL parser would take for `.` or `..`. */
export function hasDotSegment(path: string): boolean {
  return path
    .split('?', 1)[0]!
    .split('/')
    .some((segment) => /^(\.|%2e){1,2}$/i.test(segment));
}

export class NodeHttp {
  readonly #agent: http.Agent;
  readonly #secure: boolean;

  /** `caBundle`: the path of a PEM file of the certificates to trust (https only). */
  constructor(baseUrl: string, caBundle?: string) {
    this.#secure = baseUrl.startsWith('https:');
    this.#agent = this.#secure
      ? new https.Agent({ keepAlive: true, ca: caBundle === undefined ? undefined : readFileSync(caBundle) })
      : new http.Agent({ keepAlive: true });
  }

  request(url: string, options: ExchangeOptions): Promise<Exchange> {
    const target = new URL(url);
    // The path exactly as given (after the origin): what `new URL` would have normalized away.
    const path = url.slice(target.origin.length);
    const send = this.#secure ? https.request : http.request;
    return new Promise<Exchange>((resolve, reject) => {
      const request = send(
        {
          agent: this.#agent,
          protocol: target.protocol,
          hostname: target.hostname,
          port: target.port,
          path,
          method: options.method,
          headers: options.body === undefined ? options.headers : { ...options.headers, 'content-length': String(Buffer.byteLength(options.body)) },
          signal: options.signal,
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('error', reject);
          response.on('end', () => {
            const headers = new Headers();
            for (const [name, value] of Object.entries(response.headers)) {
              if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
            }
            resolve({ status: response.statusCode ?? 0, headers, text: Buffer.concat(chunks).toString('utf8') });
          });
        },
      );
      request.on('error', reject);
      request.end(options.body);
    });
  }

  close(): void {
    this.#agent.destroy();
  }
}
