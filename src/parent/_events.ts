/**
 * The parent's events, published through `node:diagnostics_channel` (Deno
 * and Bun both provide it): worker start, exit and recycle, call retries
 * and timeouts, and the tracing channel `airlock:call` around every call.
 * See docs/observability.md.
 *
 * Nothing is published unless someone subscribes: every helper checks
 * `hasSubscribers` first (Bun's tracing channel has no fast path of its
 * own, so the five channels of `airlock:call` are checked one by one). The
 * module `node:diagnostics_channel` is loaded the first time a helper runs
 * (a worker start or a call, never at import), and the channels are looked
 * up by name, so a subscriber made before or after that sees the same
 * channels. Private to src/parent.
 *
 * @module
 */

import type * as DiagnosticsChannel from "node:diagnostics_channel";
import { diagnosticsChannel } from "../runtime/node_builtins.ts";
import type { SandboxBackend } from "../runtime/sandbox/types.ts";
import type { NetConnectionEvent } from "../runtime/sandbox/net/broker.ts";

export type { NetConnectionEvent };

/**
 * The names of airlock's diagnostics channels (`node:diagnostics_channel`).
 * Nothing is published on a channel without a subscriber. See
 * docs/observability.md.
 *
 * @example Watch workers start
 * ```ts
 * import { session } from "@airlock/airlock";
 * import {
 *   DIAGNOSTICS_CHANNELS,
 *   type WorkerStartEvent,
 * } from "@airlock/airlock/diagnostics";
 * import dc from "node:diagnostics_channel";
 * import assert from "node:assert/strict";
 *
 * const worker = `data:text/typescript,${encodeURIComponent(`
 *   import { defineWorker } from "${import.meta.resolve("@airlock/airlock/worker")}";
 *   export default defineWorker({ ping: () => "pong" });
 * `)}`;
 *
 * const starts: WorkerStartEvent[] = [];
 * const onStart = (message: unknown) => {
 *   starts.push(message as WorkerStartEvent);
 * };
 * dc.subscribe(DIAGNOSTICS_CHANNELS.workerStart, onStart);
 * try {
 *   await using s = await session(worker);
 *   assert.equal(starts.at(-1)?.pid, s.pid);
 *   assert.equal(starts.at(-1)?.mode, "session");
 * } finally {
 *   dc.unsubscribe(DIAGNOSTICS_CHANNELS.workerStart, onStart);
 * }
 * ```
 */
export const DIAGNOSTICS_CHANNELS = {
  /** A worker became ready (its `setup` done): {@linkcode WorkerStartEvent}. */
  workerStart: "airlock:worker:start",
  /** A worker that had started exited: {@linkcode WorkerExitEvent}. */
  workerExit: "airlock:worker:exit",
  /** A worker is replaced, and why: {@linkcode WorkerRecycleEvent}. */
  workerRecycle: "airlock:worker:recycle",
  /** A call lost with its worker runs again: {@linkcode CallRetryEvent}. */
  callRetry: "airlock:call:retry",
  /** A call passed its deadline: {@linkcode CallTimeoutEvent}. */
  callTimeout: "airlock:call:timeout",
  /**
   * The tracing channel around every call (`tracing:airlock:call:start`,
   * `:end`, `:asyncStart`, `:asyncEnd`, `:error`): its context is a
   * {@linkcode CallTraceContext}.
   */
  call: "airlock:call",
  /**
   * A connection a sandboxed worker opened through its `host:port` grants,
   * or the broker's refusal of one, published when it ends:
   * {@linkcode NetConnectionEvent}.
   */
  netConnection: "airlock:net:connection",
} as const;

/** Which kind of handle a worker serves. */
export type WorkerMode = "session" | "pool" | "oneShot";

/** The message of `airlock:worker:start`. */
export interface WorkerStartEvent {
  /** The worker's pid (the real process below any sandbox wrapper). */
  pid: number;
  /** The worker module (or command), as errors name it. */
  module: string;
  /** The kind of handle it serves. */
  mode: WorkerMode;
  /** When it was spawned, in ms since the epoch. */
  startedAt: number;
  /** Milliseconds from spawn to ready, `setup` included. */
  startMs: number;
  /** The runtime the worker reported (e.g. `"deno 2.9.6"`). */
  runtime: string;
  /**
   * The OS sandbox backends that confine it, outermost first (empty:
   * none, e.g. `sandbox: "none"` or a Deno worker under its permission
   * flags alone).
   */
  sandboxes: readonly SandboxBackend[];
}

