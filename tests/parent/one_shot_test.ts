import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  oneShot,
  RemoteError,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
import { liveWorkers } from "../../testing.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import type sqlite from "../fixtures/sqlite_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive, liveChildren } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

function readLines(path: string): string[] {
  try {
    return readFileSync(path, "utf8").split("\n").filter(Boolean);
  } catch {
    return [];
  }
}

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

describe("oneShot()", needsWorkers(), () => {
  test("oneShot() runs each call in a fresh process that is gone when the call settles", async () => {
    const run = oneShot<typeof behaviour>(worker, captureLog());
    assert.equal(liveChildren().length, 0, "nothing spawned before a call");
    const first = await run.whoami();
    assert.deepEqual(liveChildren(), [], "the first process is gone");
    const second = await run.call("whoami", []);
    assert.deepEqual(liveChildren(), [], "the second process is gone");
    assert.notEqual(first, second);
    assert.equal(await run.add(2, 2), 4);
  });

  test("oneShot() runs concurrent calls in parallel processes", async () => {
    const dir = mkdtempSync(join(tmpdir(), "airlock-oneshot-"));
    try {
      const log = join(dir, "log");
      const run = oneShot<typeof behaviour>(worker, {
        ...captureLog(),
        permissions: { write: [dir] },
        cancelGraceMs: 50,
      });
      const controller = new AbortController();
      // Each call appends its line, then waits a minute: both lines appear
      // only if both calls run at the same time, in two processes.
      const calls = ["a", "b"].map((line) =>
        run.call("appendThenWait", [log, line, 60_000], {
          signal: controller.signal,
        }).then(() => undefined, (e) => e)
      );
      await until(
        () => readLines(log).length === 2,
        30_000,
        "both calls running at once",
      );
      assert.deepEqual(readLines(log).sort(), ["a", "b"]);
      controller.abort(new Error("done"));
      for (const error of await Promise.all(calls)) {
        assert.equal((error as Error).message, "done");
      }
      await until(() => liveChildren().length === 0, 30_000, "processes gone");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("oneShot() a worker exits once its call is answered, without waiting for the parent to read the answer", async () => {
    const dir = mkdtempSync(join(tmpdir(), "airlock-oneshot-"));
    try {
      const log = join(dir, "log");
      const run = oneShot<typeof behaviour>(worker, {
        ...captureLog(),
        permissions: { write: [dir] },
      });
      const answer = run.appendThenWait(log, "started", 500);
      await until(() => readLines(log).length === 1, 30_000, "call started");
      const [live] = liveWorkers();
      assert.ok(live, "the call's process is live");
      // From here this parent's event loop is blocked: it cannot read the
      // answer, let alone ask the worker to exit after it. The shutdown
      // went with the call.
      const pause = new Int32Array(new SharedArrayBuffer(4));
      const deadline = Date.now() + 30_000;
      while (isAlive(live.pid) && Date.now() < deadline) {
        Atomics.wait(pause, 0, 0, 5);
      }
      assert.equal(isAlive(live.pid), false, "it exited by itself");
      assert.equal(await answer, "started", "its answer still counts");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("oneShot() replays setup before the call", async () => {
    const run = oneShot<typeof behaviour>(worker, {
      ...captureLog(),
      setup: [["increment"], ["increment"]],
    });
    assert.equal(await run.increment(), 3);
    assert.equal(await run.increment(), 3, "a fresh process each time");
  });

  test("oneShot() every call sees the disk as it is now, and leaves no lock behind", async () => {
    const dir = mkdtempSync(join(tmpdir(), "airlock-oneshot-"));
    try {
      const path = join(dir, "app.db");
      const run = oneShot<typeof sqlite>(fixture("sqlite_worker.ts"), {
        ...captureLog(),
        permissions: { read: [dir], write: [dir] },
        setup: [["open", path]],
      });
      await run.exec("create table t(x)");
      await run.lock();
      await run.exec("insert into t values (1)");
      assert.deepEqual(await run.all("select x from t"), [{ x: 1 }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("oneShot() gives the same typed errors as a session", async () => {
    const run = oneShot<typeof behaviour>(worker, {
      ...captureLog(),
      cancelGraceMs: 100,
    });
    assert.ok((await run.throwCustom().catch((e) => e)) instanceof RemoteError);
    const crash = await run.killSelf("SIGKILL").catch((e) => e);
    assert.ok(crash instanceof WorkerCrashedError);
    assert.equal(crash.signal, "SIGKILL");
    const timeout = await run.call("hang", [], { timeoutMs: 100 }).catch((e) =>
      e
    );
    assert.ok(timeout instanceof WorkerTimeoutError);
    const controller = new AbortController();
    const cancelled = run.call("hang", [], { signal: controller.signal });
    setTimeout(() => controller.abort(new Error("stop")), 50);
    assert.equal(
      (await cancelled.catch((e: Error) => e) as Error).message,
      "stop",
    );
    const start = await oneShot(
      fixture("import_throws_worker.ts"),
      captureLog(),
    )
      .call("x", []).catch((e) => e);
    assert.ok(start instanceof WorkerStartError);
    assert.equal(start.failure, "import");
  });

  test("oneShot() refuses invalid options at once, before any call", () => {
    assert.throws(() => oneShot(worker, { callTimeoutMs: -5 }), RangeError);
    assert.throws(() => oneShot("./missing_worker.ts"), WorkerStartError);
  });
});
