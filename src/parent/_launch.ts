/**
 * Starting a worker: spawn, ready handshake, `setup` replay, and respawns
 * after a crash during start, bounded by `maxRetries` with a short backoff.
 * Shared by sessions, one-shot calls and pools. Private to src/parent.
 *
 * The launch code (src/runtime/launch/, the OS sandbox and confinement
 * builders, the code cache, the Bun entry) and the connection to a worker
 * (connection.ts) are loaded on the first start, not when airlock is
 * imported: a program that imports airlock and never starts a worker does
 * not pay for it (tests/runtime/import_graph_test.ts).
 *
 * @module
 */

import {
  RemoteError,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../errors.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { WorkerCommand } from "../runtime/launch/types.ts";
import type { CallRecord, Connection, ConnectionEvents } from "./connection.ts";
import { crashError } from "./_exit.ts";
import { createCall } from "./_call.ts";
import { startFault } from "./_faults.ts";
import type { ResolvedWorkerOptions } from "./options.ts";
import { publishExit, publishStart, type WorkerMode } from "./_events.ts";

/**
 * The launch code and the connection a start needs, loaded once, on the
 * first start.
 */
interface LaunchCode {
  readonly buildWorkerCommand:
    typeof import("../runtime/launch/command.ts").buildWorkerCommand;
  readonly wrapperFailure:
    typeof import("../runtime/launch/exit.ts").wrapperFailure;
  readonly warmUpCodeCache:
    typeof import("../runtime/launch/warm_up.ts").warmUpCodeCache;
  readonly startConnection: typeof import("./connection.ts").startConnection;
}

let launchCode: LaunchCode | undefined;
let launchCodeLoading: Promise<LaunchCode> | undefined;

/**
 * Loads the launch code (once; later starts get it without waiting). The
 * specifiers are literal, so `deno compile`, `deno publish` and Bun's
 * bundler still see these modules in the graph.
 */
function loadLaunchCode(): Promise<LaunchCode> {
  launchCodeLoading ??= Promise.all([
    import("../runtime/launch/command.ts"),
    import("../runtime/launch/exit.ts"),
    import("../runtime/launch/warm_up.ts"),
    import("./connection.ts"),
  ]).then(([command, exit, warmUp, connection]) =>
    launchCode = {
      buildWorkerCommand: command.buildWorkerCommand,
      wrapperFailure: exit.wrapperFailure,
      warmUpCodeCache: warmUp.warmUpCodeCache,
      startConnection: connection.startConnection,
    }
  );
  return launchCodeLoading;
}

/** Backoff before respawn number n (1-based), in ms. */
function backoffMs(attempt: number): number {
  return Math.min(1_000, 50 * 4 ** (attempt - 1));
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Events routed to whoever owns the connection now. */
export interface RoutedEvents extends ConnectionEvents {
  /** Replaces the target of the events. */
  route(target: ConnectionEvents): void;
}

/**
 * Events that go to a target that can be swapped once the start is done.
 *
 * @param initial Where events go first.
 * @returns The routed events.
 */
export function routedEvents(initial: ConnectionEvents): RoutedEvents {
  let target = initial;
  return {
    onLost: (calls, exit, unstarted) => target.onLost(calls, exit, unstarted),
    onTimeout: (call) => target.onTimeout(call),
    onSlotFree: () => target.onSlotFree?.(),
    onStarted: (call) => target.onStarted?.(call),
    route(next) {
      target = next;
    },
  };
}

/** Events during start: setup calls lost in a crash fail with the crash. */
function startEvents(module: string): ConnectionEvents {
  return {
    onLost(calls: CallRecord[], exit) {
      for (const call of calls) call.reject(crashError(module, call, exit));
    },
    onTimeout() {},
  };
}

/**
 * Failures a respawn would repeat (and a start that used up its whole
 * deadline: retrying would multiply the wait the caller asked for).
 */
function isFinal(error: unknown, code: LaunchCode): boolean {
  return error instanceof WorkerTimeoutError ||
    (error instanceof WorkerStartError &&
      (error.failure === "import" || error.failure === "definition" ||
        error.failure === "spawn" || error.failure === "setup" ||
        // A wrapper (bubblewrap, setpriv, the Landlock step) that could not
        // start the worker fails the same way again: spawn-class.
        (error.failure === "exited" &&
          code.wrapperFailure(error.stderrTail ?? "") !== undefined)));
}

/**
 * Replays `setup` on a ready worker. The steps share the start's deadline,
 * `startTimeoutMs`, counted from `since` (the spawn, or for a one-shot spare
 * the moment it was taken).
 *
 * @param conn The ready worker.
 * @param options The resolved options.
 * @param since When the start's deadline began (ms since the epoch).
 * @throws {WorkerStartError} when a setup call fails (`failure: "setup"`).
 * @throws {WorkerTimeoutError} when setup passes `startTimeoutMs`.
 * @throws {WorkerCrashedError} when the worker dies during a setup call.
 */
export async function runSetup(
  conn: Connection,
  options: ResolvedWorkerOptions,
  since: number,
): Promise<void> {
  for (const [op, ...args] of options.setup) {
    // Setup shares the start's deadline: startTimeoutMs bounds the whole
    // start, not each step.
    const left = options.startTimeoutMs === 0
      ? 0
      : Math.max(1, options.startTimeoutMs - (Date.now() - since));
    const call = createCall(op, args, left, undefined, false);
    conn.send(call);
    try {
      await call.promise;
    } catch (error: unknown) {
      if (error instanceof WorkerTimeoutError) {
        throw new WorkerTimeoutError({
          module: options.label,
          pid: conn.pid,
          timeoutMs: options.startTimeoutMs,
          elapsedMs: Date.now() - since,
          phase: "start",
          cause: error,
        });
      }
      if (error instanceof RemoteError) {
        throw new WorkerStartError({
          module: options.label,
          failure: "setup",
          pid: conn.pid,
          detail: `setup call "${op}" failed: ${error.name}: ${error.message}${
            error.hint ? ` (hint: ${error.hint})` : ""
          }`,
          stderrTail: conn.stderrTail,
          cause: error,
        });
      }
      throw error;
    }
  }
}

/**
 * What a failed start rejects with: timeouts and start errors as they are, a
 * crash during setup as a `WorkerStartError` (`failure: "exited"`), anything
 * else as a setup failure.
 *
 * @param error What the start threw.
 * @param options The resolved options.
 * @param conn The worker that failed.
 * @returns The error.
 */
export function asStartError(
  error: unknown,
  options: ResolvedWorkerOptions,
  conn: Connection,
): Error {
  return error instanceof WorkerTimeoutError ||
      error instanceof WorkerStartError
    ? error
    : error instanceof WorkerCrashedError
    ? new WorkerStartError({
      module: options.label,
      failure: "exited",
      pid: error.pid,
      exitCode: error.exitCode,
      signal: error.signal,
      detail: `it died during setup call "${error.op}"`,
      stderrTail: error.stderrTail,
      cause: error,
    })
    : new WorkerStartError({
      module: options.label,
      failure: "setup",
      pid: conn.pid,
      detail: `setup failed: ${
        error instanceof Error ? error.message : String(error)
      }`,
      stderrTail: conn.stderrTail,
      cause: error,
    });
}

/**
 * Publishes a ready worker's start and, later, its exit (each only if
 * someone listens then).
 *
 * @param conn The ready worker.
 * @param module The worker module.
 * @param mode The kind of handle it serves.
 */
function published(conn: Connection, module: string, mode: WorkerMode): void {
  publishStart(() => ({
    pid: conn.pid,
    module,
    mode,
    startedAt: conn.startedAt,
    startMs: Date.now() - conn.startedAt,
    runtime: conn.hello?.runtime ?? "",
    sandboxes: conn.sandboxes,
  }));
  conn.closed.then((exit) =>
    publishExit(() => ({
      pid: exit.pid,
      module,
      mode,
      exitCode: exit.code,
      signal: exit.signal,
      requested: exit.requested,
      reason: exit.reason,
      uptimeMs: Date.now() - conn.startedAt,
    }))
  );
}

/**
 * Starts a worker, replays `setup`, and respawns after crashes during start
 * up to `maxRetries` times. Import, definition and setup errors are not
 * retried: they would fail the same way again. A sandboxed Deno worker's
 * private code cache is warmed first (asynchronously, once per module and
 * process: launch/warm_up.ts), the wait bounded by `startTimeoutMs`.
 *
 * @param options The resolved options.
 * @param adapter The parent's runtime.
 * @param events Where the connection's events go once started.
 * @param mode The kind of handle it serves, for the start and exit events.
 * @param signal The caller's abort: stops the wait for the warm-up.
 * @returns The ready connection.
 * @throws {WorkerStartError} when it cannot start.
 * @throws {WorkerTimeoutError} when the start passes `startTimeoutMs` on every attempt
 *   (or while waiting for the code cache's warm-up).
 */
export async function launchWorker(
  options: ResolvedWorkerOptions,
  adapter: RuntimeAdapter,
  events: ConnectionEvents,
  mode: WorkerMode,
  signal?: AbortSignal,
): Promise<Connection> {
  let lastError: unknown;
  const attempts = options.maxRetries + 1;
  const since = Date.now();
  const code = launchCode ?? await loadLaunchCode();
  let first: WorkerCommand | undefined = code.buildWorkerCommand(
    options,
    adapter,
  );
  if (
    !(await code.warmUpCodeCache(
      options,
      adapter,
      first,
      options.startTimeoutMs,
      signal,
    ))
  ) {
    // A module that hangs at import (or a machine too loaded): the worker
    // would not be ready either.
    throw new WorkerTimeoutError({
      module: options.label,
      pid: undefined,
      timeoutMs: options.startTimeoutMs,
      elapsedMs: Date.now() - since,
      phase: "start",
    });
  }
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (attempt > 1) await delay(backoffMs(attempt - 1));
    const routed = routedEvents(startEvents(options.label));
    const command = first ?? code.buildWorkerCommand(options, adapter);
    first = undefined;
    const conn = code.startConnection({
      adapter,
      command,
      maxFrameBytes: options.maxFrameBytes,
      startTimeoutMs: options.startTimeoutMs,
      cancelGraceMs: options.cancelGraceMs,
      onLog: options.onLog,
      events: routed,
      grants: { permissions: options.permissions, cwd: options.cwd },
    });
    if (startFault(options, conn)) {
      conn.kill("its start was made to fail by the test kit (failNextStart)");
    }
    try {
      await conn.ready;
      await runSetup(conn, options, conn.startedAt);
      routed.route(events);
      published(conn, options.label, mode);
      return conn;
    } catch (error: unknown) {
      conn.kill("the start failed", true);
      await conn.closed;
      lastError = asStartError(error, options, conn);
      if (isFinal(lastError, code)) throw lastError;
    }
  }
  if (attempts === 1) throw lastError;
  const last = lastError instanceof Error
    ? lastError.message
    : String(lastError);
  throw new WorkerStartError({
    module: options.label,
    failure: "retries",
    detail:
      `it failed to start ${attempts} times in a row (maxRetries ${options.maxRetries}); last failure: ${last}`,
    cause: lastError,
  });
}
