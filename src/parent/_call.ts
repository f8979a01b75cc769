/**
 * Call records: a call encoded once (so a retry reuses its frame and id),
 * with a promise that settles exactly once. Private to src/parent.
 *
 * @module
 */

import {
  AirlockError,
  type CallExecuted,
  WorkerTimeoutError,
} from "../errors.ts";
import type { CallMessage } from "../protocol/messages.ts";
import { encodeMessage } from "../protocol/encode_message.ts";
import { describe } from "../_validate.ts";
import type { CallKey, CallOptions } from "./options.ts";
import {
  resolveCallOptions,
  type ResolvedCallOptions,
} from "./_resolve_options.ts";
import {
  type CallCanceller,
  CallHandle,
  DEFAULT_WINDOW,
  type StreamableCall,
  type StreamState,
} from "./_stream.ts";
import {
  type CallTraceContext,
  traceAttempt,
  traceCarrier,
} from "./_events.ts";

let nextId = 1;

/**
 * One call on its way through a connection. Owned by a session or pool. A
 * streaming call's values go to its `stream`; its `end` resolves it with
 * `STREAM_END`, or with the values collected when it is `awaited`.
 */
export interface CallRecord extends StreamableCall {
  /** The request id (unique per parent process, so a retry may keep it). */
  readonly id: number;
  /** The op. */
  readonly op: string;
  /** The encoded frame. */
  readonly chunks: Uint8Array[];
  /** Deadline once written, in ms; 0 for none. */
  readonly timeoutMs: number;
  /** Whether the op may run twice. */
  readonly idempotent: boolean;
  /** Times it has been handed to a worker. */
  attempts: number;
  /** Whether its promise has settled. */
  settled: boolean;
  /** Settles the call. */
  resolve(value: unknown): void;
  /** Settles the call. */
  reject(error: unknown): void;
  /**
   * Its deadline in the connection that holds it (ms since the epoch); 0
   * while it has none. Kept by the connection.
   */
  dueAt: number;
  /** When that deadline started counting. Kept by the connection. */
  dueFrom: number;
  /** Its place in the order calls were written to that connection. */
  writtenSeq: number;
  /**
   * Whether its handler may have started, in any attempt: set when it is
   * written to a free slot, when a call written ahead starts, when it is
   * abandoned while written, and when it is lost with a worker that may
   * have started it. Never cleared: it decides `executed` ("maybe" or "no").
   */
  mayHaveRun: boolean;
  /**
   * Whether a timed-out or aborted call rejects only once its handler is
   * no longer running (`settle: "stopped"`).
   */
  readonly settleStopped: boolean;
  /**
   * Whether it must be answered with a value (a `setup` call): `items` for
   * it is a protocol error.
   */
  plain?: boolean;
}

/** A call record with its promise and abort wiring. */
export interface PendingCall extends CallRecord {
  /** Settles with the call's outcome. */
  readonly promise: Promise<unknown>;
  /** The caller's signal, if any. */
  readonly signal: AbortSignal | undefined;
  /** The pid of each worker it was written to, in order (one per attempt). */
  pids: number[];
  /** Deadline of the whole call in ms; 0 for none. */
  readonly totalTimeoutMs: number;
  /** The sticky routing key (pools), if any. */
  readonly key: CallKey | undefined;
  /** Its context on the tracing channel `airlock:call`, when traced. */
  readonly trace: CallTraceContext | undefined;
  /**
   * When it was queued (`performance.now()`), for wait-time metrics: 0 if
   * not measured, `ADMITTED` (-1) while admitted and not queued (see
   * `_metrics.ts`).
   */
  admittedAt: number;
  /** When it was last written to a worker (`performance.now()`); 0 before. */
  sentAt: number;
  /** Told when it settles, if set (before it settles). */
  hook: SettleHook | undefined;
  /** Neighbours in the owner's list of unsettled calls. */
  prevUnsettled: PendingCall | undefined;
  /** Neighbours in the owner's list of unsettled calls. */
  nextUnsettled: PendingCall | undefined;
}

/** What a call record takes from the call's options beyond its deadline. */
export type CallExtras = Pick<
  ResolvedCallOptions,
  | "totalTimeoutMs"
  | "onProgress"
  | "windowItems"
  | "windowBytes"
  | "key"
  | "settleStopped"
