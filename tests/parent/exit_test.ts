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
    child.stdout.on("data", (chunk) => out += chunk);
    child.on("error", reject);
    child.on("close", (code) => {
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
    "a Deno parent that ends without closing exits at once and reaps its idle workers",
    {
      skip: RUNTIME === "bun"
        ? "Bun keeps a process with open child pipes alive: close sessions or call process.exit"
        : false,
    },
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
