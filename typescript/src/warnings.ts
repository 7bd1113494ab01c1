/**
 * Warnings the SDK gives where it cannot throw: a background loop that had to give up on
 * something, or an outage it is waiting out. They are Node process warnings of type
 * `RunstateWarning` (printed on stderr by default; `process.on('warning', ...)` receives them, and
 * `--no-warnings` silences them), each with a `RUNSTATE_*` code to filter on.
 */

export const WARNING_TYPE = 'RunstateWarning';

export function warn(code: string, message: string): void {
  process.emitWarning(message, { type: WARNING_TYPE, code });
}
