/**
 * `session`: one long-lived worker process with concurrent calls, per-call
 * deadlines, cancellation, crash recovery with `setup` replay, a real
 * `restart()` and a draining `close()`.
 *
 * @module
 */

import { SessionClosedError } from "../errors.ts";
import { detect } from "../runtime/detect.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import {
  type CallRecord,
  type Connection,
  type ConnectionEvents,
  type ConnectionExit,
  crashError,
} from "./connection.ts";
import { onCallAbort, type PendingCall, prepareCall } from "./_call.ts";
import { launchWorker } from "./_launch.ts";
import {
  type CallOptions,
  type ResolvedWorkerOptions,
  resolveWorkerOptions,
  type WorkerOptions,
} from "./options.ts";
import { withProxy, type WorkerApi, type WorkerCall } from "./proxy.ts";
import {
  type RecycleCounts,
  resolveTracker,
  STATE_OPTION_KEYS,
  type StateOptions,
  type StateStamp,
  type StateTracker,
} from "./state_scope.ts";

/** Options of {@linkcode session}. */
export interface SessionOptions extends WorkerOptions, StateOptions {}

/** What {@linkcode Session.stats} reports. */
export interface SessionStats {
  /** The current worker's pid, or `undefined` when none runs. */
  pid: number | undefined;
  /** Its resident memory (OS figure) in bytes, when it can be read. */
  rssBytes: number | undefined;
  /** Calls admitted since the session opened. */
  calls: number;
  /** Calls that settled with a value. */
  completed: number;
  /** Calls that settled with an error (remote, timeout, crash, cancel). */
  failures: number;
  /** Workers started after the first (restarts, crash recovery, replacements). */
  restarts: number;
  /** Workers that exited without being asked to. */
  crashes: number;
  /** Calls that passed their deadline. */
  timeouts: number;
  /** Milliseconds the current worker has been running (0 when none). */
  uptimeMs: number;
  /** Calls written to the worker and not yet answered. */
  inFlight: number;
  /** Calls waiting for a worker to be ready. */
  queued: number;
  /** Workers replaced, by cause (`tasks` and `memory` stay 0: they are pool causes). */
  recycledBy: RecycleCounts;
}

/** The control surface of a session, beside the typed proxy. */
export interface SessionHandle<D = unknown> {
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
   * Replaces the worker with a genuinely new process (new pid). Calls in
   * flight finish on the old one first; calls made meanwhile wait and run on
   * the new one.
   */
  restart(): Promise<void>;
  /**
   * Stops admitting calls, lets admitted ones finish, asks the worker to
   * exit (then SIGTERM, then SIGKILL after `closeGraceMs` each), and settles
   * once the process is gone. Idempotent.
   */
  close(): Promise<void>;
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
  /** Counters and the current worker's figures. */
  stats(): SessionStats;
}

/** A session: the control surface plus one method per handler. */
export type Session<D = unknown> = SessionHandle<D> & WorkerApi<D>;