/** The message of `airlock:worker:exit`. */
export interface WorkerExitEvent {
  /** The worker's pid. */
  pid: number;
  /** The worker module (or command). */
  module: string;
  /** The kind of handle it served. */
  mode: WorkerMode;
  /** Its exit code, or `null` when a signal ended it. */
  exitCode: number | null;
  /** The signal that ended it (e.g. `"SIGKILL"`), or `null`. */
  signal: string | null;
  /**
   * Whether airlock asked it to exit (close, restart, recycle, a spent
   * one-shot process); `false` is a crash.
   */
  requested: boolean;
  /** Why airlock stopped it, when it did (e.g. a call's deadline). */
  reason: string | undefined;
  /** Milliseconds it ran, from spawn to exit. */
  uptimeMs: number;
}

/** Why a worker is replaced. */
export type RecycleCause =
  | "tasks"
  | "memory"
  | "watch"
  | "invalidate"
  | "crash";

/** The message of `airlock:worker:recycle`. */
export interface WorkerRecycleEvent {
  /** The pid of the worker being replaced. */
  pid: number;
  /** The worker module (or command). */
  module: string;
  /** The kind of handle. */
  mode: WorkerMode;
  /**
   * Why: `tasks` (`maxTasksPerWorker`), `memory` (`maxRssBytes`), `watch`
   * (a watched path changed), `invalidate` (`invalidate()`), `crash` (it
   * died and will be replaced).
   */
  cause: RecycleCause;
}

/** The message of `airlock:call:retry`. */
export interface CallRetryEvent {
  /** The op. */
  op: string;
  /** The request id (kept across attempts). */
  id: number;
  /** The worker module (or command). */
  module: string;
  /** The kind of handle. */
  mode: WorkerMode;
  /** The pid of the worker it was lost with. */
  pid: number;
  /** The number of the attempt about to be made (2 for the first retry). */
  attempt: number;
  /** How the lost worker ended: its exit code, or `null`. */
  exitCode: number | null;
  /** How the lost worker ended: its signal, or `null`. */
  signal: string | null;
}

/** The message of `airlock:call:timeout`. */
export interface CallTimeoutEvent {
  /** The op. */
  op: string;
  /** The request id. */
  id: number;
  /** The worker module (or command). */
  module: string;
  /** The kind of handle. */
  mode: WorkerMode;
  /** The pid of the worker running it. */
  pid: number;
  /** The deadline it passed, in ms (`timeoutMs` or `callTimeoutMs`). */
  timeoutMs: number;
}

/**
 * The context object of the tracing channel `airlock:call`: the same object
 * in every event of one call (`start`, `end`, then `asyncStart` and
 * `asyncEnd`, with `error` before them when the call fails). A subscriber
 * to `start` may set `traceparent` (and `tracestate`), W3C trace context
 * headers: the call carries them to the worker, whose handler sees them as
 * `this.traceContext`.
 */
export interface CallTraceContext {
  /** The op. */
  readonly op: string;
  /** The request id (kept across attempts; 0 if the call was refused). */
  id: number;
  /** The worker module (or command). */
  readonly module: string;
  /** The kind of handle. */
  readonly mode: WorkerMode;
  /** The pid of the worker it was last written to; `undefined` before. */
  pid: number | undefined;
  /** Attempts made so far (1 once written; more after retries). */
  attempt: number;
  /**
   * A W3C `traceparent` to carry to the worker (set by a `start`
   * subscriber; sent only if well formed:
   * `00-<32 hex>-<16 hex>-<2 hex>`).
   */
  traceparent?: string;
  /** A W3C `tracestate` to carry with it (512 characters at most). */
  tracestate?: string;
  /**
   * What the call resolved with (in `asyncStart` and `asyncEnd`); for a
   * streaming op, its values in an array when awaited as a whole,
   * `undefined` when iterated.
   */
  result?: unknown;
  /** Why the call failed (in `error`, `asyncStart` and `asyncEnd`). */
  error?: unknown;
}

/** The W3C trace context a call carries to its worker. */
export interface TraceCarrier {
  /** The `traceparent` header. */
  traceparent: string;
  /** The `tracestate` header, if any. */
  tracestate?: string;
}

type Channel = DiagnosticsChannel.Channel;
type TracingChannel = DiagnosticsChannel.TracingChannel<
  object,
  CallTraceContext
>;

interface Channels {
  start: Channel;
  exit: Channel;
  recycle: Channel;
  retry: Channel;
  timeout: Channel;
  call: TracingChannel;
}

let channels: Channels | undefined;

/** The channels, looked up (and the module loaded) on first use. */
function load(): Channels {
  const dc = diagnosticsChannel();
  return {
    start: dc.channel(DIAGNOSTICS_CHANNELS.workerStart),
    exit: dc.channel(DIAGNOSTICS_CHANNELS.workerExit),
    recycle: dc.channel(DIAGNOSTICS_CHANNELS.workerRecycle),
    retry: dc.channel(DIAGNOSTICS_CHANNELS.callRetry),
    timeout: dc.channel(DIAGNOSTICS_CHANNELS.callTimeout),
    call: dc.tracingChannel(DIAGNOSTICS_CHANNELS.call),
  };
}

