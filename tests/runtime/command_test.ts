// buildWorkerCommand(): the one launch path, tested on what production
// spawns (the same function sessions, pools and oneShot call).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CHMOD_FALLBACK_FLAG } from "../../src/worker/chmod_fallback.ts";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { oneShot, session, WorkerStartError } from "../../mod.ts";
import { buildWorkerCommand } from "../../src/runtime/launch/command.ts";
import { findExecutable } from "../../src/runtime/launch/executable.ts";
import { wrapperFailure } from "../../src/runtime/launch/exit.ts";
import { isStartupVariable } from "../../src/runtime/sandbox/bwrap_environment.ts";
import type { WorkerCommandInput } from "../../src/runtime/launch/types.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { detect } from "../../src/runtime/detect.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { OTHER_RUNTIME, RUNTIME } from "../_helpers/runtime.ts";
import { needs, needsSandbox } from "../_helpers/tools.ts";

checkNoLeaks();

const adapter = detect();
const scratch = realpathSync(mkdtempSync(join(tmpdir(), "airlock-command-")));
after(() => rmSync(scratch, { recursive: true, force: true }));

function refuse(detail: string): never {
  throw new Error(detail);
}

const BWRAP = process.platform === "linux"
  ? findExecutable("bwrap", { path: process.env.PATH }, refuse)
  : undefined;

function input(overrides: Partial<WorkerCommandInput>): WorkerCommandInput {
  return {
    moduleUrl: fixture("basic_worker.ts"),
    label: "basic_worker.ts",
    runtime: RUNTIME,
    permissions: resolvePermissions(undefined, scratch),
    sandbox: "auto",
    env: {},
    cwd: scratch,
    config: undefined,
    command: undefined,
    launcher: undefined,
    ...overrides,
  };
}

describe("buildWorkerCommand()", () => {
  test(
    "buildWorkerCommand() wraps a Bun worker in bwrap with the real binary path and maps its exits",
    {
      ...needs("bwrap"),
    },
    () => {
      const command = buildWorkerCommand(
        input({ runtime: "bun", env: { DB_PASSWORD: "s3cret-value" } }),
        adapter,
      );
      assert.ok(command.wrappers.includes("bwrap"), command.wrappers.join());
      const argv = command.spawn.argv;
      assert.ok(argv.includes(BWRAP ?? ""), argv.join(" "));
      // The worker's variables reach bubblewrap through its environment
      // (held for the confine step), never on a command line that every
      // process can read in /proc/<pid>/cmdline.
      assert.ok(
        Object.values(command.spawn.env).includes("s3cret-value"),
        JSON.stringify(command.spawn.env),
      );
      assert.ok(
        argv.every((arg) => !arg.includes("s3cret-value")),
        argv.join(" "),
      );
      assert.ok(
        Object.keys(command.spawn.env).every((name) =>
          !isStartupVariable(name)
        ),
        JSON.stringify(command.spawn.env),
      );
      const inner = argv.slice(argv.lastIndexOf("--") + 1);
      const bun = inner[0] ?? "";
      assert.equal(realpathSync(bun), bun, "the runtime binary is a real path");
      assert.deepEqual(command.mapExit(137, null), {
        code: null,
        signal: "SIGKILL",
      });
      assert.deepEqual(command.mapExit(1, null), { code: 1, signal: null });
      // In bubblewrap no chmod by path is refused: the entry's chmod retry
      // (and node:fs, ~8 ms of a Bun start) is for Landlock alone.
      assert.ok(!inner.includes(CHMOD_FALLBACK_FLAG), inner.join(" "));
    },
  );

  test("buildWorkerCommand() refuses a command program that does not exist, before spawning", () => {
    for (
      const program of [
        "/usr/bin/python9",
        join(scratch, "missing"),
        "no-such-program-airlock",
      ]
    ) {
      assert.throws(
        () =>
          buildWorkerCommand(
            input({ moduleUrl: undefined, command: [program, "w.py"] }),
            adapter,
          ),
        (error: unknown) =>
          error instanceof WorkerStartError && error.failure === "spawn" &&
          error.message.includes(program),
        program,
      );
    }
  });

  test("buildWorkerCommand() refuses a script whose interpreter does not exist", () => {
    const script = join(scratch, "worker.py");
    writeFileSync(script, "#!/usr/bin/python9\nprint(1)\n");
    chmodSync(script, 0o755);
    assert.throws(
      () =>
        buildWorkerCommand(
          input({ moduleUrl: undefined, command: [script] }),
          adapter,
        ),
      (error: unknown) =>
        error instanceof WorkerStartError && error.failure === "spawn" &&
        error.message.includes("/usr/bin/python9"),
    );
  });

  test("buildWorkerCommand() leaves a launcher's command to the far side", () => {
    const command = buildWorkerCommand(
      input({
        moduleUrl: undefined,
        command: ["/usr/bin/python9", "w.py"],
        launcher: ["ssh", "far"],
      }),
      adapter,
    );
    // The command the launcher's transport is asked to start: the prefix
    // is the transport's (commandTransport), not part of the argv.
    assert.deepEqual(command.spawn.argv, ["/usr/bin/python9", "w.py"]);
    assert.equal(command.transport?.name, "ssh far");
    assert.deepEqual(command.wrappers, []);
    assert.equal(command.local, false);
    assert.equal(command.workerPid(process.pid), undefined);
  });
});

