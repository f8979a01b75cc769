// pool() scheduling on the in-memory runtime (tests/_memory_adapter.ts):
// the real pool, connection and serve() over in-memory streams, no
// processes. Dispatch, queue limits, recycling, idle reaping, crashes,
// retries, deadlines, aborts and close, in milliseconds. What needs real
// processes (signals, memory, CPU parallelism, exit of the parent) stays in
// pool_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  pool,
  PoolBusyError,
  RemoteError,
  SessionClosedError,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
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

/** An in-memory runtime whose workers are fresh memory_worker definitions. */
function runtime(
  idempotent: string[] = [],
  options: MemoryRuntimeOptions = {},
) {
  return memoryRuntime({
    load: (child) => ({
      default: memoryWorker(child.pid, {
        idempotent,
        crash: () => child.crash("SIGKILL"),
      }),
    }),
    ...options,
  });
}

describe("pool() dispatch (in memory)", () => {
  test("pool() of max 2 given 8 slow calls never runs more than 2 workers", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 2 });
    let most = 0;
    const sample = () => {
      most = Math.max(most, rt.live().length);
    };
    const calls = Array.from(
      { length: 8 },
      (_, i) => p.delay(5, i).finally(sample),
    );
    sample();
    assert.deepEqual(await within(Promise.all(calls), 10_000, "8 calls"), [
      0,
      1,
      2,
      3,
      4,
      5,
      6,
      7,
    ]);
    assert.ok(most <= 2, `saw ${most} workers`);
    assert.equal(rt.children.length, 2, "two spawns in all");
    const stats = p.stats();
    assert.equal(stats.completed, 8);
    assert.equal(stats.queued, 0);
    assert.equal(stats.perWorker.length, stats.workers);
  });

  test("pool() uses an idle worker before starting a new one", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 4 });
    const first = await p.whoami();
    assert.equal(await p.whoami(), first);
    assert.equal(await p.whoami(), first);
    assert.equal(rt.children.length, 1);
    assert.equal(p.stats().workers, 1);
  });

  test("pool() recycles a worker after exactly maxTasksPerWorker calls", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      maxTasksPerWorker: 3,
    });
    const counts: number[] = [];
    const pids: number[] = [];
    for (let i = 0; i < 7; i++) {
      counts.push(await p.count());
      pids.push(rt.children.at(-1)?.pid ?? -1);
    }
    assert.deepEqual(counts, [1, 2, 3, 1, 2, 3, 1], "a fresh worker every 3");
    assert.equal(p.stats().recycledBy.tasks, 2);
    await until(
      () => rt.children.slice(0, 2).every((c) => c.status !== undefined),
      10_000,
      "recycled workers end",
    );
    // The current worker, and perhaps its replacement started ahead.
    assert.ok(rt.live().length <= 2, `live: ${rt.live().length}`);
  });

  test("pool() starts a retiring worker's replacement ahead, on standby until the worker retires, then it takes over", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      maxTasksPerWorker: 4,
    });
    // Its pace counts from its first call: the replacement starts at the
    // second call at the latest (here also the last tenth rule's floor).
    await p.whoami();
    const [first, second] = await Promise.all([p.whoami(), p.whoami()]);
    assert.equal(second, first);
    await until(
      () => p.stats().perWorker.some((worker) => worker.standby),
      10_000,
      "a replacement on standby",
    );
    const heir = p.stats().perWorker.find((worker) => worker.standby);
    assert.ok(heir && heir.pid !== first);
    assert.equal(p.stats().workers, 2, "both processes are counted");
    // With max 1, it takes no call while the worker serves.
    assert.equal(await p.whoami(), first);
    assert.equal(p.stats().recycledBy.tasks, 1);
    // The next call runs on the replacement started ahead.
    assert.equal(await p.whoami(), heir.pid);
    assert.equal(rt.children.findIndex((c) => c.pid === heir.pid), 1);
  });

  test("pool() paces a prewarmed worker from its first call, not from its start: a replacement starts ahead in a burst after idling", async () => {
    // Starts that take 200 ms (a simulated start cost, not a wait): the
    // burst's calls, even slowed by a loaded machine, are then far quicker
    // than a start, so its replacement is due at once. (With the in-memory
    // start of a few ms, a call slowed past the start's pace by load left
    // the replacement for later, and the test failed now and then.)
    using _rt = memoryRuntime({
      load: async (child) => {
        await new Promise((resolve) => setTimeout(resolve, 200));
        return {
          default: memoryWorker(child.pid, {
            crash: () => child.crash("SIGKILL"),
          }),
        };
      },
    });
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      prewarm: 1,
      maxTasksPerWorker: 20,
    });
    await until(() => p.stats().workers === 1, 10_000, "the prewarmed worker");
    // Idle for a while before its first call (not a wait for an event: the
    // gap is the subject). Paced from its start, it would look slow.
    await new Promise((resolve) => setTimeout(resolve, 100));
    await within(
      Promise.all(Array.from({ length: 5 }, () => p.whoami())),
      10_000,
      "a burst of 5",
    );
    const stats = p.stats();
    const ahead = stats.starting +
      stats.perWorker.filter((worker) => worker.standby).length;
    assert.equal(ahead, 1, "its replacement was started with 15 calls left");
    assert.equal(stats.recycledBy.tasks, 0);
  });

  test("pool() with recycling never has more than max workers taking calls, nor more than one replacement per worker", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 2,
      maxTasksPerWorker: 5,
    });
    let serving = 0;
    let processes = 0;
    const sample = () => {
      const workers = p.stats().perWorker.filter((w) => !w.retiring);
      serving = Math.max(serving, workers.filter((w) => !w.standby).length);
      processes = Math.max(processes, workers.length);
    };
    // Calls of 2 ms: a worker lives longer than a start, so replacements
    // are ready while the workers they replace still serve.
    await within(
      Promise.all(
        Array.from({ length: 100 }, (_, i) => p.delay(2, i).finally(sample)),
      ),
      10_000,
      "100 calls",
    );
    assert.ok(serving <= 2, `at most max take calls, saw ${serving}`);
    assert.ok(
      processes <= 4,
      `at most max + one replacement each, saw ${processes}`,
    );
    // 100 calls, 5 per worker: the last two workers may share the last ones.
    assert.ok(p.stats().recycledBy.tasks >= 18);
    assert.ok(rt.children.length >= 20);
  });

  test("pool() stops idle workers after idleTimeoutMs, and keeps min alive", async () => {
    using _rt = runtime();
    await using keeping = pool<typeof memory>(MODULE, {
      ...quiet,
      idleTimeoutMs: 20,
      min: 1,
    });
    await using reaping = pool<typeof memory>(MODULE, {
      ...quiet,
      idleTimeoutMs: 20,
    });
    const kept = await keeping.whoami();
    const first = await reaping.whoami();
    await until(() => reaping.stats().workers === 0, 10_000, "idle reap");
    assert.equal(reaping.stats().reaped, 1);
    // The keeping pool went idle before the reaping one and was not reaped.
    assert.equal(keeping.stats().reaped, 0);
    assert.equal(await keeping.whoami(), kept);
    assert.notEqual(await reaping.whoami(), first);
  });

  test("pool() prewarm starts workers before the first call", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 3,
      prewarm: 2,
    });
    await until(() => p.stats().workers === 2, 10_000, "prewarmed workers");
    assert.equal(p.stats().completed, 0);
    assert.equal(rt.children.length, 2);
  });
});

