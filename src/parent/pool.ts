/**
 * `pool`: up to `max` worker processes, started lazily (or prewarmed), fed
 * from one FIFO queue, reaped when idle, recycled after a number of calls, a
 * memory ceiling or a change in the state they depend on, with cancellation
 * of queued and running calls.
 *
 * @module
 */

import { AirlockError, PoolBusyError } from "../errors.ts";
import { rssUnreadable } from "../runtime/proc.ts";
import { detect } from "../runtime/detect.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { Connection, ConnectionEvents } from "./connection.ts";
import type { ConnectionExit } from "./_exit.ts";
import type { CallRecord, PendingCall } from "./_call.ts";
import { launchWorker, outOfDescriptors } from "./_launch.ts";
import { FORCED_REASON, ModeCore } from "./_mode.ts";
import {
  type CloseOptions,
  POOL_OPTION_KEYS,
  type PoolOptions,
  type ResolvedPoolOptions,
  type ResolvedWorkerOptions,
} from "./options.ts";
import {
  resolvePoolOptions,
  resolveWorkerOptions,
} from "./_resolve_options.ts";
import { withProxy, type WorkerCall, type WorkerStream } from "./proxy.ts";
import type { Pool, PoolStats, PoolWorkerStats } from "./pool_handle.ts";
import { bindFaults } from "./_faults.ts";
import {
  resolveTracker,
  type StaleCause,
  type StateStamp,
  type StateTracker,
} from "./state_scope.ts";
import type { StatsOptions } from "./stats.ts";
import { PoolLaunchers } from "./_pool_launchers.ts";
import { type Placement, routedEntries, StickyKeys } from "./_pool_keys.ts";
import {
  adaptWindow,
  armIdle,
  handOver,
  liveCount,
  type PoolWorker,
  poolWorker,
  servingAfterReplacements,
  workerStats,
} from "./_pool_worker.ts";
import {
  aheadOpen,
  cappedMax,
  type DescriptorCap,
  descriptorCap,
  hasRoom,
  leastBusy,
  replacementDue,
  workersToStart,
} from "./_pool_policy.ts";

