/**
 * Requests to their partition's leader: the client's view of a cluster (`GET /v1/cluster`), as the
 * Python SDK's `runstate._cluster` has it.
 *
 * A cluster spreads spaces over partitions (`1 + CRC-32(space id) mod partitions`; partition 0 for
 * what belongs to no space), each led by one node. Any node answers any request: one that does not
 * lead the request's partition passes it on to the leader and passes the answer back, with
 * `x-runstate-forwarded-by` naming itself. That costs a hop, so the client learns the map and sends
 * each request of a space to its partition's leader itself:
 *
 * - it starts with the configured URL only, and reads the map (with the caller's key) the first
 *   time an answer says it was passed on: a single node never passes anything on, so there nothing
 *   changes at all;
 * - a request of a space goes to the leader the map names for its partition; anything else (no
 *   space, a partition without a leader in the map, a leader at the configured URL) goes to the
 *   configured URL;
 * - when a leader cannot be reached, or answers 503, the request is sent again at once to the
 *   configured URL, whose node passes it on to whoever leads now (the request's idempotency key
 *   makes that safe), and the map is read again; a node that could not be reached is left alone
 *   for `NODE_DOWN_MS`. The map is read again too when an answer was passed on although the map
 *   sent it to the leader (the map is a moment old); no more than once every `REFRESH_MIN_MS`.
 */

import { warn } from './warnings.js';

export const FORWARDED_BY = 'x-runstate-forwarded-by';
/** The map is read again at most this often. */
export const REFRESH_MIN_MS = 1000;
/** A node that could not be reached is sent nothing for this long (its requests go through the configured URL). */
export const NODE_DOWN_MS = 2000;
const SPACES = '/v1/spaces/';

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n += 1) {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 (the zlib one) of `bytes`. */
export function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** The partition that holds `spaceId` in a cluster of `partitions` data partitions (the server's `actors/layout.py`). */
export function partitionOf(spaceId: string, partitions: number): number {
  return 1 + (crc32(new TextEncoder().encode(spaceId)) % partitions);
}

export class ClusterMap {
  readonly baseUrl: string;
  /** How many times the map was read (for tests). */
  learned = 0;
  #partitions = 0;
  #leaders = new Map<number, string>();
  #down = new Map<string, number>();
  #learnedAt = -Infinity;
  #learning = false;
  readonly #read: () => Promise<unknown>;
  readonly #now: () => number;

  /** `read()` answers the map's document (`GET /v1/cluster` at the configured URL), or throws. */
  constructor(baseUrl: string, read: () => Promise<unknown>, now: () => number = () => performance.now()) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.#read = read;
    this.#now = now;
  }

  /** The URL of the node to send `path` to, when the map names one other than the configured URL. */
  leaderUrl(path: string): string | null {
    if (this.#leaders.size === 0 || !path.startsWith(SPACES)) return null;
    const segment = path.slice(SPACES.length).split('/', 1)[0]!.split('?', 1)[0]!;
    let space: string;
    try {
      space = decodeURIComponent(segment);
    } catch {
      return null;
    }
    const url = this.#leaders.get(partitionOf(space, this.#partitions));
    if (url === undefined || url === this.baseUrl) return null;
    const until = this.#down.get(url);
    if (until !== undefined) {
      if (this.#now() < until) return null;
      this.#down.delete(url);
    }
    return url;
  }

  /** `url` could not be reached (or stopped leading): left alone for a while, the map read again. */
  nodeDown(url: string): void {
    this.#down.set(url, this.#now() + NODE_DOWN_MS);
    this.learnSoon();
  }

  /** Read the map in the background, unless it was read less than `REFRESH_MIN_MS` ago. */
  learnSoon(): void {
    const now = this.#now();
    if (this.#learning || now - this.#learnedAt < REFRESH_MIN_MS) return;
    this.#learning = true;
    this.#learnedAt = now;
    void this.#learn();
  }

  /** Resolves once a read of the map under way (if any) is over (for tests). */
  async settled(): Promise<void> {
    while (this.#learning) await new Promise((resolve) => setTimeout(resolve, 1));
  }

  async #learn(): Promise<void> {
    try {
      this.#take(await this.#read());
    } catch (err) {
      // The map known so far is kept: requests still reach a node that passes them on.
      warn('RUNSTATE_CLUSTER_MAP', `could not read the cluster map from ${this.baseUrl}: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      this.#learning = false;
      this.learned += 1;
    }
  }

  #take(document: any): void {
    if (document === null || typeof document !== 'object' || document.cluster === null || document.cluster === undefined || document.layout !== 'crc32') {
      this.#partitions = 0; // one node: everything goes to it
      this.#leaders = new Map();
      return;
    }
    const leaders = new Map<number, string>();
    for (const entry of document.map ?? []) {
      const url = entry?.leader?.url;
      if (typeof url === 'string' && url !== '') leaders.set(Number(entry.partition), url.replace(/\/+$/, ''));
    }
    const partitions = Number(document.partitions);
    if (!Number.isInteger(partitions) || partitions < 1) throw new Error(`the map names ${String(document.partitions)} partitions`);
    this.#partitions = partitions;
    this.#leaders = leaders;
  }
}
