/**
 * The start error of a worker that ended before it was ready: what it
 * reported, a broken handshake, or how it exited, with the grant a denied
 * access at import needed (_hints.ts). Loaded with the connection, on the
 * first start. Private to src/parent.
 *
 * @module
 */

import { WorkerStartError } from "../errors.ts";
import type { ConnectionExit, StartFatal, Truncation } from "./_exit.ts";
import { accessHint, type HintContext } from "./_hints.ts";

/**
 * The start error for a worker that ended before it was ready.
 *
 * @param module The worker module (or command).
 * @param pid The pid airlock spawned.
 * @param exit How the process ended.
 * @param fatal What the worker reported before dying, if anything.
 * @param truncated A frame cut short, if any.
 * @param grants The worker's grants: a module that failed on a denied
 * access at import gets the hint naming the grant.
 * @returns The error.
 */
export function startError(
  module: string,
  pid: number,
  exit: ConnectionExit,
  fatal: StartFatal | undefined,
  truncated: Truncation | undefined,
  grants?: HintContext,
): WorkerStartError {
  const base = {
    module,
    pid,
    exitCode: exit.code,
    signal: exit.signal,
    stderrTail: exit.stderrTail,
  };
  if (fatal) {
    // The worker's error: read its fields without trusting their types.
    const error = fatal.error;
    const name = text(() => error.name) ?? "Error";
    const message = text(() => error.message) ?? "";
    const hint = grants && accessHint(error, grants);
    return new WorkerStartError({
      ...base,
      failure: fatal.phase,
      detail: fatal.phase === "import"
        ? `the module threw during import: ${name}: ${message}${
          hint ? ` (hint: ${hint})` : ""
        }`
        : `invalid worker definition: ${message}`,
      remoteMessage: message,
      remoteStack: text(() => error.stack),
      cause: error,
    });
  }
  if (exit.protocolError) {
    return new WorkerStartError({
      ...base,
      failure: "handshake",
      detail:
        `it broke the protocol before ready: ${exit.protocolError.message}`,
      cause: exit.protocolError,
    });
  }
  const cut = truncated
    ? ` (a frame was cut short: ${truncated.receivedBytes} of ${truncated.expectedBytes} bytes)`
    : "";
  return new WorkerStartError({
    ...base,
    failure: "exited",
    detail: `${
      exit.limit === undefined
        ? exit.reason ?? "the process ended before it was ready"
        : `it ended at its limit limits.${exit.limit} before it was ready (raise the limit)`
    }${cut}`,
  });
}

/** A field that is a string, or `undefined` (also when reading it throws). */
function text(read: () => unknown): string | undefined {
  try {
    const value = read();
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}
