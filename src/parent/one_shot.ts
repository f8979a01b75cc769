/**
 * `oneShot`: a fresh worker process per call, so every call sees the disk as
 * it is now. The process is shut down after its one call, and the call
 * settles once it is gone (any lock it held is free). With `spares`, that
 * many processes wait started and imported (no `setup` run), one per call.
 *
 * @module
 */

import { detect } from "../runtime/detect.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { Connection, ConnectionEvents } from "./connection.ts";
import type { ConnectionExit } from "./_exit.ts";
import { crashError } from "./_exit.ts";
import type { CallRecord, PendingCall } from "./_call.ts";
import { asStartError, launchWorker, runSetup } from "./_launch.ts";
import { FORCED_REASON, ModeCore, workerGone } from "./_mode.ts";
import {
  type CallOptions,
  type CloseOptions,
  ONE_SHOT_OPTION_KEYS,
  type OneShotOptions,
  type ResolvedWorkerOptions,
} from "./options.ts";
import { resolveSpares, resolveWorkerOptions } from "./_resolve_options.ts";
import {
  resolveTracker,
  type StateStamp,
  type StateTracker,
} from "./state_scope.ts";
import {
  withProxy,
  type WorkerApi,
  type WorkerCall,
  type WorkerStream,
} from "./proxy.ts";

/**
 * A one-shot runner: one method per handler of the worker (the typed
 * proxy), plus `call`, `stream` and `close` (needed only with `spares`).
 *
 * @typeParam D The worker module's default export type (`typeof db`).
 */
