import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

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

/**
 * Runs tests/fixtures/signal_parent.ts, sends it `signal` once it printed
 * its worker pids, and collects the JSON lines it printed and its exit code.
 */
function signalParent(
  signal: "SIGINT" | "SIGTERM",
  args: string[] = [],
): Promise<{ lines: Record<string, unknown>[]; code: number | null }> {
  const script = fixture("signal_parent.ts").pathname;
  const argv = RUNTIME === "deno"
    ? ["run", "-A", script, ...args]
    : [script, ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    let sent = false;
    const deadline = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `parent still running after ${PARENT_DEADLINE_MS} ms (printed ${
            JSON.stringify(out)
          })`,
        ),
      );
    }, PARENT_DEADLINE_MS);
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (!sent && out.includes('"pids"')) {
        sent = true;
        // Not child.kill(): Deno then reports the exit code as null.
        process.kill(child.pid!, signal);
      }
    });
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(deadline);
      try {
        const lines = out.trim().split("\n").map((line) =>
          JSON.parse(line) as Record<string, unknown>
        );
        resolve({ lines, code });
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

  for (
    const [signal, args, how] of [
      ["SIGINT", [], "leaves its await using scopes"],
      ["SIGTERM", [], "leaves its await using scopes"],
      ["SIGINT", ["--helper"], "closes its handles through closeOnSignal()"],
      ["SIGTERM", ["--helper"], "closes its handles through closeOnSignal()"],
    ] as const
  ) {
    test(`a parent that handles ${signal} ${how}: calls drained or ended, workers gone`, async () => {
      const { lines, code } = await signalParent(signal, [...args]);
      assert.equal(code, 0, `exit code ${code}: ${JSON.stringify(lines)}`);
      const [ready, got, done] = lines;
      assert.deepEqual(got, { signal });
      const pids = ready!.pids as number[];
      assert.equal(pids.length, 2);
      // The quick call finished; the minute-long ones were ended by
      // closeTimeoutMs when the scope's disposal closed their handles.
      assert.deepEqual(done, {
        settled: ["SessionClosedError", "SessionClosedError", 3],
      });
      for (const pid of pids) assert.equal(isAlive(pid), false, `pid ${pid}`);
    });
  }
});