class PoolCore extends ModeCore {
  readonly limits: ResolvedPoolOptions;
  readonly tracker: StateTracker;
  #workers = new Set<PoolWorker>();
  /** Starts in progress; each settles once its worker joined or failed. */
  #starts = new Set<Promise<void>>();
  /** Of those, replacements started ahead for a worker still serving. */
  #successorStarts = 0;
  #drainWaiters: (() => void)[] = [];
  #reaped = 0;
  /** How long the last worker start took, in ms (0 until one has). */
  #startMs = 0;
  /** Fewer workers for a while after a start ran out of descriptors. */
  #cap: DescriptorCap = { workers: Infinity, until: 0 };
  #keys = new StickyKeys();
  /** What keyed placement asks of the pool. */
  #placement: Placement = {
    leastBusy: (ahead) => this.#leastBusy(ahead),
    ownerHasRoom: (owner) =>
      hasRoom(owner, this.limits.concurrency, true, performance.now()),
    dispatch: (worker, call) => this.#dispatch(worker, call),
  };
  /** The `launchers` and their health (none without `launchers`). */
  #launchers: PoolLaunchers;

  constructor(
    options: ResolvedWorkerOptions,
    limits: ResolvedPoolOptions,
    adapter: RuntimeAdapter,
    tracker: StateTracker,
  ) {
    super("pool", options, adapter);
    this.limits = limits;
    this.tracker = tracker;
    this.metrics.capacity = limits.max * limits.concurrency;
    this.#launchers = new PoolLaunchers(
      options,
      limits.launchers,
      () => this.#pump(),
    );
    for (let i = 0; i < limits.prewarm; i++) this.#startWorker();
  }

  get #starting(): number {
    return this.#starts.size;
  }

  #liveCount(): number {
    return liveCount(this.#workers);
  }

  protected override *connections(): Iterable<Connection> {
    for (const worker of this.#workers) yield worker.conn;
  }

  /**
   * Starts a worker.
   *
   * @param predecessor The worker it replaces, when started ahead of that
   *   worker's retirement: it waits on standby until then.
   * @param rebalance Whether it moves `predecessor` to a less loaded
   *   launcher: `predecessor` retires once it is ready.
   * @returns Whether it started (not when every launcher is set aside).
   */
  #startWorker(predecessor?: PoolWorker, rebalance = false): boolean {
    let launcher = 0;
    let options = this.options;
    if (this.#launchers.used) {
      const picked = this.#launchers.begin(this.#workers);
      if (picked === undefined) return false;
      ({ launcher, options } = picked);
    }
    const stamp = this.tracker.stamp();
    if (predecessor) this.#successorStarts++;
    const holder: { worker?: PoolWorker } = {};
    const events: ConnectionEvents = {
      onLost: (calls, exit, unstarted) => this.#onLost(calls, exit, unstarted),
      onTimeout: (call) => this.onTimeout(call),
      onSlotFree: () => {
        if (holder.worker) this.#onSlotFree(holder.worker);
      },
      onStarted: (call) => this.onStarted(call),
      // Calls held back while the worker's liveness was checked go on
      // (to it, or to others once it is killed).
      onLiveness: () => this.#pump(),
    };
    const begun = Date.now();
    const start = launchWorker(options, this.adapter, events, "pool").then(
      (conn) => {
        this.#starts.delete(start);
        if (predecessor) this.#successorStarts--;
        this.#startMs = Date.now() - begun;
        if (this.#launchers.used) {
          this.#launchers.ended(launcher);
          this.#launchers.succeeded(launcher);
        }
        this.#join(conn, launcher, stamp, holder, predecessor, rebalance);
      },
      (error: unknown) => {
        this.#starts.delete(start);
        if (predecessor) this.#successorStarts--;
        this.#startFailed(error, launcher, predecessor, rebalance);
      },
    );
    this.#starts.add(start);
    return true;
  }

  /** A started worker joins: on standby if it replaces one still serving. */
  #join(
    conn: Connection,
    launcher: number,
    stamp: StateStamp,
    holder: { worker?: PoolWorker },
    predecessor: PoolWorker | undefined,
    rebalance: boolean,
  ): void {
    const worker = poolWorker(
      conn,
      launcher,
      stamp,
      this.limits.concurrency,
    );
    // Calls written ahead start in order in the worker, one per freed
    // slot: it must run no more than `concurrency` of them at once.
    if (this.limits.pipeline > 0 && conn.limit(this.limits.concurrency)) {
      worker.capacity += this.limits.pipeline;
    } else {
      worker.window = 0;
    }
    if (
      predecessor && !predecessor.retiring &&
      this.#workers.has(predecessor)
    ) {
      // Its predecessor still serves: it waits, so that no more than
      // `max` workers take calls.
      worker.standby = true;
      worker.predecessor = predecessor;
      predecessor.heir = worker;
      // Moved here from a more loaded launcher: it takes over now.
      if (rebalance) this.#retire(predecessor);
    }
    if (rebalance) this.#launchers.rebalancing = false;
    holder.worker = worker;
    this.adopted(conn);
    this.#workers.add(worker);
    conn.closed.then((exit) => this.#onExit(worker, exit));
    if (this.forced) {
      conn.kill(FORCED_REASON, true);
    } else if (this.closing && this.queue.length === 0) {
      this.#retire(worker);
    } else {
      this.#armIdle(worker);
      this.#pump();
    }
  }

  /** A start failed: another launcher may serve, or the queue fails. */
  #startFailed(
    error: unknown,
    launcher: number,
    predecessor: PoolWorker | undefined,
    rebalance: boolean,
  ): void {
    if (rebalance) this.#launchers.rebalancing = false;
    // Its replacement may be started again (or on demand).
    if (predecessor) predecessor.succeeded = false;
    const descriptors = outOfDescriptors(error);
    if (this.#launchers.used) this.#launchers.ended(launcher);
    if (this.#launchers.used && !descriptors) {
      // Another launcher may serve: the pool fails its queue only once
      // every launcher is set aside (#failIfStranded).
      this.#launchers.failed(launcher, error);
      this.#pump();
      return;
    }
    if (
      this.#liveCount() === 0 && (!descriptors || this.#starting === 0)
    ) {
      // Nothing can serve the queue (launchWorker already retried): fail
      // it rather than respawn in a loop. The next call tries again.
      this.failQueued(error);
    } else {
      if (descriptors) {
        // Serve with the workers that fit (and those still starting):
        // no new start for a while, or until one exits.
        this.#cap = descriptorCap(
          this.#liveCount() + this.#starting,
          Date.now(),
        );
      }
      this.#pump();
    }
  }

  /**
   * Moves one worker off the most loaded launcher (`PoolLaunchers.toMove`):
   * its replacement starts on the least loaded one, and it retires once that
   * is ready. One move at a time, none while other starts are on.
   */
  #rebalance(): void {
    if (this.closing || this.forced || this.#starting > 0) return;
    const worker = this.#launchers.toMove(this.#workers);
    if (!worker) return;
    worker.succeeded = true;
    this.#launchers.rebalancing = true;
    if (!this.#startWorker(worker, true)) {
      worker.succeeded = false;
      this.#launchers.rebalancing = false;
    }
  }

  /** With every launcher set aside and nothing serving or starting, fails the queue. */
  #failIfStranded(): void {
    if (
      !this.#launchers.used || this.queue.length === 0 ||
      this.#starting > 0 || this.#liveCount() > 0
    ) return;
    const error = this.#launchers.stranded(this.#workers, this.options.label);
    if (error) this.failQueued(error);
  }

  #onExit(worker: PoolWorker, exit: ConnectionExit): void {
    this.#launchers.exited(worker, exit);
    this.#workers.delete(worker);
    this.#cap.workers = Infinity;
    handOver(worker);
    this.#keys.unbind(worker);
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    this.exited(exit);
    this.#pump();
    this.#checkDrained();
  }

  #onLost(
    calls: CallRecord[],
    exit: ConnectionExit,
    unstarted: ReadonlySet<CallRecord>,
  ): void {
    const retry = this.lost(calls, exit, unstarted);
    if (retry.length > 0) this.queue.unshift(...retry);
  }

  #onSlotFree(worker: PoolWorker): void {
    const conn = worker.conn;
    if (worker.capacity > this.limits.concurrency) {
      adaptWindow(worker, this.limits.concurrency, this.queue.length);
    }
    if (!worker.retiring && this.limits.maxRssBytes > 0) {
      const rss = conn.rssBytes();
      if (rss !== undefined && rss > this.limits.maxRssBytes) {
        this.recycle("memory", conn.pid);
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
    armIdle(worker, this.limits.idleTimeoutMs, () => {
      if (!worker.standby && this.#liveCount() <= this.limits.min) return;
      this.#reaped++;
      this.#retire(worker);
    });
  }

  #retire(worker: PoolWorker): void {
    if (worker.retiring) return;
    worker.retiring = true;
    handOver(worker);
    this.#keys.unbind(worker);
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    if (worker.conn.occupancy === 0) {
      void worker.conn.shutdown(this.options.closeGraceMs);
    }
  }

  #recycle(worker: PoolWorker, cause: StaleCause | "tasks"): void {
    if (worker.retiring) return;
    this.recycle(cause, worker.conn.pid);
    this.#retire(worker);
  }

  #pump(): void {
    if (this.forced) return;
    if (this.queue.length > 0 && this.tracker.active) {
      const now = this.tracker.stamp();
      for (const worker of this.#workers) {
        if (worker.retiring) continue;
        const cause = this.tracker.staleness(worker.stamp, now);
        if (cause) this.#recycle(worker, cause);
      }
    }
    let placeable: number;
    if (!this.#keys.active) {
      while (this.queue.length > 0) {
        const best = this.#leastBusy();
        if (!best) break;
        const call = this.queue.shift() as PendingCall;
        if (call.settled) continue;
        this.#dispatch(best, call);
      }
      placeable = this.queue.length;
    } else {
      placeable = this.#keys.place(
        this.queue,
        this.#aheadOpen(),
        this.#placement,
      );
    }
    // Start workers for what is still queued and could run on any worker,
    // within max (calls waiting for their key's busy worker do not count).
    let wanted = workersToStart(
      placeable,
      this.limits.concurrency,
      this.#starting,
      this.#liveCount(),
      this.#max(),
    );
    while (wanted-- > 0) {
      if (!this.#startWorker()) break;
    }
    this.#failIfStranded();
    this.#rebalance();
  }

  /** `max`, or fewer for a while after a start ran out of descriptors. */
  #max(): number {
    return cappedMax(this.limits.max, this.#cap, Date.now());
  }

  /** Whether calls may be written ahead to busy workers ({@linkcode aheadOpen}). */
  #aheadOpen(): boolean {
    return aheadOpen(
      this.#starting,
      this.#successorStarts,
      this.#liveCount(),
      this.#max(),
    );
  }

  /** The worker with room running the fewest calls, if any. */
  #leastBusy(ahead: boolean = this.#aheadOpen()): PoolWorker | undefined {
    return leastBusy(
      this.#workers,
      this.limits.concurrency,
      ahead,
      performance.now(),
    );
  }

  #dispatch(worker: PoolWorker, call: PendingCall): void {
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    if (worker.conn.occupancy === 0) {
      // Its time per call counts from here: it was idle.
      worker.markAt = performance.now();
      worker.answered = worker.calls;
    }
    worker.calls++;
    this.send(worker.conn, call);
    const limit = this.limits.maxTasksPerWorker;
    if (limit === 0) return;
    // The replacement starts early enough to be ready when the worker
    // retires (replacementDue). It waits on standby until then, so at most
    // `max` workers take calls; meanwhile the pool runs one process more per
    // worker being replaced.
    if (!worker.succeeded) {
      const now = Date.now();
      if (worker.firstCallAt === 0) worker.firstCallAt = now;
      if (
        replacementDue({
          limit,
          calls: worker.calls,
          firstCallAt: worker.firstCallAt,
          now,
          startMs: this.#startMs,
        }) &&
        servingAfterReplacements(this.#workers, this.#starting) <=
          this.limits.max
      ) {
        // Set first: its launcher's load no longer counts it.
        worker.succeeded = true;
        if (!this.#startWorker(worker)) worker.succeeded = false;
      }
    }
    if (worker.calls >= limit) {
      this.#recycle(worker, "tasks");
      if (
        !worker.succeeded &&
        servingAfterReplacements(this.#workers, this.#starting) <
          this.limits.max
      ) {
        worker.succeeded = true;
        if (!this.#startWorker()) worker.succeeded = false;
      }
    }
  }

  protected override refuse(op: string): Error | undefined {
    if (
      this.queue.length >= this.limits.maxQueue &&
      this.#leastBusy() === undefined
    ) {
      return new PoolBusyError({
        module: this.options.label,
        op,
        maxQueue: this.limits.maxQueue,
      });
    }
    return undefined;
  }

  protected override admit(call: PendingCall): void {
    this.#keys.admitted(call);
    this.queue.push(call);
    this.#pump();
  }

  protected override queueChanged(): void {
    this.#checkDrained();
  }

  invalidate(): void {
    this.tracker.invalidate();
    for (const worker of this.#workers) {
      if (!worker.retiring) this.#recycle(worker, "invalidate");
    }
  }

  #checkDrained(): void {
    if (this.#drainWaiters.length === 0) return;
    if (this.queue.length > 0) return;
    if (!this.forced) {
      for (const worker of this.#workers) {
        if (worker.conn.occupancy > 0) return;
      }
    }
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const resolve of waiters) resolve();
  }

  protected override async drainAndStop(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.#drainWaiters.push(resolve);
      this.#checkDrained();
    });
    // Workers still starting are retired (or killed) as they arrive.
    while (this.#starts.size > 0 || this.#workers.size > 0) {
      const exits: Promise<unknown>[] = [...this.#starts];
      for (const worker of this.#workers) {
        if (this.forced) worker.conn.kill(FORCED_REASON, true);
        else this.#retire(worker);
        exits.push(this.gone(worker.conn));
      }
      await Promise.all(exits);
    }
  }

  stats(options?: StatsOptions): PoolStats {
    const perWorker: PoolWorkerStats[] = [];
    let busy = 0;
    for (const worker of this.#workers) {
      const stats = workerStats(worker);
      if (stats.running > 0) busy++;
      perWorker.push(stats);
    }
    const recycledBy = this.recycleStats();
    const recycled = recycledBy.tasks + recycledBy.memory + recycledBy.watch +
      recycledBy.invalidate + recycledBy.crash;
    return {
      workers: this.#workers.size,
      busy,
      idle: this.#workers.size - busy,
      starting: this.#starting,
      queued: this.queue.length,
      ...this.callStats(),
      recycled,
      recycledBy,
      reaped: this.#reaped,
      keys: this.#keys.size,
      perWorker,
      ...this.metricsStats(options?.reset === true),
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
 * ```ts
 * import { pool } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * // The worker module: in an app, a file such as ./workers/math.ts.
 * const math = `data:text/typescript,${encodeURIComponent(`
 *   import { defineWorker } from "${import.meta.resolve("@airlock/airlock/worker")}";
 *   export default defineWorker({ square: (n: number) => n * n });
 * `)}`;
 *
 * await using p = pool(math, { max: 2, maxTasksPerWorker: 1_000 });
 * const squares = await Promise.all([1, 2, 3, 4].map((n) => p.call("square", [n])));
 * assert.deepEqual(squares, [1, 4, 9, 16]);
 * assert.ok(p.stats().workers <= 2);
 * assert.equal(p.stats().completed, 4);
 * ```
 */
export function pool<D = unknown>(
  module: string | URL,
  options: PoolOptions<NoInfer<D>> = {},
): Pool<D> {
  const adapter = detect();
  const resolved = resolveWorkerOptions(
    module,
    options,
    adapter,
    POOL_OPTION_KEYS,
  );
  const limits = resolvePoolOptions(options);
  // Workers run elsewhere: what holds for `launcher` holds for each entry
  // (each start gets its own entry).
  if (limits.launchers.length > 0) {
    resolved.launcher = limits.launchers[0];
  }
  if (limits.maxRssBytes > 0) {
    // Never silently off: the recycle needs each worker's resident memory.
    const problem = resolved.launcher !== undefined
      ? "a worker run through a launcher runs elsewhere, where its memory cannot be read"
      : rssUnreadable();
    if (problem !== undefined) {
      throw new AirlockError(
        `Cannot recycle workers of "${resolved.label}" by their memory (maxRssBytes): ${problem}`,
      );
    }
  }
  const tracker = resolveTracker(
    options,
    resolved.cwd,
    (path) => adapter.pathIdentity(path),
  );
  const core = new PoolCore(resolved, limits, adapter, tracker);
  const { call, handleOf } = routedEntries(core, limits.route);
  const handle = {
    call: call as WorkerCall<D>,
    stream: handleOf as WorkerStream<D>,
    close: (closeOptions?: CloseOptions) => core.close(closeOptions),
    [Symbol.asyncDispose]: () => core.close(),
    invalidate: () => core.invalidate(),
    stats: (statsOptions?: StatsOptions) => core.stats(statsOptions),
  };
  return bindFaults(withProxy<typeof handle, D>(handle, handleOf), resolved);
}