/**
 * Publishes a worker start, if anyone listens.
 *
 * @param event Builds the message (called only when someone listens).
 */
export function publishStart(event: () => WorkerStartEvent): void {
  const channel = (channels ??= load()).start;
  if (channel.hasSubscribers) channel.publish(event());
}

/**
 * Publishes a worker exit, if anyone listens.
 *
 * @param event Builds the message.
 */
export function publishExit(event: () => WorkerExitEvent): void {
  const channel = (channels ??= load()).exit;
  if (channel.hasSubscribers) channel.publish(event());
}

/**
 * Publishes a recycle, if anyone listens.
 *
 * @param event Builds the message.
 */
export function publishRecycle(event: () => WorkerRecycleEvent): void {
  const channel = (channels ??= load()).recycle;
  if (channel.hasSubscribers) channel.publish(event());
}

/**
 * Publishes a call retry, if anyone listens.
 *
 * @param event Builds the message.
 */
export function publishRetry(event: () => CallRetryEvent): void {
  const channel = (channels ??= load()).retry;
  if (channel.hasSubscribers) channel.publish(event());
}

/**
 * Publishes a call timeout, if anyone listens.
 *
 * @param event Builds the message.
 */
export function publishTimeout(event: () => CallTimeoutEvent): void {
  const channel = (channels ??= load()).timeout;
  if (channel.hasSubscribers) channel.publish(event());
}

/**
 * Starts the trace of a call if anyone subscribes to `airlock:call`:
 * publishes `start` with a new context (a subscriber may set `traceparent`
 * on it).
 *
 * @param op The op.
 * @param mode The kind of handle.
 * @param module The worker module.
 * @returns The context, or `undefined` when nobody listens.
 */
export function traceStart(
  op: string,
  mode: WorkerMode,
  module: string,
): CallTraceContext | undefined {
  const call = (channels ??= load()).call;
  if (
    !call.start.hasSubscribers && !call.end.hasSubscribers &&
    !call.asyncStart.hasSubscribers && !call.asyncEnd.hasSubscribers &&
    !call.error.hasSubscribers
  ) return undefined;
  const context: CallTraceContext = {
    op,
    id: 0,
    module,
    mode,
    pid: undefined,
    attempt: 0,
  };
  call.start.publish(context);
  return context;
}

/**
 * Ends the synchronous part of a traced call (`end`) and publishes its
 * outcome once `promise` settles (`error` on failure, then `asyncStart`
 * and `asyncEnd`), the order of `TracingChannel.tracePromise`.
 *
 * @param context The call's context.
 * @param promise Settles as the call does.
 */
export function traceEnd(
  context: CallTraceContext,
  promise: Promise<unknown>,
): void {
  const call = (channels ??= load()).call;
  call.end.publish(context);
  promise.then(
    (result) => {
      // An iterated stream settles with an internal marker (a symbol, which
      // no handler's value can be): its values went to the iterator.
      context.result = typeof result === "symbol" ? undefined : result;
      call.asyncStart.publish(context);
      call.asyncEnd.publish(context);
    },
    (error: unknown) => {
      context.error = error;
      call.error.publish(context);
      call.asyncStart.publish(context);
      call.asyncEnd.publish(context);
    },
  );
}

/**
 * The trace of a call refused before it ran: `error`, then `end`.
 *
 * @param context The call's context.
 * @param error Why it was refused.
 */
export function traceRefused(context: CallTraceContext, error: unknown): void {
  const call = (channels ??= load()).call;
  context.error = error;
  call.error.publish(context);
  call.end.publish(context);
}

/**
 * Notes an attempt of a traced call: the worker it was written to.
 *
 * @param context The call's context.
 * @param pid The worker's pid.
 * @param attempt The attempt's number (1 for the first).
 */
export function traceAttempt(
  context: CallTraceContext,
  pid: number,
  attempt: number,
): void {
  context.pid = pid;
  context.attempt = attempt;
}

const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
/** Longest `tracestate` carried (W3C: 32 members of at most 256 characters; 512 is the floor a carrier must pass on). */
const TRACESTATE_MAX_CHARS = 512;

/**
 * The trace context a subscriber put on a call's context, if well formed:
 * what the call carries to its worker.
 *
 * @param context The call's context, if traced.
 * @returns The carrier, or `undefined`.
 */
export function traceCarrier(
  context: CallTraceContext | undefined,
): TraceCarrier | undefined {
  if (context === undefined) return undefined;
  const { traceparent, tracestate } = context;
  if (typeof traceparent !== "string" || !TRACEPARENT.test(traceparent)) {
    return undefined;
  }
  return typeof tracestate === "string" && tracestate !== "" &&
      tracestate.length <= TRACESTATE_MAX_CHARS
    ? { traceparent, tracestate }
    : { traceparent };
}
