// The test kit (`@airlock/airlock/testing`) on real worker processes, as a
// user's tests would use it: the leak check, the state directory, and fault
// injection (crash with a signal, failed starts, delayed answers).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import {
  oneShot,
  pool,
  RemoteError,
  session,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
import {
  assertNoWorkers,
  clearFaults,
  crashWorker,
  delayAnswers,
  failNextStart,
  liveWorkers,
  stateDir,
  workersGone,
} from "../../testing.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { rejection, until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

describe("liveWorkers() and assertNoWorkers()", needsWorkers(), () => {
  test("liveWorkers() lists an open session's and pool's workers, and close() removes them", async () => {
    assert.deepEqual(liveWorkers(), []);
    const s = await session<typeof behaviour>(worker, captureLog());
    const p = pool<typeof behaviour>(worker, { ...captureLog(), max: 2 });
    try {
      await p.add(1, 1);
      const poolPid = p.stats().perWorker[0]?.pid;
      const byPid = (a: number, b: number) => a - b;
      assert.deepEqual(
        liveWorkers().map((w) => w.pid).sort(byPid),
        [s.pid ?? 0, poolPid ?? 0].sort(byPid),
      );
      for (const live of liveWorkers()) {
        assert.equal(live.module, "behaviour_worker.ts");
        assert.ok(isAlive(live.pid), `pid ${live.pid} is a live process`);
      }
      const error = await rejection(() => assertNoWorkers(), Error);
      assert.equal(error.name, "AssertionError");
      assert.match(error.message, /2 airlock workers are still running/);
      assert.match(error.message, new RegExp(`pid ${s.pid} \\(`));
      assert.match(error.message, /"behaviour_worker\.ts"/);
      assert.deepEqual(
        (error as unknown as { actual: unknown }).actual,
        liveWorkers(),
      );
    } finally {
      await s.close();
      await p.close();
    }
    assert.deepEqual(liveWorkers(), []);
    assertNoWorkers();
  });

  test("liveWorkers() is empty once a oneShot() call has settled, with a value or an error", async () => {
    const once = oneShot<typeof behaviour>(worker, captureLog());
    assert.equal(await once.add(1, 2), 3);
    assert.deepEqual(liveWorkers(), []);
    await rejection(once.call("throwCustom", []), RemoteError);
    assert.deepEqual(liveWorkers(), []);
  });

  test("workersGone() waits for exits under way", async () => {
    const s = await session<typeof behaviour>(worker, captureLog());
    const closing = s.close();
    await workersGone(10_000);
    await closing;
    assertNoWorkers();
  });
});

describe("stateDir()", () => {
  test("stateDir() is a fresh real directory with grants and watch list, removed at the end of its scope", () => {
    let path: string;
    {
      using dir = stateDir("kit");
      path = dir.path;
      assert.ok(statSync(path).isDirectory());
      assert.match(path, /airlock-kit-/);
      assert.deepEqual(dir.permissions, { read: [path], write: [path] });
      assert.deepEqual(dir.watch, [path]);
      assert.equal(dir.join("a", "b.db"), `${path}/a/b.db`);
    }
    assert.equal(existsSync(path), false);
    assert.throws(() => stateDir("../escape"), TypeError);
  });

  test(
    "stateDir() grants are enough for a worker to write its state there",
    needsWorkers(),
    async () => {
      await using dir = stateDir("kit-worker");
      await using s = await session<typeof behaviour>(worker, {
        ...captureLog(),
        permissions: dir.permissions,
        watch: dir.watch,
      });
      await s.append(dir.join("log.txt"), "written");
      assert.equal(readFileSync(dir.join("log.txt"), "utf8"), "written\n");
    },
  );
});

describe("fault injection", needsWorkers(), () => {
  test("crashWorker() kills a session's worker with the chosen signal; pending calls fail, the next runs on a new worker", async () => {
    const log = captureLog();
    await using s = await session<typeof behaviour>(worker, log);
    const first = s.pid;
    const pending = s.call("hang", [], { timeoutMs: 60_000 });
    await s.add(0, 0);
    const before = log.lines.length;
    const pid = await crashWorker(s, { signal: "SIGABRT" });
    assert.equal(pid, first);
    const error = await rejection(pending, WorkerCrashedError);
    assert.equal(error.signal, "SIGABRT");
    assert.equal(error.pid, first);
    // Bun's crash report (about 20 lines) stays out of the log, in the tail.
    assert.deepEqual(
      log.lines.slice(before),
      [],
      "nothing logged after the signal",
    );
    if (RUNTIME === "bun") assert.match(error.stderrTail, /Bun has crashed/);
    assert.equal(isAlive(pid), false);
    assert.equal(await s.add(1, 1), 2);
    assert.notEqual(s.pid, first, "a new worker answers");
  });

  test("crashWorker() picks a pool's worker by pid, and refuses what is not its worker or not a handle", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 2,
      prewarm: 2,
    });
    await until(() => p.stats().perWorker.length === 2, 30_000, "2 workers");
    const [a, b] = p.stats().perWorker.map((w) => w.pid);
    assert.ok(a !== undefined && b !== undefined);
    assert.equal(await crashWorker(p, { pid: b }), b);
    assert.ok(isAlive(a), "the other worker runs on");
    assert.equal(
      p.stats().perWorker.some((w) => w.pid === b),
      false,
    );
    await assert.rejects(crashWorker(p, { pid: 1 }), /not one of this pool/);
    await assert.rejects(crashWorker({ stats: () => ({}) }), TypeError);
  });

  test("failNextStart() fails starts as a worker dying before ready: retried within maxRetries, a WorkerStartError beyond", async () => {
    await using p = pool<typeof behaviour>(worker, {
      ...captureLog(),
      max: 1,
      maxRetries: 1,
    });
    failNextStart(p, 1);
    assert.equal(await p.add(1, 2), 3, "one failure: the retry starts it");
    await crashWorker(p);
    failNextStart(p, 2);
    const error = await rejection(p.add(1, 1), WorkerStartError);
    assert.equal(error.failure, "retries");
    assert.match(error.message, /failNextStart/);
    assert.equal(await p.add(2, 2), 4, "the next start works again");

    await using s = await session<typeof behaviour>(worker, {
      ...captureLog(),
      maxRetries: 0,
    });
    failNextStart(s);
    await rejection(s.restart(), WorkerStartError);
    assert.throws(() => failNextStart(s, -1), RangeError);
  });

  test("delayAnswers() holds back answers so deadlines pass; 0 and clearFaults() end it", async () => {
    await using s = await session<typeof behaviour>(worker, captureLog());
    delayAnswers(s, 400);
    const error = await rejection(
      s.call("add", [1, 2], { timeoutMs: 100 }),
      WorkerTimeoutError,
    );
    assert.equal(error.op, "add");
    const started = Date.now();
    assert.equal(await s.add(2, 3), 5);
    assert.ok(Date.now() - started >= 350, "the answer came late");
    delayAnswers(s, 0);
    assert.equal(await s.call("add", [1, 1], { timeoutMs: 5_000 }), 2);
    delayAnswers(s, 300);
    clearFaults(s);
    assert.equal(await s.call("add", [3, 3], { timeoutMs: 200 }), 6);
    assert.throws(() => delayAnswers(s, -1), RangeError);
    assert.throws(() => delayAnswers({ stats: () => ({}) }, 1), TypeError);
  });
});