describe("pool() limits and failures (in memory)", () => {
  test("pool() rejects at once with PoolBusyError past maxQueue", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      maxQueue: 2,
      cancelGraceMs: 10,
      pipeline: 0, // calls wait in the pool's queue, none in the worker's
    });
    const controller = new AbortController();
    const running = p.call("hang", [], { signal: controller.signal });
    await until(() => p.stats().busy === 1, 10_000, "worker busy");
    const queued = [p.add(1, 1), p.add(2, 2)];
    const error = await rejection(p.add(3, 3), PoolBusyError);
    assert.equal(error.maxQueue, 2);
    assert.equal(error.op, "add");
    controller.abort();
    await rejection(running, Error);
    assert.deepEqual(await within(Promise.all(queued), 10_000, "queue"), [
      2,
      4,
    ]);
  });

  test("pool() fails the call of a crashed worker, carries on, and heals", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 2 });
    // Longer than a second start on a loaded machine: at 50 ms the first
    // worker had finished it and taken the second call before the second
    // worker was up, which then stayed idle.
    const other = p.delay(1_500, "other");
    const doomed = p.delay(10_000, "never");
    await until(() => rt.live().length === 2, 10_000, "two workers");
    await until(() => p.stats().busy === 2, 10_000, "both busy");
    const victim = rt.children[1];
    victim?.crash("SIGKILL");
    const crash = await rejection(doomed, WorkerCrashedError);
    assert.equal(crash.signal, "SIGKILL");
    assert.equal(crash.pid, victim?.pid);
    assert.equal(crash.op, "delay");
    assert.equal(await other, "other");
    assert.equal(await p.add(1, 2), 3);
    assert.equal(p.stats().crashed, 1);
    assert.equal(p.stats().recycledBy.crash, 1);
    const remote = await rejection(p.fail("boom"), RemoteError);
    assert.equal(remote.message, "boom");
  });

  test("pool() retries an idempotent call lost in a crash on another worker", async () => {
    using rt = runtime(["delay"]);
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    const call = p.delay(30, "again");
    await until(() => p.stats().busy === 1, 10_000, "running");
    rt.children[0]?.crash("SIGKILL");
    assert.equal(await within(call, 10_000, "retried call"), "again");
    assert.equal(rt.children.length, 2);
  });

  test("pool() a retried call that keeps crashing its worker fails with its attempts and their pids", async () => {
    using rt = runtime(["crashSelf"]);
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 2,
      maxRetries: 2,
    });
    const error = await rejection(p.crashSelf(), WorkerCrashedError);
    assert.equal(error.attempts, 3);
    assert.deepEqual(error.pids, rt.children.map((child) => child.pid));
    assert.equal(error.pid, error.pids[2]);
    assert.match(error.message, /after 3 attempts/);
    assert.equal(p.stats().crashed, 3);
  });

  test("pool() fails queued calls with WorkerStartError when the module never loads", async () => {
    using _rt = runtime([], {
      load: () => {
        throw new SyntaxError("Unexpected token");
      },
    });
    await using p = pool(MODULE, { ...quiet, max: 2, maxRetries: 1 });
    const results = await within(
      Promise.allSettled([p.call("x", []), p.call("y", []), p.call("z", [])]),
      10_000,
      "queued calls",
    );
    for (const result of results) {
      assert.equal(result.status, "rejected");
      const error = await rejection(
        Promise.reject((result as PromiseRejectedResult).reason),
        WorkerStartError,
      );
      assert.equal(error.failure, "import");
      assert.match(error.message, /Unexpected token/);
    }
  });

  test("pool() a spawn that fails rejects the call with WorkerStartError, and the next call starts a worker", async () => {
    using rt = runtime([], { failSpawns: 1 });
    await using p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    const error = await rejection(p.add(1, 1), WorkerStartError);
    assert.equal(error.failure, "spawn");
    assert.equal(await p.add(2, 2), 4);
    assert.equal(rt.children.length, 1);
  });

  test("pool() a worker that is never ready fails calls with WorkerTimeoutError (start)", async () => {
    using _rt = runtime([], { load: () => new Promise(() => {}) });
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      startTimeoutMs: 50,
    });
    const error = await rejection(p.add(1, 1), WorkerTimeoutError);
    assert.equal(error.phase, "start");
    assert.equal(error.timeoutMs, 50);
  });

  test("pool() a call past callTimeoutMs fails with WorkerTimeoutError and capacity comes back", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      callTimeoutMs: 30,
      cancelGraceMs: 10,
    });
    const error = await rejection(p.hang(), WorkerTimeoutError);
    assert.equal(error.phase, "call");
    assert.equal(error.op, "hang");
    assert.equal(error.timeoutMs, 30);
    assert.equal(await within(p.add(1, 1), 10_000, "next call"), 2);
  });
});