class SessionCore implements ConnectionEvents {
  readonly options: ResolvedWorkerOptions;
  readonly adapter: RuntimeAdapter;
  readonly tracker: StateTracker;
  #conn: Connection | undefined;
  #stamp: StateStamp | undefined;
  #recycled: RecycleCounts = {
    tasks: 0,
    memory: 0,
    watch: 0,
    invalidate: 0,
    crash: 0,
  };
  #starting: Promise<Connection> | undefined;
  #restarting: Promise<void> | undefined;
  #queue: PendingCall[] = [];
  #closing: Promise<void> | undefined;
  #everStarted = false;
  #stats = {
    calls: 0,
    completed: 0,
    failures: 0,
    restarts: 0,
    crashes: 0,
    timeouts: 0,
  };

  constructor(
    options: ResolvedWorkerOptions,
    adapter: RuntimeAdapter,
    tracker: StateTracker,
  ) {
    this.options = options;
    this.adapter = adapter;
    this.tracker = tracker;
  }

  get pid(): number | undefined {
    return this.#conn?.alive ? this.#conn.pid : undefined;
  }

  start(): Promise<Connection> {
    if (this.#starting) return this.#starting;
    const stamp = this.tracker.stamp();
    const starting = launchWorker(this.options, this.adapter, this).then(
      (conn) => {
        this.#stamp = stamp;
        if (this.#everStarted) this.#stats.restarts++;
        this.#everStarted = true;
        this.#starting = undefined;
        this.#adopt(conn);
        return conn;
      },
      (error: unknown) => {
        this.#starting = undefined;
        const queued = this.#queue;
        this.#queue = [];
        for (const call of queued) call.reject(error);
        throw error;
      },
    );
    starting.catch(() => {});
    this.#starting = starting;
    return starting;
  }

  #adopt(conn: Connection): void {
    this.#conn = conn;
    conn.closed.then((exit) => {
      if (this.#conn === conn) this.#conn = undefined;
      if (!exit.requested) {
        this.#stats.crashes++;
        this.#recycled.crash++;
      }
      if (this.#queue.length > 0 && !this.#restarting && !this.#closing) {
        this.start().catch(() => {});
      }
    });
    if (!this.#restarting) this.#flush();
  }

  #flush(): void {
    const conn = this.#conn;
    if (!conn || !conn.alive) return;
    const queued = this.#queue;
    this.#queue = [];
    for (const call of queued) {
      if (!call.settled) conn.send(call);
    }
  }

  call(op: string, args: unknown[], options?: CallOptions): Promise<unknown> {
    if (this.#closing) {
      return Promise.reject(
        new SessionClosedError({ module: this.options.label, op }),
      );
    }
    let call: PendingCall;
    try {
      call = prepareCall(op, args, options, this.options);
    } catch (error: unknown) {
      return Promise.reject(error);
    }
    this.#stats.calls++;
    call.promise.then(
      () => this.#stats.completed++,
      () => this.#stats.failures++,
    );
    onCallAbort(call, () => this.#abort(call));
    if (!call.settled) this.#dispatch(call);
    return call.promise;
  }

  #abort(call: PendingCall): void {
    const reason = call.signal?.reason;
    const index = this.#queue.indexOf(call);
    if (index !== -1) {
      this.#queue.splice(index, 1);
      call.reject(reason);
      return;
    }
    if (this.#conn?.cancel(call, reason)) return;
    call.reject(reason);
  }

  #dispatch(call: PendingCall): void {
    const conn = this.#conn;
    if (conn && conn.alive && !this.#restarting && !conn.stopping) {
      const cause = this.tracker.active && this.#stamp
        ? this.tracker.staleness(this.#stamp, this.tracker.stamp())
        : undefined;
      if (!cause) {
        conn.send(call);
        return;
      }
      this.#recycled[cause]++;
      this.#queue.push(call);
      this.#replace().catch(() => {});
      return;
    }
    this.#queue.push(call);
    if (!this.#restarting && !this.#starting) this.start().catch(() => {});
  }

  onLost(calls: CallRecord[], exit: ConnectionExit): void {
    const conn = this.#conn;
    for (const record of calls) {
      const call = record as PendingCall;
      if (call.settled) continue;
      const idempotent = call.idempotent ||
        (conn?.hello?.idempotent.includes(call.op) ?? false);
      if (
        idempotent && call.attempts <= this.options.maxRetries && !this.#closing
      ) {
        this.#queue.push(call);
      } else {
        call.reject(crashError(this.options.label, call, exit));
      }
    }
  }

  onTimeout(): void {
    this.#stats.timeouts++;
  }

  restart(): Promise<void> {
    if (this.#closing) {
      return Promise.reject(
        new SessionClosedError({ module: this.options.label, op: "restart" }),
      );
    }
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

  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    const closing = (async () => {
      await this.#restarting?.catch(() => {});
      await this.#starting?.catch(() => {});
      this.#flush();
      const conn = this.#conn;
      if (conn) {
        await conn.idle();
        await conn.shutdown(this.options.closeGraceMs);
      }
      const queued = this.#queue;
      this.#queue = [];
      for (const call of queued) {
        call.reject(
          new SessionClosedError({ module: this.options.label, op: call.op }),
        );
      }
    })();
    this.#closing = closing;
    return closing;
  }

  stats(): SessionStats {
    const conn = this.#conn?.alive ? this.#conn : undefined;
    return {
      pid: conn?.pid,
      rssBytes: conn?.rssBytes(),
      ...this.#stats,
      uptimeMs: conn ? Date.now() - conn.startedAt : 0,
      inFlight: conn?.inFlight ?? 0,
      queued: this.#queue.length,
      recycledBy: { ...this.#recycled },
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
 * ```ts ignore
 * import { session } from "@airlock/airlock";
 * import type db from "./workers/db.ts";
 *
 * await using s = await session<typeof db>(new URL("./workers/db.ts", import.meta.url), {
 *   permissions: { read: ["./data"], write: ["./data"] },
 *   setup: [["open", "./data/app.db"]],
 * });
 * const rows = await s.query("select 1");
 * await s.restart(); // a new process, setup replayed
 * ```
 */
export async function session<D = unknown>(
  module: string | URL,
  options: SessionOptions = {},
): Promise<Session<D>> {
  const adapter = detect();
  const resolved = resolveWorkerOptions(
    module,
    options,
    adapter,
    STATE_OPTION_KEYS,
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
  const handle: SessionHandle<D> = {
    call: call as WorkerCall<D>,
    restart: () => core.restart(),
    close: () => core.close(),
    [Symbol.asyncDispose]: () => core.close(),
    invalidate: () => core.invalidate(),
    get pid() {
      return core.pid;
    },
    stats: () => core.stats(),
  };
  return withProxy<SessionHandle<D>, D>(handle, call);
}
