// A worker's start never holds the parent's event loop long, the first
// start of a process included (issue 23 item 4): its synchronous work is
// cut into steps run in slices (src/runtime/turns.ts), the built-ins it
// uses load one per turn, and its code is imported in parts. These tests
// assert the mechanism; the bench row "first-start stall" has the number.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  nextTurn,
  runSteps,
  runStepsYielding,
  SLICE_MS,
  type Steps,
} from "../../src/runtime/turns.ts";
import {
  buildWorkerCommand,
  buildWorkerCommandSteps,
  buildWorkerCommandYielding,
} from "../../src/runtime/launch/command.ts";
import type { WorkerCommandInput } from "../../src/runtime/launch/types.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { detect } from "../../src/runtime/detect.ts";
import { fixture } from "../_helpers/files.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsSandbox } from "../_helpers/tools.ts";

/** Busy for `ms` (a step of synchronous work). */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // Working.
  }
}

function* work(steps: number, msEach: number): Steps<number> {
  for (let i = 0; i < steps; i++) {
    busy(msEach);
    yield;
  }
  return steps * 10;
}

/** Counts the event loop's turns while `run` runs. */
async function turnsDuring(run: () => Promise<unknown>): Promise<number> {
  // An immediate and a zero timeout that re-arm themselves: a turn of
  // either kind is seen, and neither takes part in nextTurn()'s choice.
  let turns = 0;
  let done = false;
  const immediate = (): void => {
    if (done) return;
    turns++;
    setImmediate(immediate);
  };
  const timeout = (): void => {
    if (done) return;
    turns++;
    setTimeout(timeout, 0);
  };
  setImmediate(immediate);
  setTimeout(timeout, 0);
  try {
    await run();
  } finally {
    done = true;
  }
  return turns;
}

/** Runs turns_parent.ts in a fresh process of this runtime: its report. */
function freshParentReport(
  ...args: string[]
): { turns?: number; loaded?: string[] } {
  const script = fixture("start/turns_parent.ts").pathname;
  const out = execFileSync(
    process.execPath,
    RUNTIME === "bun" ? [script, ...args] : [
      "run",
      "-A",
      "--quiet",
      script,
      ...args,
    ],
    {
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1" },
      timeout: 120_000,
    },
  );
  return JSON.parse(out.trim().split("\n").at(-1) ?? "");
}

/** The turns a fresh parent's piece of a first start gave the loop. */
function freshParent(
  piece: "builtins" | "start-code" | "prepare-spawn" | "prepare-command",
): number {
  return freshParentReport(piece).turns ?? -1;
}

describe("runStepsYielding()", () => {
  test("runStepsYielding() gives the loop a turn between slow steps and none between fast ones", async () => {
    // Each step longer than a slice: a turn after each.
    let result = 0;
    const slow = await turnsDuring(async () => {
      result = await runStepsYielding(work(5, SLICE_MS + 1));
    });
    assert.equal(result, 50);
    assert.ok(slow >= 4, `${slow} turns between 5 slow steps`);
    // Fast steps: the work ends without waiting for the loop (a step
    // descheduled past a slice on a loaded machine may give one turn; one
    // per step would be 50).
    await nextTurn();
    const fast = await turnsDuring(() => runStepsYielding(work(50, 0)));
    assert.ok(fast <= 2, `${fast} turns between 50 fast steps`);
    assert.equal(runSteps(work(3, 0)), 30);
  });

  test("nextTurn() lets the loop read a pipe's data within a few turns", async () => {
    // A start's turns must not hold back the answers of the parent's other
    // workers: on Deno a chain of immediates read a pipe only after 62 to
    // 245 of them (a pool's paced p99 doubled), a zero timeout after one.
    for (let round = 0; round < 3; round++) {
      const child = spawn("/bin/sh", ["-c", "echo ready"], {
        stdio: ["ignore", "pipe", "ignore"],
      });
      let seen = false;
      child.stdout.on("data", () => seen = true);
      // Its output is in the pipe once it has exited.
      await new Promise((resolve) => child.on("exit", resolve));
      let turns = 0;
      while (!seen && turns < 200) {
        await nextTurn();
        turns++;
      }
      assert.ok(turns <= 8, `the data was read after ${turns} turns`);
    }
  });

  test("runStepsYielding() and runSteps() reject with what a step throws", async () => {
    function* failing(): Steps<number> {
      yield;
      throw new RangeError("step two failed");
    }
    await assert.rejects(runStepsYielding(failing()), /step two failed/);
    assert.throws(() => runSteps(failing()), /step two failed/);
  });
});