describe("pool() cancellation and close (in memory)", () => {
  test("pool() aborting a queued call removes it without touching any worker", async () => {
    using rt = runtime();
    // No call written ahead: the second call waits in the pool's queue.
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      pipeline: 0,
    });
    const pid = await p.whoami();
    const running = p.delay(30, "ran");
    const controller = new AbortController();
    const queued = p.call("add", [1, 1], { signal: controller.signal });
    assert.equal(p.stats().queued, 1);
    const reason = new Error("not needed");
    controller.abort(reason);
    assert.equal(await rejection(queued, Error), reason);
    assert.equal(p.stats().queued, 0);
    assert.equal(await running, "ran");
    assert.equal(await p.whoami(), pid);
    assert.equal(rt.children.length, 1);
  });

  test("pool() aborting a running call rejects with the reason, then the worker is replaced after the grace period", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      cancelGraceMs: 20,
    });
    const pid = await p.whoami();
    const controller = new AbortController();
    const running = p.call("hang", [], { signal: controller.signal });
    await until(() => p.stats().busy === 1, 10_000, "running");
    const reason = new Error("stop");
    controller.abort(reason);
    assert.equal(await rejection(running, Error), reason);
    const next = await within(p.whoami(), 10_000, "capacity back");
    assert.notEqual(next, pid);
    const old = rt.children[0];
    await within(old?.exited ?? Promise.reject(), 10_000, "old worker gone");
    assert.equal(old?.status?.signal, "SIGKILL");
  });

  test("pool() close() finishes queued calls and ends every worker", async () => {
    using rt = runtime();
    const p = pool<typeof memory>(MODULE, { ...quiet, max: 2 });
    const calls = Array.from({ length: 5 }, (_, i) => p.delay(5, i));
    await until(() => p.stats().workers > 0, 10_000, "started");
    await p.close();
    assert.deepEqual(await Promise.all(calls), [0, 1, 2, 3, 4]);
    assert.deepEqual(rt.live(), []);
    assert.equal(p.stats().workers, 0);
    const after = await rejection(p.add(1, 1), SessionClosedError);
    assert.equal(after.op, "add");
    await p.close();
  });

  test("pool() close({ force: true }) rejects queued calls with SessionClosedError", async () => {
    using _rt = runtime();
    const p = pool<typeof memory>(MODULE, { ...quiet, max: 1 });
    const running = p.delay(20, "running");
    await until(() => p.stats().busy === 1, 10_000, "running");
    const queued = p.add(1, 1);
    const closing = p.close({ force: true });
    await rejection(queued, SessionClosedError);
    await closing;
    await running.catch(() => {});
  });
});
