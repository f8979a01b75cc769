/**
 * `Pool`: the handle `pool()` returns, and what its `stats()`
 * reports.
 *
 * @module
 */

import type { CloseOptions } from "./options.ts";
import type { WorkerApi, WorkerCall, WorkerStream } from "./proxy.ts";
import type {
  CallMetricsStats,
  CallStats,
  RecycleCounts,
  StatsOptions,
} from "./stats.ts";
import type { SandboxBackend } from "../runtime/sandbox/types.ts";
import type { LimitMechanisms } from "../runtime/sandbox/limits/types.ts";

/** Figures of one worker of a pool. */
export interface PoolWorkerStats {
  /** The worker's pid. */
  pid: number;
  /** Its resident memory in bytes, when it can be read. */
  rssBytes: number | undefined;
  /** Calls it has been given. */
  calls: number;
  /** Calls it is running now. */
  running: number;
  /** Whether it takes no more calls and will exit once idle. */
  retiring: boolean;
  /**
   * Whether it is a replacement started ahead (`maxTasksPerWorker`) that
   * waits, taking no calls, for the worker it replaces to retire.
   */
  standby: boolean;
  /** Sticky keys bound to it (calls with these keys run here). */
  keys: number;
  /**
   * The index of the `launchers` entry it runs through (0 in a pool without
   * `launchers`).
   */
  launcher: number;
  /**
   * The OS sandbox backends confining it, outermost first (`"bwrap"`,
   * `"landlock"`); empty when none does.
   */
  sandboxes: readonly SandboxBackend[];
  /**
   * Which mechanism holds each of its limits (`limits` option): `"cgroup"`,
   * `"rlimit"`, or `"none"` (not asked, or not held here under `enforce:
   * "best-effort"`).
   */
  limits: LimitMechanisms;
}

/** What {@linkcode Pool.stats} reports. */
export interface PoolStats extends CallStats, CallMetricsStats {
  /**
   * Live worker processes, including retiring ones and replacements waiting
   * on standby (`perWorker[].standby`).
   */
  workers: number;
  /** Workers running at least one call. */
  busy: number;
  /** Workers running nothing. */
  idle: number;
  /** Workers being started. */
  starting: number;
  /** Calls waiting for a worker. */
  queued: number;
  /** Workers recycled, all causes. */
  recycled: number;
  /** Workers recycled, by cause. */
  recycledBy: RecycleCounts;
  /** Idle workers stopped by `idleTimeoutMs`. */
  reaped: number;
  /** Sticky keys bound to a live worker (see `perWorker[].keys`). */
  keys: number;
  /** One entry per live worker. */
  perWorker: PoolWorkerStats[];
}

/**
 * A pool: one method per handler of the worker (the typed proxy), plus
 * `call`, `stream`, `close`, `invalidate` and `stats`.
 *
 * @typeParam D The worker module's default export type (`typeof db`).
 */
export type Pool<D = unknown> = WorkerApi<D> & {
  /**
   * Calls an op on the first free worker, or with a `key` (or the pool's
   * `route`) on the live worker bound to that key.
   *
   * @param op The handler's name.
   * @param args Its arguments.
   * @param options A signal, a deadline, a sticky `key` for this call.
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
  /**
   * Stops admitting calls, finishes running and queued ones, and settles
   * once every worker process has exited. With `{ force: true }`, or once
   * `timeoutMs` (default: the `closeTimeoutMs` option) has passed, calls
   * still queued or running reject with `SessionClosedError` and the workers
   * are killed. Idempotent: a later `close({ force: true })` ends a drain in
   * progress.
   *
   * @param options `force` to end running calls now, `timeoutMs` to bound the drain.
   */
  close(options?: CloseOptions): Promise<void>;
  /** Same as `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
  /**
   * Marks every current worker stale: the next calls run on fresh workers
   * (calls already running finish first). For changes `watch` cannot see,
   * such as an in-place migration.
   */
  invalidate(): void;
  /**
   * Counters, per-worker figures, and call timing summaries.
   *
   * @param options `reset: true` starts new timing summaries after this
   *   read (for periodic export); counters are never reset.
   */
  stats(options?: StatsOptions): PoolStats;
};
