/**
 * Fault injection for tests of code that uses airlock: crash a session's or
 * pool's worker with a chosen signal, make its next starts fail, hold back
 * its answers; so the recovery paths of an application can be tested
 * without a worker written to misbehave.
 *
 * @module
 */

import { faultsOf, type FaultState } from "../parent/_faults.ts";
import {
  isLocalWorker,
  type RegisteredWorker,
  registeredWorkers,
} from "../parent/_registry.ts";
import { signalProcess } from "../runtime/proc.ts";

/** A session or pool (what `session()` resolves to or `pool()` returns). */
export interface FaultTarget {
  /** Its statistics: the pid of a session's worker, or a pool's workers. */
  stats(): {
    pid?: number | undefined;
    perWorker?: readonly { pid: number; running: number }[];
  };
}

function stateOf(target: FaultTarget, what: string): FaultState {
  const state = typeof target === "object" && target !== null
    ? faultsOf(target)
    : undefined;
  if (state === undefined) {
    throw new TypeError(
      `Cannot ${what}: expected a session or a pool of @airlock/airlock, received ${
        target === null ? "null" : typeof target
      }`,
    );
  }
  return state;
}

/** Options of {@linkcode crashWorker}. */
export interface CrashWorkerOptions {
  /**
   * The signal to send, by name. A signal the runtime handles does not end
   * the worker (Deno handles `SIGSEGV` and `SIGBUS` itself): use `SIGABRT`
   * for a native crash. What the worker writes from the signal on (Bun's
   * crash report, about 20 lines on `SIGABRT`) is kept out of its log
   * (`onStderr`) and stays in the crash error's `stderrTail`.
   *
   * @default {"SIGKILL"}
   */
  signal?: string;
  /**
   * Which of a pool's workers (by pid). A session has one.
   *
   * @default a busy worker, else the oldest
   */
  pid?: number;
  /**
   * How long to wait for airlock to see the process end, in ms.
   *
   * @default {10000}
   */
  timeoutMs?: number;
}

/**
 * Sends a worker of a session or pool a signal, as if it had crashed (or
 * been killed from outside), and resolves once airlock has seen the process
 * end: its calls in flight fail with `WorkerCrashedError` (idempotent ones
 * are retried), and the next call runs on a new worker.
 *
 * @param target The session or pool.
 * @param options The signal, which worker, and how long to wait.
 * @returns The pid of the worker that was signalled.
 * @throws {TypeError} when `target` is not a session or pool.
 * @throws {Error} when it has no running worker, the pid is not one of its
 * workers, the worker runs through a `launcher` (its pid is not on this
 * machine), or its process did not end within `timeoutMs`.
 *
 * @example Test that an application survives a worker crash
 * ```ts ignore
 * import { session, WorkerCrashedError } from "@airlock/airlock";
 * import { crashWorker } from "@airlock/airlock/testing";
 * import assert from "node:assert/strict";
 *
 * await using db = await session(new URL("./db_worker.ts", import.meta.url));
 * const pending = db.call("slowQuery", []);
 * const pid = await crashWorker(db, { signal: "SIGABRT" });
 * await assert.rejects(pending, WorkerCrashedError);
 * assert.notEqual(await db.call("pid", []), pid); // a new worker answers
 * ```
 */
export async function crashWorker(
  target: FaultTarget,
  options: CrashWorkerOptions = {},
): Promise<number> {
  stateOf(target, "crash a worker");
  const signal = options.signal ?? "SIGKILL";
  const timeoutMs = options.timeoutMs ?? 10_000;
  const stats = target.stats();
  const workers = stats.perWorker ??
    (stats.pid === undefined ? [] : [{ pid: stats.pid, running: 0 }]);
  let pid: number | undefined;
  if (options.pid !== undefined) {
    if (!workers.some((worker) => worker.pid === options.pid)) {
      throw new Error(
        `Cannot crash worker ${options.pid}: it is not one of this pool's workers (${
          workers.map((worker) => worker.pid).join(", ") || "none"
        })`,
      );
    }
    pid = options.pid;
  } else {
    pid = (workers.find((worker) => worker.running > 0) ?? workers[0])?.pid;
  }
  if (pid === undefined) {
    throw new Error(
      "Cannot crash a worker: none is running (make a call first, or use prewarm)",
    );
  }
  const entry = registeredWorkers().find((worker) => worker.pid === pid);
  if (entry !== undefined && isLocalWorker(entry) === false) {
    throw new Error(
      `Cannot crash worker ${pid}: it runs through a launcher, and its pid is not a process of this machine`,
    );
  }
  // What the runtime writes as it dies (Bun's crash report on SIGABRT) is
  // not the test's output: kept in the error's stderrTail, not logged.
  entry?.quietLog?.();
  signalProcess(pid, signal);
  if (entry !== undefined) await gone(entry, pid, timeoutMs);
  return pid;
}

