/**
 * `pool`: up to `max` worker processes, started lazily (or prewarmed), fed
 * from one FIFO queue, reaped when idle, recycled after a number of calls, a
 * memory ceiling or a change in the state they depend on, with cancellation
 * of queued and running calls.
 *
 * @module
 */

import { availableParallelism } from "node:os";
import { PoolBusyError, SessionClosedError } from "../errors.ts";
import { detect } from "../runtime/detect.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import {
  type CallRecord,
  type Connection,
  type ConnectionExit,
  crashError,
} from "./connection.ts";
import { onCallAbort, type PendingCall, prepareCall } from "./_call.ts";
import { launchWorker } from "./_launch.ts";
import {
  type CallOptions,
  milliseconds,
  type ResolvedWorkerOptions,
  resolveWorkerOptions,
  wholeNumber,
  type WorkerOptions,
} from "./options.ts";
import { withProxy, type WorkerApi, type WorkerCall } from "./proxy.ts";
import {
  type RecycleCounts,
  resolveTracker,
  type StaleCause,
  STATE_OPTION_KEYS,
  type StateOptions,
  type StateStamp,
  type StateTracker,
} from "./state_scope.ts";

/** Default idle time after which workers above `min` are stopped: 60 s. */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;
/** Default limit of queued calls. */
export const DEFAULT_MAX_QUEUE = 10_000;

/** Options of {@linkcode pool}. */
export interface PoolOptions extends WorkerOptions, StateOptions {
  /**
   * Most worker processes at once. A worker retiring after
   * `maxTasksPerWorker` or `maxRssBytes` may briefly coexist with its
   * replacement while it finishes its last call.
   *
   * @default {the available cores, at most 8}
   */
  max?: number;
  /**
   * Workers kept alive against idle reaping (started on demand, or at
   * creation with `prewarm`).
   *
   * @default {0}
   */
  min?: number;
  /**
   * Start workers before the first call: `true` starts `min` workers (at
   * least one), a number starts that many (at most `max`).
   *
   * @default {false}
   */
  prewarm?: boolean | number;
  /**
   * Idle workers above `min` are stopped after this many milliseconds.
   * `0` keeps them until `close()`.
   *
   * @default {60000}
   */
  idleTimeoutMs?: number;
  /**
   * A worker is recycled after this many calls. Its replacement starts in
   * the background while it serves its last tenth of calls, so no call waits
   * for a start; meanwhile the pool may run one worker more than `max`. `0`
   * turns recycling off.
   *
   * @default {0}
   */
  maxTasksPerWorker?: number;
  /**
   * A worker whose resident memory (the OS figure, which includes native
   * allocations) exceeds this many bytes after a call is recycled. `0` turns
   * it off.
   *
   * @default {0}
   */
  maxRssBytes?: number;
  /**
   * Most calls waiting for a worker; past it a call rejects at once with
   * `PoolBusyError`.
   *
   * @default {10000}
   */
  maxQueue?: number;
  /**
   * Calls one worker runs at once.
   *
   * @default {1}
   */
  concurrency?: number;
}

/** Options of {@linkcode Pool.close}. */
export interface PoolCloseOptions {
  /** Reject queued calls with `SessionClosedError` instead of running them. */
  force?: boolean;
}

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
}

/** What {@linkcode Pool.stats} reports. */
export interface PoolStats {
  /** Live worker processes (including retiring ones). */
  workers: number;
  /** Workers running at least one call. */
  busy: number;
  /** Workers running nothing. */
  idle: number;
  /** Workers being started. */
  starting: number;
  /** Calls waiting for a worker. */
  queued: number;
  /** Calls that settled with a value. */
  completed: number;
  /** Calls that settled with an error. */
  failed: number;
  /** Workers that exited without being asked to. */
  crashed: number;
  /** Workers recycled, all causes. */
  recycled: number;
  /** Workers recycled, by cause. */
  recycledBy: RecycleCounts;
  /** Idle workers stopped by `idleTimeoutMs`. */
  reaped: number;
  /** One entry per live worker. */
  perWorker: PoolWorkerStats[];
}

