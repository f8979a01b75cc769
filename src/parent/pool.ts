/**
 * `pool`: up to `max` worker processes, started lazily (or prewarmed), fed
 * from one FIFO queue, reaped when idle, recycled after a number of calls, a
 * memory ceiling or a change in the state they depend on, with cancellation
 * of queued and running calls.
 *
 * @module
 */

import { AirlockError, PoolBusyError, WorkerStartError } from "../errors.ts";
import { rssUnreadable } from "../runtime/proc.ts";
import { detect } from "../runtime/detect.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type {
  CallRecord,
  Connection,
  ConnectionEvents,
  ConnectionExit,
} from "./connection.ts";
import type { PendingCall } from "./_call.ts";
import { launchWorker, outOfDescriptors } from "./_launch.ts";
import { FORCED_REASON, ModeCore } from "./_mode.ts";
import {
  type CallKey,
  type CallOptions,
  type CloseOptions,
  POOL_OPTION_KEYS,
  type PoolOptions,
  type ResolvedPoolOptions,
  type ResolvedWorkerOptions,
} from "./options.ts";
import { type CallHandle, refusedCall } from "./_stream.ts";
import {
  checkKey,
  resolvePoolOptions,
  resolveWorkerOptions,
} from "./_resolve_options.ts";
import {
  withProxy,
  type WorkerApi,
  type WorkerCall,
  type WorkerStream,
} from "./proxy.ts";
import { bindFaults, shareFaults } from "./_faults.ts";
import {
  resolveTracker,
  type StaleCause,
  type StateStamp,
  type StateTracker,
} from "./state_scope.ts";
import type {
  CallMetricsStats,
  CallStats,
  RecycleCounts,
  StatsOptions,
} from "./stats.ts";
import type { SandboxBackend } from "../runtime/sandbox/types.ts";
import type { LimitMechanisms } from "../runtime/sandbox/limits/types.ts";
import {
  describeLaunchers,
  diedAtConnect,
  EARLY_EXIT_MS,
  freshHealth,
  type LauncherHealth,
  pickLauncher,
  recordFailure,
  recordSuccess,
} from "./_launcher_health.ts";

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

interface PoolWorker {
  conn: Connection;
  /** The index of the launcher it runs through (`launchers`; else 0). */
  launcher: number;
  /** When it was ready (ms since the epoch). */
  readyAt: number;
  stamp: StateStamp;
  calls: number;
  retiring: boolean;
  /** Whether its replacement (after maxTasksPerWorker) has been started. */
  succeeded: boolean;
  /** That replacement once ready, while it waits on standby. */
  heir: PoolWorker | undefined;
  /** The worker it replaces, while it waits on standby for it to retire. */
  predecessor: PoolWorker | undefined;
  /** Whether it takes no calls yet: its predecessor still serves. */
  standby: boolean;
  /**
   * When it was given its first call (ms since the epoch; 0 before), for its
   * pace: a worker prewarmed or idle before its first call is not slow.
   */
  firstCallAt: number;
  idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** The sticky keys bound to it. */
  keys: Set<CallKey>;
  /** Calls it may hold: `concurrency`, plus `pipeline` if it honours `limit`. */
  capacity: number;
  /**
   * Calls it may have written ahead now (0 up to `capacity - concurrency`),
   * adapted as answers arrive (see `#adapt`).
   */
  window: number;
  /** When it last answered, or was given a call while idle (`performance.now()`). */
  markAt: number;
  /** Calls it had answered then. */
  answered: number;
}

/**
 * A worker whose answers came slower than this many ms per call (as the
 * parent sees them: from the answers before, or from when it was given a call
 * while idle) gets nothing written ahead until its window regrows, nor does a
 * busy worker that has not answered for that long: calls written ahead behind
 * long calls would wait although another worker may be free.
 */
const LONG_CALL_MS = 4;

/**
 * How long a pool whose start ran out of file descriptors serves with the
 * workers it has before it tries to start more (a worker's exit ends the
 * pause at once).
 */
