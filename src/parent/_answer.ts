/**
 * Settling a call with its worker's answer, totally: whatever the worker
 * sent, the call settles (a hostile error value becomes a `RemoteError`
 * saying so, and should even that fail, a `ProtocolError`). Private to
 * src/parent.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";
import type {
  EndMessage,
  ErrorMessage,
  ResultMessage,
} from "../protocol/messages.ts";
import type { ResolvedPermissions } from "../runtime/permissions.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import { type CallRecord, markExecuted } from "./_call.ts";
import type { HintContext } from "./_hints.ts";
import { describeValue, toRemoteError } from "./_remote_error.ts";
import { STREAM_END } from "./_stream.ts";

/** The worker an answer came from, for the errors it becomes. */
export interface AnsweringWorker {
  /** The worker module (or command). */
  readonly module: string;
  /** Its pid. */
  pid(): number;
  /** What access hints of its errors are computed from, if anything. */
  hints(): HintContext | undefined;
}

/**
 * Settles a call with its answer.
 *
 * @param call The call, out of its connection's table.
 * @param message The answer.
 * @param worker Who answered.
 */
export function settleWithAnswer(
  call: CallRecord,
  message: ResultMessage | ErrorMessage | EndMessage,
  worker: AnsweringWorker,
): void {
  try {
    if (message.type === "result") {
      call.resolve(message.value);
    } else if (message.type === "end") {
      // Awaited as a whole: the values it collected; iterated: the end.
      call.resolve(call.awaited ? call.stream?.collect() ?? [] : STREAM_END);
    } else {
      const error = toRemoteError(message.error, {
        module: worker.module,
        op: call.op,
        pid: worker.pid(),
      }, worker.hints());
      // The handler threw: it ran to its end.
      markExecuted(error, "yes");
      call.reject(error);
    }
  } catch (error: unknown) {
    const failure = new ProtocolError(
      `Cannot settle call "${call.op}" (id ${call.id}) with the answer of the worker: ${
        describeValue(error)
      }`,
      { module: worker.module, cause: error },
    );
    // Answered: the handler ran to its end.
    markExecuted(failure, "yes");
    call.reject(failure);
  }
}

/**
 * What access hints are computed from, when the owner gave the grants.
 *
 * @param grants The worker's grants and working directory, if known.
 * @param sandboxed Whether an OS sandbox confines it.
 * @param adapter Tells whether a path exists for the parent.
 * @returns The context, or `undefined` without grants.
 */
export function hintContext(
  grants: { permissions: ResolvedPermissions; cwd: string } | undefined,
  sandboxed: boolean,
  adapter: RuntimeAdapter,
): HintContext | undefined {
  if (grants === undefined) return undefined;
  return {
    permissions: grants.permissions,
    cwd: grants.cwd,
    sandboxed,
    exists(path) {
      const identity = adapter.pathIdentity(path);
      return identity === "?" ? undefined : identity !== "-";
    },
  };
}