/** The control surface of a pool, beside the typed proxy. */
export interface PoolHandle<D = unknown> {
  /**
   * Calls an op on the first free worker.
   *
   * @param op The handler's name.
   * @param args Its arguments.
   * @param options A signal and a deadline for this call.
   * @returns What the handler returned.
   */
  call: WorkerCall<D>;
  /**
   * Stops admitting calls, finishes running and queued ones (or rejects the
   * queued ones with `{ force: true }`), and settles once every worker
   * process has exited. Idempotent.
   */
  close(options?: PoolCloseOptions): Promise<void>;
  /** Same as `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
  /**
   * Marks every current worker stale: the next calls run on fresh workers
   * (calls already running finish first). For changes `watch` cannot see,
   * such as an in-place migration.
   */
  invalidate(): void;
  /** Counters and per-worker figures. */
  stats(): PoolStats;
}

/** A pool: the control surface plus one method per handler. */
export type Pool<D = unknown> = PoolHandle<D> & WorkerApi<D>;

interface PoolWorker {
  conn: Connection;
  stamp: StateStamp;
  calls: number;
  retiring: boolean;
  /** Whether its replacement (after maxTasksPerWorker) has been started. */
  succeeded: boolean;
  idleTimer: ReturnType<typeof setTimeout> | undefined;
}

interface ResolvedPoolOptions {
  max: number;
  min: number;
  prewarm: number;
  idleTimeoutMs: number;
  maxTasksPerWorker: number;
  maxRssBytes: number;
  maxQueue: number;
  concurrency: number;
}

function resolvePoolOptions(options: PoolOptions): ResolvedPoolOptions {
  const max = wholeNumber(
    "max",
    options.max,
    Math.max(1, Math.min(8, availableParallelism())),
    1,
  );
  const min = wholeNumber("min", options.min, 0, 0);
  if (min > max) {
    throw new RangeError(
      `Invalid option "min": expected at most max (${max}), received ${min}`,
    );
  }
  let prewarm = 0;
  if (options.prewarm === true) prewarm = Math.max(min, 1);
  else if (options.prewarm !== undefined && options.prewarm !== false) {
    prewarm = wholeNumber("prewarm", options.prewarm, 0, 0);
    if (prewarm > max) {
      throw new RangeError(
        `Invalid option "prewarm": expected at most max (${max}), received ${prewarm}`,
      );
    }
  }
  return {
    max,
    min,
    prewarm,
    idleTimeoutMs: milliseconds(
      "idleTimeoutMs",
      options.idleTimeoutMs,
      DEFAULT_IDLE_TIMEOUT_MS,
    ),
    maxTasksPerWorker: wholeNumber(
      "maxTasksPerWorker",
      options.maxTasksPerWorker,
      0,
      0,
    ),
    maxRssBytes: wholeNumber("maxRssBytes", options.maxRssBytes, 0, 0),
    maxQueue: wholeNumber("maxQueue", options.maxQueue, DEFAULT_MAX_QUEUE, 0),
    concurrency: wholeNumber("concurrency", options.concurrency, 1, 1),
  };
}

