/** What every handle of one client shares: the request layer, the space, the worker identity, what it holds. */

import { Renewals } from './renewals.js';
import type { CallOptions, Method, Reply, Requester } from './request.js';

export interface Stoppable {
  /** Stop background work at once (the client is closing). */
  abandon(reason: Error): void;
}

/** What one client holds, shared by all its views (`withSpace`, `withHolder`): closing the client
 * stops it all at once. */
export class Holdings {
  /** Leases whose renewal is running; the client stops them all on close. */
  readonly live = new Set<Stoppable>();
  /** Every lease the client keeps alive, renewed together (`renewals.ts`). */
  readonly renewals = new Renewals();
}

export interface ContextCallOptions extends CallOptions {
  /** A command of the space that may go out in a batch with other calls of this client made at
   * the same time (`batch.ts`); it never waits on the server (no `waitMs`, no query). */
  batch?: boolean;
}

export class Context {
  readonly requester: Requester;
  readonly spaceId: string;
  readonly holder: string;
  readonly session: string;
  readonly holdings: Holdings;

  constructor(requester: Requester, spaceId: string, holder: string, session: string, holdings: Holdings) {
    this.requester = requester;
    this.spaceId = spaceId;
    this.holder = holder;
    this.session = session;
    this.holdings = holdings;
  }

  /** Leases whose renewal is running; the client stops them all on close. Shared by views. */
  get live(): Set<Stoppable> {
    return this.holdings.live;
  }

  forSpace(spaceId: string): Context {
    return new Context(this.requester, spaceId, this.holder, this.session, this.holdings);
  }

  forHolder(holder: string, session: string): Context {
    return new Context(this.requester, this.spaceId, holder, session, this.holdings);
  }

  /** `/v1/spaces/{space}` + suffix. Ids go in as they are: the wire contract encodes none but claim keys. */
  path(suffix: string): string {
    return `/v1/spaces/${this.spaceId}${suffix}`;
  }

  call(method: Method, suffix: string, options: ContextCallOptions = {}): Promise<Reply> {
    try {
      return this.#send(method, suffix, options);
    } catch (err) {
      return Promise.reject(err); // a body refused before sending (`compactBody`): a rejection, as any refusal
    }
  }

  #send(method: Method, suffix: string, options: ContextCallOptions): Promise<Reply> {
    const coalescer = this.requester.coalescer;
    const { batch = false, ...rest } = options;
    if (batch && coalescer !== null && !rest.waitMs && (rest.query === undefined || Object.keys(rest.query).length === 0)) {
      return coalescer.call(this.path(''), method, suffix, rest.body, rest.idempotencyKey, rest.signal);
    }
    return this.requester.call(method, this.path(suffix), rest);
  }
}
