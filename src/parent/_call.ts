/**
 * Call records: a call encoded once (so a retry reuses its frame and id),
 * with a promise that settles exactly once. Private to src/parent.
 *
 * @module
 */

import { WorkerTimeoutError } from "../errors.ts";
import { encodeMessage } from "../protocol/messages.ts";
import { describe } from "../_validate.ts";
import type { CallRecord } from "./connection.ts";
import type { CallKey, CallOptions } from "./options.ts";
import {
  resolveCallOptions,
  type ResolvedCallOptions,
} from "./_resolve_options.ts";
import { CallHandle, DEFAULT_WINDOW } from "./_stream.ts";

let nextId = 1;

/** A call record with its promise and abort wiring. */
export interface PendingCall extends CallRecord {
  /** Settles with the call's outcome. */
  readonly promise: Promise<unknown>;
  /** The caller's signal, if any. */
  readonly signal: AbortSignal | undefined;
  /** The pid of each worker it was written to, in order (one per attempt). */
  readonly pids: number[];
  /** Deadline of the whole call in ms; 0 for none. */
  readonly totalTimeoutMs: number;
  /** The sticky routing key (pools), if any. */
  readonly key: CallKey | undefined;
}

/** What a call record takes from the call's options beyond its deadline. */
export type CallExtras = Pick<
  ResolvedCallOptions,
  "totalTimeoutMs" | "onProgress" | "windowItems" | "windowBytes" | "key"
>;

const NO_EXTRAS: CallExtras = {
  key: undefined,
  totalTimeoutMs: 0,
  onProgress: undefined,
  windowItems: DEFAULT_WINDOW.items,
  windowBytes: DEFAULT_WINDOW.bytes,
};

/**
 * Encodes a call and creates its record. Nothing is written yet.
 *
 * @param op The op.
 * @param args Its arguments.
 * @param timeoutMs Deadline once written (0: none).
 * @param signal The caller's signal.
 * @param idempotent Whether the op may run twice.
 * @param extras Whole-call deadline, progress callback, stream window.
 * @returns The record.
 * @throws {TypeError} when an argument cannot cross, naming where it sits.
 */
export function createCall(
  op: string,
  args: unknown[],
  timeoutMs: number,
  signal: AbortSignal | undefined,
  idempotent: boolean,
  extras: CallExtras = NO_EXTRAS,
): PendingCall {
  if (typeof op !== "string" || op === "") {
    throw new TypeError(
      `Invalid op: expected a non-empty string, received ${describe(op)}`,
    );
  }
  if (!Array.isArray(args)) {
    throw new TypeError(
      `Invalid args of call "${op}": expected an array, received ${
        describe(args)
      }`,
    );
  }
  const id = nextId++;
  const { windowItems, windowBytes } = extras;
  // The window travels only when it is not the protocol's default.
  const chunks = encodeMessage(
    windowItems === DEFAULT_WINDOW.items && windowBytes === DEFAULT_WINDOW.bytes
      ? { type: "call", id, op, args }
      : { type: "call", id, op, args, windowItems, windowBytes },
  );
  let resolve!: (value: unknown) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<unknown>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const record: PendingCall = {
    id,
    op,
    chunks,
    timeoutMs,
    idempotent,
    signal,
    promise,
    attempts: 0,
    pids: [],
    totalTimeoutMs: extras.totalTimeoutMs,
    key: extras.key,
    onProgress: extras.onProgress,
    windowItems,
    windowBytes,
    stream: undefined,
    awaited: false,
    settled: false,
    resolve(value) {
      if (record.settled) return;
      record.settled = true;
      resolve(value);
    },
    reject(error) {
      if (record.settled) return;
      record.settled = true;
      reject(error);
    },
  };
  return record;
}

/**
 * Runs `onAbort` when the call's signal aborts, until the call settles.
 *
 * @param call The call.
 * @param onAbort What to do on abort.
 */
export function onCallAbort(call: PendingCall, onAbort: () => void): void {
  const signal = call.signal;
  if (!signal) return;
  if (signal.aborted) {
    onAbort();
    return;
  }
  signal.addEventListener("abort", onAbort, { once: true });
  const remove = () => signal.removeEventListener("abort", onAbort);
  call.promise.then(remove, remove);
}

/**
 * What a mode returns for a call: the handle that is awaitable and, for a
 * streaming op, async-iterable. Arms the call's whole-call deadline
 * (`totalTimeoutMs`), which ends the call through `abort`.
 *
 * @param call The call.
 * @param settled Settles as the caller should see the call settle.
 * @param abort Ends the call with a reason (out of a queue, or cancelled in
 *   its worker).
 * @param module The worker module, for the timeout error.
 * @returns The handle.
 */
export function callHandle(
  call: PendingCall,
  settled: Promise<unknown>,
  abort: (reason: unknown) => void,
  module: string,
): CallHandle {
  if (call.totalTimeoutMs > 0) armTotalDeadline(call, abort, module);
  return new CallHandle(call, settled, abort);
}

/**
 * Arms a call's whole-call deadline (`totalTimeoutMs`): past it, the call
 * ends through `abort` with a `WorkerTimeoutError`.
 *
 * @param call The call.
 * @param abort Ends the call with a reason.
 * @param module The worker module, for the error.
 */
export function armTotalDeadline(
  call: PendingCall,
  abort: (reason: unknown) => void,
  module: string,
): void {
  const totalMs = call.totalTimeoutMs;
  if (totalMs <= 0 || call.settled) return;
  const startedAt = Date.now();
  const timer = setTimeout(() => {
    abort(
      new WorkerTimeoutError({
        module,
        op: call.op,
        pid: call.pids.at(-1),
        timeoutMs: totalMs,
        elapsedMs: Date.now() - startedAt,
        phase: "call",
      }),
    );
  }, totalMs);
  const clear = () => clearTimeout(timer);
  call.promise.then(clear, clear);
}

/**
 * Checks a call's options against a mode's defaults and creates its record.
 *
 * @param op The op.
 * @param args Its arguments.
 * @param options The call's options.
 * @param defaults The mode's call deadline and idempotent ops.
 * @returns The record.
 * @throws {TypeError} when an option or argument is invalid or cannot cross.
 * @throws {RangeError} when a deadline is out of range.
 */
export function prepareCall(
  op: string,
  args: unknown[],
  options: CallOptions | undefined,
  defaults: { callTimeoutMs: number; idempotent: ReadonlySet<string> },
): PendingCall {
  const resolved = resolveCallOptions(options, defaults.callTimeoutMs);
  return createCall(
    op,
    args,
    resolved.timeoutMs,
    resolved.signal,
    defaults.idempotent.has(op),
    resolved,
  );
}
