// Attack class: programs a worker may execute (issue 24 items 4 and 6). On
// Bun, `run: ["ls"]` let a worker start /bin/sh and python3: the Landlock
// ruleset gave execute on all of /usr, /bin and /sbin for any name, and
// bubblewrap mounted them. A Bun worker granted nothing could execute
// programs in the library directories (/usr/lib/git-core/git). Now each
// name is resolved on the worker's PATH at start, and only those files (and
// their interpreters) are executable; the library directories are readable,
// not executable (but for the ELF interpreter: `ld.so` can still run a
// readable ELF, see docs/permissions.md). And a Deno worker with
// `run: ["ls"]` and no PATH in its env starts (0.2: "no path to search").
// Runs with bubblewrap and Landlock, and (second CI pass) with Landlock alone.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, existsSync, realpathSync } from "node:fs";
import { PermissionError, session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { sandboxSkip } from "./_sandbox.ts";
import { NATIVE_PRELUDE } from "./_native.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const SKIP = sandboxSkip();

/** Runs a program; "ran" when it started and exited 0. */
const SPAWN = `
const [program, args] = arg;
const result = cp.spawnSync(program, args, { encoding: "utf8" });
if (result.error) return result.error.code ?? String(result.error);
return result.status === 0 ? "ran" : "status " + result.status;`;

/** Runs a shell command through libc's system() (the FFI): its exit code. */
const SYSTEM = `${NATIVE_PRELUDE}
const status = sys("system", cstr(arg)).result;
return status < 0 ? "failed" : (status >> 8) & 0xff;`;

const PYTHON = ["/usr/bin/python3", "/bin/python3"].find((path) =>
  existsSync(path)
);
const GIT = "/usr/lib/git-core/git";

describe("program grants", { skip: SKIP }, () => {
  test(`a ${RUNTIME} worker granted run: ["ls"] runs ls and nothing else`, async () => {
    await using s = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      // Deno's flags refuse the others already: native code through ffi
      // (libc's system() starts /bin/sh) is what the sandbox must stop.
      permissions: RUNTIME === "deno"
        ? { run: ["ls"], ffi: true }
        : { run: ["ls"] },
      env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
    });
    assert.deepEqual(await s.run(SPAWN, ["ls", ["--version"]]), {
      ok: true,
      value: "ran",
    });
    if (RUNTIME === "bun") {
      for (
        const [program, args] of [
          ["/bin/sh", ["-c", "exit 0"]],
          ["sh", ["-c", "exit 0"]],
          ...(PYTHON ? [[PYTHON, ["-c", "pass"]]] : []),
          ...(existsSync(GIT) ? [[GIT, ["--version"]]] : []),
        ] as [string, string[]][]
      ) {
        const outcome = await s.run(SPAWN, [program, args]);
        assert.notDeepEqual(
          outcome,
          { ok: true, value: "ran" },
          `${program} ran`,
        );
      }
    } else {
      const outcome = await s.run(SYSTEM, "exit 7");
      assert.ok(outcome.ok, JSON.stringify(outcome));
      assert.notEqual(outcome.value, 7, "/bin/sh ran");
    }
  });

  test(
    `a bun worker granted nothing cannot execute a program in the library directories`,
    {
      skip: RUNTIME !== "bun" || !existsSync(GIT)
        ? "bun only, with git installed"
        : undefined,
    },
    async () => {
      await using s = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "bun",
      });
      const outcome = await s.run(SPAWN, [GIT, ["--version"]]);
      assert.notDeepEqual(outcome, { ok: true, value: "ran" });
    },
  );

  test(`a ${RUNTIME} worker granted run: ["ls"] with no PATH in its env starts and runs ls`, async () => {
    await using s = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: { run: ["ls"] },
    });
    assert.deepEqual(await s.run(SPAWN, ["ls", ["--version"]]), {
      ok: true,
      value: "ran",
    });
  });

  test("a command whose program lies where a worker may write is refused", async () => {
    using dir = scratchDir("planted-command");
    const root = realpathSync(dir.path);
    copyFileSync("/bin/true", `${root}/tool`);
    await using writer = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: { write: [root] },
    });
    assert.ok((writer.pid ?? 0) > 0);
    const error = await session(worker, {
      ...captureLog(),
      command: [`${root}/tool`],
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof PermissionError, String(error));
    assert.match(error.message, /could have planted it/);
  });

  test(`a ${RUNTIME} worker granted run on a path where another worker may write is refused`, async () => {
    using dir = scratchDir("planted-run");
    const root = realpathSync(dir.path);
    copyFileSync("/bin/true", `${root}/tool`);
    await using writer = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: { write: [root] },
    });
    assert.ok((writer.pid ?? 0) > 0);
    const error = await session(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: { run: [`${root}/tool`] },
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof PermissionError, String(error));
    assert.match(error.message, /could have planted it/);
  });
});
