/**
 * Signal numbers and names on POSIX systems, for mapping wrapper exit codes
 * (128 + N) back to signal names. Private to src/runtime.
 *
 * @module
 */

import { constants } from "node:os";

const NAMES: Map<number, string> = new Map();
for (const [name, number] of Object.entries(constants.signals)) {
  if (!NAMES.has(number)) NAMES.set(number, name);
}

/**
 * The name of a signal number.
 *
 * @param number The signal number.
 * @returns Its name, e.g. `"SIGKILL"`, or `undefined`.
 */
export function signalName(number: number): string | undefined {
  return NAMES.get(number);
}
