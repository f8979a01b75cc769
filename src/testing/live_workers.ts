/**
 * The leak check of the test kit: which worker processes this process
 * started are still alive, and an assertion that none are.
 *
 * @module
 */

import { AssertionError } from "node:assert";
import { registeredWorkers } from "../parent/_registry.ts";

/** A live worker process started by this process. */
export interface LiveWorker {
  /** Its pid (the worker's own inside any sandbox, once it is ready). */
  readonly pid: number;
  /** Its module (or command), as error messages name it. */
  readonly module: string;
}

/**
 * The worker processes this process started (through sessions, pools and
 * one-shot calls) that are still alive, oldest first. A worker leaves the
 * list once airlock has seen its process end: after `close()` of its session
 * or pool resolves, or after a one-shot call settles.
 *
 * @returns The live workers, `{ pid, module }` each.
 *
 * @example No worker is running
 * ```ts
 * import { liveWorkers } from "./live_workers.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(liveWorkers(), []);
 * ```
 */
export function liveWorkers(): LiveWorker[] {
  return registeredWorkers().map((worker) => ({
    pid: worker.pid,
    module: worker.module,
  }));
}

function describeWorkers(workers: readonly LiveWorker[]): string {
  return workers.map((w) => `pid ${w.pid} ("${w.module}")`).join(", ");
}

/**
 * Throws when a worker process started by this process is still alive,
 * naming each by pid and module. Call it at the end of a test, after the
 * scope that holds its sessions and pools (or in `bun:test`'s `afterEach`;
 * Deno ignores failing `afterEach` hooks of `node:test`): Deno's resource
 * sanitizers are off by default since Deno 2.8, and Bun has none, so a
 * session or pool left open would otherwise go unnoticed.
 *
 * @throws {AssertionError} when workers are alive; its `actual` is the list
 * of {@linkcode LiveWorker}s.
 *
 * @example
 * ```ts
 * import { assertNoWorkers } from "./live_workers.ts";
 *
 * assertNoWorkers(); // nothing was started here
 * ```
 */
export function assertNoWorkers(): void {
  const workers = liveWorkers();
  if (workers.length === 0) return;
  throw new AssertionError({
    message: `${workers.length} airlock worker${
      workers.length === 1 ? " is" : "s are"
    } still running: ${
      describeWorkers(workers)
    }; close every session and pool (await using, or close() in finally) before the test ends`,
    actual: workers,
    expected: [],
    operator: "deepStrictEqual",
  });
}

/**
 * Waits until no worker process started by this process is alive (for
 * exits already under way), then resolves; rejects like
 * {@linkcode assertNoWorkers} if some are still alive after `timeoutMs`.
 *
 * @param timeoutMs How long to wait, in ms.
 * @returns Once none is alive.
 * @throws {AssertionError} when workers are still alive at the deadline.
 *
 * @example
 * ```ts
 * import { workersGone } from "./live_workers.ts";
 *
 * await workersGone(1_000);
 * ```
 */
export async function workersGone(timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (registeredWorkers().length > 0 && Date.now() < end) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assertNoWorkers();
}
