/** What every handle of one client shares: the request layer, the space, the worker identity. */

import type { CallOptions, Method, Reply, Requester } from './request.js';

export interface Stoppable {
  /** Stop background work at once (the client is closing). */
  abandon(reason: Error): void;
}

export class Context {
  readonly requester: Requester;
  readonly spaceId: string;
  readonly holder: string;
  readonly session: string;
  /** Leases whose renewal is running; the client stops them all on close. Shared by space views. */
  readonly live: Set<Stoppable>;

  constructor(requester: Requester, spaceId: string, holder: string, session: string, live: Set<Stoppable>) {
    this.requester = requester;
    this.spaceId = spaceId;
    this.holder = holder;
    this.session = session;
    this.live = live;
  }

  forSpace(spaceId: string): Context {
    return new Context(this.requester, spaceId, this.holder, this.session, this.live);
  }

  /** `/v1/spaces/{space}` + suffix. Ids go in as they are: the wire contract encodes none but claim keys. */
  call(method: Method, suffix: string, options?: CallOptions): Promise<Reply> {
    return this.requester.call(method, `/v1/spaces/${this.spaceId}${suffix}`, options);
  }
}
