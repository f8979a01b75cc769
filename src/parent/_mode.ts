/**
 * The core every mode shares: call admission (closed check, option check,
 * counters, abort wiring), the retry-or-reject decision for calls lost with
 * a worker, abort of queued and running calls, the start-failure handler,
 * the crash and recycle counters, and `close()` with its `force` and
 * `closeTimeoutMs`. `session` and `pool` extend it with how they place calls
 * on workers. Private to src/parent.
 *
 * @module
 */

import { SessionClosedError } from "../errors.ts";
import { isRunning } from "../runtime/proc.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { Connection } from "./connection.ts";
import type { ConnectionExit } from "./_exit.ts";
import { crashError } from "./_exit.ts";
import {
  armTotalDeadline,
  callHandle,
  type CallRecord,
  markExecuted,
  noteSent,
  onCallAbort,
  type PendingCall,
  prepareCall,
  type SettleHook,
} from "./_call.ts";
import {
  type CallCanceller,
  type CallHandle,
  refusedCall,
  type StreamableCall,
} from "./_stream.ts";
import type {
  CallOptions,
  CloseOptions,
  ResolvedWorkerOptions,
} from "./options.ts";
import { resolveCloseOptions } from "./_resolve_options.ts";
import type { CallMetricsStats, CallStats, RecycleCounts } from "./stats.ts";
import {
  publishRecycle,
  publishRetry,
  publishTimeout,
  type RecycleCause,
  traceEnd,
  traceRefused,
  traceStart,
} from "./_events.ts";
import { CallMetrics } from "./_metrics.ts";

/** Which kind of handle a core serves (also `SessionClosedError.kind`). */
export type ModeKind = "session" | "pool" | "oneShot";

/** Why `close()` ended calls instead of letting them finish. */
export const FORCED_REASON = "closed with force";

/**
 * How long `close()` waits, after a worker's spawned process exited, for
 * the worker's own process to be gone too. Inside a sandbox the worker is
 * not the spawned process: killing the wrapper ends it (die-with-parent, its
 * pid namespace) moments later, and no event reports that.
 */
const GONE_LIMIT_MS = 2_000;
/** How often that wait looks (one read of /proc). */
const GONE_POLL_MS = 5;

/**
 * Settles once a worker's process is gone: its connection closed, and its
 * own process (which a sandbox wrapper may outlive by moments) no longer
 * running, within {@linkcode GONE_LIMIT_MS}. Remote workers are done when
 * their connection closes.
 *
 * @param conn The worker.
 * @param options The resolved options (for `launcher`).
 * @returns A promise.
 */
export async function workerGone(
  conn: Connection,
  options: ResolvedWorkerOptions,
): Promise<void> {
  await conn.closed;
  // A worker behind a launcher runs elsewhere: its pid means nothing here.
  if (options.launcher !== undefined) return;
  const until = Date.now() + GONE_LIMIT_MS;
  while (isRunning(conn.pid) && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, GONE_POLL_MS));
  }
}

/**
 * The shared part of a session or pool. Subclasses place admitted calls on
 * workers ({@linkcode ModeCore.admit}), list their live connections, and
 * drain and stop their workers on close.
 */
export abstract class ModeCore implements SettleHook, CallCanceller {
  /** What kind of handle this is, for errors. */
  readonly kind: ModeKind;
  /** The resolved options. */
  readonly options: ResolvedWorkerOptions;
  /** The parent's runtime. */
  readonly adapter: RuntimeAdapter;
  /** Calls waiting for a worker, in order. */
  protected queue: PendingCall[] = [];
  /** Set once `close()` was called: the drain-and-stop in progress. */
  protected closing: Promise<void> | undefined;
  /** Whether `close()` ended calls instead of draining them. */
  protected forced = false;
  /** Call and crash counters. */
  protected readonly counters: CallStats = {
    calls: 0,
    completed: 0,
    failed: 0,
    crashed: 0,
    timeouts: 0,
  };
  /** Workers replaced, by cause. */
  protected readonly recycled: RecycleCounts = {
    tasks: 0,
    memory: 0,
    watch: 0,
    invalidate: 0,
    crash: 0,
  };
  /**
   * Ops the workers declare idempotent in `defineWorker`, learned from each
   * worker's hello: a lost call is judged by what its module declared, not
   * by whichever worker happens to be current when the loss is reported.
   */
  readonly #declaredIdempotent = new Set<string>();
  /**
   * Admitted calls not yet settled (so `force` can end them): a list linked
   * through the calls themselves, no collection to grow and shrink per call.
   */
  #unsettled: PendingCall | undefined;
  /** Wait and run time summaries and utilization. */
  protected readonly metrics: CallMetrics = new CallMetrics();
  /** Calls ended by their signal, whole-call deadline or handle. */
  readonly #aborted = new WeakSet<PendingCall>();

