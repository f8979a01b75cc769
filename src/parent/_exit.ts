/**
 * How a worker process ended, and the crash error of a call lost with the
 * process (the start error of a worker that never became ready, which names
 * the grant a denied access at import needed, is in _start_error.ts: it
 * loads with the connection, on the first start). Private to src/parent.
 *
 * @module
 */

import {
  type LimitBreach,
  type ProtocolError,
  WorkerCrashedError,
} from "../errors.ts";

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
  /** The limit at which the kernel ended it, if one did (see `limits`). */
  limit: LimitBreach | undefined;
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
    limit: exit.limit,
    ...(exit.protocolError ? { cause: exit.protocolError } : {}),
  });
}
