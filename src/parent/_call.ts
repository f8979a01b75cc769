/**
 * Call records: a call encoded once (so a retry reuses its frame and id),
 * with a promise that settles exactly once. Private to src/parent.
 *
 * @module
 */

import { encodeMessage } from "../protocol/messages.ts";
import type { CallRecord } from "./connection.ts";
import type { CallOptions } from "./options.ts";
import { resolveCallOptions } from "./_resolve_options.ts";

let nextId = 1;

/** A call record with its promise and abort wiring. */
export interface PendingCall extends CallRecord {
  /** Settles with the call's outcome. */
  readonly promise: Promise<unknown>;
  /** The caller's signal, if any. */
  readonly signal: AbortSignal | undefined;
  /** The pid of each worker it was written to, in order (one per attempt). */
  readonly pids: number[];
}

/**
 * Encodes a call and creates its record. Nothing is written yet.
 *
 * @param op The op.
 * @param args Its arguments.
 * @param timeoutMs Deadline once written (0: none).
 * @param signal The caller's signal.
 * @param idempotent Whether the op may run twice.
 * @returns The record.
 * @throws {TypeError} when an argument cannot cross, naming where it sits.
 */
export function createCall(
  op: string,
  args: unknown[],
  timeoutMs: number,
  signal: AbortSignal | undefined,
  idempotent: boolean,
): PendingCall {
  if (typeof op !== "string" || op === "") {
    throw new TypeError(
      `Invalid op: expected a non-empty string, received ${String(op)}`,
    );
  }
  if (!Array.isArray(args)) {
    throw new TypeError(
      `Invalid args of call "${op}": expected an array, received ${typeof args}`,
    );
  }
  const id = nextId++;
  const chunks = encodeMessage({ type: "call", id, op, args });
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
  const { timeoutMs, signal } = resolveCallOptions(
    options,
    defaults.callTimeoutMs,
  );
  return createCall(op, args, timeoutMs, signal, defaults.idempotent.has(op));
}
