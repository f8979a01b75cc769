/**
 * Child processes of the test process, and the check that none outlives
 * its file.
 *
 * @module
 */

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";
import { assertNoWorkers, liveWorkers } from "../../testing.ts";
import "./deno_dir.ts";
import { pidNamespaceHolders } from "../../src/runtime/sandbox/pid_namespace.ts";

/**
 * Whether a process is alive (and not a zombie).
 *
 * @param pid The process.
 * @returns Whether it runs.
 */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * The live child processes of this test process.
 *
 * @returns Their pids and command lines.
 */
export function liveChildren(): { pid: number; cmdline: string }[] {
  const own = process.pid;
  // The holder of the pid namespace sandboxed workers share is no worker:
  // it ends a second after the last one (checkNoLeaks() waits for it).
  const holders = new Set(pidNamespaceHolders());
  const found: { pid: number; cmdline: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) !== own || holders.has(Number(entry))) continue;
      if (fields[0] === "Z" || fields[0] === "X") continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8")
        .split("\0").join(" ").slice(0, 200);
      found.push({ pid: Number(entry), cmdline });
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/**
 * Fails the file if any child process is still alive once its tests are done
 * (after a short grace for exits in progress), or airlock still counts a
 * worker as live (the test kit's `assertNoWorkers()`), and kills the
 * survivors.
 *
 * The check runs as a test registered after the file's own tests (from a
 * microtask, once the module body has registered them): Deno ignores a
 * failing top-level `after()` hook. The same check in `after()` remains for
 * what a file with top-level `await` registers after that test.
 */
export function checkNoLeaks(): void {
  const check = async () => {
    const end = Date.now() + 3_000;
    let left = liveChildren();
    while (
      (left.length > 0 || liveWorkers().length > 0 ||
        pidNamespaceHolders().length > 0) && Date.now() < end
    ) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      left = liveChildren();
    }
    const holders = pidNamespaceHolders();
    for (const child of [...left, ...holders.map((pid) => ({ pid }))]) {
      try {
        process.kill(child.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    assert.deepEqual(
      left,
      [],
      "processes outlived the tests that spawned them",
    );
    assert.deepEqual(
      holders,
      [],
      "the pid namespace holder outlived the workers in its namespace",
    );
    assertNoWorkers();
  };
  queueMicrotask(() =>
    test("no process or worker outlives the tests of this file", check)
  );
  after(check);
}