describe("a worker's first start, in slices", () => {
  test(
    "a sandboxed worker's command build yields between its parts and gives the same command either way",
    needsSandbox(),
    async () => {
      const scratch = realpathSync(
        mkdtempSync(join(tmpdir(), "airlock-turns-")),
      );
      try {
        const input: WorkerCommandInput = {
          moduleUrl: fixture("basic_worker.ts"),
          label: "basic_worker.ts",
          runtime: RUNTIME,
          permissions: resolvePermissions(undefined, scratch),
          sandbox: "os",
          env: {},
          cwd: scratch,
          config: undefined,
          command: undefined,
          launcher: undefined,
        };
        const adapter = detect();
        const steps = buildWorkerCommandSteps(input, adapter, "read-only");
        let yields = 0;
        let step = steps.next();
        for (; !step.done; step = steps.next()) yields++;
        const stepped = step.value;
        const whole = buildWorkerCommand(input, adapter);
        const sliced = await buildWorkerCommandYielding(input, adapter);
        try {
          // Lookups, the inner command, the confinement's parts, the
          // limits, each wrapper: at least one turn between each.
          assert.ok(yields >= 8, `${yields} yields`);
          assert.ok(stepped.sandboxes.length > 0, stepped.wrappers.join());
          assert.deepEqual(stepped.spawn, whole.spawn);
          assert.deepEqual(sliced.spawn, whole.spawn);
          assert.deepEqual(sliced.wrappers, whole.wrappers);
        } finally {
          for (const command of [stepped, whole, sliced]) {
            command.limits?.release();
            command.network?.close();
          }
        }
      } finally {
        rmSync(scratch, { recursive: true, force: true });
      }
    },
  );

  test("a fresh parent loads the start's built-ins one per turn", () => {
    // fs, path, url, os, buffer, diagnostics_channel: a turn after each
    // (a plain first use loads them all in the turn that needs them).
    const turns = freshParent("builtins");
    assert.ok(turns >= 5, `${turns} turns`);
  });

  test("oneShot() validates its options without loading node:fs, node:path, node:url or node:os", () => {
    // Their first load is Node compatibility's JavaScript run in one block
    // (node:fs about 10 ms on Deno, 3 to 20 ms on Bun): the start loads
    // them one per turn. The module's check is the runtime's own stat.
    const { loaded } = freshParentReport(
      "factory",
      fixture("basic_worker.ts").pathname,
    );
    assert.ok(Array.isArray(loaded), JSON.stringify(loaded));
    const refused = ["node:fs", "node:path", "node:url", "node:os"];
    assert.deepEqual(loaded.filter((id) => refused.includes(id)), []);
  });

  test("a fresh Deno parent loads what a sandboxed worker's spawn loads, one part per turn, before it", () => {
    // Deno spawns a worker that reads the native step on descriptor 3
    // through node:child_process: its first load (node:dns, node:net,
    // node:child_process) would fall inside the spawn, about 10 ms in one
    // block. Bun spawns it with its own API: nothing to load.
    const turns = freshParent("prepare-spawn");
    if (RUNTIME === "deno") assert.ok(turns >= 2, `${turns} turns`);
    else assert.ok(turns <= 1, `${turns} turns`);
  });

  test("a fresh Deno parent loads Deno.Command in a turn before its first spawn through it", () => {
    // Its first read loads Deno's process module (10 to 30 ms): the pid
    // namespace holder's spawn, an unsandboxed worker's.
    const turns = freshParent("prepare-command");
    if (RUNTIME === "deno") assert.ok(turns >= 1, `${turns} turns`);
    else assert.ok(turns <= 1, `${turns} turns`);
  });

  test("a fresh parent imports the start code in parts, a turn after each", () => {
    // 14 parts, then the start code itself: the loop has a turn after each
    // part's import (counted only when a part ended since the last one, as
    // a module's load may turn the loop on I/O many times); one import of
    // the whole graph evaluates it in one block.
    const turns = freshParent("start-code");
    assert.ok(turns >= 14, `${turns} turns`);
  });
});
