/**
 * `defineWorker`: the definition a worker module exports by default.
 *
 * @module
 */

import { RESERVED_NAMES, type ReservedName } from "../protocol/reserved.ts";

/** What a handler sees as `this`. */
export interface CallContext {
  /** Aborted when the parent cancels the call (or its deadline passes). */
  readonly signal: AbortSignal;
  /** The op being run. */
  readonly op: string;
  /** The request id of the call. */
  readonly id: number;
  /**
   * The pid the parent reports this worker under: in `stats()`, errors,
   * events and the `onStderr` log source. Inside the OS sandbox's pid
   * namespace `process.pid` is not that pid (it is 2, for example); log
   * `this.pid` to match the parent's records. The worker's own pid where
   * the parent has not said (a parent older than message version 5).
   */
  readonly pid: number;
  /**
   * Reports progress without ending the call: the parent's `onProgress`
   * call option receives `value`. Throttled: at most one report every
   * 50 ms goes out, the latest value winning; one held back is sent before
   * the call's answer.
   *
   * @param value Any value that can cross.
   * @throws {TypeError} when a value sent at once cannot cross.
   */
  progress(value: unknown): void;
  /**
   * The W3C trace context of the parent's span for this call, when the
   * parent traces calls (a subscriber to its `airlock:call` tracing channel
   * set one, as the OpenTelemetry example does); `undefined` otherwise.
   * Start the handler's spans as children of it so they join the parent's
   * trace. See docs/observability.md.
   */
  readonly traceContext?: TraceContext | undefined;
}

/** W3C trace context headers ({@linkcode CallContext.traceContext}). */
export interface TraceContext {
  /** `traceparent`: `00-<trace id>-<parent span id>-<flags>`. */
  readonly traceparent: string;
  /** `tracestate`, if the parent had one. */
  readonly tracestate?: string;
}

/** A handler: any function; its arguments and value must be able to cross. */
// deno-lint-ignore no-explicit-any
export type Handler = (this: CallContext, ...args: any[]) => unknown;

/** The handlers a worker serves, by op name. */
export type Handlers = Record<string, Handler>;

/**
 * Refuses reserved handler names in the type: for each handler of `H` whose
 * name is reserved, a property whose type is a message naming it, which no
 * function satisfies, so `defineWorker({ close() {} })` does not
 * type-check. Handlers typed by an index signature (built at run time) are
 * checked when the worker is defined only.
 *
 * @typeParam H The handlers.
 */
export type NoReservedNames<H> = string extends keyof H ? unknown
  : {
    readonly [K in keyof H & ReservedName]?:
      `handler name "${K}" is reserved: rename it`;
  };

export type { ReservedName };

/** Options of {@linkcode defineWorker}. */
export interface DefineWorkerOptions<H extends Handlers = Handlers> {
  /**
   * Ops that are safe to run twice (reads, or writes that are idempotent). A
   * call to one of them that was in flight when its worker crashed is retried
   * on a new worker; any other such call fails with `WorkerCrashedError`.
   *
   * @default {[]}
   */
  idempotent?: readonly (keyof H & string)[];
  /**
   * How many calls this worker runs at once; further calls wait in arrival
   * order.
   *
   * @default {16}
   */
  concurrency?: number;
}

/** The default number of calls a worker runs at once. */
const DEFAULT_WORKER_CONCURRENCY = 16;

export { RESERVED_NAMES };

const DEFINITION = Symbol.for("airlock.workerDefinition");

/** A worker definition: the handlers plus how to serve them. */
export interface WorkerDefinition<H extends Handlers = Handlers> {
  /** The handlers, by op name. */
  readonly handlers: Readonly<H>;
  /** Ops declared safe to run twice. */
  readonly idempotent: readonly string[];
  /** Calls run at once. */
  readonly concurrency: number;
}

