// Starts that cannot succeed are tried once, starts that may succeed are
// retried, and a descriptor limit does not fail a pool's whole queue
// (issue 27, items 3 and 4), with real processes.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  AirlockError,
  oneShot,
  pool,
  session,
  WorkerStartError,
} from "../../mod.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs, skipUnless } from "../_helpers/tools.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const WORKER_TS = fileURLToPath(new URL("../../worker.ts", import.meta.url));

/** A module that says it is being imported on stderr, then fails with `tail`. */
function failingModule(dir: string, name: string, tail: string): string {
  const path = `${dir}/${name}`;
  writeFileSync(
    path,
    `import { defineWorker } from ${JSON.stringify(WORKER_TS)};\n` +
      `// deno-lint-ignore no-console\nconsole.error("attempt of ${name}");\n` +
      `${tail}\nexport default defineWorker({});\n`,
  );
  return path;
}

function attempts(lines: readonly string[], name: string): number {
  return lines.filter((line) => line.includes(`attempt of ${name}`)).length;
}

describe("starts that cannot succeed", () => {
  test("a missing module file is a WorkerStartError, in every mode, before any spawn", async () => {
    const missing = "./no/such/outcome_worker.ts";
    const error = await rejection(session(missing), WorkerStartError);
    assert.ok(error instanceof AirlockError);
    assert.equal(error.failure, "import");
    assert.match(error.message, /outcome_worker\.ts" does not exist/);
    assert.throws(() => pool(missing), WorkerStartError);
    assert.throws(() => oneShot(missing), WorkerStartError);
  });

  test("a syntax error and an import that throws are tried once", async () => {
    using dir = scratchDir("start-once");
    writeFileSync(dir.join("broken.ts"), "export const x = {{{;\n");
    const cases = [
      failingModule(dir.path, "syntax.ts", 'await import("./broken.ts");'),
      failingModule(dir.path, "throws.ts", 'throw new Error("no binding");'),
    ];
    for (const module of cases) {
      const log = captureLog();
      const error = await rejection(
        session(module, { ...log, maxRetries: 3 }),
        WorkerStartError,
      );
      assert.equal(error.failure, "import", error.message);
      const name = module.slice(module.lastIndexOf("/") + 1);
      assert.equal(attempts(log.lines, name), 1, log.lines.join("\n"));
    }
  });

  test("a command whose script does not exist is tried once; a start that crashes is retried", async () => {
    const log = captureLog();
    const error = await rejection(
      session(fixture("basic_worker.ts"), {
        ...log,
        command: [
          "/bin/sh",
          "-c",
          'echo "attempt of script" >&2; exec /bin/sh /no/such/worker.sh',
        ],
        permissions: "all",
        maxRetries: 3,
      }),
      WorkerStartError,
    );
    assert.equal(error.failure, "exited", error.message);
    assert.equal(attempts(log.lines, "script"), 1, log.lines.join("\n"));

    const crashing = captureLog();
    const crash = await rejection(
      session(fixture("basic_worker.ts"), {
        ...crashing,
        command: ["/bin/sh", "-c", 'echo "attempt of crash" >&2; kill -9 $$'],
        permissions: "all",
        maxRetries: 2,
      }),
      WorkerStartError,
    );
    assert.equal(crash.failure, "retries", crash.message);
    assert.equal(attempts(crashing.lines, "crash"), 3);
  });
});

describe("a descriptor limit", () => {
  // Enough descriptors for a few workers, not for 8 (measured: 4 fit).
  const limit = RUNTIME === "deno" ? 44 : 30;
  test(
    `a pool of 8 under prlimit --nofile=${limit} serves a burst of 300 calls with the workers that fit`,
    skipUnless(
      needs("setpriv").skip ??
        (hasPrlimit() ? undefined : "prlimit (util-linux) is not installed"),
    ),
    () => {
      const script = fileURLToPath(fixture("descriptor_parent.ts"));
      const argv = RUNTIME === "deno"
        ? [process.execPath, "run", "-A", "--quiet", script, "300"]
        : [process.execPath, script, "300"];
      const out = execFileSync(
        "prlimit",
        [`--nofile=${limit}:${limit}`, "--", ...argv],
        { encoding: "utf8", timeout: 120_000 },
      );
      const result = JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as {
        ok: number;
        workers: number;
        errors: string[];
      };
      assert.deepEqual(result.errors, []);
      assert.equal(result.ok, 300);
      assert.ok(result.workers >= 1);
      assert.ok(
        result.workers < 8,
        `all 8 workers fit under ${limit} descriptors: the limit did not bite`,
      );
    },
  );
});

function hasPrlimit(): boolean {
  try {
    execFileSync("prlimit", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
