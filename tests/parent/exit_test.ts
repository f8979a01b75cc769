import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import {
  checkNoLeaks,
  fixture,
  isAlive,
  needsWorkers,
  RUNTIME,
  until,
} from "../_helpers.ts";

checkNoLeaks();

/** How long the parent program may run: it ends in about a second. */
const PARENT_DEADLINE_MS = 30_000;

/**
 * Runs tests/fixtures/exiting_parent.ts; rejects (and kills it) if it is
 * still running after PARENT_DEADLINE_MS, i.e. something kept it alive.
 */
function runParent(args: string[]): Promise<{ pids: number[]; code: number }> {
  const program = process.execPath;
  const script = fixture("exiting_parent.ts").pathname;
  const argv = RUNTIME === "deno"
    ? ["run", "-A", script, ...args]
    : [script, ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(program, argv, {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    const deadline = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `parent still running after ${PARENT_DEADLINE_MS} ms (printed ${
            JSON.stringify(out)
          }): something keeps its event loop alive`,
        ),
      );
    }, PARENT_DEADLINE_MS);
    child.stdout.on("data", (chunk) => out += chunk);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(deadline);
      try {
        resolve({ pids: JSON.parse(out.trim()) as number[], code: code ?? -1 });
      } catch (error) {
        reject(new Error(`parent printed ${JSON.stringify(out)}: ${error}`));
      }
    });
  });
}

describe("parent exit", needsWorkers(), () => {
  test("process.exit() in the parent reaps every live worker", async () => {
    const { pids, code } = await runParent(["--exit"]);
    assert.equal(code, 0);
    assert.equal(pids.length, 3);
    await until(
      () => pids.every((pid) => !isAlive(pid)),
      5_000,
      "workers gone",
    );
  });

  test(
    "a parent that ends without closing exits at once and reaps its idle workers",
    async () => {
      const { pids, code } = await runParent([]);
      assert.equal(code, 0);
      await until(
        () => pids.every((pid) => !isAlive(pid)),
        5_000,
        "workers gone",
      );
    },
  );
});
