// Attack class: a worker signals processes outside itself (its parent,
// other workers, every process of the user with kill(-1)), and a worker
// lies about its pid. Sandboxed workers run in their own pid namespace; the
// parent takes the worker's real pid from the process tree, never from the
// worker's hello.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, realpathSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { type PermissionsOption, session } from "../../mod.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { bwrapSkip, HOSTILE } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";

checkNoLeaks();

const SKIP = bwrapSkip();
// Deno needs a run grant for process.kill: the worst case of the report.
const PERMISSIONS: PermissionsOption = RUNTIME === "deno" ? { run: true } : {};

/** The pids of a process in each pid namespace, outermost first (NSpid). */
function nsPids(pid: number): number[] {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const line = /^NSpid:\s+(.+)$/m.exec(status)?.[1] ?? "";
  return line.trim().split(/\s+/).map(Number);
}

describe("pid namespace", () => {
  test(
    "a sandboxed worker cannot see or signal its parent, other workers or every process",
    {
      skip: SKIP,
    },
    async () => {
      await using a = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      await using b = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      assert.deepEqual(await a.signal(process.pid, 0), {
        ok: false,
        error: "ESRCH",
      }, "the parent");
      assert.deepEqual(await a.signal(b.pid ?? 0, 0), {
        ok: false,
        error: "ESRCH",
      }, "another worker");
      assert.deepEqual(await a.signal(-1, 0), {
        ok: false,
        error: "ESRCH",
      }, "kill(-1): every process it could signal");
      assert.equal(
        (await a.signal(await a.ownPid(), 0)).ok,
        true,
        "itself",
      );
    },
  );

  test(
    "session pid and stats().pid are the worker's real host pid, not the one it reports",
    {
      skip: SKIP,
    },
    async () => {
      await using s = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      const inside = await s.ownPid();
      assert.ok(s.pid !== undefined);
      assert.notEqual(s.pid, inside, "the pid inside the namespace");
      assert.equal(s.stats().pid, s.pid);
      const pids = nsPids(s.pid);
      assert.equal(pids[0], s.pid);
      assert.equal(pids.at(-1), inside, "the same process, seen from inside");
      const exe = realpathSync(`/proc/${s.pid}/exe`);
      assert.match(exe, RUNTIME === "deno" ? /deno/ : /bun/);
      assert.ok(
        (s.stats().rssBytes ?? 0) > 10 * 1024 * 1024,
        "the runtime's memory",
      );
    },
  );

  test("a forged hello pid is not believed", {
    skip: process.platform !== "linux" && "reads /proc",
  }, async () => {
    const program = fileURLToPath(
      new URL("../fixtures/security/forged_hello_command.ts", import.meta.url),
    );
    const runtime = process.execPath;
    await using s = await session(HOSTILE, {
      // Unconfined, as a command was before commands were sandboxed: Deno
      // as a command needs its cache directory.
      permissions: "all",
      command: RUNTIME === "deno"
        ? [runtime, "run", "-A", "--quiet", program]
        : [runtime, program],
    });
    assert.notEqual(s.pid, 1);
    assert.equal(s.stats().pid, s.pid);
    assert.equal(realpathSync(`/proc/${s.pid}/exe`), realpathSync(runtime));
  });
});
