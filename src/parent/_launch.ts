/**
 * Starting a worker: spawn, ready handshake, `setup` replay, and respawns
 * after a crash during start, bounded by `maxRetries` with a short backoff.
 * Shared by sessions, one-shot calls and pools. Private to src/parent.
 *
 * The start itself (_start_worker.ts, with the launch code:
 * src/runtime/launch/, the OS sandbox in src/runtime/sandbox/, the code
 * cache, the Bun entry, and the connection to a worker) is loaded on the
 * first start, not when airlock is imported: a program that imports airlock
 * and never starts a worker does not pay for it
 * (tests/runtime/import_graph_test.ts). It is imported in parts, one per
 * turn of the event loop. The specifiers are literal, so `deno compile`,
 * `deno publish` and Bun's bundler still include them.
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
import type { Connection, ConnectionEvents } from "./connection.ts";
import { createCall } from "./_call.ts";
import type { ResolvedWorkerOptions } from "./options.ts";
import type { WorkerMode } from "./_events.ts";
import { nextTurn } from "../runtime/turns.ts";

type StartCode = typeof import("./_start_worker.ts");

let startCode: StartCode | undefined;
let startCodeLoading: Promise<StartCode> | undefined;
/**
 * The start code's module graph in parts, in the order it imports them:
 * each part's modules are evaluated in a turn of their own, so the first
 * start's import never holds the event loop long (a whole-graph import is
 * one long block; docs/benchmarks.md, "Figures behind the code").
 */
const START_CODE_PARTS: readonly (() => Promise<unknown>)[] = [
  () => import("../protocol/frame_reader.ts"),
  () => import("../protocol/decode_value.ts"),
  () => import("./connection.ts"),
  () => import("../runtime/sandbox/seccomp.ts"),
  () => import("../runtime/sandbox/landlock.ts"),
  () => import("../runtime/sandbox/plan.ts"),
  () => import("../runtime/sandbox/facts.ts"),
  () => import("../runtime/sandbox/wrappers.ts"),
  () => import("../runtime/sandbox/limits/launch.ts"),
  () => import("../runtime/sandbox/net/broker.ts"),
  () => import("../runtime/launch/executable.ts"),
  () => import("../runtime/launch/deno_command.ts"),
  () => import("../runtime/bun_entry.ts"),
  () => import("../runtime/launch/command.ts"),
];

/** How many of {@linkcode START_CODE_PARTS} are imported (for tests). */
let startCodePartsLoaded = 0;

/** The real import of the start code, part by part. */
async function importStartCodeInParts(): Promise<StartCode> {
  for (const part of START_CODE_PARTS) {
    await part();
    startCodePartsLoaded++;
    await nextTurn();
  }
  return import("./_start_worker.ts");
}

let importStartCode = importStartCodeInParts;

/**
 * Loads the start code once; later starts get it without waiting. A failed
 * load is not remembered: the next start tries again.
 */
function loadStartCode(): Promise<StartCode> {
  startCodeLoading ??= importStartCode().then(
    (loaded) => startCode = loaded,
    (cause) => {
      startCodeLoading = undefined;
      throw cause;
    },
  );
  return startCodeLoading;
}

/**
 * Loads the start code as the first start does (for tests of its import
 * in parts).
 *
 * @returns When it is loaded.
 */
export async function loadStartCodeForTest(): Promise<void> {
  await loadStartCode();
}

/**
 * How many parts of the start code the first start has imported so far
 * (for tests that watch the loop's turns between them).
 *
 * @returns The count.
 */
export function startCodePartsLoadedForTest(): number {
  return startCodePartsLoaded;
}

/**
 * Replaces how the start code is imported, for tests of a damaged install;
 * `undefined` restores the real import (and forgets a loaded copy).
 *
 * @param importer Returns the start code module, or rejects.
 */
export function setStartCodeImporterForTest(
  importer: (() => Promise<StartCode>) | undefined,
): void {
  importStartCode = importer ?? importStartCodeInParts;
  startCode = undefined;
  startCodeLoading = undefined;
}

/** A start code that could not be loaded, as the error of the start. */
function startCodeMissing(
  options: ResolvedWorkerOptions,
  cause: unknown,
): WorkerStartError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new WorkerStartError({
    module: options.label,
    failure: "spawn",
    detail:
      `airlock's own start code (src/parent/_start_worker.ts and the launch code it imports) could not be loaded: ${reason}. ` +
      "The installed package is incomplete or damaged: reinstall @airlock/airlock " +
      "(for a compiled binary, compile it again with airlock's files included).",
    cause,
  });
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
export function launchWorker(
  options: ResolvedWorkerOptions,
  adapter: RuntimeAdapter,
  events: ConnectionEvents,
  mode: WorkerMode,
  signal?: AbortSignal,
): Promise<Connection> {
  // Once loaded, the start begins in this turn, as a direct call would.
  return startCode
    ? startCode.startWorker(options, adapter, events, mode, signal)
    : loadStartCode().then(
      (code) => code.startWorker(options, adapter, events, mode, signal),
      (cause) => {
        throw startCodeMissing(options, cause);
      },
    );
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
    const call = createCall(op, args, {
      timeoutMs: left,
      idempotent: false,
    });
    // A setup call is answered with a value, never a stream.
    call.plain = true;
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
 * Whether a start failed because the parent ran out of file descriptors
 * (EMFILE, ENFILE): a cause that other workers' exits can remove, so a pool
 * serves with the workers it has rather than failing its queue.
 *
 * @param error Why the start failed.
 * @returns Whether descriptors ran out.
 */
export function outOfDescriptors(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === "EMFILE" || code === "ENFILE") return true;
    if (/EMFILE|ENFILE|Too many open files/.test(e.message)) return true;
    e = e.cause;
  }
  return false;
}