class PoolCore {
  readonly options: ResolvedWorkerOptions;
  readonly limits: ResolvedPoolOptions;
  readonly adapter: RuntimeAdapter;
  readonly tracker: StateTracker;
  #workers = new Set<PoolWorker>();
  #starting = 0;
  #queue: PendingCall[] = [];
  #closing: Promise<void> | undefined;
  #forced = false;
  #drainWaiters: (() => void)[] = [];
  /** Ops the workers declare idempotent (`defineWorker`), from their hellos. */
  #declaredIdempotent = new Set<string>();
  #stats = {
    completed: 0,
    failed: 0,
    crashed: 0,
    reaped: 0,
  };
  #recycled: RecycleCounts = {
    tasks: 0,
    memory: 0,
    watch: 0,
    invalidate: 0,
    crash: 0,
  };

  constructor(
    options: ResolvedWorkerOptions,
    limits: ResolvedPoolOptions,
    adapter: RuntimeAdapter,
    tracker: StateTracker,
  ) {
    this.options = options;
    this.limits = limits;
    this.adapter = adapter;
    this.tracker = tracker;
    for (let i = 0; i < limits.prewarm; i++) this.#startWorker();
  }

  /** Workers that take calls (not retiring). Counted on every answer: no array. */
  #liveCount(): number {
    let live = 0;
    for (const worker of this.#workers) if (!worker.retiring) live++;
    return live;
  }

  #startWorker(): void {
    this.#starting++;
    const stamp = this.tracker.stamp();
    const holder: { worker?: PoolWorker } = {};
    launchWorker(this.options, this.adapter, {
      onLost: (calls, exit) => this.#onLost(calls, exit),
      onTimeout: () => {},
      onSlotFree: () => {
        if (holder.worker) this.#onSlotFree(holder.worker);
      },
    }).then((conn) => {
      this.#starting--;
      const worker: PoolWorker = {
        conn,
        stamp,
        calls: 0,
        retiring: false,
        succeeded: false,
        idleTimer: undefined,
      };
      holder.worker = worker;
      for (const op of conn.hello?.idempotent ?? []) {
        this.#declaredIdempotent.add(op);
      }
      this.#workers.add(worker);
      conn.closed.then((exit) => this.#onExit(worker, exit));
      if (this.#closing && this.#queue.length === 0) {
        this.#retire(worker);
      } else {
        this.#armIdle(worker);
        this.#pump();
      }
    }, (error: unknown) => {
      this.#starting--;
      if (this.#liveCount() === 0) {
        // Nothing can serve the queue (launchWorker already retried): fail
        // it rather than respawn in a loop. The next call tries again.
        const queued = this.#queue;
        this.#queue = [];
        for (const call of queued) call.reject(error);
        this.#checkDrained();
      } else {
        this.#pump();
      }
    });
  }

  #onExit(worker: PoolWorker, exit: ConnectionExit): void {
    this.#workers.delete(worker);
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    if (!exit.requested) {
      this.#stats.crashed++;
      this.#recycled.crash++;
    }
    this.#pump();
    this.#checkDrained();
  }

  #onLost(calls: CallRecord[], exit: ConnectionExit): void {
    const retry: PendingCall[] = [];
    for (const record of calls) {
      const call = record as PendingCall;
      if (call.settled) continue;
      const idempotent = call.idempotent ||
        this.#declaredIdempotent.has(call.op);
      if (
        idempotent && call.attempts <= this.options.maxRetries &&
        !this.#forced
      ) {
        retry.push(call);
      } else {
        call.reject(crashError(this.options.label, call, exit));
      }
    }
    if (retry.length > 0) this.#queue.unshift(...retry);
  }

  #onSlotFree(worker: PoolWorker): void {
    const conn = worker.conn;
    if (!worker.retiring && this.limits.maxRssBytes > 0) {
      const rss = conn.rssBytes();
      if (rss !== undefined && rss > this.limits.maxRssBytes) {
        this.#recycled.memory++;
        this.#retire(worker);
      }
    }
    if (worker.retiring) {
      if (conn.occupancy === 0) void conn.shutdown(this.options.closeGraceMs);
    } else {
      this.#armIdle(worker);
    }
    this.#pump();
    this.#checkDrained();
  }

  #armIdle(worker: PoolWorker): void {
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    if (worker.conn.occupancy > 0 || this.limits.idleTimeoutMs === 0) return;
    worker.idleTimer = setTimeout(() => {
      worker.idleTimer = undefined;
      if (worker.retiring || worker.conn.occupancy > 0) return;
      if (this.#liveCount() <= this.limits.min) return;
      this.#stats.reaped++;
      this.#retire(worker);
    }, this.limits.idleTimeoutMs);
    // An idle timer alone must not keep the parent alive.
    (worker.idleTimer as { unref?: () => void }).unref?.();
  }

  #retire(worker: PoolWorker): void {
    if (worker.retiring) return;
    worker.retiring = true;
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    if (worker.conn.occupancy === 0) {
      void worker.conn.shutdown(this.options.closeGraceMs);
    }
  }

  #recycle(worker: PoolWorker, cause: StaleCause | "tasks"): void {
    if (worker.retiring) return;
    this.#recycled[cause]++;
    this.#retire(worker);
  }

  #pump(): void {
    if (this.#queue.length > 0 && this.tracker.active) {
      const now = this.tracker.stamp();
      for (const worker of this.#workers) {
        if (worker.retiring) continue;
        const cause = this.tracker.staleness(worker.stamp, now);
        if (cause) this.#recycle(worker, cause);
      }
    }
    while (this.#queue.length > 0) {
      let best: PoolWorker | undefined;
      for (const worker of this.#workers) {
        if (worker.retiring || !worker.conn.alive) continue;
        const occupancy = worker.conn.occupancy;
        if (occupancy >= this.limits.concurrency) continue;
        if (!best || occupancy < best.conn.occupancy) best = worker;
      }
      if (!best) break;
      const call = this.#queue.shift() as PendingCall;
      if (call.settled) continue;
      this.#dispatch(best, call);
    }
    // Start workers for what is still queued, within max.
    const live = this.#liveCount();
    let wanted = Math.min(
      Math.ceil(this.#queue.length / this.limits.concurrency) - this.#starting,
      this.limits.max - live - this.#starting,
    );
    while (wanted-- > 0) this.#startWorker();
  }

  #dispatch(worker: PoolWorker, call: PendingCall): void {
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    worker.calls++;
    worker.conn.send(call);
    const limit = this.limits.maxTasksPerWorker;
    if (limit === 0) return;
    // The replacement starts while the worker serves its last tenth of calls,
    // so that it is ready when the worker retires: no call waits for a start.
    if (
      !worker.succeeded &&
      worker.calls >= limit - Math.max(1, Math.ceil(limit / 10))
    ) {
      let leaving = 0;
      for (const other of this.#workers) {
        if (other.succeeded && !other.retiring) leaving++;
      }
      if (this.#liveCount() + this.#starting - leaving < this.limits.max) {
        worker.succeeded = true;
        this.#startWorker();
      }
    }
    if (worker.calls >= limit) {
      this.#recycle(worker, "tasks");
      if (
        !worker.succeeded &&
        this.#liveCount() + this.#starting < this.limits.max
      ) {
        worker.succeeded = true;
        this.#startWorker();
      }
    }
  }

  call(op: string, args: unknown[], options?: CallOptions): Promise<unknown> {
    if (this.#closing) {
      return Promise.reject(
        new SessionClosedError({
          module: this.options.label,
          op,
          kind: "pool",
        }),
      );
    }
    if (this.#queue.length >= this.limits.maxQueue && !this.#hasFreeSlot()) {
      return Promise.reject(
        new PoolBusyError({
          module: this.options.label,
          op,
          maxQueue: this.limits.maxQueue,
        }),
      );
    }
    let call: PendingCall;
    try {
      call = prepareCall(op, args, options, this.options);
    } catch (error: unknown) {
      return Promise.reject(error);
    }
    call.promise.then(
      () => this.#stats.completed++,
      () => this.#stats.failed++,
    );
    onCallAbort(call, () => this.#abort(call));
    if (call.settled) return call.promise;
    this.#queue.push(call);
    this.#pump();
    return call.promise;
  }

  #hasFreeSlot(): boolean {
    for (const worker of this.#workers) {
      if (
        !worker.retiring && worker.conn.alive &&
        worker.conn.occupancy < this.limits.concurrency
      ) return true;
    }
    return false;
  }

  #abort(call: PendingCall): void {
    const reason = call.signal?.reason;
    const index = this.#queue.indexOf(call);
    if (index !== -1) {
      // Queued: removed without touching any worker.
      this.#queue.splice(index, 1);
      call.reject(reason);
      this.#checkDrained();
      return;
    }
    for (const worker of this.#workers) {
      if (worker.conn.cancel(call, reason)) return;
    }
    call.reject(reason);
  }

  invalidate(): void {
    this.tracker.invalidate();
    for (const worker of this.#workers) {
      if (!worker.retiring) this.#recycle(worker, "invalidate");
    }
  }

  #checkDrained(): void {
    if (this.#drainWaiters.length === 0) return;
    if (this.#queue.length > 0) return;
    for (const worker of this.#workers) {
      if (worker.conn.occupancy > 0) return;
    }
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const resolve of waiters) resolve();
  }

  close(options: PoolCloseOptions = {}): Promise<void> {
    if (options.force) {
      this.#forced = true;
      const queued = this.#queue;
      this.#queue = [];
      for (const call of queued) {
        call.reject(
          new SessionClosedError({
            module: this.options.label,
            op: call.op,
            kind: "pool",
          }),
        );
      }
    }
    if (this.#closing) return this.#closing;
    const closing = (async () => {
      await new Promise<void>((resolve) => {
        this.#drainWaiters.push(resolve);
        this.#checkDrained();
      });
      // Workers still starting are retired as they arrive; wait for them.
      while (this.#starting > 0 || this.#workers.size > 0) {
        const exits = [...this.#workers].map((worker) => {
          this.#retire(worker);
          return worker.conn.closed;
        });
        if (exits.length > 0) await Promise.all(exits);
        else await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    this.#closing = closing;
    return closing;
  }

  stats(): PoolStats {
    const perWorker: PoolWorkerStats[] = [];
    let busy = 0;
    for (const worker of this.#workers) {
      const running = worker.conn.occupancy;
      if (running > 0) busy++;
      perWorker.push({
        pid: worker.conn.pid,
        rssBytes: worker.conn.rssBytes(),
        calls: worker.calls,
        running,
        retiring: worker.retiring,
      });
    }
    const recycled = this.#recycled.tasks + this.#recycled.memory +
      this.#recycled.watch + this.#recycled.invalidate + this.#recycled.crash;
    return {
      workers: this.#workers.size,
      busy,
      idle: this.#workers.size - busy,
      starting: this.#starting,
      queued: this.#queue.length,
      ...this.#stats,
      recycled,
      recycledBy: { ...this.#recycled },
      perWorker,
    };
  }
}

/**
 * Creates a pool of worker processes. Nothing starts until the first call
 * (unless `prewarm`); calls wait in one FIFO queue for a free worker, an idle
 * worker is used before a new one is started, and new ones start only while
 * fewer than `max` run.
 *
 * A crashed worker fails the call it was running with `WorkerCrashedError`
 * (calls to idempotent ops are retried) and is replaced on demand. A module
 * that fails at every start fails the queued calls with `WorkerStartError`
 * instead of respawning forever.
 *
 * @typeParam D The worker module's default export type, for the typed proxy.
 * @param module The worker module: a `URL`, a URL string, or a path.
 * @param options Size, recycling, queue, and everything sessions take.
 * @returns The pool.
 * @throws {TypeError} when an option is invalid or the module does not exist.
 * @throws {RangeError} when a number option is out of range.
 *
 * @example A pool of two workers
 * ```ts ignore
 * import { pool } from "@airlock/airlock";
 * import type embed from "./workers/embed.ts";
 *
 * await using p = pool<typeof embed>(new URL("./workers/embed.ts", import.meta.url), {
 *   max: 2,
 *   maxTasksPerWorker: 1_000,
 * });
 * const vectors = await Promise.all(texts.map((text) => p.embed(text)));
 * ```
 */
export function pool<D = unknown>(
  module: string | URL,
  options: PoolOptions = {},
): Pool<D> {
  const adapter = detect();
  const resolved = resolveWorkerOptions(module, options, adapter, [
    ...STATE_OPTION_KEYS,
    "max",
    "min",
    "prewarm",
    "idleTimeoutMs",
    "maxTasksPerWorker",
    "maxRssBytes",
    "maxQueue",
    "concurrency",
  ]);
  const limits = resolvePoolOptions(options);
  const tracker = resolveTracker(
    options,
    resolved.cwd,
    (path) => adapter.pathIdentity(path),
  );
  const core = new PoolCore(resolved, limits, adapter, tracker);
  const call = (op: string, args: unknown[], callOptions?: CallOptions) =>
    core.call(op, args, callOptions);
  const handle: PoolHandle<D> = {
    call: call as WorkerCall<D>,
    close: (closeOptions) => core.close(closeOptions),
    [Symbol.asyncDispose]: () => core.close(),
    invalidate: () => core.invalidate(),
    stats: () => core.stats(),
  };
  return withProxy<PoolHandle<D>, D>(handle, call);
}