const DESCRIPTOR_PAUSE_MS = 5_000;

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
  /**
   * After a start ran out of file descriptors while other workers serve or
   * start: the most workers to run until `#capUntil` (or a worker exits).
   */
  #cap = Infinity;
  #capUntil = 0;
  /** Which live worker each sticky key is bound to. */
  #keyOwner = new Map<CallKey, PoolWorker>();
  /** Admitted keyed calls not yet settled: 0 keeps the plain FIFO path. */
  #keyedUnsettled = 0;
  /**
   * With `launchers`: each launcher's health, the options its workers start
   * with, and its starts in progress. Empty without `launchers`.
   */
  #health: LauncherHealth[] = [];
  #launcherOptions: ResolvedWorkerOptions[] = [];
  #startingOn: number[] = [];
  /** Whether a start that moves a worker to another launcher is on. */
  #rebalancing = false;

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
    for (const launcher of limits.launchers) {
      this.#health.push(freshHealth());
      // One attempt per start: where the next goes is the launchers'
      // health's decision, not a retry on the same host.
      const copy = { ...options, launcher, maxRetries: 0 };
      shareFaults(copy, options);
      this.#launcherOptions.push(copy);
      this.#startingOn.push(0);
    }
    for (let i = 0; i < limits.prewarm; i++) this.#startWorker();
  }

  get #starting(): number {
    return this.#starts.size;
  }

  /** Workers that take calls (not retiring, not on standby). No array. */
  #liveCount(): number {
    let live = 0;
    for (const worker of this.#workers) {
      if (!worker.retiring && !worker.standby) live++;
    }
    return live;
  }

  /**
   * Workers serving once every replacement started ahead has taken over:
   * those not replaced, plus the starts in progress and the replacements on
   * standby. At most `max`.
   */
  #servingAfterReplacements(): number {
    let serving = this.#starting;
    for (const worker of this.#workers) {
      if (worker.retiring) continue;
      if (worker.standby || !worker.succeeded) serving++;
    }
    return serving;
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
    if (this.#health.length > 0) {
      const picked = pickLauncher(
        this.#health,
        this.#launcherLoad(),
        Date.now(),
      );
      if (picked === undefined) return false;
      launcher = picked;
      options = this.#launcherOptions[picked] as ResolvedWorkerOptions;
      (this.#startingOn[picked] as number)++;
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
        if (this.#health.length > 0) {
          (this.#startingOn[launcher] as number)--;
          recordSuccess(this.#health[launcher] as LauncherHealth);
        }
        const worker: PoolWorker = {
          conn,
          launcher,
          readyAt: Date.now(),
          stamp,
          calls: 0,
          retiring: false,
          succeeded: false,
          heir: undefined,
          predecessor: undefined,
          standby: false,
          firstCallAt: 0,
          idleTimer: undefined,
          keys: new Set(),
          capacity: this.limits.concurrency,
          window: 1,
          markAt: 0,
          answered: 0,
        };
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
        if (rebalance) this.#rebalancing = false;
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
      },
      (error: unknown) => {
        this.#starts.delete(start);
        if (rebalance) this.#rebalancing = false;
        if (predecessor) {
          this.#successorStarts--;
          // Its replacement may be started again (or on demand).
          predecessor.succeeded = false;
        }
        const descriptors = outOfDescriptors(error);
        if (this.#health.length > 0 && !descriptors) {
          // Another launcher may serve: the pool fails its queue only once
          // every launcher is set aside (#failIfStranded).
          (this.#startingOn[launcher] as number)--;
          this.#failed(launcher, error);
          this.#pump();
          return;
        }
        if (this.#health.length > 0) (this.#startingOn[launcher] as number)--;
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
            this.#cap = this.#liveCount() + this.#starting;
            this.#capUntil = Date.now() + DESCRIPTOR_PAUSE_MS;
          }
          this.#pump();
        }
      },
    );
    this.#starts.add(start);
    return true;
  }

  /**
   * Workers serving or starting on each launcher (`launchers`), as they will
   * be once every replacement started ahead has taken over.
   */
  #launcherLoad(): number[] {
    const load = [...this.#startingOn];
    for (const worker of this.#workers) {
      if (worker.retiring || (worker.succeeded && !worker.standby)) continue;
      load[worker.launcher] = (load[worker.launcher] ?? 0) + 1;
    }
    return load;
  }

  /**
   * Records a failed start of a launcher; once it is set aside, the pool
   * looks again when its backoff has passed (to rebalance, or to start what
   * is needed then).
   */
  #failed(launcher: number, error: unknown): void {
    const health = this.#health[launcher] as LauncherHealth;
    if (!recordFailure(health, error, Date.now())) return;
    const timer = setTimeout(
      () => this.#pump(),
      Math.max(0, health.asideUntil - Date.now()) + 1,
    );
    (timer as { unref?: () => void }).unref?.();
  }

  /**
   * Moves one worker from the most loaded launcher to the least loaded one
   * in service when they differ by two or more (a host back after a loss,
   * or one that came up late): its replacement starts there, and it
   * retires once that is ready. One such move at a time, none while other
   * starts are on; a failed start counts against that launcher's health.
   */
  #rebalance(): void {
    if (
      this.#health.length < 2 || this.#rebalancing || this.closing ||
      this.forced || this.#starting > 0
    ) return;
    const load = this.#launcherLoad();
    const low = pickLauncher(this.#health, load, Date.now());
    if (low === undefined) return;
    let high = 0;
    for (let index = 1; index < load.length; index++) {
      if ((load[index] ?? 0) > (load[high] ?? 0)) high = index;
    }
    if ((load[high] ?? 0) - (load[low] ?? 0) < 2) return;
    for (const worker of this.#workers) {
      if (
        worker.launcher !== high || worker.retiring || worker.standby ||
        worker.succeeded || !worker.conn.alive
      ) continue;
      worker.succeeded = true;
      this.#rebalancing = true;
      if (!this.#startWorker(worker, true)) {
        worker.succeeded = false;
        this.#rebalancing = false;
      }
      return;
    }
  }

  /**
   * With every launcher set aside and nothing serving or starting, fails
   * the queued calls with an error naming each launcher's last failure
   * (rather than wait for a backoff no call asked for).
   */
  #failIfStranded(): void {
    if (
      this.#health.length === 0 || this.queue.length === 0 ||
      this.#starting > 0 || this.#liveCount() > 0
    ) return;
    const now = Date.now();
    if (pickLauncher(this.#health, this.#launcherLoad(), now) !== undefined) {
      return;
    }
    this.failQueued(
      new WorkerStartError({
        module: this.options.label,
        failure: "spawn",
        detail: `every launcher is set aside after failed starts: ${
          describeLaunchers(this.limits.launchers, this.#health, now)
        }`,
        cause: this.#health.at(-1)?.lastFailure,
      }),
    );
  }

  #onExit(worker: PoolWorker, exit: ConnectionExit): void {
    const now = Date.now();
    if (
      this.#health.length > 0 &&
      diedAtConnect(exit.requested, worker.readyAt, now)
    ) {
      const code = exit.signal ?? `code ${exit.code}`;
      this.#failed(
        worker.launcher,
        new AirlockError(
          `its worker (pid ${exit.pid}) exited (${code}) within ${EARLY_EXIT_MS} ms of its start`,
        ),
      );
    }
    this.#workers.delete(worker);
    this.#cap = Infinity;
    this.#handOver(worker);
    this.#unbindKeys(worker);
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
    if (worker.capacity > this.limits.concurrency) this.#adapt(worker);
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

  /**
   * Adapts how many calls a worker may have written ahead, like a TCP
   * window, from the answers just read: the window grows (doubling, from 1,
   * up to `pipeline`) when the worker is left with nothing queued behind its
   * running calls while calls wait in the pool's queue (it would idle for a
   * round trip), and closes (0) when its answers came slower than
   * {@linkcode LONG_CALL_MS} per call. Between the two it stays: a worker the
   * parent keeps fed gets no deeper window.
   */
  #adapt(worker: PoolWorker): void {
    const occupancy = worker.conn.occupancy;
    const answered = worker.calls - occupancy;
    const count = answered - worker.answered;
    if (count <= 0) return;
    const now = performance.now();
    const perCallMs = (now - worker.markAt) / count;
    worker.markAt = now;
    worker.answered = answered;
    if (perCallMs > LONG_CALL_MS) {
      worker.window = 0;
    } else if (
      occupancy <= this.limits.concurrency && this.queue.length > 0
    ) {
      worker.window = Math.min(
        worker.window === 0 ? 1 : worker.window * 2,
        worker.capacity - this.limits.concurrency,
      );
    }
  }

  #armIdle(worker: PoolWorker): void {
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    if (worker.conn.occupancy > 0 || this.limits.idleTimeoutMs === 0) return;
    worker.idleTimer = setTimeout(() => {
      worker.idleTimer = undefined;
      if (worker.retiring || worker.conn.occupancy > 0) return;
      if (!worker.standby && this.#liveCount() <= this.limits.min) return;
      this.#reaped++;
      this.#retire(worker);
    }, this.limits.idleTimeoutMs);
    // An idle timer alone must not keep the parent alive.
    (worker.idleTimer as { unref?: () => void }).unref?.();
  }

  /** Frees a leaving worker's keys: their next calls bind anew. */
  #unbindKeys(worker: PoolWorker): void {
    for (const key of worker.keys) {
      if (this.#keyOwner.get(key) === worker) this.#keyOwner.delete(key);
    }
    worker.keys.clear();
  }

  /**
   * A worker leaves (retires or exits): its replacement on standby takes
   * calls from now on; if it was itself on standby, the worker it was to
   * replace may start another replacement.
   */
  #handOver(worker: PoolWorker): void {
    const heir = worker.heir;
    if (heir) {
      worker.heir = undefined;
      heir.predecessor = undefined;
      heir.standby = false;
    }
    const predecessor = worker.predecessor;
    if (predecessor) {
      worker.predecessor = undefined;
      worker.standby = false;
      if (predecessor.heir === worker) {
        predecessor.heir = undefined;
        predecessor.succeeded = false;
      }
    }
  }

  #retire(worker: PoolWorker): void {
    if (worker.retiring) return;
    worker.retiring = true;
    this.#handOver(worker);
    this.#unbindKeys(worker);
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
    if (this.#keyedUnsettled === 0) {
      while (this.queue.length > 0) {
        const best = this.#leastBusy();
        if (!best) break;
        const call = this.queue.shift() as PendingCall;
        if (call.settled) continue;
        this.#dispatch(best, call);
      }
      placeable = this.queue.length;
    } else {
      placeable = this.#placeKeyed();
    }
    // Start workers for what is still queued and could run on any worker,
    // within max (calls waiting for their key's busy worker do not count).
    const live = this.#liveCount();
    let wanted = Math.min(
      Math.ceil(placeable / this.limits.concurrency) - this.#starting,
      this.#max() - live - this.#starting,
    );
    while (wanted-- > 0) {
      if (!this.#startWorker()) break;
    }
    this.#failIfStranded();
    this.#rebalance();
  }

  /** `max`, or fewer for a while after a start ran out of descriptors. */
  #max(): number {
    if (this.#cap === Infinity) return this.limits.max;
    if (Date.now() >= this.#capUntil) {
      this.#cap = Infinity;
      return this.limits.max;
    }
    return Math.min(this.limits.max, this.#cap);
  }

  /**
   * Whether calls may be written ahead to busy workers: only once the pool
   * is at `max` with no worker starting. Before that, queued calls wait for
   * the workers being started (written ahead, they would queue behind a
   * busy worker while a new one sits idle).
   */
  #aheadOpen(): boolean {
    // Replacements started ahead do not count: their workers serve meanwhile.
    return this.#starting === this.#successorStarts &&
      this.#liveCount() + this.#successorStarts >= this.#max();
  }

  /**
   * Whether a worker takes another call now: a free slot, or room to write
   * ahead when `ahead` allows it.
   */
  #hasRoom(worker: PoolWorker, ahead: boolean): boolean {
    if (
      worker.retiring || worker.standby || !worker.conn.alive ||
      worker.conn.checking
    ) {
      return false;
    }
    const occupancy = worker.conn.occupancy;
    if (occupancy < this.limits.concurrency) return true;
    // Never written ahead behind a stream, nor behind a call that has run
    // longer than a long call already (no answer for LONG_CALL_MS): either
    // may hold its slot for long.
    return ahead && occupancy < this.limits.concurrency + worker.window &&
      performance.now() - worker.markAt <= LONG_CALL_MS &&
      !worker.conn.streaming;
  }

  /** The worker with room running the fewest calls, if any. */
  #leastBusy(ahead: boolean = this.#aheadOpen()): PoolWorker | undefined {
    let best: PoolWorker | undefined;
    for (const worker of this.#workers) {
      if (!this.#hasRoom(worker, ahead)) continue;
      if (
        !best || worker.conn.occupancy < best.conn.occupancy ||
        (worker.conn.occupancy === best.conn.occupancy &&
          worker.keys.size < best.keys.size)
      ) best = worker;
    }
    return best;
  }

  /**
   * Places queued calls when some carry a sticky key: a bound key's call
   * runs on its worker or waits for it (later calls pass it), an unbound
   * key binds to the least busy worker, a call without a key takes any.
   * Calls of one key keep their order.
   *
   * @returns How many queued calls could run on any worker (unkeyed, or
   *   with a key not bound yet).
   */
  #placeKeyed(): number {
    const queue = this.queue;
    const ahead = this.#aheadOpen();
    let index = 0;
    while (index < queue.length) {
      const call = queue[index] as PendingCall;
      if (call.settled) {
        queue.splice(index, 1);
        continue;
      }
      const free = this.#leastBusy(ahead);
      let target: PoolWorker | undefined = free;
      if (call.key !== undefined) {
        // A key's calls may always be written ahead to its own worker: they
        // cannot run elsewhere.
        const owner = this.#keyOwner.get(call.key);
        if (owner) target = this.#hasRoom(owner, true) ? owner : undefined;
        else if (free) {
          this.#keyOwner.set(call.key, free);
          free.keys.add(call.key);
        }
      }
      if (!target) {
        index++;
        continue;
      }
      queue.splice(index, 1);
      this.#dispatch(target, call);
    }
    let placeable = 0;
    for (const call of queue) {
      if (call.key === undefined || !this.#keyOwner.has(call.key)) placeable++;
    }
    return placeable;
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
    // retires: when the calls left would take about 1.5 times the last start
    // at this worker's pace (measured from its first call on, so from its
    // second call), and no later than its last tenth of calls. It waits on
    // standby until then, so at most `max` workers take calls; meanwhile the
    // pool runs one process more per worker being replaced.
    if (!worker.succeeded) {
      const left = limit - worker.calls;
      const now = Date.now();
      if (worker.firstCallAt === 0) worker.firstCallAt = now;
      let lead = Math.ceil(limit / 10);
      if (worker.calls > 1) {
        const msPerCall = (now - worker.firstCallAt) / (worker.calls - 1);
        lead = Math.max(
          lead,
          msPerCall > 0 ? Math.ceil((1.5 * this.#startMs) / msPerCall) : limit,
        );
      }
      if (
        left <= lead && left > 0 &&
        this.#servingAfterReplacements() <= this.limits.max
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
        this.#servingAfterReplacements() < this.limits.max
      ) {
        worker.succeeded = true;
        if (!this.#startWorker()) worker.succeeded = false;
      }
    }
  }

  protected override refuse(op: string): Error | undefined {
    if (this.queue.length >= this.limits.maxQueue && !this.#hasFreeSlot()) {
      return new PoolBusyError({
        module: this.options.label,
        op,
        maxQueue: this.limits.maxQueue,
      });
    }
    return undefined;
  }

  protected override admit(call: PendingCall): void {
    if (call.key !== undefined) {
      this.#keyedUnsettled++;
      const done = () => void this.#keyedUnsettled--;
      call.promise.then(done, done);
    }
    this.queue.push(call);
    this.#pump();
  }

  protected override queueChanged(): void {
    this.#checkDrained();
  }

  #hasFreeSlot(): boolean {
    return this.#leastBusy() !== undefined;
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
      const running = worker.conn.occupancy;
      if (running > 0) busy++;
      perWorker.push({
        pid: worker.conn.pid,
        rssBytes: worker.conn.rssBytes(),
        calls: worker.calls,
        running,
        retiring: worker.retiring,
        standby: worker.standby,
        keys: worker.keys.size,
        launcher: worker.launcher,
        sandboxes: worker.conn.sandboxes,
        limits: worker.conn.limits,
      });
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
      keys: this.#keyOwner.size,
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
  const route = limits.route;
  /** Adds the `route(op, args)` key to a call that has none. */
  const routed = (
    op: string,
    args: unknown[],
    callOptions: CallOptions | undefined,
  ): CallOptions | undefined => {
    if (!route || callOptions?.key !== undefined) return callOptions;
    const key: CallKey | undefined = checkKey(
      route(op, args ?? []),
      "route(op, args)",
    );
    return key === undefined ? callOptions : { ...callOptions, key };
  };
  const call = (
    op: string,
    args: unknown[],
    callOptions?: CallOptions,
  ): Promise<unknown> => {
    try {
      callOptions = routed(op, args, callOptions);
    } catch (error: unknown) {
      return Promise.reject(error);
    }
    return core.call(op, args, callOptions);
  };
  const handleOf = (
    op: string,
    args: unknown[],
    callOptions?: CallOptions,
  ): CallHandle => {
    try {
      callOptions = routed(op, args, callOptions);
    } catch (error: unknown) {
      return refusedCall(op, error);
    }
    return core.handle(op, args, callOptions);
  };
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
