// oneShot() on the in-memory runtime (tests/_memory_adapter.ts): a fresh
// worker per call, ended when the call settles; parallel calls in parallel
// workers; setup before the call; typed errors; start failures and
// deadlines, without processes. What needs processes (the disk as it is
// now, locks, real exits) stays in one_shot_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  oneShot,
  RemoteError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
import { defineWorker } from "../../worker.ts";
import type memory from "../fixtures/memory_worker.ts";
import { memoryWorker } from "../fixtures/memory_worker.ts";
import {
  memoryRuntime,
  type MemoryRuntimeOptions,
} from "../_memory_adapter.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

const MODULE = fixture("memory_worker.ts");
const quiet = captureLog();

function runtime(options: MemoryRuntimeOptions = {}) {
  return memoryRuntime({
    load: (child) => ({ default: memoryWorker(child.pid) }),
    ...options,
  });
}

describe("oneShot() (in memory)", () => {
  test("oneShot() runs each call in a fresh worker that has ended when the call settles", async () => {
    using rt = runtime();
    const run = oneShot<typeof memory>(MODULE, quiet);
    assert.equal(rt.children.length, 0, "nothing starts before a call");
    assert.equal(await run.count(), 1);
    assert.equal(await run.count(), 1, "fresh state: a new worker");
    assert.equal(rt.children.length, 2);
    await until(() => rt.live().length === 0, 10_000, "workers ended");
    const [a, b] = rt.children;
    assert.notEqual(a?.pid, b?.pid);
  });

  test("oneShot() runs concurrent calls in parallel workers", async () => {
    using rt = runtime();
    const run = oneShot<typeof memory>(MODULE, quiet);
    const calls = [run.delay(30, "a"), run.delay(30, "b"), run.delay(30, "c")];
    await until(() => rt.live().length === 3, 10_000, "three at once");
    assert.deepEqual(await within(Promise.all(calls), 10_000, "calls"), [
      "a",
      "b",
      "c",
    ]);
  });

  test("oneShot() replays setup before the call, on every worker", async () => {
    using _rt = runtime();
    const run = oneShot<typeof memory>(MODULE, {
      ...quiet,
      setup: [["count"], ["count"]],
    });
    assert.equal(await run.count(), 3);
    assert.equal(await run.count(), 3);
  });

  test("oneShot() gives typed errors: a handler's, a start's, a deadline's", async () => {
    using rt = runtime();
    const run = oneShot<typeof memory>(MODULE, {
      ...quiet,
      callTimeoutMs: 30,
      cancelGraceMs: 10,
    });
    const remote = await rejection(run.fail("no rows"), RemoteError);
    assert.equal(remote.message, "no rows");
    assert.equal(remote.op, "fail");
    const late = await rejection(run.hang(), WorkerTimeoutError);
    assert.equal(late.phase, "call");
    assert.equal(late.op, "hang");
    rt.failSpawns(1);
    const spawn = await rejection(run.add(1, 1), WorkerStartError);
    assert.equal(spawn.failure, "spawn");
    assert.equal(await run.add(2, 2), 4, "the next call starts a worker");
    await until(() => rt.live().length === 0, 10_000, "workers ended");
  });

  test("oneShot() with spares runs the call before it starts the taken spare's replacement", async () => {
    // Building and spawning the replacement is synchronous work: done
    // before the call, it delayed the call by a whole start's preparation.
    using rt = runtime({
      load: () => ({
        default: defineWorker({
          /** How many workers had been spawned when this call ran. */
          spawned: () => rt.children.length,
        }),
      }),
    });
    const run = oneShot(MODULE, { ...quiet, spares: 1 });
    try {
      await until(() => rt.children.length === 1, 10_000, "the spare");
      assert.equal(await run.call("spawned", []), 1, "ran before the refill");
      await until(() => rt.children.length === 2, 10_000, "the replacement");
    } finally {
      await run.close();
    }
    await until(() => rt.live().length === 0, 10_000, "workers ended");
  });

  test("oneShot() a module that cannot load fails the call with WorkerStartError", async () => {
    using _rt = runtime({
      load: () => {
        throw new Error("missing native addon");
      },
    });
    const run = oneShot<typeof memory>(MODULE, quiet);
    const error = await rejection(run.add(1, 1), WorkerStartError);
    assert.equal(error.failure, "import");
    assert.match(error.message, /missing native addon/);
  });
});
