// pool() pipelining: calls written ahead to a busy worker wait in its queue
// (the worker runs no more than `concurrency` at once), start in order the
// moment a slot frees, keep their deadline until they start, and go back to
// the queue if the worker dies before starting them (never run twice). On
// the in-memory runtime (tests/_memory_adapter.ts): the real pool,
// connection and serve() over in-memory streams.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pool, WorkerCrashedError } from "../../mod.ts";
import type memory from "../fixtures/memory_worker.ts";
import { memoryWorker } from "../fixtures/memory_worker.ts";
import { memoryRuntime } from "../_memory_adapter.ts";
import { defineWorker } from "../../worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

const MODULE = fixture("memory_worker.ts");
const quiet = captureLog();

/** `count` short calls at once. */
function burst(
  p: { add(a: number, b: number): Promise<number> },
  count: number,
): Promise<number>[] {
  return Array.from({ length: count }, (_, i) => p.add(i, 1));
}

function runtime() {
  return memoryRuntime({
    load: (child) => ({ default: memoryWorker(child.pid) }),
  });
}

describe("pool() pipelining (in memory)", () => {
  test("pool() writes calls ahead to a busy worker, and a crash sends those it had not started back to the queue", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    const first = await p.whoami();
    // A burst of short calls opens the worker's window (it starts at 1; a
    // slow turn of a loaded machine may close it again): until a long call
    // and two calls after it are written to the worker at once. Calls are
    // written as they are made, so that shows at once.
    let hung: Promise<unknown> | undefined;
    let counts: Promise<number>[] = [];
    for (let attempt = 0; attempt < 20 && !hung; attempt++) {
      await within(Promise.all(burst(p, 50)), 10_000, "the burst");
      const controller = new AbortController();
      const long = p.call("untilCancelled", [], { signal: controller.signal });
      // Written ahead (count is not idempotent): with concurrency 1
      // honoured, neither may start while the long call runs.
      const tried = [p.count(), p.count()];
      if (p.stats().perWorker[0]?.running === 3) {
        [hung, counts] = [long, tried];
      } else {
        controller.abort(new Error("window not open yet"));
        await Promise.allSettled([long, ...tried]);
      }
    }
    assert.ok(hung, "two calls written ahead behind a long one");
    let settled = 0;
    for (const call of counts) call.finally(() => settled++).catch(() => {});
    // Time for a worker that ignored `limit` to run them (it must not).
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(p.stats().perWorker[0]?.running, 3);
    assert.equal(p.stats().queued, 0, "nothing waits in the pool's queue");
    assert.equal(settled, 0, "no call written ahead started beside it");
    rt.live().find((child) => child.pid === first)?.crash("SIGKILL");
    const crash = await rejection(hung, WorkerCrashedError);
    assert.equal(crash.op, "untilCancelled");
    // They never started: each runs once, on the new worker.
    assert.deepEqual(await within(Promise.all(counts), 10_000, "counts"), [
      1,
      2,
    ]);
    // Both ran on the new worker (its third count is 3), none on the old.
    assert.notEqual(await p.whoami(), first);
    assert.equal(await p.count(), 3);
    const stats = p.stats();
    assert.equal(stats.completed + stats.failed, stats.calls);
    assert.ok(stats.failed >= 1);
  });

  test("pool() with concurrency 1 runs calls written ahead one after the other, each the moment the one before ends", async () => {
    const spans = defineWorker({
      /** Waits `ms` and reports when it ran. */
      async span(ms: number) {
        const start = Date.now();
        await new Promise((resolve) => setTimeout(resolve, ms));
        return { start, end: Date.now() };
      },
    });
    using _rt = memoryRuntime({ load: () => ({ default: spans }) });
    await using p = pool<typeof spans>(MODULE, { ...quiet, max: 1 });
    await p.span(0);
    const runs = await within(
      Promise.all([p.span(40), p.span(40), p.span(40)]),
      10_000,
      "three calls",
    );
    for (let i = 1; i < runs.length; i++) {
      const [before, after] = [runs[i - 1], runs[i]] as [
        { start: number; end: number },
        { start: number; end: number },
      ];
      assert.ok(
        after.start >= before.end,
        `no overlap: ${JSON.stringify(runs)}`,
      );
    }
    assert.equal(p.stats().perWorker[0]?.calls, 4);
  });

  test("pool() starts the deadline of a call written ahead when the call starts", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    // No call before these two: an answer slower than LONG_CALL_MS (4 ms,
    // common on a loaded machine) closes the write-ahead window, and the
    // second call then waited in the pool's queue. Both are written when
    // the worker is ready, the second one ahead.
    const slow = p.delay(1_500, "slow");
    // Written ahead with a deadline shorter than the call before it.
    const quick = p.call("add", [2, 3], { timeoutMs: 200 });
    await until(
      () => p.stats().perWorker[0]?.running === 2,
      10_000,
      "the call written ahead",
    );
    assert.equal(await within(slow, 10_000, "slow"), "slow");
    assert.equal(await within(quick, 10_000, "quick"), 5);
    assert.equal(p.stats().timeouts, 0);
  });

  test("pool() writes ahead only once it runs max workers: queued calls wait for a worker being started", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 2 });
    // Calls long enough for the second worker's start to end while the
    // first runs, on a loaded machine too (50 ms was not, in CI).
    const pids = await within(
      Promise.all(
        [p.delay(1_000, 0), p.delay(1_000, 0)].map((call) =>
          call.then(() => p.stats().perWorker.length)
        ),
      ),
      10_000,
      "two calls",
    );
    assert.deepEqual(pids, [2, 2]);
    const busy = p.stats().perWorker.map((worker) => worker.calls);
    assert.deepEqual(busy, [1, 1], "one call each, none written ahead");
  });

  test("pool() with pipeline 0 keeps every call in its own queue until a slot frees", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      pipeline: 0,
    });
    await p.whoami();
    const slow = p.delay(50, "slow");
    const next = p.whoami();
    assert.equal(p.stats().queued, 1);
    assert.equal(p.stats().perWorker[0]?.running, 1);
    await within(Promise.all([slow, next]), 10_000, "both calls");
    assert.throws(() => pool(MODULE, { pipeline: -1 }), RangeError);
  });

  test("pool() writes nothing ahead behind a worker whose last call was long", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    await p.whoami();
    await within(Promise.all(burst(p, 50)), 10_000, "the burst");
    // Far above the 4 ms budget of work written ahead: the window closes.
    assert.equal(await p.delay(60, "long"), "long");
    const slow = p.delay(60, "slow");
    const next = [p.whoami(), p.whoami()];
    assert.equal(p.stats().queued, 2, "both wait in the pool's queue");
    assert.equal(p.stats().perWorker[0]?.running, 1);
    await within(Promise.all([slow, ...next]), 10_000, "the calls");
  });

  test("pool() writes nothing more ahead behind a call that has run for long", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    await p.whoami();
    await within(Promise.all(burst(p, 50)), 10_000, "the burst");
    const long = p.delay(300, "long");
    // Time passes while it runs (the subject here, not a wait for an event).
    await new Promise((resolve) => setTimeout(resolve, 30));
    const next = [p.whoami(), p.whoami()];
    assert.equal(p.stats().queued, 2, "both wait in the pool's queue");
    assert.equal(p.stats().perWorker[0]?.running, 1);
    await within(Promise.all([long, ...next]), 10_000, "the calls");
  });
});