describe("starting a worker that cannot run", () => {
  test("session() with a command that does not exist fails with failure spawn at once", async () => {
    const error = await session(fixture("basic_worker.ts"), {
      command: ["/usr/bin/python9", "worker.py"],
      maxRetries: 3,
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof WorkerStartError, String(error));
    assert.equal(error.failure, "spawn");
  });

  test(
    "oneShot() of the other runtime found through node_modules/.bin runs sandboxed",
    {
      ...needsSandbox(),
    },
    async () => {
      const worker = oneShot<
        typeof import("../fixtures/basic_worker.ts").default
      >(fixture("basic_worker.ts"), { runtime: OTHER_RUNTIME, maxRetries: 0 });
      assert.equal(await worker.add(2, 3), 5);
    },
  );
});

describe("wrapper failures", () => {
  test("wrapperFailure() names the line of bubblewrap, setpriv or the Landlock step", () => {
    assert.equal(
      wrapperFailure("noise\nbwrap: execvp /x: No such file or directory\n"),
      "bwrap: execvp /x: No such file or directory",
    );
    assert.equal(
      wrapperFailure("airlock confine: landlock_restrict_self failed"),
      "airlock confine: landlock_restrict_self failed",
    );
    assert.equal(wrapperFailure("TypeError: x is not a function\n"), undefined);
  });

  test("a worker its sandbox cannot exec fails at once, never retried", {
    // Under Landlock alone a command's `#!` interpreter is granted execute
    // with the command (landlock.ts), so only bubblewrap, which mounts no
    // interpreter outside the system directories, has nothing to exec here.
    ...needs("bwrap"),
  }, async () => {
    // The script's interpreter exists on the host but is not mounted in the
    // sandbox: the exec fails inside, in the wrapper.
    const bin = join(scratch, "interp-bin");
    const app = join(scratch, "interp-app");
    mkdirSync(bin);
    mkdirSync(app);
    writeFileSync(join(bin, "interp"), "#!/bin/sh\nexit 0\n");
    chmodSync(join(bin, "interp"), 0o755);
    const script = join(app, "worker.sh");
    writeFileSync(script, `#!${join(bin, "interp")}\n`);
    chmodSync(script, 0o755);
    const started = Date.now();
    const error = await session(fixture("basic_worker.ts"), {
      command: [script],
      maxRetries: 3,
      ...captureLog(),
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof WorkerStartError, String(error));
    assert.notEqual(error.failure, "retries", error.message);
    assert.ok(
      wrapperFailure(error.stderrTail ?? "") !== undefined,
      error.stderrTail,
    );
    // No backoff of three retries (50 + 200 + 800 ms) was spent.
    assert.ok(Date.now() - started < 30_000);
  });
});
