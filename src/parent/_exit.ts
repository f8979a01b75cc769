/**
 * How a worker process ended, and the errors that say so: the crash error
 * of a call lost with the process, and the start error of a worker that
 * never became ready. Private to src/parent.
 *
 * @module
 */

import {
  type ProtocolError,
  WorkerCrashedError,
  WorkerStartError,
} from "../errors.ts";
import { accessHint, type HintContext } from "./_hints.ts";

/** How a connection ended. */
export interface ConnectionExit {
  /** The exit code, or `null` when a signal ended it. */
  code: number | null;
  /** The signal name, or `null`. */
  signal: string | null;
  /** Why airlock stopped it, if it did. */
  reason: string | undefined;
  /** Whether the exit was asked for (close, restart, recycle). */
  requested: boolean;
  /** The tail of stderr. */
  stderrTail: string;
  /** The worker's pid. */
  pid: number;
  /** A protocol violation that ended it, if any. */
  protocolError: ProtocolError | undefined;
}

/** A frame the worker began and never finished. */
export interface Truncation {
  /** The length its header announced. */
  expectedBytes: number;
  /** The bytes that arrived. */
  receivedBytes: number;
}

/** What the worker reported before dying during its start. */
export interface StartFatal {
  /** Whether importing the module or checking its definition failed. */
  phase: "import" | "definition";
  /** The error it reported. */
  error: Error;
}

/**
 * Why a process ended, when airlock knows more than the exit status.
 *
 * @param killReason Why airlock killed it, if it did.
 * @param truncated A frame cut short, if any.
 * @param ready Whether the worker had become ready.
 * @returns The reason, or `undefined`.
 */
export function exitReason(
  killReason: string | undefined,
  truncated: Truncation | undefined,
  ready: boolean,
): string | undefined {
  if (killReason !== undefined) return killReason;
  if (truncated && ready) {
    return `exited in the middle of a frame (${truncated.receivedBytes} of ${truncated.expectedBytes} bytes written)`;
  }
  return undefined;
}

/**
 * The crash error for a call lost with a worker process.
 *
 * @param module The worker module (or command).
 * @param call The call: its op, and its attempts and their pids when known.
 * @param exit How the process ended.
 * @returns The error.
 */
export function crashError(
  module: string,
  call: {
    readonly op: string;
    readonly attempts?: number;
    readonly pids?: readonly number[];
  },
  exit: ConnectionExit,
): WorkerCrashedError {
  return new WorkerCrashedError({
    module,
    attempts: call.attempts,
    pids: call.pids,
    pid: exit.pid,
    exitCode: exit.code,
    signal: exit.signal,
    stderrTail: exit.stderrTail,
    op: call.op,
    reason: exit.protocolError
      ? `the worker broke the protocol (${exit.protocolError.message})`
      : exit.reason,
    ...(exit.protocolError ? { cause: exit.protocolError } : {}),
  });
}

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
    detail: `${exit.reason ?? "the process ended before it was ready"}${cut}`,
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
