import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  pool,
  PoolBusyError,
  RemoteError,
  SessionClosedError,
  WorkerCrashedError,
  WorkerStartError,
} from "../../mod.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import {
  captureLog,
  checkNoLeaks,
  fixture,
  isAlive,
  needsWorkers,
  scratchDir,
  until,
  within,
} from "../_helpers.ts";

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

describe("pool() dispatch", needsWorkers(), () => {
  test("pool() of max 2 given 8 slow calls never runs more than 2 workers", async () => {
    await using p = pool<typeof behaviour>(worker, { ...captureLog(), max: 2 });
    let most = 0;
    const sampler = setInterval(() => {
      most = Math.max(most, p.stats().workers + p.stats().starting);
    }, 5);
    try {
      const pids = await within(
        Promise.all(
          Array.from(
            { length: 8 },
            () => p.delay(50, 0).then(() => p.whoami()),
          ),
        ),
        60_000,
        "8 calls",
      );
      assert.ok(new Set(pids).size <= 2, `pids: ${pids}`);
    } finally {
      clearInterval(sampler);
    }
    assert.ok(most <= 2, `saw ${most} workers`);
    const stats = p.stats();
    assert.equal(stats.completed, 16);
    assert.equal(stats.queued, 0);
    assert.equal(stats.perWorker.length, stats.workers);
  });

  test("pool() uses an idle worker before starting a new one", async () => {
    await using p = pool<typeof behaviour>(worker, { ...captureLog(), max: 4 });
    const first = await p.whoami();
    const second = await p.whoami();
    assert.equal(second, first);
    assert.equal(p.stats().workers, 1);
  });

  test("pool() recycles a worker after exactly maxTasksPerWorker calls", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      maxTasksPerWorker: 3,
    });
    const pids: number[] = [];
    pids.push(await p.whoami());
    // The host pid (inside a sandbox whoami is not one).
    const firstPid = p.stats().perWorker[0]?.pid ?? -1;
    for (let i = 1; i < 7; i++) pids.push(await p.whoami());
    assert.equal(new Set(pids.slice(0, 3)).size, 1);
    assert.notEqual(pids[3], pids[2], "call N+1 runs on a new worker");
    assert.equal(new Set(pids.slice(3, 6)).size, 1);
    assert.notEqual(pids[6], pids[5]);
    assert.equal(p.stats().recycledBy.tasks, 2);
    await until(() => !isAlive(firstPid), 10_000, "recycled worker exits");
  });

  test("pool() stops idle workers after idleTimeoutMs, and keeps min alive", async () => {
    await using reaping = pool<typeof behaviour>(worker, {
      ...captureLog(),
      idleTimeoutMs: 100,
    });
    const first = await reaping.whoami();
    await until(() => reaping.stats().workers === 0, 10_000, "idle reap");
    assert.equal(reaping.stats().reaped, 1);
    assert.notEqual(await reaping.whoami(), first);

    await using keeping = pool<typeof behaviour>(worker, {
      ...captureLog(),
      idleTimeoutMs: 100,
      min: 1,
    });
    const kept = await keeping.whoami();
    // Let several idle periods pass: min keeps the worker.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(keeping.stats().reaped, 0);
    assert.equal(await keeping.whoami(), kept);
  });

  test("pool() prewarm starts workers before the first call", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 3,
      prewarm: 2,
    });
    await until(() => p.stats().workers === 2, 30_000, "prewarmed workers");
    assert.equal(p.stats().completed, 0);
  });

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
});

describe("pool() limits and failures", needsWorkers(), () => {
  test("pool() rejects at once with PoolBusyError past maxQueue", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      maxQueue: 2,
      cancelGraceMs: 100,
    });
    const controller = new AbortController();
    const running = p.call("hang", [], { signal: controller.signal });
    await until(() => p.stats().busy === 1, 30_000, "worker busy");
    const queued = [p.add(1, 1), p.add(2, 2)];
    const error = await p.add(3, 3).then(() => undefined, (e) => e);
    assert.ok(error instanceof PoolBusyError);
    assert.equal(error.maxQueue, 2);
    controller.abort();
    await running.catch(() => {});
    assert.deepEqual(await within(Promise.all(queued), 30_000, "queue"), [
      2,
      4,
    ]);
  });

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

  test("pool() fails queued calls with WorkerStartError when the module never starts", async () => {
    await using p = pool(fixture("exit_on_import_worker.ts"), {
      ...captureLog(),
      max: 2,
      maxRetries: 1,
    });
    const results = await within(
      Promise.allSettled([p.call("x", []), p.call("y", []), p.call("z", [])]),
      60_000,
      "queued calls",
    );
    for (const result of results) {
      assert.equal(result.status, "rejected");
      assert.ok(
        (result as PromiseRejectedResult).reason instanceof WorkerStartError,
      );
    }
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
  test("pool() aborting a queued call removes it without touching any worker", async () => {
    await using p = pool<typeof behaviour>(worker, { ...captureLog(), max: 1 });
    const pid = await p.whoami();
    const running = p.delay(200, "ran");
    const controller = new AbortController();
    const queued = p.call("add", [1, 1], { signal: controller.signal });
    assert.equal(p.stats().queued, 1);
    controller.abort(new Error("not needed"));
    assert.equal((await queued.catch((e) => e)).message, "not needed");
    assert.equal(p.stats().queued, 0);
    assert.equal(await running, "ran");
    assert.equal(await p.whoami(), pid);
  });

  test("pool() aborting a running call rejects with the reason, then the worker is replaced after the grace period", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      cancelGraceMs: 100,
    });
    const pid = await p.whoami();
    const hostPid = p.stats().perWorker[0]?.pid ?? -1;
    const controller = new AbortController();
    const running = p.call("hang", [], { signal: controller.signal });
    await until(() => p.stats().busy === 1, 30_000, "running");
    const reason = new Error("stop");
    controller.abort(reason);
    assert.equal(await running.catch((e) => e), reason);
    const next = await within(p.whoami(), 30_000, "capacity back");
    assert.notEqual(next, pid);
    await until(() => !isAlive(hostPid), 10_000, "old worker gone");
  });

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
