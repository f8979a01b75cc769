// oneShot({ spares }): processes started and imported ahead of calls, setup
// at call time, one call each, stale spares discarded, close() stops them.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import process from "node:process";
import { oneShot, SessionClosedError, WorkerStartError } from "../../mod.ts";
import { liveWorkers } from "../../testing.ts";
import type spareWorker from "../fixtures/spare_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { rejection, until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("spare_worker.ts");

/** The ids of the processes that finished importing the worker, in order. */
function imported(log: string): number[] {
  try {
    return readFileSync(log, "utf8").split("\n").filter(Boolean)
      .map((line) => Number(line.split(" ")[1]));
  } catch {
    return [];
  }
}

function options(dir: { path: string; join(...parts: string[]): string }) {
  const log = dir.join("imports");
  return {
    log,
    options: {
      ...captureLog(),
      env: { SPARE_LOG: log },
      permissions: { write: [dir.path], env: true as const },
    },
  };
}

describe("oneShot() spares", needsWorkers(), () => {
  test("oneShot() with spares runs a call in a process imported ahead, setup at call time, and starts a new spare", async () => {
    using dir = scratchDir("spares");
    const { log, options: base } = options(dir);
    await using run = oneShot<typeof spareWorker>(worker, {
      ...base,
      spares: 1,
      setup: [["open"]],
    });
    await until(() => imported(log).length === 1, 60_000, "the spare imported");
    const [spare] = imported(log);
    const calledAt = Date.now();
    const first = await run.times();
    assert.equal(first.id, spare, "the call ran in the spare");
    assert.ok(first.importedAt <= calledAt, "imported before the call");
    assert.ok(
      first.openedAt !== undefined && first.openedAt >= calledAt,
      "setup ran when the call came",
    );
    await until(() => imported(log).length === 2, 60_000, "a new spare");
    const second = await run.times();
    assert.equal(
      second.id,
      imported(log)[1],
      "the next call takes the new spare",
    );
    assert.notEqual(second.id, first.id, "one call per process");
  });

  test("oneShot() discards a spare whose watched path changed", async () => {
    using dir = scratchDir("spares");
    const { log, options: base } = options(dir);
    const watched = dir.join("state");
    writeFileSync(watched, "one");
    await using run = oneShot<typeof spareWorker>(worker, {
      ...base,
      spares: 1,
      watch: watched,
    });
    await until(() => imported(log).length === 1, 60_000, "the spare imported");
    const [stale] = imported(log);
    // Replaced: a new file (new inode) where the old one was.
    rmSync(watched);
    writeFileSync(watched, "two");
    const calledAt = Date.now();
    const result = await run.times();
    assert.notEqual(result.id, stale, "the stale spare was not used");
    assert.ok(result.importedAt >= calledAt, "imported after the change");
  });

  test("oneShot() close() stops the spares, waits for calls made, and refuses new calls", async () => {
    using dir = scratchDir("spares");
    const { log, options: base } = options(dir);
    const run = oneShot<typeof spareWorker>(worker, { ...base, spares: 2 });
    await until(() => imported(log).length === 2, 60_000, "two spares");
    const pending = run.times();
    await run.close();
    assert.equal(typeof (await pending).id, "number", "a call made finished");
    assert.deepEqual(liveWorkers(), [], "no process is left");
    const refused = await rejection(run.times(), SessionClosedError);
    assert.equal(refused.kind, "oneShot");
    assert.equal(refused.op, "times");
    await run.close(); // idempotent
  });

  test("oneShot() with a spare reports a failing setup as a start error", async () => {
    await using run = oneShot<typeof spareWorker>(worker, {
      ...captureLog(),
      spares: 1,
      setup: [["fail"]],
    });
    const error = await rejection(run.times(), WorkerStartError);
    assert.equal(error.failure, "setup");
    assert.match(error.message, /setup refused/);
  });

  test("oneShot() spares do not keep the parent alive, and end with it", async () => {
    const script = fixture("spare_parent.ts").pathname;
    const argv = RUNTIME === "deno" ? ["run", "-A", script] : [script];
    const { out, code } = await new Promise<{ out: string; code: number }>(
      (resolve, reject) => {
        const child = spawn(process.execPath, argv, {
          stdio: ["ignore", "pipe", "inherit"],
        });
        let out = "";
        const deadline = setTimeout(() => {
          child.kill("SIGKILL");
          reject(new Error(`parent still running after 60 s: ${out}`));
        }, 60_000);
        child.stdout.on("data", (chunk) => out += chunk);
        child.on("error", reject);
        child.on("close", (code) => {
          clearTimeout(deadline);
          resolve({ out, code: code ?? -1 });
        });
      },
    );
    assert.equal(code, 0);
    const pids = JSON.parse(out.trim()) as number[];
    assert.ok(pids.length >= 1, "a spare was live when the parent ended");
    await until(
      () => pids.every((pid) => !isAlive(pid)),
      30_000,
      "the spares end with their parent",
    );
  });

  test("oneShot() refuses an invalid spares option", () => {
    assert.throws(() => oneShot(worker, { spares: -1 }), RangeError);
    assert.throws(() => oneShot(worker, { spares: 1.5 }), RangeError);
    assert.throws(
      () => oneShot(worker, { spares: "1" as unknown as number }),
      TypeError,
    );
  });
});
