// What a failed call says about its handler (`executed`), the liveness
// check after a timeout, and `settle: "stopped"`, with real worker
// processes (issue 27).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import {
  pool,
  RemoteError,
  session,
  SessionClosedError,
  WorkerCrashedError,
  WorkerTimeoutError,
} from "../../mod.ts";
import type outcome from "../fixtures/outcome_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("outcome_worker.ts");

function lines(path: string): string[] {
  return readFileSync(path, "utf8").split("\n").filter((line) => line !== "");
}

describe("executed", () => {
  test('a thrown call is executed "yes", a running call lost with its worker "maybe"', async () => {
    await using s = await session<typeof outcome>(worker, captureLog());
    const thrown = await rejection(s.fail("boom"), RemoteError);
    assert.equal(thrown.executed, "yes");
    const running = s.delay(30_000, "x");
    const crash = await rejection(s.killSelfLater(50), WorkerCrashedError);
    assert.equal(crash.executed, "maybe");
    const lost = await rejection(running, WorkerCrashedError);
    assert.equal(lost.executed, "maybe");
    assert.match(lost.message, /its effects may have happened/);
    assert.match(lost.stack ?? "", /its effects may have happened/);
  });

  test('a timed-out call is executed "maybe"', async () => {
    await using s = await session<typeof outcome>(worker, captureLog());
    const error = await rejection(
      s.call("delay", [30_000, "x"], { timeoutMs: 100 }),
      WorkerTimeoutError,
    );
    assert.equal(error.executed, "maybe");
    assert.match(error.message, /^Call "delay" timed out.*may have happened/);
  });

  test('close({ force }) ends a queued call with "no" and a running one with "maybe"', async () => {
    await using p = pool<typeof outcome>(worker, {
      ...captureLog(),
      max: 1,
      concurrency: 1,
      pipeline: 0,
    });
    const running = p.call("delay", [30_000, "running"]);
    const queued = p.call("delay", [10, "queued"]);
    await new Promise<void>((resolve) => {
      const check = () =>
        p.stats().busy === 1 ? resolve() : setTimeout(check, 5);
      check();
    });
    assert.equal(p.stats().queued, 1);
    await p.close({ force: true });
    const ran = await rejection(running, SessionClosedError);
    const waited = await rejection(queued, SessionClosedError);
    assert.equal(ran.executed, "maybe");
    assert.equal(waited.executed, "no");
    const refused = await rejection(p.call("echo", [1]), SessionClosedError);
    assert.equal(refused.executed, "no");
  });
});

