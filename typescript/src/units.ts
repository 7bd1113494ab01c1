/**
 * Durations and money for the run API (`once`, `limit`, `slots`, `budget`, `sleep`...), as the
 * official 0.3.0 client reads them, so one setting means the same thing in both languages.
 *
 * - A duration is seconds (a number) or a string such as `'500ms'`, `'30s'`, `'10m'`, `'2h'`, `'1d'`.
 * - A quota window (`per`) is `'second'`, `'minute'`, `'hour'`, `'day'`, or a duration of whole
 *   seconds from 1 s to 1 day.
 * - An amount is major units: a decimal string (`'0.40'`, exact: no more fraction digits than the
 *   budget's scale) or a number (rounded half up to the scale from its shortest decimal form, so
 *   `0.1 + 0.2` still means 0.30). Minor units are digit strings, computed with integers only.
 */

import { ConfigError } from './errors.js';

export type Duration = number | string;
export type Per = 'second' | 'minute' | 'hour' | 'day' | Duration;
export type Amount = number | string;

const UNIT_SECONDS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };
const PER_SECONDS: Record<string, number> = { second: 1, minute: 60, hour: 3600, day: 86400 };
const DURATION = /^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)\s*$/;
const DECIMAL = /^([0-9]+)(?:\.([0-9]+))?$/;

/** Seconds, as a finite number of 0 or more. */
export function parseDuration(value: Duration, what = 'duration'): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new ConfigError(`${what} must be 0 or more seconds`);
    return value;
  }
  if (typeof value !== 'string') throw new ConfigError(`${what} must be a number of seconds or a string like '30s'`);
  const match = DURATION.exec(value);
  if (match === null) throw new ConfigError(`${what} "${value}" is not a duration; use seconds or a string like '30s', '10m', '2h'`);
  return Number(match[1]) * UNIT_SECONDS[match[2]!]!;
}

/** A quota window in whole seconds (1 to 86400). */
export function parsePer(value: Per): number {
  const seconds = typeof value === 'string' && value in PER_SECONDS ? PER_SECONDS[value]! : parseDuration(value, 'per');
  const whole = Math.round(seconds);
  if (whole < 1 || whole > 86400 || Math.abs(whole - seconds) > 1e-9) {
    throw new ConfigError('per must be a whole number of seconds between 1 second and 1 day');
  }
  return whole;
}

/** Lease seconds for a `lease` option: rounded, and held to what the server accepts (5 to 600). */
export function leaseSeconds(value: Duration | undefined): number {
  const seconds = Math.floor(parseDuration(value ?? 30, 'lease') + 0.5);
  return Math.min(600, Math.max(5, seconds));
}

/** The shortest decimal digits of a non-negative number, without an exponent. */
function plainDecimal(value: number): string {
  const text = String(value);
  if (!/e/i.test(text)) return text;
  const [mantissa, exponentText] = text.split(/e/i) as [string, string];
  const exponent = Number(exponentText);
  const [whole, fraction = ''] = mantissa.split('.') as [string, string?];
  const digits = whole + fraction;
  const point = whole.length + exponent;
  if (point <= 0) return `0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return digits + '0'.repeat(point - digits.length);
  return `${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** Exact minor units (a digit string) of `amount` at `scale` fraction digits. */
export function toMinor(amount: Amount, scale: number, what = 'amount'): string {
  let text: string;
  let roundHalfUp = false;
  if (typeof amount === 'number') {
    if (!Number.isFinite(amount) || amount < 0) throw new ConfigError(`${what} must be a number of 0 or more`);
    text = plainDecimal(amount);
    roundHalfUp = true;
  } else if (typeof amount === 'string') {
    text = amount.trim();
  } else {
    throw new ConfigError(`${what} must be a number or a decimal string`);
  }
  const match = DECIMAL.exec(text);
  if (match === null) throw new ConfigError(`${what} "${String(amount)}" is not a decimal amount`);
  let fraction = (match[2] ?? '').replace(/0+$/, '');
  let carry = 0n;
  if (fraction.length > scale) {
    if (!roundHalfUp) throw new ConfigError(`${what} ${String(amount)} has more than ${scale} decimal places`);
    carry = fraction[scale]! >= '5' ? 1n : 0n;
    fraction = fraction.slice(0, scale);
  }
  const minor = BigInt(match[1]!) * 10n ** BigInt(scale) + BigInt(fraction.padEnd(scale, '0') || '0') + carry;
  return minor.toString();
}