>;

const NO_EXTRAS: CallExtras = {
  key: undefined,
  totalTimeoutMs: 0,
  onProgress: undefined,
  windowItems: DEFAULT_WINDOW.items,
  windowBytes: DEFAULT_WINDOW.bytes,
  settleStopped: false,
};

/** Options of {@linkcode createCall}. */
export interface NewCallOptions {
  /** Deadline once written, in ms (0: none). */
  timeoutMs: number;
  /** Whether the op may run twice. */
  idempotent: boolean;
  /** The caller's signal. */
  signal?: AbortSignal | undefined;
  /** Whole-call deadline, progress callback, stream window (default: none). */
  extras?: CallExtras;
  /**
   * Its context on the tracing channel, when traced: the W3C trace context
   * a subscriber set on it travels with the call.
   */
  trace?: CallTraceContext | undefined;
}

/**
 * Encodes a call and creates its record. Nothing is written yet.
 *
 * @param op The op.
 * @param args Its arguments.
 * @param options Its deadline, idempotence, signal, extras and trace.
 * @returns The record.
 * @throws {TypeError} when an argument cannot cross, naming where it sits.
 */
export function createCall(
  op: string,
  args: unknown[],
  options: NewCallOptions,
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
  const extras = options.extras ?? NO_EXTRAS;
  const trace = options.trace;
  const { windowItems, windowBytes } = extras;
  // The window travels only when it is not the protocol's default.
  const message: CallMessage =
    windowItems === DEFAULT_WINDOW.items && windowBytes === DEFAULT_WINDOW.bytes
      ? { type: "call", id, op, args }
      : { type: "call", id, op, args, windowItems, windowBytes };
  if (trace !== undefined) {
    trace.id = id;
    const carried = traceCarrier(trace);
    if (carried !== undefined) message.trace = carried;
  }
  return new Call(
    id,
    op,
    encodeMessage(message),
    options,
    extras,
  );
}

/** What a call tells once it settles (the mode core's counters). */
export interface SettleHook {
  /**
   * The call settled, synchronously as its promise does.
   *
   * @param call The call.
   * @param ok Whether it resolved.
   */
  callSettled(call: PendingCall, ok: boolean): void;
}

/** Where {@linkcode capture} leaves a new promise's resolving functions. */
let capturedResolve: (value: unknown) => void = () => {};
let capturedReject: (error: unknown) => void = () => {};

/** One executor for every call's promise: no closure per call. */
function capture(
  resolve: (value: unknown) => void,
  reject: (error: unknown) => void,
): void {
  capturedResolve = resolve;
  capturedReject = reject;
}

function ignore(): void {}

/** What a `"maybe"` says in words, after the error's first line. */
const MAYBE_WORDS =
  'its handler had started, so its effects may have happened (executed "maybe")';

/**
 * Records on an error that rejects a call whether the call's handler ran
 * (`AirlockError.executed`), once: the first value set stays. A `"maybe"`
 * is also said in the message (and the stack's copy of it), after its
 * first line. Errors that are not airlock's are left alone.
 *
 * @param error The error the call rejects with.
 * @param executed Whether its handler ran.
 */
export function markExecuted(error: unknown, executed: CallExecuted): void {
  if (!(error instanceof AirlockError) || error.executed !== undefined) return;
  Object.defineProperty(error, "executed", {
    value: executed,
    enumerable: true,
    writable: false,
    configurable: true,
  });
  if (executed !== "maybe") return;
  const message = error.message;
  const end = message.indexOf("\n");
  const head = end === -1 ? message : message.slice(0, end);
  const words = `${head}; ${MAYBE_WORDS}`;
  error.message = words + (end === -1 ? "" : message.slice(end));
  if (typeof error.stack === "string") {
    error.stack = error.stack.replace(head, words);
  }
}

/** The pids of a call not written yet: shared, so never pushed to. */
const NO_PIDS = Object.freeze([]) as unknown as number[];

/**
 * A call record: one object per call, its fields in place and its methods
 * on the prototype (a record of a literal with two method closures, an
 * executor closure and a promise reaction cost ~0.8 KiB of garbage per call
 * on Deno at 64 calls in flight).
 */