describe('settle: "stopped"', () => {
  test('an aborted write that ignores its signal rejects only after it ran ("yes"); with "now" the write lands after the rejection', async () => {
    using dir = scratchDir("settle");
    const path = dir.join("rows");
    writeFileSync(path, "");
    await using s = await session<typeof outcome>(worker, {
      ...captureLog(),
      permissions: { read: [dir.path], write: [dir.path] },
    });
    const early = await rejection(
      s.call("writeLater", [path, "now", 400], { timeoutMs: 100 }),
      WorkerTimeoutError,
    );
    assert.equal(early.executed, "maybe");
    assert.deepEqual(lines(path), [], "rejected before the write");
    // An answer between the two timeouts: not two in a row.
    assert.equal(await s.echo(0), 0);
    const stopped = await rejection(
      s.call("writeLater", [path, "stopped", 400], {
        timeoutMs: 100,
        settle: "stopped",
      }),
      WorkerTimeoutError,
    );
    assert.equal(stopped.executed, "yes");
    assert.ok(lines(path).includes("stopped"), "written before the rejection");
  });

  test('a write that outlives the cancel grace rejects once its worker is gone ("maybe"), and never lands', async () => {
    using dir = scratchDir("settle-gone");
    const path = dir.join("rows");
    writeFileSync(path, "");
    await using s = await session<typeof outcome>(worker, {
      ...captureLog(),
      cancelGraceMs: 300,
      permissions: { read: [dir.path], write: [dir.path] },
    });
    const pid = s.pid as number;
    const controller = new AbortController();
    const call = s.call("writeLater", [path, "late", 1_500], {
      signal: controller.signal,
      settle: "stopped",
    });
    setTimeout(() => controller.abort(new Error("stop")), 100);
    let error: unknown;
    await call.catch((e: unknown) => (error = e));
    assert.equal((error as Error).message, "stop");
    assert.equal(isAlive(pid), false, "the worker is gone at the rejection");
    assert.deepEqual(lines(path), []);
    // The next call runs on a fresh worker.
    assert.equal(await s.echo(1), 1);
    assert.notEqual(s.pid, pid);
  });

  test('a timed-out call that never started rejects with "no"', async () => {
    await using p = pool<typeof outcome>(worker, {
      ...captureLog(),
      max: 1,
      concurrency: 1,
      pipeline: 4,
      prewarm: 1,
    });
    // Warm the window: written ahead behind a running call.
    const first = p.call("delay", [1_000, "first"]);
    const controller = new AbortController();
    const behind = p.call("echo", ["behind"], {
      signal: controller.signal,
      settle: "stopped",
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    controller.abort(
      new WorkerTimeoutError({
        module: "m",
        op: "echo",
        timeoutMs: 1,
        elapsedMs: 1,
        phase: "call",
      }),
    );
    const error = await rejection(behind, WorkerTimeoutError);
    // Written ahead (dropped by the worker) or still queued: never run.
    assert.equal(error.executed, "no");
    assert.equal(await first, "first");
  });
});

describe("liveness check", () => {
  test("a handler stuck in synchronous code times out once and the next call runs on a fresh worker", async () => {
    await using s = await session<typeof outcome>(worker, {
      ...captureLog(),
      callTimeoutMs: 300,
    });
    const pid = s.pid;
    const started = Date.now();
    const error = await rejection(s.spinForever(), WorkerTimeoutError);
    assert.equal(error.executed, "maybe");
    assert.equal(await s.echo("next"), "next");
    assert.notEqual(s.pid, pid);
    // Well before the cancel grace (5 s) would have ended it.
    assert.ok(Date.now() - started < 4_500, `${Date.now() - started} ms`);
  });

  test("a slow async handler times out and its sibling call goes on on the same worker", async () => {
    await using s = await session<typeof outcome>(worker, captureLog());
    const pid = s.pid;
    const sibling = s.call("delay", [1_500, "sibling"], { timeoutMs: 30_000 });
    const error = await rejection(
      s.call("delay", [30_000, "slow"], { timeoutMs: 200 }),
      WorkerTimeoutError,
    );
    assert.equal(error.executed, "maybe");
    assert.equal(await sibling, "sibling");
    assert.equal(await s.echo("after"), "after");
    assert.equal(s.pid, pid);
  });

  test('a wedged pool worker\'s sibling calls fail with "maybe" (idempotent ones are retried)', async () => {
    await using p = pool<typeof outcome>(worker, {
      ...captureLog(),
      max: 1,
      concurrency: 4,
      pipeline: 0,
    });
    assert.equal(await p.echo(0), 0);
    const sibling = p.call("delay", [30_000, "sibling"], { timeoutMs: 60_000 });
    const idempotent = p.call("echo", ["retried"], { timeoutMs: 60_000 });
    const stuck = rejection(
      p.call("spinForever", [], { timeoutMs: 300 }),
      WorkerTimeoutError,
    );
    assert.equal((await stuck).executed, "maybe");
    const lost = await rejection(sibling, WorkerCrashedError);
    assert.equal(lost.executed, "maybe");
    assert.match(lost.message, /liveness check/);
    assert.equal(await idempotent, "retried");
    assert.equal(await p.echo(2), 2);
  });
});
