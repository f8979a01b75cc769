/**
 * `oneShot`: a fresh worker process per call, so every call sees the disk as
 * it is now. The process is shut down after its one call, and the call
 * settles once it is gone (any lock it held is free).
 *
 * @module
 */

import { detect } from "../runtime/detect.ts";
import {
  type CallRecord,
  type ConnectionEvents,
  type ConnectionExit,
  crashError,
} from "./connection.ts";
import {
  callHandle,
  createCall,
  onCallAbort,
  type PendingCall,
} from "./_call.ts";
import { type CallHandle, refusedCall } from "./_stream.ts";
import { launchWorker } from "./_launch.ts";
import type { CallOptions, OneShotOptions } from "./options.ts";
import {
  resolveCallOptions,
  resolveWorkerOptions,
} from "./_resolve_options.ts";
import {
  withProxy,
  type WorkerApi,
  type WorkerCall,
  type WorkerStream,
} from "./proxy.ts";

/**
 * A one-shot runner: one method per handler of the worker (the typed
 * proxy), plus `call`.
 *
 * @typeParam D The worker module's default export type (`typeof db`).
 */
export type OneShot<D = unknown> = WorkerApi<D> & {
  /**
   * Runs one op in a fresh worker process.
   *
   * @param op The handler's name.
   * @param args Its arguments.
   * @param options A signal and a deadline for this call.
   * @returns What the handler returned.
   */
  call: WorkerCall<D>;
  /**
   * Calls a streaming op by name and iterates its values: the worker sends
   * them as the handler yields them, never more than the call's window
   * ahead of what was taken. `break` (or `return()`, or the signal) ends the
   * stream and runs the generator's `finally` blocks in the worker. See
   * docs/streaming.md.
   *
   * @param op The handler's name.
   * @param args Its arguments.
   * @param options A signal, deadlines, the window, `onProgress`.
   * @returns The values, one by one.
   */
  stream: WorkerStream<D>;
};

/**
 * Creates a runner that starts a fresh worker process for every call, runs
 * `setup` and the call, then shuts the process down. Nothing is spawned
 * until the first call; concurrent calls run in parallel processes. No
 * `close()` is needed.
 *
 * A reply that arrived counts even if the process then dies while exiting
 * (some native clients crash at exit).
 *
 * @typeParam D The worker module's default export type, for the typed proxy.
 * @param module The worker module: a `URL`, a URL string, or a path.
 * @param options Runtime, permissions, environment, deadlines, setup.
 * @returns The runner.
 * @throws {TypeError} when an option is invalid or the module does not exist.
 * @throws {RangeError} when a number option is out of range.
 *
 * @example Every call runs in a fresh process
 * ```ts
 * import { oneShot } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * // The worker module: in an app, a file such as ./workers/counter.ts.
 * const counter = `data:text/typescript,${encodeURIComponent(`
 *   import { defineWorker } from "${import.meta.resolve("@airlock/airlock/worker")}";
 *   let count = 0; // process-level state: new in every process
 *   export default defineWorker({ increment: (by: number) => (count += by) });
 * `)}`;
 *
 * const fresh = oneShot(counter);
 * assert.equal(await fresh.call("increment", [1]), 1);
 * assert.equal(await fresh.call("increment", [1]), 1); // nothing carried over
 * ```
 */
export function oneShot<D = unknown>(
  module: string | URL,
  options: OneShotOptions<NoInfer<D>> = {},
): OneShot<D> {
  const adapter = detect();
  const resolved = resolveWorkerOptions(module, options, adapter);
  const run = (
    op: string,
    args: unknown[],
    callOptions?: CallOptions,
  ): CallHandle => {
    let call: PendingCall;
    let signal: AbortSignal | undefined;
    try {
      const resolvedCall = resolveCallOptions(
        callOptions,
        resolved.callTimeoutMs,
      );
      signal = resolvedCall.signal;
      call = createCall(
        op,
        args,
        resolvedCall.timeoutMs,
        signal,
        false,
        resolvedCall,
      );
      signal?.throwIfAborted();
    } catch (error: unknown) {
      return refusedCall(op, error);
    }
    const events: ConnectionEvents = {
      onLost(calls: CallRecord[], exit: ConnectionExit) {
        for (const lost of calls) {
          lost.reject(crashError(resolved.label, lost, exit));
        }
      },
      onTimeout() {},
    };
    let conn: Awaited<ReturnType<typeof launchWorker>> | undefined;
    let aborted = false;
    const abort = (reason: unknown): void => {
      if (call.settled) return;
      aborted = true;
      if (!conn?.cancel(call, reason)) call.reject(reason);
    };
    onCallAbort(call, () => abort(signal?.reason));
    // Start, call, shut down; the call settles once the process is gone,
    // except on abort, which rejects at once.
    const lifecycle = (async () => {
      try {
        conn = await launchWorker(resolved, adapter, events);
      } catch (error: unknown) {
        call.reject(error);
        return;
      }
      if (!call.settled) {
        call.pids.push(conn.pid);
        conn.send(call);
      }
      await call.promise.catch(() => {});
      await conn.shutdown(resolved.closeGraceMs);
    })();
    // A stream's end, too, reaches the caller once the process is gone.
    const settled = call.promise.then(
      async (value) => {
        await lifecycle;
        return value;
      },
      async (error: unknown) => {
        if (!aborted) await lifecycle;
        throw error;
      },
    );
    return callHandle(call, settled, abort, resolved.label);
  };
  const call = (op: string, args: unknown[], callOptions?: CallOptions) =>
    run(op, args, callOptions);
  const handle = {
    call: call as WorkerCall<D>,
    stream: call as WorkerStream<D>,
  };
  return withProxy<typeof handle, D>(handle, call);
}
