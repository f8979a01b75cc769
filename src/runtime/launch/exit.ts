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

/** What a wrapper prints when it, not the worker, failed. */
const WRAPPER_FAILURES: readonly RegExp[] = [
  // bubblewrap's own errors: a mount, a namespace, the exec of the command.
  /^bwrap: /m,
  // setpriv could not exec the command.
  /^setpriv: /m,
  // The Landlock confine step (exit code 126, "airlock confine: …").
  /^airlock confine: /m,
  // The limits step (exit code 126, "airlock limits: …") and its prlimit.
  /^airlock limits: /m,
  /^prlimit: /m,
];

/**
 * Whether a worker that exited before it was ready was stopped by one of
 * its wrappers (bubblewrap, setpriv, the Landlock step) rather than by its
 * own code: such a start fails the same way every time, so it is not
 * retried. Recognised by the wrapper's own prefix on stderr.
 *
 * @param stderrTail The tail of the process's stderr.
 * @returns The wrapper's message line, or `undefined`.
 *
 * @example
 * ```ts
 * import { wrapperFailure } from "./exit.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   wrapperFailure("bwrap: execvp /opt/bun: No such file or directory\n"),
 *   "bwrap: execvp /opt/bun: No such file or directory",
 * );
 * assert.equal(wrapperFailure("Error: boom\n"), undefined);
 * ```
 */
export function wrapperFailure(stderrTail: string): string | undefined {
  for (const pattern of WRAPPER_FAILURES) {
    const match = pattern.exec(stderrTail);
    if (match) {
      const end = stderrTail.indexOf("\n", match.index);
      return stderrTail.slice(match.index, end === -1 ? undefined : end);
    }
  }
  return undefined;
}
