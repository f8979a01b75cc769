/**
 * The one exit mapper of a wrapped worker: wrappers (bubblewrap, ssh,
 * shells, `docker exec`) report a child killed by signal N as exit code
 * 128 + N. Private to src/runtime.
 *
 * @module
 */

import { signalName } from "../_signals.ts";
import type { ExitStatus } from "../types.ts";

/** The highest real-time signal number on Linux (SIGRTMAX): 128 + 64 is the top of the range. */
const MAX_SIGNAL = 64;

/**
 * Maps an exit status through a wrapper that reports a child killed by
 * signal N as exit code 128 + N. Every real signal number (1 to 64) that
 * has a name is mapped, so codes 129 to 192; a worker that itself exits with
 * such a code is indistinguishable. A signal that ended the wrapper itself
 * passes through.
 *
 * @param code The wrapper's exit code.
 * @param signal The signal that ended the wrapper, or `null`.
 * @returns The worker's exit status.
 *
 * @example
 * ```ts
 * import { exitThroughWrapper } from "./exit.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(exitThroughWrapper(137, null), { code: null, signal: "SIGKILL" });
 * assert.deepEqual(exitThroughWrapper(3, null), { code: 3, signal: null });
 * assert.deepEqual(exitThroughWrapper(null, "SIGTERM"), { code: null, signal: "SIGTERM" });
 * ```
 */
export function exitThroughWrapper(
  code: number | null,
  signal: string | null,
): ExitStatus {
  if (
    signal === null && code !== null && code > 128 && code <= 128 + MAX_SIGNAL
  ) {
    const name = signalName(code - 128);
    if (name !== undefined) return { code: null, signal: name };
  }
  return { code, signal };
}

/**
 * An exit status as it is: the mapper of an unwrapped worker.
 *
 * @param code The exit code.
 * @param signal The signal.
 * @returns The same status.
 */
export function exitAsIs(
  code: number | null,
  signal: string | null,
): ExitStatus {
  return { code, signal };
}
