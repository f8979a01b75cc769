/**
 * Signal numbers and names on POSIX systems, for mapping wrapper exit codes
 * (128 + N) back to signal names. Private to src/runtime.
 *
 * @module
 */

import { process, signalConstants } from "./node_builtins.ts";

/** Built on first use: node:os is loaded only when a signal is named. */
let names: Map<number, string> | undefined;

function buildNames(): Map<number, string> {
  const found: Map<number, string> = new Map();
  for (const [name, number] of Object.entries(signalConstants())) {
    if (!found.has(number)) found.set(number, name);
  }
  // Linux's real-time signals (34 to 64), which node:os does not list, named
  // as the kernel's tools do: SIGRTMIN, SIGRTMIN+1 … SIGRTMAX-1, SIGRTMAX.
  if (process.platform === "linux") {
    const min = 34;
    const max = 64;
    for (let number = min; number <= max; number++) {
      if (found.has(number)) continue;
      const name = number === min
        ? "SIGRTMIN"
        : number === max
        ? "SIGRTMAX"
        : number - min <= 15
        ? `SIGRTMIN+${number - min}`
        : `SIGRTMAX-${max - number}`;
      found.set(number, name);
    }
  }
  return found;
}

/**
 * The name of a signal number.
 *
 * @param number The signal number.
 * @returns Its name, e.g. `"SIGKILL"`, or `undefined`.
 */
export function signalName(number: number): string | undefined {
  names ??= buildNames();
  return names.get(number);
}