/**
 * Defines what a worker process serves. Export the result as the module's
 * default export; the parent imports the module's type only (`import type`),
 * so the client the handlers open never loads in the parent.
 *
 * Open process-level state (database clients, indexes) lazily inside the
 * handlers, not at import time: the module is imported once per worker
 * process. A handler sees a {@linkcode CallContext} as `this`, whose
 * `signal` fires when the parent cancels the call and whose `progress()`
 * reports progress to the parent's `onProgress`.
 *
 * A handler that is an async generator function (or returns an async
 * iterable, or a generator) streams: each value it yields travels to the
 * parent as it comes, never more than the call's window ahead of what the
 * parent consumed. Ending the iteration early in the parent cancels the
 * handler and runs its `finally` blocks. See docs/streaming.md.
 *
 * @typeParam H The handlers. A reserved name among them (`close`, `stream`,
 *   …: {@linkcode RESERVED_NAMES}) fails type-checking, besides the
 *   `TypeError` when the worker is defined.
 * @param handlers The handlers, by op name.
 * @param options Idempotent ops and concurrency.
 * @returns The definition to export by default.
 * @throws {TypeError} when a handler is not a function or its name is reserved (`then`, `call`, `close`, `restart`, `stats`, `pid`, …).
 * @throws {RangeError} when `concurrency` is not a positive integer.
 *
 * @example A streaming handler
 * ```ts
 * import { defineWorker } from "@airlock/airlock/worker";
 * import assert from "node:assert/strict";
 *
 * const definition = defineWorker({
 *   async *count(to: number) {
 *     for (let i = 1; i <= to; i++) yield i;
 *   },
 * });
 * assert.equal(typeof definition.handlers.count, "function");
 * ```
 *
 * @example A worker module
 * ```ts
 * import { defineWorker } from "@airlock/airlock/worker";
 * import assert from "node:assert/strict";
 *
 * const definition = defineWorker({
 *   add(a: number, b: number) {
 *     return a + b;
 *   },
 * }, { idempotent: ["add"] });
 * assert.deepEqual(Object.keys(definition.handlers), ["add"]);
 * // export default definition;
 * ```
 */
export function defineWorker<H extends Handlers & NoReservedNames<H>>(
  handlers: H,
  options: DefineWorkerOptions<H> = {},
): WorkerDefinition<H> {
  if (typeof handlers !== "object" || handlers === null) {
    throw new TypeError(
      `Cannot define worker: handlers must be an object of functions, received ${
        handlers === null ? "null" : typeof handlers
      }`,
    );
  }
  const own: Record<string, Handler> = {};
  for (const name of Object.keys(handlers)) {
    const handler = handlers[name];
    if (RESERVED_NAMES.includes(name)) {
      throw new TypeError(
        `Cannot define worker: handler name "${name}" is reserved (reserved: ${
          RESERVED_NAMES.join(", ")
        })`,
      );
    }
    if (typeof handler !== "function") {
      throw new TypeError(
        `Cannot define worker: handler "${name}" must be a function, received ${typeof handler}`,
      );
    }
    own[name] = handler;
  }
  const concurrency = options.concurrency ?? DEFAULT_WORKER_CONCURRENCY;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
    throw new RangeError(
      `Cannot define worker: concurrency must be a positive integer, received ${
        String(concurrency)
      }`,
    );
  }
  const idempotent = [...(options.idempotent ?? [])];
  for (const op of idempotent) {
    if (!(op in own)) {
      throw new TypeError(
        `Cannot define worker: idempotent op "${op}" is not a handler (handlers: ${
          Object.keys(own).join(", ")
        })`,
      );
    }
  }
  const definition = {
    handlers: Object.freeze(own) as Readonly<H>,
    idempotent: Object.freeze(idempotent),
    concurrency,
  };
  Object.defineProperty(definition, DEFINITION, { value: true });
  return Object.freeze(definition);
}

/**
 * Whether a value is a definition made by {@linkcode defineWorker} (of any
 * copy of airlock).
 *
 * @param value Anything.
 * @returns Whether it is a worker definition.
 */
export function isWorkerDefinition(value: unknown): value is WorkerDefinition {
  return typeof value === "object" && value !== null &&
    (value as Record<symbol, unknown>)[DEFINITION] === true;
}