class Call implements PendingCall {
  readonly id: number;
  readonly op: string;
  readonly chunks: Uint8Array[];
  readonly timeoutMs: number;
  readonly idempotent: boolean;
  readonly signal: AbortSignal | undefined;
  readonly promise: Promise<unknown>;
  attempts = 0;
  pids: number[] = NO_PIDS;
  readonly totalTimeoutMs: number;
  readonly key: CallKey | undefined;
  readonly trace: CallTraceContext | undefined;
  admittedAt = 0;
  sentAt = 0;
  readonly onProgress: ((value: unknown) => void) | undefined;
  readonly windowItems: number;
  readonly windowBytes: number;
  readonly settleStopped: boolean;
  stream: StreamState | undefined = undefined;
  awaited = false;
  settled = false;
  dueAt = 0;
  dueFrom = 0;
  writtenSeq = -1;
  mayHaveRun = false;
  plain = false;
  hook: SettleHook | undefined = undefined;
  prevUnsettled: PendingCall | undefined = undefined;
  nextUnsettled: PendingCall | undefined = undefined;
  #resolve: (value: unknown) => void;
  #reject: (error: unknown) => void;

  constructor(
    id: number,
    op: string,
    chunks: Uint8Array[],
    options: NewCallOptions,
    extras: CallExtras,
  ) {
    this.id = id;
    this.op = op;
    this.chunks = chunks;
    this.timeoutMs = options.timeoutMs;
    this.idempotent = options.idempotent;
    this.signal = options.signal;
    this.totalTimeoutMs = extras.totalTimeoutMs;
    this.key = extras.key;
    this.trace = options.trace;
    this.onProgress = extras.onProgress;
    this.windowItems = extras.windowItems;
    this.windowBytes = extras.windowBytes;
    this.settleStopped = extras.settleStopped;
    this.promise = new Promise<unknown>(capture);
    this.#resolve = capturedResolve;
    this.#reject = capturedReject;
  }

  resolve(value: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.#resolve(value);
    this.hook?.callSettled(this, true);
  }

  reject(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    // Owned by a mode: a call nobody awaits (a handle dropped, a call ended
    // by close()) must not become an unhandled rejection.
    if (this.hook !== undefined) this.promise.catch(ignore);
    markExecuted(error, this.mayHaveRun ? "maybe" : "no");
    this.#reject(error);
    this.hook?.callSettled(this, false);
  }
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
  abort: ((reason: unknown) => void) | CallCanceller,
  module: string,
): CallHandle {
  if (call.totalTimeoutMs > 0) {
    armTotalDeadline(
      call,
      typeof abort === "function"
        ? abort
        : (reason) => abort.cancelCall(call, reason),
      module,
    );
  }
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
 * Notes that a call is being written to a worker: its pid on the call (and
 * on its trace context, when traced), and when.
 *
 * @param call The call.
 * @param pid The worker's pid.
 */
export function noteSent(call: PendingCall, pid: number): void {
  // The first pid makes a list of one (an empty list grown by a push takes
  // room for 17).
  if (call.pids.length === 0) call.pids = [pid];
  else call.pids.push(pid);
  if (call.trace !== undefined) {
    traceAttempt(call.trace, pid, call.attempts + 1);
  }
}

/**
 * Checks a call's options against a mode's defaults and creates its record.
 *
 * @param op The op.
 * @param args Its arguments.
 * @param options The call's options.
 * @param defaults The mode's call deadline and idempotent ops.
 * @param trace Its context on the tracing channel, when traced.
 * @returns The record.
 * @throws {TypeError} when an option or argument is invalid or cannot cross.
 * @throws {RangeError} when a deadline is out of range.
 */
export function prepareCall(
  op: string,
  args: unknown[],
  options: CallOptions | undefined,
  defaults: { callTimeoutMs: number; idempotent: ReadonlySet<string> },
  trace?: CallTraceContext,
): PendingCall {
  const idempotent = defaults.idempotent.has(op);
  if (options === undefined) {
    // No options: the defaults.
    return createCall(op, args, {
      timeoutMs: defaults.callTimeoutMs,
      idempotent,
      trace,
    });
  }
  const resolved = resolveCallOptions(options, defaults.callTimeoutMs);
  return createCall(op, args, {
    timeoutMs: resolved.timeoutMs,
    idempotent,
    signal: resolved.signal,
    extras: resolved,
    trace,
  });
}