export type OneShot<D = unknown> = WorkerApi<D> & {
  /**
   * Runs one op in a fresh worker process.
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
   * Stops the spares and refuses new calls (they reject with
   * `SessionClosedError`, `kind: "oneShot"`); settles once the calls already
   * made have settled and every process, spare or not, is gone. Idempotent.
   * Only needed with `spares` (idle spares do not keep the parent alive, and
   * exit with it). `force: true` (or `closeTimeoutMs` passing) ends the
   * calls still running now: they reject with `SessionClosedError` and
   * their processes are killed.
   *
   * @param options `force` and `timeoutMs`.
   * @returns Settles once every process is gone.
   */
  close(options?: CloseOptions): Promise<void>;
  /** Same as `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
};

/** A process started and imported ahead of a call (`setup` not run). */
interface Spare {
  /** Settles with the ready worker; rejects with why it could not start. */
  readonly ready: Promise<Connection>;
  /** The worker once ready. */
  conn: Connection | undefined;
  /** The watched state when it started. */
  readonly stamp: StateStamp;
  /** Whether a call took it (the call then shuts it down). */
  taken: boolean;
}

/**
 * The spares of one runner: keeps `count` of them started, hands out the
 * oldest current one, discards stale ones, stops them all on close.
 */
class Spares {
  readonly #count: number;
  readonly #options: ResolvedWorkerOptions;
  readonly #adapter: RuntimeAdapter;
  readonly #events: ConnectionEvents;
  readonly #tracker: StateTracker;
  /** Starting or ready, oldest first. */
  #list: Spare[] = [];
  /** Every spare process not known to be gone, for `close()`. */
  readonly #all = new Set<Promise<Connection>>();
  #closed = false;

  constructor(
    count: number,
    options: ResolvedWorkerOptions,
    adapter: RuntimeAdapter,
    events: ConnectionEvents,
    tracker: StateTracker,
  ) {
    this.#count = count;
    this.#options = options;
    this.#adapter = adapter;
    this.#events = events;
    this.#tracker = tracker;
  }

  /** Starts spares until `count` are starting or ready. */
  fill(): void {
    while (!this.#closed && this.#list.length < this.#count) this.#start();
  }

  #start(): void {
    const stamp = this.#tracker.stamp();
    // A spare stops before setup: that runs when a call takes it.
    const ready = launchWorker(
      { ...this.#options, setup: [] },
      this.#adapter,
      this.#events,
      "oneShot",
    );
    const spare: Spare = { ready, conn: undefined, stamp, taken: false };
    this.#list.push(spare);
    this.#all.add(ready);
    ready.then((conn) => {
      spare.conn = conn;
      // A spare that dies while it waits is dropped; the next call starts
      // its replacement (never a respawn loop).
      conn.closed.then(() => {
        this.#drop(spare);
        this.#all.delete(ready);
      });
      if (this.#closed && !spare.taken) {
        void conn.shutdown(this.#options.closeGraceMs);
      }
    }, () => {
      this.#drop(spare);
      this.#all.delete(ready);
    });
  }

  #drop(spare: Spare): void {
    const index = this.#list.indexOf(spare);
    if (index !== -1) this.#list.splice(index, 1);
  }

  /**
   * Takes the oldest spare whose watched state is current, ready ones
   * first; stale ones are stopped.
   *
   * @returns The spare, or `undefined` when none is left.
   */
  take(): Spare | undefined {
    const now = this.#tracker.active ? this.#tracker.stamp() : undefined;
    let taken: Spare | undefined;
    for (const spare of [...this.#list]) {
      if (now && this.#tracker.staleness(spare.stamp, now)) {
        this.#drop(spare);
        spare.ready.then(
          (conn) => void conn.shutdown(this.#options.closeGraceMs),
          () => {},
        );
        continue;
      }
      if (!taken || (spare.conn && !taken.conn)) taken = spare;
    }
    if (taken) {
      this.#drop(taken);
      taken.taken = true;
      // Its call owns it now: the call shuts it down, close() waits for that.
      this.#all.delete(taken.ready);
    }
    return taken;
  }

  /**
   * Stops every spare and starts no more.
   *
   * @returns Settles once their processes are gone.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#list = [];
    const gone = [...this.#all].map(async (ready) => {
      let conn: Connection;
      try {
        conn = await ready;
      } catch {
        return;
      }
      await conn.shutdown(this.#options.closeGraceMs);
      await workerGone(conn, this.#options);
    });
    await Promise.all(gone);
  }
}

/**
 * How long a call that took a spare may run before the spare's replacement
 * starts anyway, in ms (a short call's answer comes first).
 */
const SPARE_REFILL_AFTER_MS = 100;

/**
 * Starts a taken spare's replacement once `over` settles (the call is over
 * and its process gone), in a later task so the caller hears first; or
 * after SPARE_REFILL_AFTER_MS, whichever comes first.
 */
function refillAfter(over: Promise<unknown>, spares: Spares): void {
  const timer = setTimeout(() => spares.fill(), SPARE_REFILL_AFTER_MS);
  (timer as { unref?: () => void }).unref?.();
  const refill = () => {
    clearTimeout(timer);
    setTimeout(() => spares.fill(), 0);
  };
  over.then(refill, refill);
}

/**
 * The core of a one-shot runner: admission, abort, `close()` with `force`
 * and `closeTimeoutMs` come from the shared mode core; a call is placed on
 * a process of its own (a spare, or one started for it), which is shut down
 * right behind it. A call settles once its process is gone, except on
 * abort, which rejects at once.
 */
class OneShotCore extends ModeCore implements ConnectionEvents {
  readonly #spares: Spares | undefined;
  /** The processes running a call now. */
  readonly #running = new Set<Connection>();
  /** Each call's start-call-exit, until it is over. */
  readonly #lifecycles = new Map<PendingCall, Promise<void>>();
  /** Calls made and not yet over (their process gone), for `close()`. */
  readonly #active = new Set<Promise<void>>();

  constructor(
    options: ResolvedWorkerOptions,
    adapter: RuntimeAdapter,
    spareCount: number,
    tracker: StateTracker,
  ) {
    super("oneShot", options, adapter);
    this.#spares = spareCount > 0
      ? new Spares(spareCount, options, adapter, this, tracker)
      : undefined;
    this.#spares?.fill();
  }

  /** A call lost with its process fails with the crash: never retried. */
  onLost(calls: CallRecord[], exit: ConnectionExit): void {
    for (const lost of calls) {
      lost.reject(crashError(this.options.label, lost, exit));
    }
  }

  protected override connections(): Iterable<Connection> {
    return this.#running;
  }

  /**
   * Start, call, shut down: the call goes to a spare or a process started
   * for it, with the shutdown written right behind it.
   */
  protected override admit(call: PendingCall): void {
    const spares = this.#spares;
    const spare = spares?.take();
    // Without a spare, one starts now (beside this call's own process).
    if (!spare) spares?.fill();
    const lifecycle = this.#lifecycle(call, spare);
    this.#lifecycles.set(call, lifecycle);
    this.#active.add(lifecycle);
    lifecycle.finally(() => {
      this.#active.delete(lifecycle);
      this.#lifecycles.delete(call);
    });
    // The replacement of a spare taken starts once this call is over (or
    // has run SPARE_REFILL_AFTER_MS): building and spawning it is
    // synchronous work that would delay writing this call, reading its
    // answer and seeing its process exit.
    if (spare && spares) refillAfter(lifecycle, spares);
  }

  async #lifecycle(call: PendingCall, spare: Spare | undefined): Promise<void> {
    const options = this.options;
    let conn: Connection;
    try {
      conn = spare ? await spare.ready : await launchWorker(
        options,
        this.adapter,
        this,
        "oneShot",
        call.signal,
      );
    } catch (error: unknown) {
      call.reject(error);
      return;
    }
    this.#running.add(conn);
    try {
      if (this.forced) conn.kill(FORCED_REASON, true);
      if (spare && !call.settled) {
        // The spare's setup runs now, under the start's deadline from now.
        try {
          await runSetup(conn, options, Date.now());
        } catch (error: unknown) {
          conn.kill("the start failed", true);
          await conn.closed;
          call.reject(asStartError(error, options, conn));
          return;
        }
      }
      if (!call.settled) {
        this.send(conn, call);
        // The shutdown goes right behind the call: the worker exits once
        // the call is answered (docs/PROTOCOL.md: calls written before a
        // shutdown run and answer).
        conn.endAfterCalls();
      }
      await call.promise.catch(() => {});
      await conn.shutdown(options.closeGraceMs);
    } finally {
      this.#running.delete(conn);
    }
  }

  /**
   * As the caller sees a call settle: once its process is gone, except
   * when it was aborted (at once).
   */
  protected override settledOf(call: PendingCall): Promise<unknown> {
    const lifecycle = this.#lifecycles.get(call);
    if (lifecycle === undefined) return call.promise;
    return call.promise.then(
      async (value) => {
        await lifecycle;
        return value;
      },
      async (error: unknown) => {
        if (!this.aborted(call)) await lifecycle;
        throw error;
      },
    );
  }

  protected override async drainAndStop(): Promise<void> {
    await Promise.all([this.#spares?.close(), ...this.#active]);
  }
}

/**
 * Creates a runner that starts a fresh worker process for every call, runs
 * `setup` and the call, then shuts the process down. Nothing is spawned
 * until the first call; concurrent calls run in parallel processes. No
 * `close()` is needed.
 *
 * With `spares: n`, `n` processes are started and imported at once and kept
 * ready (no `setup` run, no handler called): a call takes one, runs `setup`
 * and its op there, and the process exits as above, while a replacement
 * starts in the background. Module-level code has then run before the call
 * (open clients lazily, in handlers or `setup`); a spare whose `watch` paths
 * or `scope` changed is discarded. `close()` stops the spares.
 *
 * A reply that arrived counts even if the process then dies while exiting
 * (some native clients crash at exit).
 *
 * @typeParam D The worker module's default export type, for the typed proxy.
 * @param module The worker module: a `URL`, a URL string, or a path.
 * @param options Runtime, permissions, environment, deadlines, setup,
 *   spares.
 * @returns The runner.
 * @throws {TypeError} when an option is invalid or the module does not exist.
 * @throws {RangeError} when a number option is out of range.
 *
 * @example Every call runs in a fresh process
 * ```ts
 * import { oneShot } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * // The worker module: in an app, a file such as ./workers/counter.ts.
 * const counter = `data:text/typescript,${encodeURIComponent(`
 *   import { defineWorker } from "${import.meta.resolve("@airlock/airlock/worker")}";
 *   let count = 0; // process-level state: new in every process
 *   export default defineWorker({ increment: (by: number) => (count += by) });
 * `)}`;
 *
 * const fresh = oneShot(counter);
 * assert.equal(await fresh.call("increment", [1]), 1);
 * assert.equal(await fresh.call("increment", [1]), 1); // nothing carried over
 * ```
 */
export function oneShot<D = unknown>(
  module: string | URL,
  options: OneShotOptions<NoInfer<D>> = {},
): OneShot<D> {
  const adapter = detect();
  const resolved = resolveWorkerOptions(
    module,
    options,
    adapter,
    ONE_SHOT_OPTION_KEYS,
  );
  const spareCount = resolveSpares(options);
  const tracker = resolveTracker(
    options,
    resolved.cwd,
    (path) => adapter.pathIdentity(path),
  );
  const core = new OneShotCore(resolved, adapter, spareCount, tracker);
  const call = (op: string, args: unknown[], callOptions?: CallOptions) =>
    core.call(op, args, callOptions);
  const handleOf = (op: string, args: unknown[], callOptions?: CallOptions) =>
    core.handle(op, args, callOptions);
  const close = (closeOptions?: CloseOptions): Promise<void> =>
    core.close(closeOptions);
  const handle = {
    call: call as WorkerCall<D>,
    stream: handleOf as WorkerStream<D>,
    close,
    [Symbol.asyncDispose]: () => close(),
  };
  return withProxy<typeof handle, D>(handle, handleOf);
}
