/**
 * The test kit of airlock, for the tests of programs that use it: a leak
 * check for worker processes, a temporary state directory per test, and
 * fault injection (crash a worker with a chosen signal, fail its next start,
 * hold back its answers). Works under `deno test` and `bun test` alike.
 *
 * ```ts ignore
 * import { session } from "@airlock/airlock";
 * import { assertNoWorkers, crashWorker, stateDir } from "@airlock/airlock/testing";
 * import { test } from "node:test";
 * import assert from "node:assert/strict";
 *
 * test("the app recovers from a crashed database worker", async () => {
 *   {
 *     await using dir = stateDir("db");
 *     await using db = await session(new URL("./db_worker.ts", import.meta.url), {
 *       permissions: dir.permissions,
 *       setup: [["open", dir.join("app.db")]],
 *     });
 *     await crashWorker(db, { signal: "SIGABRT" });
 *     assert.equal(await db.call("count", []), 0);
 *   }
 *   assertNoWorkers();
 * });
 * ```
 *
 * See docs/testing.md for both test runners.
 *
 * @module
 */

export {
  assertNoWorkers,
  type LiveWorker,
  liveWorkers,
  workersGone,
} from "./src/testing/live_workers.ts";
export { type StateDir, stateDir } from "./src/testing/state_dir.ts";
export {
  clearFaults,
  crashWorker,
  type CrashWorkerOptions,
  delayAnswers,
  failNextStart,
  type FaultTarget,
} from "./src/testing/faults.ts";
