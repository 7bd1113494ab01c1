/**
 * Keys for `once()` and queue work: `<name>:<the first 32 hex digits of sha256(canonical JSON)>`,
 * as the official 0.3.0 client makes them, so a Python and a TypeScript caller with the same
 * arguments share one piece of work.
 *
 * Canonical JSON is `JSON.stringify` with object keys sorted (by UTF-16 code units, JavaScript's
 * own order) and no whitespace. Only plain JSON values hash: anything that would hash differently
 * across processes or languages (a function, a symbol, a bigint, `NaN`, a `Map`, a class instance
 * with no `toJSON`) is a `ConfigError`, and the caller names the work with `key` instead.
 */

import { createHash } from 'node:crypto';

import { ConfigError } from './errors.js';

export const NAME_LEN_MAX = 256;

export function canonicalJson(value: unknown, path = '$'): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new ConfigError(`${path} is ${value}, which can't be part of a key; pass key to name this work`);
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map((item, index) => canonicalJson(item === undefined ? null : item, `${path}[${index}]`)).join(',')}]`;
      const withJson = value as { toJSON?: () => unknown };
      if (typeof withJson.toJSON === 'function') return canonicalJson(withJson.toJSON(), path);
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        throw new ConfigError(`${path} is a ${proto?.constructor?.name ?? 'object'}; pass key to name this work`);
      }
      const entries = Object.entries(value as Record<string, unknown>).filter(([, item]) => item !== undefined);
      entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return `{${entries.map(([name, item]) => `${JSON.stringify(name)}:${canonicalJson(item, `${path}.${name}`)}`).join(',')}}`;
    }
    default:
      throw new ConfigError(`${path} is a ${typeof value}; pass key to name this work`);
  }
}

export function hashArgs(args: readonly unknown[]): string {
  return createHash('sha256').update(canonicalJson(args), 'utf8').digest('hex').slice(0, 32);
}

export function checkName(name: unknown, what: string): string {
  if (typeof name !== 'string' || name.length < 1 || name.length > NAME_LEN_MAX) {
    throw new ConfigError(`${what} names are 1 to ${NAME_LEN_MAX} characters`);
  }
  return name;
}

/** The work key of a call: `name:` and the hash of its arguments, or `name:` and `custom(...args)`. */
export function workKey(name: string, args: readonly unknown[], custom?: (...args: any[]) => string): string {
  if (custom !== undefined) {
    const key = custom(...args);
    if (typeof key !== 'string' || key.length < 1 || key.length > 255) throw new ConfigError('key() must return a string of 1 to 255 characters');
    return `${name}:${key}`;
  }
  return `${name}:${hashArgs(args)}`;
}