  /**
   * Creates the shared core.
   *
   * @param kind The kind of handle.
   * @param options The resolved options.
   * @param adapter The parent's runtime.
   */
  constructor(
    kind: ModeKind,
    options: ResolvedWorkerOptions,
    adapter: RuntimeAdapter,
  ) {
    this.kind = kind;
    this.options = options;
    this.adapter = adapter;
  }

  /**
   * Places an admitted, unsettled call: runs it or queues it.
   *
   * @param call The call.
   */
  protected abstract admit(call: PendingCall): void;

  /**
   * The connections that may be running calls now.
   *
   * @returns The connections.
   */
  protected abstract connections(): Iterable<Connection>;

  /**
   * Drains admitted calls (unless forced meanwhile) and stops every worker;
   * settles once their processes are gone.
   *
   * @returns A promise.
   */
  protected abstract drainAndStop(): Promise<void>;

  /**
   * Refuses a call at once, before it is admitted (e.g. a full pool queue).
   *
   * @param _op The op.
   * @returns The error to reject with, or `undefined` to admit the call.
   */
  protected refuse(_op: string): Error | undefined {
    return undefined;
  }

  /** Called when a call left the queue without running (abort, close). */
  protected queueChanged(): void {}

  /**
   * Whether calls lost with a worker may be retried now.
   *
   * @returns Whether to retry.
   */
  protected canRetry(): boolean {
    return !this.forced;
  }

  /**
   * The error of a call refused or ended because the handle is closed.
   *
   * @param op The op, if any.
   * @returns The error.
   */
  closedError(op?: string): SessionClosedError {
    return new SessionClosedError({
      module: this.options.label,
      op,
      kind: this.kind,
    });
  }

