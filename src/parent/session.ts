/**
 * `session`: one long-lived worker process with concurrent calls, per-call
 * deadlines, cancellation, crash recovery with `setup` replay, a real
 * `restart()` and a draining (or forced) `close()`. Admission, lost-call
 * retries, abort and counters come from the shared mode core (`_mode.ts`).
 *
 * @module
 */

import { detect } from "../runtime/detect.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { Connection, ConnectionEvents } from "./connection.ts";
import type { ConnectionExit } from "./_exit.ts";
import type { CallRecord, PendingCall } from "./_call.ts";
import { launchWorker } from "./_launch.ts";
import { FORCED_REASON, ModeCore } from "./_mode.ts";
import {
  type CallOptions,
  type CloseOptions,
  type ResolvedWorkerOptions,
  SESSION_OPTION_KEYS,
  type SessionOptions,
} from "./options.ts";
import { resolveWorkerOptions } from "./_resolve_options.ts";
import {
  withProxy,
  type WorkerApi,
  type WorkerCall,
  type WorkerStream,
} from "./proxy.ts";
import { bindFaults } from "./_faults.ts";
import {
  resolveTracker,
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
import {
  type LimitMechanisms,
  NO_MECHANISMS,
} from "../runtime/sandbox/limits/types.ts";

/** What {@linkcode Session.stats} reports. */
export interface SessionStats extends CallStats, CallMetricsStats {
  /** The current worker's pid, or `undefined` when none runs. */
  pid: number | undefined;
  /** Its resident memory (OS figure) in bytes, when it can be read. */
  rssBytes: number | undefined;
  /** Workers started after the first (restarts, crash recovery, replacements). */
  restarts: number;
  /** Milliseconds the current worker has been running (0 when none). */
  uptimeMs: number;
  /** Calls written to the worker and not yet answered. */
  inFlight: number;
  /** Calls waiting for a worker to be ready. */
  queued: number;
  /** Workers replaced, by cause (`tasks` and `memory` stay 0: they are pool causes). */
  recycledBy: RecycleCounts;
  /**
   * The OS sandbox backends confining the current worker, outermost first
   * (`"bwrap"`, `"landlock"`); empty when none does or none runs.
   */
  sandboxes: readonly SandboxBackend[];
  /**
   * Which mechanism holds each of the current worker's limits (`limits`
   * option): `"cgroup"`, `"rlimit"`, or `"none"` (not asked, or not held
   * here under `enforce: "best-effort"`); every one `"none"` when no worker
   * runs.
   */
  limits: LimitMechanisms;
}

/**
 * A session: one method per handler of the worker (the typed proxy), plus
 * `call`, `stream`, `restart`, `close`, `invalidate`, `pid` and `stats`.
 *
 * @typeParam D The worker module's default export type (`typeof db`).
 */
export type Session<D = unknown> = WorkerApi<D> & {
  /**
   * Calls an op by name.
   *
   * @param op The handler's name.
   * @param args Its arguments.
   * @param options A signal and a deadline for this call.
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
   * Replaces the worker with a genuinely new process (new pid). Calls in
   * flight finish on the old one first; calls made meanwhile wait and run on
   * the new one.
   */
  restart(): Promise<void>;
  /**
   * Stops admitting calls, lets admitted ones finish, asks the worker to
   * exit (then SIGTERM, then SIGKILL after `closeGraceMs` each), and settles
   * once the process is gone. With `{ force: true }`, or once `timeoutMs`
   * (default: the `closeTimeoutMs` option) has passed, calls still queued or
   * running reject with `SessionClosedError` and the worker is killed.
   * Idempotent: a later `close({ force: true })` ends a drain in progress.
   *
   * @param options `force` to end running calls now, `timeoutMs` to bound the drain.
   */
  close(options?: CloseOptions): Promise<void>;
  /** Same as `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
  /**
   * Marks the worker stale: the next call runs on a fresh worker (calls
   * already running finish first). For changes `watch` cannot see, such as
   * an in-place migration that keeps the file's inode.
   */
  invalidate(): void;
  /** The current worker's pid (`undefined` while none runs). */
  readonly pid: number | undefined;
  /**
   * Counters, the current worker's figures, and call timing summaries.
   *
   * @param options `reset: true` starts new timing summaries after this
   *   read (for periodic export); counters are never reset.
   */
  stats(options?: StatsOptions): SessionStats;
};

class SessionCore extends ModeCore implements ConnectionEvents {
  readonly tracker: StateTracker;
  #conn: Connection | undefined;
  #stamp: StateStamp | undefined;
  #starting: Promise<Connection> | undefined;
  #restarting: Promise<void> | undefined;
  #everStarted = false;
  #restarts = 0;

  constructor(
    options: ResolvedWorkerOptions,
    adapter: RuntimeAdapter,
    tracker: StateTracker,
  ) {
    super("session", options, adapter);
    this.tracker = tracker;
  }

  get pid(): number | undefined {
    return this.#conn?.alive ? this.#conn.pid : undefined;
  }

  start(): Promise<Connection> {
    if (this.#starting) return this.#starting;
    const stamp = this.tracker.stamp();
    const starting = launchWorker(this.options, this.adapter, this, "session")
      .then(
        (conn) => {
          this.#stamp = stamp;
          if (this.#everStarted) this.#restarts++;
          this.#everStarted = true;
          this.#starting = undefined;
          this.#adopt(conn);
          return conn;
        },
        (error: unknown) => {
          this.#starting = undefined;
          this.failQueued(error);
          throw error;
        },
      );
    starting.catch(() => {});
    this.#starting = starting;
    return starting;
  }

  #adopt(conn: Connection): void {
    this.#conn = conn;
    this.adopted(conn);
    conn.closed.then((exit) => {
      if (this.#conn === conn) this.#conn = undefined;
      this.exited(exit);
      if (this.queue.length > 0 && !this.#restarting && !this.closing) {
        // Its successor may be serving already (started for a call made
        // while this one was being killed): the calls go there.
        if (this.#conn?.alive) this.#flush();
        else this.start().catch(() => {});
      }
    });
    // Closed with force while it started: it serves nothing.
    if (this.forced) conn.kill(FORCED_REASON, true);
    else if (!this.#restarting) this.#flush();
  }

  #flush(): void {
    const conn = this.#conn;
    if (!conn || !conn.alive) return;
    const queued = this.queue;
    this.queue = [];
    for (const call of queued) {
      if (!call.settled) this.send(conn, call);
    }
  }

  protected override connections(): Iterable<Connection> {
    return this.#conn ? [this.#conn] : [];
  }

  protected override canRetry(): boolean {
    return !this.closing;
  }

  protected override admit(call: PendingCall): void {
    const conn = this.#conn;
    if (conn?.checking) {
      // A call timed out and the worker's liveness is being checked: the
      // call waits for the verdict (this worker, or a fresh one).
      this.queue.push(call);
      return;
    }
    if (conn && conn.alive && !this.#restarting && !conn.stopping) {
      const cause = this.tracker.active && this.#stamp
        ? this.tracker.staleness(this.#stamp, this.tracker.stamp())
        : undefined;
      if (!cause) {
        this.send(conn, call);
        return;
      }
      this.recycle(cause, conn.pid);
      this.queue.push(call);
      this.#replace().catch(() => {});
      return;
    }
    this.queue.push(call);
    if (!this.#restarting && !this.#starting) this.start().catch(() => {});
  }

  onLost(
    calls: CallRecord[],
    exit: ConnectionExit,
    unstarted: ReadonlySet<CallRecord>,
  ): void {
    this.queue.push(...this.lost(calls, exit, unstarted));
  }

  /**
   * The liveness check after a timeout ended: a worker that answered takes
   * the calls that waited; a wedged one is being killed, and a fresh one
   * starts now for them.
   *
   * @param alive Whether the worker answered.
   */
  onLiveness(alive: boolean): void {
    if (alive) {
      if (!this.#restarting) this.#flush();
      return;
    }
    if (this.queue.length > 0 && !this.#restarting && !this.closing) {
      this.start().catch(() => {});
    }
  }

  restart(): Promise<void> {
    if (this.closing) return Promise.reject(this.closedError("restart"));
    return this.#replace();
  }

  invalidate(): void {
    this.tracker.invalidate();
  }

  /** Replaces the worker once its calls in flight finish; queued calls run on the new one. */
  #replace(): Promise<void> {
    if (this.#restarting) return this.#restarting;
    const restarting = (async () => {
      try {
        const old = this.#conn ?? await this.#starting?.catch(() => undefined);
        if (old) {
          await old.idle();
          await old.shutdown(this.options.closeGraceMs);
          if (this.#conn === old) this.#conn = undefined;
        }
        // A start may have begun meanwhile (crash recovery); take it.
        const next = this.#starting ?? this.start();
        await next;
      } finally {
        this.#restarting = undefined;
      }
      this.#flush();
    })();
    this.#restarting = restarting;
    return restarting;
  }

  protected override async drainAndStop(): Promise<void> {
    await this.#restarting?.catch(() => {});
    await this.#starting?.catch(() => {});
    this.#flush();
    const conn = this.#conn;
    if (conn) {
      await conn.idle();
      await conn.shutdown(this.options.closeGraceMs);
      await this.gone(conn);
    }
    const queued = this.queue;
    this.queue = [];
    for (const call of queued) call.reject(this.closedError(call.op));
  }

  stats(options?: StatsOptions): SessionStats {
    const conn = this.#conn?.alive ? this.#conn : undefined;
    const counters = this.callStats();
    return {
      pid: conn?.pid,
      rssBytes: conn?.rssBytes(),
      ...counters,
      restarts: this.#restarts,
      uptimeMs: conn ? Date.now() - conn.startedAt : 0,
      inFlight: conn?.inFlight ?? 0,
      queued: this.queue.length,
      recycledBy: this.recycleStats(),
      sandboxes: conn?.sandboxes ?? [],
      limits: conn?.limits ?? NO_MECHANISMS,
      ...this.metricsStats(options?.reset === true),
    };
  }
}

/**
 * Starts a long-lived worker process and resolves once it is ready (its
 * `setup` calls done). Calls run concurrently; each settles exactly once. A
 * crashed worker fails its calls with `WorkerCrashedError` and is replaced on
 * the next call, with `setup` replayed.
 *
 * @typeParam D The worker module's default export type (`typeof db` with
 *   `import type db from "./workers/db.ts"`), for the typed proxy.
 * @param module The worker module: a `URL`, a URL string, or a path.
 * @param options Runtime, permissions, environment, deadlines, setup.
 * @returns The session: the typed proxy plus `call`, `restart`, `close`,
 *   `pid`, `stats`.
 * @throws {TypeError} when an option is invalid or the module does not exist (before anything spawns).
 * @throws {RangeError} when a number option is out of range.
 * @throws {WorkerStartError} when the worker cannot start.
 * @throws {WorkerTimeoutError} when it is not ready within `startTimeoutMs`.
 *
 * @example Run a worker and call it
 * ```ts
 * import { session } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * // The worker module: in an app, a file such as ./workers/counter.ts.
 * const counter = `data:text/typescript,${encodeURIComponent(`
 *   import { defineWorker } from "${import.meta.resolve("@airlock/airlock/worker")}";
 *   let count = 0; // process-level state, kept between calls
 *   export default defineWorker({ increment: (by: number) => (count += by) });
 * `)}`;
 *
 * await using s = await session(counter, { setup: [["increment", 10]] });
 * assert.equal(await s.call("increment", [1]), 11); // state kept since setup
 * const before = s.pid;
 * await s.restart(); // a new process, setup replayed
 * assert.notEqual(s.pid, before);
 * assert.equal(await s.call("increment", [1]), 11);
 * ```
 */
export async function session<D = unknown>(
  module: string | URL,
  options: SessionOptions<NoInfer<D>> = {},
): Promise<Session<D>> {
  const adapter = detect();
  const resolved = resolveWorkerOptions(
    module,
    options,
    adapter,
    SESSION_OPTION_KEYS,
  );
  const tracker = resolveTracker(
    options,
    resolved.cwd,
    (path) => adapter.pathIdentity(path),
  );
  const core = new SessionCore(resolved, adapter, tracker);
  await core.start();
  const call = (op: string, args: unknown[], callOptions?: CallOptions) =>
    core.call(op, args, callOptions);
  const handleOf = (op: string, args: unknown[], callOptions?: CallOptions) =>
    core.handle(op, args, callOptions);
  const handle = {
    call: call as WorkerCall<D>,
    stream: handleOf as WorkerStream<D>,
    restart: () => core.restart(),
    close: (closeOptions?: CloseOptions) => core.close(closeOptions),
    [Symbol.asyncDispose]: () => core.close(),
    invalidate: () => core.invalidate(),
    get pid() {
      return core.pid;
    },
    stats: (statsOptions?: StatsOptions) => core.stats(statsOptions),
  };
  return bindFaults(withProxy<typeof handle, D>(handle, handleOf), resolved);
}
