// pool() with real worker processes: what needs processes (CPU parallelism,
// a worker killing itself, memory, lost calls, close and its processes). The
// scheduling cases that need none run in memory: pool_scheduling_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  pool,
  RemoteError,
  SessionClosedError,
  WorkerCrashedError,
} from "../../mod.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

describe("pool() dispatch", needsWorkers(), () => {
  test("pool() runs two CPU-bound calls on a pool of 2 at the same time", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 2,
      prewarm: 2,
    });
    await until(() => p.stats().workers === 2, 30_000, "two workers");
    const [a, b] = await Promise.all([p.busy(400), p.busy(400)]);
    assert.notEqual(a.pid, b.pid);
    assert.ok(
      a.start < b.end && b.start < a.end,
      `intervals overlap: ${JSON.stringify([a, b])}`,
    );
  });
  test("pool() writes more calls ahead in a burst of short calls, never more than pipeline", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      prewarm: 1,
      pipeline: 5,
    });
    await until(() => p.stats().workers === 1, 30_000, "the worker");
    let most = 0;
    const calls = Array.from(
      { length: 2_000 },
      (_, i) =>
        p.add(i, 1).then((value) => {
          most = Math.max(most, p.stats().perWorker[0]?.running ?? 0);
          return value;
        }),
    );
    const values = await Promise.all(calls);
    assert.deepEqual(values.slice(0, 3), [1, 2, 3]);
    // One running plus at most `pipeline` written ahead, and more than the
    // one call written ahead a new worker starts with.
    assert.ok(most <= 6, `at most 1 + pipeline in the worker, saw ${most}`);
    assert.ok(most > 2, `the window grew in the burst, saw at most ${most}`);
  });
});

describe("pool() limits and failures", needsWorkers(), () => {
  test("pool() fails the crashed call, carries on, and heals", async () => {
    await using p = pool<typeof behaviour>(worker, { ...captureLog(), max: 2 });
    const other = p.delay(300, "other");
    const crash = await p.killSelf("SIGKILL").then(() => undefined, (e) => e);
    assert.ok(crash instanceof WorkerCrashedError);
    assert.equal(crash.signal, "SIGKILL");
    assert.equal(await other, "other");
    assert.equal(await p.add(1, 2), 3);
    assert.equal(p.stats().crashed, 1);
    assert.equal(p.stats().recycledBy.crash, 1);
    const remote = await p.throwCustom().then(() => undefined, (e) => e);
    assert.ok(remote instanceof RemoteError);
  });

  test("pool() recycles a worker whose memory exceeds maxRssBytes", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      maxRssBytes: 1024,
    });
    const first = await p.whoami();
    await until(() => p.stats().recycledBy.memory === 1, 10_000, "recycle");
    assert.notEqual(await p.whoami(), first);
  });
});

describe("pool() lost calls", needsWorkers(), () => {
  test("pool() a retried call that keeps crashing its worker fails with its attempts and their pids", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      idempotent: ["killSelf"],
      maxRetries: 1,
      max: 2,
    });
    const error = await p.killSelf("SIGKILL").then(() => undefined, (e) => e);
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.attempts, 2);
    assert.equal(new Set(error.pids).size, 2);
    assert.equal(error.pid, error.pids[1]);
    assert.match(error.message, /after 2 attempts/);
    assert.equal(p.stats().crashed, 2);
  });
  test("pool() a worker that dies while starting costs a waiting call no attempt", async () => {
    using dir = scratchDir("pool-start");
    await using p = pool(fixture("reliability/chaos_worker.ts"), {
      ...captureLog(),
      permissions: { read: [dir.path], write: [dir.path] },
      // The first start dies in setup (the mark is new), the second passes.
      setup: [["read", dir.path, "setup", 1, true]],
      maxRetries: 1,
      max: 1,
    });
    const error = await p.call("write", [dir.path, "w", 1, "before"]).then(
      () => undefined,
      (e) => e,
    );
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.attempts, 1);
    assert.equal(error.pids.length, 1);
    assert.equal(error.pid, error.pids[0]);
  });
});

