// session(): calls beyond the worker's concurrency wait in its queue; when
// the worker dies, those it never started run again on the next worker,
// whatever their op (a worker of message version 3 starts them in order).
// On the in-memory runtime (tests/_memory_adapter.ts).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { session, WorkerCrashedError } from "../../mod.ts";
import { defineWorker } from "../../worker.ts";
import { memoryRuntime } from "../_memory_adapter.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

const MODULE = fixture("memory_worker.ts");

/** A worker that runs one call at a time, with a per-process counter. */
function serial() {
  let calls = 0;
  return defineWorker({
    hang() {
      return new Promise(() => {});
    },
    count() {
      return ++calls;
    },
  }, { concurrency: 1 });
}

describe("session() calls queued in the worker (in memory)", () => {
  test("session() runs the calls a crashed worker had queued but not started on the next worker, once each", async () => {
    using rt = memoryRuntime({ load: () => ({ default: serial() }) });
    await using s = await session<ReturnType<typeof serial>>(
      MODULE,
      captureLog(),
    );
    const hung = s.hang();
    const counts = [s.count(), s.count()];
    await until(() => s.stats().inFlight === 3, 10_000, "three calls written");
    rt.live()[0]?.crash("SIGKILL");
    const crash = await rejection(hung, WorkerCrashedError);
    assert.equal(crash.op, "hang");
    // count is not idempotent: it runs again only because it never started.
    assert.deepEqual(
      await within(Promise.all(counts), 10_000, "the queued calls"),
      [1, 2],
    );
    assert.equal(await s.count(), 3, "both ran on the new worker");
    assert.equal(s.stats().failed, 1);
  });
});