  /**
   * Admits a call: refuses it when closed, checks its options, counts it,
   * wires its signal, and hands it to {@linkcode ModeCore.admit}.
   *
   * @param op The op.
   * @param args Its arguments.
   * @param options The call's options.
   * @returns The call, or why it was refused.
   */
  #admitCall(
    op: string,
    args: unknown[],
    options: CallOptions | undefined,
  ): PendingCall | { refused: unknown } {
    const trace = traceStart(op, this.kind, this.options.label);
    let call: PendingCall;
    try {
      if (this.closing) throw this.closedError(op);
      const refused = this.refuse(op);
      if (refused) throw refused;
      call = prepareCall(op, args, options, this.options, trace);
    } catch (error: unknown) {
      if (trace) traceRefused(trace, error);
      markExecuted(error, "no");
      return { refused: error };
    }
    this.counters.calls++;
    const first = this.#unsettled;
    call.nextUnsettled = first;
    if (first !== undefined) first.prevUnsettled = call;
    this.#unsettled = call;
    this.metrics.admitted(call);
    // Counted as it settles, with no promise reaction per call; a rejected
    // call is marked handled there (see `_call.ts`).
    call.hook = this;
    if (trace) traceEnd(trace, call.promise);
    onCallAbort(call, () => this.#abort(call, call.signal?.reason));
    return call;
  }

  /**
   * `call()`: a promise of what the handler returned (a streaming op: all
   * its values in an array).
   *
   * @param op The op.
   * @param args Its arguments.
   * @param options The call's options.
   * @returns What the handler returned.
   */
  call(op: string, args: unknown[], options?: CallOptions): Promise<unknown> {
    const call = this.#admitCall(op, args, options);
    if ("refused" in call) return Promise.reject(call.refused);
    // Awaited as a whole from the start: a native promise, no handle.
    call.awaited = true;
    if (call.totalTimeoutMs > 0) {
      armTotalDeadline(
        call,
        (reason) => this.#abort(call, reason),
        this.options.label,
      );
    }
    if (!call.settled) this.admit(call);
    this.metrics.placed(call);
    return this.settledOf(call);
  }

  /**
   * The promise the caller sees settle for an admitted call: the call's own
   * (a one-shot runner waits for the call's process to be gone too).
   *
   * @param call The call, admitted.
   * @returns The promise.
   */
  protected settledOf(call: PendingCall): Promise<unknown> {
    return call.promise;
  }

  /**
   * Whether a call was ended by its signal, its whole-call deadline or its
   * handle (rather than settled by its worker or by close).
   *
   * @param call The call.
   * @returns Whether it was aborted.
   */
  protected aborted(call: PendingCall): boolean {
    return this.#aborted.has(call);
  }

  /**
   * The typed proxy's methods and `stream()`: a handle that is awaitable
   * and, for a streaming op, async-iterable.
   *
   * @param op The op.
   * @param args Its arguments.
   * @param options The call's options.
   * @returns The handle.
   */
  handle(op: string, args: unknown[], options?: CallOptions): CallHandle {
    const call = this.#admitCall(op, args, options);
    if ("refused" in call) return refusedCall(op, call.refused);
    if (!call.settled) this.admit(call);
    const handle = callHandle(
      call,
      this.settledOf(call),
      this,
      this.options.label,
    );
    this.metrics.placed(call);
    return handle;
  }

  /**
   * A call admitted here settled: counts it and takes it off the list of
   * unsettled calls.
   *
   * @param call The call.
   * @param ok Whether it resolved.
   */
  callSettled(call: PendingCall, ok: boolean): void {
    if (ok) this.counters.completed++;
    else this.counters.failed++;
    const prev = call.prevUnsettled;
    const next = call.nextUnsettled;
    if (prev !== undefined) prev.nextUnsettled = next;
    else if (this.#unsettled === call) this.#unsettled = next;
    if (next !== undefined) next.prevUnsettled = prev;
    call.prevUnsettled = undefined;
    call.nextUnsettled = undefined;
    this.metrics.settled(call);
  }

  /**
   * Ends a call of this core early (its handle's iteration ended, or its
   * whole-call deadline passed).
   *
   * @param call The call.
   * @param reason Why.
   */
  cancelCall(call: StreamableCall, reason: unknown): void {
    this.#abort(call as PendingCall, reason);
  }

  /** Aborts a call: out of the queue, or cancelled in its worker. */
  #abort(call: PendingCall, reason: unknown): void {
    if (call.settled) return;
    this.#aborted.add(call);
    const index = this.queue.indexOf(call);
    if (index !== -1) {
      // Queued: removed without touching any worker.
      this.queue.splice(index, 1);
      call.reject(reason);
      this.queueChanged();
      return;
    }
    for (const conn of this.connections()) {
      if (conn.cancel(call, reason)) return;
    }
    call.reject(reason);
  }

  /**
   * Writes a call to a worker, recording the worker's pid on the call.
   *
   * @param conn The worker.
   * @param call The call.
   */
  protected send(conn: Connection, call: PendingCall): void {
    noteSent(call, conn.pid);
    // A call written ahead waits in the worker's queue: its wait goes on
    // until it starts (onStarted).
    if (conn.send(call)) this.metrics.sending(call);
  }

  /**
   * A call written ahead to a worker starts: its wait ends, its run begins.
   *
   * @param call The call.
   */
  onStarted(call: CallRecord): void {
    this.metrics.sending(call as PendingCall);
  }

  /**
   * Learns what a newly ready worker declares.
   *
   * @param conn The worker.
   */
  protected adopted(conn: Connection): void {
    for (const op of conn.hello?.idempotent ?? []) {
      this.#declaredIdempotent.add(op);
    }
  }

  /**
   * Counts a worker's exit.
   *
   * @param exit How it ended.
   */
  protected exited(exit: ConnectionExit): void {
    if (exit.requested) return;
    this.counters.crashed++;
    this.recycle("crash", exit.pid);
  }

  /**
   * Counts a worker replaced for `cause` and publishes it.
   *
   * @param cause Why.
   * @param pid The worker being replaced.
   */
  protected recycle(cause: RecycleCause, pid: number): void {
    this.recycled[cause]++;
    publishRecycle(() => ({
      pid,
      module: this.options.label,
      mode: this.kind,
      cause,
    }));
  }

  /**
   * Decides the fate of calls lost with a worker: a call the worker never
   * started (written ahead, still in its queue) goes back to the queue
   * whatever its op; a call to an idempotent op with attempts left is
   * returned for a retry; any other fails with the crash.
   *
   * @param calls The calls the worker was running, in the order written.
   * @param exit How it ended.
   * @param unstarted Those of them the worker never started.
   * @returns The calls to retry, in order.
   */
  protected lost(
    calls: CallRecord[],
    exit: ConnectionExit,
    unstarted: ReadonlySet<CallRecord> = new Set(),
  ): PendingCall[] {
    const retry: PendingCall[] = [];
    const retrying = this.canRetry();
    for (const record of calls) {
      const call = record as PendingCall;
      if (call.settled) continue;
      if (retrying && unstarted.has(record)) {
        // Never started: running it elsewhere is its first run.
        call.attempts--;
        retry.push(call);
        continue;
      }
      const idempotent = call.idempotent ||
        this.#declaredIdempotent.has(call.op);
      // A stream that delivered a value is never run twice: its consumer
      // has seen part of it.
      if (
        idempotent && retrying && call.attempts <= this.options.maxRetries &&
        !call.stream?.delivered
      ) {
        retry.push(call);
        publishRetry(() => ({
          op: call.op,
          id: call.id,
          module: this.options.label,
          mode: this.kind,
          pid: exit.pid,
          attempt: call.attempts + 1,
          exitCode: exit.code,
          signal: exit.signal,
        }));
      } else {
        call.reject(crashError(this.options.label, call, exit));
      }
    }
    return retry;
  }

  /**
   * The start-failure handler: nothing can serve the queued calls, so they
   * fail with the start's error (the next call tries a new start).
   *
   * @param error Why the start failed.
   */
  protected failQueued(error: unknown): void {
    const queued = this.queue;
    this.queue = [];
    for (const call of queued) call.reject(error);
    this.queueChanged();
  }

  /**
   * Counts a call that passed its deadline and publishes it.
   *
   * @param call The call.
   */
  onTimeout(call: CallRecord): void {
    this.counters.timeouts++;
    publishTimeout(() => ({
      op: call.op,
      id: call.id,
      module: this.options.label,
      mode: this.kind,
      pid: (call as PendingCall).pids.at(-1) ?? 0,
      timeoutMs: call.timeoutMs,
    }));
  }

  /**
   * Ends every admitted call now: queued and running calls reject with the
   * closed error and every worker is killed (their exits are requested).
   */
  protected force(): void {
    if (this.forced) return;
    this.forced = true;
    this.queue = [];
    const unsettled: PendingCall[] = [];
    for (let c = this.#unsettled; c !== undefined; c = c.nextUnsettled) {
      unsettled.push(c);
    }
    for (const call of unsettled) call.reject(this.closedError(call.op));
    for (const conn of this.connections()) conn.kill(FORCED_REASON, true);
    this.queueChanged();
  }

  /**
   * Stops admitting calls, drains (bounded by `timeoutMs` or
   * `closeTimeoutMs`, or not at all with `force`) and stops every worker.
   * Idempotent; a later `close({ force: true })` ends a drain in progress.
   *
   * @param options `force` and `timeoutMs`.
   * @returns Settles once every worker process is gone.
   */
  close(options?: CloseOptions): Promise<void> {
    let resolved: { force: boolean; timeoutMs: number };
    try {
      resolved = resolveCloseOptions(options, this.options.closeTimeoutMs);
    } catch (error: unknown) {
      return Promise.reject(error);
    }
    if (!this.closing) {
      this.closing = this.drainAndStop();
      this.closing.catch(() => {});
    }
    if (resolved.force) this.force();
    else if (resolved.timeoutMs > 0 && !this.forced) {
      const timer = setTimeout(() => this.force(), resolved.timeoutMs);
      const clear = () => clearTimeout(timer);
      this.closing.then(clear, clear);
    }
    return this.closing;
  }

  /**
   * Settles once a worker's process is gone: its connection closed, and its
   * own process (which a sandbox wrapper may outlive by moments) no longer
   * running, within {@linkcode GONE_LIMIT_MS}. Remote workers are done when
   * their connection closes.
   *
   * @param conn The worker.
   * @returns A promise.
   */
  protected gone(conn: Connection): Promise<void> {
    return workerGone(conn, this.options);
  }

  /**
   * The counters with their shared names.
   *
   * @returns A copy.
   */
  protected callStats(): CallStats {
    return { ...this.counters };
  }

  /**
   * The timing figures, and optionally a fresh start of them.
   *
   * @param reset Whether to start new figures after reading these.
   * @returns The figures.
   */
  protected metricsStats(reset: boolean): CallMetricsStats {
    return this.metrics.stats(reset);
  }

  /**
   * The recycle counters.
   *
   * @returns A copy.
   */
  protected recycleStats(): RecycleCounts {
    return { ...this.recycled };
  }
}