describe("pool() cancellation and close", needsWorkers(), () => {
  test("pool() close() finishes queued calls and waits for every process", async () => {
    const p = pool<typeof behaviour>(worker, { ...captureLog(), max: 2 });
    const calls = Array.from({ length: 5 }, (_, i) => p.delay(30, i));
    await until(() => p.stats().workers > 0, 30_000, "started");
    const pids = p.stats().perWorker.map((w) => w.pid);
    await p.close();
    assert.deepEqual(await Promise.all(calls), [0, 1, 2, 3, 4]);
    for (const pid of pids) assert.equal(isAlive(pid), false);
    assert.equal(p.stats().workers, 0);
    const after = await p.add(1, 1).catch((e) => e);
    assert.ok(after instanceof SessionClosedError);
    await p.close();
  });

  test("pool() close() ends a replacement started ahead on standby with the pool", async () => {
    const p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      maxTasksPerWorker: 3,
    });
    try {
      // Two of its three calls: its replacement starts at the second.
      await Promise.all([p.whoami(), p.whoami()]);
      await until(
        () => p.stats().perWorker.some((w) => w.standby),
        30_000,
        "a replacement on standby",
      );
      const pids = p.stats().perWorker.map((w) => w.pid);
      assert.equal(pids.length, 2);
      assert.equal(p.stats().workers, 2);
      await p.close();
      for (const pid of pids) assert.equal(isAlive(pid), false, `pid ${pid}`);
      assert.equal(p.stats().workers, 0);
    } finally {
      await p.close({ force: true });
    }
  });

  test("pool() close({ force: true }) ends running and queued calls and kills the workers", async () => {
    const p = pool<typeof behaviour>(worker, { ...captureLog(), max: 1 });
    const running = p.delay(60_000, "running");
    await until(() => p.stats().busy === 1, 30_000, "running");
    const pids = p.stats().perWorker.map((w) => w.pid);
    const queued = p.add(1, 1);
    const started = Date.now();
    await p.close({ force: true });
    assert.ok(
      Date.now() - started < 30_000,
      "close() did not wait for the call",
    );
    for (const pid of pids) assert.equal(isAlive(pid), false);
    for (
      const settled of [
        await running.catch((e) => e),
        await queued.catch((e) => e),
      ]
    ) {
      assert.ok(settled instanceof SessionClosedError, String(settled));
      assert.equal(settled.kind, "pool");
    }
    assert.equal(p.stats().workers, 0);
    assert.equal(p.stats().crashed, 0, "a forced kill is not a crash");
  });

  test("pool() closeTimeoutMs bounds a plain close(), then ends the running call", async () => {
    const p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      closeTimeoutMs: 200,
    });
    const quick = p.delay(1, "quick");
    const running = p.delay(60_000, "running");
    await until(() => p.stats().completed === 1, 30_000, "quick done");
    const pid = p.stats().perWorker[0]!.pid;
    await p.close();
    assert.equal(await quick, "quick");
    const error = await running.catch((e) => e);
    assert.ok(error instanceof SessionClosedError, String(error));
    assert.equal(isAlive(pid), false);
  });

  test("pool() close({ force: true }) ends a plain close() that is draining", async () => {
    const p = pool<typeof behaviour>(worker, { ...captureLog(), max: 1 });
    const running = p.delay(60_000, "running");
    await until(() => p.stats().busy === 1, 30_000, "running");
    const draining = p.close();
    const forced = p.close({ force: true });
    await Promise.all([draining, forced]);
    assert.ok((await running.catch((e) => e)) instanceof SessionClosedError);
  });

  test("pool() refuses a hostile op name or args with a TypeError, touching nothing of them", async () => {
    await using p = pool(worker, captureLog());
    const hostile = {
      toString() {
        throw new Error("called toString");
      },
    };
    for (
      const [op, args, shown] of [
        [hostile, [], /received an object/],
        [Symbol("op"), [], /received Symbol\(op\)/],
        ["add", hostile, /expected an array, received an object/],
      ] as const
    ) {
      const error = await p.call(op as never, args as never).then(
        () => undefined,
        (e) => e,
      );
      assert.ok(error instanceof TypeError, String(error));
      assert.match(error.message, shown);
    }
    assert.equal(p.stats().workers + p.stats().starting, 0);
  });

  test("pool() refuses invalid pool options before anything spawns", () => {
    assert.throws(() => pool(worker, { max: 0 }), RangeError);
    assert.throws(() => pool(worker, { max: 2, min: 3 }), /min/);
    assert.throws(() => pool(worker, { maxQueue: -1 }), /maxQueue/);
    assert.throws(
      () => pool(worker, { idleTimeoutMs: Number.NaN }),
      /idleTimeoutMs/,
    );
    assert.throws(
      () => pool(worker, { concurrency: "2" as unknown as number }),
      TypeError,
    );
  });
});