async function gone(
  entry: RegisteredWorker,
  pid: number,
  timeoutMs: number,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (isLocalWorker(entry) !== undefined) {
    if (Date.now() > end) {
      throw new Error(
        `Cannot crash worker ${pid}: its process did not end within ${timeoutMs} ms (a signal it handles or ignores?)`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/**
 * Makes the next `count` worker starts of a session or pool fail, as a
 * worker that dies before it is ready: each failed start uses one of the
 * start's attempts (`maxRetries` + 1), so with `count` up to `maxRetries`
 * the start recovers, and with more it fails with `WorkerStartError`.
 *
 * @param target The session or pool.
 * @param count How many starts fail (0 cancels what is left).
 * @throws {TypeError} when `target` is not a session or pool.
 * @throws {RangeError} when `count` is not a whole number.
 *
 * @example Test what an application does when its worker cannot start
 * ```ts ignore
 * import { pool, WorkerStartError } from "@airlock/airlock";
 * import { failNextStart } from "@airlock/airlock/testing";
 * import assert from "node:assert/strict";
 *
 * await using p = pool(new URL("./embed_worker.ts", import.meta.url), { maxRetries: 0 });
 * failNextStart(p);
 * await assert.rejects(p.call("embed", ["text"]), WorkerStartError);
 * await p.call("embed", ["text"]); // the next start works
 * ```
 */
export function failNextStart(target: FaultTarget, count = 1): void {
  const state = stateOf(target, "fail the next start");
  if (!Number.isSafeInteger(count) || count < 0) {
    throw new RangeError(
      `Invalid count: expected a whole number of starts, received ${count}`,
    );
  }
  state.startFailures = count;
}

/**
 * Holds back every message the workers of a session or pool send (answers,
 * streamed values, progress) by `ms`, as a slow worker would, so deadlines
 * and the application's handling of slowness can be tested. Applies to the
 * running workers and to those started later; `0` ends it.
 *
 * @param target The session or pool.
 * @param ms The delay in ms.
 * @throws {TypeError} when `target` is not a session or pool.
 * @throws {RangeError} when `ms` is negative or not finite.
 *
 * @example A call that now passes its deadline
 * ```ts ignore
 * import { session, WorkerTimeoutError } from "@airlock/airlock";
 * import { delayAnswers } from "@airlock/airlock/testing";
 * import assert from "node:assert/strict";
 *
 * await using s = await session(new URL("./worker.ts", import.meta.url));
 * delayAnswers(s, 500);
 * await assert.rejects(s.call("add", [1, 2], { timeoutMs: 100 }), WorkerTimeoutError);
 * delayAnswers(s, 0);
 * ```
 */
export function delayAnswers(target: FaultTarget, ms: number): void {
  const state = stateOf(target, "delay answers");
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new RangeError(
      `Invalid delay: expected a number of milliseconds, 0 or more, received ${ms}`,
    );
  }
  state.answerDelayMs = ms;
}

/**
 * Clears every fault set on a session or pool (starts to fail, delays).
 *
 * @param target The session or pool.
 * @throws {TypeError} when `target` is not a session or pool.
 */
export function clearFaults(target: FaultTarget): void {
  const state = stateOf(target, "clear faults");
  state.startFailures = 0;
  state.answerDelayMs = 0;
}
